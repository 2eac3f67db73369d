// The one table of control frame types (docs/PROTOCOL.md, "Control
// frames"). Every fact about a type that is not its byte layout lives in
// its row: the number, the name, who may send it, the payload size rule,
// and for the leader's commands the reply the worker owes, how many logits
// halves follow, and the ds4tp_worker_ops callback that serves it. The
// FrameType enum, the header's size check, frame names, the session's
// reply bookkeeping and the worker loop's callback choice all derive from
// it, and wire/frame_table.cpp ties the public DS4TP_CMD_* numbers and
// limits to it at compile time. Pure code: no I/O, no globals.
//
// Adding a command touches:
//   1. a row in DS4TP_COMMAND_FRAMES below, naming its payload struct;
//   2. that struct and its codec: wire/frames.hpp, wire/frames_fixed.cpp or
//      wire/frames_arrays.cpp (validate_payload and the worker's command
//      decoding then run it from the row);
//   3. session/: the leader call (leader.cpp, declared in session.hpp) and
//      what the struct gives the worker's Command (session/command_fields.hpp);
//   4. the C API: DS4TP_CMD_*, the ds4tp_worker_ops field and the send call
//      in include/ds4tp/ds4tp_control.h, with its capi wrapper (the build
//      fails while the first two are missing).
// plus a sample in tests/frame_samples.cpp (test_frames wants every type);
// docs/LAYOUT.md, "Adding a command", lists every file.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

#include "wire/rdma_frames.hpp"

namespace ds4tp::wire {

// ---- limits the size rules use -------------------------------------------
constexpr uint32_t kVerifyRowsMax = 8;        // DS4TP_BATCH_MAX_ROWS
constexpr uint32_t kMtpLimitMax = 7;          // drafts + seed fit a verify block
constexpr uint32_t kBlockGatesMax = 2;        // DS4TP_BATCH_GATES_PER_LAYER
constexpr uint32_t kSmallExchangeMax = 192;
constexpr uint32_t kHeadRowMax = 131072;
constexpr uint32_t kDrafterMetaBytes = 64;
constexpr uint32_t kFingerprintBytes = 32;
constexpr uint32_t kErrorMessageMax = 1024;
constexpr uint32_t kImageHeaderBytes = 60;
constexpr uint32_t kBatchItemBytes = 16;
constexpr uint32_t kItem = kBatchItemBytes;            // short names for the table
constexpr uint32_t kVerifyMax = 16 + 4 * kVerifyRowsMax;
constexpr uint32_t kAny = 0;  // max column: up to the receiver's max_frame_bytes

// Who may send a type: the leader, the worker, or both ranks.
enum class Sender : uint8_t { Leader, Worker, Both };

// What the worker owes the leader for a command, before any logits.
enum class Reply : uint8_t {
  NotCommand,  // a reply, an agreement or a transport frame
  None,        // nothing (logits halves, if any, follow at once)
  Ack,         // COMMAND_ACK with a status
  SyncAck,     // SYNC_ACK with a status and a position
  Hash,        // the worker's own HASH
};

// How many logits halves a command's reply carries (when logits_floats is
// not 0 and, after an ack, the status is 0).
enum class Rows : uint8_t {
  None,
  One,
  PerItem,        // one per batch item
  PromptAndItems, // one for the prefill, then one per item
  Replay,         // one when a rollback replays tokens (count > 0)
};

// Command rows: C(Type, number, NAME, sender, min, unit, max, reply,
// logits rows, worker callback, payload struct). Payload bytes are min + k * unit for some
// k >= 0, at most max (unit 0: exactly min; max kAny: max_frame_bytes).
// NAME is also the DS4TP_CMD_ suffix; the callback is SLOT(field of
// ds4tp_worker_ops) or NO_SLOT; the payload struct (wire/frames.hpp or
// rdma_frames.hpp) is what decode_payload fills: validate_payload and the
// worker's command decoding run it for the row's type. Numbers 1..24 keep
// those of the engine-embedded protocol we generalize; 25.. are ours.
#define DS4TP_COMMAND_FRAMES(C)                                                                                                                \
  C(Sync,           1,  SYNC,            Leader, 16,         4,     kAny,       SyncAck, One,            SLOT(sync),            SyncMsg)       \
  C(Eval,           2,  EVAL,            Leader, 24,         0,     24,         None,    One,            SLOT(eval),            EvalMsg)       \
  C(Rewind,         3,  REWIND,          Leader, 16,         0,     16,         None,    None,           SLOT(rewind),          PosMsg)        \
  C(Invalidate,     4,  INVALIDATE,      Leader, 8,          0,     8,          None,    None,           SLOT(invalidate),      SessionMsg)    \
  C(Stop,           5,  STOP,            Leader, 0,          0,     0,          None,    None,           NO_SLOT,               StopMsg)       \
  C(Hash,           6,  HASH,            Both,   24,         0,     24,         Hash,    None,           SLOT(hash),            HashMsg)       \
  C(Verify,         11, VERIFY,          Leader, 20,         4,     kVerifyMax, None,    None,           SLOT(verify),          VerifyMsg)     \
  C(VerifyCommit,   12, VERIFY_COMMIT,   Leader, 24,         0,     24,         None,    Replay,         SLOT(verify_commit),   CommitMsg)     \
  C(SessionCreate,  13, SESSION_CREATE,  Leader, 16,         0,     16,         Ack,     None,           SLOT(session_create),  CreateMsg)     \
  C(SessionDestroy, 14, SESSION_DESTROY, Leader, 8,          0,     8,          Ack,     None,           SLOT(session_destroy), SessionMsg)    \
  C(EvalBatch,      15, EVAL_BATCH,      Leader, 8 + kItem,  kItem, kAny,       Ack,     PerItem,        SLOT(eval_batch),      EvalBatchMsg)  \
  C(MixedBatch,     16, MIXED_BATCH,     Leader, 28 + kItem, 4,     kAny,       Ack,     PromptAndItems, SLOT(mixed_batch),     MixedBatchMsg) \
  C(SyncImages,     18, SYNC_IMAGES,     Leader, 24,         4,     kAny,       SyncAck, One,            SLOT(sync_images),     SyncImagesMsg) \
  C(Mtp,            21, MTP,             Leader, 24,         0,     24,         Ack,     None,           SLOT(mtp),             MtpMsg)        \
  C(Draft,          23, DRAFT,           Leader, 24,         0,     24,         None,    None,           SLOT(draft),           DraftMsg)      \
  C(SpecRestore,    24, SPEC_RESTORE,    Leader, 16,         0,     16,         Ack,     None,           SLOT(spec_restore),    PosMsg)

// Every other row: F(Type, number, NAME, sender, min, unit, max, payload struct).
#define DS4TP_OTHER_FRAMES(F)                                                                                    \
  F(RdmaInfo,       7,  RDMA_INFO,       Both,   kRdmaInfoPayload,   0, kRdmaInfoPayload,       RdmaInfo)        \
  F(SyncAck,        8,  SYNC_ACK,        Worker, 16,                 0, 16,                     SyncAckMsg)      \
  F(RdmaReady,      9,  RDMA_READY,      Both,   kRdmaReadyPayload,  0, kRdmaReadyPayload,      RdmaReady)       \
  F(Logits,         10, LOGITS,          Worker, 12,                 4, kAny,                   LogitsHead)      \
  F(CommandAck,     17, COMMAND_ACK,     Worker, 16,                 0, 16,                     AckMsg)          \
  F(RdmaWarm,       19, RDMA_WARM,       Both,   kRdmaWarmPayload,   0, kRdmaWarmPayload,       RdmaWarm)        \
  F(RdmaPosted,     20, RDMA_POSTED,     Both,   kRdmaPostedPayload, 0, kRdmaPostedPayload,     RdmaPosted)      \
  F(SyncCheckpoint, 22, SYNC_CHECKPOINT, Both,   24,                 0, 24,                     CheckpointMsg)   \
  F(BlockBegin,     25, BLOCK_BEGIN,     Both,   24,                 0, 24,                     BlockBeginMsg)   \
  F(BlockEnd,       26, BLOCK_END,       Both,   8,                  0, 8,                      BlockEndMsg)     \
  F(SmallExchange,  27, SMALL_EXCHANGE,  Both,   17,                 1, 16 + kSmallExchangeMax, SmallMsg)        \
  F(HeadRow,        28, HEAD_ROW,        Worker, 20,                 4, 16 + 4 * kHeadRowMax,   HeadRowHead)     \
  F(ExecMode,       29, EXEC_MODE,       Both,   8,                  0, 8,                      ExecModeMsg)     \
  F(DrafterSplit,   30, DRAFTER_SPLIT,   Both,   72,                 0, 72,                     DrafterSplitMsg) \
  F(WorkerError,    31, WORKER_ERROR,    Worker, 24,                 1, 24 + kErrorMessageMax,  WorkerErrorMsg)  \
  F(Heartbeat,      32, HEARTBEAT,       Both,   24,                 0, 24,                     HeartbeatMsg)

// The C API exposes the command subset as ds4tp_command_kind with the
// same numbers.
enum class FrameType : uint16_t {
#define DS4TP_FRAME_ENUM(type, number, ...) type = number,
  DS4TP_COMMAND_FRAMES(DS4TP_FRAME_ENUM) DS4TP_OTHER_FRAMES(DS4TP_FRAME_ENUM)
#undef DS4TP_FRAME_ENUM
};

constexpr uint16_t kFrameTypeMin = 1;
#define DS4TP_FRAME_NUMBER(type, number, ...) , uint16_t(number)
constexpr uint16_t kFrameTypeMax =
    std::max({uint16_t(0) DS4TP_COMMAND_FRAMES(DS4TP_FRAME_NUMBER)
                  DS4TP_OTHER_FRAMES(DS4TP_FRAME_NUMBER)});
#undef DS4TP_FRAME_NUMBER

// One row of the table.
struct FrameRule {
  const char *name = "?";  // upper case, "EVAL"
  Sender sender = Sender::Both;
  uint32_t min = 0;
  uint32_t unit = 0;
  uint32_t max = 0;
  Reply reply = Reply::NotCommand;
  Rows rows = Rows::None;
  const char *callback = nullptr;  // ds4tp_worker_ops field, nullptr: none
};

namespace detail {

constexpr std::array<FrameRule, kFrameTypeMax + 1> make_frame_table() {
  std::array<FrameRule, kFrameTypeMax + 1> t{};
#define SLOT(field) #field
#define NO_SLOT nullptr
#define DS4TP_COMMAND_ROW(type, number, name, sender, min, unit, max, reply, rows, slot, msg) \
  t[number] = FrameRule{#name, Sender::sender, min, unit, max, Reply::reply, Rows::rows, slot};
#define DS4TP_OTHER_ROW(type, number, name, sender, min, unit, max, msg) \
  t[number] = FrameRule{#name, Sender::sender, min, unit, max};
  DS4TP_COMMAND_FRAMES(DS4TP_COMMAND_ROW)
  DS4TP_OTHER_FRAMES(DS4TP_OTHER_ROW)
#undef DS4TP_OTHER_ROW
#undef DS4TP_COMMAND_ROW
#undef NO_SLOT
#undef SLOT
  return t;
}

}  // namespace detail

// Indexed by type; [0] is the unknown row.
inline constexpr std::array<FrameRule, kFrameTypeMax + 1> kFrameTable =
    detail::make_frame_table();

// The compile-time paths test the type, not a pointer: GCC cannot fold a
// null test of &kFrameTable[i] under -fsanitize=undefined.
constexpr bool known_frame_type(uint16_t type) {
  return type >= kFrameTypeMin && type <= kFrameTypeMax;
}
// nullptr for an unknown type.
constexpr const FrameRule *frame_rule(uint16_t type) {
  return known_frame_type(type) ? &kFrameTable[type] : nullptr;
}
constexpr const FrameRule &frame_info(FrameType t) {
  return kFrameTable[known_frame_type(uint16_t(t)) ? uint16_t(t) : 0];
}
// Upper-case name ("EVAL"), "?" for an unknown type.
constexpr const char *frame_name(uint16_t type) {
  return known_frame_type(type) ? kFrameTable[type].name : "?";
}
constexpr const char *frame_name(FrameType t) { return frame_name(uint16_t(t)); }

// Payload bytes of a fixed-size type (its size rule has unit 0).
constexpr size_t fixed_bytes(FrameType t) { return frame_info(t).min; }

// Whether a command is answered with a status (COMMAND_ACK or SYNC_ACK).
constexpr bool has_status_reply(FrameType t) {
  Reply r = frame_info(t).reply;
  return r == Reply::Ack || r == Reply::SyncAck;
}

// The frame that carries a reply kind (COMMAND_ACK, SYNC_ACK, HASH).
constexpr FrameType reply_frame(Reply r) {
  return r == Reply::SyncAck ? FrameType::SyncAck
                             : r == Reply::Hash ? FrameType::Hash : FrameType::CommandAck;
}

// The ds4tp_worker_ops field that serves a command, "?" when none does.
constexpr const char *callback_name(FrameType t) {
  const char *c = frame_info(t).callback;
  return c ? c : "?";
}

// Commands served by a worker callback: one ds4tp_worker_ops field each.
constexpr size_t worker_callback_count() {
  size_t n = 0;
  for (const FrameRule &r : kFrameTable) n += r.callback != nullptr ? 1 : 0;
  return n;
}

}  // namespace ds4tp::wire
