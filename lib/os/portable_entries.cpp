// Seam entries that the Darwin and portable-POSIX builds take unchanged
// from the portable fallbacks (portable.cpp); darwin.cpp and posix.cpp
// define the rest. Linux has its own (linux.cpp).
#include <string>

#include "os/os.hpp"
#include "os/portable.hpp"

namespace ds4tp::os {

bool wake_open(int fds[2]) { return portable::wake_open(fds); }
void wake_signal(const int fds[2]) { portable::wake_signal(fds); }
void wake_close(int fds[2]) { portable::wake_close(fds); }

// No hard affinity (macOS's THREAD_AFFINITY_POLICY is a hint, ignored on
// Apple silicon; POSIX has no call): any online CPU is allowed, pinning is
// a no-op, and the current CPU is unknown.
bool cpu_allowed(int cpu, int &allowed) { return portable::cpu_allowed(cpu, allowed); }
void pin_thread(int) {}
int current_cpu() { return -1; }  // macOS and POSIX do not say

void name_this_thread(const char *name) { portable::name_this_thread(name); }

// No sysfs, and Apple reports no GID types anywhere: verbs' own GID query
// (or "unknown type") has to do; on a Mac the IPv4-mapped GID is picked by
// its address (verbs_port.cpp).
bool rdma_gid_type(const char *, int, int, std::string &) { return false; }

}  // namespace ds4tp::os
