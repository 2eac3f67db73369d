// The gate service's C calls: options, start (slab words or stream
// words), stop, state; and the stream conversions groups share.
#include "handle.hpp"
#include "service/gate_service.hpp"
#include "stream.hpp"

using namespace ds4tp::capi;
using ds4tp::Error;

namespace ds4tp::capi {

// Checked C options as the service's config (microseconds to ns; a zero
// stop timeout stays zero: Pair picks the default).
int service_config_from_c(const ds4tp_gate_service_options *opt, ds4tp::ServiceConfig &c,
                          Error &err) {
  ds4tp_gate_service_options o;
  ds4tp_gate_service_options_init(&o);
  if (opt != nullptr && !copy_sized(opt, o))
    return err.set(DS4TP_EINVAL,
                   "gate service options size field {} is invalid: call "
                   "ds4tp_gate_service_options_init",
                   opt->size);
  if (o.spin_us != DS4TP_SPIN_ADAPTIVE && (o.spin_us < 0 || o.spin_us > 10000000))
    return err.set(DS4TP_EINVAL,
                   "gate service spin_us {} must be 0..10000000 or DS4TP_SPIN_ADAPTIVE (-1)",
                   o.spin_us);
  if (o.yield_us < 0 || o.yield_us > 10000000)
    return err.set(DS4TP_EINVAL, "gate service yield_us {} outside 0..10000000", o.yield_us);
  if (o.sleep_us < 1 || o.sleep_us > 100000)
    return err.set(DS4TP_EINVAL, "gate service sleep_us {} outside 1..100000", o.sleep_us);
  if (o.stop_timeout_ms < 0 || o.stop_timeout_ms > 24 * 3600 * 1000)
    return err.set(DS4TP_EINVAL, "gate service stop_timeout_ms {} outside 0..86400000",
                   o.stop_timeout_ms);
  if (o.cpu < -1)
    return err.set(DS4TP_EINVAL, "gate service cpu {} must be -1 (no pinning) or a CPU number",
                   o.cpu);
  c.adaptive_spin = o.spin_us == DS4TP_SPIN_ADAPTIVE;
  if (!c.adaptive_spin) c.spin_ns = uint64_t(o.spin_us) * 1000;
  c.yield_ns = uint64_t(o.yield_us) * 1000;
  c.sleep_ns = uint64_t(o.sleep_us) * 1000;
  c.stop_timeout_ns = uint64_t(o.stop_timeout_ms) * 1000000;
  c.cpu = o.cpu;
  return DS4TP_OK;
}

int stream_options_from_c(const ds4tp_stream_options *opt, ds4tp_stream_options &o,
                          Error &err) {
  ds4tp_stream_options_init(&o);
  if (opt != nullptr && !copy_sized(opt, o))
    return err.set(DS4TP_EINVAL,
                   "stream options size field {} is invalid: call ds4tp_stream_options_init",
                   opt->size);
  // Ranges of bits, mode and slots are StreamWords::create's to name.
  return DS4TP_OK;
}

int check_words_out(const ds4tp_stream_words *out, Error &err) {
  if (out == nullptr) return err.set(DS4TP_EINVAL, "ds4tp_stream_words pointer is NULL");
  if (out->size < sizeof(ds4tp_stream_words) || out->size > (1u << 16))
    return err.set(DS4TP_EINVAL,
                   "ds4tp_stream_words size field {} is invalid: set it to "
                   "sizeof(ds4tp_stream_words) ({})",
                   out->size, sizeof(ds4tp_stream_words));
  return DS4TP_OK;
}

int stream_words_to_c(const StreamWords &w, ds4tp_stream_words *out, Error &err) {
  if (int rc = check_words_out(out, err)) return rc;
  ds4tp_stream_words c{};
  c.size = sizeof c;
  c.word_bits = w.bits();
  c.mode = w.mode();
  c.slots = w.slots();
  c.stride = StreamWords::kStride;
  c.base = w.base();
  c.bytes = w.bytes();
  c.ready = w.ready_word(0);
  c.release = w.release_word(0);
  c.data = w.slot_bytes() != 0 ? w.data() : nullptr;
  c.slot_bytes = w.slot_bytes();
  c.poison_gap = w.poison_gap();
  std::memcpy(out, &c, sizeof c);  // a bigger future caller struct keeps its tail
  return DS4TP_OK;
}

}  // namespace ds4tp::capi

extern "C" {

void ds4tp_gate_service_options_init(ds4tp_gate_service_options *opt) {
  if (opt == nullptr) return;
  // Every default is ds4tp::ServiceConfig's, in the C struct's units.
  const ds4tp::ServiceConfig d;
  std::memset(opt, 0, sizeof *opt);
  opt->size = sizeof *opt;
  opt->spin_us = d.adaptive_spin ? DS4TP_SPIN_ADAPTIVE : int32_t(d.spin_ns / 1000);
  opt->yield_us = int32_t(d.yield_ns / 1000);
  opt->sleep_us = int32_t(d.sleep_ns / 1000);
  opt->stop_timeout_ms = int32_t(d.stop_timeout_ns / 1000000);
  opt->cpu = d.cpu;
}

int ds4tp_gate_service_start(ds4tp_pair *p, const ds4tp_gate_service_options *opt) {
  if (int rc = check_live(p)) return rc;
  return guarded(p, [&] {
    Error err;
    ds4tp::ServiceConfig c;
    int rc = service_config_from_c(opt, c, err);
    if (rc == DS4TP_OK) rc = p->impl->start_service(c, err);
    return finish(p, rc, err);
  });
}

void ds4tp_stream_options_init(ds4tp_stream_options *opt) {
  if (opt == nullptr) return;
  std::memset(opt, 0, sizeof *opt);
  opt->size = sizeof *opt;
  opt->word_bits = 64;
  opt->mode = DS4TP_STREAM_SEQ;
  opt->slots = 2;
  opt->count = 0;
  opt->dtype = DS4TP_DTYPE_F32;
}

int ds4tp_gate_stream_start(ds4tp_pair *p, const ds4tp_gate_service_options *svc,
                            const ds4tp_stream_options *opt, ds4tp_stream_words *words) {
  if (int rc = check_live(p)) return rc;
  return guarded(p, [&] {
    Error err;
    ds4tp::ServiceConfig c;
    ds4tp_stream_options o;
    int rc = check_words_out(words, err);
    if (rc == DS4TP_OK) rc = service_config_from_c(svc, c, err);
    if (rc == DS4TP_OK) rc = stream_options_from_c(opt, o, err);
    if (rc == DS4TP_OK) rc = p->impl->start_stream(c, o.word_bits, o.mode, err);
    if (rc == DS4TP_OK) rc = stream_words_to_c(*p->impl->stream_words(), words, err);
    return finish(p, rc, err);
  });
}

int ds4tp_gate_service_stop(ds4tp_pair *p) {
  if (int rc = check_pair(p)) return rc;  // a failed pair's service must still be stoppable
  return guarded(p, [&] {
    Error err;
    return finish(p, p->impl->stop_service(err), err);
  });
}

int ds4tp_gate_service_state(const ds4tp_pair *p) {
  const ds4tp::Pair *x = unwrap(p);
  return x != nullptr ? x->service_state() : int(DS4TP_SERVICE_STOPPED);
}

uint64_t ds4tp_gate_seq(const ds4tp_pair *p) {
  const ds4tp::Pair *x = unwrap(p);
  return x != nullptr ? x->last_row_seq() : 0;
}

}  // extern "C"
