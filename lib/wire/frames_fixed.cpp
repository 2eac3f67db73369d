#include "wire/frames.hpp"

#include <cstring>

#include "wire/frames_checks.hpp"

namespace ds4tp::wire {

using namespace checks;

// Fixed-size payloads: one struct each, exact size.

// ---- encoders ------------------------------------------------------------

void encode(Writer &w, const EvalMsg &m) {
  w.u64(m.session);
  w.u64(m.seq);
  w.i32(m.token);
  w.u32(m.logits_floats);
}
void encode(Writer &w, const MtpMsg &m) {
  w.u64(m.session);
  w.u64(m.seq);
  w.i32(m.token);
  w.u32(m.limit);
}
void encode(Writer &w, const PosMsg &m) {
  w.u64(m.session);
  w.i32(m.pos);
  w.u32(0);
}
void encode(Writer &w, const SessionMsg &m) { w.u64(m.session); }
void encode(Writer &w, const CreateMsg &m) {
  w.u64(m.session);
  w.u32(m.ctx_size);
  w.u32(0);
}
void encode(Writer &w, const HashMsg &m) {
  w.u64(m.session);
  w.u64(m.seq);
  w.u64(m.hash);
}
void encode(Writer &w, const SyncAckMsg &m) {
  w.u64(m.session);
  w.i32(m.status);
  w.u32(m.position);
}
void encode(Writer &w, const AckMsg &m) {
  w.u64(m.session);
  w.i32(m.status);
  w.u16(m.command);
  w.u16(0);
}
void encode(Writer &w, const CommitMsg &m) {
  w.u64(m.session);
  w.i32(m.mode);
  w.i32(m.count);
  w.u32(m.logits_floats);
  w.u32(0);
}
void encode(Writer &w, const CheckpointMsg &m) {
  w.u64(m.seq);
  w.u32(m.point);
  w.i32(m.current);
  w.i32(m.total);
  w.u32(m.cancel);
}
void encode(Writer &w, const DraftMsg &m) {
  w.u64(m.session);
  w.i32(m.token);
  w.i32(m.pos);
  w.u32(m.mode);
  w.u32(0);
}
void encode(Writer &w, const BlockBeginMsg &m) {
  w.u64(m.block);
  w.u32(m.rows);
  w.u32(m.n_layers);
  w.u32(m.gates_per_layer);
  w.u32(0);
}
void encode(Writer &w, const BlockEndMsg &m) { w.u64(m.block); }
void encode(Writer &w, const ExecModeMsg &m) {
  w.u32(m.flags);
  w.u32(m.caps);
}
void encode(Writer &w, const HeartbeatMsg &m) {
  w.u16(m.kind);
  w.u16(0);
  w.u32(m.layer);
  w.u64(m.seq);
  w.u64(m.gates);
}
void encode(Writer &w, const DrafterSplitMsg &m) {
  w.u32(m.on);
  w.u32(0);
  w.bytes(m.meta.data(), m.meta.size());
}

// ---- decoders ------------------------------------------------------------

int decode(const uint8_t *p, size_t n, EvalMsg &m, Error &err) {
  Ctx c{FrameType::Eval, n};
  if (int rc = need_exact(c, kEvalBytes, err)) return rc;
  Reader r(p, n);
  m.session = r.u64();
  m.seq = r.u64();
  m.token = r.i32();
  m.logits_floats = r.u32();
  if (int rc = session_nonzero(c, m.session, err)) return rc;
  if (m.seq == 0) return bad(c, err, "seq 0 is invalid (eval seqs start at 1)");
  return DS4TP_OK;
}

int decode(const uint8_t *p, size_t n, MtpMsg &m, Error &err) {
  Ctx c{FrameType::Mtp, n};
  if (int rc = need_exact(c, kMtpBytes, err)) return rc;
  Reader r(p, n);
  m.session = r.u64();
  m.seq = r.u64();
  m.token = r.i32();
  m.limit = r.u32();
  if (int rc = session_nonzero(c, m.session, err)) return rc;
  if (m.seq == 0) return bad(c, err, "seq 0 is invalid (eval seqs start at 1)");
  if (m.limit < 1 || m.limit > kMtpLimitMax)
    return bad(c, err, "draft limit {} outside 1..{}", m.limit, kMtpLimitMax);
  return DS4TP_OK;
}

int decode_pos(FrameType type, const uint8_t *p, size_t n, PosMsg &m, Error &err) {
  Ctx c{type, n};
  if (int rc = need_exact(c, kPosBytes, err)) return rc;
  Reader r(p, n);
  m.session = r.u64();
  m.pos = r.i32();
  uint32_t reserved = r.u32();
  if (int rc = session_nonzero(c, m.session, err)) return rc;
  if (m.pos < 0) return bad(c, err, "position {} is negative", m.pos);
  return reserved_zero(c, reserved, "at byte 12", err);
}

int decode_session(FrameType type, const uint8_t *p, size_t n, SessionMsg &m, Error &err) {
  Ctx c{type, n};
  if (int rc = need_exact(c, kSessionBytes, err)) return rc;
  m.session = get_u64(p);
  return session_nonzero(c, m.session, err);
}

int decode(const uint8_t *p, size_t n, CreateMsg &m, Error &err) {
  Ctx c{FrameType::SessionCreate, n};
  if (int rc = need_exact(c, kCreateBytes, err)) return rc;
  Reader r(p, n);
  m.session = r.u64();
  m.ctx_size = r.u32();
  uint32_t reserved = r.u32();
  if (int rc = session_nonzero(c, m.session, err)) return rc;
  if (m.ctx_size == 0) return bad(c, err, "ctx_size 0 is invalid");
  return reserved_zero(c, reserved, "at byte 12", err);
}

int decode(const uint8_t *p, size_t n, HashMsg &m, Error &err) {
  Ctx c{FrameType::Hash, n};
  if (int rc = need_exact(c, kHashBytes, err)) return rc;
  Reader r(p, n);
  m.session = r.u64();
  m.seq = r.u64();
  m.hash = r.u64();
  return DS4TP_OK;
}

int decode(const uint8_t *p, size_t n, SyncAckMsg &m, Error &err) {
  Ctx c{FrameType::SyncAck, n};
  if (int rc = need_exact(c, kSyncAckBytes, err)) return rc;
  Reader r(p, n);
  m.session = r.u64();
  m.status = r.i32();
  m.position = r.u32();
  return session_nonzero(c, m.session, err);
}

int decode(const uint8_t *p, size_t n, AckMsg &m, Error &err) {
  Ctx c{FrameType::CommandAck, n};
  if (int rc = need_exact(c, kAckBytes, err)) return rc;
  Reader r(p, n);
  m.session = r.u64();
  m.status = r.i32();
  m.command = r.u16();
  uint16_t reserved = r.u16();
  const FrameRule *rule = frame_rule(m.command);
  if (rule == nullptr || rule->sender != Sender::Leader)
    return bad(c, err, "acknowledges frame type {}, which is not a command", m.command);
  return reserved_zero(c, reserved, "at byte 14", err);
}

int decode(const uint8_t *p, size_t n, CommitMsg &m, Error &err) {
  Ctx c{FrameType::VerifyCommit, n};
  if (int rc = need_exact(c, kCommitBytes, err)) return rc;
  Reader r(p, n);
  m.session = r.u64();
  m.mode = r.i32();
  m.count = r.i32();
  m.logits_floats = r.u32();
  uint32_t reserved = r.u32();
  if (int rc = session_nonzero(c, m.session, err)) return rc;
  if (m.mode != kCommitRollback && m.mode != kCommitFull && m.mode != kCommitPrefix)
    return bad(c, err, "commit mode {} is not 0 (rollback), 1 (full) or 2 (prefix)", m.mode);
  if (m.count < 0 || m.count > int32_t(kVerifyRowsMax))
    return bad(c, err, "count {} outside 0..{}", m.count, kVerifyRowsMax);
  if (m.mode == kCommitFull && m.count != 0) return bad(c, err, "a full commit carries count 0, not {}", m.count);
  if (m.mode == kCommitPrefix && m.count < 1) return bad(c, err, "a prefix commit keeps at least 1 row");
  return reserved_zero(c, reserved, "at byte 20", err);
}

int decode(const uint8_t *p, size_t n, CheckpointMsg &m, Error &err) {
  Ctx c{FrameType::SyncCheckpoint, n};
  if (int rc = need_exact(c, kCheckpointBytes, err)) return rc;
  Reader r(p, n);
  m.seq = r.u64();
  m.point = r.u32();
  m.current = r.i32();
  m.total = r.i32();
  m.cancel = r.u32();
  if (m.seq == 0) return bad(c, err, "seq 0 is invalid (checkpoints count from 1)");
  if (m.cancel > 1) return bad(c, err, "cancel flag {} is not 0 or 1", m.cancel);
  return DS4TP_OK;
}

int decode(const uint8_t *p, size_t n, DraftMsg &m, Error &err) {
  Ctx c{FrameType::Draft, n};
  if (int rc = need_exact(c, kDraftBytes, err)) return rc;
  Reader r(p, n);
  m.session = r.u64();
  m.token = r.i32();
  m.pos = r.i32();
  m.mode = r.u32();
  uint32_t reserved = r.u32();
  if (int rc = session_nonzero(c, m.session, err)) return rc;
  if (m.token < 0) return bad(c, err, "token {} is negative", m.token);
  if (m.pos <= 0) return bad(c, err, "position {} must be positive", m.pos);
  if (m.mode != kDraftMaintain && m.mode != kDraftPropose)
    return bad(c, err, "mode {} is not 1 (maintain) or 2 (propose)", m.mode);
  return reserved_zero(c, reserved, "at byte 20", err);
}

int decode(const uint8_t *p, size_t n, BlockBeginMsg &m, Error &err) {
  Ctx c{FrameType::BlockBegin, n};
  if (int rc = need_exact(c, kBlockBeginBytes, err)) return rc;
  Reader r(p, n);
  m.block = r.u64();
  m.rows = r.u32();
  m.n_layers = r.u32();
  m.gates_per_layer = r.u32();
  uint32_t reserved = r.u32();
  if (m.block == 0) return bad(c, err, "block 0 is invalid (blocks count from 1)");
  if (m.rows < 1 || m.rows > kVerifyRowsMax)
    return bad(c, err, "rows {} outside 1..{}", m.rows, kVerifyRowsMax);
  if (m.n_layers < 1) return bad(c, err, "n_layers 0 is invalid");
  if (m.gates_per_layer < 1 || m.gates_per_layer > kBlockGatesMax)
    return bad(c, err, "gates per layer {} outside 1..{}", m.gates_per_layer, kBlockGatesMax);
  return reserved_zero(c, reserved, "at byte 20", err);
}

int decode(const uint8_t *p, size_t n, BlockEndMsg &m, Error &err) {
  Ctx c{FrameType::BlockEnd, n};
  if (int rc = need_exact(c, kBlockEndBytes, err)) return rc;
  m.block = get_u64(p);
  if (m.block == 0) return bad(c, err, "block 0 is invalid (blocks count from 1)");
  return DS4TP_OK;
}

int decode(const uint8_t *p, size_t n, ExecModeMsg &m, Error &err) {
  Ctx c{FrameType::ExecMode, n};
  if (int rc = need_exact(c, kExecModeBytes, err)) return rc;
  m.flags = get_u32(p);
  m.caps = get_u32(p + 4);
  return DS4TP_OK;
}

int decode(const uint8_t *p, size_t n, HeartbeatMsg &m, Error &err) {
  Ctx c{FrameType::Heartbeat, n};
  if (int rc = need_exact(c, kHeartbeatBytes, err)) return rc;
  m.kind = get_u16(p);
  m.layer = get_u32(p + 4);
  m.seq = get_u64(p + 8);
  m.gates = get_u64(p + 16);
  if (m.kind > 3) return bad(c, err, "gate kind {} is not a gate kind", m.kind);
  return reserved_zero(c, get_u16(p + 2), "at byte 2", err);
}

int decode(const uint8_t *p, size_t n, DrafterSplitMsg &m, Error &err) {
  Ctx c{FrameType::DrafterSplit, n};
  if (int rc = need_exact(c, kDrafterSplitBytes, err)) return rc;
  m.on = get_u32(p);
  uint32_t reserved = get_u32(p + 4);
  std::memcpy(m.meta.data(), p + 8, m.meta.size());
  if (m.on > 1) return bad(c, err, "opt-in flag {} is not 0 or 1", m.on);
  return reserved_zero(c, reserved, "at byte 4", err);
}

int decode_stop(const uint8_t *, size_t n, Error &err) {
  return need_exact(Ctx{FrameType::Stop, n}, 0, err);
}

}  // namespace ds4tp::wire
