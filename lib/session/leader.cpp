// The leader's side of the session: commands, each through the one send
// path (`command`), and the replies it waits for.
#include "session/session.hpp"

#include <cstdio>

#include "common/clock.hpp"

namespace ds4tp::session {

using wire::FrameType;
using wire::frame_name;
using Lock = std::lock_guard<std::mutex>;

// ---- the one way a command leaves -----------------------------------------

template <typename Put>
int Session::command(FrameType t, uint64_t session, uint64_t bytes, const Put &put, Error &err,
                     uint64_t rows, uint32_t lf) {
  if (int rc = check_logits_floats(lf, rows, err)) return rc;
  if (int rc = send(t, bytes, put, err)) return rc;
  expect_reply(t, session, uint32_t(rows), lf);
  return DS4TP_OK;
}

template <typename Msg>
int Session::command(FrameType t, uint64_t session, const Msg &m, Error &err, uint64_t rows,
                     uint32_t lf) {
  return command(t, session, wire::fixed_bytes(t), [&](wire::Writer &w) { wire::encode(w, m); },
                 err, rows, lf);
}

// What the reply of the command just sent holds, from its row in the frame
// table: a status first (then the halves once it is 0), or the halves at once.
void Session::expect_reply(FrameType t, uint64_t session, uint32_t rows, uint32_t floats) {
  await_type_ = t;
  await_session_ = session;
  // The round trip ends at the first reply frame; a command owed nothing
  // has none.
  sent_ns_ = 0;
  if (cfg_.stats != nullptr && (wire::has_status_reply(t) || rows > 0)) {
    sent_ns_ = now_ns();
    sent_name_ = frame_name(t);
  }
  logits_floats_ = floats;
  logits_row_ = 0;
  if (wire::has_status_reply(t)) {
    await_ = wire::frame_info(t).reply;
    logits_after_ack_ = rows;
  } else {
    logits_left_ = rows;
  }
}

namespace {

int check_items(const wire::BatchItem *items, uint32_t n, Error &err) {
  for (uint32_t i = 0; i < n; i++) {
    if (items[i].session == 0) return err.set(DS4TP_EINVAL, "batch item {} has session id 0", i);
    if (items[i].flags != 0) return err.set(DS4TP_EINVAL, "batch item {} flags must be 0", i);
  }
  return DS4TP_OK;
}

}  // namespace

// ---- leader: commands -------------------------------------------------------

int Session::send_session_create(uint64_t session, uint32_t ctx_size, Error &err) {
  Lock l(mu_);
  if (int rc = leader_command(FrameType::SessionCreate, session, err)) return rc;
  if (ctx_size == 0) return err.set(DS4TP_EINVAL, "ctx_size must be positive");
  return command(FrameType::SessionCreate, session, wire::CreateMsg{session, ctx_size}, err);
}

int Session::send_session_destroy(uint64_t session, Error &err) {
  Lock l(mu_);
  if (int rc = leader_command(FrameType::SessionDestroy, session, err)) return rc;
  return command(FrameType::SessionDestroy, session, wire::SessionMsg{session}, err);
}

int Session::send_sync(uint64_t session, const int32_t *tokens, uint32_t n, uint32_t lf,
                       Error &err) {
  Lock l(mu_);
  if (int rc = leader_command(FrameType::Sync, session, err)) return rc;
  if (n > 0 && tokens == nullptr) return err.set(DS4TP_EINVAL, "tokens is NULL but n_tokens is {}", n);
  return command(FrameType::Sync, session, wire::sync_bytes(n),
                 [&](wire::Writer &w) { wire::encode_sync(w, session, lf, tokens, n); }, err,
                 wire::logits_rows(FrameType::Sync, lf, 0, 0, 0), lf);
}

int Session::send_sync_images(uint64_t session, const int32_t *tokens, uint32_t n,
                              const wire::ImageMeta *images, const float *const *embd,
                              uint32_t n_images, uint32_t lf, Error &err) {
  Lock l(mu_);
  if (int rc = leader_command(FrameType::SyncImages, session, err)) return rc;
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
  return command(FrameType::SyncImages, session, wire::sync_images_bytes(n, images, n_images),
                 [&](wire::Writer &w) {
                   wire::encode_sync_images(w, session, lf, tokens, n, images, embd, n_images);
                 },
                 err, wire::logits_rows(FrameType::SyncImages, lf, 0, 0, 0), lf);
}

int Session::send_eval(uint64_t session, uint64_t seq, int32_t token, uint32_t lf, Error &err) {
  Lock l(mu_);
  if (int rc = leader_command(FrameType::Eval, session, err)) return rc;
  if (seq <= last_eval_seq_)
    return err.set(DS4TP_EINVAL, "eval seq {} must be above the last one, {}", seq, last_eval_seq_);
  if (int rc = command(FrameType::Eval, session, wire::EvalMsg{session, seq, token, lf}, err,
                       wire::logits_rows(FrameType::Eval, lf, 0, 0, 0), lf))
    return rc;
  last_eval_seq_ = seq;
  return DS4TP_OK;
}

int Session::send_mtp(uint64_t session, uint64_t seq, int32_t token, uint32_t limit, Error &err) {
  Lock l(mu_);
  if (int rc = leader_command(FrameType::Mtp, session, err)) return rc;
  if (seq <= last_eval_seq_)
    return err.set(DS4TP_EINVAL, "eval seq {} must be above the last one, {}", seq, last_eval_seq_);
  if (limit < 1 || limit > wire::kMtpLimitMax)
    return err.set(DS4TP_EINVAL, "MTP draft limit {} outside 1..{}", limit, wire::kMtpLimitMax);
  if (int rc = command(FrameType::Mtp, session, wire::MtpMsg{session, seq, token, limit}, err))
    return rc;
  last_eval_seq_ = seq;
  return DS4TP_OK;
}

int Session::send_rewind(uint64_t session, int32_t pos, Error &err) {
  Lock l(mu_);
  if (int rc = leader_command(FrameType::Rewind, session, err)) return rc;
  if (pos < 0) return err.set(DS4TP_EINVAL, "rewind position {} is negative", pos);
  return command(FrameType::Rewind, session, wire::PosMsg{session, pos}, err);
}

int Session::send_invalidate(uint64_t session, Error &err) {
  Lock l(mu_);
  if (int rc = leader_command(FrameType::Invalidate, session, err)) return rc;
  return command(FrameType::Invalidate, session, wire::SessionMsg{session}, err);
}

int Session::send_spec_restore(uint64_t session, int32_t pos, Error &err) {
  Lock l(mu_);
  if (int rc = leader_command(FrameType::SpecRestore, session, err)) return rc;
  if (pos < 0) return err.set(DS4TP_EINVAL, "restore position {} is negative", pos);
  return command(FrameType::SpecRestore, session, wire::PosMsg{session, pos}, err);
}

int Session::send_eval_batch(const wire::BatchItem *items, uint32_t n, uint32_t lf, Error &err) {
  Lock l(mu_);
  if (int rc = leader_command(FrameType::EvalBatch, err)) return rc;
  if (n == 0 || items == nullptr) return err.set(DS4TP_EINVAL, "an eval batch needs at least 1 item");
  if (int rc = check_items(items, n, err)) return rc;
  return command(FrameType::EvalBatch, 0, wire::eval_batch_bytes(n),
                 [&](wire::Writer &w) { wire::encode_eval_batch(w, lf, items, n); }, err,
                 wire::logits_rows(FrameType::EvalBatch, lf, n, 0, 0), lf);
}

int Session::send_mixed_batch(uint64_t session, const int32_t *prompt, uint32_t np,
                              const wire::BatchItem *items, uint32_t n, uint32_t lf, Error &err) {
  Lock l(mu_);
  if (int rc = leader_command(FrameType::MixedBatch, session, err)) return rc;
  if (np == 0 || prompt == nullptr)
    return err.set(DS4TP_EINVAL, "a mixed batch needs at least 1 prompt token");
  if (n == 0 || items == nullptr)
    return err.set(DS4TP_EINVAL, "a mixed batch needs at least 1 decode item");
  if (int rc = check_items(items, n, err)) return rc;
  return command(FrameType::MixedBatch, session, wire::mixed_batch_bytes(np, n),
                 [&](wire::Writer &w) {
                   wire::encode_mixed_batch(w, session, lf, prompt, np, items, n);
                 },
                 err, wire::logits_rows(FrameType::MixedBatch, lf, n, 0, 0), lf);
}

int Session::send_verify(uint64_t session, const int32_t *drafts, uint32_t n, uint32_t flags,
                         Error &err) {
  Lock l(mu_);
  if (int rc = leader_command(FrameType::Verify, session, err)) return rc;
  if (n < 1 || n > wire::kVerifyRowsMax || drafts == nullptr)
    return err.set(DS4TP_EINVAL, "a verify block holds 1..{} drafts, not {}", wire::kVerifyRowsMax, n);
  if (flags & ~wire::kVerifyFlagsAll)
    return err.set(DS4TP_EINVAL, "unknown verify flag bits 0x{:x}", flags & ~wire::kVerifyFlagsAll);
  if ((flags & wire::kVerifyDraftSeed) && !(flags & wire::kVerifyDraftShared))
    return err.set(DS4TP_EINVAL, "DS4TP_VERIFY_DRAFT_SEED needs DS4TP_VERIFY_DRAFT_SHARED");
  if (int rc = command(FrameType::Verify, session, wire::verify_bytes(n),
                       [&](wire::Writer &w) { wire::encode_verify(w, session, flags, drafts, n); },
                       err))
    return rc;
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
  // Only a replaying rollback carries logits (and asks for them on the wire).
  uint64_t rows = wire::logits_rows(FrameType::VerifyCommit, lf, 0, mode, count);
  wire::CommitMsg m{verify_session_, mode, count, rows ? lf : 0};
  if (int rc = command(FrameType::VerifyCommit, verify_session_, m, err, rows, lf)) return rc;
  verify_open_ = false;
  return DS4TP_OK;
}

int Session::send_draft(uint64_t session, int32_t token, int32_t pos, uint32_t mode, Error &err) {
  Lock l(mu_);
  if (int rc = leader_command(FrameType::Draft, session, err)) return rc;
  if (token < 0) return err.set(DS4TP_EINVAL, "draft token {} is negative", token);
  if (pos <= 0) return err.set(DS4TP_EINVAL, "draft position {} must be positive", pos);
  if (mode != wire::kDraftMaintain && mode != wire::kDraftPropose)
    return err.set(DS4TP_EINVAL, "draft mode {} is not MAINTAIN (1) or PROPOSE (2)", mode);
  return command(FrameType::Draft, session, wire::DraftMsg{session, token, pos, mode}, err);
}

int Session::send_stop(Error &err) {
  Lock l(mu_);
  if (int rc = leader_command(FrameType::Stop, err)) return rc;
  stopped_.store(true, std::memory_order_release);  // the close that follows is expected
  return command(FrameType::Stop, 0, 0, [](wire::Writer &) {}, err);
}

// ---- leader: replies ----------------------------------------------------------

template <typename Msg>
int Session::read_ack(wire::Reply kind, uint64_t session, Msg &m, char (&what)[96], Error &err) {
  const bool ack = kind == wire::Reply::Ack;
  if (int rc = leader_only(ack ? "ds4tp_wait_ack" : "ds4tp_wait_sync", err)) return rc;
  if (await_ != kind) {
    if (ack)
      return err.set(DS4TP_ESTATE, "no command awaits a COMMAND_ACK{}",
                     await_ == wire::Reply::SyncAck ? " (the last SYNC is answered by ds4tp_wait_sync)" : "");
    return err.set(DS4TP_ESTATE, "no SYNC awaits its SYNC_ACK{}",
                   await_ == wire::Reply::Ack ? " (the last command is answered by ds4tp_wait_ack)" : "");
  }
  if (session != await_session_)
    return err.set(DS4TP_EINVAL, "waiting for the {} of session {}, but the outstanding {} is for "
                   "session {}", ack ? "ack" : "sync", session, frame_name(await_type_),
                   await_session_);
  FrameType reply = wire::reply_frame(kind);
  std::snprintf(what, sizeof what, "waiting for the %s of %s (session %llu)", frame_name(reply),
                frame_name(await_type_), (unsigned long long)await_session_);
  // A worker failure read here (EREMOTE) gets its status from the C layer,
  // which also covers one the liveness watcher latched first.
  talk::Frame f;
  if (int rc = read_expect(reply, what, f, err)) return rc;
  return wire::decode(f.payload, f.bytes(), m, err);
}

int Session::wait_ack(uint64_t session, int32_t *status, Error &err) {
  Lock l(mu_);
  char what[96];
  wire::AckMsg m;
  if (int rc = read_ack(wire::Reply::Ack, session, m, what, err)) return rc;
  if (m.session != await_session_ || m.command != uint16_t(await_type_))
    return err.set(DS4TP_EDESYNC, "{}: the worker acknowledged {} for session {} instead", what,
                   wire::frame_name(m.command), m.session);
  return settle_ack(m.session, m.status, status, err);
}

int Session::wait_sync(uint64_t session, int32_t *status, uint32_t *position, Error &err) {
  Lock l(mu_);
  char what[96];
  wire::SyncAckMsg m;
  if (int rc = read_ack(wire::Reply::SyncAck, session, m, what, err)) return rc;
  if (m.session != await_session_)
    return err.set(DS4TP_EDESYNC, "{}: the worker answered for session {} instead", what, m.session);
  if (position) *position = m.position;
  return settle_ack(m.session, m.status, status, err);
}

int Session::settle_ack(uint64_t session, int32_t st, int32_t *status, Error &err) {
  await_ = wire::Reply::None;
  if (status) *status = st;
  if (st < 0) {
    set_remote_status(st);
    return err.set(DS4TP_EREMOTE, "the worker failed {} for session {} with status {}",
                   frame_name(await_type_), session, st);
  }
  logits_left_ = st == 0 ? logits_after_ack_ : 0;
  return DS4TP_OK;
}

int Session::recv_logits(float *dst, uint32_t count, Error &err) {
  Lock l(mu_);
  if (int rc = leader_only("ds4tp_recv_logits", err)) return rc;
  if (logits_left_ == 0)
    return err.set(DS4TP_ESTATE, "no LOGITS half is due{}",
                   await_ != wire::Reply::None ? ": wait for the command's ack first" : "");
  if (count != logits_floats_)
    return err.set(DS4TP_EINVAL, "recv_logits for {} floats, but {} asked for {} per half", count,
                   frame_name(await_type_), logits_floats_);
  talk::Frame f;
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
  if (int rc = check_head_row(row, floats, err)) return rc;
  talk::Frame f;
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
}  // namespace ds4tp::session
