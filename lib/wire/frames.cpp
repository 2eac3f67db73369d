#include "wire/frames.hpp"

#include <cstring>

#include "wire/rdma_frames.hpp"

namespace ds4tp::wire {

namespace {

constexpr uint32_t kAny = 0;  // FrameRule::max: up to max_frame_bytes

// Indexed by type; [0] unused.
constexpr FrameRule kRules[kFrameTypeMax + 1] = {
    {"?", Sender::Both, 0, 0, 0},
    {"SYNC", Sender::Leader, 16, 4, kAny},
    {"EVAL", Sender::Leader, 24, 0, 24},
    {"REWIND", Sender::Leader, 16, 0, 16},
    {"INVALIDATE", Sender::Leader, 8, 0, 8},
    {"STOP", Sender::Leader, 0, 0, 0},
    {"HASH", Sender::Both, 24, 0, 24},
    {"RDMA_INFO", Sender::Both, uint32_t(kRdmaInfoPayload), 0, uint32_t(kRdmaInfoPayload)},
    {"SYNC_ACK", Sender::Worker, 16, 0, 16},
    {"RDMA_READY", Sender::Both, uint32_t(kRdmaReadyPayload), 0, uint32_t(kRdmaReadyPayload)},
    {"LOGITS", Sender::Worker, 12, 4, kAny},
    {"VERIFY", Sender::Leader, 20, 4, 16 + 4 * kVerifyRowsMax},
    {"VERIFY_COMMIT", Sender::Leader, 24, 0, 24},
    {"SESSION_CREATE", Sender::Leader, 16, 0, 16},
    {"SESSION_DESTROY", Sender::Leader, 8, 0, 8},
    {"EVAL_BATCH", Sender::Leader, 8 + kBatchItemBytes, kBatchItemBytes, kAny},
    {"MIXED_BATCH", Sender::Leader, 24 + 4 + kBatchItemBytes, 4, kAny},
    {"COMMAND_ACK", Sender::Worker, 16, 0, 16},
    {"SYNC_IMAGES", Sender::Leader, 24, 4, kAny},
    {"RDMA_WARM", Sender::Both, uint32_t(kRdmaWarmPayload), 0, uint32_t(kRdmaWarmPayload)},
    {"RDMA_POSTED", Sender::Both, uint32_t(kRdmaPostedPayload), 0, uint32_t(kRdmaPostedPayload)},
    {"MTP", Sender::Leader, 24, 0, 24},
    {"SYNC_CHECKPOINT", Sender::Both, 24, 0, 24},
    {"DRAFT", Sender::Leader, 24, 0, 24},
    {"SPEC_RESTORE", Sender::Leader, 16, 0, 16},
    {"BLOCK_BEGIN", Sender::Both, 24, 0, 24},
    {"BLOCK_END", Sender::Both, 8, 0, 8},
    {"SMALL_EXCHANGE", Sender::Both, 17, 1, 16 + kSmallExchangeMax},
    {"HEAD_ROW", Sender::Worker, 20, 4, 16 + 4 * kHeadRowMax},
    {"EXEC_MODE", Sender::Both, 8, 0, 8},
    {"DRAFTER_SPLIT", Sender::Both, 72, 0, 72},
    {"WORKER_ERROR", Sender::Worker, 24, 1, 24 + kErrorMessageMax},
};

// "EVAL frame (type 2, 20 bytes)" prefix for every decoder message.
struct Ctx {
  FrameType type;
  size_t n;
};

template <typename... Args>
int bad(const Ctx &c, Error &err, fmt::format_string<Args...> f, Args &&...args) {
  std::string why = fmt::format(f, std::forward<Args>(args)...);
  return err.set(DS4TP_EPROTO, "{} frame (type {}, {} bytes): {}", frame_name(c.type),
                 uint16_t(c.type), c.n, why);
}

int need_exact(const Ctx &c, size_t want, Error &err) {
  if (c.n != want) return bad(c, err, "want exactly {} bytes", want);
  return DS4TP_OK;
}

int need_min(const Ctx &c, size_t want, Error &err) {
  if (c.n < want) return bad(c, err, "shorter than its {} byte fixed part", want);
  return DS4TP_OK;
}

int reserved_zero(const Ctx &c, uint64_t v, const char *field, Error &err) {
  if (v != 0) return bad(c, err, "reserved field {} is {}, must be 0", field, v);
  return DS4TP_OK;
}

int session_nonzero(const Ctx &c, uint64_t session, Error &err) {
  if (session == 0) return bad(c, err, "session id 0 is invalid");
  return DS4TP_OK;
}

// Checks that a count of `unit`-byte elements exactly fills what is left.
int count_fills(const Ctx &c, const char *what, uint64_t count, uint64_t unit, uint64_t left,
                Error &err) {
  // 64-bit: count <= 2^32 and unit <= 2^32 cannot overflow.
  if (count * unit != left)
    return bad(c, err, "{} {} need {} bytes but {} remain", count, what, count * unit, left);
  return DS4TP_OK;
}

void put_tokens(Writer &w, const int32_t *t, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) w.i32(t[i]);
}

void get_tokens(Reader &r, std::vector<int32_t> &out, uint32_t n) {
  out.resize(n);
  for (uint32_t i = 0; i < n; i++) out[i] = r.i32();
}

void put_items(Writer &w, const BatchItem *items, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    w.u64(items[i].session);
    w.i32(items[i].token);
    w.u32(items[i].flags);
  }
}

int get_items(const Ctx &c, Reader &r, std::vector<BatchItem> &out, uint32_t n, Error &err) {
  out.resize(n);
  for (uint32_t i = 0; i < n; i++) {
    out[i].session = r.u64();
    out[i].token = r.i32();
    out[i].flags = r.u32();
    if (out[i].session == 0) return bad(c, err, "item {} has session id 0", i);
    if (out[i].flags != 0) return bad(c, err, "item {} reserved flags are {}, must be 0", i, out[i].flags);
  }
  return DS4TP_OK;
}

}  // namespace

const FrameRule *frame_rule(uint16_t type) {
  if (type < kFrameTypeMin || type > kFrameTypeMax) return nullptr;
  return &kRules[type];
}

const char *frame_name(uint16_t type) {
  const FrameRule *r = frame_rule(type);
  return r ? r->name : "?";
}

void encode_frame_header(const FrameHeader &h, uint8_t out[kFrameHeaderBytes]) {
  put_u32(out, kFrameMagic);
  put_u16(out + 4, h.type);
  put_u16(out + 6, h.flags);
  put_u32(out + 8, h.bytes);
  put_u32(out + 12, h.counter);
}

int decode_frame_header(const uint8_t *buf, size_t len, uint32_t max_frame_bytes,
                        FrameHeader &out, Error &err) {
  if (len < kFrameHeaderBytes)
    return err.set(DS4TP_EPROTO, "control frame header truncated: {} of {} bytes", len,
                   kFrameHeaderBytes);
  uint32_t magic = get_u32(buf);
  out.type = get_u16(buf + 4);
  out.flags = get_u16(buf + 6);
  out.bytes = get_u32(buf + 8);
  out.counter = get_u32(buf + 12);
  if (magic == kFrameMagicSwapped)
    return err.set(DS4TP_EPROTO,
                   "control frame magic 0x{:08x}: the peer uses the other byte order", magic);
  if (magic != kFrameMagic)
    return err.set(DS4TP_EPROTO,
                   "bad control frame magic 0x{:08x} (want 0x{:08x}, \"D4FR\"); type field {}, "
                   "size field {}: the stream is corrupt or not a ds4tp peer",
                   magic, kFrameMagic, out.type, out.bytes);
  const FrameRule *rule = frame_rule(out.type);
  if (rule == nullptr)
    return err.set(DS4TP_EPROTO, "unknown control frame type {} ({} payload bytes)", out.type,
                   out.bytes);
  if (out.flags != 0)
    return err.set(DS4TP_EPROTO, "{} frame (type {}, {} bytes) has flags 0x{:04x}, must be 0",
                   rule->name, out.type, out.bytes, out.flags);
  if (out.bytes > max_frame_bytes)
    return err.set(DS4TP_EPROTO,
                   "{} frame (type {}) announces {} payload bytes, above max_frame_bytes {}: "
                   "refused before allocating (raise max_frame_bytes on this rank if the "
                   "peer is right)",
                   rule->name, out.type, out.bytes, max_frame_bytes);
  uint64_t max = rule->unit == 0 ? rule->min : (rule->max == kAny ? max_frame_bytes : rule->max);
  bool fits = out.bytes >= rule->min && out.bytes <= max &&
              (rule->unit == 0 || (out.bytes - rule->min) % rule->unit == 0);
  if (!fits) {
    if (rule->unit == 0)
      return err.set(DS4TP_EPROTO, "{} frame (type {}) of {} bytes: want exactly {}",
                     rule->name, out.type, out.bytes, rule->min);
    return err.set(DS4TP_EPROTO,
                   "{} frame (type {}) of {} bytes: want {} + a multiple of {}, at most {}",
                   rule->name, out.type, out.bytes, rule->min, rule->unit, max);
  }
  return DS4TP_OK;
}

// ---- sizes ---------------------------------------------------------------

uint64_t sync_bytes(uint64_t n) { return 16 + 4 * n; }
uint64_t sync_images_bytes(uint64_t n_tokens, const ImageMeta *images, uint64_t n_images) {
  uint64_t b = 24 + 4 * n_tokens;
  for (uint64_t i = 0; i < n_images; i++)
    b += kImageHeaderBytes + 4 * uint64_t(images[i].token_count) * images[i].data_width;
  return b;
}
uint64_t verify_bytes(uint64_t n) { return 16 + 4 * n; }
uint64_t eval_batch_bytes(uint64_t n) { return 8 + kBatchItemBytes * n; }
uint64_t mixed_batch_bytes(uint64_t p, uint64_t n) { return 24 + 4 * p + kBatchItemBytes * n; }
uint64_t logits_bytes(uint64_t count) { return 8 + 4 * count; }
uint64_t small_bytes(uint64_t n) { return 16 + n; }
uint64_t head_row_bytes(uint64_t floats) { return 16 + 4 * floats; }
uint64_t worker_error_bytes(size_t m) { return 24 + uint64_t(m); }

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
void encode(Writer &w, const DrafterSplitMsg &m) {
  w.u32(m.on);
  w.u32(0);
  w.bytes(m.meta.data(), m.meta.size());
}
void encode(Writer &w, const SmallMsg &m) {
  w.u64(m.seq);
  w.u32(m.bytes);
  w.u32(0);
  w.bytes(m.data.data(), m.bytes <= kSmallExchangeMax ? m.bytes : kSmallExchangeMax);
}

void encode_sync(Writer &w, uint64_t session, uint32_t logits_floats, const int32_t *tokens,
                 uint32_t n) {
  w.u64(session);
  w.u32(n);
  w.u32(logits_floats);
  put_tokens(w, tokens, n);
}

void encode_sync_images(Writer &w, uint64_t session, uint32_t logits_floats,
                        const int32_t *tokens, uint32_t n_tokens, const ImageMeta *images,
                        const float *const *embd, uint32_t n_images) {
  w.u64(session);
  w.u32(n_tokens);
  w.u32(n_images);
  w.u32(logits_floats);
  w.u32(0);
  put_tokens(w, tokens, n_tokens);
  for (uint32_t i = 0; i < n_images; i++) {
    const ImageMeta &m = images[i];
    w.u32(m.token_start);
    w.u32(m.token_count);
    w.u32(m.data_width);
    w.u32(m.width);
    w.u32(m.height);
    w.u32(m.content_width);
    w.u32(m.content_height);
    w.bytes(m.fingerprint.data(), m.fingerprint.size());
    uint64_t floats = uint64_t(m.token_count) * m.data_width;
    for (uint64_t k = 0; k < floats; k++) w.f32(embd[i][k]);
  }
}

void encode_verify(Writer &w, uint64_t session, uint32_t flags, const int32_t *drafts,
                   uint32_t n) {
  w.u64(session);
  w.u32(n);
  w.u32(flags);
  put_tokens(w, drafts, n);
}

void encode_eval_batch(Writer &w, uint32_t logits_floats, const BatchItem *items, uint32_t n) {
  w.u32(n);
  w.u32(logits_floats);
  put_items(w, items, n);
}

void encode_mixed_batch(Writer &w, uint64_t session, uint32_t logits_floats,
                        const int32_t *prompt, uint32_t n_prompt, const BatchItem *items,
                        uint32_t n_items) {
  w.u64(session);
  w.u32(n_prompt);
  w.u32(n_items);
  w.u32(logits_floats);
  w.u32(0);
  put_tokens(w, prompt, n_prompt);
  put_items(w, items, n_items);
}

void encode_logits(Writer &w, uint32_t row, const float *v, uint32_t count) {
  w.u32(count);
  w.u32(row);
  for (uint32_t i = 0; i < count; i++) w.f32(v[i]);
}

void encode_head_row(Writer &w, uint64_t block, uint32_t row, const float *v, uint32_t floats) {
  w.u64(block);
  w.u32(row);
  w.u32(floats);
  for (uint32_t i = 0; i < floats; i++) w.f32(v[i]);
}

void encode_worker_error(Writer &w, uint64_t session, int32_t status, uint16_t command,
                         const char *message, size_t message_bytes) {
  w.u64(session);
  w.i32(status);
  w.u16(command);
  w.u16(0);
  w.u32(uint32_t(message_bytes));
  w.u32(0);
  w.bytes(message, message_bytes);
}

void read_floats(const uint8_t *src, float *dst, size_t count) {
  for (size_t i = 0; i < count; i++) {
    uint32_t bits = get_u32(src + 4 * i);
    std::memcpy(&dst[i], &bits, 4);
  }
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

int decode(const uint8_t *p, size_t n, SmallMsg &m, Error &err) {
  Ctx c{FrameType::SmallExchange, n};
  if (int rc = need_min(c, 16, err)) return rc;
  Reader r(p, n);
  m.seq = r.u64();
  m.bytes = r.u32();
  uint32_t reserved = r.u32();
  if (m.seq == 0) return bad(c, err, "seq 0 is invalid (exchanges count from 1)");
  if (m.bytes < 1 || m.bytes > kSmallExchangeMax)
    return bad(c, err, "byte count {} outside 1..{}", m.bytes, kSmallExchangeMax);
  if (int rc = count_fills(c, "bytes", m.bytes, 1, r.remaining(), err)) return rc;
  if (int rc = reserved_zero(c, reserved, "at byte 12", err)) return rc;
  std::memcpy(m.data.data(), r.bytes(m.bytes), m.bytes);
  return DS4TP_OK;
}

int decode(const uint8_t *p, size_t n, SyncMsg &m, Error &err) {
  Ctx c{FrameType::Sync, n};
  if (int rc = need_min(c, 16, err)) return rc;
  Reader r(p, n);
  m.session = r.u64();
  uint32_t count = r.u32();
  m.logits_floats = r.u32();
  if (int rc = session_nonzero(c, m.session, err)) return rc;
  if (int rc = count_fills(c, "tokens", count, 4, r.remaining(), err)) return rc;
  get_tokens(r, m.tokens, count);
  return DS4TP_OK;
}

int decode(const uint8_t *p, size_t n, SyncImagesMsg &m, Error &err) {
  Ctx c{FrameType::SyncImages, n};
  if (int rc = need_min(c, 24, err)) return rc;
  Reader r(p, n);
  m.session = r.u64();
  uint32_t n_tokens = r.u32();
  uint32_t n_images = r.u32();
  m.logits_floats = r.u32();
  uint32_t reserved = r.u32();
  if (int rc = session_nonzero(c, m.session, err)) return rc;
  if (int rc = reserved_zero(c, reserved, "at byte 20", err)) return rc;
  uint64_t left = r.remaining();
  if (4ull * n_tokens > left)
    return bad(c, err, "{} tokens need {} bytes but {} remain", n_tokens, 4ull * n_tokens, left);
  left -= 4ull * n_tokens;
  if (uint64_t(n_images) * kImageHeaderBytes > left)
    return bad(c, err, "{} images need at least {} bytes but {} remain", n_images,
               uint64_t(n_images) * kImageHeaderBytes, left);
  get_tokens(r, m.tokens, n_tokens);
  // First pass: headers and sizes, so nothing is allocated for embeddings a
  // malformed frame does not actually carry.
  m.images.resize(n_images);
  uint64_t floats_total = 0;
  for (uint32_t i = 0; i < n_images; i++) {
    ImageMeta &im = m.images[i];
    im.token_start = r.u32();
    im.token_count = r.u32();
    im.data_width = r.u32();
    im.width = r.u32();
    im.height = r.u32();
    im.content_width = r.u32();
    im.content_height = r.u32();
    const uint8_t *fp = r.bytes(kFingerprintBytes);
    if (fp == nullptr) return bad(c, err, "image {} header truncated", i);
    std::memcpy(im.fingerprint.data(), fp, kFingerprintBytes);
    if (im.token_count == 0) return bad(c, err, "image {} spans 0 tokens", i);
    if (im.data_width == 0) return bad(c, err, "image {} has data width 0", i);
    if (im.width == 0 || im.height == 0)
      return bad(c, err, "image {} is {}x{} pixels", i, im.width, im.height);
    if (uint64_t(im.token_start) + im.token_count > n_tokens)
      return bad(c, err, "image {} spans tokens {}..{} but the prompt has {}", i, im.token_start,
                 uint64_t(im.token_start) + im.token_count, n_tokens);
    uint64_t floats = uint64_t(im.token_count) * im.data_width;  // < 2^64
    uint64_t have = r.remaining();
    if (floats > have / 4)
      return bad(c, err, "image {} needs {} floats ({} x {}) but {} bytes remain", i, floats,
                 im.token_count, im.data_width, have);
    im.embd_offset = floats_total;
    floats_total += floats;
    r.bytes(size_t(floats * 4));
  }
  if (r.remaining() != 0)
    return bad(c, err, "{} bytes left after the last image", r.remaining());
  // Second pass: the floats, now that every size is known to be present.
  m.embd.resize(size_t(floats_total));
  const uint8_t *q = p + 24 + 4ull * n_tokens;
  for (uint32_t i = 0; i < n_images; i++) {
    const ImageMeta &im = m.images[i];
    uint64_t floats = uint64_t(im.token_count) * im.data_width;
    read_floats(q + kImageHeaderBytes, m.embd.data() + im.embd_offset, size_t(floats));
    q += kImageHeaderBytes + floats * 4;
  }
  return DS4TP_OK;
}

int decode(const uint8_t *p, size_t n, VerifyMsg &m, Error &err) {
  Ctx c{FrameType::Verify, n};
  if (int rc = need_min(c, 16, err)) return rc;
  Reader r(p, n);
  m.session = r.u64();
  uint32_t count = r.u32();
  m.flags = r.u32();
  if (int rc = session_nonzero(c, m.session, err)) return rc;
  if (count < 1 || count > kVerifyRowsMax)
    return bad(c, err, "draft count {} outside 1..{}", count, kVerifyRowsMax);
  if (int rc = count_fills(c, "drafts", count, 4, r.remaining(), err)) return rc;
  if (m.flags & ~kVerifyFlagsAll)
    return bad(c, err, "unknown flag bits 0x{:x}", m.flags & ~kVerifyFlagsAll);
  if ((m.flags & kVerifyDraftSeed) && !(m.flags & kVerifyDraftShared))
    return bad(c, err, "flag DRAFT_SEED (4) needs DRAFT_SHARED (2)");
  get_tokens(r, m.drafts, count);
  return DS4TP_OK;
}

int decode(const uint8_t *p, size_t n, EvalBatchMsg &m, Error &err) {
  Ctx c{FrameType::EvalBatch, n};
  if (int rc = need_min(c, 8, err)) return rc;
  Reader r(p, n);
  uint32_t count = r.u32();
  m.logits_floats = r.u32();
  if (count == 0) return bad(c, err, "an eval batch needs at least 1 item");
  if (int rc = count_fills(c, "items", count, kBatchItemBytes, r.remaining(), err)) return rc;
  return get_items(c, r, m.items, count, err);
}

int decode(const uint8_t *p, size_t n, MixedBatchMsg &m, Error &err) {
  Ctx c{FrameType::MixedBatch, n};
  if (int rc = need_min(c, 24, err)) return rc;
  Reader r(p, n);
  m.session = r.u64();
  uint32_t n_prompt = r.u32();
  uint32_t n_items = r.u32();
  m.logits_floats = r.u32();
  uint32_t reserved = r.u32();
  if (int rc = session_nonzero(c, m.session, err)) return rc;
  if (int rc = reserved_zero(c, reserved, "at byte 20", err)) return rc;
  if (n_prompt == 0) return bad(c, err, "a mixed batch needs at least 1 prompt token");
  if (n_items == 0) return bad(c, err, "a mixed batch needs at least 1 decode item");
  uint64_t need = 4ull * n_prompt + uint64_t(kBatchItemBytes) * n_items;
  if (need != r.remaining())
    return bad(c, err, "{} prompt tokens and {} items need {} bytes but {} remain", n_prompt,
               n_items, need, r.remaining());
  get_tokens(r, m.prompt, n_prompt);
  return get_items(c, r, m.items, n_items, err);
}

int decode(const uint8_t *p, size_t n, WorkerErrorMsg &m, Error &err) {
  Ctx c{FrameType::WorkerError, n};
  if (int rc = need_min(c, 24, err)) return rc;
  Reader r(p, n);
  m.session = r.u64();
  m.status = r.i32();
  m.command = r.u16();
  uint16_t reserved1 = r.u16();
  uint32_t len = r.u32();
  uint32_t reserved2 = r.u32();
  if (int rc = reserved_zero(c, reserved1, "at byte 14", err)) return rc;
  if (int rc = reserved_zero(c, reserved2, "at byte 20", err)) return rc;
  if (len > kErrorMessageMax)
    return bad(c, err, "message of {} bytes exceeds {}", len, kErrorMessageMax);
  if (int rc = count_fills(c, "message bytes", len, 1, r.remaining(), err)) return rc;
  const uint8_t *s = r.bytes(len);
  m.message.assign(reinterpret_cast<const char *>(s), len);
  return DS4TP_OK;
}

int decode(const uint8_t *p, size_t n, LogitsHead &m, Error &err) {
  Ctx c{FrameType::Logits, n};
  if (int rc = need_min(c, 8, err)) return rc;
  m.count = get_u32(p);
  m.row = get_u32(p + 4);
  if (m.count == 0) return bad(c, err, "count 0 is invalid");
  if (int rc = count_fills(c, "floats", m.count, 4, n - 8, err)) return rc;
  m.floats = p + 8;
  return DS4TP_OK;
}

int decode(const uint8_t *p, size_t n, HeadRowHead &m, Error &err) {
  Ctx c{FrameType::HeadRow, n};
  if (int rc = need_min(c, 16, err)) return rc;
  m.block = get_u64(p);
  m.row = get_u32(p + 8);
  m.floats = get_u32(p + 12);
  if (m.block == 0) return bad(c, err, "block 0 is invalid (blocks count from 1)");
  if (m.row >= kVerifyRowsMax) return bad(c, err, "row {} outside 0..{}", m.row, kVerifyRowsMax - 1);
  if (m.floats < 1 || m.floats > kHeadRowMax)
    return bad(c, err, "float count {} outside 1..{}", m.floats, kHeadRowMax);
  if (int rc = count_fills(c, "floats", m.floats, 4, n - 16, err)) return rc;
  m.data = p + 16;
  return DS4TP_OK;
}

int validate_payload(uint16_t type, const uint8_t *p, size_t n, Error &err) {
  switch (FrameType(type)) {
    case FrameType::Sync: { SyncMsg m; return decode(p, n, m, err); }
    case FrameType::Eval: { EvalMsg m; return decode(p, n, m, err); }
    case FrameType::Rewind: { PosMsg m; return decode_pos(FrameType::Rewind, p, n, m, err); }
    case FrameType::Invalidate: { SessionMsg m; return decode_session(FrameType::Invalidate, p, n, m, err); }
    case FrameType::Stop: return decode_stop(p, n, err);
    case FrameType::Hash: { HashMsg m; return decode(p, n, m, err); }
    case FrameType::RdmaInfo: { RdmaInfo m; return decode_rdma_info(p, n, m, err); }
    case FrameType::SyncAck: { SyncAckMsg m; return decode(p, n, m, err); }
    case FrameType::RdmaReady: { RdmaReady m; return decode_rdma_ready(p, n, m, err); }
    case FrameType::Logits: { LogitsHead m; return decode(p, n, m, err); }
    case FrameType::Verify: { VerifyMsg m; return decode(p, n, m, err); }
    case FrameType::VerifyCommit: { CommitMsg m; return decode(p, n, m, err); }
    case FrameType::SessionCreate: { CreateMsg m; return decode(p, n, m, err); }
    case FrameType::SessionDestroy: { SessionMsg m; return decode_session(FrameType::SessionDestroy, p, n, m, err); }
    case FrameType::EvalBatch: { EvalBatchMsg m; return decode(p, n, m, err); }
    case FrameType::MixedBatch: { MixedBatchMsg m; return decode(p, n, m, err); }
    case FrameType::CommandAck: { AckMsg m; return decode(p, n, m, err); }
    case FrameType::SyncImages: { SyncImagesMsg m; return decode(p, n, m, err); }
    case FrameType::RdmaWarm: { RdmaWarm m; return decode_rdma_warm(p, n, m, err); }
    case FrameType::RdmaPosted: { RdmaPosted m; return decode_rdma_posted(p, n, m, err); }
    case FrameType::Mtp: { MtpMsg m; return decode(p, n, m, err); }
    case FrameType::SyncCheckpoint: { CheckpointMsg m; return decode(p, n, m, err); }
    case FrameType::Draft: { DraftMsg m; return decode(p, n, m, err); }
    case FrameType::SpecRestore: { PosMsg m; return decode_pos(FrameType::SpecRestore, p, n, m, err); }
    case FrameType::BlockBegin: { BlockBeginMsg m; return decode(p, n, m, err); }
    case FrameType::BlockEnd: { BlockEndMsg m; return decode(p, n, m, err); }
    case FrameType::SmallExchange: { SmallMsg m; return decode(p, n, m, err); }
    case FrameType::HeadRow: { HeadRowHead m; return decode(p, n, m, err); }
    case FrameType::ExecMode: { ExecModeMsg m; return decode(p, n, m, err); }
    case FrameType::DrafterSplit: { DrafterSplitMsg m; return decode(p, n, m, err); }
    case FrameType::WorkerError: { WorkerErrorMsg m; return decode(p, n, m, err); }
  }
  return err.set(DS4TP_EPROTO, "unknown control frame type {} ({} payload bytes)", type, n);
}

}  // namespace ds4tp::wire
