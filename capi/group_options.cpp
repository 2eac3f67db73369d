// ds4tp_group_options to the group's options: defaults, the launcher's
// environment, range checks naming the field, and the older meaning of
// spin_us mapped for callers built before yield_us.
#include "group_options.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>

#include "auth/key.hpp"
#include "convert.hpp"
#include "group/rendezvous.hpp"
#include "handle.hpp"
#include "os/wait.hpp"

namespace ds4tp::capi {
namespace {

namespace grp = ds4tp::group;

int env_int(const char *a, const char *b, const char *c) {
  for (const char *name : {a, b, c}) {
    const char *v = std::getenv(name);
    if (v != nullptr && *v != 0) {
      char *end = nullptr;
      long x = std::strtol(v, &end, 10);
      if (end != v && *end == 0 && x >= 0 && x < 1 << 20) return int(x);
    }
  }
  return -1;
}

// The job's name ("NAME=value" for messages) from the options or, where
// they give none, from the launcher's environment; "" for none.
std::string job_name(const char *given) {
  if (given != nullptr) return *given != 0 ? std::string("job_id=") + given : std::string();
  for (const char *name : {"DS4TP_JOB_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID",
                           "OMPI_MCA_orte_ess_jobid", "PMIX_NAMESPACE"}) {
    const char *v = std::getenv(name);
    if (v == nullptr || *v == 0) continue;
    std::string job = std::string(name) + "=" + v;
    const char *step = std::getenv("SLURM_STEP_ID");  // one allocation, several steps
    if (std::strcmp(name, "SLURM_JOB_ID") == 0 && step != nullptr) job += std::string(".") + step;
    return job;
  }
  return {};
}

}  // namespace

int group_options_from_c(const ds4tp_group_options *copt, const ds4tp_identity *cid, bool local,
                   grp::Options &o, Error &err) {
  ds4tp_group_options c;
  ds4tp_group_options_init(&c);
  if (copt != nullptr && !ds4tp::capi::copy_sized(copt, c))
    return err.set(DS4TP_EINVAL, "group options: size {} (call ds4tp_group_options_init)",
                   copt->size);
  if (!local) {
    o.rank = c.rank >= 0 ? c.rank : env_int("RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID");
    o.size = c.group_size >= 0 ? c.group_size
                               : env_int("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS");
    if (o.size < 2 || o.size > grp::kMaxRanks)
      return err.set(DS4TP_EINVAL,
                     "group size {} outside 2..{} (set group_size, or WORLD_SIZE, "
                     "OMPI_COMM_WORLD_SIZE, SLURM_NTASKS)",
                     o.size, grp::kMaxRanks);
    if (o.rank < 0 || o.rank >= o.size)
      return err.set(DS4TP_EINVAL,
                     "rank {} outside 0..{} (set rank, or RANK, OMPI_COMM_WORLD_RANK, "
                     "SLURM_PROCID)",
                     o.rank, o.size - 1);
    const char *h = c.rendezvous_host != nullptr ? c.rendezvous_host : std::getenv("MASTER_ADDR");
    o.host = h != nullptr && *h != 0 ? h : "127.0.0.1";
    int port = c.rendezvous_port >= 0 ? c.rendezvous_port : env_int("MASTER_PORT", "", "");
    o.port = port >= 0 ? port : 29600;
    if (o.port > 65535) return err.set(DS4TP_EINVAL, "rendezvous port {}", o.port);
    if (c.transport < DS4TP_TRANSPORT_AUTO || c.transport > DS4TP_TRANSPORT_RDMA)
      return err.set(DS4TP_EINVAL, "group transport {} (auto, tcp, shm or rdma)", c.transport);
    o.transport = c.transport;
    o.job_name = job_name(c.job_id);
    o.job = grp::job_token(o.job_name);
  }
  if (c.connect_timeout_ms <= 0 || c.op_timeout_ms <= 0)
    return err.set(DS4TP_EINVAL, "group deadlines must be > 0 (connect {} ms, op {} ms)",
                   c.connect_timeout_ms, c.op_timeout_ms);
  o.connect_timeout_ns = uint64_t(c.connect_timeout_ms) * 1'000'000;
  o.op_timeout_ns = uint64_t(c.op_timeout_ms) * 1'000'000;
  if (c.chunk_bytes < 4096 || c.chunk_bytes % 64 != 0 || c.chunk_bytes > (256u << 20))
    return err.set(DS4TP_EINVAL, "chunk_bytes {}: 4096..256 MiB, a multiple of 64",
                   c.chunk_bytes);
  o.chunk_bytes = c.chunk_bytes;
  if ((c.psk == nullptr) != (c.psk_bytes == 0))
    return err.set(DS4TP_EINVAL, "group psk and psk_bytes must be set together");
  // A struct that ends before yield_us was filled with the older meaning
  // of spin_us (0 default, -1 never): mapped to today's.
  if (copt != nullptr && copt->size < offsetof(ds4tp_group_options, yield_us) + sizeof(int32_t))
    c.spin_us = c.spin_us == 0 ? DS4TP_SPIN_ADAPTIVE : c.spin_us == -1 ? 0 : c.spin_us;
  if (c.spin_us != DS4TP_SPIN_ADAPTIVE && c.spin_us != DS4TP_SPIN_ALWAYS &&
      c.spin_us != DS4TP_SPIN_NEVER && (c.spin_us < 0 || c.spin_us > 10'000'000))
    return err.set(DS4TP_EINVAL,
                   "group spin_us {} must be 0..10000000, DS4TP_SPIN_ADAPTIVE (-1), "
                   "DS4TP_SPIN_ALWAYS (-2) or DS4TP_SPIN_NEVER (-3)",
                   c.spin_us);
  o.spin_ns = c.spin_us == DS4TP_SPIN_ADAPTIVE ? grp::kSpinAdaptive
              : c.spin_us == DS4TP_SPIN_ALWAYS ? grp::kSpinAlways
              : c.spin_us == DS4TP_SPIN_NEVER  ? grp::kSpinNever
                                               : int64_t(c.spin_us) * 1000;
  if (c.yield_us < -1 || c.yield_us > 10'000'000)
    return err.set(DS4TP_EINVAL, "group yield_us {} must be -1 (default) or 0..10000000",
                   c.yield_us);
  // A rank that must never spin must not busy-wait in sched_yield() either.
  if (c.spin_us == DS4TP_SPIN_NEVER && c.yield_us > 0)
    return err.set(DS4TP_EINVAL,
                   "group yield_us {} with spin_us DS4TP_SPIN_NEVER: a rank that never spins "
                   "does not yield either (set yield_us to -1 or 0)",
                   c.yield_us);
  o.yield_ns = c.yield_us < 0 ? -1 : int64_t(c.yield_us) * 1000;
  if (c.peer_silence_ms < 200 || c.peer_silence_ms > 600000)
    return err.set(DS4TP_EINVAL, "peer_silence_ms {}: 200..600000", c.peer_silence_ms);
  o.peer_silence_ns = uint64_t(c.peer_silence_ms) * 1'000'000;
  if (c.peer_arrival_timeout_ms != DS4TP_ARRIVAL_UNLIMITED &&
      (c.peer_arrival_timeout_ms <= 0 || c.peer_arrival_timeout_ms > 24 * 3600 * 1000))
    return err.set(DS4TP_EINVAL, "group peer_arrival_timeout_ms {} must be 1..86400000 ms or "
                   "DS4TP_ARRIVAL_UNLIMITED (-1)", c.peer_arrival_timeout_ms);
  o.arrival_ns = c.peer_arrival_timeout_ms == DS4TP_ARRIVAL_UNLIMITED
                     ? os::kNoDeadline
                     : std::max(o.op_timeout_ns, uint64_t(c.peer_arrival_timeout_ms) * 1'000'000);
  std::string source;
  if (int rc = ds4tp::auth::load_key(c.psk, c.psk_bytes, nullptr, o.key, source, err)) return rc;
  if (cid != nullptr)
    if (int rc = ds4tp::capi::identity_from_c(cid, o.id, err)) return rc;
  return DS4TP_OK;
}

}  // namespace ds4tp::capi
