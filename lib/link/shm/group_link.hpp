// The N-member shm link over an area (area.hpp): slots.cpp.
#pragma once

#include <memory>
#include <vector>

#include "link/link.hpp"
#include "os/wait.hpp"
#include "link/shm/area.hpp"

namespace ds4tp::shm {

// Member `member` of `area`'s members. `watch`: look at the members'
// processes (processes; threads of one process need not). A wait without
// progress ends after `timeout_ns`. `ctl[m]` (fd or -1): a socket that
// hangs up when member m exits, watched by every wait (borrowed: it
// outlives the link). `names[m]`: member m's rank in messages and
// culprit(); empty: m itself. The link also answers homes().
std::unique_ptr<link::Link> make_slots(std::shared_ptr<Area> area, int member, bool watch,
                                       uint64_t timeout_ns, const os::WaitPolicy &policy,
                                       bool adaptive, std::vector<int> ctl = {},
                                       std::vector<int> names = {});

}  // namespace ds4tp::shm
