#include "wire/frames.hpp"

#include <cstring>

#include "wire/rdma_frames.hpp"

namespace ds4tp::wire {

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

void read_floats(const uint8_t *src, float *dst, size_t count) {
  for (size_t i = 0; i < count; i++) {
    uint32_t bits = get_u32(src + 4 * i);
    std::memcpy(&dst[i], &bits, 4);
  }
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
    case FrameType::Heartbeat: { HeartbeatMsg m; return decode(p, n, m, err); }
    case FrameType::DrafterSplit: { DrafterSplitMsg m; return decode(p, n, m, err); }
    case FrameType::WorkerError: { WorkerErrorMsg m; return decode(p, n, m, err); }
  }
  return err.set(DS4TP_EPROTO, "unknown control frame type {} ({} payload bytes)", type, n);
}

}  // namespace ds4tp::wire
