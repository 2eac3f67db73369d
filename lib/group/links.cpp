// A group's data links: the mesh among its ranks (flat) or its hosts'
// leaders, made through the backend's descriptor; a tiered host's shm
// segment and its ranks' links to their leader; and the lanes the group
// runs on them. Runs inside ds4tp_group_connect, bounded by its deadline.
#include "group/links.hpp"

#include <cstring>

#include "common/clock.hpp"
#include "group/layout.hpp"
#include "group/rendezvous.hpp"
#include "group/wire.hpp"
#include "net/endpoint.hpp"
#include "os/os.hpp"
#include "link/shm/group_link.hpp"

namespace ds4tp::group {

// A data link to rank j: its listener, then this rank's number and the
// group's token.
static int dial_link(const Options &o, const Roster &ro, int j, uint64_t deadline, net::Fd &fd,
                     Error &err) {
  const std::string &h = ro.peers[size_t(j)].host.empty() ? o.host : ro.peers[size_t(j)].host;
  if (int rc = net::dial_tcp(h, int(ro.peers[size_t(j)].port), deadline, fd, err))
    return err.set(rc, "data link to rank {}: {}", j, err.message);
  uint8_t l[kLinkBytes];
  encode_link(uint32_t(o.rank), ro.token, l);
  return net::write_all(fd.get(), l, sizeof l, deadline, "group link", err);
}

// Data links among `members` (ascending ranks, this rank one of them):
// each dials every lower member and accepts every higher one, and the
// links of ranks `also` (a tiered leader: the other ranks of its host).
// fds[r]: the link to rank r.
static int build_mesh(const Options &o, const Roster &ro, const std::vector<int> &members,
                      const std::vector<int> &also, int lfd, uint64_t deadline,
                      std::vector<net::Fd> &fds, Error &err) {
  fds.clear();
  fds.resize(size_t(o.size));
  std::vector<int> above = also;
  for (int j : members) {
    if (j > o.rank) above.push_back(j);
    if (j >= o.rank) continue;
    if (int rc = dial_link(o, ro, j, deadline, fds[size_t(j)], err)) return rc;
  }
  if (above.empty()) return DS4TP_OK;
  return serve_links(o, ro.token, above, lfd, deadline, fds, err);
}

// The seed of a tiered host's segment name: the roster's token's first
// eight bytes, so every rank of the host derives the same name.
static uint64_t token_seed(const LinkToken &token) {
  uint64_t seed = 0;
  std::memcpy(&seed, token.data(), sizeof seed);
  return seed;
}

// A rank of a tiered host opens the segment its leader makes as soon as
// it has the roster; until then the name is missing (or the segment not
// yet laid out), so the open is tried again, until the deadline or until
// rank 0 hangs up (bring-up failed elsewhere). Any other failure (another
// uid's segment, another layout) is final.
static int open_host_area(const std::string &name, int n, size_t chunk, int hub_fd,
                          uint64_t deadline, std::shared_ptr<shm::Area> &area, Error &err) {
  for (;;) {
    Error e;
    bool not_yet = false;
    if (shm::area_open(name, n, chunk, area, e, &not_yet) == DS4TP_OK) return DS4TP_OK;
    if (!not_yet)
      return err.set(e.code, "the host's shm segment from its leader: {}", e.message);
    if (hub_fd >= 0 && net::peer_gone(hub_fd))
      return err.set(DS4TP_EPEERCLOSED,
                     "rank 0 closed the rendezvous connection while this rank waited for its "
                     "host's shm segment {} (bring-up failed elsewhere)",
                     name);
    if (now_ns() >= deadline)
      return err.set(DS4TP_ETIMEDOUT,
                     "the host's shm segment {} from its leader did not come in time (does this "
                     "rank run on the host its host id names?): {}",
                     name, e.message);
    os::sleep_ns(1'000'000);
  }
}

// This rank's data links, up before it tells rank 0 it is ready.
int Group::open_links(const Roster &ro, int data_lfd, int hub_fd, uint64_t deadline,
                      Links &out, Error &err) {
  if (ro.tiers == Tiers::Flat) {
    if (ro.transport != DS4TP_TRANSPORT_SHM) {
      std::vector<int> all(size_t(opt_.size));
      for (int r = 0; r < opt_.size; r++) all[size_t(r)] = r;
      if (int rc = build_mesh(opt_, ro, all, {}, data_lfd, deadline, out.fds, err)) return rc;
      return open_mesh(ro, {}, deadline, out, err);
    }
    if (opt_.rank == 0) return DS4TP_OK;  // made before the roster
    return shm::area_open(ro.shm_name, opt_.size, opt_.chunk_bytes, out.area, err);
  }
  // Each rank of a host holds a link to its leader, which their waits on
  // each other watch: its hang-up names a rank that died even where the
  // OS layer cannot tell (a rank killed and not yet reaped still answers
  // kill(pid, 0) without /proc). A rank dials it first, so one that fails
  // later closes a link its leader has already taken.
  const auto &mine = layout_.mine();
  out.host.resize(mine.size());
  const std::string name =
      shm::host_area_name(ro.peers[size_t(mine[0])].pid, token_seed(ro.token), layout_.host);
  if (!layout_.leader()) {
    if (int rc = dial_link(opt_, ro, mine[0], deadline, out.host[0], err)) return rc;
    return open_host_area(name, int(mine.size()), opt_.chunk_bytes, hub_fd, deadline, out.area,
                          err);
  }
  if (mine.size() > 1) {
    std::string made = name;
    const int n = int(mine.size());
    if (int rc = shm::area_create(n, opt_.chunk_bytes, home_threshold(n),
                                  two_shot_threshold(DS4TP_TRANSPORT_SHM), made, out.area, err))
      return rc;
    out.made = true;
    for (size_t i = 1; i < mine.size(); i++)
      shm::area_expect(*out.area, int(i), ro.peers[size_t(mine[i])].pid);
  }
  std::vector<net::Fd> by_rank;
  const std::vector<int> others(mine.begin() + 1, mine.end());
  if (int rc = build_mesh(opt_, ro, layout_.leaders(), others, data_lfd, deadline, by_rank, err))
    return rc;
  for (size_t i = 1; i < mine.size(); i++) out.host[i] = std::move(by_rank[size_t(mine[i])]);
  for (int h = 0; h < layout_.hosts(); h++)
    out.fds.push_back(std::move(by_rank[size_t(layout_.leader_of(h))]));
  return open_mesh(ro, layout_.leaders(), deadline, out, err);
}

// This rank's end of the mesh over the links just made (flat: `names`
// empty; the leaders' links: their ranks), set up by the roster's backend
// through its descriptor. A rank whose links cannot run it (rdma: no
// usable port) still takes part, so its peers learn why; out.fallback
// then says why, and the group runs tcp over the same links (connect's
// go byte).
int Group::open_mesh(const Roster &ro, std::vector<int> names, uint64_t deadline, Links &out,
                     Error &err) {
  const link::Descriptor *d = link::find(int(ro.transport));
  if (d == nullptr || d->mesh_setup == nullptr)
    return err.set(DS4TP_EPROTO, "the roster's transport {} has no group mesh", ro.transport);
  const bool flat = names.empty();
  // The leaders' mesh of a tiered group runs on its cross worker too: a
  // tally of its own (one writer each).
  const Waiting wait = waiting(flat ? opt_.size : int(layout_.mine().size()), opt_.spin_ns,
                               opt_.yield_ns, stats_.wait_tally(flat ? 0 : 1));
  link::MeshConnection &c = out.mesh;
  for (const auto &f : out.fds) c.fds.push_back(f.get());
  c.rank = flat ? opt_.rank : layout_.host;
  c.chunk = opt_.chunk_bytes;
  c.timeout_ns = flat ? timeouts().flat : timeouts().cross;
  c.policy = wait.policy;
  c.adaptive = wait.adaptive;
  c.names = std::move(names);
  c.setup_deadline_ns = deadline;
  return d->mesh_setup(c, out.rdma_port, out.prepared, out.fallback, err);
}

// The mesh over links.fds, made by `transport`'s descriptor: the
// roster's when every rank's links could run it, else tcp.
std::unique_ptr<link::Link> Group::make_mesh(Links &links, int transport) {
  const link::Descriptor &d = *link::find(transport);
  return d.mesh_make(links.mesh, std::move(links.fds), std::move(links.prepared));
}

void Group::make_lane(Lane &l, std::unique_ptr<link::Link> lk, int n, int me, const Crossovers &x) {
  l.link = std::move(lk);
  l.n = n;
  l.me = me;
  l.step = 0;
  l.x = x;
  l.roomy = buffer_;
  l.arrival_ns = opt_.arrival_ns;
  l.every = tiered_;
}

std::unique_ptr<link::Link> Group::shm_link(std::shared_ptr<shm::Area> area, int me, bool watch,
                                            uint64_t timeout_ns, int members,
                                            std::vector<int> ctl, std::vector<int> names) {
  const Waiting w = waiting(members, opt_.spin_ns, opt_.yield_ns, stats_.wait_tally(0));
  return shm::make_slots(std::move(area), me, watch, timeout_ns, w.policy, w.adaptive,
                         std::move(ctl), std::move(names));
}

Crossovers area_crossovers(const shm::Area &area) {
  Crossovers x;
  const shm::Header *h = const_cast<shm::Area &>(area).header();
  x.two_shot_bytes = h->two_shot_bytes;
  x.home_bytes = h->home_bytes;
  return x;
}

// A leader waits across hosts on a leader that may itself wait on its
// host's ranks, and a host's ranks wait on their leader while it waits
// across: each outer wait is longer by the heartbeat's silence, so a
// stopped or cut-off rank is named by the heartbeat's verdict (or its
// own host's process watch), not by the deadline of a rank waiting on
// it through its leader. A dead rank is seen at once either way.
Group::Timeouts Group::timeouts() const {
  const uint64_t slack = opt_.peer_silence_ns + kVerdictWaitNs;
  const uint64_t cross = opt_.op_timeout_ns + slack;
  return {opt_.op_timeout_ns, cross, cross + slack};
}

// The lanes from the links (`rdma`: the group agreed to run its queue
// pairs); `watch[r]`: a rendezvous socket that hangs up when rank r exits
// (flat shm).
void Group::take_links(const Roster &ro, Links &links, bool rdma, std::vector<int> watch) {
  const Timeouts t = timeouts();
  crossovers_ = {ro.two_shot_bytes, ro.ring_bytes};
  const int mesh = rdma ? DS4TP_TRANSPORT_RDMA : DS4TP_TRANSPORT_TCP;
  // A mesh of n members: the roster's crossovers, the ring's member rule.
  auto mesh_x = [&](int n) {
    return Crossovers{ro.two_shot_bytes, ring_for(ro.ring_bytes, n), UINT64_MAX};
  };
  if (ro.tiers == Tiers::Flat) {
    if (links.area)
      make_lane(local_, shm_link(links.area, opt_.rank, true, t.flat, opt_.size, std::move(watch)),
                opt_.size, opt_.rank, area_crossovers(*links.area));
    else
      make_lane(local_, make_mesh(links, mesh), opt_.size, opt_.rank, mesh_x(opt_.size));
    return;
  }
  // Tiered: the heartbeat watches the rendezvous sockets (every rank beats).
  tiered_ = true;
  const auto &mine = layout_.mine();
  cross_transport_ = mesh;
  if (links.area) {
    std::vector<int> watch_host(mine.size(), -1);
    for (size_t i = 0; i < links.host.size(); i++)
      if (links.host[i].valid()) watch_host[i] = links.host[i].get();
    const int n = int(mine.size());
    make_lane(local_, shm_link(links.area, layout_.local, true, t.host, n, std::move(watch_host),
                               mine),
              n, layout_.local, area_crossovers(*links.area));
  }
  host_links_ = std::move(links.host);
  if (layout_.leader()) {
    make_lane(cross_, make_mesh(links, mesh), layout_.hosts(), layout_.host,
              mesh_x(layout_.hosts()));
    cross_.ranks = layout_.leaders();
    // A call across hosts may outlast the host ranks' deadline while it
    // keeps moving: every move restarts their waits on this leader.
    if (local_) cross_.link->count_progress_in(local_.link->progress_word());
  }
}

}  // namespace ds4tp::group
