// The area the members of an N-member shm link share: a host's ranks (a
// POSIX shm segment) or one process's threads (heap memory). A header, a
// line per member, two slots per member (steps alternate between them)
// and a home per member (a group's buffer). The layout is in
// docs/PROTOCOL.md; the link that runs steps over it is slots.cpp.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>

#include "common/error.hpp"
#include "link/shm/bell.hpp"
#include "link/shm/segment.hpp"

namespace ds4tp::shm {

// "DT4L": slots, then homes, each step's byte count, its call and a bell in
// the rank lines with each step's arrival mark, the process start times in
// the info lines (a rank of an older layout, "DT4G" to "DT4K", is refused
// at open).
constexpr uint32_t kAreaMagic = 0x4c345444u;

struct alignas(64) Header {
  uint32_t magic;
  uint32_t ranks;
  uint64_t chunk;
  // 0, or the verdict every rank names: (-code) << 32 | (culprit + 1).
  std::atomic<uint64_t> abort_word;
  // The group's crossovers as the rank that made the area chose them,
  // which every rank then uses: one rank's other environment cannot
  // desync the steps (plan data the area carries; the link reads neither).
  uint64_t home_bytes;
  uint64_t two_shot_bytes;
};

struct alignas(64) RankLine {
  std::atomic<uint64_t> stamp[2];
  std::atomic<uint64_t> done;
  std::atomic<uint32_t> pid;
  // The call of the step stamped in stamp[b] (a group's collective, dtype,
  // op and root, link::Step::call's low 16 bits): ranks in different calls
  // with the same byte count are told, not summed.
  std::atomic<uint16_t> call[2];
  // The arrival mark (link::Step::mark) of the step stamped in stamp[b],
  // read with the stamp.
  std::atomic<uint32_t> mark[2];
  // The Bell (bell.hpp) this rank rings after it
  // stores into this line; ranks waiting on the line sleep on it.
  alignas(8) uint8_t bell[kBellBytes];
  // A tiered leader's moves across hosts so far (progress_word): a wait
  // on this rank that sees it change restarts its deadline.
  std::atomic<uint64_t> progress;
  // The bytes of the step stamped in stamp[b], as this rank called it
  // (at most chunk_bytes, 256 MiB): ranks that called different counts
  // are told, not handed stale slots.
  std::atomic<uint32_t> bytes[2];
};
static_assert(sizeof(RankLine) == 64, "a rank line stays one cache line");

// What a rank's waiters read only now and then (its liveness), kept off
// the rank line the steps share.
struct alignas(64) InfoLine {
  std::atomic<uint64_t> start_time;  // the process's (with pid: not a reused pid)
};

inline size_t slot_stride(size_t chunk) { return (chunk + 63) & ~size_t(63); }
inline size_t lines_bytes(int n) { return (sizeof(RankLine) + sizeof(InfoLine)) * size_t(n); }
inline size_t area_bytes(int n, size_t chunk) {
  return sizeof(Header) + lines_bytes(n) + 3 * size_t(n) * slot_stride(chunk);
}

// The slots, lines and homes: a shared-memory segment between processes,
// or heap memory between the threads of one process.
struct Area {
  Segment segment;
  uint8_t *heap = nullptr;
  uint8_t *base = nullptr;
  size_t bytes = 0;
  int n = 0;
  size_t chunk = 0;
  Area(int ranks, size_t chunk_bytes)
      : bytes(area_bytes(ranks, chunk_bytes)), n(ranks), chunk(chunk_bytes) {}
  ~Area() { std::free(heap); }
  Header *header() { return reinterpret_cast<Header *>(base); }
  RankLine *line(int r) {
    return reinterpret_cast<RankLine *>(base + sizeof(Header)) + r;
  }
  InfoLine *info(int r) {
    return reinterpret_cast<InfoLine *>(base + sizeof(Header) + sizeof(RankLine) * size_t(n)) + r;
  }
  uint8_t *slot(int r, int b) {
    return base + sizeof(Header) + lines_bytes(n) +
           (size_t(r) * 2 + size_t(b)) * slot_stride(chunk);
  }
  uint8_t *home(int r) { return slot(n, 0) + size_t(r) * slot_stride(chunk); }
  // The magic goes last: a rank that opens the area while its maker
  // lays it out (a tiered host's ranks try until it is there) sees no
  // magic until the rest is written. The maker (index 0) writes its own
  // pid before that, so a rank that opens the area can see the maker die
  // even if it dies before its link is made. `home_bytes` and
  // `two_shot_bytes`: the maker's crossovers, kept for every member.
  void init(uint64_t home_bytes, uint64_t two_shot_bytes, uint32_t maker_pid = 0);
};

// An area in heap memory, for the threads of one process.
std::shared_ptr<Area> area_heap(int n, size_t chunk, uint64_t home_bytes,
                                uint64_t two_shot_bytes, Error &err);
// A fresh segment; `name` empty: a fresh name (then set).
int area_create(int n, size_t chunk, uint64_t home_bytes, uint64_t two_shot_bytes,
                std::string &name, std::shared_ptr<Area> &out, Error &err);
// The name of host `host`'s segment in a tiered group, made by its leader
// (`leader_pid`): every rank of the host derives it from `seed` (the
// roster's token).
std::string host_area_name(uint32_t leader_pid, uint64_t seed, int host);
// `not_yet` (optional) tells a failure a caller may retry: the segment is
// missing, not sized or not laid out yet (its maker is still at it).
int area_open(const std::string &name, int n, size_t chunk, std::shared_ptr<Area> &out,
              Error &err, bool *not_yet = nullptr);
void area_unlink(Area &area);
// Writes member `member`'s process (0: unknown, nothing written) into its
// line, which every wait on that member watches: the member itself when
// its link is made, and the maker from its join, so a member stopped
// before its link is made is watched too.
void area_expect(Area &area, int member, uint32_t pid);

}  // namespace ds4tp::shm
