// The failover's wait for the peer's resume message on the standby link
// (failover.hpp; docs/PROTOCOL.md section 6.2).
#pragma once

#include <cstdint>
#include <string>

#include "wire/failover.hpp"

namespace ds4tp::talk {
struct PeerState;
}

namespace ds4tp::multipath {

// Reads the peer's resume from `fd` (made non-blocking) within `limit_ns`,
// ended early by the peer's liveness verdict (`peer_state`, may be null)
// or its closed control connection. Not OK: `why` says what happened
// (EPEERCLOSED, EIO, ETIMEDOUT, or EPROTO for a message that is not one).
int read_resume(int fd, int control_fd, const talk::PeerState *peer_state, uint64_t limit_ns,
                wire::Resume &peer, std::string &why);

}  // namespace ds4tp::multipath
