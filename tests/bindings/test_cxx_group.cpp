// ds4tp::Group (include/ds4tp/ds4tp_group.hpp): the local form over
// threads, every dtype and reduce op, every collective against a
// reference, identical bits on every rank, errors as exceptions carrying
// the handle's message, sizes refused before any rank waits, moves.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <numeric>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "ds4tp/ds4tp.hpp"

namespace {

template <class F>
void on_threads(std::vector<ds4tp::Group> &gs, F fn, std::vector<std::string> &why) {
  why.assign(gs.size(), "");
  std::vector<std::thread> ts;
  for (size_t r = 0; r < gs.size(); r++)
    ts.emplace_back([&, r] {
      try {
        fn(int(r), gs[r]);
      } catch (const std::exception &e) {
        why[r] = e.what();
        gs[r].mark_failed();
      }
    });
  for (auto &t : ts) t.join();
}

}  // namespace

TEST_CASE("cxx group: local form, f32 f16 bf16, identical bits", "[group][bindings]") {
  for (int n : {2, 3}) {
    INFO("n=" << n);
    auto gs = ds4tp::Group::local(n);
    REQUIRE(gs.size() == size_t(n));
    std::vector<std::vector<float>> f{size_t(n)};
    std::vector<std::vector<ds4tp::Half>> h{size_t(n)};
    std::vector<std::vector<ds4tp::BFloat16>> b{size_t(n)};
    std::vector<std::string> why;
    on_threads(
        gs,
        [&](int r, ds4tp::Group &g) {
          if (g.rank() != r || g.size() != n) throw std::runtime_error("rank/size wrong");
          if (g.plan().rfind("plan: 1 host x ", 0) != 0)
            throw std::runtime_error("plan: " + g.plan());
          f[size_t(r)].assign(3000, float(r) + 0.5f);
          h[size_t(r)].assign(3000, ds4tp::Half{0x3c00});      // 1.0
          b[size_t(r)].assign(3000, ds4tp::BFloat16{0x3f80});  // 1.0
          g.all_reduce(std::span<float>(f[size_t(r)]));
          g.all_reduce(std::span<ds4tp::Half>(h[size_t(r)]));
          g.all_reduce(std::span<ds4tp::BFloat16>(b[size_t(r)]));
          g.barrier();
          // The flight recorder names the calls just made.
          const std::string path = "/tmp/ds4tp-cxx-flight-" + std::to_string(getpid()) + "-%r";
          g.dump(path.c_str());
          const std::string mine = "/tmp/ds4tp-cxx-flight-" + std::to_string(getpid()) + "-" +
                                   std::to_string(r);
          std::ifstream text(mine);
          std::string head;
          std::getline(text, head);
          std::remove(mine.c_str());
          std::remove((mine + ".json").c_str());
          if (head.rfind("ds4tp group flight recorder: rank " + std::to_string(r), 0) != 0)
            throw std::runtime_error("dump: " + head);
        },
        why);
    float want = 0;
    for (int r = 0; r < n; r++) want += float(r) + 0.5f;
    const uint16_t hw = n == 2 ? 0x4000 : 0x4200, bw = n == 2 ? 0x4000 : 0x4040;
    for (int r = 0; r < n; r++) {
      INFO("rank " << r << ": " << why[size_t(r)]);
      REQUIRE(why[size_t(r)].empty());
      CHECK(f[size_t(r)][2999] == want);
      CHECK(h[size_t(r)][0].bits == hw);
      CHECK(b[size_t(r)][0].bits == bw);
      CHECK(std::memcmp(f[size_t(r)].data(), f[0].data(), 3000 * 4) == 0);
    }
  }
}

TEST_CASE("cxx group: failures throw with the handle's message", "[group][bindings]") {
  auto gs = ds4tp::Group::local(2);
  gs[1].mark_failed();
  std::vector<float> v(8, 1.0f);
  try {
    gs[0].all_reduce(std::span<float>(v));
    FAIL("all_reduce after mark_failed did not throw");
  } catch (const ds4tp::Error &e) {
    INFO(e.what());
    CHECK(e.status() == DS4TP_EFAILED);
    CHECK(e.message().find("rank 1") != std::string::npos);
  }
  ds4tp::Group moved(std::move(gs[0]));
  CHECK(moved);
  CHECK_FALSE(gs[0]);
  CHECK_THROWS_AS(gs[0].barrier(), ds4tp::Error);
  std::vector<std::byte> small(4), out(4);
  CHECK_THROWS_AS(moved.all_gather(small, out), ds4tp::Error);  // needs 2 x 4 bytes

  ds4tp::GroupOptions o;
  o.spin_us = -7;
  try {
    ds4tp::Group::local(2, &o);
    FAIL("spin_us -7 was accepted");
  } catch (const ds4tp::Error &e) {
    INFO(e.what());
    CHECK(e.status() == DS4TP_EINVAL);
    CHECK(e.message().find("spin_us") != std::string::npos);
  }
}

// ---- the other collectives, every element type and op ----------------
//
// Inputs exact in every type (as tests/group/test_group_ops.cpp's: multiples of
// 1/32, products of 1/2, 1, 2 and -1, integers that wrap alike in any
// order), so the expected results do not depend on the combining order.
namespace {

using ds4tp::ReduceOp;
constexpr ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Prod};

template <class T>
constexpr bool kFloat = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                        std::is_same_v<T, ds4tp::Half> || std::is_same_v<T, ds4tp::BFloat16>;

template <class T>
const char *type_name() {
  if constexpr (std::is_same_v<T, float>) return "float";
  else if constexpr (std::is_same_v<T, double>) return "double";
  else if constexpr (std::is_same_v<T, ds4tp::Half>) return "Half";
  else if constexpr (std::is_same_v<T, ds4tp::BFloat16>) return "BFloat16";
  else if constexpr (std::is_same_v<T, int32_t>) return "int32_t";
  else if constexpr (std::is_same_v<T, int64_t>) return "int64_t";
  else return "uint8_t";
}
const char *const kOpNames[] = {"sum", "max", "min", "prod"};

template <class T>
double exact(ReduceOp op, int r, uint64_t j) {
  const uint64_t h = (uint64_t(r) * 2654435761u + j * 40503u + sizeof(T) * 97u) % 1000003u;
  if (!kFloat<T>) return double(int64_t(h % 200) - 100);
  if (op == ReduceOp::Prod) return std::array{0.5, 1.0, 2.0, -1.0}[h % 4];
  return double(int64_t(h % 97) - 48) / 32.0;
}

// v (exact in T) as T; f16 and bf16 by their bits, normal numbers and zero only.
template <class T>
T as(double v) {
  if constexpr (std::is_same_v<T, ds4tp::Half> || std::is_same_v<T, ds4tp::BFloat16>) {
    uint32_t x = 0;
    const float f = float(v);
    std::memcpy(&x, &f, 4);
    if constexpr (std::is_same_v<T, ds4tp::BFloat16>) return T{uint16_t(x >> 16)};
    if ((x & 0x7fffffffu) == 0) return T{uint16_t(x >> 16)};
    return T{uint16_t(((x >> 16) & 0x8000u) | ((((x >> 23) & 0xffu) - 112u) << 10) |
                      ((x >> 13) & 0x3ffu))};
  } else if constexpr (kFloat<T>) {
    return T(v);
  } else {
    return T(int64_t(v));  // two's complement wrap into T
  }
}

// The op over ranks 0..n-1 of element j: floats in double (exact here),
// integers in T, wrapping.
template <class T>
T expected(ReduceOp op, int n, uint64_t j) {
  if constexpr (kFloat<T>) {
    double acc = exact<T>(op, 0, j);
    for (int r = 1; r < n; r++) {
      const double x = exact<T>(op, r, j);
      acc = op == ReduceOp::Sum ? acc + x : op == ReduceOp::Prod ? acc * x
            : op == ReduceOp::Max ? std::max(acc, x) : std::min(acc, x);
    }
    return as<T>(acc);
  } else {
    using U = std::make_unsigned_t<T>;
    T acc = as<T>(exact<T>(op, 0, j));
    for (int r = 1; r < n; r++) {
      const T x = as<T>(exact<T>(op, r, j));
      acc = op == ReduceOp::Sum ? T(U(acc) + U(x)) : op == ReduceOp::Prod ? T(U(acc) * U(x))
            : op == ReduceOp::Max ? std::max(acc, x) : std::min(acc, x);
    }
    return acc;
  }
}

template <class T>
bool same(const std::vector<T> &a, const T *b, size_t n) {
  return a.size() == n && std::memcmp(a.data(), b, n * sizeof(T)) == 0;
}

// all_reduce, reduce_scatter (both forms) and reduce of T for every op;
// "" or what failed.
template <class T>
std::string reductions(ds4tp::Group &g) {
  const int n = g.size(), me = g.rank();
  for (ReduceOp op : kOps)
    for (uint64_t count : {1u, 7u, 1500u}) {
      const std::string what = std::string(" of ") + type_name<T>() + " " + kOpNames[int(op)] +
                               " count " + std::to_string(count);
      std::vector<T> buf(count), want(count), in(count * uint64_t(n)), seg(count), seg_want(count);
      for (uint64_t j = 0; j < count; j++) {
        buf[j] = as<T>(exact<T>(op, me, j));
        want[j] = expected<T>(op, n, j);
        seg_want[j] = expected<T>(op, n, uint64_t(me) * count + j);
      }
      for (uint64_t j = 0; j < in.size(); j++) in[j] = as<T>(exact<T>(op, me, j));
      const std::vector<T> mine = buf;
      g.all_reduce(buf, op);
      if (!same(want, buf.data(), count)) return "all_reduce" + what;
      g.reduce_scatter(in, seg, op);
      if (!same(seg_want, seg.data(), count)) return "reduce_scatter" + what;
      std::span<T> got = g.reduce_scatter_in_place(in, op);
      if (got.data() != in.data() + size_t(me) * count || !same(seg_want, got.data(), count))
        return "reduce_scatter_in_place" + what;
      buf = mine;
      const int root = int(count % uint64_t(n));
      g.reduce(buf, root, op);
      if (!same(me == root ? want : mine, buf.data(), count))
        return "reduce to rank " + std::to_string(root) + what;
    }
  return "";
}

// A trivially copyable element the moving calls take (a token's routing).
struct Token {
  int32_t id;
  float weight;
  bool operator==(const Token &) const = default;
};
Token token(int r, uint64_t j) { return {int32_t(r * 100000 + int64_t(j)), float(j % 64) / 4}; }

// gather, scatter, all_gather_v, all_gather_rows, all_to_all_v of Tokens.
std::string moves(ds4tp::Group &g) {
  const int n = g.size(), me = g.rank();
  const uint64_t un = uint64_t(n);
  for (uint64_t k : {0u, 3u, 900u}) {
    const int root = int(k % un);
    std::vector<Token> mine(k), all(me == root ? k * un : 0), want;
    for (uint64_t j = 0; j < k; j++) mine[j] = token(me, j);
    for (int r = 0; r < n; r++)
      for (uint64_t j = 0; j < k; j++) want.push_back(token(r, j));
    g.gather(mine, all, root);
    if (me == root && all != want) return "gather of " + std::to_string(k) + " tokens";
    std::vector<Token> piece(k);
    g.scatter(me == root ? want : std::vector<Token>{}, piece, root);
    if (piece != mine) return "scatter of " + std::to_string(k) + " tokens";
  }
  std::vector<uint64_t> counts(un);
  for (uint64_t r = 0; r < un; r++) counts[r] = r == 1 ? 0 : 300 + 97 * r;
  std::vector<Token> part(counts[size_t(me)]), got(std::accumulate(counts.begin(), counts.end(), uint64_t(0))),
      want;
  for (uint64_t j = 0; j < part.size(); j++) part[j] = token(me, j);
  for (int r = 0; r < n; r++)
    for (uint64_t j = 0; j < counts[size_t(r)]; j++) want.push_back(token(r, j));
  g.all_gather_v(part, got, counts);
  if (got != want) return "all_gather_v";
  const uint64_t rows = 9, slice = 13;
  std::vector<Token> rin(rows * slice), rout(rows * slice * un), rwant(rows * slice * un);
  for (uint64_t j = 0; j < rin.size(); j++) rin[j] = token(me, j);
  for (uint64_t i = 0; i < rows; i++)
    for (uint64_t r = 0; r < un; r++)
      for (uint64_t c = 0; c < slice; c++) rwant[(i * un + r) * slice + c] = token(int(r), i * slice + c);
  g.all_gather_rows(rin, rout, rows);
  if (rout != rwant) return "all_gather_rows";
  // Rank a sends rank b (a + 2b) * 50 tokens; received parts in reverse order with gaps.
  std::vector<uint64_t> sc(un), rc(un), ro(un);
  uint64_t st = 0, rt = 0;
  for (uint64_t r = 0; r < un; r++) sc[r] = (uint64_t(me) + 2 * r) * 50, st += sc[r];
  for (uint64_t r = un; r-- > 0;) rc[r] = (r + 2 * uint64_t(me)) * 50, ro[r] = rt + 1, rt += rc[r] + 1;
  std::vector<Token> ain, aout(rt), awant(rt);
  for (uint64_t r = 0; r < un; r++)
    for (uint64_t j = 0; j < sc[r]; j++) ain.push_back(token(me, r * 1000 + j));
  for (uint64_t r = 0; r < un; r++)
    for (uint64_t j = 0; j < rc[r]; j++) awant[ro[r] + j] = token(int(r), uint64_t(me) * 1000 + j);
  g.all_to_all_v(ain, sc, aout, rc, {}, ro);
  if (aout != awant) return "all_to_all_v";
  return "";
}

}  // namespace

TEST_CASE("cxx group: every collective, element type and op, N=2,3", "[group][bindings]") {
  for (int n : {2, 3}) {
    INFO("n=" << n);
    ds4tp::GroupOptions o;
    o.chunk_bytes = 4096;  // the larger counts take several steps
    auto gs = ds4tp::Group::local(n, &o);
    std::vector<std::string> why, failed(static_cast<size_t>(n));
    on_threads(
        gs,
        [&](int r, ds4tp::Group &g) {
          std::string &f = failed[size_t(r)];
          for (auto fn : {&reductions<float>, &reductions<double>, &reductions<ds4tp::Half>,
                          &reductions<ds4tp::BFloat16>, &reductions<int32_t>,
                          &reductions<int64_t>, &reductions<uint8_t>, &moves})
            if (f.empty()) f = fn(g);
          if (!f.empty()) throw std::runtime_error(f + " differs from the reference");
        },
        why);
    for (int r = 0; r < n; r++) {
      INFO("rank " << r << ": " << why[size_t(r)]);
      CHECK(why[size_t(r)].empty());
    }
  }
}

TEST_CASE("cxx group: sizes that do not fit throw before any rank waits", "[group][bindings]") {
  auto gs = ds4tp::Group::local(2);
  ds4tp::Group &g = gs[0];
  std::vector<float> f4(4), f6(6), f8(8);
  std::vector<uint64_t> two{4, 4}, three{4, 4, 0};
  auto refused = [](auto call, const std::string &words) {
    try {
      call();
    } catch (const ds4tp::Error &e) {
      INFO(e.what());
      CHECK(e.status() == DS4TP_EINVAL);
      CHECK(e.message().find(words) != std::string::npos);
      return;
    }
    FAIL("not refused; expected: " << words);
  };
  refused([&] { g.reduce_scatter(f6, f4); },
          "reduce_scatter: in has 6 elements; size() x out.size() = 8 needed");
  refused([&] { g.reduce_scatter(f8, std::span<float>(f8).subspan(4)); }, "in and out overlap");
  refused([&] { g.reduce_scatter_in_place(std::span<float>(f8).first(7)); },
          "buf has 7 elements, not size() equal segments");
  refused([&] { g.gather(f4, f6, 0); }, "gather: out has 6 elements; size() x in.size() = 8");
  refused([&] { g.scatter(f6, f4, 0); }, "scatter: in has 6 elements; size() x out.size() = 8");
  refused([&] { g.all_gather_v(f4, f8, three); }, "counts has 3 entries; one per rank: 2");
  refused([&] { g.all_gather_v(f6, f8, two); }, "in has 6 elements; counts[rank()] = 4");
  refused([&] { g.all_gather_rows(f6, f8, 4); }, "in has 6 elements, not whole rows");
  std::vector<uint64_t> past{0, 3};
  refused([&] { g.all_to_all_v(f4, two, f8, two, past); },
          "send_offsets[1] + send_counts[1] = 7 is past the buffer's 4 elements");
  refused([&] { g.reduce(f4, 2); }, "root 2 is outside");  // the library's own check
  ds4tp::Group empty;
  refused([&] { empty.reduce_scatter_in_place(f8); }, "the group handle is empty");
  CHECK(g.failed() == 0);
  // Still usable: both ranks take a min of int64.
  std::vector<std::vector<int64_t>> v{{1, 5, -3}, {4, 2, -9}};
  std::vector<std::string> why;
  on_threads(gs, [&](int r, ds4tp::Group &h) { h.all_reduce(v[size_t(r)], ReduceOp::Min); }, why);
  CHECK(why == std::vector<std::string>{"", ""});
  CHECK(v[0] == std::vector<int64_t>{1, 2, -9});
  CHECK(v[1] == v[0]);
}
