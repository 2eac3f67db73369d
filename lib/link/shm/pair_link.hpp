// Shared-memory data plane for two ranks on one host.
//
// Each rank owns one segment: its slab (the library-allocated slab that
// ds4tp_attach_slab(pair, NULL, 0) hands out) followed by one control
// page, and maps the peer's segment too. A gate copies this rank's out
// vector straight into the peer's in vector (one copy, no kernel), then
// publishes on the peer's control page with a release store; the peer
// waits with acquire loads, spinning for spin_ns and then sleeping on a
// shared word the writer wakes only when the peer sleeps. A dead peer is
// noticed by its data connection closing (checked each millisecond of
// waiting) or its process being gone. docs/PROTOCOL.md, "shm transport".
//
// Threading: as Transport. The segment handshake (setup.cpp) runs inside
// ds4tp_connect on the connecting thread.
#pragma once

#include <memory>
#include <string>

#include <sys/types.h>

#include "net/socket.hpp"
#include "slab/layout.hpp"
#include "link/shm/segment.hpp"
#include "link/link.hpp"
#include "link/data_config.hpp"

namespace ds4tp {

// Bytes of one rank's segment: the slab plus the control page.
uint64_t shm_segment_bytes(const slab::Layout &layout);

// True when this process can create shared-memory segments with room for
// both ranks' segments of `layout` (no layout: just creation); `why` says
// what was found or what is missing.
bool shm_available(const slab::Layout *layout, std::string &why);

namespace shm {

// The control page after the slab (set-up.cpp's handshake): written into
// this rank's fresh segment, checked in the peer's (EPROTO naming both).
void init_control_page(const Segment &mine, const slab::Layout &layout);
int check_control_page(const Segment &peer, const slab::Layout &layout, Error &err);

// The transport over both mapped segments; takes the data connection `fd`
// (watched for the peer's death). `peer_start` 0: the pid is not checked.
std::unique_ptr<link::Link> make_transport(net::Fd fd, Segment mine, Segment peer, pid_t peer_pid,
                                          uint64_t peer_start, const slab::Layout &layout,
                                          const DataConfig &cfg);

}  // namespace shm
}  // namespace ds4tp
