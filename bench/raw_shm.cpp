#include "raw_shm.hpp"

#include <atomic>
#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

namespace bench {

namespace {

constexpr uint64_t kMagic = 0x4853574152345344ull;  // "DS4RAWSH"

struct alignas(64) Word {
  std::atomic<uint64_t> v;
  char pad[64 - sizeof(std::atomic<uint64_t>)];
};

}  // namespace

// One direction. Chunk i of the stream lives in slot i % kSlots; seq[slot]
// holds i + 1 once it is readable; consumed is the count of chunks the
// reader has copied out (the writer may reuse a slot only after that).
struct RawShm::Ring {
  Word consumed;
  Word seq[kSlots];
  alignas(4096) uint8_t data[kSlots][kChunk];
};

namespace {

struct Region {
  alignas(4096) uint64_t magic;
};

constexpr size_t kRingOffset = sizeof(Region);

}  // namespace

size_t RawShm::region_bytes() { return kRingOffset + 2 * sizeof(Ring); }

RawShm::Ring *RawShm::ring(int i) const {
  return reinterpret_cast<Ring *>(base_ + kRingOffset + size_t(i) * sizeof(Ring));
}

RawShm::~RawShm() { reset(); }

void RawShm::reset() {
  if (base_) munmap(base_, bytes_);
  base_ = nullptr;
  unlink();
}

void RawShm::unlink() {
  if (owner_ && !name_.empty()) shm_unlink(name_.c_str());
  owner_ = false;
}

Status RawShm::map(int fd, bool fresh) {
  void *m = mmap(nullptr, region_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED)
    return Status::fail(std::string("raw shm mmap: ") + std::strerror(errno));
  base_ = static_cast<uint8_t *>(m);
  bytes_ = region_bytes();
  auto *r = reinterpret_cast<Region *>(base_);
  if (fresh) {
    // ftruncate zero-filled the object: every counter starts at 0.
    r->magic = kMagic;
  } else if (r->magic != kMagic) {
    return Status::fail("raw shm: " + name_ + " is not a bench region");
  }
  return {};
}

Status RawShm::create(const std::string &name) {
  name_ = name;
  rank_ = 0;
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return Status::fail("raw shm: shm_open " + name + ": " + std::strerror(errno));
  owner_ = true;
  if (ftruncate(fd, off_t(region_bytes())) != 0) {
    ::close(fd);
    return Status::fail(std::string("raw shm: ftruncate: ") + std::strerror(errno));
  }
  return map(fd, true);
}

Status RawShm::open(const std::string &name) {
  name_ = name;
  rank_ = 1;
  int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0)
    return Status::fail("raw shm: shm_open " + name + ": " + std::strerror(errno) +
                        " (the ranks must share a host)");
  return map(fd, false);
}

Status RawShm::exchange(const void *outp, void *inp, size_t n, int idle_ms) {
  const auto *out = static_cast<const uint8_t *>(outp);
  auto *in = static_cast<uint8_t *>(inp);
  Ring *mine = ring(rank_);
  Ring *peer = ring(1 - rank_);
  const uint64_t chunks = (n + kChunk - 1) / kChunk;
  uint64_t w = 0, r = 0;
  uint32_t spins = 0;
  uint64_t last = 0;
  while (w < chunks || r < chunks) {
    bool progress = false;
    if (w < chunks && written_ - mine->consumed.v.load(std::memory_order_acquire) < kSlots) {
      size_t slot = written_ % kSlots;
      size_t off = w * kChunk;
      size_t len = n - off < kChunk ? n - off : kChunk;
      std::memcpy(mine->data[slot], out + off, len);
      mine->seq[slot].v.store(written_ + 1, std::memory_order_release);
      written_++;
      w++;
      progress = true;
    }
    if (r < chunks) {
      size_t slot = read_ % kSlots;
      if (peer->seq[slot].v.load(std::memory_order_acquire) == read_ + 1) {
        size_t off = r * kChunk;
        size_t len = n - off < kChunk ? n - off : kChunk;
        std::memcpy(in + off, peer->data[slot], len);
        peer->consumed.v.store(read_ + 1, std::memory_order_release);
        read_++;
        r++;
        progress = true;
      }
    }
    if (progress) {
      last = 0;
      continue;
    }
    cpu_relax();
    if (++spins % 4096 == 0) {
      uint64_t t = now_ns();
      if (last == 0) last = t;
      if (t - last > uint64_t(idle_ms) * 1000000ull)
        return Status::fail("raw shm: no progress from the peer for " +
                            std::to_string(idle_ms) + " ms");
    }
  }
  return {};
}

}  // namespace bench
