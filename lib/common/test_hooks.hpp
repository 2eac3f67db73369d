// Fault hooks that only tests set (the test cases, before they fork their
// ranks): the data plane reads them where a fault is injected. The library
// itself never sets them, and every one is off by default.
#pragma once

#include <cstdint>
#include <string>

namespace ds4tp {

struct TestHooks {
  // A striped big gate shuts its link 0 down once that link sent this many
  // bytes of its share, or all of a smaller one (the rails a failover kept
  // never do); 0: never.
  uint64_t cut_striped_after = 0;
  // The worker dials the standby link at this address (one where nothing
  // listens) instead of the leader's; empty: the leader's.
  std::string standby_host;
};

// The process's hooks: read when a link is made, so set them before.
TestHooks &test_hooks();

}  // namespace ds4tp
