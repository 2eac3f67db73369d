// The worker's side of the session: command receipt and decoding, and the
// replies it owes (acks, logits halves, head rows, a failure report).
#include "session/session.hpp"

#include <cstring>

#include "session/command_fields.hpp"

namespace ds4tp::session {

using wire::FrameType;
using wire::frame_name;
using Lock = std::lock_guard<std::mutex>;

namespace {

constexpr int64_t kErrorReportMs = 1000;  // a failing worker does not wait long to say so

}  // namespace

// ---- worker -----------------------------------------------------------------

uint32_t Session::logits_owed() const { return owed_logits_; }

int Session::decode_command(const talk::Frame &f, Command &c, Error &err) {
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
  // The frame table's row for the type names the payload struct.
#define DS4TP_DECODE_COMMAND(t, number, name, sender, min, unit, max, reply, rows, slot, msg) \
  case FrameType::t: {                                                                     \
    wire::msg m;                                                                           \
    fields::lend(c, m);                                                                    \
    const int rc = wire::decode_payload(FrameType::t, p, n, m, err);                       \
    fields::take(c, m);                                                                    \
    if (rc != DS4TP_OK) return rc;                                                         \
    break;                                                                                 \
  }
  switch (c.type) {
    DS4TP_COMMAND_FRAMES(DS4TP_DECODE_COMMAND)
    default:
      return err.set(DS4TP_EDESYNC,
                     "waiting for a command, the leader sent {} ({} bytes): the ranks are out of "
                     "lockstep (a symmetric call made on one rank only?)",
                     frame_name(c.type), n);
  }
#undef DS4TP_DECODE_COMMAND
  if (c.type == FrameType::Hash) leader_hash_ = wire::HashMsg{c.session, c.seq, c.hash};
  if (c.type == FrameType::SyncImages)
    for (size_t i = 0; i < c.images.size(); i++)
      if (c.images[i].data_width != cfg_.n_embd)
        return err.set(DS4TP_EPROTO, "SYNC_IMAGES image {}: data width {} is not the model's "
                       "n_embd {}", i, c.images[i].data_width, cfg_.n_embd);
  return DS4TP_OK;
}

int Session::recv_command(Command &cmd, int64_t timeout_ms, Error &err) {
  Lock l(mu_);
  if (int rc = worker_only("ds4tp_recv_command", err)) return rc;
  if (stopped()) return err.set(DS4TP_ESTATE, "the leader sent STOP: no more commands follow");
  if (owe_ != wire::Reply::None)
    return err.set(DS4TP_ESTATE, "the {} for {} (session {}) is still owed to the leader",
                   frame_name(wire::reply_frame(owe_)), frame_name(last_type_), last_session_);
  if (owed_logits_ > 0)
    return err.set(DS4TP_ESTATE, "{} LOGITS half(s) of {} are still owed to the leader",
                   owed_logits_, frame_name(last_type_));
  int64_t t = timeout_ms;
  if (verify_open_ && (t < 0 || t > cfg_.frame_timeout_ms)) t = cfg_.frame_timeout_ms;
  const char *what = verify_open_ ? "waiting for the VERIFY_COMMIT" : "waiting for a command";
  talk::Frame f;
  if (int rc = ch_.recv(f, t, what, err)) return rc;
  last_type_ = f.type();  // a failure report names the frame even if it is malformed
  last_session_ = f.bytes() >= 8 ? wire::get_u64(f.payload) : 0;
  if (int rc = decode_command(f, cmd, err)) return rc;
  if (verify_open_ && cmd.type != FrameType::VerifyCommit)
    return err.set(DS4TP_EDESYNC, "after VERIFY the leader must send VERIFY_COMMIT, it sent {}",
                   frame_name(cmd.type));
  switch (cmd.type) {
    case FrameType::Eval:
    case FrameType::Mtp:
      if (cmd.seq <= last_eval_seq_)
        return err.set(DS4TP_EDESYNC, "{} seq {} does not rise above the last eval seq {}",
                       frame_name(cmd.type), cmd.seq, last_eval_seq_);
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
      return err.set(DS4TP_EPROTO, "{}: {}", frame_name(cmd.type), e.message);
  }
  last_type_ = cmd.type;
  last_session_ = cmd.session;
  owed_logits_floats_ = cmd.logits_floats;
  owed_logits_row_ = 0;
  owed_logits_after_ack_ = 0;
  owed_logits_ = 0;
  // The frame table says what this command owes: a status first (and the
  // halves once it is 0), the worker's HASH, or the halves at once.
  owe_ = wire::frame_info(cmd.type).reply;
  if (wire::has_status_reply(cmd.type))
    owed_logits_after_ack_ = rows;
  else
    owed_logits_ = rows;
  return DS4TP_OK;
}

template <typename Msg>
int Session::send_status(const Msg &m, int32_t status, Error &err) {
  if (int rc = send(wire::reply_frame(owe_), m, err)) return rc;
  owe_ = wire::Reply::None;
  owed_logits_ = status == 0 ? owed_logits_after_ack_ : 0;
  return DS4TP_OK;
}

int Session::send_ack(int32_t status, Error &err) {
  Lock l(mu_);
  if (int rc = worker_only("ds4tp_send_ack", err)) return rc;
  if (owe_ != wire::Reply::Ack)
    return err.set(DS4TP_ESTATE, "no COMMAND_ACK is owed{}",
                   owe_ == wire::Reply::SyncAck ? " (a SYNC is answered with ds4tp_send_sync_ack)" : "");
  uint64_t session = last_type_ == FrameType::EvalBatch ? 0 : last_session_;
  return send_status(wire::AckMsg{session, status, uint16_t(last_type_)}, status, err);
}

int Session::send_sync_ack(int32_t status, uint32_t position, Error &err) {
  Lock l(mu_);
  if (int rc = worker_only("ds4tp_send_sync_ack", err)) return rc;
  if (owe_ != wire::Reply::SyncAck) return err.set(DS4TP_ESTATE, "no SYNC_ACK is owed");
  return send_status(wire::SyncAckMsg{last_session_, status, position}, status, err);
}

int Session::send_logits(const float *src, uint32_t count, Error &err) {
  Lock l(mu_);
  if (int rc = worker_only("ds4tp_send_logits", err)) return rc;
  if (owed_logits_ == 0)
    return err.set(DS4TP_ESTATE, "no LOGITS half is owed{}",
                   owe_ != wire::Reply::None ? ": send the command's ack first" : "");
  if (count != owed_logits_floats_)
    return err.set(DS4TP_EINVAL, "logits half of {} floats, but {} asked for {}", count,
                   frame_name(last_type_), owed_logits_floats_);
  uint32_t row = owed_logits_row_;
  if (int rc = send(FrameType::Logits, wire::logits_bytes(count),
                    [&](wire::Writer &w) { wire::encode_logits(w, row, src, count); }, err))
    return rc;
  owed_logits_row_++;
  owed_logits_--;
  return DS4TP_OK;
}

int Session::head_row_send(uint32_t row, const float *src, uint32_t floats, Error &err) {
  Lock l(mu_);
  if (int rc = worker_only("ds4tp_head_row_send", err)) return rc;
  if (int rc = check_head_row(row, floats, err)) return rc;
  uint64_t block = block_;
  return send(FrameType::HeadRow, wire::head_row_bytes(floats),
              [&](wire::Writer &w) { wire::encode_head_row(w, block, row, src, floats); }, err);
}

int Session::send_error(int32_t status, const std::string &message, Error &err) {
  Lock l(mu_);
  if (int rc = worker_only("ds4tp_send_error", err)) return rc;
  size_t len = message.size() < wire::kErrorMessageMax ? message.size() : wire::kErrorMessageMax;
  finished_ = true;
  owe_ = wire::Reply::None;
  owed_logits_ = 0;
  return send(FrameType::WorkerError, wire::worker_error_bytes(len),
              [&](wire::Writer &w) {
                wire::encode_worker_error(w, last_session_, status, uint16_t(last_type_),
                                          message.data(), len);
              },
              err, kErrorReportMs);
}

}  // namespace ds4tp::session
