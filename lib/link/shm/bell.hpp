// The one sleep protocol of shared-memory links, a pair's control page
// (transport_impl.hpp) and a group's area (group/shm.cpp) alike: their
// waits poll through os::Waiter (spin, yield) and block in sleep().
//
// A bell is 8 bytes in shared memory beside the words it rings for: u32
// sleepers (ranks blocked in the kernel on it) and u32 rings (a counter
// they block on). A writer stores its words (the last one seq_cst), looks
// at sleepers and, only when someone sleeps, bumps rings and wakes them
// all: the common case costs no system call. A waiter reads rings,
// counts itself in, fences and looks at its condition once more before
// it blocks on rings: either the writer's look sees it counted in, or
// its own look sees the writer's store, so no wake is lost. Words stored
// before that seq_cst one come with it (release order: the pair's gate
// header before done, a group's count before its stamp).
//
// Any number of waiters may sleep on one bell, each for its own condition
// over the bell's words (a group's readers of one rank line; a pair's one
// owner of its control page). In the portable-POSIX build, whose wake is
// a pipe per mapping (os/portable.hpp), a second sleeper may take the
// first one's wake and leave it to its sleep's end: sleeps there stay
// short slices (a pair's 2 ms, a group's 1 ms).
#pragma once

#include <atomic>
#include <cstdint>

#include "common/shared_word.hpp"
#include "os/os.hpp"

namespace ds4tp::shm {

constexpr uint64_t kBellBytes = 8;

class Bell {
 public:
  explicit Bell(uint8_t *p) : p_(p) {}

  // After the writer's own seq_cst store (which orders this look after
  // it, as a fence would, at less cost): wakes the sleepers, if any.
  void ring() const {
    if (sleepers().load(std::memory_order_seq_cst) != 0) wake();
  }
  // Wakes every sleeper, who then looks again; one that read rings after
  // this wake sleeps out its slice (a group's abort word: no waiter's
  // condition reads it, its watch does between sleeps). The bump's
  // release order carries the writer's earlier stores: no fence needed.
  void ring_always() const { wake(); }
  // Blocks at most `ns` unless ready() (polled once more, after counting
  // in) says the wait is over: 0 means not yet.
  template <class Ready>
  void sleep(Ready &&ready, uint64_t ns) const {
    const uint32_t seen = rings().load(std::memory_order_acquire);
    sleepers().fetch_add(1u, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (ready() == 0) os::wait_on_word(rings_word(), seen, ns);
    sleepers().fetch_add(uint32_t(-1), std::memory_order_seq_cst);
  }

 private:
  uint32_t *rings_word() const { return reinterpret_cast<uint32_t *>(p_ + 4); }
  SharedWord<uint32_t> sleepers() const { return SharedWord<uint32_t>(p_); }
  SharedWord<uint32_t> rings() const { return SharedWord<uint32_t>(p_ + 4); }
  // Release: a waiter that reads the new count sees the writer's words.
  void wake() const {
    rings().fetch_add(1u, std::memory_order_release);
    os::wake_word(rings_word());
  }
  uint8_t *p_;
};

}  // namespace ds4tp::shm
