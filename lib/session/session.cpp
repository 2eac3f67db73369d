#include "session/session.hpp"

#include <cstdio>
#include <cstring>

namespace ds4tp::session {

using wire::FrameType;
using Lock = std::lock_guard<std::mutex>;

namespace {

constexpr int64_t kErrorReportMs = 1000;  // a failing worker does not wait long to say so

const char *name(FrameType t) { return wire::frame_name(t); }

}  // namespace

uint32_t logits_rows(const Command &c) {
  if (c.logits_floats == 0) return 0;
  switch (c.type) {
    case FrameType::Eval:
    case FrameType::Sync:
    case FrameType::SyncImages: return 1;
    case FrameType::EvalBatch: return uint32_t(c.items.size());
    case FrameType::MixedBatch: return 1 + uint32_t(c.items.size());
    case FrameType::VerifyCommit: return c.mode == uint32_t(wire::kCommitRollback) && c.count > 0 ? 1 : 0;
    default: return 0;
  }
}

bool has_status_reply(FrameType t) {
  switch (t) {
    case FrameType::SessionCreate:
    case FrameType::SessionDestroy:
    case FrameType::Sync:
    case FrameType::SyncImages:
    case FrameType::Mtp:
    case FrameType::SpecRestore:
    case FrameType::EvalBatch:
    case FrameType::MixedBatch: return true;
    default: return false;
  }
}

Session::Session(int fd, const SessionConfig &cfg, const Logger &log)
    : cfg_(cfg),
      log_(log),
      ch_(fd, control::ChannelConfig{cfg.role, cfg.max_frame_bytes, cfg.spin_ns}) {}

// ---- shared helpers --------------------------------------------------------

int Session::leader_command(FrameType t, Error &err) {
  if (!is_leader())
    return err.set(DS4TP_ESTATE, "{}: only the leader sends commands; this rank is the worker",
                   name(t));
  if (stopped()) return err.set(DS4TP_ESTATE, "{}: STOP was already sent", name(t));
  if (await_ != Await::None)
    return err.set(DS4TP_ESTATE,
                   "{}: the {} for {} (session {}) is unread: call ds4tp_{} first", name(t),
                   await_ == Await::Ack ? "COMMAND_ACK" : "SYNC_ACK", name(await_type_),
                   await_session_, await_ == Await::Ack ? "wait_ack" : "wait_sync");
  if (logits_left_ > 0)
    return err.set(DS4TP_ESTATE,
                   "{}: {} LOGITS half(s) of the previous {} are unread: call ds4tp_recv_logits "
                   "first",
                   name(t), logits_left_, name(await_type_));
  if (verify_open_ && t != FrameType::VerifyCommit)
    return err.set(DS4TP_ESTATE,
                   "{}: the VERIFY of session {} is open: send its VERIFY_COMMIT first (mode 0 "
                   "count 0 if the verify failed)",
                   name(t), verify_session_);
  if (!verify_open_ && t == FrameType::VerifyCommit)
    return err.set(DS4TP_ESTATE, "VERIFY_COMMIT without an open VERIFY");
  return DS4TP_OK;
}

int Session::worker_only(const char *call, Error &err) {
  if (is_leader()) return err.set(DS4TP_ESTATE, "{} is a worker call; this rank is the leader", call);
  if (finished_)
    return err.set(DS4TP_ESTATE, "{}: this worker already reported a failure to the leader", call);
  return DS4TP_OK;
}

int Session::leader_only(const char *call, Error &err) {
  if (!is_leader()) return err.set(DS4TP_ESTATE, "{} is a leader call; this rank is the worker", call);
  return DS4TP_OK;
}

int Session::check_logits_floats(uint32_t floats, uint64_t rows, Error &err) {
  if (floats == 0) return DS4TP_OK;
  if (wire::logits_bytes(floats) > cfg_.max_frame_bytes)
    return err.set(DS4TP_EINVAL,
                   "logits_floats {} does not fit one frame of max_frame_bytes {}: raise "
                   "max_frame_bytes on both ranks",
                   floats, cfg_.max_frame_bytes);
  // The worker holds every half of a reply at once.
  if (uint64_t(floats) * 4 * rows > uint64_t(cfg_.max_frame_bytes) * 16)
    return err.set(DS4TP_EINVAL,
                   "{} logits halves of {} floats exceed 16 x max_frame_bytes ({} bytes)", rows,
                   floats, uint64_t(cfg_.max_frame_bytes) * 16);
  return DS4TP_OK;
}

void Session::expect_ack(Await a, FrameType t, uint64_t session, uint32_t rows,
                         uint32_t floats) {
  await_ = a;
  await_type_ = t;
  await_session_ = session;
  logits_after_ack_ = floats ? rows : 0;
  logits_floats_ = floats;
  logits_row_ = 0;
}

int Session::read_expect(FrameType want, const char *what, control::Frame &f, Error &err) {
  for (;;) {
    if (int rc = ch_.recv(f, cfg_.frame_timeout_ms, what, err)) return rc;
    FrameType got = f.type();
    if (got == want && got != FrameType::HeadRow) return DS4TP_OK;
    if (got == FrameType::WorkerError) {
      wire::WorkerErrorMsg m;
      if (int rc = wire::decode(f.payload, f.bytes(), m, err)) return rc;
      set_remote_status(m.status);
      return err.set(DS4TP_EREMOTE, "{}: the worker failed {} for session {} with status {}{}{}",
                     what, wire::frame_name(m.command), m.session, m.status,
                     m.message.empty() ? "" : ": ", m.message);
    }
    if (got == FrameType::HeadRow) {
      wire::HeadRowHead h;
      if (int rc = wire::decode(f.payload, f.bytes(), h, err)) return rc;
      bool stale = want == FrameType::HeadRow ? h.block < block_ : h.block <= block_;
      if (stale) {
        log_.debug("dropping a stale HEAD_ROW of verify block {} (now at block {})", h.block,
                   block_);
        continue;
      }
      if (want == FrameType::HeadRow) return DS4TP_OK;
    }
    return err.set(DS4TP_EDESYNC,
                   "{}: the peer sent {} ({} bytes) instead: the ranks are out of lockstep",
                   what, name(got), f.bytes());
  }
}

template <typename Msg>
int Session::swap(FrameType t, size_t bytes, const Msg &mine, Msg &peer, const char *what,
                  Error &err) {
  int rc = ch_.send(t, bytes, cfg_.frame_timeout_ms, [&](wire::Writer &w) { wire::encode(w, mine); },
                    err);
  if (rc) return rc;
  control::Frame f;
  if ((rc = read_expect(t, what, f, err))) return rc;
  return wire::decode(f.payload, f.bytes(), peer, err);
}

// ---- leader: commands -------------------------------------------------------

int Session::send_session_create(uint64_t session, uint32_t ctx_size, Error &err) {
  Lock l(mu_);
  if (int rc = leader_command(FrameType::SessionCreate, err)) return rc;
  if (session == 0) return err.set(DS4TP_EINVAL, "session id 0 is invalid");
  if (ctx_size == 0) return err.set(DS4TP_EINVAL, "ctx_size must be positive");
  wire::CreateMsg m{session, ctx_size};
  int rc = ch_.send(FrameType::SessionCreate, wire::kCreateBytes, cfg_.frame_timeout_ms,
                    [&](wire::Writer &w) { wire::encode(w, m); }, err);
  if (rc == DS4TP_OK) expect_ack(Await::Ack, FrameType::SessionCreate, session, 0, 0);
  return rc;
}

int Session::send_session_destroy(uint64_t session, Error &err) {
  Lock l(mu_);
  if (int rc = leader_command(FrameType::SessionDestroy, err)) return rc;
  if (session == 0) return err.set(DS4TP_EINVAL, "session id 0 is invalid");
  wire::SessionMsg m{session};
  int rc = ch_.send(FrameType::SessionDestroy, wire::kSessionBytes, cfg_.frame_timeout_ms,
                    [&](wire::Writer &w) { wire::encode(w, m); }, err);
  if (rc == DS4TP_OK) expect_ack(Await::Ack, FrameType::SessionDestroy, session, 0, 0);
  return rc;
}

int Session::send_sync(uint64_t session, const int32_t *tokens, uint32_t n, uint32_t lf,
                       Error &err) {
  Lock l(mu_);
  if (int rc = leader_command(FrameType::Sync, err)) return rc;
  if (session == 0) return err.set(DS4TP_EINVAL, "session id 0 is invalid");
  if (n > 0 && tokens == nullptr) return err.set(DS4TP_EINVAL, "tokens is NULL but n_tokens is {}", n);
  if (int rc = check_logits_floats(lf, 1, err)) return rc;
  int rc = ch_.send(FrameType::Sync, wire::sync_bytes(n), cfg_.frame_timeout_ms,
                    [&](wire::Writer &w) { wire::encode_sync(w, session, lf, tokens, n); }, err);
  if (rc == DS4TP_OK) expect_ack(Await::SyncAck, FrameType::Sync, session, 1, lf);
  return rc;
}

int Session::send_sync_images(uint64_t session, const int32_t *tokens, uint32_t n,
                              const wire::ImageMeta *images, const float *const *embd,
                              uint32_t n_images, uint32_t lf, Error &err) {
  Lock l(mu_);
  if (int rc = leader_command(FrameType::SyncImages, err)) return rc;
  if (session == 0) return err.set(DS4TP_EINVAL, "session id 0 is invalid");
  if (n > 0 && tokens == nullptr) return err.set(DS4TP_EINVAL, "tokens is NULL but n_tokens is {}", n);
  if (n_images > 0 && (images == nullptr || embd == nullptr))
    return err.set(DS4TP_EINVAL, "images is NULL but n_images is {}", n_images);
  for (uint32_t i = 0; i < n_images; i++) {
    const wire::ImageMeta &m = images[i];
    if (m.token_count == 0 || m.width == 0 || m.height == 0)
      return err.set(DS4TP_EINVAL, "image {}: token_count, width and height must be positive", i);
    if (uint64_t(m.token_start) + m.token_count > n)
      return err.set(DS4TP_EINVAL, "image {} spans tokens {}..{} but the prompt has {}", i,
                     m.token_start, uint64_t(m.token_start) + m.token_count, n);
    if (m.data_width != cfg_.n_embd)
      return err.set(DS4TP_EINVAL, "image {}: data_width {} must be the model's n_embd {}", i,
                     m.data_width, cfg_.n_embd);
    if (embd[i] == nullptr) return err.set(DS4TP_EINVAL, "image {}: embeddings are NULL", i);
  }
  if (int rc = check_logits_floats(lf, 1, err)) return rc;
  uint64_t bytes = wire::sync_images_bytes(n, images, n_images);
  int rc = ch_.send(FrameType::SyncImages, bytes, cfg_.frame_timeout_ms,
                    [&](wire::Writer &w) {
                      wire::encode_sync_images(w, session, lf, tokens, n, images, embd, n_images);
                    },
                    err);
  if (rc == DS4TP_OK) expect_ack(Await::SyncAck, FrameType::SyncImages, session, 1, lf);
  return rc;
}

int Session::send_eval(uint64_t session, uint64_t seq, int32_t token, uint32_t lf, Error &err) {
  Lock l(mu_);
  if (int rc = leader_command(FrameType::Eval, err)) return rc;
  if (session == 0) return err.set(DS4TP_EINVAL, "session id 0 is invalid");
  if (seq <= last_eval_seq_)
    return err.set(DS4TP_EINVAL, "eval seq {} must be above the last one, {}", seq, last_eval_seq_);
  if (int rc = check_logits_floats(lf, 1, err)) return rc;
  wire::EvalMsg m{session, seq, token, lf};
  int rc = ch_.send(FrameType::Eval, wire::kEvalBytes, cfg_.frame_timeout_ms,
                    [&](wire::Writer &w) { wire::encode(w, m); }, err);
  if (rc) return rc;
  last_eval_seq_ = seq;
  await_type_ = FrameType::Eval;
  logits_left_ = lf ? 1 : 0;
  logits_floats_ = lf;
  logits_row_ = 0;
  return DS4TP_OK;
}

int Session::send_mtp(uint64_t session, uint64_t seq, int32_t token, uint32_t limit, Error &err) {
  Lock l(mu_);
  if (int rc = leader_command(FrameType::Mtp, err)) return rc;
  if (session == 0) return err.set(DS4TP_EINVAL, "session id 0 is invalid");
  if (seq <= last_eval_seq_)
    return err.set(DS4TP_EINVAL, "eval seq {} must be above the last one, {}", seq, last_eval_seq_);
  if (limit < 1 || limit > wire::kMtpLimitMax)
    return err.set(DS4TP_EINVAL, "MTP draft limit {} outside 1..{}", limit, wire::kMtpLimitMax);
  wire::MtpMsg m{session, seq, token, limit};
  int rc = ch_.send(FrameType::Mtp, wire::kMtpBytes, cfg_.frame_timeout_ms,
                    [&](wire::Writer &w) { wire::encode(w, m); }, err);
  if (rc) return rc;
  last_eval_seq_ = seq;
  expect_ack(Await::Ack, FrameType::Mtp, session, 0, 0);
  return DS4TP_OK;
}

int Session::send_rewind(uint64_t session, int32_t pos, Error &err) {
  Lock l(mu_);
  if (int rc = leader_command(FrameType::Rewind, err)) return rc;
  if (session == 0) return err.set(DS4TP_EINVAL, "session id 0 is invalid");
  if (pos < 0) return err.set(DS4TP_EINVAL, "rewind position {} is negative", pos);
  wire::PosMsg m{session, pos};
  return ch_.send(FrameType::Rewind, wire::kPosBytes, cfg_.frame_timeout_ms,
                  [&](wire::Writer &w) { wire::encode(w, m); }, err);
}

int Session::send_invalidate(uint64_t session, Error &err) {
  Lock l(mu_);
  if (int rc = leader_command(FrameType::Invalidate, err)) return rc;
  if (session == 0) return err.set(DS4TP_EINVAL, "session id 0 is invalid");
  wire::SessionMsg m{session};
  return ch_.send(FrameType::Invalidate, wire::kSessionBytes, cfg_.frame_timeout_ms,
                  [&](wire::Writer &w) { wire::encode(w, m); }, err);
}

int Session::send_spec_restore(uint64_t session, int32_t pos, Error &err) {
  Lock l(mu_);
  if (int rc = leader_command(FrameType::SpecRestore, err)) return rc;
  if (session == 0) return err.set(DS4TP_EINVAL, "session id 0 is invalid");
  if (pos < 0) return err.set(DS4TP_EINVAL, "restore position {} is negative", pos);
  wire::PosMsg m{session, pos};
  int rc = ch_.send(FrameType::SpecRestore, wire::kPosBytes, cfg_.frame_timeout_ms,
                    [&](wire::Writer &w) { wire::encode(w, m); }, err);
  if (rc == DS4TP_OK) expect_ack(Await::Ack, FrameType::SpecRestore, session, 0, 0);
  return rc;
}

int Session::send_eval_batch(const wire::BatchItem *items, uint32_t n, uint32_t lf, Error &err) {
  Lock l(mu_);
  if (int rc = leader_command(FrameType::EvalBatch, err)) return rc;
  if (n == 0 || items == nullptr) return err.set(DS4TP_EINVAL, "an eval batch needs at least 1 item");
  for (uint32_t i = 0; i < n; i++) {
    if (items[i].session == 0) return err.set(DS4TP_EINVAL, "batch item {} has session id 0", i);
    if (items[i].flags != 0) return err.set(DS4TP_EINVAL, "batch item {} flags must be 0", i);
  }
  if (int rc = check_logits_floats(lf, n, err)) return rc;
  int rc = ch_.send(FrameType::EvalBatch, wire::eval_batch_bytes(n), cfg_.frame_timeout_ms,
                    [&](wire::Writer &w) { wire::encode_eval_batch(w, lf, items, n); }, err);
  if (rc == DS4TP_OK) expect_ack(Await::Ack, FrameType::EvalBatch, 0, n, lf);
  return rc;
}

int Session::send_mixed_batch(uint64_t session, const int32_t *prompt, uint32_t np,
                              const wire::BatchItem *items, uint32_t n, uint32_t lf, Error &err) {
  Lock l(mu_);
  if (int rc = leader_command(FrameType::MixedBatch, err)) return rc;
  if (session == 0) return err.set(DS4TP_EINVAL, "session id 0 is invalid");
  if (np == 0 || prompt == nullptr)
    return err.set(DS4TP_EINVAL, "a mixed batch needs at least 1 prompt token");
  if (n == 0 || items == nullptr)
    return err.set(DS4TP_EINVAL, "a mixed batch needs at least 1 decode item");
  for (uint32_t i = 0; i < n; i++) {
    if (items[i].session == 0) return err.set(DS4TP_EINVAL, "batch item {} has session id 0", i);
    if (items[i].flags != 0) return err.set(DS4TP_EINVAL, "batch item {} flags must be 0", i);
  }
  if (int rc = check_logits_floats(lf, uint64_t(n) + 1, err)) return rc;
  int rc = ch_.send(FrameType::MixedBatch, wire::mixed_batch_bytes(np, n), cfg_.frame_timeout_ms,
                    [&](wire::Writer &w) {
                      wire::encode_mixed_batch(w, session, lf, prompt, np, items, n);
                    },
                    err);
  if (rc == DS4TP_OK) expect_ack(Await::Ack, FrameType::MixedBatch, session, n + 1, lf);
  return rc;
}

int Session::send_verify(uint64_t session, const int32_t *drafts, uint32_t n, uint32_t flags,
                         Error &err) {
  Lock l(mu_);
  if (int rc = leader_command(FrameType::Verify, err)) return rc;
  if (session == 0) return err.set(DS4TP_EINVAL, "session id 0 is invalid");
  if (n < 1 || n > wire::kVerifyRowsMax || drafts == nullptr)
    return err.set(DS4TP_EINVAL, "a verify block holds 1..{} drafts, not {}", wire::kVerifyRowsMax, n);
  if (flags & ~wire::kVerifyFlagsAll)
    return err.set(DS4TP_EINVAL, "unknown verify flag bits 0x{:x}", flags & ~wire::kVerifyFlagsAll);
  if ((flags & wire::kVerifyDraftSeed) && !(flags & wire::kVerifyDraftShared))
    return err.set(DS4TP_EINVAL, "DS4TP_VERIFY_DRAFT_SEED needs DS4TP_VERIFY_DRAFT_SHARED");
  int rc = ch_.send(FrameType::Verify, wire::verify_bytes(n), cfg_.frame_timeout_ms,
                    [&](wire::Writer &w) { wire::encode_verify(w, session, flags, drafts, n); },
                    err);
  if (rc) return rc;
  verify_open_ = true;
  verify_session_ = session;
  verify_rows_ = n;
  return DS4TP_OK;
}

int Session::send_verify_commit(int32_t mode, int32_t count, uint32_t lf, Error &err) {
  Lock l(mu_);
  if (int rc = leader_command(FrameType::VerifyCommit, err)) return rc;
  switch (mode) {
    case wire::kCommitFull:
      if (count != 0) return err.set(DS4TP_EINVAL, "a full commit takes count 0, not {}", count);
      break;
    case wire::kCommitPrefix:
      if (count < 1 || uint32_t(count) >= verify_rows_)
        return err.set(DS4TP_EINVAL, "a prefix commit keeps 1..{} of the {} rows, not {}",
                       verify_rows_ - 1, verify_rows_, count);
      break;
    case wire::kCommitRollback:
      if (count < 0 || uint32_t(count) > verify_rows_)
        return err.set(DS4TP_EINVAL, "a rollback replays 0..{} tokens, not {}", verify_rows_, count);
      break;
    default:
      return err.set(DS4TP_EINVAL, "commit mode {} is not ROLLBACK (0), FULL (1) or PREFIX (2)", mode);
  }
  bool replay = mode == wire::kCommitRollback && count > 0;
  if (int rc = check_logits_floats(replay ? lf : 0, 1, err)) return rc;
  wire::CommitMsg m{verify_session_, mode, count, replay ? lf : 0};
  int rc = ch_.send(FrameType::VerifyCommit, wire::kCommitBytes, cfg_.frame_timeout_ms,
                    [&](wire::Writer &w) { wire::encode(w, m); }, err);
  if (rc) return rc;
  verify_open_ = false;
  await_type_ = FrameType::VerifyCommit;
  logits_left_ = replay && lf ? 1 : 0;
  logits_floats_ = lf;
  logits_row_ = 0;
  return DS4TP_OK;
}

int Session::send_draft(uint64_t session, int32_t token, int32_t pos, uint32_t mode, Error &err) {
  Lock l(mu_);
  if (int rc = leader_command(FrameType::Draft, err)) return rc;
  if (session == 0) return err.set(DS4TP_EINVAL, "session id 0 is invalid");
  if (token < 0) return err.set(DS4TP_EINVAL, "draft token {} is negative", token);
  if (pos <= 0) return err.set(DS4TP_EINVAL, "draft position {} must be positive", pos);
  if (mode != wire::kDraftMaintain && mode != wire::kDraftPropose)
    return err.set(DS4TP_EINVAL, "draft mode {} is not MAINTAIN (1) or PROPOSE (2)", mode);
  wire::DraftMsg m{session, token, pos, mode};
  return ch_.send(FrameType::Draft, wire::kDraftBytes, cfg_.frame_timeout_ms,
                  [&](wire::Writer &w) { wire::encode(w, m); }, err);
}

int Session::send_stop(Error &err) {
  Lock l(mu_);
  if (int rc = leader_command(FrameType::Stop, err)) return rc;
  stopped_.store(true, std::memory_order_release);  // the close that follows is expected
  return ch_.send(FrameType::Stop, 0, cfg_.frame_timeout_ms, [](wire::Writer &) {}, err);
}

// ---- leader: replies ----------------------------------------------------------

int Session::wait_ack(uint64_t session, int32_t *status, Error &err) {
  Lock l(mu_);
  if (int rc = leader_only("ds4tp_wait_ack", err)) return rc;
  if (await_ != Await::Ack)
    return err.set(DS4TP_ESTATE, "no command awaits a COMMAND_ACK{}",
                   await_ == Await::SyncAck ? " (the last SYNC is answered by ds4tp_wait_sync)" : "");
  if (session != await_session_)
    return err.set(DS4TP_EINVAL, "waiting for the ack of session {}, but the outstanding {} is for "
                   "session {}", session, name(await_type_), await_session_);
  char what[96];
  std::snprintf(what, sizeof what, "waiting for the COMMAND_ACK of %s (session %llu)",
                name(await_type_), (unsigned long long)await_session_);
  // A worker failure read here (EREMOTE) gets its status from the C layer,
  // which also covers one the liveness watcher latched first.
  control::Frame f;
  if (int rc = read_expect(FrameType::CommandAck, what, f, err)) return rc;
  wire::AckMsg m;
  if (int rc = wire::decode(f.payload, f.bytes(), m, err)) return rc;
  if (m.session != await_session_ || m.command != uint16_t(await_type_))
    return err.set(DS4TP_EDESYNC, "{}: the worker acknowledged {} for session {} instead", what,
                   wire::frame_name(m.command), m.session);
  return settle_ack(m.session, m.status, status, err);
}

int Session::settle_ack(uint64_t session, int32_t st, int32_t *status, Error &err) {
  await_ = Await::None;
  if (status) *status = st;
  if (st < 0) {
    set_remote_status(st);
    return err.set(DS4TP_EREMOTE, "the worker failed {} for session {} with status {}",
                   name(await_type_), session, st);
  }
  logits_left_ = st == 0 ? logits_after_ack_ : 0;
  return DS4TP_OK;
}

int Session::wait_sync(uint64_t session, int32_t *status, uint32_t *position, Error &err) {
  Lock l(mu_);
  if (int rc = leader_only("ds4tp_wait_sync", err)) return rc;
  if (await_ != Await::SyncAck)
    return err.set(DS4TP_ESTATE, "no SYNC awaits its SYNC_ACK{}",
                   await_ == Await::Ack ? " (the last command is answered by ds4tp_wait_ack)" : "");
  if (session != await_session_)
    return err.set(DS4TP_EINVAL, "waiting for the sync of session {}, but the outstanding {} is "
                   "for session {}", session, name(await_type_), await_session_);
  char what[96];
  std::snprintf(what, sizeof what, "waiting for the SYNC_ACK of %s (session %llu)",
                name(await_type_), (unsigned long long)await_session_);
  control::Frame f;
  if (int rc = read_expect(FrameType::SyncAck, what, f, err)) return rc;
  wire::SyncAckMsg m;
  if (int rc = wire::decode(f.payload, f.bytes(), m, err)) return rc;
  if (m.session != await_session_)
    return err.set(DS4TP_EDESYNC, "{}: the worker answered for session {} instead", what, m.session);
  if (position) *position = m.position;
  return settle_ack(m.session, m.status, status, err);
}

int Session::recv_logits(float *dst, uint32_t count, Error &err) {
  Lock l(mu_);
  if (int rc = leader_only("ds4tp_recv_logits", err)) return rc;
  if (logits_left_ == 0)
    return err.set(DS4TP_ESTATE, "no LOGITS half is due{}",
                   await_ != Await::None ? ": wait for the command's ack first" : "");
  if (count != logits_floats_)
    return err.set(DS4TP_EINVAL, "recv_logits for {} floats, but {} asked for {} per half", count,
                   name(await_type_), logits_floats_);
  control::Frame f;
  if (int rc = read_expect(FrameType::Logits, "waiting for a LOGITS half", f, err)) return rc;
  wire::LogitsHead h;
  if (int rc = wire::decode(f.payload, f.bytes(), h, err)) return rc;
  if (h.count != count || h.row != logits_row_)
    return err.set(DS4TP_EDESYNC, "LOGITS half {} of {} floats arrived, expected half {} of {}",
                   h.row, h.count, logits_row_, count);
  wire::read_floats(h.floats, dst, count);
  logits_row_++;
  logits_left_--;
  return DS4TP_OK;
}

int Session::head_row_recv(uint32_t row, float *dst, uint32_t floats, Error &err) {
  Lock l(mu_);
  if (int rc = leader_only("ds4tp_head_row_recv", err)) return rc;
  if (block_ == 0)
    return err.set(DS4TP_ESTATE, "head rows belong to a verify block: call ds4tp_block_begin first");
  if (row >= wire::kVerifyRowsMax || floats < 1 || floats > wire::kHeadRowMax)
    return err.set(DS4TP_EINVAL, "head row {} of {} floats: rows are 0..{}, floats 1..{}", row,
                   floats, wire::kVerifyRowsMax - 1, wire::kHeadRowMax);
  control::Frame f;
  if (int rc = read_expect(FrameType::HeadRow, "waiting for the worker's HEAD_ROW", f, err))
    return rc;
  wire::HeadRowHead h;
  if (int rc = wire::decode(f.payload, f.bytes(), h, err)) return rc;
  if (h.block != block_ || h.row != row || h.floats != floats)
    return err.set(DS4TP_EDESYNC,
                   "HEAD_ROW for (block {}, row {}, {} floats) arrived, this rank waits for "
                   "(block {}, row {}, {} floats)",
                   h.block, h.row, h.floats, block_, row, floats);
  wire::read_floats(h.data, dst, floats);
  return DS4TP_OK;
}

// ---- both ranks ------------------------------------------------------------

int Session::hash_check(uint64_t session, uint64_t seq, uint64_t hash, Error &err) {
  Lock l(mu_);
  wire::HashMsg mine{session, seq, hash};
  wire::HashMsg peer;
  if (is_leader()) {
    if (int rc = leader_command(FrameType::Hash, err)) return rc;
    int rc = ch_.send(FrameType::Hash, wire::kHashBytes, cfg_.frame_timeout_ms,
                      [&](wire::Writer &w) { wire::encode(w, mine); }, err);
    if (rc) return rc;
    control::Frame f;
    if ((rc = read_expect(FrameType::Hash, "waiting for the worker's HASH", f, err))) return rc;
    if ((rc = wire::decode(f.payload, f.bytes(), peer, err))) return rc;
  } else {
    if (int rc = worker_only("ds4tp_hash_check", err)) return rc;
    if (owe_ != Owe::Hash)
      return err.set(DS4TP_ESTATE, "on the worker, ds4tp_hash_check answers the leader's HASH "
                     "command: call it after ds4tp_recv_command returned DS4TP_CMD_HASH");
    peer = leader_hash_;
    int rc = ch_.send(FrameType::Hash, wire::kHashBytes, cfg_.frame_timeout_ms,
                      [&](wire::Writer &w) { wire::encode(w, mine); }, err);
    if (rc) return rc;
    owe_ = Owe::None;
  }
  if (peer.session != session || peer.seq != seq)
    return err.set(DS4TP_EDESYNC,
                   "hash check of (session {}, seq {}) here, (session {}, seq {}) on the peer: the "
                   "ranks are checking different points",
                   session, seq, peer.session, peer.seq);
  if (peer.hash != hash) {
    const bool lead = is_leader();
    return err.set(DS4TP_EDIVERGED,
                   "lockstep divergence at session {} seq {}: leader state hash 0x{:016x}, worker "
                   "0x{:016x}; the transport is fine but the engines computed different states "
                   "(invalidate and sync the session again on both ranks, or stop)",
                   session, seq, lead ? hash : peer.hash, lead ? peer.hash : hash);
  }
  return DS4TP_OK;
}

int Session::sync_checkpoint(uint32_t point, int32_t current, int32_t total, bool requested,
                             bool *cancelled, Error &err) {
  Lock l(mu_);
  if (finished_) return err.set(DS4TP_ESTATE, "this worker already reported a failure");
  wire::CheckpointMsg mine{checkpoint_seq_ + 1, point, current, total, requested ? 1u : 0u};
  wire::CheckpointMsg peer;
  char what[96];
  std::snprintf(what, sizeof what, "waiting for the peer's SYNC_CHECKPOINT %llu (point %u)",
                (unsigned long long)mine.seq, point);
  if (int rc = swap(FrameType::SyncCheckpoint, wire::kCheckpointBytes, mine, peer, what, err))
    return rc;
  if (peer.seq != mine.seq || peer.point != point || peer.current != current ||
      peer.total != total)
    return err.set(DS4TP_EDESYNC,
                   "sync checkpoints differ: here (#{}, point {}, {}/{}), peer (#{}, point {}, "
                   "{}/{}): both ranks must call ds4tp_sync_checkpoint at the same boundaries",
                   mine.seq, point, current, total, peer.seq, peer.point, peer.current, peer.total);
  checkpoint_seq_ = mine.seq;
  if (cancelled) *cancelled = requested || peer.cancel != 0;
  return DS4TP_OK;
}

int Session::agree_exec_mode(uint32_t flags, uint32_t *caps, Error &err) {
  Lock l(mu_);
  wire::ExecModeMsg mine{flags, caps ? *caps : 0};
  wire::ExecModeMsg peer;
  if (int rc = swap(FrameType::ExecMode, wire::kExecModeBytes, mine, peer,
                    "waiting for the peer's EXEC_MODE", err))
    return rc;
  if (peer.flags != flags)
    return err.set(DS4TP_EIDENTITY,
                   "execution mode flags differ: this rank 0x{:x}, peer 0x{:x} (bits 0x{:x} set on "
                   "one side only): resident layouts must match, so enable the same modes on both "
                   "ranks",
                   flags, peer.flags, flags ^ peer.flags);
  if (caps) *caps = mine.caps & peer.caps;
  return DS4TP_OK;
}

int Session::agree_drafter_split(bool on, const uint8_t *meta, bool *agreed, bool *peer_on,
                                 Error &err) {
  Lock l(mu_);
  wire::DrafterSplitMsg mine;
  mine.on = on ? 1 : 0;
  if (meta) std::memcpy(mine.meta.data(), meta, mine.meta.size());
  wire::DrafterSplitMsg peer;
  if (int rc = swap(FrameType::DrafterSplit, wire::kDrafterSplitBytes, mine, peer,
                    "waiting for the peer's DRAFTER_SPLIT", err))
    return rc;
  if (peer_on) *peer_on = peer.on != 0;
  bool both = mine.on && peer.on;
  if (both && mine.meta != peer.meta) {
    size_t k = 0;
    while (mine.meta[k] == peer.meta[k]) k++;
    return err.set(DS4TP_EIDENTITY,
                   "both ranks opted into the split drafter with different metadata: byte {} is "
                   "0x{:02x} here and 0x{:02x} on the peer; load the same drafter on both ranks",
                   k, mine.meta[k], peer.meta[k]);
  }
  if (agreed) *agreed = both;
  return DS4TP_OK;
}

int Session::block_begin(uint32_t rows, uint32_t n_layers, uint32_t *gpl, Error &err) {
  Lock l(mu_);
  uint32_t offered = gpl ? *gpl : 1;
  if (rows < 1 || rows > wire::kVerifyRowsMax)
    return err.set(DS4TP_EINVAL, "verify block rows {} outside 1..{}", rows, wire::kVerifyRowsMax);
  if (n_layers < 1 || n_layers > cfg_.n_layer)
    return err.set(DS4TP_EINVAL, "verify block n_layers {} outside 1..{}", n_layers, cfg_.n_layer);
  if (offered < 1 || offered > wire::kBlockGatesMax)
    return err.set(DS4TP_EINVAL, "gates per layer {} outside 1..{}", offered, wire::kBlockGatesMax);
  if (block_open_)
    return err.set(DS4TP_ESTATE, "verify block {} is still open: call ds4tp_block_end first", block_);
  wire::BlockBeginMsg mine{block_ + 1, rows, n_layers, offered};
  wire::BlockBeginMsg peer;
  if (int rc = swap(FrameType::BlockBegin, wire::kBlockBeginBytes, mine, peer,
                    "waiting for the peer's BLOCK_BEGIN", err))
    return rc;
  if (peer.block != mine.block || peer.rows != rows || peer.n_layers != n_layers)
    return err.set(DS4TP_EDESYNC,
                   "verify blocks differ: here block {} of {} rows x {} layers, peer block {} of "
                   "{} rows x {} layers",
                   mine.block, rows, n_layers, peer.block, peer.rows, peer.n_layers);
  block_ = mine.block;
  block_open_ = true;
  if (gpl) *gpl = offered < peer.gates_per_layer ? offered : peer.gates_per_layer;
  return DS4TP_OK;
}

int Session::block_end(Error &err) {
  Lock l(mu_);
  if (!block_open_) return err.set(DS4TP_ESTATE, "no verify block is open");
  wire::BlockEndMsg mine{block_};
  wire::BlockEndMsg peer;
  if (int rc = swap(FrameType::BlockEnd, wire::kBlockEndBytes, mine, peer,
                    "waiting for the peer's BLOCK_END", err))
    return rc;
  if (peer.block != block_)
    return err.set(DS4TP_EDESYNC, "verify block {} ends here but block {} on the peer", block_,
                   peer.block);
  block_open_ = false;
  return DS4TP_OK;
}

int Session::small_exchange(const void *mine_bytes, void *peer_bytes, uint32_t bytes,
                            Error &err) {
  Lock l(mu_);
  if (bytes < 1 || bytes > wire::kSmallExchangeMax)
    return err.set(DS4TP_EINVAL, "small exchange of {} bytes: 1..{} allowed", bytes,
                   wire::kSmallExchangeMax);
  wire::SmallMsg mine;
  mine.seq = small_seq_ + 1;
  mine.bytes = bytes;
  std::memcpy(mine.data.data(), mine_bytes, bytes);
  wire::SmallMsg peer;
  if (int rc = swap(FrameType::SmallExchange, wire::small_bytes(bytes), mine, peer,
                    "waiting for the peer's SMALL_EXCHANGE", err))
    return rc;
  if (peer.seq != mine.seq || peer.bytes != bytes)
    return err.set(DS4TP_EDESYNC,
                   "small exchange #{} of {} bytes here, #{} of {} bytes on the peer: both ranks "
                   "must pass the same byte count",
                   mine.seq, bytes, peer.seq, peer.bytes);
  small_seq_ = mine.seq;
  std::memcpy(peer_bytes, peer.data.data(), bytes);
  return DS4TP_OK;
}

// ---- worker -----------------------------------------------------------------

uint32_t Session::logits_owed() const { return owed_logits_; }

int Session::decode_command(const control::Frame &f, Command &c, Error &err) {
  const uint8_t *p = f.payload;
  const size_t n = f.bytes();
  c.type = f.type();
  c.session = c.seq = c.hash = 0;
  c.token = c.pos = c.limit = c.count = 0;
  c.mode = c.flags = c.ctx_size = c.logits_floats = 0;
  c.tokens.clear();
  c.items.clear();
  c.images.clear();
  c.embd.clear();
  int rc = DS4TP_OK;
  switch (c.type) {
    case FrameType::Sync: {
      wire::SyncMsg m;
      m.tokens.swap(c.tokens);  // reuse capacity
      rc = wire::decode(p, n, m, err);
      c.session = m.session;
      c.logits_floats = m.logits_floats;
      c.tokens.swap(m.tokens);
      break;
    }
    case FrameType::SyncImages: {
      wire::SyncImagesMsg m;
      m.tokens.swap(c.tokens);
      m.images.swap(c.images);
      m.embd.swap(c.embd);
      rc = wire::decode(p, n, m, err);
      c.session = m.session;
      c.logits_floats = m.logits_floats;
      c.tokens.swap(m.tokens);
      c.images.swap(m.images);
      c.embd.swap(m.embd);
      if (rc == DS4TP_OK)
        for (size_t i = 0; i < c.images.size(); i++)
          if (c.images[i].data_width != cfg_.n_embd)
            return err.set(DS4TP_EPROTO, "SYNC_IMAGES image {}: data width {} is not the model's "
                           "n_embd {}", i, c.images[i].data_width, cfg_.n_embd);
      break;
    }
    case FrameType::Eval: {
      wire::EvalMsg m;
      rc = wire::decode(p, n, m, err);
      c.session = m.session;
      c.seq = m.seq;
      c.token = m.token;
      c.logits_floats = m.logits_floats;
      break;
    }
    case FrameType::Mtp: {
      wire::MtpMsg m;
      rc = wire::decode(p, n, m, err);
      c.session = m.session;
      c.seq = m.seq;
      c.token = m.token;
      c.limit = int32_t(m.limit);
      break;
    }
    case FrameType::Rewind:
    case FrameType::SpecRestore: {
      wire::PosMsg m;
      rc = wire::decode_pos(c.type, p, n, m, err);
      c.session = m.session;
      c.pos = m.pos;
      break;
    }
    case FrameType::Invalidate:
    case FrameType::SessionDestroy: {
      wire::SessionMsg m;
      rc = wire::decode_session(c.type, p, n, m, err);
      c.session = m.session;
      break;
    }
    case FrameType::Stop: rc = wire::decode_stop(p, n, err); break;
    case FrameType::Hash: {
      wire::HashMsg m;
      rc = wire::decode(p, n, m, err);
      c.session = m.session;
      c.seq = m.seq;
      c.hash = m.hash;
      leader_hash_ = m;
      break;
    }
    case FrameType::Verify: {
      wire::VerifyMsg m;
      m.drafts.swap(c.tokens);
      rc = wire::decode(p, n, m, err);
      c.session = m.session;
      c.flags = m.flags;
      c.tokens.swap(m.drafts);
      break;
    }
    case FrameType::VerifyCommit: {
      wire::CommitMsg m;
      rc = wire::decode(p, n, m, err);
      c.session = m.session;
      c.mode = uint32_t(m.mode);
      c.count = m.count;
      c.logits_floats = m.logits_floats;
      break;
    }
    case FrameType::SessionCreate: {
      wire::CreateMsg m;
      rc = wire::decode(p, n, m, err);
      c.session = m.session;
      c.ctx_size = m.ctx_size;
      break;
    }
    case FrameType::EvalBatch: {
      wire::EvalBatchMsg m;
      m.items.swap(c.items);
      rc = wire::decode(p, n, m, err);
      c.logits_floats = m.logits_floats;
      c.items.swap(m.items);
      break;
    }
    case FrameType::MixedBatch: {
      wire::MixedBatchMsg m;
      m.prompt.swap(c.tokens);
      m.items.swap(c.items);
      rc = wire::decode(p, n, m, err);
      c.session = m.session;
      c.logits_floats = m.logits_floats;
      c.tokens.swap(m.prompt);
      c.items.swap(m.items);
      break;
    }
    case FrameType::Draft: {
      wire::DraftMsg m;
      rc = wire::decode(p, n, m, err);
      c.session = m.session;
      c.token = m.token;
      c.pos = m.pos;
      c.mode = m.mode;
      break;
    }
    default:
      return err.set(DS4TP_EDESYNC,
                     "waiting for a command, the leader sent {} ({} bytes): the ranks are out of "
                     "lockstep (a symmetric call made on one rank only?)",
                     name(c.type), n);
  }
  return rc;
}

int Session::recv_command(Command &cmd, int64_t timeout_ms, Error &err) {
  Lock l(mu_);
  if (int rc = worker_only("ds4tp_recv_command", err)) return rc;
  if (stopped()) return err.set(DS4TP_ESTATE, "the leader sent STOP: no more commands follow");
  if (owe_ != Owe::None)
    return err.set(DS4TP_ESTATE, "the {} for {} (session {}) is still owed to the leader",
                   owe_ == Owe::Ack ? "COMMAND_ACK" : owe_ == Owe::SyncAck ? "SYNC_ACK" : "HASH",
                   name(last_type_), last_session_);
  if (owed_logits_ > 0)
    return err.set(DS4TP_ESTATE, "{} LOGITS half(s) of {} are still owed to the leader",
                   owed_logits_, name(last_type_));
  int64_t t = timeout_ms;
  if (verify_open_ && (t < 0 || t > cfg_.frame_timeout_ms)) t = cfg_.frame_timeout_ms;
  const char *what = verify_open_ ? "waiting for the VERIFY_COMMIT" : "waiting for a command";
  control::Frame f;
  if (int rc = ch_.recv(f, t, what, err)) return rc;
  last_type_ = f.type();  // a failure report names the frame even if it is malformed
  last_session_ = f.bytes() >= 8 ? wire::get_u64(f.payload) : 0;
  if (int rc = decode_command(f, cmd, err)) return rc;
  if (verify_open_ && cmd.type != FrameType::VerifyCommit)
    return err.set(DS4TP_EDESYNC, "after VERIFY the leader must send VERIFY_COMMIT, it sent {}",
                   name(cmd.type));
  switch (cmd.type) {
    case FrameType::Eval:
    case FrameType::Mtp:
      if (cmd.seq <= last_eval_seq_)
        return err.set(DS4TP_EDESYNC, "{} seq {} does not rise above the last eval seq {}",
                       name(cmd.type), cmd.seq, last_eval_seq_);
      last_eval_seq_ = cmd.seq;
      break;
    case FrameType::Verify:
      verify_open_ = true;
      verify_session_ = cmd.session;
      verify_rows_ = uint32_t(cmd.tokens.size());
      break;
    case FrameType::VerifyCommit: {
      if (!verify_open_) return err.set(DS4TP_EDESYNC, "VERIFY_COMMIT without a VERIFY");
      verify_open_ = false;
      if (cmd.session != verify_session_)
        return err.set(DS4TP_EDESYNC, "VERIFY_COMMIT for session {} but the VERIFY was for {}",
                       cmd.session, verify_session_);
      int32_t mode = int32_t(cmd.mode);
      if ((mode == wire::kCommitPrefix && uint32_t(cmd.count) >= verify_rows_) ||
          (mode == wire::kCommitRollback && uint32_t(cmd.count) > verify_rows_))
        return err.set(DS4TP_EPROTO, "VERIFY_COMMIT mode {} count {} does not fit a block of {} "
                       "drafts", mode, cmd.count, verify_rows_);
      break;
    }
    case FrameType::Stop: stopped_.store(true, std::memory_order_release); break;
    default: break;
  }
  uint32_t rows = logits_rows(cmd);
  if (rows > 0) {
    Error e;
    if (check_logits_floats(cmd.logits_floats, rows, e) != DS4TP_OK)
      return err.set(DS4TP_EPROTO, "{}: {}", name(cmd.type), e.message);
  }
  last_type_ = cmd.type;
  last_session_ = cmd.session;
  owed_logits_floats_ = cmd.logits_floats;
  owed_logits_row_ = 0;
  owed_logits_after_ack_ = 0;
  owed_logits_ = 0;
  switch (cmd.type) {
    case FrameType::Sync:
    case FrameType::SyncImages:
      owe_ = Owe::SyncAck;
      owed_logits_after_ack_ = rows;
      break;
    case FrameType::Hash: owe_ = Owe::Hash; break;
    default:
      if (has_status_reply(cmd.type)) {
        owe_ = Owe::Ack;
        owed_logits_after_ack_ = rows;
      } else {
        owed_logits_ = rows;
      }
  }
  return DS4TP_OK;
}

int Session::send_ack(int32_t status, Error &err) {
  Lock l(mu_);
  if (int rc = worker_only("ds4tp_send_ack", err)) return rc;
  if (owe_ != Owe::Ack)
    return err.set(DS4TP_ESTATE, "no COMMAND_ACK is owed{}",
                   owe_ == Owe::SyncAck ? " (a SYNC is answered with ds4tp_send_sync_ack)" : "");
  uint64_t session = last_type_ == FrameType::EvalBatch ? 0 : last_session_;
  wire::AckMsg m{session, status, uint16_t(last_type_)};
  int rc = ch_.send(FrameType::CommandAck, wire::kAckBytes, cfg_.frame_timeout_ms,
                    [&](wire::Writer &w) { wire::encode(w, m); }, err);
  if (rc) return rc;
  owe_ = Owe::None;
  owed_logits_ = status == 0 ? owed_logits_after_ack_ : 0;
  return DS4TP_OK;
}

int Session::send_sync_ack(int32_t status, uint32_t position, Error &err) {
  Lock l(mu_);
  if (int rc = worker_only("ds4tp_send_sync_ack", err)) return rc;
  if (owe_ != Owe::SyncAck) return err.set(DS4TP_ESTATE, "no SYNC_ACK is owed");
  wire::SyncAckMsg m{last_session_, status, position};
  int rc = ch_.send(FrameType::SyncAck, wire::kSyncAckBytes, cfg_.frame_timeout_ms,
                    [&](wire::Writer &w) { wire::encode(w, m); }, err);
  if (rc) return rc;
  owe_ = Owe::None;
  owed_logits_ = status == 0 ? owed_logits_after_ack_ : 0;
  return DS4TP_OK;
}

int Session::send_logits(const float *src, uint32_t count, Error &err) {
  Lock l(mu_);
  if (int rc = worker_only("ds4tp_send_logits", err)) return rc;
  if (owed_logits_ == 0)
    return err.set(DS4TP_ESTATE, "no LOGITS half is owed{}",
                   owe_ != Owe::None ? ": send the command's ack first" : "");
  if (count != owed_logits_floats_)
    return err.set(DS4TP_EINVAL, "logits half of {} floats, but {} asked for {}", count,
                   name(last_type_), owed_logits_floats_);
  uint32_t row = owed_logits_row_;
  int rc = ch_.send(FrameType::Logits, wire::logits_bytes(count), cfg_.frame_timeout_ms,
                    [&](wire::Writer &w) { wire::encode_logits(w, row, src, count); }, err);
  if (rc) return rc;
  owed_logits_row_++;
  owed_logits_--;
  return DS4TP_OK;
}

int Session::head_row_send(uint32_t row, const float *src, uint32_t floats, Error &err) {
  Lock l(mu_);
  if (int rc = worker_only("ds4tp_head_row_send", err)) return rc;
  if (block_ == 0)
    return err.set(DS4TP_ESTATE, "head rows belong to a verify block: call ds4tp_block_begin first");
  if (row >= wire::kVerifyRowsMax || floats < 1 || floats > wire::kHeadRowMax)
    return err.set(DS4TP_EINVAL, "head row {} of {} floats: rows are 0..{}, floats 1..{}", row,
                   floats, wire::kVerifyRowsMax - 1, wire::kHeadRowMax);
  uint64_t block = block_;
  return ch_.send(FrameType::HeadRow, wire::head_row_bytes(floats), cfg_.frame_timeout_ms,
                  [&](wire::Writer &w) { wire::encode_head_row(w, block, row, src, floats); },
                  err);
}

int Session::send_error(int32_t status, const std::string &message, Error &err) {
  Lock l(mu_);
  if (int rc = worker_only("ds4tp_send_error", err)) return rc;
  size_t len = message.size() < wire::kErrorMessageMax ? message.size() : wire::kErrorMessageMax;
  finished_ = true;
  owe_ = Owe::None;
  owed_logits_ = 0;
  return ch_.send(FrameType::WorkerError, wire::worker_error_bytes(len), kErrorReportMs,
                  [&](wire::Writer &w) {
                    wire::encode_worker_error(w, last_session_, status, uint16_t(last_type_),
                                              message.data(), len);
                  },
                  err);
}

}  // namespace ds4tp::session
