// Group bring-up: the rendezvous at rank 0, the roster and the data links.
// Runs once per group, on the thread that calls ds4tp_group_connect,
// bounded by the connect deadline; the listening sides are served by
// rendezvous.cpp so strangers cannot hold them up.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <unistd.h>

#include "auth/proof.hpp"
#include "common/clock.hpp"
#include "group/group.hpp"
#include "group/rendezvous.hpp"
#include "group/layout.hpp"
#include "group/wire.hpp"
#include "net/endpoint.hpp"
#include "os/os.hpp"
#include "pair/pair.hpp"
#include "transport/descriptor.hpp"

namespace ds4tp::group {

int Group::listen(Error &err) {
  if (opt_.rank != 0) return DS4TP_OK;
  int bound = 0;
  if (int rc = net::listen_tcp(opt_.host, opt_.port, listen_fd_, bound, err)) return rc;
  opt_.port = bound;
  return DS4TP_OK;
}

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

// A rank of a tiered host opens the segment its leader makes as soon as
// it has the roster; until then the name is missing (or the segment not
// yet laid out), so the open is tried again, until the deadline or until
// rank 0 hangs up (bring-up failed elsewhere). Any other failure (another
// uid's segment, another layout) is final.
static int open_host_area(const std::string &name, int n, size_t chunk, int hub_fd,
                          uint64_t deadline, std::shared_ptr<ShmArea> &area, Error &err) {
  for (;;) {
    Error e;
    bool not_yet = false;
    if (shm_area_open(name, n, chunk, area, e, &not_yet) == DS4TP_OK) return DS4TP_OK;
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

// The media of bring-up until the group takes them: a segment this rank
// made is unlinked when connect returns (every rank has it open by then,
// or bring-up failed).
struct Group::Links {
  std::shared_ptr<ShmArea> area;  // flat shm: rank 0's; tiered: this host's
  bool made = false;
  std::vector<net::Fd> fds;  // the mesh's links: flat, by rank; tiered, by host (leaders)
  std::vector<net::Fd> host;  // tiered, by member of this host: a leader's to each rank,
                              // a rank's [0] to its leader
  transport::Availability rdma_port;  // this rank's, when it may run rdma
  transport::MeshConnection mesh;     // this rank's end of the mesh over fds
  std::unique_ptr<transport::State> prepared;  // what the roster's backend set up on them
  std::string fallback;  // why this rank's links cannot run the roster's backend
  ~Links() {
    if (made && area) shm_area_unlink(*area);
  }
};

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
    return shm_area_open(ro.shm_name, opt_.size, opt_.chunk_bytes, out.area, err);
  }
  const auto &mine = layout_.mine();
  if (mine.size() > 1) {
    std::string name = shm_host_area_name(ro.peers[size_t(mine[0])].pid, ro.token, layout_.host);
    if (!layout_.leader()) {
      if (int rc = open_host_area(name, int(mine.size()), opt_.chunk_bytes, hub_fd, deadline,
                                  out.area, err))
        return rc;
    } else {
      if (int rc = shm_area_create(int(mine.size()), opt_.chunk_bytes, name, out.area, err))
        return rc;
      out.made = true;
      for (size_t i = 1; i < mine.size(); i++)
        shm_area_expect(*out.area, int(i), ro.peers[size_t(mine[i])].pid);
    }
  }
  // Each rank of a host holds a link to its leader, which their waits on
  // each other watch: its hang-up names a rank that died even where the
  // OS layer cannot tell (a rank killed and not yet reaped still answers
  // kill(pid, 0) without /proc).
  out.host.resize(mine.size());
  if (!layout_.leader()) return dial_link(opt_, ro, mine[0], deadline, out.host[0], err);
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
  const transport::Descriptor *d = transport::find(int(ro.transport));
  if (d == nullptr || d->mesh_setup == nullptr)
    return err.set(DS4TP_EPROTO, "the roster's transport {} has no group mesh", ro.transport);
  const bool flat = names.empty();
  const Waiting wait =
      waiting(flat ? opt_.size : int(layout_.mine().size()), opt_.spin_ns, opt_.yield_ns);
  transport::MeshConnection &c = out.mesh;
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

// The mesh medium over links.fds, made by `transport`'s descriptor: the
// roster's when every rank's links could run it, else tcp.
std::unique_ptr<Medium> Group::make_mesh(Links &links, int transport) {
  const transport::Descriptor &d = *transport::find(transport);
  const int n = int(links.fds.size());
  return mesh_medium(d.mesh_make(links.mesh, std::move(links.fds), std::move(links.prepared)),
                     d.id, links.mesh.rank, n, buffer_, crossovers_);
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
  if (ro.tiers == Tiers::Flat) {
    const Waiting wait = waiting(opt_.size, opt_.spin_ns, opt_.yield_ns);
    if (links.area)
      local_.m = shm_medium(links.area, opt_.rank, true, t.flat, wait, std::move(watch));
    else
      local_.m = make_mesh(links, mesh);
    local_.n = opt_.size;
    local_.me = opt_.rank;
    return;
  }
  // Tiered: the heartbeat watches the rendezvous sockets (every rank beats).
  tiered_ = true;
  const auto &mine = layout_.mine();
  const Waiting wait = waiting(int(mine.size()), opt_.spin_ns, opt_.yield_ns);
  cross_transport_ = mesh;
  if (links.area) {
    std::vector<int> watch_host(mine.size(), -1);
    for (size_t i = 0; i < links.host.size(); i++)
      if (links.host[i].valid()) watch_host[i] = links.host[i].get();
    local_.m = shm_medium(links.area, layout_.local, true, t.host, wait, std::move(watch_host),
                          mine);
    local_.n = int(mine.size());
    local_.me = layout_.local;
  }
  host_links_ = std::move(links.host);
  if (layout_.leader()) {
    cross_.m = make_mesh(links, mesh);
    cross_.n = layout_.hosts();
    cross_.me = layout_.host;
  }
}

// The data listener's port: DS4TP_GROUP_DATA_PORT, else any free one;
// and the port the roster announces for it: DS4TP_GROUP_DATA_ADVERTISE_PORT
// where something in between maps or relays it (a container's published
// port, a firewall's forward), else the port itself.
static int port_from_env(const char *name, int otherwise) {
  const char *v = std::getenv(name);
  if (v == nullptr || *v == 0) return otherwise;
  const long p = std::strtol(v, nullptr, 10);
  return p > 0 && p <= 65535 ? int(p) : otherwise;
}
static int data_listen_port() { return port_from_env("DS4TP_GROUP_DATA_PORT", 0); }
static int data_advertised_port(int bound) {
  return port_from_env("DS4TP_GROUP_DATA_ADVERTISE_PORT", bound);
}

// Rank 0 to every rank that joined; a rank gone by now fails at its own
// next read, so a failed write here needs no report.
static void send_roster(const std::vector<net::Fd> &ctl, const Roster &ro) {
  uint8_t rb[kRosterBytes];
  encode_roster(ro, rb);
  Error ignore;
  for (const auto &fd : ctl)
    if (fd.valid())
      net::write_all(fd.get(), rb, sizeof rb, now_ns() + 1'000'000'000ull, "group roster", ignore);
}

// Rank 0's choice of media: shm when every rank shares its host, tiers
// (shm within each host, a mesh between them) where ranks span hosts and
// some share one, else a flat mesh; a rank asking for tcp (or
// DS4TP_GROUP_FLAT=1 at rank 0) keeps the mesh flat. The mesh runs rdma
// when a rank asks for it (even on one host), or, across hosts, when
// every rank offers a usable port; else tcp. `offers`: rank 0's port.
static int choose_media(const Options &o, bool offers, const std::vector<Join> &joins,
                        const std::vector<uint32_t> &host_of, Roster &ro, Error &err) {
  bool want_tcp = o.transport == DS4TP_TRANSPORT_TCP, want_shm = o.transport == DS4TP_TRANSPORT_SHM;
  bool want_rdma = o.transport == DS4TP_TRANSPORT_RDMA, all_offer = offers;
  for (int r = 1; r < o.size; r++) {
    const Join &j = joins[size_t(r)];
    want_tcp = want_tcp || j.transport == DS4TP_TRANSPORT_TCP;
    want_shm = want_shm || j.transport == DS4TP_TRANSPORT_SHM;
    want_rdma = want_rdma || j.transport == DS4TP_TRANSPORT_RDMA;
    all_offer = all_offer && j.offers_rdma;
  }
  const bool same_host = std::all_of(host_of.begin(), host_of.end(), [](uint32_t h) { return h == 0; });
  if (int(want_shm) + int(want_tcp) + int(want_rdma) > 1)
    return err.set(DS4TP_EINVAL, "ranks ask for different transports (shm {}, tcp {}, rdma {})",
                   want_shm, want_tcp, want_rdma);
  if (want_shm && !same_host)
    return err.set(DS4TP_EUNSUPPORTED, "shm asked for but the ranks are on different hosts");
  const char *flat = std::getenv("DS4TP_GROUP_FLAT");
  const bool keep_flat = want_tcp || (flat != nullptr && *flat != 0 && *flat != '0');
  const bool rdma = want_rdma || (!same_host && !want_tcp && all_offer);
  ro.transport = rdma ? DS4TP_TRANSPORT_RDMA
                 : same_host && !want_tcp ? DS4TP_TRANSPORT_SHM
                                          : DS4TP_TRANSPORT_TCP;
  ro.tiers = !same_host && !keep_flat && tiers_help(host_of) ? Tiers::Hosts : Tiers::Flat;
  return DS4TP_OK;
}

// Whether this rank may offer rdma (auto or rdma asked for): its port.
static transport::Availability probe_rdma(const Options &o) {
  transport::Availability a;
  if (o.transport == DS4TP_TRANSPORT_AUTO || o.transport == DS4TP_TRANSPORT_RDMA)
    transport::kRdma.available(transport::Query{}, a);
  return a;
}

// Every rank's rdma links came up, or the group runs tcp over them: the
// ranks that could not log why (their peers learnt it on the links).
static uint8_t go_byte(const Options &o, const Roster &ro, const std::string &why,
                       const std::vector<int> &without) {
  if (ro.transport != DS4TP_TRANSPORT_RDMA) return kGo;
  if (why.empty() && without.empty()) return kGo;
  std::string who;
  for (int r : without) who += (who.empty() ? "" : ", ") + std::to_string(r);
  o.log.warn("group: rdma links could not come up ({}{}{}); the group runs over tcp", why,
             why.empty() || who.empty() ? "" : "; ",
             who.empty() ? "" : "ranks without them: " + who);
  return kGoOverTcp;
}

int Group::connect(Error &err) {
  if (connected()) return err.set(DS4TP_ESTATE, "group already connected");
  const uint64_t deadline = now_ns() + opt_.connect_timeout_ns;
  net::Fd data_l;
  int data_port = 0;
  if (int rc = net::listen_tcp("0.0.0.0", data_listen_port(), data_l, data_port, err)) return rc;
  data_port = data_advertised_port(data_port);
  const auto host_id = host_identity();
  const uint32_t local_rank = local_rank_from_env();
  wire::Hello hello;
  hello.role = DS4TP_ROLE_WORKER;  // rank 0 is the leader of the rendezvous
  hello.host_id = host_id;
  hello.id = opt_.id;
  const std::vector<uint8_t> hello_bytes = wire::encode_hello(hello);
  Roster ro;
  Links links;
  links.rdma_port = probe_rdma(opt_);

  if (opt_.rank == 0) {
    if (!listen_fd_.valid())
      if (int rc = listen(err)) return rc;
    Joined in;
    if (int rc = serve_joins(opt_, listen_fd_.get(), deadline, in, err)) {
      ro.status = rc;  // every rank that joined learns why
      ro.message = err.message;
      send_roster(in.ctl, ro);
      return rc;
    }
    const std::vector<Join> &joins = in.joins;
    std::vector<net::Fd> ctl = std::move(in.ctl);
    Error first;
    ro.size = uint32_t(opt_.size);
    ro.peers.resize(size_t(opt_.size));
    ro.peers[0] = {"", uint32_t(data_port), 0, uint32_t(getpid()), local_rank};
    std::vector<std::array<uint8_t, 16>> hosts = {host_id};  // by host index
    std::vector<uint32_t> host_of = {0};
    for (int r = 1; r < opt_.size; r++) {
      const Join &j = joins[size_t(r)];
      const size_t index = size_t(std::find(hosts.begin(), hosts.end(), j.host_id) - hosts.begin());
      if (index == hosts.size()) hosts.push_back(j.host_id);
      host_of.push_back(uint32_t(index));
      ro.peers[size_t(r)] = {in.hosts[size_t(r)], j.data_port, uint32_t(index), j.pid, j.local_rank};
    }
    choose_media(opt_, links.rdma_port.usable, joins, host_of, ro, first);
    ro.two_shot_bytes = two_shot_threshold(DS4TP_TRANSPORT_TCP);
    ro.ring_bytes = ring_threshold();
    wire::Nonce token{};
    if (first.ok() && auth::fresh_nonce(token, first) == DS4TP_OK)
      std::copy_n(token.begin(), ro.token.size(), ro.token.begin());
    if (first.ok() && ro.transport == DS4TP_TRANSPORT_SHM &&
        shm_area_create(opt_.size, opt_.chunk_bytes, ro.shm_name, links.area, first) == DS4TP_OK) {
      links.made = true;
      for (int r = 1; r < opt_.size; r++) shm_area_expect(*links.area, r, joins[size_t(r)].pid);
    }
    if (!first.ok()) {
      ro.status = first.code;
      ro.message = first.message;
    }
    send_roster(ctl, ro);
    if (!first.ok()) {
      err = first;
      return err.code;
    }
    layout_ = layout_of(ro.peers, 0);
    int rc = open_links(ro, data_l.get(), -1, deadline, links, err);
    std::vector<int> without;  // ranks whose rdma links could not come up
    for (int r = 1; rc == DS4TP_OK && r < opt_.size; r++) {
      uint8_t ready = 0;
      rc = net::read_exact(ctl[size_t(r)].get(), &ready, 1, deadline, "group ready", err);
      if (rc != DS4TP_OK) err.set(rc, "rank {} did not become ready: {}", r, err.message);
      if (rc == DS4TP_OK && ready != kReady && ready != kReadyWithoutRdma)
        rc = err.set(DS4TP_EPROTO, "rank {} sent ready byte {}", r, ready);
      if (ready == kReadyWithoutRdma) without.push_back(r);
    }
    if (rc != DS4TP_OK) return rc;
    uint8_t go = go_byte(opt_, ro, links.fallback, without);
    for (int r = 1; r < opt_.size; r++)
      if (int wrc = net::write_all(ctl[size_t(r)].get(), &go, 1, deadline, "group go", err))
        return wrc;
    std::vector<int> watch(size_t(opt_.size), -1);
    for (int r = 1; r < opt_.size; r++) watch[size_t(r)] = ctl[size_t(r)].get();
    take_links(ro, links, go == kGo && ro.transport == DS4TP_TRANSPORT_RDMA, std::move(watch));
    ctl_ = std::move(ctl);
    listen_fd_.reset();
    return start_heartbeat(err);
  }

  // Ranks 1..N-1: join at rank 0, then open the data links.
  net::Fd c;
  if (int rc = net::dial_tcp(opt_.host, opt_.port, deadline, c, err))
    return err.set(rc, "rendezvous with rank 0: {}", err.message);
  uint8_t nm[kNonceMsgBytes], fixed[kJoinFixedBytes], rb[kRosterBytes];
  wire::Nonce nonce{};
  if (int rc = net::read_exact(c.get(), nm, sizeof nm, deadline, "group nonce", err)) return rc;
  if (int rc = decode_nonce(nm, sizeof nm, nonce, err)) return rc;
  Join j;
  j.rank = uint32_t(opt_.rank);
  j.size = uint32_t(opt_.size);
  j.transport = uint32_t(opt_.transport);
  j.offers_rdma = links.rdma_port.usable;
  j.data_port = uint32_t(data_port);
  j.chunk = opt_.chunk_bytes;
  j.host_id = host_id;
  j.hello_bytes = uint32_t(hello_bytes.size());
  j.has_mac = opt_.key.empty() ? 0 : 1;
  j.pid = uint32_t(getpid());
  j.local_rank = local_rank;
  encode_join(j, fixed);
  if (j.has_mac) {
    if (!join_mac(opt_.key, nonce, fixed, j.mac))
      return err.set(DS4TP_EIO, "libcrypto could not compute HMAC-SHA256");
    encode_join(j, fixed);
  }
  if (int rc = net::write_all(c.get(), fixed, sizeof fixed, deadline, "group join", err)) return rc;
  if (int rc = net::write_all(c.get(), hello_bytes.data(), hello_bytes.size(), deadline,
                              "group hello", err))
    return rc;
  if (int rc = net::read_exact(c.get(), rb, sizeof rb, deadline, "group roster", err))
    return err.set(rc, "waiting for rank 0's roster: {}", err.message);
  if (int rc = decode_roster(rb, sizeof rb, ro, err)) return rc;
  if (ro.status != DS4TP_OK) return err.set(ro.status, "rank 0 refused the group: {}", ro.message);
  if (ro.size != uint32_t(opt_.size))
    return err.set(DS4TP_EPROTO, "roster size {} here {}", ro.size, opt_.size);
  layout_ = layout_of(ro.peers, opt_.rank);
  if (int rc = open_links(ro, data_l.get(), c.get(), deadline, links, err)) return rc;
  uint8_t b = links.fallback.empty() ? kReady : kReadyWithoutRdma;
  if (int rc = net::write_all(c.get(), &b, 1, deadline, "group ready", err)) return rc;
  if (int rc = net::read_exact(c.get(), &b, 1, deadline, "group go", err))
    return err.set(rc, "waiting for rank 0 to start the group: {}", err.message);
  if (b != kGo && b != kGoOverTcp) return err.set(DS4TP_EPROTO, "rank 0 sent go byte {}", b);
  if (b == kGoOverTcp && ro.transport == DS4TP_TRANSPORT_RDMA)
    opt_.log.warn("group: rdma links could not come up ({}); the group runs over tcp",
                  links.fallback.empty() ? "at another rank, which logs why" : links.fallback);
  std::vector<int> watch(size_t(opt_.size), -1);
  watch[0] = c.get();
  take_links(ro, links, b == kGo && ro.transport == DS4TP_TRANSPORT_RDMA, std::move(watch));
  ctl_.clear();
  ctl_.push_back(std::move(c));
  return start_heartbeat(err);
}

}  // namespace ds4tp::group
