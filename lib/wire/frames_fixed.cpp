#include "wire/frames.hpp"

#include <cstring>

#include "wire/frames_checks.hpp"

namespace ds4tp::wire {

using namespace checks;
using enum FrameType;  // the decoders below name their frame types

// Fixed-size payloads: one struct each, exact size.

// ---- layouts: each fixed-size payload's fields, in wire order ----------
// One line per message serves its encoder and its decoder; the static
// asserts tie each to the frame table's size.

template <class M>
constexpr auto kLayout = 0;
template <>
constexpr auto kLayout<EvalMsg> = layout(&EvalMsg::session, &EvalMsg::seq, &EvalMsg::token,
                                         &EvalMsg::logits_floats);
template <>
constexpr auto kLayout<MtpMsg> = layout(&MtpMsg::session, &MtpMsg::seq, &MtpMsg::token,
                                        &MtpMsg::limit);
template <>
constexpr auto kLayout<PosMsg> = layout(&PosMsg::session, &PosMsg::pos, Pad<uint32_t>{});
template <>
constexpr auto kLayout<SessionMsg> = layout(&SessionMsg::session);
template <>
constexpr auto kLayout<CreateMsg> = layout(&CreateMsg::session, &CreateMsg::ctx_size,
                                           Pad<uint32_t>{});
template <>
constexpr auto kLayout<HashMsg> = layout(&HashMsg::session, &HashMsg::seq, &HashMsg::hash);
template <>
constexpr auto kLayout<SyncAckMsg> = layout(&SyncAckMsg::session, &SyncAckMsg::status,
                                            &SyncAckMsg::position);
template <>
constexpr auto kLayout<AckMsg> = layout(&AckMsg::session, &AckMsg::status, &AckMsg::command,
                                        Pad<uint16_t>{});
template <>
constexpr auto kLayout<CommitMsg> = layout(&CommitMsg::session, &CommitMsg::mode,
                                           &CommitMsg::count, &CommitMsg::logits_floats,
                                           Pad<uint32_t>{});
template <>
constexpr auto kLayout<CheckpointMsg> = layout(&CheckpointMsg::seq, &CheckpointMsg::point,
                                               &CheckpointMsg::current, &CheckpointMsg::total,
                                               &CheckpointMsg::cancel);
template <>
constexpr auto kLayout<DraftMsg> = layout(&DraftMsg::session, &DraftMsg::token, &DraftMsg::pos,
                                          &DraftMsg::mode, Pad<uint32_t>{});
template <>
constexpr auto kLayout<BlockBeginMsg> = layout(&BlockBeginMsg::block, &BlockBeginMsg::rows,
                                               &BlockBeginMsg::n_layers,
                                               &BlockBeginMsg::gates_per_layer, Pad<uint32_t>{});
template <>
constexpr auto kLayout<BlockEndMsg> = layout(&BlockEndMsg::block);
template <>
constexpr auto kLayout<ExecModeMsg> = layout(&ExecModeMsg::flags, &ExecModeMsg::caps);
template <>
constexpr auto kLayout<HeartbeatMsg> = layout(&HeartbeatMsg::kind, Pad<uint16_t>{},
                                              &HeartbeatMsg::layer, &HeartbeatMsg::seq,
                                              &HeartbeatMsg::gates);
template <>
constexpr auto kLayout<DrafterSplitMsg> = layout(&DrafterSplitMsg::on, Pad<uint32_t>{},
                                                 &DrafterSplitMsg::meta);

static_assert(layout_bytes(kLayout<EvalMsg>) == kEvalBytes);
static_assert(layout_bytes(kLayout<MtpMsg>) == kMtpBytes);
static_assert(layout_bytes(kLayout<PosMsg>) == kPosBytes);
static_assert(layout_bytes(kLayout<SessionMsg>) == kSessionBytes);
static_assert(layout_bytes(kLayout<CreateMsg>) == kCreateBytes);
static_assert(layout_bytes(kLayout<HashMsg>) == kHashBytes);
static_assert(layout_bytes(kLayout<SyncAckMsg>) == kSyncAckBytes);
static_assert(layout_bytes(kLayout<AckMsg>) == kAckBytes);
static_assert(layout_bytes(kLayout<CommitMsg>) == kCommitBytes);
static_assert(layout_bytes(kLayout<CheckpointMsg>) == kCheckpointBytes);
static_assert(layout_bytes(kLayout<DraftMsg>) == kDraftBytes);
static_assert(layout_bytes(kLayout<BlockBeginMsg>) == kBlockBeginBytes);
static_assert(layout_bytes(kLayout<BlockEndMsg>) == kBlockEndBytes);
static_assert(layout_bytes(kLayout<ExecModeMsg>) == kExecModeBytes);
static_assert(layout_bytes(kLayout<HeartbeatMsg>) == kHeartbeatBytes);
static_assert(layout_bytes(kLayout<DrafterSplitMsg>) == kDrafterSplitBytes);

// ---- encoders ------------------------------------------------------------

void encode(Writer &w, const EvalMsg &m) { write(w, m, kLayout<EvalMsg>); }
void encode(Writer &w, const MtpMsg &m) { write(w, m, kLayout<MtpMsg>); }
void encode(Writer &w, const PosMsg &m) { write(w, m, kLayout<PosMsg>); }
void encode(Writer &w, const SessionMsg &m) { write(w, m, kLayout<SessionMsg>); }
void encode(Writer &w, const CreateMsg &m) { write(w, m, kLayout<CreateMsg>); }
void encode(Writer &w, const HashMsg &m) { write(w, m, kLayout<HashMsg>); }
void encode(Writer &w, const SyncAckMsg &m) { write(w, m, kLayout<SyncAckMsg>); }
void encode(Writer &w, const AckMsg &m) { write(w, m, kLayout<AckMsg>); }
void encode(Writer &w, const CommitMsg &m) { write(w, m, kLayout<CommitMsg>); }
void encode(Writer &w, const CheckpointMsg &m) { write(w, m, kLayout<CheckpointMsg>); }
void encode(Writer &w, const DraftMsg &m) { write(w, m, kLayout<DraftMsg>); }
void encode(Writer &w, const BlockBeginMsg &m) { write(w, m, kLayout<BlockBeginMsg>); }
void encode(Writer &w, const BlockEndMsg &m) { write(w, m, kLayout<BlockEndMsg>); }
void encode(Writer &w, const ExecModeMsg &m) { write(w, m, kLayout<ExecModeMsg>); }
void encode(Writer &w, const HeartbeatMsg &m) { write(w, m, kLayout<HeartbeatMsg>); }
void encode(Writer &w, const DrafterSplitMsg &m) { write(w, m, kLayout<DrafterSplitMsg>); }

// ---- decoders: the size and fields by the layout, then each message's own
// rules (`check`), then its reserved fields ----------------------------------

namespace {

// A message with no rules beyond its size.
template <class M>
int check(const Ctx &, const Reader &, const M &, Error &) {
  return DS4TP_OK;
}

int check(const Ctx &c, const Reader &, const EvalMsg &m, Error &err) {
  if (int rc = session_nonzero(c, m.session, err)) return rc;
  if (m.seq == 0) return bad(c, err, "seq 0 is invalid (eval seqs start at 1)");
  return DS4TP_OK;
}

int check(const Ctx &c, const Reader &, const MtpMsg &m, Error &err) {
  if (int rc = session_nonzero(c, m.session, err)) return rc;
  if (m.seq == 0) return bad(c, err, "seq 0 is invalid (eval seqs start at 1)");
  if (m.limit < 1 || m.limit > kMtpLimitMax)
    return bad(c, err, "draft limit {} outside 1..{}", m.limit, kMtpLimitMax);
  return DS4TP_OK;
}

int check(const Ctx &c, const Reader &r, const PosMsg &m, Error &err) {
  if (int rc = session_nonzero(c, m.session, err)) return rc;
  if (m.pos < 0) return bad(c, err, "position {} is negative", m.pos);
  return reserved_zero(c, r, err);
}

int check(const Ctx &c, const Reader &, const SessionMsg &m, Error &err) {
  return session_nonzero(c, m.session, err);
}

int check(const Ctx &c, const Reader &r, const CreateMsg &m, Error &err) {
  if (int rc = session_nonzero(c, m.session, err)) return rc;
  if (m.ctx_size == 0) return bad(c, err, "ctx_size 0 is invalid");
  return reserved_zero(c, r, err);
}

int check(const Ctx &c, const Reader &, const SyncAckMsg &m, Error &err) {
  return session_nonzero(c, m.session, err);
}

int check(const Ctx &c, const Reader &r, const AckMsg &m, Error &err) {
  const FrameRule *rule = frame_rule(m.command);
  if (rule == nullptr || rule->sender != Sender::Leader)
    return bad(c, err, "acknowledges frame type {}, which is not a command", m.command);
  return reserved_zero(c, r, err);
}

int check(const Ctx &c, const Reader &r, const CommitMsg &m, Error &err) {
  if (int rc = session_nonzero(c, m.session, err)) return rc;
  if (m.mode != kCommitRollback && m.mode != kCommitFull && m.mode != kCommitPrefix)
    return bad(c, err, "commit mode {} is not 0 (rollback), 1 (full) or 2 (prefix)", m.mode);
  if (m.count < 0 || m.count > int32_t(kVerifyRowsMax))
    return bad(c, err, "count {} outside 0..{}", m.count, kVerifyRowsMax);
  if (m.mode == kCommitFull && m.count != 0) return bad(c, err, "a full commit carries count 0, not {}", m.count);
  if (m.mode == kCommitPrefix && m.count < 1) return bad(c, err, "a prefix commit keeps at least 1 row");
  return reserved_zero(c, r, err);
}

int check(const Ctx &c, const Reader &, const CheckpointMsg &m, Error &err) {
  if (m.seq == 0) return bad(c, err, "seq 0 is invalid (checkpoints count from 1)");
  if (m.cancel > 1) return bad(c, err, "cancel flag {} is not 0 or 1", m.cancel);
  return DS4TP_OK;
}

int check(const Ctx &c, const Reader &r, const DraftMsg &m, Error &err) {
  if (int rc = session_nonzero(c, m.session, err)) return rc;
  if (m.token < 0) return bad(c, err, "token {} is negative", m.token);
  if (m.pos <= 0) return bad(c, err, "position {} must be positive", m.pos);
  if (m.mode != kDraftMaintain && m.mode != kDraftPropose)
    return bad(c, err, "mode {} is not 1 (maintain) or 2 (propose)", m.mode);
  return reserved_zero(c, r, err);
}

int check(const Ctx &c, const Reader &r, const BlockBeginMsg &m, Error &err) {
  if (m.block == 0) return bad(c, err, "block 0 is invalid (blocks count from 1)");
  if (m.rows < 1 || m.rows > kVerifyRowsMax)
    return bad(c, err, "rows {} outside 1..{}", m.rows, kVerifyRowsMax);
  if (m.n_layers < 1) return bad(c, err, "n_layers 0 is invalid");
  if (m.gates_per_layer < 1 || m.gates_per_layer > kBlockGatesMax)
    return bad(c, err, "gates per layer {} outside 1..{}", m.gates_per_layer, kBlockGatesMax);
  return reserved_zero(c, r, err);
}

int check(const Ctx &c, const Reader &, const BlockEndMsg &m, Error &err) {
  if (m.block == 0) return bad(c, err, "block 0 is invalid (blocks count from 1)");
  return DS4TP_OK;
}

int check(const Ctx &c, const Reader &r, const HeartbeatMsg &m, Error &err) {
  if (m.kind > 3) return bad(c, err, "gate kind {} is not a gate kind", m.kind);
  return reserved_zero(c, r, err);
}

int check(const Ctx &c, const Reader &r, const DrafterSplitMsg &m, Error &err) {
  if (m.on > 1) return bad(c, err, "opt-in flag {} is not 0 or 1", m.on);
  return reserved_zero(c, r, err);
}

// Checks the exact size, reads every field of `m` by its layout, then the
// message's rules: reserved fields are checked by those rules
// (reserved_zero on `r`) last, so the first rule broken is the one named.
template <class M>
int read_fixed(FrameType type, const uint8_t *p, size_t n, M &m, Error &err) {
  Ctx c{type, n};
  if (int rc = need_exact(c, layout_bytes(kLayout<M>), err)) return rc;
  Reader r(p, n);
  read(r, m, kLayout<M>);
  return check(c, r, m, err);
}

}  // namespace

int decode(const uint8_t *p, size_t n, EvalMsg &m, Error &err) { return read_fixed(Eval, p, n, m, err); }
int decode(const uint8_t *p, size_t n, MtpMsg &m, Error &err) { return read_fixed(Mtp, p, n, m, err); }
int decode_pos(FrameType type, const uint8_t *p, size_t n, PosMsg &m, Error &err) {
  return read_fixed(type, p, n, m, err);
}
int decode_session(FrameType type, const uint8_t *p, size_t n, SessionMsg &m, Error &err) {
  return read_fixed(type, p, n, m, err);
}
int decode(const uint8_t *p, size_t n, CreateMsg &m, Error &err) { return read_fixed(SessionCreate, p, n, m, err); }
int decode(const uint8_t *p, size_t n, HashMsg &m, Error &err) { return read_fixed(Hash, p, n, m, err); }
int decode(const uint8_t *p, size_t n, SyncAckMsg &m, Error &err) { return read_fixed(SyncAck, p, n, m, err); }
int decode(const uint8_t *p, size_t n, AckMsg &m, Error &err) { return read_fixed(CommandAck, p, n, m, err); }
int decode(const uint8_t *p, size_t n, CommitMsg &m, Error &err) { return read_fixed(VerifyCommit, p, n, m, err); }
int decode(const uint8_t *p, size_t n, CheckpointMsg &m, Error &err) { return read_fixed(SyncCheckpoint, p, n, m, err); }
int decode(const uint8_t *p, size_t n, DraftMsg &m, Error &err) { return read_fixed(Draft, p, n, m, err); }
int decode(const uint8_t *p, size_t n, BlockBeginMsg &m, Error &err) { return read_fixed(BlockBegin, p, n, m, err); }
int decode(const uint8_t *p, size_t n, BlockEndMsg &m, Error &err) { return read_fixed(BlockEnd, p, n, m, err); }
int decode(const uint8_t *p, size_t n, ExecModeMsg &m, Error &err) { return read_fixed(ExecMode, p, n, m, err); }
int decode(const uint8_t *p, size_t n, HeartbeatMsg &m, Error &err) { return read_fixed(Heartbeat, p, n, m, err); }
int decode(const uint8_t *p, size_t n, DrafterSplitMsg &m, Error &err) { return read_fixed(DrafterSplit, p, n, m, err); }

int decode_stop(const uint8_t *, size_t n, Error &err) {
  return need_exact(Ctx{FrameType::Stop, n}, 0, err);
}

}  // namespace ds4tp::wire
