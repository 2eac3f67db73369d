#include "support/group_util.hpp"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "group/reduce.hpp"
#include "support/procs.hpp"
#include "tools/ds4tp/sum_order.hpp"

namespace ds4tp::test {
namespace {

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

float value_of(int rank, uint64_t i, uint64_t salt) {
  uint64_t h = mix((uint64_t(rank) << 40) ^ i ^ (salt << 20));
  return (float(int64_t(h % 2000001) - 1000000) / 1000000.0f) * float(1 + (h >> 60));
}

// Element i of `p` set to `v` in the element type (rounded).
void store(int dtype, uint8_t *p, uint64_t i, float v) {
  if (dtype == DS4TP_DTYPE_F32) {
    std::memcpy(p + i * 4, &v, 4);
  } else {
    uint16_t h = dtype == DS4TP_DTYPE_F16 ? group::float_to_half(v) : group::float_to_bf16(v);
    std::memcpy(p + i * 2, &h, 2);
  }
}

}  // namespace

size_t group_esize(int dtype) { return dtype == DS4TP_DTYPE_F32 ? 4 : 2; }

void group_fill(int dtype, int rank, uint64_t count, uint64_t salt, void *out) {
  auto *p = static_cast<uint8_t *>(out);
  for (uint64_t i = 0; i < count; i++) store(dtype, p, i, value_of(rank, i, salt));
}

namespace {
float as_dtype(int dtype, float v) {  // rounded to the element type and back
  if (dtype == DS4TP_DTYPE_F16) return group::half_to_float(group::float_to_half(v));
  if (dtype == DS4TP_DTYPE_BF16) return group::bf16_to_float(group::float_to_bf16(v));
  return v;
}

void reference(int dtype, const sum_order::Shape &shape, uint64_t count, uint64_t salt,
               void *out) {
  auto *p = static_cast<uint8_t *>(out);
  auto round = [dtype](float v) { return as_dtype(dtype, v); };
  for (uint64_t i = 0; i < count; i++) {
    auto value = [&](int r) { return as_dtype(dtype, value_of(r, i, salt)); };
    store(dtype, p, i, sum_order::element(shape, count, group_esize(dtype), i, value, round));
  }
}
}  // namespace

void group_reference_hosts(int dtype, const HostOrder &hosts, uint64_t count, uint64_t salt,
                           void *out) {
  sum_order::Shape shape;
  shape.hosts = hosts;
  reference(dtype, shape, count, salt, out);
}

void group_reference_ring(int dtype, const HostOrder &hosts, uint64_t count, uint64_t chunk_bytes,
                          uint64_t salt, void *out) {
  sum_order::Shape shape;
  shape.hosts = hosts;
  for (const auto &h : hosts) shape.tiered = shape.tiered || h.size() > 1;
  shape.ring_from = 1;
  shape.chunk_bytes = chunk_bytes;
  reference(dtype, shape, count, salt, out);
}

void group_reference(int dtype, int n, uint64_t count, uint64_t salt, void *out) {
  HostOrder one(1);
  for (int r = 0; r < n; r++) one[0].push_back(r);
  group_reference_hosts(dtype, one, count, salt, out);
}

int group_checks(ds4tp_group *g, const std::vector<uint64_t> &counts, std::string &why,
                 uint64_t &digest, BufferUse use, const HostOrder &order) {
  const int n = ds4tp_group_size(g), me = ds4tp_group_rank(g);
  void *gbuf = nullptr;
  uint64_t gbytes = 0;
  if (use != BufferUse::Own && (use != BufferUse::EvenRanks || me % 2 == 0)) {
    if (ds4tp_group_buffer(g, &gbuf, &gbytes) != 0) {
      why = "group_buffer: " + std::string(ds4tp_group_errmsg(g));
      return DS4TP_EINVAL;
    }
    if (use == BufferUse::GroupOffset) {
      gbuf = static_cast<uint8_t *>(gbuf) + 64;
      gbytes -= 64;
    }
  }
  digest = 1469598103934665603ull;
  auto fold = [&](const std::vector<uint8_t> &v) {
    for (uint8_t b : v) digest = (digest ^ b) * 1099511628211ull;
  };
  uint64_t salt = 0;
  for (int dt : {DS4TP_DTYPE_F32, DS4TP_DTYPE_F16, DS4TP_DTYPE_BF16}) {
    for (uint64_t c : counts) {
      salt++;
      std::vector<uint8_t> buf(c * group_esize(dt) + 1), want(buf.size());
      group_fill(dt, me, c, salt, buf.data());
      if (order.empty()) {
        group_reference(dt, n, c, salt, want.data());
      } else {
        group_reference_hosts(dt, order, c, salt, want.data());
      }
      const size_t bytes = c * group_esize(dt);
      const bool in_group = gbuf != nullptr && bytes <= gbytes;
      if (in_group) std::memcpy(gbuf, buf.data(), bytes);
      int rc = ds4tp_group_all_reduce(g, in_group ? gbuf : buf.data(), c, dt, DS4TP_OP_SUM);
      if (rc != 0) {
        why = "all_reduce: " + std::string(ds4tp_group_errmsg(g));
        return rc;
      }
      if (in_group) std::memcpy(buf.data(), gbuf, bytes);
      if (buf != want) {
        why = "all_reduce " + std::to_string(c) + " elements dtype " + std::to_string(dt) +
              (in_group ? " from the group buffer" : "") +
              (order.empty() ? ": result differs from the rank-order reference"
                             : ": result differs from the host-major reference");
        return DS4TP_EIO;
      }
      fold(buf);
    }
  }
  for (uint64_t bytes : {uint64_t(0), uint64_t(3), uint64_t(4096), uint64_t(200001)}) {
    std::vector<uint8_t> in(bytes + 1), out(bytes * size_t(n) + 1);
    for (uint64_t i = 0; i < bytes; i++) in[i] = uint8_t(me * 31 + i);
    int rc = ds4tp_group_all_gather(g, in.data(), out.data(), bytes);
    if (rc != 0) {
      why = "all_gather: " + std::string(ds4tp_group_errmsg(g));
      return rc;
    }
    for (int r = 0; r < n; r++)
      for (uint64_t i = 0; i < bytes; i++)
        if (out[size_t(r) * bytes + i] != uint8_t(r * 31 + i)) {
          why = "all_gather: rank " + std::to_string(r) + " byte " + std::to_string(i);
          return DS4TP_EIO;
        }
    fold(out);
    for (int root = 0; root < n; root += (n > 2 ? n - 1 : 1)) {
      std::vector<uint8_t> b(bytes + 1, 0);
      if (me == root)
        for (uint64_t i = 0; i < bytes; i++) b[i] = uint8_t(root + 7 * i);
      rc = ds4tp_group_broadcast(g, b.data(), bytes, root);
      if (rc != 0) {
        why = "broadcast: " + std::string(ds4tp_group_errmsg(g));
        return rc;
      }
      for (uint64_t i = 0; i < bytes; i++)
        if (b[i] != uint8_t(root + 7 * i)) {
          why = "broadcast from " + std::to_string(root) + ": byte " + std::to_string(i);
          return DS4TP_EIO;
        }
    }
  }
  for (int i = 0; i < 3; i++)
    if (int rc = ds4tp_group_barrier(g)) {
      why = "barrier: " + std::string(ds4tp_group_errmsg(g));
      return rc;
    }
  return 0;
}

GroupRun run_group_threads(const std::vector<ds4tp_group *> &gs,
                           const std::vector<uint64_t> &counts, BufferUse use) {
  const size_t n = gs.size();
  GroupRun run;
  run.rcs.assign(n, -1);
  run.digests.assign(n, 0);
  run.msgs.assign(n, "");
  std::vector<std::thread> ts;
  for (size_t r = 0; r < n; r++)
    ts.emplace_back([&, r] { run.rcs[r] = group_checks(gs[r], counts, run.msgs[r], run.digests[r], use); });
  for (auto &t : ts) t.join();
  for (size_t r = 0; r < n && run.rc == 0; r++)
    if (run.rcs[r] != 0) {
      run.rc = run.rcs[r];
      run.why = "rank " + std::to_string(r) + ": " + run.msgs[r];
    }
  return run;
}

GroupRun run_group_procs(int n, int transport, const GroupBody &body, const GroupEdit &edit,
                         int timeout_ms) {
  GroupRun run;
  run.rcs.assign(size_t(n), -999);
  run.digests.assign(size_t(n), 0);
  run.msgs.assign(size_t(n), "");
  std::vector<Child> kids;
  auto rank_body = [&](int rank, int port) {
    return [=, &body, &edit](int fd) {
      ds4tp_group_options o;
      ds4tp_group_options_init(&o);
      o.rank = rank;
      o.group_size = n;
      o.rendezvous_host = "127.0.0.1";
      o.rendezvous_port = port;
      o.transport = transport;
      o.connect_timeout_ms = 10000;
      o.op_timeout_ms = 5000;
      o.chunk_bytes = 64 * 1024;
      ds4tp_identity id;
      ds4tp_identity_init(&id);
      id.n_layer = 36;
      id.n_embd = 2560;
      if (edit) edit(rank, o, id);
      ds4tp_group *g = nullptr;
      Report r;
      int rc = ds4tp_group_new(&g, &o, &id);
      if (rc == 0 && rank == 0) {
        r.kind = kReportPort;
        r.value = ds4tp_group_rendezvous_port(g);
        (void)!write(fd, &r, sizeof r);
      }
      std::string why;
      uint64_t digest = 0;
      if (rc != 0) why = ds4tp_last_error();
      if (rc == 0 && (rc = ds4tp_group_connect(g)) != 0) why = ds4tp_group_errmsg(g);
      if (rc == 0) rc = body(g, rank, digest, why);
      Report res;
      res.kind = kReportResult;
      res.rc = rc;
      res.value = int64_t(digest);
      res.failed = g ? ds4tp_group_failed(g) : 0;
      res.t_ns = mono_ns();
      std::snprintf(res.msg, sizeof res.msg, "%s", why.c_str());
      (void)!write(fd, &res, sizeof res);
      ds4tp_group_free(g);
      return 0;
    };
  };
  kids.push_back(Child::spawn(rank_body(0, 0), "rank 0"));
  Report pr;
  if (!kids[0].next_of(kReportPort, pr, timeout_ms)) {
    kids[0].next_of(kReportResult, pr, 1000);
    run.rc = pr.rc ? pr.rc : DS4TP_ETIMEDOUT;
    run.why = std::string("rank 0 did not start: ") + pr.msg;
    kids[0].reap(2000);
    return run;
  }
  for (int r = 1; r < n; r++) kids.push_back(Child::spawn(rank_body(r, int(pr.value)), "rank"));
  for (int r = 0; r < n; r++) {
    Report res;
    if (kids[size_t(r)].next_of(kReportResult, res, timeout_ms)) {
      run.rcs[size_t(r)] = res.rc;
      run.digests[size_t(r)] = uint64_t(res.value);
      run.msgs[size_t(r)] = res.msg;
      if (res.rc != 0 && run.rc == 0) {
        run.rc = res.rc;
        run.why = "rank " + std::to_string(r) + ": " + res.msg;
      }
    } else if (run.rc == 0) {
      run.rc = DS4TP_ETIMEDOUT;
      run.why = "rank " + std::to_string(r) + " reported nothing";
    }
  }
  for (auto &k : kids) k.reap(5000);
  return run;
}

// Every collective, around each threshold (chunk 64 KiB; two-shot
// across hosts from 64 KiB), against `order`'s reference; broadcast from
// every root; and the plan, which must contain `want`.
int check_plan(ds4tp_group *g, const std::string &want, std::string &why) {
  char plan[512] = "";
  if (ds4tp_group_plan(g, plan, sizeof plan, nullptr) != DS4TP_OK ||
      std::string(plan).find(want) == std::string::npos) {
    why = std::string("plan \"") + plan + "\" does not say \"" + want + "\"";
    return int(DS4TP_EIO);
  }
  return 0;
}

GroupBody collectives_body(const HostOrder &order, const std::string &want) {
  return [order, want](ds4tp_group *g, int me, uint64_t &digest, std::string &why) {
    if (int rc = check_plan(g, want, why)) return rc;
    // ds4tp_group_topology tells every rank's host and place, and whether
    // the group runs tiered (more than one host in `order`).
    for (size_t h = 0; h < order.size(); h++)
      for (size_t l = 0; l < order[h].size(); l++) {
        int host = -1, local = -1, tiered = -1;
        const int r = order[h][l];
        if (ds4tp_group_topology(g, r, &host, &local, &tiered) != DS4TP_OK ||
            (order.size() > 1 && (host != int(h) || local != int(l))) ||
            tiered != (order.size() > 1 ? 1 : 0)) {
          why = "topology of rank " + std::to_string(r) + ": host " + std::to_string(host) +
                " place " + std::to_string(local) + " tiered " + std::to_string(tiered) +
                ", expected host " + std::to_string(h) + " place " + std::to_string(l) + ": " +
                ds4tp_group_errmsg(g);
          return int(DS4TP_EIO);
        }
      }
    if (ds4tp_group_topology(g, ds4tp_group_size(g), nullptr, nullptr, nullptr) != DS4TP_EINVAL) {
      why = "topology of a rank outside the group was not refused";
      return int(DS4TP_EIO);
    }
    const std::vector<uint64_t> counts = {1, 5, 4096, 16383, 16384, 16389, 40001};
    if (int rc = group_checks(g, counts, why, digest, BufferUse::Own, order)) return rc;
    uint64_t d2 = 0;
    if (int rc = group_checks(g, {16384, 3000}, why, d2, BufferUse::Group, order)) return rc;
    // The step histograms: a tiered rank's collectives timed in the host's
    // steps (a host of several ranks) and, on a leader, across hosts.
    ds4tp_stats st;
    st.size = sizeof st;
    if (ds4tp_group_stats_read(g, &st) != DS4TP_OK) {
      why = std::string("stats: ") + ds4tp_group_errmsg(g);
      return int(DS4TP_EIO);
    }
    int host = 0, local = 0, tiered = 0;
    ds4tp_group_topology(g, me, &host, &local, &tiered);
    const bool shares = tiered && order[size_t(host)].size() > 1;
    const bool leads = tiered && local == 0;
    if ((st.group_host_step.count > 0) != shares || (st.group_across_step.count > 0) != leads) {
      why = "step histograms: host " + std::to_string(st.group_host_step.count) + ", across " +
            std::to_string(st.group_across_step.count) + " calls on rank " + std::to_string(me);
      return int(DS4TP_EIO);
    }
    const int n = ds4tp_group_size(g);
    for (int root = 0; root < n; root++) {
      std::vector<uint8_t> b(70001, 0);
      if (me == root)
        for (size_t i = 0; i < b.size(); i++) b[i] = uint8_t(root * 13 + i);
      if (int rc = ds4tp_group_broadcast(g, b.data(), b.size(), root)) {
        why = "broadcast from " + std::to_string(root) + ": " + ds4tp_group_errmsg(g);
        return rc;
      }
      for (size_t i = 0; i < b.size(); i++)
        if (b[i] != uint8_t(root * 13 + i)) {
          why = "broadcast from " + std::to_string(root) + ": byte " + std::to_string(i);
          return int(DS4TP_EIO);
        }
    }
    return 0;
  };
}

// Ranks on the hosts `host_of` names ("host-0", "host-1", ...).
GroupEdit on_hosts(const std::vector<int> &host_of, const std::vector<int> &local) {
  return [host_of, local](int r, ds4tp_group_options &, ds4tp_identity &) {
    setenv("DS4TP_HOST_ID", ("host-" + std::to_string(host_of[size_t(r)])).c_str(), 1);
    if (!local.empty()) setenv("LOCAL_RANK", std::to_string(local[size_t(r)]).c_str(), 1);
  };
}

}  // namespace ds4tp::test
