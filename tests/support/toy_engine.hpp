// A tiny deterministic "model" for lockstep tests. Each rank holds half of
// every computation: at each gate it writes a partial that depends on its
// rank, swaps it with the peer through the pair, and folds the sum into the
// session state. Addition of the two partials is commutative, so both ranks
// end with bit-identical states exactly when they ran the same command
// sequence. Every operation mirrors an engine session call of the control
// plane (sync with checkpoints and a big gate, eval with row gates, verify
// with a verify block, batch gates, a small exchange and a head row, ...).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "ds4tp/ds4tp.h"

namespace ds4tp::test {

struct ToySession {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> states;  // states[k]: after k tokens; [0] zeros
  // Open verify block (between verify and commit).
  std::vector<int32_t> drafts;
  std::vector<std::vector<float>> row_states;
  uint32_t verify_flags = 0;
  int32_t drafter_pos = 0;
};

class ToyEngine {
 public:
  ToyEngine(ds4tp_pair *tp, uint32_t logits_floats);

  // Each returns 0, a positive DS4TP_ACK_* outcome, or a ds4tp status.
  int create(uint64_t id);
  int destroy(uint64_t id);
  // Makes the session's tokens `tokens` (reusing the common prefix), in
  // chunks of 4 with a sync checkpoint after each; stops when either rank
  // asked to cancel (returns DS4TP_ACK_CANCELLED). *position = tokens held.
  int sync(uint64_t id, const int32_t *tokens, uint32_t n, const ds4tp_image_span *images,
           uint32_t n_images, uint32_t *position);
  int eval(uint64_t id, int32_t token);
  int rewind(uint64_t id, int32_t pos);
  int invalidate(uint64_t id);
  int spec_restore(uint64_t id, int32_t pos);  // never keeps state: UNAVAILABLE
  int verify(uint64_t id, const int32_t *drafts, uint32_t n, uint32_t flags);
  int commit(uint64_t id, int32_t mode, int32_t count);
  int draft(uint64_t id, int32_t token, int32_t pos, uint32_t mode);
  int mtp(uint64_t id, int32_t token, uint32_t limit);
  // One decode step per item, in order; logits (when not NULL) row by row.
  int eval_batch(const ds4tp_batch_item *items, uint32_t n, float *logits);
  // Prefill `prompt` onto session `id`, then one decode step per item;
  // logits: the prefill session's row first.
  int mixed_batch(uint64_t id, const int32_t *prompt, uint32_t n_prompt,
                  const ds4tp_batch_item *items, uint32_t n, float *logits);

  // The worker's logits half for a session (both ranks can compute it).
  void logits_half(uint64_t id, float *out) const;
  uint64_t hash(uint64_t id) const;
  // Digest of every session: equal on both ranks iff their states are.
  uint64_t digest() const;

  // Test knobs.
  int32_t cancel_at = -1;     // request cancellation once this many tokens are synced
  bool perturb_next = false;  // the next eval adds a tiny error (divergence)
  bool has(uint64_t id) const { return sessions_.count(id) != 0; }
  const ToySession &session(uint64_t id) const { return sessions_.at(id); }
  int rank() const { return rank_; }
  uint64_t row_seq() const { return row_seq_; }
  uint32_t logits_floats() const { return logits_floats_; }

 private:
  int prefill(ToySession &s, uint32_t from, const ds4tp_image_span *images, uint32_t n_images,
              uint32_t to);
  int step(ToySession &s, int32_t token, std::vector<float> &state);

  ds4tp_pair *tp_;
  int rank_;
  uint32_t n_layer_ = 0, n_embd_ = 0, logits_floats_ = 0;
  uint8_t *slab_ = nullptr;
  ds4tp_slab_layout layout_{};
  uint64_t row_seq_ = 0, batch_seq_ = 0, big_seq_ = 0;
  std::map<uint64_t, ToySession> sessions_;
};

// Worker callbacks driving a ToyEngine (user_data = ToyEngine *).
ds4tp_worker_ops toy_worker_ops();

}  // namespace ds4tp::test
