// Heap allocation counter for hot-path tests. Linked into one test
// binary only: it replaces malloc and friends there (forwarding to
// glibc), or under ASan/TSan, whose allocator cannot be replaced,
// installs the sanitizer's allocation hook instead. Either way every
// malloc, calloc, realloc, aligned allocation and operator new is
// counted, including those made inside libuv, fmt and libstdc++.
#pragma once

#include <cstdint>

namespace ds4tp::test::alloc {

// Allocations made so far by the calling thread.
uint64_t this_thread();
// Allocations made so far by every thread of this process.
uint64_t all_threads();

}  // namespace ds4tp::test::alloc
