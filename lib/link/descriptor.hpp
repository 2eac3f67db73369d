// One descriptor per backend (tcp/, shm/, rdma/), the same entries with
// the same signatures, and one table of them (descriptor.cpp). The pair
// offers, negotiates and builds a transport only through this table, and
// a group builds its mesh (an N-member link/link.hpp) through the same descriptors,
// so adding a backend means one folder and one line in the table.
//
// Ownership: set-up borrows the Connection; make() takes its data socket
// and the State set-up prepared. Blocking: available() does no network
// I/O (it may open devices); set-up runs the backend's handshake on the
// data connection, bounded by Connection::deadline_ns. All three run on
// the connecting thread inside ds4tp_connect (the mesh entries inside
// ds4tp_group_connect).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/log.hpp"
#include "net/socket.hpp"
#include "slab/layout.hpp"
#include "slab/schedule.hpp"
#include "link/link.hpp"
#include "os/wait.hpp"
#include "link/data_config.hpp"

namespace ds4tp::link {

// One rank's end of a group's mesh, as bring-up left it: the tcp links to
// every other member (the full mesh the group dialled and accepted, each
// proven with the group's token), and how its steps wait.
struct MeshConnection {
  std::vector<int> fds;  // fds[r]: the link to member r (-1 at `rank`); borrowed
  int rank = 0;
  size_t chunk = 0;         // the largest body of a step
  uint64_t timeout_ns = 0;  // a step's wait without progress
  os::WaitPolicy policy;    // budget ignored: adaptive is the link's own
  bool adaptive = false;
  std::vector<int> names;  // member r's rank in messages and culprit(); empty: r
  uint64_t setup_deadline_ns = 0;  // absolute, for the set-up handshake
};

// What a backend found or prepared (shm: mapped segments; rdma: the port
// it probed, then the opened device), opaque outside the backend.
struct State {
  virtual ~State() = default;
};

// What an availability check may look at. No network I/O.
struct Query {
  const slab::Layout *layout = nullptr;  // shm: room for both segments (nullptr: creation only)
  std::string rdma_device;               // rdma: empty = any device
  int rdma_port = 1;
  int rdma_gid_index = -1;               // -1 = pick
};

struct Availability {
  bool usable = false;
  std::string why;               // what was found, or what is missing, in words
  std::shared_ptr<State> found;  // for set-up (rdma: the device and port)
};

// One rank's end of a chosen transport, as bring-up left it.
struct Connection {
  net::Fd data;         // the data connection; make() takes it
  int control_fd = -1;  // the pair's; only watched for the peer's death
  int rank = 0;         // 0 leader, 1 worker
  uint64_t cookie = 0;  // the pair cookie (names shm segments)
  slab::Layout layout;
  slab::Schedule schedule;
  DataConfig data_config;
  uint64_t deadline_ns = 0;       // the whole set-up handshake (CLOCK_MONOTONIC)
  uint64_t frame_timeout_ns = 0;  // each set-up frame on the data connection (rdma)
  bool forced = false;  // a rank asked for this transport explicitly: no fallback
  Logger log;
  // tcp: the leader's addresses of the rails to stripe big gates over,
  // when both ranks were given them (empty: none).
  std::vector<std::string> rails;
  // rdma: this rank's ports of the rdma rails, when both ranks were given
  // as many (empty: none).
  std::vector<std::string> rdma_rails;
  // rdma: both ranks run row gates on the rail the leader's plan names
  // (wire::kCapRailRows); otherwise they stay on the primary.
  bool rail_rows = false;
  // Rails: the row gates pinned to link k (DS4TP_ROW_LINK); -1: the quickest.
  int row_link = -1;
};

struct Descriptor {
  const char *name;  // "tcp", as ds4tp_transport_name
  const char *what;  // for messages: "TCP", "shared memory", "RDMA"
  int id;            // DS4TP_TRANSPORT_*
  uint32_t cap;      // the hello's capability bit (wire::kCap*)
  // Probed only when this rank's request allows it (auto, or this one):
  // the check is costly (rdma opens devices).
  bool probe_on_request;

  // Can this host run it? Never fails; `out.why` says why not.
  void (*available)(const Query &q, Availability &out);
  // Runs the backend's handshake on c.data (both ranks at once). Outcomes,
  // identical on both ranks: OK with `prepared` set; OK with `prepared`
  // empty and `fallback` saying why when a rank cannot and !c.forced (the
  // data connection is untouched: the caller runs tcp on it); an error
  // (EUNSUPPORTED when forced, EPEERCLOSED, ETIMEDOUT, EPROTO, ...).
  int (*setup)(Connection &c, const Availability &probed, std::unique_ptr<State> &prepared,
               std::string &fallback, Error &err);
  // Builds the pair's two-member link from what set-up prepared; takes c.data.
  std::unique_ptr<link::Link> (*make)(Connection &c, std::unique_ptr<State> prepared);

  // A group's mesh over this backend, or both null where it has none
  // (shm: the ranks of a host share one segment, group/shm.cpp).
  // mesh_setup runs the backend's handshake on every link of `c` (every
  // member at once), bounded by c.setup_deadline_ns: OK with `prepared`
  // set (or empty where there is nothing to set up: tcp); OK with
  // `prepared` empty and `fallback` saying why this rank's links cannot
  // run it (the group then decides for every rank: tcp over the same
  // links, which hold no unread bytes); an error when a link itself
  // failed (closed, garbled).
  int (*mesh_setup)(const MeshConnection &c, const Availability &probed,
                    std::unique_ptr<State> &prepared, std::string &fallback, Error &err);
  // The mesh from what set-up prepared; takes the links (by member).
  std::unique_ptr<link::Link> (*mesh_make)(const MeshConnection &c, std::vector<net::Fd> fds,
                                         std::unique_ptr<State> prepared);
};

// Every backend built into this library, tcp first.
std::span<const Descriptor *const> all();
// The descriptor of DS4TP_TRANSPORT_* `id`, nullptr when not built in.
const Descriptor *find(int id);

// The backends' entries (tcp/setup.cpp, shm/setup.cpp, rdma/setup.cpp).
extern const Descriptor kTcp;
extern const Descriptor kShm;
extern const Descriptor kRdma;

}  // namespace ds4tp::link
