// Options, identity and slab layout between C and the library, and the C
// calls that only convert: *_init, schedule and layout arithmetic,
// transport names and availability.
#include "convert.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "auth/key.hpp"
#include "connect/negotiate.hpp"
#include "handle.hpp"
#include "slab/schedule.hpp"
#include "link/descriptor.hpp"
#include "common/status.hpp"
#include "link/probe.hpp"
#include "link/rdma/probe.hpp"

namespace ds4tp::capi {

namespace {

bool valid_ms(int32_t v) { return v > 0 && v <= 24 * 3600 * 1000; }

// The identity's gate schedule, or false when it is not a valid one.
bool to_schedule(const ds4tp_identity *cid, slab::Schedule &s) {
  ds4tp_identity c;
  ds4tp_identity_init(&c);
  if (!copy_sized(cid, c) || c.n_layer == 0 || c.n_layer > slab::kMaxLayers) return false;
  s.slots = c.n_layer * 2;
  s.start = c.gate_slot_start;
  s.step = c.gate_slot_step;
  s.per_token = c.gates_per_token;
  for (int i = 0; i < DS4TP_GATE_MASK_WORDS; i++) s.mask[i] = c.gate_slot_mask[i];
  return slab::validate_schedule(s).empty();
}

}  // namespace

int identity_from_c(const ds4tp_identity *cid, wire::Identity &id, Error &err) {
  ds4tp_identity c;
  ds4tp_identity_init(&c);
  if (!copy_sized(cid, c))
    return err.set(DS4TP_EINVAL, "identity size field {} is invalid: call ds4tp_identity_init",
                   cid->size);
  if (c.engine_blob_bytes > DS4TP_ENGINE_BLOB_MAX)
    return err.set(DS4TP_EINVAL, "engine_blob_bytes {} exceeds {}", c.engine_blob_bytes,
                   DS4TP_ENGINE_BLOB_MAX);
  if (c.engine_blob_bytes > 0 && c.engine_blob == nullptr)
    return err.set(DS4TP_EINVAL, "engine_blob is NULL but engine_blob_bytes is {}",
                   c.engine_blob_bytes);
  id.model_bytes = c.model_bytes;
  id.model_id = c.model_id;
  id.n_layer = c.n_layer;
  id.n_embd = c.n_embd;
  id.n_vocab = c.n_vocab;
  id.quant_bits = c.quant_bits;
  id.ctx_size = c.ctx_size;
  id.gate_slot_start = c.gate_slot_start;
  id.gate_slot_step = c.gate_slot_step;
  id.gates_per_token = c.gates_per_token;
  for (int i = 0; i < DS4TP_GATE_MASK_WORDS; i++) id.gate_slot_mask[i] = c.gate_slot_mask[i];
  id.features = c.features;
  const auto *b = static_cast<const uint8_t *>(c.engine_blob);
  id.blob.assign(b, b + c.engine_blob_bytes);
  return DS4TP_OK;
}

// "dev[:port[:gid]]" entries, at most 7, none twice.
static int rdma_rails_from_c(const char *list, std::vector<std::string> &out, Error &err) {
  if (list == nullptr || *list == 0) return DS4TP_OK;
  const std::string s = list;
  for (size_t at = 0; at <= s.size();) {
    const size_t end = std::min(s.find(',', at), s.size());
    std::string r = s.substr(at, end - at);
    at = end + 1;
    rdma::ProbeRequest req;
    if (!rdma::parse_rail(r, req))
      return err.set(DS4TP_EINVAL, "options.rdma_rails: '{}' is not device[:port[:gid_index]] "
                     "(port 1..255, gid_index 0..65535)", r);
    if (std::find(out.begin(), out.end(), r) != out.end())
      return err.set(DS4TP_EINVAL, "options.rdma_rails: {} is listed twice", r);
    out.push_back(r);
  }
  if (out.size() > 7)
    return err.set(DS4TP_EINVAL, "options.rdma_rails lists {} ports: at most 7", out.size());
  return DS4TP_OK;
}

int options_from_c(const ds4tp_options *copt, Options &o, Error &err) {
  ds4tp_options c;
  ds4tp_options_init(&c);
  if (!copy_sized(copt, c))
    return err.set(DS4TP_EINVAL, "options size field {} is invalid: call ds4tp_options_init",
                   copt->size);
  if (c.role != DS4TP_ROLE_LEADER && c.role != DS4TP_ROLE_WORKER)
    return err.set(DS4TP_EINVAL, "options.role must be DS4TP_ROLE_LEADER or DS4TP_ROLE_WORKER (got {})",
                   c.role);
  if (c.transport < DS4TP_TRANSPORT_AUTO || c.transport > DS4TP_TRANSPORT_RDMA)
    return err.set(DS4TP_EINVAL, "options.transport {} is not a ds4tp_transport", c.transport);
  if (c.role == DS4TP_ROLE_LEADER) {
    if (c.listen_port < 0 || c.listen_port > 65535)
      return err.set(DS4TP_EINVAL, "options.listen_port {} outside 0..65535", c.listen_port);
  } else if (c.leader_port <= 0 || c.leader_port > 65535) {
    return err.set(DS4TP_EINVAL, "options.leader_port {} outside 1..65535 (the worker needs the leader's port)",
                   c.leader_port);
  }
  struct {
    const char *name;
    int32_t v;
  } ms[] = {{"connect_timeout_ms", c.connect_timeout_ms},
            {"hello_timeout_ms", c.hello_timeout_ms},
            {"gate_timeout_ms", c.gate_timeout_ms},
            {"big_gate_timeout_ms", c.big_gate_timeout_ms},
            {"frame_timeout_ms", c.frame_timeout_ms}};
  for (auto &m : ms)
    if (!valid_ms(m.v))
      return err.set(DS4TP_EINVAL, "options.{} {} must be 1..86400000 ms", m.name, m.v);
  if (c.peer_silence_ms < 200 || c.peer_silence_ms > 600000)
    return err.set(DS4TP_EINVAL, "options.peer_silence_ms {} outside 200..600000", c.peer_silence_ms);
  if (c.peer_arrival_timeout_ms != DS4TP_ARRIVAL_UNLIMITED && !valid_ms(c.peer_arrival_timeout_ms))
    return err.set(DS4TP_EINVAL,
                   "options.peer_arrival_timeout_ms {} must be 1..86400000 ms or "
                   "DS4TP_ARRIVAL_UNLIMITED (-1)",
                   c.peer_arrival_timeout_ms);
  if (c.spin_us != DS4TP_SPIN_ADAPTIVE && c.spin_us != DS4TP_SPIN_ALWAYS &&
      c.spin_us != DS4TP_SPIN_NEVER && (c.spin_us < 0 || c.spin_us > 10000000))
    return err.set(DS4TP_EINVAL,
                   "options.spin_us {} must be 0..10000000, DS4TP_SPIN_ADAPTIVE (-1), "
                   "DS4TP_SPIN_ALWAYS (-2) or DS4TP_SPIN_NEVER (-3)",
                   c.spin_us);
  if (c.rdma_port < 1 || c.rdma_port > 255)
    return err.set(DS4TP_EINVAL, "options.rdma_port {} outside 1..255", c.rdma_port);
  if (c.rdma_gid_index < -1 || c.rdma_gid_index > 65535)
    return err.set(DS4TP_EINVAL, "options.rdma_gid_index {} outside -1 (pick)..65535",
                   c.rdma_gid_index);
  if (c.log_level < DS4TP_LOG_ERROR || c.log_level > DS4TP_LOG_DEBUG)
    return err.set(DS4TP_EINVAL, "options.log_level {} outside 0..3", c.log_level);
  if (c.failover != 0 && c.failover != 1)
    return err.set(DS4TP_EINVAL, "options.failover {} must be 0 or 1", c.failover);
  if (c.max_frame_bytes < 4096 || c.max_frame_bytes > (1u << 30))
    return err.set(DS4TP_EINVAL, "options.max_frame_bytes {} outside 4096..{}", c.max_frame_bytes,
                   1u << 30);
  o = Options{};  // NULL strings keep the defaults
  o.role = c.role;
  o.transport = c.transport;
  if (c.listen_host != nullptr) o.listen_host = c.listen_host;
  o.listen_port = c.listen_port;
  if (c.leader_host != nullptr) o.leader_host = c.leader_host;
  o.leader_port = c.leader_port;
  o.connect_timeout_ms = c.connect_timeout_ms;
  o.hello_timeout_ms = c.hello_timeout_ms;
  o.gate_timeout_ms = c.gate_timeout_ms;
  o.big_gate_timeout_ms = c.big_gate_timeout_ms;
  o.frame_timeout_ms = c.frame_timeout_ms;
  o.peer_silence_ms = c.peer_silence_ms;
  o.peer_arrival_timeout_ms = c.peer_arrival_timeout_ms;
  o.spin_us = c.spin_us;
  o.log_fn = c.log_fn;
  o.log_user_data = c.log_user_data;
  o.log_level = c.log_level;
  o.max_frame_bytes = c.max_frame_bytes;
  o.failover = c.failover != 0;
  if (c.rails != nullptr && *c.rails != 0) {
    std::string list = c.rails;
    for (size_t at = 0; at <= list.size();) {
      size_t end = std::min(list.find(',', at), list.size());
      std::string a = list.substr(at, end - at);
      in_addr parsed{};
      if (inet_pton(AF_INET, a.c_str(), &parsed) != 1)
        return err.set(DS4TP_EINVAL, "options.rails: '{}' is not an IPv4 address", a);
      if (std::find(o.rails.begin(), o.rails.end(), a) != o.rails.end())
        return err.set(DS4TP_EINVAL, "options.rails: {} is listed twice", a);
      o.rails.push_back(a);
      at = end + 1;
    }
    if (o.rails.size() > 7)
      return err.set(DS4TP_EINVAL, "options.rails lists {} addresses: at most 7", o.rails.size());
  }
  if (int rc = rdma_rails_from_c(c.rdma_rails, o.rdma_rails, err)) return rc;
  if (c.rdma_device != nullptr) o.rdma_device = c.rdma_device;
  o.rdma_port = c.rdma_port;
  o.rdma_gid_index = c.rdma_gid_index;
  // Authentication: explicit bytes, else a key file, else the environment.
  if (c.psk == nullptr && c.psk_bytes != 0)
    return err.set(DS4TP_EINVAL, "options.psk is NULL but psk_bytes is {}", c.psk_bytes);
  if (c.psk != nullptr && c.psk_bytes == 0)
    return err.set(DS4TP_EINVAL, "options.psk is set but psk_bytes is 0");
  if (c.psk != nullptr && c.psk_file != nullptr)
    return err.set(DS4TP_EINVAL, "set options.psk or options.psk_file, not both");
  return auth::load_key(c.psk, c.psk_bytes, c.psk_file, o.psk, o.psk_source, err);
}

void fill_layout(const slab::Layout &l, ds4tp_slab_layout *out) {
  ds4tp_slab_layout c{};
  c.size = sizeof c;
  c.slots = l.slots;
  c.batch_gates = l.batch_gates;
  c.batch_rows = l.batch_rows;
  c.total_bytes = l.total;
  c.vec_bytes = l.vec_bytes;
  c.vec_stride = l.vec_stride;
  c.flag_stride = l.flag_stride;
  c.out_offset = l.out_vec(0);
  c.in_offset = l.in_vec(0);
  c.in_seq_offset = l.in_seq;
  c.token_offset = l.token;
  c.gpu_flags_offset = l.gpu_flags;
  c.batch_out_offset = l.batch_out;
  c.batch_in_offset = l.batch_in;
  c.batch_gate_stride = l.batch_gate_stride;
  c.big_out_offset = l.big_out;
  c.big_in_offset = l.big_in;
  c.big_staging_bytes = l.big_staging;
  c.gpu_release_offset = l.gpu_release;
  c.slot_stride = l.slot_stride;
  uint32_t sz = out->size < sizeof c ? out->size : uint32_t(sizeof c);
  std::memcpy(out, &c, sz);
  out->size = sz;
}

int text_to_c(const std::string &text, char *buf, size_t cap, size_t *needed, const char *call,
              Error &err) {
  if (buf == nullptr && cap != 0)
    return err.set(DS4TP_EINVAL, "{}: buf is NULL but cap is {}", call, cap);
  if (needed != nullptr) *needed = text.size();
  if (cap <= text.size())
    return err.set(DS4TP_ENOMEM, "{}: the text is {} bytes, the buffer holds {} "
                   "(call again with cap >= needed + 1)", call, text.size(), cap);
  std::memcpy(buf, text.c_str(), text.size() + 1);
  return DS4TP_OK;
}

}  // namespace ds4tp::capi

using namespace ds4tp::capi;

extern "C" {

const char *ds4tp_transport_name(int t) { return ds4tp::transport_name(t); }

int ds4tp_transport_available(int transport, char *why, size_t why_len) {
  try {
    std::string reason;
    bool ok = ds4tp::transport_available(transport, reason);
    if (why != nullptr && why_len > 0) {
      size_t n = reason.size() < why_len - 1 ? reason.size() : why_len - 1;
      std::memcpy(why, reason.data(), n);
      why[n] = 0;
    }
    return ok ? 1 : 0;
  } catch (...) {
    if (why != nullptr && why_len > 0) why[0] = 0;
    return 0;
  }
}

int ds4tp_transport_auto(int same_host) {
  try {
    return ds4tp::connect::auto_transport(ds4tp::offered_caps(), same_host != 0);
  } catch (...) {
    return DS4TP_TRANSPORT_AUTO;
  }
}

void ds4tp_options_init(ds4tp_options *opt) {
  if (opt == nullptr) return;
  // Every default is ds4tp::Options'; only the C shapes differ.
  const ds4tp::Options d;
  std::memset(opt, 0, sizeof *opt);
  opt->size = sizeof *opt;
  opt->role = d.role;
  opt->transport = d.transport;
  opt->listen_host = ds4tp::kDefaultHost;
  opt->listen_port = d.listen_port;
  opt->leader_host = ds4tp::kDefaultHost;
  opt->leader_port = d.leader_port;
  opt->connect_timeout_ms = d.connect_timeout_ms;
  opt->hello_timeout_ms = d.hello_timeout_ms;
  opt->gate_timeout_ms = d.gate_timeout_ms;
  opt->big_gate_timeout_ms = d.big_gate_timeout_ms;
  opt->frame_timeout_ms = d.frame_timeout_ms;
  opt->peer_silence_ms = d.peer_silence_ms;
  opt->peer_arrival_timeout_ms = d.peer_arrival_timeout_ms;
  opt->failover = d.failover ? 1 : 0;
  opt->spin_us = d.spin_us;
  opt->log_level = d.log_level;
  opt->max_frame_bytes = d.max_frame_bytes;
  opt->rdma_port = d.rdma_port;
  opt->rdma_gid_index = d.rdma_gid_index;
}

void ds4tp_identity_init(ds4tp_identity *id) {
  if (id == nullptr) return;
  std::memset(id, 0, sizeof *id);
  id->size = sizeof *id;
}

int64_t ds4tp_schedule_slot(const ds4tp_identity *id, uint64_t seq) {
  if (id == nullptr || seq == 0) return -1;
  ds4tp::slab::Schedule s;
  if (!to_schedule(id, s)) return -1;
  return ds4tp::slab::slot_for_seq(s, seq);
}

int ds4tp_slab_layout_compute(const ds4tp_identity *id, ds4tp_slab_layout *out) {
  if (id == nullptr || out == nullptr) return invalid(nullptr, "identity and layout must not be NULL");
  if (out->size < sizeof(uint32_t)) return invalid(nullptr, "layout size field must be set");
  ds4tp_identity c;
  ds4tp_identity_init(&c);
  if (!copy_sized(id, c)) return invalid(nullptr, "identity size field is invalid");
  ds4tp::slab::Layout l;
  if (!ds4tp::slab::compute_layout(c.n_layer, c.n_embd, l))
    return invalid(nullptr, "identity n_layer/n_embd out of range");
  fill_layout(l, out);
  return DS4TP_OK;
}

}  // extern "C"
