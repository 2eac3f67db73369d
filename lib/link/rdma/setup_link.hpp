// The RDMA set-up frames on a stream socket: each frame is the control
// channel's 16-byte header (wire/frames.hpp: magic "D4FR", u16 type, u16
// flags 0, u32 payload bytes, u32 counter rising from 1 per direction on
// this socket) followed by an rdma_frames payload.
//
// The library runs it on the data connection, which the RDMA transport
// owns outright: set-up can then never interleave with the session's
// control frames (another thread may be making control calls, under the
// session's lock, while the engine attaches the slab).
#pragma once

#include <memory>

#include "link/rdma/pair_link.hpp"

namespace ds4tp::rdma {

// Borrows `fd` (non-blocking); the fd must outlive the link.
std::unique_ptr<SetupLink> make_socket_setup_link(int fd);

}  // namespace ds4tp::rdma
