// Lockstep control frames (docs/PROTOCOL.md, "Control frames"): the header
// and every payload's codec. Pure code: no I/O, no globals. Every frame is a 16-byte header
//   u32 magic "D4FR" | u16 type | u16 flags (0) | u32 payload bytes |
//   u32 frame counter (1, 2, 3, ... per direction)
// followed by a payload whose layout depends on the type. Every payload is
// encoded field by field (little-endian) and every decoder checks the exact
// size, every count against the bytes present (in 64-bit arithmetic), every
// enum and every reserved field before anything is trusted.
//
// Allocation: encoders write into a caller buffer (Writer) and never
// allocate. Decoders of fixed-size payloads never allocate; array decoders
// reuse the capacity of the vectors they fill.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "wire/codec.hpp"
#include "wire/frame_table.hpp"
#include "wire/rdma_frames.hpp"

namespace ds4tp::wire {

constexpr uint32_t kFrameMagic = 0x52463444u;         // bytes "D4FR"
constexpr uint32_t kFrameMagicSwapped = 0x44344652u;  // other byte order
constexpr size_t kFrameHeaderBytes = 16;

// Frame types, names, senders and size rules: wire/frame_table.hpp.

struct FrameHeader {
  uint16_t type = 0;
  uint16_t flags = 0;
  uint32_t bytes = 0;
  uint32_t counter = 0;
};

void encode_frame_header(const FrameHeader &h, uint8_t out[kFrameHeaderBytes]);
// Checks magic (a byte-swapped one is named), flags 0, a known type, bytes
// <= max_frame_bytes, and the type's size rule. EPROTO naming the type
// and size otherwise. Does not check the counter (the channel does).
int decode_frame_header(const uint8_t *buf, size_t len, uint32_t max_frame_bytes,
                        FrameHeader &out, Error &err);

// ---- enumerations carried in payloads (limits: wire/frame_table.hpp) -----
enum : uint32_t { kVerifyHeadSplit = 1, kVerifyDraftShared = 2, kVerifyDraftSeed = 4 };
constexpr uint32_t kVerifyFlagsAll = kVerifyHeadSplit | kVerifyDraftShared | kVerifyDraftSeed;
enum : int32_t { kCommitRollback = 0, kCommitFull = 1, kCommitPrefix = 2 };
enum : uint32_t { kDraftMaintain = 1, kDraftPropose = 2 };

// Logits halves a command's reply carries, by the table's rows rule: 0
// when logits_floats is 0 or the type carries none. `n_items` counts batch
// items; `commit_mode`/`commit_count` are VERIFY_COMMIT's.
constexpr uint64_t logits_rows(FrameType t, uint32_t logits_floats, uint64_t n_items,
                               int32_t commit_mode, int32_t commit_count) {
  if (logits_floats == 0) return 0;
  switch (frame_info(t).rows) {
    case Rows::One: return 1;
    case Rows::PerItem: return n_items;
    case Rows::PromptAndItems: return 1 + n_items;
    case Rows::Replay: return commit_mode == kCommitRollback && commit_count > 0 ? 1 : 0;
    case Rows::None: break;
  }
  return 0;
}

// ---- fixed-size payloads -------------------------------------------------
// (RDMA_INFO, RDMA_READY, RDMA_WARM and RDMA_POSTED payloads are defined by
// the RDMA transport in wire/rdma_frames.hpp; their size rules are in the
// frame table.)
struct EvalMsg {  // EVAL, 24 bytes
  uint64_t session = 0;
  uint64_t seq = 0;
  int32_t token = 0;
  uint32_t logits_floats = 0;
};
struct MtpMsg {  // MTP, 24 bytes
  uint64_t session = 0;
  uint64_t seq = 0;
  int32_t token = 0;
  uint32_t limit = 0;
};
struct PosMsg {  // REWIND, SPEC_RESTORE, 16 bytes
  uint64_t session = 0;
  int32_t pos = 0;
};
struct SessionMsg {  // INVALIDATE, SESSION_DESTROY, 8 bytes
  uint64_t session = 0;
};
struct CreateMsg {  // SESSION_CREATE, 16 bytes
  uint64_t session = 0;
  uint32_t ctx_size = 0;
};
struct HashMsg {  // HASH, 24 bytes
  uint64_t session = 0;
  uint64_t seq = 0;
  uint64_t hash = 0;
};
struct SyncAckMsg {  // SYNC_ACK, 16 bytes
  uint64_t session = 0;
  int32_t status = 0;
  uint32_t position = 0;
};
struct AckMsg {  // COMMAND_ACK, 16 bytes
  uint64_t session = 0;
  int32_t status = 0;
  uint16_t command = 0;  // the frame type acknowledged
};
struct CommitMsg {  // VERIFY_COMMIT, 24 bytes
  uint64_t session = 0;
  int32_t mode = 0;
  int32_t count = 0;
  uint32_t logits_floats = 0;
};
struct CheckpointMsg {  // SYNC_CHECKPOINT, 24 bytes
  uint64_t seq = 0;
  uint32_t point = 0;
  int32_t current = 0;
  int32_t total = 0;
  uint32_t cancel = 0;  // 0 or 1
};
struct DraftMsg {  // DRAFT, 24 bytes
  uint64_t session = 0;
  int32_t token = 0;
  int32_t pos = 0;
  uint32_t mode = 0;
};
struct BlockBeginMsg {  // BLOCK_BEGIN, 24 bytes
  uint64_t block = 0;
  uint32_t rows = 0;
  uint32_t n_layers = 0;
  uint32_t gates_per_layer = 0;
};
struct BlockEndMsg {  // BLOCK_END, 8 bytes
  uint64_t block = 0;
};
struct ExecModeMsg {  // EXEC_MODE, 8 bytes
  uint32_t flags = 0;
  uint32_t caps = 0;
};
// HEARTBEAT, 24 bytes: sent by the liveness watcher, never by the session;
// outside the frame counter (its header carries counter 0). The sender's
// last completed gate: kind (wire::GateKind, 0 = none yet), layer (the
// batch index for a batch gate), seq.
struct HeartbeatMsg {
  uint16_t kind = 0;
  uint32_t layer = 0;
  uint64_t seq = 0;
  uint64_t gates = 0;  // gates the sender entered so far (any kind); 0 from older libraries
};
struct DrafterSplitMsg {  // DRAFTER_SPLIT, 72 bytes
  uint32_t on = 0;  // 0 or 1
  std::array<uint8_t, kDrafterMetaBytes> meta{};
};
// Their sizes, from the table's size rules.
constexpr size_t kEvalBytes = fixed_bytes(FrameType::Eval);
constexpr size_t kMtpBytes = fixed_bytes(FrameType::Mtp);
constexpr size_t kPosBytes = fixed_bytes(FrameType::Rewind);
constexpr size_t kSessionBytes = fixed_bytes(FrameType::Invalidate);
constexpr size_t kCreateBytes = fixed_bytes(FrameType::SessionCreate);
constexpr size_t kHashBytes = fixed_bytes(FrameType::Hash);
constexpr size_t kSyncAckBytes = fixed_bytes(FrameType::SyncAck);
constexpr size_t kAckBytes = fixed_bytes(FrameType::CommandAck);
constexpr size_t kCommitBytes = fixed_bytes(FrameType::VerifyCommit);
constexpr size_t kCheckpointBytes = fixed_bytes(FrameType::SyncCheckpoint);
constexpr size_t kDraftBytes = fixed_bytes(FrameType::Draft);
constexpr size_t kBlockBeginBytes = fixed_bytes(FrameType::BlockBegin);
constexpr size_t kBlockEndBytes = fixed_bytes(FrameType::BlockEnd);
constexpr size_t kExecModeBytes = fixed_bytes(FrameType::ExecMode);
constexpr size_t kDrafterSplitBytes = fixed_bytes(FrameType::DrafterSplit);
constexpr size_t kHeartbeatBytes = fixed_bytes(FrameType::Heartbeat);
static_assert(fixed_bytes(FrameType::SpecRestore) == kPosBytes);
static_assert(fixed_bytes(FrameType::SessionDestroy) == kSessionBytes);
static_assert(kDrafterSplitBytes == 8 + kDrafterMetaBytes);

// ---- array payloads ------------------------------------------------------
struct BatchItem {
  uint64_t session = 0;
  int32_t token = 0;
  uint32_t flags = 0;  // reserved, 0
  bool operator==(const BatchItem &) const = default;
};

struct ImageMeta {
  uint32_t token_start = 0;
  uint32_t token_count = 0;
  uint32_t data_width = 0;  // floats per token (the model's n_embd)
  uint32_t width = 0;
  uint32_t height = 0;
  uint32_t content_width = 0;
  uint32_t content_height = 0;
  std::array<uint8_t, kFingerprintBytes> fingerprint{};
  uint64_t embd_offset = 0;  // decoded: first float of this image in `embd`
};

struct SyncMsg {  // SYNC
  uint64_t session = 0;
  uint32_t logits_floats = 0;
  std::vector<int32_t> tokens;
};
struct SyncImagesMsg {  // SYNC_IMAGES
  uint64_t session = 0;
  uint32_t logits_floats = 0;
  std::vector<int32_t> tokens;
  std::vector<ImageMeta> images;
  std::vector<float> embd;  // every image's token_count * data_width floats
};
struct VerifyMsg {  // VERIFY
  uint64_t session = 0;
  uint32_t flags = 0;
  std::vector<int32_t> drafts;
};
struct EvalBatchMsg {  // EVAL_BATCH
  uint32_t logits_floats = 0;
  std::vector<BatchItem> items;
};
struct MixedBatchMsg {  // MIXED_BATCH
  uint64_t session = 0;  // the prefill session
  uint32_t logits_floats = 0;
  std::vector<int32_t> prompt;
  std::vector<BatchItem> items;
};
struct SmallMsg {  // SMALL_EXCHANGE
  uint64_t seq = 0;
  uint32_t bytes = 0;
  std::array<uint8_t, kSmallExchangeMax> data{};
};
struct WorkerErrorMsg {  // WORKER_ERROR
  uint64_t session = 0;
  int32_t status = 0;
  uint16_t command = 0;
  std::string message;
};
// LOGITS and HEAD_ROW carry float arrays that the receiver copies straight
// into a caller buffer: their decoders return the header fields and a
// pointer to the floats inside the payload (read with read_floats).
struct LogitsHead {
  uint32_t count = 0;
  uint32_t row = 0;
  const uint8_t *floats = nullptr;
};
struct HeadRowHead {
  uint64_t block = 0;
  uint32_t row = 0;
  uint32_t floats = 0;
  const uint8_t *data = nullptr;
};

// Payload sizes of array frames (64-bit: the caller checks them against
// max_frame_bytes before encoding).
uint64_t sync_bytes(uint64_t n_tokens);
uint64_t sync_images_bytes(uint64_t n_tokens, const ImageMeta *images, uint64_t n_images);
uint64_t verify_bytes(uint64_t n_drafts);
uint64_t eval_batch_bytes(uint64_t n_items);
uint64_t mixed_batch_bytes(uint64_t n_prompt, uint64_t n_items);
uint64_t logits_bytes(uint64_t count);
uint64_t small_bytes(uint64_t n);
uint64_t head_row_bytes(uint64_t floats);
uint64_t worker_error_bytes(size_t message_bytes);

// ---- encoders (the Writer must have room for exactly the payload) ----------
void encode(Writer &w, const EvalMsg &m);
void encode(Writer &w, const MtpMsg &m);
void encode(Writer &w, const PosMsg &m);
void encode(Writer &w, const SessionMsg &m);
void encode(Writer &w, const CreateMsg &m);
void encode(Writer &w, const HashMsg &m);
void encode(Writer &w, const SyncAckMsg &m);
void encode(Writer &w, const AckMsg &m);
void encode(Writer &w, const CommitMsg &m);
void encode(Writer &w, const CheckpointMsg &m);
void encode(Writer &w, const DraftMsg &m);
void encode(Writer &w, const BlockBeginMsg &m);
void encode(Writer &w, const BlockEndMsg &m);
void encode(Writer &w, const ExecModeMsg &m);
void encode(Writer &w, const HeartbeatMsg &m);
void encode(Writer &w, const DrafterSplitMsg &m);
void encode(Writer &w, const SmallMsg &m);
void encode_sync(Writer &w, uint64_t session, uint32_t logits_floats, const int32_t *tokens,
                 uint32_t n);
// `embd[i]` points at image i's token_count * data_width floats.
void encode_sync_images(Writer &w, uint64_t session, uint32_t logits_floats,
                        const int32_t *tokens, uint32_t n_tokens, const ImageMeta *images,
                        const float *const *embd, uint32_t n_images);
void encode_verify(Writer &w, uint64_t session, uint32_t flags, const int32_t *drafts,
                   uint32_t n);
void encode_eval_batch(Writer &w, uint32_t logits_floats, const BatchItem *items,
                       uint32_t n);
void encode_mixed_batch(Writer &w, uint64_t session, uint32_t logits_floats,
                        const int32_t *prompt, uint32_t n_prompt, const BatchItem *items,
                        uint32_t n_items);
void encode_logits(Writer &w, uint32_t row, const float *v, uint32_t count);
void encode_head_row(Writer &w, uint64_t block, uint32_t row, const float *v,
                     uint32_t floats);
void encode_worker_error(Writer &w, uint64_t session, int32_t status, uint16_t command,
                         const char *message, size_t message_bytes);

// ---- decoders: DS4TP_OK, or EPROTO naming the frame, its size and the
// first rule it breaks --------------------------------------------------------
int decode(const uint8_t *p, size_t n, EvalMsg &m, Error &err);
int decode(const uint8_t *p, size_t n, MtpMsg &m, Error &err);
// PosMsg and SessionMsg serve two types each: `type` names the frame.
int decode_pos(FrameType type, const uint8_t *p, size_t n, PosMsg &m, Error &err);
int decode_session(FrameType type, const uint8_t *p, size_t n, SessionMsg &m, Error &err);
int decode(const uint8_t *p, size_t n, CreateMsg &m, Error &err);
int decode(const uint8_t *p, size_t n, HashMsg &m, Error &err);
int decode(const uint8_t *p, size_t n, SyncAckMsg &m, Error &err);
int decode(const uint8_t *p, size_t n, AckMsg &m, Error &err);
int decode(const uint8_t *p, size_t n, CommitMsg &m, Error &err);
int decode(const uint8_t *p, size_t n, CheckpointMsg &m, Error &err);
int decode(const uint8_t *p, size_t n, DraftMsg &m, Error &err);
int decode(const uint8_t *p, size_t n, BlockBeginMsg &m, Error &err);
int decode(const uint8_t *p, size_t n, BlockEndMsg &m, Error &err);
int decode(const uint8_t *p, size_t n, ExecModeMsg &m, Error &err);
int decode(const uint8_t *p, size_t n, HeartbeatMsg &m, Error &err);
int decode(const uint8_t *p, size_t n, DrafterSplitMsg &m, Error &err);
int decode_stop(const uint8_t *p, size_t n, Error &err);
int decode(const uint8_t *p, size_t n, SmallMsg &m, Error &err);
int decode(const uint8_t *p, size_t n, SyncMsg &m, Error &err);
int decode(const uint8_t *p, size_t n, SyncImagesMsg &m, Error &err);
int decode(const uint8_t *p, size_t n, VerifyMsg &m, Error &err);
int decode(const uint8_t *p, size_t n, EvalBatchMsg &m, Error &err);
int decode(const uint8_t *p, size_t n, MixedBatchMsg &m, Error &err);
int decode(const uint8_t *p, size_t n, WorkerErrorMsg &m, Error &err);
int decode(const uint8_t *p, size_t n, LogitsHead &m, Error &err);
int decode(const uint8_t *p, size_t n, HeadRowHead &m, Error &err);

// STOP carries nothing.
struct StopMsg {};

// One entry for every payload struct the frame table names: the codec of
// `type`, which a struct serving two types (PosMsg, SessionMsg) needs.
template <class Msg>
int decode_payload(FrameType, const uint8_t *p, size_t n, Msg &m, Error &err) {
  return decode(p, n, m, err);
}
inline int decode_payload(FrameType t, const uint8_t *p, size_t n, PosMsg &m, Error &err) {
  return decode_pos(t, p, n, m, err);
}
inline int decode_payload(FrameType t, const uint8_t *p, size_t n, SessionMsg &m, Error &err) {
  return decode_session(t, p, n, m, err);
}
inline int decode_payload(FrameType, const uint8_t *p, size_t n, StopMsg &, Error &err) {
  return decode_stop(p, n, err);
}
inline int decode_payload(FrameType, const uint8_t *p, size_t n, RdmaInfo &m, Error &err) {
  return decode_rdma_info(p, n, m, err);
}
inline int decode_payload(FrameType, const uint8_t *p, size_t n, RdmaReady &m, Error &err) {
  return decode_rdma_ready(p, n, m, err);
}
inline int decode_payload(FrameType, const uint8_t *p, size_t n, RdmaWarm &m, Error &err) {
  return decode_rdma_warm(p, n, m, err);
}
inline int decode_payload(FrameType, const uint8_t *p, size_t n, RdmaPosted &m, Error &err) {
  return decode_rdma_posted(p, n, m, err);
}

// Copies `count` little-endian f32 from `src` to `dst`.
void read_floats(const uint8_t *src, float *dst, size_t count);

// Decodes any payload of `type` into a throwaway value: DS4TP_OK when it is
// well formed. Used by tests and by tools that only validate.
int validate_payload(uint16_t type, const uint8_t *p, size_t n, Error &err);

}  // namespace ds4tp::wire
