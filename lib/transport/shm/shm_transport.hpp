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
// Threading: as Transport. The segment handshake runs inside
// ds4tp_connect on the connecting thread.
#pragma once

#include <memory>
#include <string>

#include "net/socket.hpp"
#include "slab/layout.hpp"
#include "transport/transport.hpp"

namespace ds4tp {

struct ShmSetup {
  int rank = 0;              // 0 leader, 1 worker
  uint64_t cookie = 0;       // the pair cookie: part of both segment names
  slab::Layout layout;       // identical on both ranks (same identity)
  uint64_t deadline_ns = 0;  // whole handshake (CLOCK_MONOTONIC)
  bool forced = false;       // a rank asked for shm explicitly: no fallback
};

// Bytes of one rank's segment: the slab plus the control page.
uint64_t shm_segment_bytes(const slab::Layout &layout);

// True when this process can create shared-memory segments with room for
// both ranks' segments of `layout` (no layout: just creation); `why` says
// what was found or what is missing.
bool shm_available(const slab::Layout *layout, std::string &why);

// Runs the segment handshake on the data connection `fd` (both ranks at
// once). Outcomes, identical on both ranks:
//  - both ranks mapped both segments: OK, `out` is the transport (it took fd);
//  - a rank could not and !setup.forced: OK with `out` empty and
//    `fallback_why` set; fd is untouched (the caller runs TCP on it);
//  - a rank could not and setup.forced: EUNSUPPORTED naming the reason.
// Also EPEERCLOSED, ETIMEDOUT (setup.deadline_ns), EPROTO (bad message).
// No segment name outlives this call.
int make_shm_transport(net::Fd &fd, const ShmSetup &setup, const DataConfig &cfg,
                       std::unique_ptr<Transport> &out, std::string &fallback_why,
                       Error &err);

}  // namespace ds4tp
