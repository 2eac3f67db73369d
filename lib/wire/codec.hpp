// Little-endian, bounds-checked field encoding. Every wire structure is
// written and read field by field through these, never by struct memcpy,
// so host byte order and padding never reach the wire.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>

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

// What Writer and Reader share: a position in a span of `cap` bytes that
// turns `ok()` false (and keeps it false) as soon as a field would not fit.
class Cursor {
 public:
  bool ok() const { return ok_; }

 protected:
  explicit Cursor(size_t cap) : cap_(cap) {}
  bool room(size_t len) {
    if (!ok_ || cap_ - n_ < len) {
      ok_ = false;
      return false;
    }
    return true;
  }
  size_t cap_;
  size_t n_ = 0;
  bool ok_ = true;
};

// Appends fields to a caller-owned buffer.
class Writer : public Cursor {
 public:
  Writer(uint8_t *buf, size_t cap) : Cursor(cap), p_(buf) {}

  void u8(uint8_t v) { le(v, 1); }
  void u16(uint16_t v) { le(v, 2); }
  void u32(uint32_t v) { le(v, 4); }
  void i32(int32_t v) { u32(uint32_t(v)); }
  void u64(uint64_t v) { le(v, 8); }
  void f32(float v) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    u32(bits);
  }
  void bytes(const void *src, size_t len) {
    if (len == 0) return;
    if (room(len)) std::memcpy(p_ + n_, src, len), n_ += len;
  }
  // Any field by its type: an integer of its own width, a float, or a
  // byte array.
  template <class T>
  void put(const T &v) {
    if constexpr (std::is_same_v<T, float>) f32(v);
    else if constexpr (std::is_integral_v<T>) le(uint64_t(std::make_unsigned_t<T>(v)), sizeof(T));
    else bytes(v.data(), v.size());
  }

  size_t size() const { return n_; }

 private:
  void le(uint64_t v, size_t len) {
    if (!room(len)) return;
    for (size_t i = 0; i < len; i++) p_[n_ + i] = uint8_t(v >> (8 * i));
    n_ += len;
  }
  uint8_t *p_;
};

// Reads fields from a byte span; a read past the end yields zeros and
// turns `ok()` false, so a decoder checks once at the end (and before
// trusting any length it read).
class Reader : public Cursor {
 public:
  Reader(const uint8_t *buf, size_t len) : Cursor(len), p_(buf) {}

  uint8_t u8() { return uint8_t(le(1)); }
  uint16_t u16() { return uint16_t(le(2)); }
  uint32_t u32() { return uint32_t(le(4)); }
  int32_t i32() { return int32_t(u32()); }
  uint64_t u64() { return le(8); }
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
  // Any field by its type, the mirror of Writer::put (a short byte array
  // reads as zeros).
  template <class T>
  void get(T &v) {
    if constexpr (std::is_same_v<T, float>) v = f32();
    else if constexpr (std::is_integral_v<T>) v = T(std::make_unsigned_t<T>(le(sizeof(T))));
    else if (const uint8_t *q = bytes(v.size())) std::memcpy(v.data(), q, v.size());
  }
  // A reserved field of `len` bytes: the first one that is not 0 is kept
  // (value and byte offset) for the decoder to name.
  void reserved(size_t len) {
    size_t at = n_;
    uint64_t v = le(len);
    if (v != 0 && pad_value_ == 0) pad_value_ = v, pad_at_ = at;
  }
  uint64_t pad_value() const { return pad_value_; }
  size_t pad_at() const { return pad_at_; }

  size_t consumed() const { return n_; }
  size_t remaining() const { return ok_ ? cap_ - n_ : 0; }

 private:
  uint64_t le(size_t len) {
    if (!room(len)) return 0;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) v |= uint64_t(p_[n_ + i]) << (8 * i);
    n_ += len;
    return v;
  }
  const uint8_t *p_;
  uint64_t pad_value_ = 0;
  size_t pad_at_ = 0;
};

// A payload's layout, written once and used by both directions: its fields
// in wire order as member pointers, Pad<T> for a reserved T (0 on the
// wire). `write` encodes a struct by it, `read` decodes one.
template <class T>
struct Pad {};
template <class... F>
struct Layout {
  std::tuple<F...> fields;
};
template <class... F>
constexpr Layout<F...> layout(F... f) {
  return {{f...}};
}

template <class M, class T>
void field(Writer &w, const M &m, T M::*f) { w.put(m.*f); }
template <class M, class T>
void field(Writer &w, const M &, Pad<T>) { w.put(T(0)); }
template <class M, class T>
void field(Reader &r, M &m, T M::*f) { r.get(m.*f); }
template <class M, class T>
void field(Reader &r, M &, Pad<T>) { r.reserved(sizeof(T)); }

template <class IO, class M, class... F>
void visit(IO &io, M &m, const Layout<F...> &l) {
  std::apply([&](auto... f) { (field(io, m, f), ...); }, l.fields);
}
template <class M, class... F>
void write(Writer &w, const M &m, const Layout<F...> &l) { visit(w, m, l); }
template <class M, class... F>
void read(Reader &r, M &m, const Layout<F...> &l) { visit(r, m, l); }

// Bytes a layout takes on the wire.
template <class T>
constexpr size_t field_bytes(Pad<T>) { return sizeof(T); }
template <class M, class T>
constexpr size_t field_bytes(T M::*) {
  if constexpr (std::is_arithmetic_v<T>) return sizeof(T);
  else return std::tuple_size_v<T>;
}
template <class... F>
constexpr size_t layout_bytes(const Layout<F...> &l) {
  return std::apply([](auto... f) { return (size_t(0) + ... + field_bytes(f)); }, l.fields);
}

}  // namespace ds4tp::wire
