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

// One case per row of the frame table, decoding into the row's struct.
int validate_payload(uint16_t type, const uint8_t *p, size_t n, Error &err) {
#define DS4TP_VALIDATE(t, msg)                         \
  case FrameType::t: {                                 \
    msg m;                                             \
    return decode_payload(FrameType::t, p, n, m, err); \
  }
#define DS4TP_VALIDATE_COMMAND(t, number, name, sender, min, unit, max, reply, rows, slot, msg) \
  DS4TP_VALIDATE(t, msg)
#define DS4TP_VALIDATE_OTHER(t, number, name, sender, min, unit, max, msg) DS4TP_VALIDATE(t, msg)
  switch (FrameType(type)) {
    DS4TP_COMMAND_FRAMES(DS4TP_VALIDATE_COMMAND)
    DS4TP_OTHER_FRAMES(DS4TP_VALIDATE_OTHER)
  }
#undef DS4TP_VALIDATE_OTHER
#undef DS4TP_VALIDATE_COMMAND
#undef DS4TP_VALIDATE
  return err.set(DS4TP_EPROTO, "unknown control frame type {} ({} payload bytes)", type, n);
}

}  // namespace ds4tp::wire
