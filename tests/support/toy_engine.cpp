#include "support/toy_engine.hpp"

#include <cstring>

namespace ds4tp::test {

namespace {

float partial(int rank, float state, int32_t token, uint32_t a, uint32_t b, uint32_t i) {
  uint32_t h = uint32_t(token) * 2654435761u ^ (a * 97u + b * 31u + i * 7u + uint32_t(rank) * 1013u);
  h ^= h >> 15;
  return state * (0.25f + 0.125f * float(rank)) + float(h % 1000u) * 0.001f - 0.5f;
}

uint64_t fnv(uint64_t h, const void *p, size_t n) {
  auto *b = static_cast<const uint8_t *>(p);
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

}  // namespace

ToyEngine::ToyEngine(ds4tp_pair *tp, uint32_t logits_floats)
    : tp_(tp), rank_(ds4tp_rank(tp)), logits_floats_(logits_floats) {
  layout_.size = sizeof layout_;
  ds4tp_slab_layout_get(tp, &layout_);
  n_layer_ = layout_.slots / 2;
  n_embd_ = uint32_t(layout_.vec_bytes / 4);
  slab_ = static_cast<uint8_t *>(ds4tp_slab_base(tp));
}

int ToyEngine::create(uint64_t id) {
  if (has(id)) return -100;  // engine error: duplicate session
  ToySession s;
  s.states.assign(1, std::vector<float>(n_embd_, 0.0f));
  sessions_[id] = std::move(s);
  return 0;
}

int ToyEngine::destroy(uint64_t id) { return sessions_.erase(id) ? 0 : DS4TP_ACK_UNAVAILABLE; }

// One token through every row gate: the ranks swap partials per (layer, gate).
int ToyEngine::step(ToySession &, int32_t token, std::vector<float> &state) {
  for (uint32_t layer = 0; layer < n_layer_; layer++)
    for (uint32_t gate = 0; gate < 2; gate++) {
      auto *out = reinterpret_cast<float *>(slab_ + ds4tp_slab_out_offset(tp_, layer, gate));
      auto *in = reinterpret_cast<float *>(slab_ + ds4tp_slab_in_offset(tp_, layer, gate));
      for (uint32_t i = 0; i < n_embd_; i++) out[i] = partial(rank_, state[i], token, layer, gate, i);
      int rc = ds4tp_gate_exchange(tp_, layer, gate, ++row_seq_);
      if (rc) return rc;
      for (uint32_t i = 0; i < n_embd_; i++) state[i] = 0.5f * state[i] + 0.25f * (out[i] + in[i]);
    }
  return 0;
}

int ToyEngine::prefill(ToySession &s, uint32_t from, const ds4tp_image_span *images,
                       uint32_t n_images, uint32_t to) {
  // One big gate for the whole chunk: each token's partial depends on the
  // token and its position (and on an image row when it is one).
  uint32_t n = to - from;
  std::vector<float> out(size_t(n) * n_embd_), in(out.size());
  for (uint32_t k = 0; k < n; k++) {
    uint32_t pos = from + k;
    const float *img = nullptr;
    for (uint32_t m = 0; m < n_images; m++)
      if (pos >= images[m].token_start && pos < images[m].token_start + images[m].token_count)
        img = images[m].embd + size_t(pos - images[m].token_start) * images[m].data_width;
    for (uint32_t i = 0; i < n_embd_; i++)
      out[size_t(k) * n_embd_ + i] =
          partial(rank_, 0.0f, s.tokens[pos], pos, 99, i) + (img ? img[i] * float(rank_ + 1) : 0.0f);
  }
  int rc = ds4tp_big_gate_exchange(tp_, 0, ++big_seq_, out.data(), in.data(), out.size() * 4);
  if (rc) return rc;
  for (uint32_t k = 0; k < n; k++) {
    std::vector<float> st = s.states.back();
    for (uint32_t i = 0; i < n_embd_; i++)
      st[i] = 0.5f * st[i] + 0.25f * (out[size_t(k) * n_embd_ + i] + in[size_t(k) * n_embd_ + i]);
    s.states.push_back(std::move(st));
  }
  return 0;
}

int ToyEngine::sync(uint64_t id, const int32_t *tokens, uint32_t n, const ds4tp_image_span *images,
                    uint32_t n_images, uint32_t *position) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return -101;
  ToySession &s = it->second;
  // Keep the common prefix (images force a recompute from their start).
  uint32_t keep = 0;
  while (keep < n && keep < s.tokens.size() && s.tokens[keep] == tokens[keep]) keep++;
  for (uint32_t m = 0; m < n_images; m++)
    if (images[m].token_start < keep) keep = images[m].token_start;
  s.tokens.assign(tokens, tokens + n);
  s.states.resize(keep + 1);
  uint32_t done = keep;
  while (done < n) {
    uint32_t to = done + 4 < n ? done + 4 : n;
    if (int rc = prefill(s, done, images, n_images, to)) return rc;
    done = to;
    int cancelled = 0;
    int requested = cancel_at >= 0 && done >= uint32_t(cancel_at);
    if (int rc = ds4tp_sync_checkpoint(tp_, 1, int32_t(done), int32_t(n), requested, &cancelled))
      return rc;
    if (cancelled && done < n) {
      s.tokens.resize(done);
      *position = done;
      return DS4TP_ACK_CANCELLED;
    }
  }
  *position = uint32_t(s.tokens.size());
  return 0;
}

int ToyEngine::eval(uint64_t id, int32_t token) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return -102;
  ToySession &s = it->second;
  std::vector<float> st = s.states.back();
  if (int rc = step(s, token, st)) return rc;
  if (perturb_next) {
    st[0] += 1e-3f;
    perturb_next = false;
  }
  s.tokens.push_back(token);
  s.states.push_back(std::move(st));
  return 0;
}

int ToyEngine::rewind(uint64_t id, int32_t pos) {
  auto it = sessions_.find(id);
  if (it == sessions_.end() || size_t(pos) > it->second.tokens.size()) return -103;
  it->second.tokens.resize(size_t(pos));
  it->second.states.resize(size_t(pos) + 1);
  return 0;
}

int ToyEngine::invalidate(uint64_t id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return -104;
  it->second.tokens.clear();
  it->second.states.resize(1);
  return 0;
}

int ToyEngine::spec_restore(uint64_t id, int32_t) { return has(id) ? DS4TP_ACK_UNAVAILABLE : -105; }

int ToyEngine::verify(uint64_t id, const int32_t *drafts, uint32_t n, uint32_t flags) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return -106;
  ToySession &s = it->second;
  s.drafts.assign(drafts, drafts + n);
  s.verify_flags = flags;
  s.row_states.assign(n, s.states.back());
  // The ranks offer different gate counts; the block runs the smaller.
  uint32_t gpl = rank_ == 0 ? 2 : 1;
  uint32_t layers = n_layer_ < 2 ? n_layer_ : 2;
  if (int rc = ds4tp_block_begin(tp_, n, layers, &gpl)) return rc;
  for (uint32_t layer = 0; layer < layers; layer++)
    for (uint32_t g = 0; g < gpl; g++) {
      uint32_t index = layer * 2 + g;
      uint8_t *bout = slab_ + ds4tp_slab_batch_out_offset(tp_, index);
      uint8_t *bin = slab_ + ds4tp_slab_batch_in_offset(tp_, index);
      for (uint32_t r = 0; r < n; r++) {
        auto *o = reinterpret_cast<float *>(bout + r * layout_.vec_stride);
        for (uint32_t i = 0; i < n_embd_; i++)
          o[i] = partial(rank_, s.row_states[r][i], drafts[r], layer, 50 + g + r, i);
      }
      if (int rc = ds4tp_batch_gate_exchange(tp_, index, n, ++batch_seq_)) return rc;
      for (uint32_t r = 0; r < n; r++) {
        auto *o = reinterpret_cast<float *>(bout + r * layout_.vec_stride);
        auto *in = reinterpret_cast<float *>(bin + r * layout_.vec_stride);
        for (uint32_t i = 0; i < n_embd_; i++)
          s.row_states[r][i] = 0.5f * s.row_states[r][i] + 0.25f * (o[i] + in[i]);
      }
    }
  if (int rc = ds4tp_block_end(tp_)) return rc;
  if (flags & DS4TP_VERIFY_HEAD_SPLIT) {
    // Each rank's "top-1 per row" over its vocabulary half, combined by a
    // small exchange; the worker then ships its half of row 0's head.
    uint8_t mine[DS4TP_BATCH_MAX_ROWS], peer[DS4TP_BATCH_MAX_ROWS];
    for (uint32_t r = 0; r < n; r++) mine[r] = uint8_t(r * 3 + uint32_t(rank_));
    if (int rc = ds4tp_small_exchange(tp_, mine, peer, n)) return rc;
    for (uint32_t r = 0; r < n; r++)
      if (peer[r] != uint8_t(r * 3 + uint32_t(1 - rank_))) return -107;
    std::vector<float> row(logits_floats_);
    for (uint32_t i = 0; i < logits_floats_; i++) row[i] = s.row_states[0][i % n_embd_] * float(i + 1);
    if (rank_ == 1) {
      if (int rc = ds4tp_head_row_send(tp_, 0, row.data(), logits_floats_)) return rc;
    } else {
      std::vector<float> got(logits_floats_);
      if (int rc = ds4tp_head_row_recv(tp_, 0, got.data(), logits_floats_)) return rc;
      if (std::memcmp(got.data(), row.data(), row.size() * 4) != 0) return -108;
    }
  }
  return 0;
}

int ToyEngine::commit(uint64_t id, int32_t mode, int32_t count) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return -109;
  ToySession &s = it->second;
  if (mode == DS4TP_COMMIT_FULL) count = int32_t(s.drafts.size());
  if (mode == DS4TP_COMMIT_FULL || mode == DS4TP_COMMIT_PREFIX) {
    for (int32_t r = 0; r < count; r++) {
      s.tokens.push_back(s.drafts[size_t(r)]);
      s.states.push_back(s.row_states[size_t(r)]);
    }
  } else {
    std::vector<int32_t> replay(s.drafts.begin(), s.drafts.begin() + count);
    for (int32_t t : replay)
      if (int rc = eval(id, t)) return rc;
  }
  s.drafts.clear();
  s.row_states.clear();
  return 0;
}

int ToyEngine::draft(uint64_t id, int32_t, int32_t pos, uint32_t) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return -110;
  it->second.drafter_pos = pos;
  return 0;
}

int ToyEngine::mtp(uint64_t id, int32_t token, uint32_t) { return eval(id, token); }

int ToyEngine::eval_batch(const ds4tp_batch_item *items, uint32_t n, float *logits) {
  for (uint32_t k = 0; k < n; k++) {
    if (int rc = eval(items[k].session_id, items[k].token)) return rc;
    if (logits) logits_half(items[k].session_id, logits + size_t(k) * logits_floats_);
  }
  return 0;
}

int ToyEngine::mixed_batch(uint64_t id, const int32_t *prompt, uint32_t n_prompt,
                           const ds4tp_batch_item *items, uint32_t n, float *logits) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return -111;
  std::vector<int32_t> all = it->second.tokens;
  all.insert(all.end(), prompt, prompt + n_prompt);
  uint32_t pos = 0;
  int saved = cancel_at;
  cancel_at = -1;
  int rc = sync(id, all.data(), uint32_t(all.size()), nullptr, 0, &pos);
  cancel_at = saved;
  if (rc) return rc < 0 ? rc : -111;
  if (logits) logits_half(id, logits);
  return eval_batch(items, n, logits ? logits + logits_floats_ : nullptr);
}

void ToyEngine::logits_half(uint64_t id, float *out) const {
  const auto &st = sessions_.at(id).states.back();
  for (uint32_t i = 0; i < logits_floats_; i++) out[i] = st[i % n_embd_] * float(i + 1) + 0.5f;
}

uint64_t ToyEngine::hash(uint64_t id) const {
  const ToySession &s = sessions_.at(id);
  uint64_t h = 1469598103934665603ull;
  h = fnv(h, s.tokens.data(), s.tokens.size() * 4);
  h = fnv(h, s.states.back().data(), s.states.back().size() * 4);
  return h;
}

uint64_t ToyEngine::digest() const {
  uint64_t h = 1469598103934665603ull;
  for (const auto &[id, s] : sessions_) {
    h = fnv(h, &id, sizeof id);
    h = fnv(h, s.tokens.data(), s.tokens.size() * 4);
    for (const auto &st : s.states) h = fnv(h, st.data(), st.size() * 4);
    h = fnv(h, &s.drafter_pos, sizeof s.drafter_pos);
  }
  return h;
}

// ---- worker callbacks ---------------------------------------------------

namespace {

ToyEngine &eng(void *ud) { return *static_cast<ToyEngine *>(ud); }

int cb_create(void *ud, ds4tp_pair *, const ds4tp_command *c, ds4tp_reply *) {
  return eng(ud).create(c->session_id);
}
int cb_destroy(void *ud, ds4tp_pair *, const ds4tp_command *c, ds4tp_reply *) {
  return eng(ud).destroy(c->session_id);
}
int cb_sync(void *ud, ds4tp_pair *, const ds4tp_command *c, ds4tp_reply *r) {
  int rc = eng(ud).sync(c->session_id, c->tokens, c->n_tokens, c->images, c->n_images, &r->position);
  if (rc == 0 && r->logits) eng(ud).logits_half(c->session_id, r->logits);
  return rc;
}
int cb_eval(void *ud, ds4tp_pair *, const ds4tp_command *c, ds4tp_reply *r) {
  int rc = eng(ud).eval(c->session_id, c->token);
  if (rc == 0 && r->logits) eng(ud).logits_half(c->session_id, r->logits);
  return rc;
}
int cb_mtp(void *ud, ds4tp_pair *, const ds4tp_command *c, ds4tp_reply *) {
  return eng(ud).mtp(c->session_id, c->token, uint32_t(c->limit));
}
int cb_rewind(void *ud, ds4tp_pair *, const ds4tp_command *c, ds4tp_reply *) {
  return eng(ud).rewind(c->session_id, c->pos);
}
int cb_invalidate(void *ud, ds4tp_pair *, const ds4tp_command *c, ds4tp_reply *) {
  return eng(ud).invalidate(c->session_id);
}
int cb_restore(void *ud, ds4tp_pair *, const ds4tp_command *c, ds4tp_reply *) {
  return eng(ud).spec_restore(c->session_id, c->pos);
}
int cb_eval_batch(void *ud, ds4tp_pair *, const ds4tp_command *c, ds4tp_reply *r) {
  return eng(ud).eval_batch(c->items, c->n_items, r->logits);
}
int cb_mixed(void *ud, ds4tp_pair *, const ds4tp_command *c, ds4tp_reply *r) {
  return eng(ud).mixed_batch(c->session_id, c->tokens, c->n_tokens, c->items, c->n_items, r->logits);
}
int cb_verify(void *ud, ds4tp_pair *, const ds4tp_command *c, ds4tp_reply *) {
  return eng(ud).verify(c->session_id, c->tokens, c->n_tokens, c->flags);
}
int cb_commit(void *ud, ds4tp_pair *, const ds4tp_command *c, ds4tp_reply *r) {
  int rc = eng(ud).commit(c->session_id, int32_t(c->mode), c->count);
  if (rc == 0 && r->logits) eng(ud).logits_half(c->session_id, r->logits);
  return rc;
}
int cb_draft(void *ud, ds4tp_pair *, const ds4tp_command *c, ds4tp_reply *) {
  return eng(ud).draft(c->session_id, c->token, c->pos, c->mode);
}
int cb_hash(void *ud, ds4tp_pair *, const ds4tp_command *c, ds4tp_reply *r) {
  if (!eng(ud).has(c->session_id)) return -112;
  r->hash = eng(ud).hash(c->session_id);
  return 0;
}

}  // namespace

ds4tp_worker_ops toy_worker_ops() {
  ds4tp_worker_ops o;
  ds4tp_worker_ops_init(&o);
  o.session_create = cb_create;
  o.session_destroy = cb_destroy;
  o.sync = cb_sync;
  o.sync_images = cb_sync;
  o.eval = cb_eval;
  o.mtp = cb_mtp;
  o.rewind = cb_rewind;
  o.invalidate = cb_invalidate;
  o.spec_restore = cb_restore;
  o.eval_batch = cb_eval_batch;
  o.mixed_batch = cb_mixed;
  o.verify = cb_verify;
  o.verify_commit = cb_commit;
  o.draft = cb_draft;
  o.hash = cb_hash;
  return o;
}

}  // namespace ds4tp::test
