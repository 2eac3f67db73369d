// Little-endian, bounds-checked field encoding. Every wire structure is
// written and read field by field through these, never by struct memcpy,
// so host byte order and padding never reach the wire.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ds4tp::wire {

inline void put_u16(uint8_t *p, uint16_t v) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
}
inline void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = uint8_t(v >> (8 * i));
}
inline void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = uint8_t(v >> (8 * i));
}
inline uint16_t get_u16(const uint8_t *p) { return uint16_t(p[0] | (p[1] << 8)); }
inline uint32_t get_u32(const uint8_t *p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) |
         (uint32_t(p[3]) << 24);
}
inline uint64_t get_u64(const uint8_t *p) {
  return uint64_t(get_u32(p)) | (uint64_t(get_u32(p + 4)) << 32);
}

// Appends fields to a caller-owned buffer; `ok()` turns false (and stays
// false) as soon as a field would not fit.
class Writer {
 public:
  Writer(uint8_t *buf, size_t cap) : p_(buf), cap_(cap) {}

  void u8(uint8_t v) {
    if (room(1)) p_[n_++] = v;
  }
  void u16(uint16_t v) {
    if (room(2)) put_u16(p_ + n_, v), n_ += 2;
  }
  void u32(uint32_t v) {
    if (room(4)) put_u32(p_ + n_, v), n_ += 4;
  }
  void i32(int32_t v) { u32(uint32_t(v)); }
  void u64(uint64_t v) {
    if (room(8)) put_u64(p_ + n_, v), n_ += 8;
  }
  void f32(float v) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    u32(bits);
  }
  void bytes(const void *src, size_t len) {
    if (len == 0) return;
    if (room(len)) std::memcpy(p_ + n_, src, len), n_ += len;
  }

  bool ok() const { return ok_; }
  size_t size() const { return n_; }

 private:
  bool room(size_t len) {
    if (!ok_ || cap_ - n_ < len) {
      ok_ = false;
      return false;
    }
    return true;
  }
  uint8_t *p_;
  size_t cap_;
  size_t n_ = 0;
  bool ok_ = true;
};

// Reads fields from a byte span; a read past the end yields zeros and
// turns `ok()` false, so a decoder checks once at the end (and before
// trusting any length it read).
class Reader {
 public:
  Reader(const uint8_t *buf, size_t len) : p_(buf), len_(len) {}

  uint8_t u8() { return room(1) ? p_[n_++] : 0; }
  uint16_t u16() {
    if (!room(2)) return 0;
    uint16_t v = get_u16(p_ + n_);
    n_ += 2;
    return v;
  }
  uint32_t u32() {
    if (!room(4)) return 0;
    uint32_t v = get_u32(p_ + n_);
    n_ += 4;
    return v;
  }
  int32_t i32() { return int32_t(u32()); }
  uint64_t u64() {
    if (!room(8)) return 0;
    uint64_t v = get_u64(p_ + n_);
    n_ += 8;
    return v;
  }
  float f32() {
    uint32_t bits = u32();
    float v;
    std::memcpy(&v, &bits, 4);
    return v;
  }
  // Returns a pointer to `len` bytes inside the buffer, or nullptr.
  const uint8_t *bytes(size_t len) {
    if (!room(len)) return nullptr;
    const uint8_t *q = p_ + n_;
    n_ += len;
    return q;
  }

  bool ok() const { return ok_; }
  size_t consumed() const { return n_; }
  size_t remaining() const { return ok_ ? len_ - n_ : 0; }

 private:
  bool room(size_t len) {
    if (!ok_ || len_ - n_ < len) {
      ok_ = false;
      return false;
    }
    return true;
  }
  const uint8_t *p_;
  size_t len_;
  size_t n_ = 0;
  bool ok_ = true;
};

}  // namespace ds4tp::wire
