#include "pair/pair.hpp"

#include <cstdlib>
#include <cstring>
#include <fstream>

#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/clock.hpp"
#include "control/negotiate.hpp"
#include "transport/tcp/tcp_transport.hpp"

namespace ds4tp {

std::array<uint8_t, 16> host_identity() {
  std::string seed;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::getline(f, seed);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  seed += '/';
  seed += host;
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

uint64_t random_cookie() {
  uint64_t v = 0;
  while (v == 0) {
    if (getrandom(&v, sizeof v, 0) != sizeof v) v = now_ns() ^ uint64_t(getpid()) << 32;
  }
  return v;
}

}  // namespace

int Pair::create(const Options &opt, wire::Identity id, std::unique_ptr<Pair> &out,
                 Error &err) {
  std::unique_ptr<Pair> p(new Pair);
  p->opt_ = opt;
  p->log_ = Logger(opt.log_fn, opt.log_user_data, opt.log_level);
  if (!slab::compute_layout(id.n_layer, id.n_embd, p->layout_))
    return err.set(DS4TP_EINVAL,
                   "identity: n_layer {} and n_embd {} must be in 1..{} and 1..{}",
                   id.n_layer, id.n_embd, slab::kMaxLayers, slab::kMaxEmbd);
  slab::Schedule &s = p->schedule_;
  s.slots = p->layout_.slots;
  s.start = id.gate_slot_start;
  s.step = id.gate_slot_step;
  s.per_token = id.gates_per_token;
  for (uint32_t i = 0; i < slab::kMaskWords; i++) s.mask[i] = id.gate_slot_mask[i];
  std::string bad = slab::validate_schedule(s);
  if (!bad.empty()) return err.set(DS4TP_EINVAL, "identity: {}", bad);
  p->id_ = std::move(id);

  control::BringupConfig bc;
  bc.role = opt.role;
  bc.host = opt.role == DS4TP_ROLE_LEADER ? opt.listen_host : opt.leader_host;
  bc.port = opt.role == DS4TP_ROLE_LEADER ? opt.listen_port : opt.leader_port;
  bc.connect_timeout_ms = opt.connect_timeout_ms;
  bc.hello_timeout_ms = opt.hello_timeout_ms;
  p->bringup_ = std::make_unique<control::Bringup>(bc, p->log_);
  if (opt.role == DS4TP_ROLE_LEADER) {
    int rc = p->bringup_->listen(err);
    if (rc != DS4TP_OK) return rc;
  }
  out = std::move(p);
  return DS4TP_OK;
}

Pair::~Pair() {
  transport_.reset();
  if (owned_slab_ != nullptr) munmap(owned_slab_, owned_bytes_);
}

int Pair::port() const {
  if (opt_.role == DS4TP_ROLE_LEADER) return bringup_ ? bringup_->port() : opt_.listen_port;
  return opt_.leader_port;
}

void Pair::record(const Error &e, bool fatal) {
  std::lock_guard<std::mutex> lock(msg_mu_);
  message_ = e.message;
  if (fatal && !failed_.load(std::memory_order_relaxed)) {
    failure_ = e.message;
    failed_.store(true, std::memory_order_release);
  }
}

void Pair::mark_failed(const std::string &reason) {
  Error e;
  e.set(DS4TP_EFAILED, "marked failed by the engine: {}", reason.empty() ? "no reason given" : reason);
  record(e, true);
}

std::string Pair::message() const {
  std::lock_guard<std::mutex> lock(msg_mu_);
  return message_;
}

int Pair::refuse(Error &err) const {
  std::lock_guard<std::mutex> lock(msg_mu_);
  return err.set(DS4TP_EFAILED, "the pair failed earlier and is unusable: {}", failure_);
}

int Pair::connect(Error &err) {
  if (connected_ || !bringup_)
    return err.set(DS4TP_ESTATE, "ds4tp_connect was already called on this pair");
  wire::Hello mine;
  mine.role = uint8_t(opt_.role);
  mine.transport_request = uint8_t(opt_.transport);
  mine.caps = wire::kCapTcp;
  mine.host_id = host_identity();
  mine.cookie = opt_.role == DS4TP_ROLE_LEADER ? random_cookie() : 0;
  mine.id = id_;

  int chosen = DS4TP_TRANSPORT_TCP;
  control::HelloJudge judge = [&](const wire::Preamble &, const wire::Hello &peer,
                                  Error &e) {
    return control::judge_hello(mine, peer, chosen, e);
  };
  control::BringupResult res;
  int rc = bringup_->run(mine, judge, res, err);
  bringup_.reset();  // closes the listener: a pair takes exactly one worker
  if (rc != DS4TP_OK) return rc;

  peer_ = std::move(res.peer);
  control_ = std::move(res.control);
  data_ = std::move(res.data);
  transport_kind_ = chosen;

  DataConfig dc;
  dc.gate_timeout_ns = ms_to_ns(opt_.gate_timeout_ms);
  dc.big_gate_timeout_ns = ms_to_ns(opt_.big_gate_timeout_ms);
  dc.spin_ns = uint64_t(opt_.spin_us) * 1000;
  switch (chosen) {
    case DS4TP_TRANSPORT_TCP:
      transport_ = make_tcp_transport(std::move(data_), dc);
      break;
    default:
      return err.set(DS4TP_EUNSUPPORTED, "transport {} is not built into this library",
                     ds4tp_transport_name(chosen));
  }
  connected_ = true;
  log_.info("pair up: rank {} of 2, transport {}, gate timeout {} ms, peer ctx {}",
            rank(), transport_->name(), opt_.gate_timeout_ms, peer_.id.ctx_size);
  return DS4TP_OK;
}

int Pair::attach_slab(void *base, uint64_t bytes, Error &err) {
  if (!connected_) return err.set(DS4TP_ESTATE, "attach the slab after ds4tp_connect");
  if (slab_ != nullptr) return err.set(DS4TP_ESTATE, "a slab is already attached; detach it first");
  if (base == nullptr) {
    if (owned_slab_ == nullptr) {
      void *m = mmap(nullptr, layout_.total, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (m == MAP_FAILED)
        return err.set(DS4TP_ENOMEM, "cannot allocate a {} byte slab: {}", layout_.total,
                       std::strerror(errno));
      owned_slab_ = m;
      owned_bytes_ = layout_.total;
    }
    base = owned_slab_;
  } else {
    if (reinterpret_cast<uintptr_t>(base) % slab::kVectorAlign != 0)
      return err.set(DS4TP_EINVAL, "slab base {} is not {}-byte aligned", base,
                     slab::kVectorAlign);
    if (bytes < layout_.total)
      return err.set(DS4TP_EINVAL, "slab of {} bytes is smaller than the {} bytes the layout needs",
                     bytes, layout_.total);
  }
  auto *b = static_cast<uint8_t *>(base);
  // Bookkeeping regions start clean whatever the engine left there.
  std::memset(b + layout_.in_seq, 0, uint64_t(layout_.slots) * layout_.flag_stride);
  std::memset(b + layout_.token, 0, 64);
  int rc = transport_->attach(b, layout_, err);
  if (rc != DS4TP_OK) return rc;
  slab_ = b;
  return DS4TP_OK;
}

void Pair::detach_slab() {
  if (slab_ == nullptr) return;
  transport_->detach();
  slab_ = nullptr;
}

int Pair::gate(uint32_t layer, uint32_t gate, uint64_t seq, Error &err) {
  if (slab_ == nullptr) return err.set(DS4TP_ESTATE, "gate before ds4tp_attach_slab");
  if (layer >= layout_.slots / 2 || gate >= DS4TP_GATES_PER_LAYER)
    return err.set(DS4TP_EINVAL, "gate (layer {}, gate {}) is outside {} layers x 2 gates",
                   layer, gate, layout_.slots / 2);
  uint32_t slot = layer * 2 + gate;
  if (seq != last_row_seq_ + 1)
    return err.set(DS4TP_EINVAL,
                   "row gate seq {} for layer {} gate {}: seqs must rise by one per gate "
                   "(last was {})",
                   seq, layer, gate, last_row_seq_);
  int64_t want = slab::slot_for_seq(schedule_, seq);
  if (want != int64_t(slot))
    return err.set(DS4TP_EINVAL,
                   "row gate seq {} must hit slot {} (layer {}, gate {}) by the identity's "
                   "schedule, but the call is for layer {} gate {}",
                   seq, want, want / 2, want % 2, layer, gate);
  last_row_seq_ = seq;
  return transport_->gate(layer, gate, slot, seq, err);
}

int Pair::batch_gate(uint32_t index, uint32_t rows, uint64_t seq, Error &err) {
  if (slab_ == nullptr) return err.set(DS4TP_ESTATE, "batch gate before ds4tp_attach_slab");
  if (index >= layout_.batch_gates)
    return err.set(DS4TP_EINVAL, "batch gate index {} is outside 0..{}", index,
                   layout_.batch_gates - 1);
  if (rows == 0 || rows > layout_.batch_rows)
    return err.set(DS4TP_EINVAL, "batch gate rows {} outside 1..{}", rows, layout_.batch_rows);
  if (seq == 0) return err.set(DS4TP_EINVAL, "batch gate seq must be nonzero");
  return transport_->batch_gate(index, rows, seq, err);
}

int Pair::big_gate(uint32_t layer, uint64_t seq, const void *out, void *in, uint64_t bytes,
                   Error &err) {
  if (!connected_) return err.set(DS4TP_ESTATE, "big gate before ds4tp_connect");
  if (slab_ == nullptr) return err.set(DS4TP_ESTATE, "big gate before ds4tp_attach_slab");
  if (bytes > 0 && (out == nullptr || in == nullptr))
    return err.set(DS4TP_EINVAL, "big gate buffers must not be NULL");
  auto o = reinterpret_cast<uintptr_t>(out), i = reinterpret_cast<uintptr_t>(in);
  if (bytes > 0 && o < i + bytes && i < o + bytes)
    return err.set(DS4TP_EINVAL, "big gate out and in buffers overlap");
  if (seq == 0) return err.set(DS4TP_EINVAL, "big gate seq must be nonzero");
  return transport_->big_gate(layer, seq, out, in, bytes, err);
}

}  // namespace ds4tp
