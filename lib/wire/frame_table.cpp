// Compile-time checks of the frame table (wire/frame_table.hpp) and of the
// public constants that repeat its numbers: a drift between them stops the
// build instead of reaching the wire.
#include "wire/frame_table.hpp"

#include "ds4tp/ds4tp.h"
#include "wire/frames.hpp"
#include "wire/rdma_frames.hpp"

namespace ds4tp::wire {
namespace {

// Numbers 1..kFrameTypeMax, each exactly once, and size rules that admit
// at least one size.
constexpr bool table_well_formed() {
  size_t rows = 0;
#define DS4TP_COUNT_ROW(...) rows++;
  DS4TP_COMMAND_FRAMES(DS4TP_COUNT_ROW)
  DS4TP_OTHER_FRAMES(DS4TP_COUNT_ROW)
#undef DS4TP_COUNT_ROW
  if (rows != kFrameTypeMax) return false;
  for (uint16_t t = kFrameTypeMin; t <= kFrameTypeMax; t++) {
    const FrameRule &r = kFrameTable[t];
    if (r.name[0] == '?') return false;  // a gap, so another number repeats
    if (r.unit == 0 && r.max != r.min) return false;
    if (r.unit != 0 && r.max != kAny && (r.max < r.min || (r.max - r.min) % r.unit != 0))
      return false;
    // Only a command has a reply kind, and only a served one a callback.
    if (r.reply == Reply::NotCommand && (r.rows != Rows::None || r.callback != nullptr))
      return false;
  }
  return true;
}
static_assert(table_well_formed(), "frame table: a number is missing or repeated, or a size "
                                   "rule admits no size");

// Every command row has the public kind of the same name and number, so a
// row cannot be added without its DS4TP_CMD_* (nor a number change alone).
#define DS4TP_TIE_COMMAND(type, number, name, ...)                                    \
  static_assert(DS4TP_CMD_##name == number && uint16_t(FrameType::type) == number, \
                "DS4TP_CMD_" #name " must be frame type " #number);
DS4TP_COMMAND_FRAMES(DS4TP_TIE_COMMAND)
#undef DS4TP_TIE_COMMAND

// Limits and payload enumerations the public header repeats.
static_assert(DS4TP_BATCH_MAX_ROWS == kVerifyRowsMax);
static_assert(DS4TP_BATCH_GATES_PER_LAYER == kBlockGatesMax);
static_assert(DS4TP_SMALL_EXCHANGE_MAX == kSmallExchangeMax);
static_assert(DS4TP_HEAD_ROW_MAX == kHeadRowMax);
static_assert(DS4TP_DRAFTER_META_BYTES == kDrafterMetaBytes);
static_assert(DS4TP_IMAGE_FINGERPRINT_BYTES == kFingerprintBytes);
static_assert(DS4TP_MTP_LIMIT_MAX == kMtpLimitMax);
static_assert(DS4TP_VERIFY_HEAD_SPLIT == kVerifyHeadSplit &&
              DS4TP_VERIFY_DRAFT_SHARED == kVerifyDraftShared &&
              DS4TP_VERIFY_DRAFT_SEED == kVerifyDraftSeed);
static_assert(int(DS4TP_COMMIT_ROLLBACK) == kCommitRollback && int(DS4TP_COMMIT_FULL) == kCommitFull &&
              int(DS4TP_COMMIT_PREFIX) == kCommitPrefix);
static_assert(uint32_t(DS4TP_DRAFT_MAINTAIN) == kDraftMaintain &&
              uint32_t(DS4TP_DRAFT_PROPOSE) == kDraftPropose);

// The RDMA set-up code names its frame types by number.
static_assert(kFrameRdmaInfo == uint16_t(FrameType::RdmaInfo) &&
              kFrameRdmaReady == uint16_t(FrameType::RdmaReady) &&
              kFrameRdmaWarm == uint16_t(FrameType::RdmaWarm) &&
              kFrameRdmaPosted == uint16_t(FrameType::RdmaPosted));

}  // namespace
}  // namespace ds4tp::wire
