// Pair bring-up: the hello this rank offers, the transport set-up after
// the judgement, and the control plane that starts once both are up.
#include "pair/pair.hpp"

#include <algorithm>
#include <cstdlib>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "common/clock.hpp"
#include "common/env.hpp"
#include "common/status.hpp"
#include "connect/negotiate.hpp"
#include "os/os.hpp"
#include "os/spin_budget.hpp"
#include "os/wait.hpp"
#include "session/session.hpp"
#include "talk/silence.hpp"
#include "talk/liveness.hpp"
#include "link/descriptor.hpp"

namespace ds4tp {

std::array<uint8_t, 16> host_identity() {
  std::string seed = os::host_seed();
  // DS4TP_HOST_ID: ranks on one host that claim different ids (containers
  // kept apart, tests posing as hosts) are taken for different hosts.
  if (const char *claim = std::getenv("DS4TP_HOST_ID"); claim != nullptr && *claim != 0) {
    seed += "/test:";
    seed += claim;
  }
  // Two FNV-1a lanes: enough to tell hosts apart, not a security measure.
  uint64_t a = 1469598103934665603ull, b = 0x9e3779b97f4a7c15ull;
  for (unsigned char c : seed) {
    a = (a ^ c) * 1099511628211ull;
    b = (b ^ c) * 0x100000001b3ull + 0x7f4a7c15ull;
  }
  std::array<uint8_t, 16> out{};
  for (int i = 0; i < 8; i++) {
    out[i] = uint8_t(a >> (8 * i));
    out[8 + i] = uint8_t(b >> (8 * i));
  }
  return out;
}

namespace {

// The control channel's spin under the adaptive default: the fixed 200 us
// that was the default before it (frames are rare next to gates).
constexpr uint64_t kAdaptiveControlSpinNs = 200000;

uint64_t random_cookie() {
  uint64_t v = 0;
  while (v == 0) {
    if (!os::random_bytes(&v, sizeof v)) v = now_ns() ^ uint64_t(getpid()) << 32;
  }
  return v;
}

}  // namespace

int Pair::connect_once(Error &err) {
  if (connected_ || !bringup_)
    return err.set(DS4TP_ESTATE, "ds4tp_connect was already called on this pair");
  // Operator settings, read as the pair connects (docs/TRANSPORTS.md).
  if (const auto k = env_number("DS4TP_ROW_LINK"); k && *k >= 0) opt_.row_link = int(*k);
  if (const auto n = env_number("DS4TP_FAILOVER_DRILL"); n && *n > 0)
    opt_.failover_drill = uint64_t(*n);
  wire::Hello mine;
  mine.role = uint8_t(opt_.role);
  mine.transport_request = uint8_t(opt_.transport);
  const uint64_t started = now_ns();
  // Every backend this rank can run is offered; one that was not probed
  // (a costly check this rank's request rules out) is not. The reasons
  // are kept for the error (an rdma request this rank cannot serve) or
  // logged once (auto).
  namespace tr = ds4tp::link;
  tr::Query query{&layout_, opt_.rdma_device, opt_.rdma_port, opt_.rdma_gid_index};
  std::vector<tr::Availability> offers(tr::all().size());
  auto index_of = [](const tr::Descriptor *d) {
    return size_t(std::find(tr::all().begin(), tr::all().end(), d) - tr::all().begin());
  };
  auto offer = [&](int id) -> const tr::Availability & {
    static const tr::Availability kNone;
    const tr::Descriptor *d = tr::find(id);
    return d != nullptr ? offers[index_of(d)] : kNone;
  };
  mine.caps = 0;
  for (size_t i = 0; i < offers.size(); i++) {
    const tr::Descriptor &d = *tr::all()[i];
    if (d.probe_on_request && opt_.transport != DS4TP_TRANSPORT_AUTO && opt_.transport != d.id)
      continue;
    d.available(query, offers[i]);
    if (offers[i].usable)
      mine.caps |= d.cap;
    else if (d.probe_on_request && opt_.transport == DS4TP_TRANSPORT_AUTO)
      log_.info("{} not offered, auto will use shm or tcp: {}", d.name, offers[i].why);
  }
  if (opt_.failover) mine.caps |= wire::kCapStandby | wire::kCapLostLinks | wire::kCapRailSync;
  if (!opt_.rails.empty()) mine.caps |= wire::kCapRails;
  mine.caps |= (uint32_t(opt_.rdma_rails.size()) << wire::kCapRdmaRailsShift) &
               wire::kCapRdmaRailsMask;  // at most 7 (options_from_c)
  mine.caps |= wire::kCapRailRows;
  mine.host_id = host_identity();
  mine.cookie = opt_.role == DS4TP_ROLE_LEADER ? random_cookie() : 0;
  mine.id = id_;

  int chosen = DS4TP_TRANSPORT_TCP;
  connect::HelloJudge judge = [&](const wire::Preamble &, const wire::Hello &peer,
                                  Error &e) {
    return connect::judge_hello(mine, peer, offer(DS4TP_TRANSPORT_RDMA).why, chosen, e);
  };
  connect::BringupResult res;
  int rc = bringup_->run(mine, judge, res, err);
  bringup_.reset();  // closes the listener: a pair takes exactly one worker
  if (rc != DS4TP_OK) return rc;

  peer_ = std::move(res.peer);
  control_ = std::move(res.control);
  data_ = std::move(res.data);
  transport_kind_ = chosen;

  tr::Connection c;
  c.data = std::move(data_);
  c.control_fd = control_.get();
  c.rank = rank();
  c.cookie = opt_.role == DS4TP_ROLE_LEADER ? mine.cookie : peer_.cookie;
  c.layout = layout_;
  c.schedule = schedule_;
  c.data_config.gate_timeout_ns = ms_to_ns(opt_.gate_timeout_ms);
  c.data_config.big_gate_timeout_ns = ms_to_ns(opt_.big_gate_timeout_ms);
  // Adaptive (the default): the transport learns its window, at most 1 ms.
  c.data_config.adaptive_spin = opt_.spin_us == DS4TP_SPIN_ADAPTIVE;
  c.data_config.spin_ns = c.data_config.adaptive_spin        ? os::SpinBudget::kDefaultCapNs
                          : opt_.spin_us == DS4TP_SPIN_ALWAYS ? os::kSpinForever
                          : opt_.spin_us == DS4TP_SPIN_NEVER  ? 0
                                                              : uint64_t(opt_.spin_us) * 1000;
  c.data_config.tally = stats_.wait_tally(0);
  // Waits judged by liveness: a live peer may arrive this late; a silent
  // one ends the wait after peer_silence_ms (the watcher's verdict).
  c.data_config.arrival_ns = opt_.peer_arrival_timeout_ms == DS4TP_ARRIVAL_UNLIMITED
                                 ? os::kNoDeadline
                                 : ms_to_ns(opt_.peer_arrival_timeout_ms);
  c.data_config.peer = &peer_state_;
  peer_state_.silence_ns = ms_to_ns(opt_.peer_silence_ms);
  peer_state_.peer = opt_.role == DS4TP_ROLE_LEADER ? "worker" : "leader";
  c.deadline_ns = std::max(started + ms_to_ns(opt_.connect_timeout_ms),
                           now_ns() + ms_to_ns(opt_.hello_timeout_ms));
  c.frame_timeout_ns = ms_to_ns(opt_.frame_timeout_ms);
  c.forced = mine.transport_request == chosen || peer_.transport_request == chosen;
  c.log = log_;
  // Rails need both ranks to list them (the same list, checked as the
  // links open); the tcp transport's set-up opens and measures them
  // (link/tcp/rails.hpp).
  if (((mine.caps ^ peer_.caps) & wire::kCapRails) != 0) {
    const char *me = rank() == 0 ? "leader" : "worker";
    const bool mine_has = (mine.caps & wire::kCapRails) != 0;
    return err.set(DS4TP_EINVAL, "rails: the {} lists rails, the {} none; give both ranks the "
                   "same list",
                   mine_has ? me : peer_state_.peer, mine_has ? peer_state_.peer : me);
  }
  if ((mine.caps & wire::kCapRails) != 0) c.rails = opt_.rails;
  // RDMA rails pair by their place in each rank's list: the counts must
  // match (an older peer offers none).
  const uint32_t my_rdma_rails = (mine.caps & wire::kCapRdmaRailsMask) >> wire::kCapRdmaRailsShift;
  const uint32_t peer_rdma_rails =
      (peer_.caps & wire::kCapRdmaRailsMask) >> wire::kCapRdmaRailsShift;
  if (chosen == DS4TP_TRANSPORT_RDMA && my_rdma_rails != peer_rdma_rails)
    return err.set(DS4TP_EINVAL, "rdma_rails: this rank ({}) lists {}, the {} {}; rail k of one "
                   "rank pairs with rail k of the other, so give both ranks as many",
                   rank() == 0 ? "leader" : "worker", my_rdma_rails, peer_state_.peer,
                   peer_rdma_rails);
  if (chosen == DS4TP_TRANSPORT_RDMA) c.rdma_rails = opt_.rdma_rails;
  c.rail_rows = (mine.caps & peer_.caps & wire::kCapRailRows) != 0;
  c.row_link = opt_.row_link;
  const tr::Descriptor *d = tr::find(chosen);
  if (d == nullptr)
    return err.set(DS4TP_EUNSUPPORTED, "transport {} is not built into this library",
                   transport_name(chosen));
  std::unique_ptr<tr::State> prepared;
  std::string fallback;
  if ((rc = d->setup(c, offer(d->id), prepared, fallback, err))) return rc;
  if (!prepared && !fallback.empty()) {  // both ranks saw the same failure: tcp on the same socket
    log_.warn("{} unavailable, using tcp: {}", d->what, fallback);
    d = &tr::kTcp;
    transport_kind_ = d->id;
    if ((rc = d->setup(c, offer(d->id), prepared, fallback, err))) return rc;
  }
  if (d->id != DS4TP_TRANSPORT_TCP && !c.rails.empty())
    log_.warn("rails stripe tcp pairs; this pair runs {}: the rails are not used", d->name);
  if (d->id != DS4TP_TRANSPORT_RDMA && !opt_.rdma_rails.empty())
    log_.warn("rdma_rails stripe rdma pairs; this pair runs {}: they are not used", d->name);
  // Both ranks decide alike whether to open a standby beside the primary:
  // rdma, shm, or tcp rails (a lost row rail fails over like a primary).
  const bool striped = d->id == DS4TP_TRANSPORT_TCP && !c.rails.empty();
  const bool standby = (d->id != DS4TP_TRANSPORT_TCP || striped) &&
                       (mine.caps & peer_.caps & wire::kCapStandby) != 0;
  net::Fd primary_data;
  if (standby) primary_data = net::Fd(::fcntl(c.data.get(), F_DUPFD_CLOEXEC, 0));
  data_config_ = c.data_config;
  link_ = d->make(c, std::move(prepared));
  if (standby) {
    if ((rc = add_standby(c, std::move(primary_data), err))) return rc;
  } else if (d->id != DS4TP_TRANSPORT_TCP || striped) {
    log_.info("no failover: {}", !opt_.failover ? "this rank's options turn it off"
                                                : "the peer does not offer a standby link");
  }
  stats::Sources src;
  src.heartbeats = &peer_state_.heartbeats;
  src.heartbeats_missed = &peer_state_.heartbeats_missed;
  src.rdma_retries = link_->setup_retries();
  src.failovers = &failovers_;
  stats_.set_sources(src);
  if (int crc = start_control_plane(err)) return crc;
  connected_ = true;
  log_.info("pair up: rank {} of 2, transport {}, gate timeout {} ms, peer ctx {}",
            rank(), link_->name(), opt_.gate_timeout_ms, peer_.id.ctx_size);
  if (std::string p = stats::trace_path_from_env(rank()); !p.empty() && !trace_) {
    Error te;
    if (trace_start(p, te) != DS4TP_OK) log_.warn("DS4TP_TRACE: {}", te.message);
  }
  return DS4TP_OK;
}

int Pair::start_control_plane(Error &err) {
  session::SessionConfig sc;
  sc.role = opt_.role;
  sc.max_frame_bytes = opt_.max_frame_bytes;
  sc.frame_timeout_ms = opt_.frame_timeout_ms;
  // Control frames keep a fixed spin: the adaptive default's is the old
  // 200 us, and so is always-spin's (a worker waits for the next command
  // for as long as its engine is idle: that spin would have no end).
  sc.spin_ns = opt_.spin_us == DS4TP_SPIN_ADAPTIVE || opt_.spin_us == DS4TP_SPIN_ALWAYS
                   ? kAdaptiveControlSpinNs
               : opt_.spin_us == DS4TP_SPIN_NEVER ? 0
                                                  : uint64_t(opt_.spin_us) * 1000;
  sc.n_layer = layout_.slots / 2;
  sc.n_embd = id_.n_embd;
  sc.peer = &peer_state_;
  sc.arrival_ms = opt_.peer_arrival_timeout_ms;  // DS4TP_ARRIVAL_UNLIMITED is -1
  sc.stats = &stats_;
  session_ = std::make_unique<session::Session>(control_.get(), sc, log_);
  talk::LivenessConfig lc;
  lc.role = opt_.role;
  lc.max_frame_bytes = opt_.max_frame_bytes;
  lc.channel = &session_->channel();
  lc.peer = &peer_state_;
  lc.heartbeat_ns = talk::beat_period(100000000, peer_state_.silence_ns);
  talk::LivenessHooks hooks;
  session::Session *s = session_.get();
  hooks.close_expected = [s] { return s->stopped(); };
  hooks.dead = [this, s](int code, const std::string &why, int status) {
    if (failed()) return;  // the first failure's message stays the one users read
    if (status != 0) s->set_remote_status(status);
    Error e;
    e.code = code;
    e.message = why;
    record(e, true);
  };
  return talk::Liveness::start(control_.get(), lc, std::move(hooks), log_, liveness_, err);
}

}  // namespace ds4tp
