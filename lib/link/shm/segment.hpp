// POSIX shared-memory segments for the shm transport. Handshake-time code
// (allocates, makes syscalls); the OS specifics (the shm directory, name
// length, reserving pages) come from os/os.hpp.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "common/error.hpp"

namespace ds4tp::shm {

// After `n` bytes were copied into shared memory and before the store that
// publishes them: memcpy may use non-temporal stores for a large copy
// (glibc's threshold depends on the cache size and its tunables), and
// those are ordered by a store fence only. Small copies need none.
inline void fence_copied(uint64_t n) {
#if defined(__x86_64__) || defined(__i386__)
  // glibc's lowest non-temporal threshold (the tunable's minimum, 0x4040):
  // a smaller copy is never non-temporal.
  constexpr uint64_t kFenceCopyBytes = 0x4040;
  if (n >= kFenceCopyBytes) __builtin_ia32_sfence();
#else
  (void)n;  // elsewhere the release or seq_cst store that publishes orders them
#endif
}

// memcpy into shared memory that a later store publishes.
inline void copy(uint8_t *dst, const uint8_t *src, uint64_t n) {
  std::memcpy(dst, src, n);
  fence_copied(n);
}

// One segment mapped read-write and shared. Owns the mapping and, until
// unlink() (or destruction), the name: every exit path removes the name,
// so only a process killed while a name exists can leave one behind.
class Segment {
 public:
  Segment() = default;
  Segment(const Segment &) = delete;
  Segment &operator=(const Segment &) = delete;
  Segment(Segment &&o) noexcept;
  Segment &operator=(Segment &&o) noexcept;
  ~Segment();

  // Creates `name` (O_EXCL, mode 0600) and sizes it to `bytes`; not mapped
  // yet, so the peer can be told the name at once. EIO/ENOMEM with errno.
  int create(const std::string &name, uint64_t bytes, Error &err);
  // After create(): reserves every page (so a full shm directory fails here,
  // not with SIGBUS inside a gate) and maps the segment.
  int map_created(Error &err);
  // Opens someone else's segment, removes its name at once, checks that
  // it is `bytes` long and owned by this user, and maps it.
  int open_existing(const std::string &name, uint64_t bytes, Error &err);
  // The same, keeping the name for others to open (a group's ranks): its
  // creator removes it once every rank has it mapped.
  int open_shared(const std::string &name, uint64_t bytes, Error &err);
  // After a failed open: the name did not exist yet, or its maker had not
  // sized it yet (a caller racing the maker may try again).
  bool absent() const { return absent_; }
  // Removes the name (idempotent; a name already gone is fine).
  void unlink();

  uint8_t *base() const { return base_; }
  uint64_t bytes() const { return bytes_; }
  const std::string &name() const { return name_; }

 private:
  void release();
  int open_named(const std::string &name, uint64_t bytes, bool remove_name, Error &err);

  std::string name_;
  bool linked_ = false;  // we still have to remove name_
  int fd_ = -1;
  uint8_t *base_ = nullptr;
  uint64_t bytes_ = 0;
  bool absent_ = false;  // the last open's failure, not moved
};

// `prefix`, `pid`, '-', then as many hex digits of `random` as fit in
// `max` characters (os::shm_name_max(): 31 on Darwin), 4 at least and 16
// at most. Names stay unique per process (O_EXCL catches the rest) and
// keep the pid readable for leak checks.
std::string unique_name(const std::string &prefix, uint64_t pid, uint64_t random, size_t max);

// Unlinks the segments named `prefix`<pid>-... (unique_name) whose pid no
// longer runs: what a creator killed between making a segment and
// unlinking it left behind. Only where segments live in a directory
// (os::shm_dir(): Linux); a pid that runs again under another program is
// left alone. Returns how many it removed.
int sweep_orphans(const std::string &prefix);

// True when this process can create shared-memory segments and the shm
// directory (where the OS has one) has room for `need_bytes`; otherwise `why` says what is missing.
bool usable(uint64_t need_bytes, std::string &why);

}  // namespace ds4tp::shm
