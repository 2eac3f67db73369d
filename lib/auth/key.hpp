// The pre-shared key: where it comes from (options, key file, environment)
// and how it is held (wiped from memory when dropped). No I/O beyond
// reading the key file; no crypto here (proof.hpp does that).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/error.hpp"

namespace ds4tp::auth {

// A shorter key is a password, not a key: refuse it with advice.
constexpr size_t kMinKeyBytes = 16;
constexpr size_t kMaxKeyBytes = 4096;

// Key bytes, wiped on destruction and before reassignment. Empty = no key.
class Key {
 public:
  Key() = default;
  Key(const void *bytes, size_t n);
  Key(const Key &o) : Key(o.bytes_.data(), o.bytes_.size()) {}
  Key &operator=(const Key &o);
  ~Key() { wipe(); }

  bool empty() const { return bytes_.empty(); }
  size_t size() const { return bytes_.size(); }
  const uint8_t *data() const { return bytes_.data(); }

 private:
  void wipe();
  std::vector<uint8_t> bytes_;
};

// Resolves the key in this order: explicit bytes (`psk`, `psk_bytes`), the
// key file `psk_file`, the DS4TP_PSK environment variable (its bytes), the
// DS4TP_PSK_FILE environment variable (a key file path), else no key.
// `source` names where the key came from, for logs (never the key itself).
// Fails with EINVAL for a key shorter than kMinKeyBytes or a key file that
// is not a regular file owned by this user (or root) with no group/other
// permission bits, and EIO when the file cannot be read.
int load_key(const void *psk, size_t psk_bytes, const char *psk_file, Key &out,
             std::string &source, Error &err);

// Reads a key file: its bytes, less one trailing "\n" or "\r\n".
int read_key_file(const std::string &path, Key &out, Error &err);

}  // namespace ds4tp::auth
