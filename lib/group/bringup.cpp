// Group bring-up: the rendezvous at rank 0, the roster, then the data
// links (links.cpp), the go, and the clocks of ranks off rank 0's host
// (clock_align.hpp).
// Runs once per group, on the thread that calls ds4tp_group_connect,
// bounded by the connect deadline; the listening sides are served by
// rendezvous.cpp so strangers cannot hold them up.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <unistd.h>

#include "auth/proof.hpp"
#include "common/clock.hpp"
#include "group/clock_align.hpp"
#include "group/group.hpp"
#include "group/links.hpp"
#include "group/rendezvous.hpp"
#include "group/layout.hpp"
#include "group/wire.hpp"
#include "net/endpoint.hpp"
#include "os/os.hpp"
#include "pair/pair.hpp"
#include "link/descriptor.hpp"

namespace ds4tp::group {

int Group::listen(Error &err) {
  if (opt_.rank != 0) return DS4TP_OK;
  int bound = 0;
  if (int rc = net::listen_tcp(opt_.host, opt_.port, listen_fd_, bound, err)) return rc;
  opt_.port = bound;
  return DS4TP_OK;
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
static link::Availability probe_rdma(const Options &o) {
  link::Availability a;
  if (o.transport == DS4TP_TRANSPORT_AUTO || o.transport == DS4TP_TRANSPORT_RDMA)
    link::kRdma.available(link::Query{}, a);
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
        shm::area_create(opt_.size, opt_.chunk_bytes, home_threshold(opt_.size),
                         two_shot_threshold(DS4TP_TRANSPORT_SHM), ro.shm_name, links.area,
                         first) == DS4TP_OK) {
      links.made = true;
      for (int r = 1; r < opt_.size; r++) shm::area_expect(*links.area, r, joins[size_t(r)].pid);
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
    std::vector<int> elsewhere;  // ranks off rank 0's host align their clocks with it
    for (int r = 1; r < opt_.size; r++)
      if (layout_.host_of[size_t(r)] != layout_.host_of[0]) elsewhere.push_back(ctl[size_t(r)].get());
    if (int crc = serve_clock(elsewhere, deadline, err))
      return err.set(crc, "aligning the ranks' clocks: {}", err.message);
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
  j.job = opt_.job;
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
  if (layout_.host_of[size_t(opt_.rank)] != layout_.host_of[0])
    if (int rc = align_clock(c.get(), deadline, clock_, clock_rounds_, err))
      return err.set(rc, "aligning the clock with rank 0: {}", err.message);
  std::vector<int> watch(size_t(opt_.size), -1);
  watch[0] = c.get();
  take_links(ro, links, b == kGo && ro.transport == DS4TP_TRANSPORT_RDMA, std::move(watch));
  ctl_.clear();
  ctl_.push_back(std::move(c));
  return start_heartbeat(err);
}

}  // namespace ds4tp::group
