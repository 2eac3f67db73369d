// The OS seam's calls that are the same POSIX call on every platform
// (linux.cpp, darwin.cpp and posix.cpp each define the rest).
#include <sched.h>
#include <time.h>

#include "os/os.hpp"

namespace ds4tp::os {

void yield_thread() { sched_yield(); }

void sleep_ns(uint64_t ns) {
  timespec ts{time_t(ns / 1000000000ull), long(ns % 1000000000ull)};
  nanosleep(&ts, nullptr);
}

}  // namespace ds4tp::os
