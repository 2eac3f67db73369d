// `ds4tp group --op`: one collective at one size, timed and checked. Each
// op's inputs and expected results are built here from exact inputs
// (elements.hpp), for two alternating inputs, and every output buffer is
// scrubbed before each call, so a stale or partial result cannot pass.
// The scrubbing and checking are untimed and end with an untimed barrier
// (bench/group/mpi_ops.c barriers the same way), so each timed call starts
// with every rank in it: one rank's check of a large result (a gather's
// root) is not timed as another rank's wait.
//
// `count` is elements of the dtype per rank: the reductions' vector
// (reduce_scatter: each rank's segment, so its input holds size x count);
// for the calls that move bytes, count x esize bytes per rank (gather,
// scatter, all_gather, broadcast: each rank's part; all_gather_v: rank r
// gives (r % 3) halves of it; all_gather_rows: up to 8 rows of it;
// all_to_all_v: rank a sends rank b ((a + 2b) % 3 + 1) halves of it).
#include "group_ops.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>

#include "elements.hpp"

namespace ds4tp_cli {
namespace {

using namespace elements;

constexpr int kSalts = 2;
constexpr int kWarmup = 20;
constexpr uint8_t kScrub = 0xA5;

using Bytes = std::vector<uint8_t>;

// One op ready to run: `prepare` resets the buffers for input `salt` and
// call `it`, `call` runs the collective (its status), `verify` says what
// differs from the reference ("" if nothing).
struct Prepared {
  std::function<void(int salt, int it)> prepare = [](int, int) {};
  std::function<int(int it)> call;
  std::function<std::string(int salt, int it)> verify = [](int, int) { return std::string(); };
};

std::string differs(const char *what, const uint8_t *got, const uint8_t *want, size_t n) {
  size_t i = 0;
  while (i < n && got[i] == want[i]) i++;
  if (i == n) return "";
  return std::string(what) + ": byte " + std::to_string(i) + " of " + std::to_string(n) +
         " differs from the reference (got " + std::to_string(got[i]) + ", want " +
         std::to_string(want[i]) + ")";
}

// Rank r's bytes 0..len of input s.
Bytes bytes_of(int r, uint64_t len, int s) {
  Bytes b(len);
  for (uint64_t j = 0; j < len; j++) b[j] = byte_of(r, j, s);
  return b;
}

Prepared reductions(ds4tp_group *g, const OpCase &c, int me, int n) {
  const size_t es = esize(c.dtype);
  const uint64_t count = c.count, segs = c.op == GroupOp::ReduceScatter ? uint64_t(n) : 1;
  auto in = std::make_shared<std::vector<Bytes>>(kSalts, Bytes(count * segs * es));
  auto want = std::make_shared<std::vector<Bytes>>(kSalts, Bytes(count * es));
  const uint64_t first = c.op == GroupOp::ReduceScatter ? uint64_t(me) * count : 0;
  for (int s = 0; s < kSalts; s++) {
    for (uint64_t j = 0; j < count * segs; j++)
      put(c.dtype, exact(c.dtype, c.reduce, n, me, j, s), &(*in)[size_t(s)][j * es]);
    for (uint64_t j = 0; j < count; j++)
      expected(c.dtype, c.reduce, n, first + j, s, &(*want)[size_t(s)][j * es]);
  }
  auto buf = std::make_shared<Bytes>(count * es);
  Prepared p;
  const int dt = c.dtype, op = c.reduce;
  if (c.op == GroupOp::ReduceScatter) {
    p.prepare = [buf](int, int) { std::fill(buf->begin(), buf->end(), kScrub); };
    p.call = [=](int it) {
      const int s = (it + kWarmup) % kSalts;
      return ds4tp_group_reduce_scatter(g, (*in)[size_t(s)].data(), buf->data(), count, dt, op);
    };
    p.verify = [=](int s, int) {
      return differs("reduce_scatter", buf->data(), (*want)[size_t(s)].data(), buf->size());
    };
    return p;
  }
  p.prepare = [=](int s, int) { *buf = (*in)[size_t(s)]; };
  if (c.op == GroupOp::AllReduce) {
    p.call = [=](int) { return ds4tp_group_all_reduce(g, buf->data(), count, dt, op); };
    p.verify = [=](int s, int) {
      return differs("all_reduce", buf->data(), (*want)[size_t(s)].data(), buf->size());
    };
    return p;
  }
  p.call = [=](int it) { return ds4tp_group_reduce(g, buf->data(), count, dt, op, (it + kWarmup) % n); };
  p.verify = [=](int s, int it) {
    const int root = (it + kWarmup) % n;
    const Bytes &w = me == root ? (*want)[size_t(s)] : (*in)[size_t(s)];
    return differs(me == root ? "reduce at the root" : "reduce (a non-root's buffer)",
                   buf->data(), w.data(), buf->size());
  };
  return p;
}

// gather, scatter, all_gather and broadcast: every rank's part of B bytes.
Prepared parts(ds4tp_group *g, const OpCase &c, int me, int n) {
  const uint64_t B = c.count * esize(c.dtype), un = uint64_t(n);
  auto all = std::make_shared<std::vector<Bytes>>();  // every rank's part, in rank order
  for (int s = 0; s < kSalts; s++) {
    Bytes a;
    for (int r = 0; r < n; r++) {
      Bytes part = bytes_of(r, B, s);
      a.insert(a.end(), part.begin(), part.end());
    }
    all->push_back(std::move(a));
  }
  auto mine = [all, B, me](int s) { return (*all)[size_t(s)].data() + uint64_t(me) * B; };
  const bool whole = c.op == GroupOp::Gather || c.op == GroupOp::AllGather;
  auto out = std::make_shared<Bytes>(whole ? B * un : B);
  auto root = [n](int it) { return (it + kWarmup) % n; };
  Prepared p;
  p.prepare = [=](int s, int it) {
    std::fill(out->begin(), out->end(), kScrub);
    if (c.op == GroupOp::Broadcast && me == root(it)) std::memcpy(out->data(), mine(s), B);
  };
  switch (c.op) {
    case GroupOp::Gather:
      p.call = [=](int it) {
        const int s = (it + kWarmup) % kSalts;
        return ds4tp_group_gather(g, mine(s), me == root(it) ? out->data() : nullptr, B, root(it));
      };
      p.verify = [=](int s, int it) {
        return me != root(it) ? std::string()
                              : differs("gather", out->data(), (*all)[size_t(s)].data(), B * un);
      };
      break;
    case GroupOp::Scatter:
      p.call = [=](int it) {
        const int s = (it + kWarmup) % kSalts;
        const uint8_t *in = me == root(it) ? (*all)[size_t(s)].data() : nullptr;
        return ds4tp_group_scatter(g, in, out->data(), B, root(it));
      };
      p.verify = [=](int s, int) { return differs("scatter", out->data(), mine(s), B); };
      break;
    case GroupOp::AllGather:
      p.call = [=](int it) {
        return ds4tp_group_all_gather(g, mine((it + kWarmup) % kSalts), out->data(), B);
      };
      p.verify = [=](int s, int) {
        return differs("all_gather", out->data(), (*all)[size_t(s)].data(), B * un);
      };
      break;
    default:  // broadcast
      p.call = [=](int it) { return ds4tp_group_broadcast(g, out->data(), B, root(it)); };
      p.verify = [=](int s, int it) {
        return differs("broadcast", out->data(), (*all)[size_t(s)].data() + uint64_t(root(it)) * B, B);
      };
  }
  return p;
}

Prepared uneven(ds4tp_group *g, const OpCase &c, int me, int n) {
  const uint64_t B = c.count * esize(c.dtype), un = uint64_t(n);
  auto salt = [](int it) { return (it + kWarmup) % kSalts; };
  Prepared p;
  if (c.op == GroupOp::AllGatherV) {
    auto part = std::make_shared<std::vector<uint64_t>>(un);
    for (uint64_t r = 0; r < un; r++) (*part)[r] = B * (r % 3) / 2;
    auto in = std::make_shared<std::vector<Bytes>>(), want = std::make_shared<std::vector<Bytes>>();
    for (int s = 0; s < kSalts; s++) {
      in->push_back(bytes_of(me, (*part)[size_t(me)], s));
      Bytes w;
      for (int r = 0; r < n; r++) {
        Bytes b = bytes_of(r, (*part)[size_t(r)], s);
        w.insert(w.end(), b.begin(), b.end());
      }
      want->push_back(std::move(w));
    }
    auto out = std::make_shared<Bytes>((*want)[0].size());
    p.prepare = [out](int, int) { std::fill(out->begin(), out->end(), kScrub); };
    p.call = [=](int it) {
      return ds4tp_group_all_gather_v(g, (*in)[size_t(salt(it))].data(), out->data(), part->data());
    };
    p.verify = [=](int s, int) {
      return differs("all_gather_v", out->data(), (*want)[size_t(s)].data(), out->size());
    };
    return p;
  }
  if (c.op == GroupOp::AllGatherRows) {
    const uint64_t rows = B >= 8 ? 8 : 1, slice = B / rows;
    auto in = std::make_shared<std::vector<Bytes>>(), want = std::make_shared<std::vector<Bytes>>();
    for (int s = 0; s < kSalts; s++) {
      in->push_back(bytes_of(me, rows * slice, s));
      Bytes w(rows * slice * un);
      for (uint64_t i = 0; i < rows; i++)
        for (uint64_t r = 0; r < un; r++)
          for (uint64_t k = 0; k < slice; k++)
            w[(i * un + r) * slice + k] = byte_of(int(r), i * slice + k, s);
      want->push_back(std::move(w));
    }
    auto out = std::make_shared<Bytes>(rows * slice * un);
    p.prepare = [out](int, int) { std::fill(out->begin(), out->end(), kScrub); };
    p.call = [=](int it) {
      return ds4tp_group_all_gather_rows(g, (*in)[size_t(salt(it))].data(), out->data(), rows, slice);
    };
    p.verify = [=](int s, int) {
      return differs("all_gather_rows", out->data(), (*want)[size_t(s)].data(), out->size());
    };
    return p;
  }
  // all_to_all_v, packed both ways: rank a's bytes for rank b are
  // byte_of(a, j * 7 + b).
  const uint64_t half = std::max<uint64_t>(1, B / 2);
  auto amount = [half](uint64_t a, uint64_t b) { return ((a + 2 * b) % 3 + 1) * half; };
  auto plan = std::make_shared<std::vector<uint64_t>>(4 * un);  // sb, so, rb, ro
  uint64_t st = 0, rt = 0;
  for (uint64_t r = 0; r < un; r++) {
    (*plan)[r] = amount(uint64_t(me), r), (*plan)[un + r] = st, st += (*plan)[r];
    (*plan)[2 * un + r] = amount(r, uint64_t(me)), (*plan)[3 * un + r] = rt, rt += (*plan)[2 * un + r];
  }
  auto in = std::make_shared<std::vector<Bytes>>(kSalts, Bytes(st));
  auto want = std::make_shared<std::vector<Bytes>>(kSalts, Bytes(rt));
  for (int s = 0; s < kSalts; s++)
    for (uint64_t r = 0; r < un; r++) {
      for (uint64_t j = 0; j < (*plan)[r]; j++)
        (*in)[size_t(s)][(*plan)[un + r] + j] = byte_of(me, j * 7 + r, s);
      for (uint64_t j = 0; j < (*plan)[2 * un + r]; j++)
        (*want)[size_t(s)][(*plan)[3 * un + r] + j] = byte_of(int(r), j * 7 + uint64_t(me), s);
    }
  auto out = std::make_shared<Bytes>(rt);
  p.prepare = [out](int, int) { std::fill(out->begin(), out->end(), kScrub); };
  p.call = [=](int it) {
    const uint64_t *q = plan->data();
    return ds4tp_group_all_to_all_v(g, (*in)[size_t(salt(it))].data(), q, q + un, out->data(),
                                    q + 2 * un, q + 3 * un);
  };
  p.verify = [=](int s, int) {
    return differs("all_to_all_v", out->data(), (*want)[size_t(s)].data(), out->size());
  };
  return p;
}

}  // namespace

const char *group_op_name(GroupOp op) {
  static const char *const names[kGroupOps] = {
      "all_reduce", "reduce_scatter", "reduce",          "gather",       "scatter", "all_gather",
      "all_gather_v", "all_gather_rows", "all_to_all_v", "broadcast", "barrier"};
  return names[int(op)];
}

bool parse_group_op(const std::string &name, GroupOp *op) {
  for (int i = 0; i < kGroupOps; i++)
    if (name == group_op_name(GroupOp(i))) return *op = GroupOp(i), true;
  return false;
}

OpResult run_op(ds4tp_group *g, const OpCase &c) {
  const int me = ds4tp_group_rank(g), n = ds4tp_group_size(g);
  Prepared p;
  switch (c.op) {
    case GroupOp::AllReduce: case GroupOp::ReduceScatter: case GroupOp::Reduce:
      p = reductions(g, c, me, n);
      break;
    case GroupOp::Gather: case GroupOp::Scatter: case GroupOp::AllGather: case GroupOp::Broadcast:
      p = parts(g, c, me, n);
      break;
    case GroupOp::Barrier:
      p.call = [g](int) { return ds4tp_group_barrier(g); };
      break;
    default:
      p = uneven(g, c, me, n);
  }
  OpResult res;
  res.bytes = c.op == GroupOp::Barrier ? 0 : c.count * esize(c.dtype);
  res.us.reserve(size_t(c.iters));
  for (int it = -kWarmup; it < c.iters; it++) {
    const int s = (it + kWarmup) % kSalts;
    p.prepare(s, it);
    const auto t0 = std::chrono::steady_clock::now();
    const int rc = p.call(it);
    const auto t1 = std::chrono::steady_clock::now();
    if (rc != 0) {
      res.error = std::string(group_op_name(c.op)) + ": " + ds4tp_err_name(rc) + ": " +
                  ds4tp_group_errmsg(g);
      return res;
    }
    if (std::string why = p.verify(s, it); !why.empty()) {
      res.error = why + " in call " + std::to_string(it + kWarmup);
      return res;
    }
    if (c.op != GroupOp::Barrier)
      if (int brc = ds4tp_group_barrier(g)) {
        res.error = std::string("barrier between calls: ") + ds4tp_err_name(brc) + ": " +
                    ds4tp_group_errmsg(g);
        return res;
      }
    if (it >= 0) res.us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  std::sort(res.us.begin(), res.us.end());
  return res;
}

}  // namespace ds4tp_cli
