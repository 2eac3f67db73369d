// The parts of the session both roles share: construction, role and order
// checks, the logits bound, and reading an expected frame. Leader calls
// are in session/leader.cpp, symmetric agreements in session/agreements.cpp,
// the worker's side in session/worker_side.cpp.
#include "session/session.hpp"

#include "common/clock.hpp"
#include "stats/stats.hpp"

namespace ds4tp::session {

using wire::FrameType;
using wire::frame_name;

uint32_t logits_rows(const Command &c) {
  // Bounded: the items came in one frame.
  return uint32_t(wire::logits_rows(c.type, c.logits_floats, c.items.size(), int32_t(c.mode),
                                    c.count));
}

Session::Session(int fd, const SessionConfig &cfg, const Logger &log)
    : cfg_(cfg),
      log_(log),
      ch_(fd, talk::ChannelConfig{cfg.role, cfg.max_frame_bytes, cfg.spin_ns, cfg.peer}) {}

// ---- shared by both roles (session/leader.cpp, agreements.cpp, worker_side.cpp) ----

int Session::leader_command(FrameType t, Error &err) {
  if (!is_leader())
    return err.set(DS4TP_ESTATE, "{}: only the leader sends commands; this rank is the worker",
                   frame_name(t));
  if (stopped()) return err.set(DS4TP_ESTATE, "{}: STOP was already sent", frame_name(t));
  if (await_ != wire::Reply::None)
    return err.set(DS4TP_ESTATE,
                   "{}: the {} for {} (session {}) is unread: call ds4tp_{} first", frame_name(t),
                   frame_name(wire::reply_frame(await_)), frame_name(await_type_),
                   await_session_, await_ == wire::Reply::Ack ? "wait_ack" : "wait_sync");
  if (logits_left_ > 0)
    return err.set(DS4TP_ESTATE,
                   "{}: {} LOGITS half(s) of the previous {} are unread: call ds4tp_recv_logits "
                   "first",
                   frame_name(t), logits_left_, frame_name(await_type_));
  if (verify_open_ && t != FrameType::VerifyCommit)
    return err.set(DS4TP_ESTATE,
                   "{}: the VERIFY of session {} is open: send its VERIFY_COMMIT first (mode 0 "
                   "count 0 if the verify failed)",
                   frame_name(t), verify_session_);
  if (!verify_open_ && t == FrameType::VerifyCommit)
    return err.set(DS4TP_ESTATE, "VERIFY_COMMIT without an open VERIFY");
  return DS4TP_OK;
}

int Session::leader_command(FrameType t, uint64_t session, Error &err) {
  if (int rc = leader_command(t, err)) return rc;
  if (session == 0) return err.set(DS4TP_EINVAL, "session id 0 is invalid");
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
  if (floats == 0 || rows == 0) return DS4TP_OK;
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

int Session::check_head_row(uint32_t row, uint32_t floats, Error &err) {
  if (block_ == 0)
    return err.set(DS4TP_ESTATE, "head rows belong to a verify block: call ds4tp_block_begin first");
  if (row >= wire::kVerifyRowsMax || floats < 1 || floats > wire::kHeadRowMax)
    return err.set(DS4TP_EINVAL, "head row {} of {} floats: rows are 0..{}, floats 1..{}", row,
                   floats, wire::kVerifyRowsMax - 1, wire::kHeadRowMax);
  return DS4TP_OK;
}

int Session::read_expect(FrameType want, const char *what, talk::Frame &f, Error &err) {
  for (;;) {
    if (int rc = ch_.recv(f, cfg_.frame_timeout_ms, what, err, cfg_.arrival_ms)) return rc;
    FrameType got = f.type();
    if (sent_ns_ != 0) {  // the first reply of the last command: a round trip
      cfg_.stats->control_done(sent_name_, sent_ns_, now_ns());
      sent_ns_ = 0;
    }
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
                   what, frame_name(got), f.bytes());
  }
}

}  // namespace ds4tp::session
