#include "support/alloc_count.hpp"

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdlib>

#include <malloc.h>

namespace {

// Constant-initialized, so counting works from the first allocation of
// the process on, before any constructor has run; the thread-local lives
// in the executable's static TLS block, so reading it never allocates.
std::atomic<uint64_t> g_all{0};
thread_local uint64_t t_mine = 0;

inline void count() {
  t_mine++;
  g_all.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

namespace ds4tp::test::alloc {
uint64_t this_thread() { return t_mine; }
uint64_t all_threads() { return g_all.load(std::memory_order_relaxed); }
}  // namespace ds4tp::test::alloc

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define DS4TP_ALLOC_HOOKED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define DS4TP_ALLOC_HOOKED 1
#endif

#ifdef DS4TP_ALLOC_HOOKED

// The sanitizer runtimes call these for every allocation they serve.
extern "C" int __sanitizer_install_malloc_and_free_hooks(
    void (*malloc_hook)(const volatile void *, size_t), void (*free_hook)(const volatile void *));

namespace {
void on_malloc(const volatile void *, size_t) { count(); }
void on_free(const volatile void *) {}
[[maybe_unused]] const int g_hooked = __sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
}  // namespace

#else

// glibc supports replacing malloc; these forward to its own allocator.
extern "C" {
void *__libc_malloc(size_t);
void *__libc_calloc(size_t, size_t);
void *__libc_realloc(void *, size_t);
void __libc_free(void *);
void *__libc_memalign(size_t, size_t);
void *__libc_valloc(size_t);
void *__libc_pvalloc(size_t);

void *malloc(size_t n) noexcept {
  count();
  return __libc_malloc(n);
}
void *calloc(size_t a, size_t b) noexcept {
  count();
  return __libc_calloc(a, b);
}
void *realloc(void *p, size_t n) noexcept {
  count();
  return __libc_realloc(p, n);
}
void free(void *p) noexcept { __libc_free(p); }
void *memalign(size_t align, size_t n) noexcept {
  count();
  return __libc_memalign(align, n);
}
void *aligned_alloc(size_t align, size_t n) noexcept {
  count();
  return __libc_memalign(align, n);
}
int posix_memalign(void **out, size_t align, size_t n) noexcept {
  if (align < sizeof(void *) || (align & (align - 1)) != 0) return EINVAL;
  count();
  void *p = __libc_memalign(align, n);
  if (p == nullptr && n != 0) return ENOMEM;
  *out = p;
  return 0;
}
void *valloc(size_t n) noexcept {
  count();
  return __libc_valloc(n);
}
void *pvalloc(size_t n) noexcept {
  count();
  return __libc_pvalloc(n);
}
}

#endif
