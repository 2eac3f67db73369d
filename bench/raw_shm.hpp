// Raw shared-memory baseline: a plain flag-and-copy exchange, the floor
// the library's shm transport is judged against. Two copies per
// direction: the sender copies its payload into a shared region and
// release-stores a sequence number; the receiver spins on that number
// with acquire loads and copies the payload out.
//
// Each direction is a ring of kSlots chunks of kChunk bytes with one
// sequence word per chunk and a "consumed" word for credit, so payloads
// of any size stream through (a big payload is pipelined chunk by chunk,
// both directions at once). Flags sit on their own cache lines.
//
// The region is a POSIX shared-memory object: the leader creates it and
// sends its name over the coordination channel; the worker opens it. Two
// processes on one host, started any way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "util.hpp"

namespace bench {

class RawShm {
 public:
  static constexpr size_t kSlots = 16;
  static constexpr size_t kChunk = 256 << 10;

  RawShm() = default;
  ~RawShm();
  RawShm(const RawShm &) = delete;
  RawShm &operator=(const RawShm &) = delete;

  // Leader: creates the object `name` ("/ds4tp-bench-..."). Rank 0 writes ring 0.
  Status create(const std::string &name);
  // Worker: opens the leader's object. Rank 1 writes ring 1.
  Status open(const std::string &name);
  // Removes the name (the mapping stays); the leader calls it once the
  // worker has opened the object.
  void unlink();
  // Unmaps (and, for the leader, unlinks); valid() is false afterwards.
  void reset();
  bool valid() const { return base_ != nullptr; }

  // Sends `n` bytes and receives the peer's `n` bytes by busy-polling.
  // Fails after `idle_ms` without progress.
  Status exchange(const void *out, void *in, size_t n, int idle_ms);

 private:
  struct Ring;
  static size_t region_bytes();
  Status map(int fd, bool fresh);
  Ring *ring(int i) const;

  uint8_t *base_ = nullptr;
  size_t bytes_ = 0;
  int rank_ = 0;
  std::string name_;
  bool owner_ = false;
  uint64_t written_ = 0;  // chunks this rank has published, ever
  uint64_t read_ = 0;     // chunks this rank has taken from the peer, ever
};

}  // namespace bench
