// The collectives beside all-reduce, all-gather, broadcast and barrier,
// and all-reduce's other ops and dtypes: every op on every plan (threads,
// shm, tcp, tiered), N = 2, 3 and 4, counts above a step's chunk, uneven
// and zero counts, against references computed here; every rank's results
// bit for bit the same; ranks that disagree on a call named.
//
// The inputs are exact in every dtype (small multiples of 1/32, products
// of 1/2, 1, 2 and -1, integers that wrap alike in any order), so the
// expected results do not depend on the order a plan combines in.
#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "group/reduce.hpp"
#include "support/group_util.hpp"

using namespace ds4tp;
using namespace ds4tp::test;
using group::Dtype;
using group::Op;

namespace {

constexpr int kDtypes[] = {DS4TP_DTYPE_F32, DS4TP_DTYPE_F16, DS4TP_DTYPE_BF16, DS4TP_DTYPE_F64,
                           DS4TP_DTYPE_I32, DS4TP_DTYPE_I64, DS4TP_DTYPE_U8};
constexpr int kOps[] = {DS4TP_OP_SUM, DS4TP_OP_MAX, DS4TP_OP_MIN, DS4TP_OP_PROD};
// With a 4 KiB chunk: one element, a few, and several steps of pieces.
const std::vector<uint64_t> kCounts = {1, 7, 1500};

bool is_float(int t) { return t <= DS4TP_DTYPE_F64; }

// Rank r's element j for (dtype, op), as a double (exact in every dtype).
double value(int t, int op, int r, uint64_t j) {
  const uint64_t h = (uint64_t(r) * 2654435761u + j * 40503u + uint64_t(t) * 97u) % 1000003u;
  if (!is_float(t)) return double(int64_t(h % 200) - 100);
  if (op == DS4TP_OP_PROD) {
    static const double kFactors[] = {0.5, 1.0, 2.0, -1.0};
    return kFactors[h % 4];
  }
  return double(int64_t(h % 97) - 48) / 32.0;
}

// Stores double v as dtype t at p (integers as their two's complement).
void put(int t, double v, uint8_t *p) {
  switch (Dtype(t)) {
    case Dtype::F32: { const float f = float(v); std::memcpy(p, &f, 4); break; }
    case Dtype::F16: { const uint16_t b = group::float_to_half(float(v)); std::memcpy(p, &b, 2); break; }
    case Dtype::BF16: { const uint16_t b = group::float_to_bf16(float(v)); std::memcpy(p, &b, 2); break; }
    case Dtype::F64: std::memcpy(p, &v, 8); break;
    case Dtype::I32: { const int32_t i = int32_t(int64_t(v)); std::memcpy(p, &i, 4); break; }
    case Dtype::I64: { const int64_t i = int64_t(v); std::memcpy(p, &i, 8); break; }
    case Dtype::U8: { const uint8_t u = uint8_t(int64_t(v)); std::memcpy(p, &u, 1); break; }
  }
}

// The op over ranks 0..n-1 of element j, stored as dtype t: floats in
// double (exact for these inputs), integers as wrapping unsigned values.
void expected(int t, int op, int n, uint64_t j, uint8_t *p) {
  if (is_float(t)) {
    double acc = value(t, op, 0, j);
    for (int r = 1; r < n; r++) {
      const double x = value(t, op, r, j);
      acc = op == DS4TP_OP_SUM ? acc + x : op == DS4TP_OP_PROD ? acc * x
            : op == DS4TP_OP_MAX ? std::max(acc, x) : std::min(acc, x);
    }
    return put(t, acc, p);
  }
  const int bits = int(group::dtype_bytes(Dtype(t))) * 8;
  const uint64_t mask = bits == 64 ? ~uint64_t(0) : (uint64_t(1) << bits) - 1;
  auto as_signed = [&](uint64_t u) {  // the dtype's signed value (u8 stays unsigned)
    if (t == DS4TP_DTYPE_U8 || bits == 64) return int64_t(u);
    return int64_t(u & mask) - ((u >> (bits - 1)) & 1 ? int64_t(mask) + 1 : 0);
  };
  uint64_t acc = uint64_t(int64_t(value(t, op, 0, j))) & mask;
  for (int r = 1; r < n; r++) {
    const uint64_t x = uint64_t(int64_t(value(t, op, r, j))) & mask;
    if (op == DS4TP_OP_SUM) acc = (acc + x) & mask;
    else if (op == DS4TP_OP_PROD) acc = (acc * x) & mask;
    else if (op == DS4TP_OP_MAX) acc = as_signed(x) > as_signed(acc) ? x : acc;
    else acc = as_signed(x) < as_signed(acc) ? x : acc;
  }
  std::memcpy(p, &acc, size_t(bits / 8));  // little-endian
}

// Byte j of rank r's data for the moving collectives.
uint8_t byte_of(int r, uint64_t j) { return uint8_t((uint64_t(r) * 73 + j * 31 + j / 251) & 0xff); }

uint64_t fold(uint64_t d, const uint8_t *p, size_t len) {
  for (size_t i = 0; i < len; i++) d = (d ^ p[i]) * 1099511628211ull;
  return d;
}

#define OPS_CHECK(cond, ...)                                                                  \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      why = fmt::format(__VA_ARGS__) + fmt::format(" [{}] ({})", #cond, ds4tp_group_errmsg(g)); \
      return rc != 0 ? rc : 99;                                                               \
    }                                                                                         \
  } while (0)

// all_reduce, reduce_scatter and reduce for every dtype, op and count.
int reductions(ds4tp_group *g, int me, int n, uint64_t &digest, std::string &why) {
  int rc = 0;
  for (int t : kDtypes)
    for (int op : kOps)
      for (uint64_t count : kCounts) {
        const size_t esz = group::dtype_bytes(Dtype(t));
        std::vector<uint8_t> buf(count * esz), want(count * esz), in(count * esz * size_t(n));
        for (uint64_t j = 0; j < count; j++) {
          put(t, value(t, op, me, j), &buf[j * esz]);
          expected(t, op, n, j, &want[j * esz]);
        }
        rc = ds4tp_group_all_reduce(g, buf.data(), count, t, op);
        OPS_CHECK(rc == 0 && buf == want, "all_reduce dtype {} op {} count {}", t, op, count);
        digest = fold(digest, buf.data(), buf.size());
        // reduce_scatter: rank r's element j of segment s is value(r, s*count + j).
        for (uint64_t j = 0; j < count * uint64_t(n); j++) put(t, value(t, op, me, j), &in[j * esz]);
        std::vector<uint8_t> seg(count * esz), seg_want(count * esz);
        for (uint64_t j = 0; j < count; j++)
          expected(t, op, n, uint64_t(me) * count + j, &seg_want[j * esz]);
        rc = ds4tp_group_reduce_scatter(g, in.data(), seg.data(), count, t, op);
        OPS_CHECK(rc == 0 && seg == seg_want, "reduce_scatter dtype {} op {} count {}", t, op,
                  count);
        // In place: this rank's segment of `in` is the output.
        uint8_t *mine = in.data() + size_t(me) * count * esz;
        rc = ds4tp_group_reduce_scatter(g, in.data(), mine, count, t, op);
        OPS_CHECK(rc == 0 && std::memcmp(mine, seg_want.data(), seg.size()) == 0,
                  "reduce_scatter in place dtype {} op {} count {}", t, op, count);
        const int root = int(count % uint64_t(n));
        for (uint64_t j = 0; j < count; j++) put(t, value(t, op, me, j), &buf[j * esz]);
        const std::vector<uint8_t> before = buf;
        rc = ds4tp_group_reduce(g, buf.data(), count, t, op, root);
        OPS_CHECK(rc == 0 && buf == (me == root ? want : before),
                  "reduce to rank {} dtype {} op {} count {}", root, t, op, count);
      }
  return 0;
}

// gather, scatter, all_gather_v, all_gather_rows and all_to_all_v.
int moves(ds4tp_group *g, int me, int n, uint64_t &digest, std::string &why) {
  int rc = 0;
  const uint64_t un = uint64_t(n);
  for (uint64_t bytes : {uint64_t(0), uint64_t(5), uint64_t(9000)}) {
    const int root = int(bytes % un);
    std::vector<uint8_t> mine(bytes), all(bytes * un), want(bytes * un);
    for (uint64_t j = 0; j < bytes; j++) mine[j] = byte_of(me, j);
    for (uint64_t r = 0; r < un; r++)
      for (uint64_t j = 0; j < bytes; j++) want[r * bytes + j] = byte_of(int(r), j);
    rc = ds4tp_group_gather(g, mine.data(), me == root ? all.data() : nullptr, bytes, root);
    OPS_CHECK(rc == 0 && (me != root || all == want), "gather to rank {} of {} bytes", root, bytes);
    std::vector<uint8_t> piece(bytes);
    rc = ds4tp_group_scatter(g, me == root ? want.data() : nullptr, piece.data(), bytes, root);
    OPS_CHECK(rc == 0 && piece == mine, "scatter from rank {} of {} bytes", root, bytes);
  }
  // Uneven parts, one of them empty.
  std::vector<uint64_t> part(un);
  uint64_t total = 0;
  for (uint64_t r = 0; r < un; r++) total += part[r] = r == 1 ? 0 : 3000 + 977 * r;
  std::vector<uint8_t> in(part[size_t(me)]), got(total), want;
  for (uint64_t j = 0; j < in.size(); j++) in[j] = byte_of(me, j);
  for (uint64_t r = 0; r < un; r++)
    for (uint64_t j = 0; j < part[r]; j++) want.push_back(byte_of(int(r), j));
  rc = ds4tp_group_all_gather_v(g, in.data(), got.data(), part.data());
  OPS_CHECK(rc == 0 && got == want, "all_gather_v of {} bytes in all", total);
  digest = fold(digest, got.data(), got.size());
  // Rows: rank r's slice of row i is byte_of(r, i * slice + k).
  const uint64_t rows = 37, slice = 130;
  std::vector<uint8_t> rin(rows * slice), rout(rows * slice * un), rwant(rows * slice * un);
  for (uint64_t j = 0; j < rin.size(); j++) rin[j] = byte_of(me, j);
  for (uint64_t i = 0; i < rows; i++)
    for (uint64_t r = 0; r < un; r++)
      for (uint64_t k = 0; k < slice; k++)
        rwant[(i * un + r) * slice + k] = byte_of(int(r), i * slice + k);
  rc = ds4tp_group_all_gather_rows(g, rin.data(), rout.data(), rows, slice);
  OPS_CHECK(rc == 0 && rout == rwant, "all_gather_rows of {} rows of {} bytes", rows, slice);
  // All-to-all: rank a sends rank b (a + 2b) * 700 bytes (rank 0 sends rank 0 none).
  auto amount = [](uint64_t a, uint64_t b) { return (a + 2 * b) * 700; };
  std::vector<uint64_t> sb(un), so(un), rb(un), ro(un);
  uint64_t st = 0, rt = 0;
  for (uint64_t r = 0; r < un; r++) {
    sb[r] = amount(uint64_t(me), r), so[r] = st, st += sb[r];
    rb[r] = amount(r, uint64_t(me)), ro[r] = rt, rt += rb[r];
  }
  std::vector<uint8_t> ain(st), aout(rt), awant(rt);
  for (uint64_t r = 0; r < un; r++)
    for (uint64_t j = 0; j < sb[r]; j++) ain[so[r] + j] = byte_of(me, j * 7 + r);
  for (uint64_t r = 0; r < un; r++)
    for (uint64_t j = 0; j < rb[r]; j++) awant[ro[r] + j] = byte_of(int(r), j * 7 + uint64_t(me));
  rc = ds4tp_group_all_to_all_v(g, ain.data(), sb.data(), so.data(), aout.data(), rb.data(),
                                ro.data());
  OPS_CHECK(rc == 0 && aout == awant, "all_to_all_v of {} bytes out, {} in", st, rt);
  return 0;
}

int ops_body(ds4tp_group *g, int me, uint64_t &digest, std::string &why) {
  const int n = ds4tp_group_size(g);
  if (int rc = reductions(g, me, n, digest, why)) return rc;
  return moves(g, me, n, digest, why);
}

// Only the data moves and the all-to-all's refusal (a tiered group's).
int tiered_body(ds4tp_group *g, int me, uint64_t &digest, std::string &why) {
  const int n = ds4tp_group_size(g);
  if (int rc = reductions(g, me, n, digest, why)) return rc;
  int rc = 0;
  uint64_t z[16] = {};
  rc = ds4tp_group_all_to_all_v(g, nullptr, z, z, nullptr, z, z);
  OPS_CHECK(rc == DS4TP_EUNSUPPORTED && std::string(ds4tp_group_errmsg(g)).find("flat") !=
                                            std::string::npos,
            "a tiered group's all_to_all_v is refused, naming why");
  return 0;
}

GroupEdit small_chunks(GroupEdit also = {}) {
  return [also](int r, ds4tp_group_options &o, ds4tp_identity &id) {
    o.chunk_bytes = 4096;
    if (also) also(r, o, id);
  };
}

}  // namespace

TEST_CASE("collectives: every op and dtype over threads, N=2,3,4", "[group][ops]") {
  for (int n : {2, 3, 4}) {
    std::vector<ds4tp_group *> gs(static_cast<size_t>(n));
    ds4tp_group_options o;
    ds4tp_group_options_init(&o);
    o.chunk_bytes = 4096;
    REQUIRE(ds4tp_group_new_local(gs.data(), n, &o, nullptr) == 0);
    std::vector<int> rcs(static_cast<size_t>(n));
    std::vector<uint64_t> digests(static_cast<size_t>(n));
    std::vector<std::string> whys(static_cast<size_t>(n));
    std::vector<std::thread> th;
    for (int r = 0; r < n; r++)
      th.emplace_back([&, r] {
        rcs[size_t(r)] = ops_body(gs[size_t(r)], r, digests[size_t(r)], whys[size_t(r)]);
      });
    for (auto &t : th) t.join();
    for (int r = 0; r < n; r++) {
      INFO("N=" << n << " rank " << r << ": " << whys[size_t(r)]);
      CHECK(rcs[size_t(r)] == 0);
      CHECK(digests[size_t(r)] == digests[0]);
    }
    for (auto *g : gs) ds4tp_group_free(g);
  }
}

TEST_CASE("collectives: every op and dtype over shm processes, N=3", "[group][ops]") {
  check_run(run_group_procs(3, DS4TP_TRANSPORT_SHM, ops_body, small_chunks()));
}

TEST_CASE("collectives: every op and dtype over tcp, N=2 and N=4", "[group][ops]") {
  check_run(run_group_procs(2, DS4TP_TRANSPORT_TCP, ops_body, small_chunks()));
  check_run(run_group_procs(4, DS4TP_TRANSPORT_TCP, ops_body, small_chunks()));
}

TEST_CASE("collectives: a tiered group of 2 hosts x 2 ranks composes them", "[group][ops]") {
  check_run(run_group_procs(4, DS4TP_TRANSPORT_AUTO, tiered_body,
                            small_chunks(on_hosts({0, 0, 1, 1}))));
}

TEST_CASE("collectives: ranks in different calls fail them naming both", "[group][ops]") {
  // f16 on rank 0, bf16 on rank 1: the same bytes, another dtype.
  GroupBody body = [](ds4tp_group *g, int me, uint64_t &, std::string &why) -> int {
    uint16_t v[64] = {};
    const int rc = ds4tp_group_all_reduce(g, v, 64, me == 0 ? DS4TP_DTYPE_F16 : DS4TP_DTYPE_BF16,
                                          DS4TP_OP_SUM);
    const std::string msg = ds4tp_group_errmsg(g);
    why = fmt::format("rank {}: rc {}: {}", me, rc, msg);
    const bool named = msg.find("all_reduce f16 sum") != std::string::npos &&
                       msg.find("all_reduce bf16 sum") != std::string::npos;
    return rc == DS4TP_EDESYNC && named ? 0 : 99;
  };
  for (int transport : {DS4TP_TRANSPORT_SHM, DS4TP_TRANSPORT_TCP}) {
    INFO("transport " << transport);
    check_run(run_group_procs(2, transport, body));
  }
  // An all-to-all whose counts disagree: named with both numbers.
  GroupBody counts = [](ds4tp_group *g, int me, uint64_t &, std::string &why) -> int {
    uint64_t sb[2] = {8, 8}, off[2] = {0, 8}, rb[2] = {8, me == 0 ? 16u : 8u};
    uint8_t in[16] = {}, out[24] = {};
    const int rc = ds4tp_group_all_to_all_v(g, in, sb, off, out, rb, off);
    why = fmt::format("rank {}: rc {}: {}", me, rc, ds4tp_group_errmsg(g));
    const bool named = me != 0 || why.find("sends rank 0 8 bytes, which expects 16") !=
                                      std::string::npos;
    return rc == DS4TP_EDESYNC && named ? 0 : 99;
  };
  check_run(run_group_procs(2, DS4TP_TRANSPORT_TCP, counts));
}

TEST_CASE("collectives: bad arguments are refused naming them", "[group][ops]") {
  ds4tp_group *gs[2];
  REQUIRE(ds4tp_group_new_local(gs, 2, nullptr, nullptr) == 0);
  float v[4] = {};
  CHECK(ds4tp_group_all_reduce(gs[0], v, 4, 9, DS4TP_OP_SUM) == DS4TP_EINVAL);
  CHECK_THAT(ds4tp_group_errmsg(gs[0]), Catch::Contains("dtype 9"));
  CHECK(ds4tp_group_reduce(gs[0], v, 4, DS4TP_DTYPE_F32, 7, 0) == DS4TP_EINVAL);
  CHECK_THAT(ds4tp_group_errmsg(gs[0]), Catch::Contains("op 7 is not a ds4tp_reduce_op"));
  CHECK(ds4tp_group_gather(gs[0], v, v, 4, 2) == DS4TP_EINVAL);
  CHECK_THAT(ds4tp_group_errmsg(gs[0]), Catch::Contains("root 2 is outside"));
  CHECK(ds4tp_group_all_gather_v(gs[0], v, v, nullptr) == DS4TP_EINVAL);
  CHECK(ds4tp_group_all_to_all_v(gs[0], v, nullptr, nullptr, v, nullptr, nullptr) ==
        DS4TP_EINVAL);
  // Refusals are the caller's mistakes: the group goes on.
  CHECK(ds4tp_group_failed(gs[0]) == 0);
  for (auto *g : gs) ds4tp_group_free(g);
}
