// The leader's command calls and the replies it waits for, and the
// symmetric calls both ranks make at the same point (lib/session). Every
// call checks its arguments and runs through control_call(); transport and
// lockstep errors latch the pair failed, a hash divergence does not (the
// rule is Pair's).
#include <cstring>
#include <vector>

#include "convert.hpp"
#include "handle.hpp"
#include "session/session.hpp"

using namespace ds4tp::capi;
using ds4tp::Error;
using ds4tp::session::Session;

namespace {

// A worker failure can reach the leader two ways: read by this call, or
// latched first by the liveness watcher (the worker reported and closed).
// Either way the caller gets EREMOTE and the worker's status.
int remote_result(ds4tp_pair *p, int rc, int32_t *status) {
  if (rc != DS4TP_EREMOTE && rc != DS4TP_EFAILED) return rc;
  const ds4tp::Pair *x = unwrap(p);
  if (x == nullptr || x->session() == nullptr) return rc;
  int32_t remote = x->session()->remote_status();
  if (remote == 0) return rc;
  if (status != nullptr) *status = remote;
  return DS4TP_EREMOTE;
}

}  // namespace

extern "C" {

const char *ds4tp_command_name(int kind) {
  return kind >= 0 && kind <= 0xffff ? ds4tp::wire::frame_name(uint16_t(kind)) : "?";
}

int ds4tp_send_session_create(ds4tp_pair *p, uint64_t session_id, uint32_t ctx_size) {
  return control_call(p, [&](Session &s, Error &e) { return s.send_session_create(session_id, ctx_size, e); });
}

int ds4tp_send_session_destroy(ds4tp_pair *p, uint64_t session_id) {
  return control_call(p, [&](Session &s, Error &e) { return s.send_session_destroy(session_id, e); });
}

int ds4tp_send_sync(ds4tp_pair *p, uint64_t session_id, const int32_t *tokens, uint32_t n_tokens,
                    uint32_t logits_floats) {
  return control_call(p, [&](Session &s, Error &e) {
    return s.send_sync(session_id, tokens, n_tokens, logits_floats, e);
  });
}

int ds4tp_send_sync_images(ds4tp_pair *p, uint64_t session_id, const int32_t *tokens,
                           uint32_t n_tokens, const ds4tp_image_span *images, uint32_t n_images,
                           uint32_t logits_floats) {
  return control_call(p, [&](Session &s, Error &e) -> int {
    if (n_images > 0 && images == nullptr)
      return e.set(DS4TP_EINVAL, "images is NULL but n_images is {}", n_images);
    std::vector<ds4tp::wire::ImageMeta> meta(n_images);
    std::vector<const float *> embd(n_images);
    for (uint32_t i = 0; i < n_images; i++) {
      const ds4tp_image_span &c = images[i];
      ds4tp::wire::ImageMeta &m = meta[i];
      m.token_start = c.token_start;
      m.token_count = c.token_count;
      m.data_width = c.data_width;
      m.width = c.width;
      m.height = c.height;
      m.content_width = c.content_width;
      m.content_height = c.content_height;
      std::memcpy(m.fingerprint.data(), c.fingerprint, m.fingerprint.size());
      embd[i] = c.embd;
    }
    return s.send_sync_images(session_id, tokens, n_tokens, meta.data(), embd.data(), n_images,
                              logits_floats, e);
  });
}

int ds4tp_send_eval(ds4tp_pair *p, uint64_t session_id, uint64_t seq, int32_t token,
                    uint32_t logits_floats) {
  return control_call(p, [&](Session &s, Error &e) {
    return s.send_eval(session_id, seq, token, logits_floats, e);
  });
}

int ds4tp_send_mtp(ds4tp_pair *p, uint64_t session_id, uint64_t seq, int32_t token,
                   uint32_t limit) {
  return control_call(p, [&](Session &s, Error &e) { return s.send_mtp(session_id, seq, token, limit, e); });
}

int ds4tp_send_rewind(ds4tp_pair *p, uint64_t session_id, int32_t pos) {
  return control_call(p, [&](Session &s, Error &e) { return s.send_rewind(session_id, pos, e); });
}

int ds4tp_send_invalidate(ds4tp_pair *p, uint64_t session_id) {
  return control_call(p, [&](Session &s, Error &e) { return s.send_invalidate(session_id, e); });
}

int ds4tp_send_spec_restore(ds4tp_pair *p, uint64_t session_id, int32_t pos) {
  return control_call(p, [&](Session &s, Error &e) { return s.send_spec_restore(session_id, pos, e); });
}

int ds4tp_send_eval_batch(ds4tp_pair *p, const ds4tp_batch_item *items, uint32_t count,
                          uint32_t logits_floats) {
  return control_call(p, [&](Session &s, Error &e) {
    return s.send_eval_batch(wire_items(items), count, logits_floats, e);
  });
}

int ds4tp_send_mixed_batch(ds4tp_pair *p, uint64_t prefill_session_id, const int32_t *prompt,
                           uint32_t prompt_count, const ds4tp_batch_item *items, uint32_t count,
                           uint32_t logits_floats) {
  return control_call(p, [&](Session &s, Error &e) {
    return s.send_mixed_batch(prefill_session_id, prompt, prompt_count, wire_items(items), count,
                              logits_floats, e);
  });
}

int ds4tp_send_verify(ds4tp_pair *p, uint64_t session_id, const int32_t *drafts, uint32_t n,
                      uint32_t flags) {
  return control_call(p, [&](Session &s, Error &e) { return s.send_verify(session_id, drafts, n, flags, e); });
}

int ds4tp_send_verify_commit(ds4tp_pair *p, int32_t mode, int32_t count, uint32_t logits_floats) {
  return control_call(p, [&](Session &s, Error &e) {
    return s.send_verify_commit(mode, count, logits_floats, e);
  });
}

int ds4tp_send_draft(ds4tp_pair *p, uint64_t session_id, int32_t token, int32_t pos,
                     uint32_t mode) {
  return control_call(p, [&](Session &s, Error &e) { return s.send_draft(session_id, token, pos, mode, e); });
}

int ds4tp_send_stop(ds4tp_pair *p) {
  return control_call(p, [&](Session &s, Error &e) { return s.send_stop(e); });
}

int ds4tp_wait_ack(ds4tp_pair *p, uint64_t session_id, int32_t *status) {
  int rc = control_call(p, [&](Session &s, Error &e) { return s.wait_ack(session_id, status, e); });
  return remote_result(p, rc, status);
}

int ds4tp_wait_sync(ds4tp_pair *p, uint64_t session_id, int32_t *status, uint32_t *position) {
  int rc = control_call(p, [&](Session &s, Error &e) { return s.wait_sync(session_id, status, position, e); });
  return remote_result(p, rc, status);
}

int ds4tp_recv_logits(ds4tp_pair *p, float *half, uint32_t count) {
  if (half == nullptr && count > 0) return invalid(p, "ds4tp_recv_logits: half is NULL");
  return control_call(p, [&](Session &s, Error &e) { return s.recv_logits(half, count, e); });
}

int32_t ds4tp_remote_status(const ds4tp_pair *p) {
  const ds4tp::Pair *x = unwrap(p);
  if (x == nullptr || x->session() == nullptr) return 0;
  return x->session()->remote_status();
}

int ds4tp_hash_check(ds4tp_pair *p, uint64_t session_id, uint64_t seq, uint64_t hash) {
  return control_call(p, [&](Session &s, Error &e) { return s.hash_check(session_id, seq, hash, e); });
}

int ds4tp_sync_checkpoint(ds4tp_pair *p, uint32_t point, int32_t current, int32_t total,
                          int requested, int *cancelled) {
  return control_call(p, [&](Session &s, Error &e) {
    bool c = false;
    int rc = s.sync_checkpoint(point, current, total, requested != 0, &c, e);
    if (rc == DS4TP_OK && cancelled != nullptr) *cancelled = c ? 1 : 0;
    return rc;
  });
}

int ds4tp_agree_execution_mode(ds4tp_pair *p, uint32_t flags, uint32_t *caps) {
  return control_call(p, [&](Session &s, Error &e) { return s.agree_exec_mode(flags, caps, e); });
}

int ds4tp_agree_drafter_split(ds4tp_pair *p, int mine_on, const void *meta, int *agreed,
                              int *peer_on) {
  return control_call(p, [&](Session &s, Error &e) {
    bool a = false, on = false;
    int rc = s.agree_drafter_split(mine_on != 0, static_cast<const uint8_t *>(meta), &a, &on, e);
    if (agreed != nullptr) *agreed = a ? 1 : 0;
    if (peer_on != nullptr) *peer_on = on ? 1 : 0;
    return rc;
  });
}

int ds4tp_block_begin(ds4tp_pair *p, uint32_t rows, uint32_t n_layers, uint32_t *gates_per_layer) {
  return control_call(p, [&](Session &s, Error &e) { return s.block_begin(rows, n_layers, gates_per_layer, e); });
}

int ds4tp_block_end(ds4tp_pair *p) {
  return control_call(p, [&](Session &s, Error &e) { return s.block_end(e); });
}

int ds4tp_small_exchange(ds4tp_pair *p, const void *mine, void *peer, uint32_t bytes) {
  if (mine == nullptr || peer == nullptr) return invalid(p, "ds4tp_small_exchange: mine and peer must not be NULL");
  return control_call(p, [&](Session &s, Error &e) { return s.small_exchange(mine, peer, bytes, e); });
}

int ds4tp_head_row_send(ds4tp_pair *p, uint32_t row, const float *src, uint32_t floats) {
  if (src == nullptr) return invalid(p, "ds4tp_head_row_send: src is NULL");
  return control_call(p, [&](Session &s, Error &e) { return s.head_row_send(row, src, floats, e); });
}

int ds4tp_head_row_recv(ds4tp_pair *p, uint32_t row, float *dst, uint32_t floats) {
  if (dst == nullptr) return invalid(p, "ds4tp_head_row_recv: dst is NULL");
  return control_call(p, [&](Session &s, Error &e) { return s.head_row_recv(row, dst, floats, e); });
}

}  // extern "C"
