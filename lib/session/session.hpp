// Lockstep mirroring over the control channel: the leader's command calls
// and the replies it waits for (session/leader.cpp), the worker's command
// receipt and replies (session/worker_side.cpp), and the symmetric
// agreements both ranks make at the same point of their execution
// (checkpoints, verify blocks, small exchanges, start-up modes:
// session/agreements.cpp). What each command owes in reply comes from the
// frame table (wire/frame_table.hpp).
//
// The session keeps the reply obligations explicit on both sides: the
// leader cannot send a new command while an ACK or a logits half of the
// previous one is unread, and the worker cannot take a new command while
// it owes a reply. A mistake is ESTATE naming what is outstanding, instead
// of a stream that silently drifts out of step.
//
// Threading: every public call takes one mutex for its whole duration, so
// two threads can never interleave frames; lockstep order between calls is
// the caller's. Control calls touch only the control connection and never
// the data plane, so they may run on an engine thread while gates run on a
// gate thread. abandon(), stopped() and remote_status() are safe anywhere.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/log.hpp"
#include "talk/channel.hpp"
#include "wire/frames.hpp"

namespace ds4tp::stats { class Stats; }

namespace ds4tp::session {

struct SessionConfig {
  int role = 0;  // ds4tp_role
  uint32_t max_frame_bytes = 64u << 20;
  int frame_timeout_ms = 30000;  // every reply and every symmetric agreement
  uint64_t spin_ns = 0;
  uint32_t n_layer = 0;  // bounds a verify block's layers
  uint32_t n_embd = 0;   // an image embedding row must be n_embd floats
  talk::PeerState *peer = nullptr;  // the peer's heartbeats land here
  // A live peer's reply or agreement may come this late (ms; -1: no
  // limit; at least frame_timeout_ms): peer_arrival_timeout_ms.
  int64_t arrival_ms = 0;
  stats::Stats *stats = nullptr;  // control round trips land here (the pair's)
};

// A command as the worker receives it. Arrays keep their capacity across
// commands, so receiving an EVAL never allocates.
struct Command {
  wire::FrameType type = wire::FrameType::Stop;
  uint64_t session = 0;
  uint64_t seq = 0;       // EVAL, MTP, HASH
  uint64_t hash = 0;      // HASH: the leader's hash
  int32_t token = 0;      // EVAL, MTP, DRAFT
  int32_t pos = 0;        // REWIND, SPEC_RESTORE, DRAFT
  int32_t limit = 0;      // MTP
  int32_t count = 0;      // VERIFY_COMMIT
  uint32_t mode = 0;      // DRAFT, VERIFY_COMMIT
  uint32_t flags = 0;     // VERIFY
  uint32_t ctx_size = 0;  // SESSION_CREATE
  uint32_t logits_floats = 0;
  std::vector<int32_t> tokens;  // SYNC*, VERIFY drafts, MIXED_BATCH prompt
  std::vector<wire::BatchItem> items;
  std::vector<wire::ImageMeta> images;
  std::vector<float> embd;
};

// Logits halves a command's reply carries when its status is 0: 1 for
// EVAL/SYNC/a replaying rollback, the item count for EVAL_BATCH, 1 + items
// for MIXED_BATCH, 0 for the rest (and 0 when logits_floats is 0).
uint32_t logits_rows(const Command &c);
// (Whether a command is answered with a status: wire::has_status_reply.)

class Session {
 public:
  Session(int fd, const SessionConfig &cfg, const Logger &log);

  // ---- leader: commands (EINVAL bad argument, ESTATE wrong role or a reply
  // still unread, else a channel error) ----
  int send_session_create(uint64_t session, uint32_t ctx_size, Error &err);
  int send_session_destroy(uint64_t session, Error &err);
  int send_sync(uint64_t session, const int32_t *tokens, uint32_t n, uint32_t logits_floats,
                Error &err);
  int send_sync_images(uint64_t session, const int32_t *tokens, uint32_t n,
                       const wire::ImageMeta *images, const float *const *embd,
                       uint32_t n_images, uint32_t logits_floats, Error &err);
  int send_eval(uint64_t session, uint64_t seq, int32_t token, uint32_t logits_floats,
                Error &err);
  int send_mtp(uint64_t session, uint64_t seq, int32_t token, uint32_t limit, Error &err);
  int send_rewind(uint64_t session, int32_t pos, Error &err);
  int send_invalidate(uint64_t session, Error &err);
  int send_spec_restore(uint64_t session, int32_t pos, Error &err);
  int send_eval_batch(const wire::BatchItem *items, uint32_t n, uint32_t logits_floats,
                      Error &err);
  int send_mixed_batch(uint64_t session, const int32_t *prompt, uint32_t n_prompt,
                       const wire::BatchItem *items, uint32_t n_items, uint32_t logits_floats,
                       Error &err);
  int send_verify(uint64_t session, const int32_t *drafts, uint32_t n, uint32_t flags,
                  Error &err);
  int send_verify_commit(int32_t mode, int32_t count, uint32_t logits_floats, Error &err);
  int send_draft(uint64_t session, int32_t token, int32_t pos, uint32_t mode, Error &err);
  int send_stop(Error &err);

  // ---- leader: replies. EREMOTE when the worker reported a failure
  // (remote_status() then holds its status) ----
  int wait_ack(uint64_t session, int32_t *status, Error &err);
  int wait_sync(uint64_t session, int32_t *status, uint32_t *position, Error &err);
  int recv_logits(float *dst, uint32_t count, Error &err);
  int head_row_recv(uint32_t row, float *dst, uint32_t floats, Error &err);

  // ---- both ranks ----
  // Leader: sends its hash and reads the worker's. Worker: answers the HASH
  // command it just received. EDIVERGED on a hash mismatch (not latched:
  // the engine may resync), EDESYNC when the (session, seq) differ.
  int hash_check(uint64_t session, uint64_t seq, uint64_t hash, Error &err);
  int sync_checkpoint(uint32_t point, int32_t current, int32_t total, bool requested,
                      bool *cancelled, Error &err);
  int agree_exec_mode(uint32_t flags, uint32_t *caps, Error &err);
  int agree_drafter_split(bool on, const uint8_t *meta, bool *agreed, bool *peer_on,
                          Error &err);
  int block_begin(uint32_t rows, uint32_t n_layers, uint32_t *gates_per_layer, Error &err);
  int block_end(Error &err);
  int small_exchange(const void *mine, void *peer, uint32_t bytes, Error &err);

  // ---- worker ----
  // Next command; timeout_ms < 0 waits for as long as the leader lives
  // (after a VERIFY the commit is due within frame_timeout_ms).
  int recv_command(Command &cmd, int64_t timeout_ms, Error &err);
  int send_ack(int32_t status, Error &err);
  int send_sync_ack(int32_t status, uint32_t position, Error &err);
  int send_logits(const float *src, uint32_t count, Error &err);
  int head_row_send(uint32_t row, const float *src, uint32_t floats, Error &err);
  // Reports a failure of the current command to the leader (best effort,
  // short deadline); after it the worker takes no more commands.
  int send_error(int32_t status, const std::string &message, Error &err);
  uint32_t logits_owed() const;
  uint32_t logits_owed_floats() const { return owed_logits_floats_; }

  // ---- any thread ----
  void abandon() { ch_.abandon(); }
  // The liveness watcher sends and drains heartbeats through it.
  talk::Channel &channel() { return ch_; }
  bool stopped() const { return stopped_.load(std::memory_order_acquire); }
  int32_t remote_status() const { return remote_status_.load(std::memory_order_acquire); }
  void set_remote_status(int32_t s) { remote_status_.store(s, std::memory_order_release); }
  int role() const { return cfg_.role; }
  int frame_timeout_ms() const { return cfg_.frame_timeout_ms; }
  uint32_t max_frame_bytes() const { return cfg_.max_frame_bytes; }

 private:
  bool is_leader() const { return cfg_.role == DS4TP_ROLE_LEADER; }
  // Role and order checks at the top of a leader command (the second form
  // also refuses session id 0).
  int leader_command(wire::FrameType t, Error &err);
  int leader_command(wire::FrameType t, uint64_t session, Error &err);
  int worker_only(const char *call, Error &err);
  int leader_only(const char *call, Error &err);
  // Whether `rows` logits halves of `floats` fit (true when either is 0).
  int check_logits_floats(uint32_t floats, uint64_t rows, Error &err);
  // A head row call needs an open verify block and a row and size in range.
  int check_head_row(uint32_t row, uint32_t floats, Error &err);

  // Every frame this rank sends goes out here: `t` with a payload of
  // `bytes` that `put` writes, within the frame timeout unless `timeout_ms`
  // is given. The second form sends a fixed-size payload of the table's size.
  template <typename Put>
  int send(wire::FrameType t, uint64_t bytes, const Put &put, Error &err,
           std::optional<int64_t> timeout_ms = std::nullopt) {
    return ch_.send(t, bytes, timeout_ms ? *timeout_ms : int64_t(cfg_.frame_timeout_ms), put,
                    err);
  }
  template <typename Msg>
  int send(wire::FrameType t, const Msg &m, Error &err) {
    return send(t, wire::fixed_bytes(t), [&](wire::Writer &w) { wire::encode(w, m); }, err);
  }
  // Leader: checks the logits halves fit, sends command `t` and records the
  // reply the frame table says it is owed (session/leader.cpp).
  template <typename Put>
  int command(wire::FrameType t, uint64_t session, uint64_t bytes, const Put &put, Error &err,
              uint64_t logits_rows = 0, uint32_t logits_floats = 0);
  template <typename Msg>
  int command(wire::FrameType t, uint64_t session, const Msg &m, Error &err,
              uint64_t logits_rows = 0, uint32_t logits_floats = 0);
  void expect_reply(wire::FrameType t, uint64_t session, uint32_t logits_rows,
                    uint32_t logits_floats);
  // Reads the next frame, which must be `want`. Skips stale HEAD_ROW frames
  // (a row of a verify block the leader moved past) and turns a
  // WORKER_ERROR into EREMOTE.
  int read_expect(wire::FrameType want, const char *what, talk::Frame &f, Error &err);
  // When the command now awaiting its reply left (0: none or no stats).
  uint64_t sent_ns_ = 0;
  const char *sent_name_ = "";
  // Leader: the checks of wait_ack (`kind` Ack) or wait_sync (SyncAck), then
  // reads and decodes the reply; `what` receives the description errors use.
  template <typename Msg>
  int read_ack(wire::Reply kind, uint64_t session, Msg &m, char (&what)[96], Error &err);
  // The end of an awaited COMMAND_ACK or SYNC_ACK with worker status `st`:
  // clears the wait, hands out the status, and turns a negative one into
  // EREMOTE (a zero one opens the logits that follow).
  int settle_ack(uint64_t session, int32_t st, int32_t *status, Error &err);
  template <typename Msg>
  int swap(wire::FrameType t, size_t bytes, const Msg &mine, Msg &peer, const char *what,
           Error &err);
  int decode_command(const talk::Frame &f, Command &cmd, Error &err);
  // Worker: sends the status reply the last command owes (COMMAND_ACK or
  // SYNC_ACK); status 0 opens the logits halves that follow.
  template <typename Msg>
  int send_status(const Msg &m, int32_t status, Error &err);

  SessionConfig cfg_;
  Logger log_;
  talk::Channel ch_;
  std::mutex mu_;
  std::atomic<bool> stopped_{false};
  std::atomic<int32_t> remote_status_{0};

  // Both roles.
  uint64_t last_eval_seq_ = 0;
  uint64_t checkpoint_seq_ = 0;
  uint64_t small_seq_ = 0;
  uint64_t block_ = 0;  // last verify block begun (head rows are keyed by it)
  bool block_open_ = false;
  bool verify_open_ = false;
  uint64_t verify_session_ = 0;
  uint32_t verify_rows_ = 0;

  // Leader: what the last command's reply still holds.
  wire::Reply await_ = wire::Reply::None;  // None, Ack or SyncAck
  wire::FrameType await_type_ = wire::FrameType::Stop;
  uint64_t await_session_ = 0;
  uint32_t logits_after_ack_ = 0;  // halves that follow a status-0 ack
  uint32_t logits_left_ = 0;
  uint32_t logits_floats_ = 0;
  uint32_t logits_row_ = 0;

  // Worker: what it owes the leader for the last command.
  wire::Reply owe_ = wire::Reply::None;  // None, Ack, SyncAck or Hash
  wire::FrameType last_type_ = wire::FrameType::Stop;
  uint64_t last_session_ = 0;
  uint32_t owed_logits_after_ack_ = 0;
  uint32_t owed_logits_ = 0;
  uint32_t owed_logits_floats_ = 0;
  uint32_t owed_logits_row_ = 0;
  wire::HashMsg leader_hash_;
  bool finished_ = false;  // the worker reported a failure
};

}  // namespace ds4tp::session
