#include "wire/frames.hpp"

#include <cstring>

#include "wire/frames_checks.hpp"

namespace ds4tp::wire {

using namespace checks;

// Array payloads: a fixed head, then counted tokens, items, images, floats
// or bytes that must exactly fill the rest.

// An image's header in SYNC_IMAGES, for its encoder and decoder.
constexpr auto kImageHead =
    layout(&ImageMeta::token_start, &ImageMeta::token_count, &ImageMeta::data_width,
           &ImageMeta::width, &ImageMeta::height, &ImageMeta::content_width,
           &ImageMeta::content_height, &ImageMeta::fingerprint);
static_assert(layout_bytes(kImageHead) == kImageHeaderBytes);

namespace {

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

// ---- encoders ------------------------------------------------------------

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
    write(w, m, kImageHead);
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

// ---- decoders ------------------------------------------------------------

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
    read(r, im, kImageHead);
    if (!r.ok()) return bad(c, err, "image {} header truncated", i);
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

}  // namespace ds4tp::wire
