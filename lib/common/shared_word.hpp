// An atomic view of a word the library does not own (the slab, a shared
// segment the peer process also maps): load, store and fetch_add with the
// given memory order.
//
// Why not std::atomic_ref: the libc++ of older Xcodes and of the macOS
// cross-compiler lacks it. The __atomic builtins are what it compiles to
// on both GCC and Clang, so behaviour is the same. The word must be
// naturally aligned (the slab layout and the shm control page guarantee it).
#pragma once

#include <atomic>
#include <cstdint>
#include <type_traits>

namespace ds4tp {

template <class T>
class SharedWord {
  static_assert(std::is_integral_v<T> && (sizeof(T) == 4 || sizeof(T) == 8));

 public:
  explicit SharedWord(uint8_t *p) : p_(reinterpret_cast<T *>(p)) {}

  T load(std::memory_order mo) const { return __atomic_load_n(p_, order(mo)); }
  void store(T v, std::memory_order mo) const { __atomic_store_n(p_, v, order(mo)); }
  T fetch_add(T v, std::memory_order mo) const { return __atomic_fetch_add(p_, v, order(mo)); }

 private:
  static constexpr int order(std::memory_order mo) {
    switch (mo) {
      case std::memory_order_relaxed: return __ATOMIC_RELAXED;
      case std::memory_order_consume: return __ATOMIC_CONSUME;
      case std::memory_order_acquire: return __ATOMIC_ACQUIRE;
      case std::memory_order_release: return __ATOMIC_RELEASE;
      case std::memory_order_acq_rel: return __ATOMIC_ACQ_REL;
      default: return __ATOMIC_SEQ_CST;
    }
  }
  T *p_;
};

}  // namespace ds4tp
