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
#include "group/wire.hpp"
#include "net/endpoint.hpp"
#include "pair/pair.hpp"

namespace ds4tp::group {

int Group::listen(Error &err) {
  if (opt_.rank != 0) return DS4TP_OK;
  int bound = 0;
  if (int rc = net::listen_tcp(opt_.host, opt_.port, listen_fd_, bound, err)) return rc;
  opt_.port = bound;
  return DS4TP_OK;
}

// Data links: rank i dials every lower rank and accepts every higher one.
static int build_mesh(const Options &o, const Roster &ro, int lfd, uint64_t deadline,
                      std::vector<net::Fd> &fds, Error &err) {
  fds.clear();
  fds.resize(size_t(o.size));
  for (int j = 0; j < o.rank; j++) {
    const std::string &h = ro.peers[size_t(j)].host.empty() ? o.host : ro.peers[size_t(j)].host;
    if (int rc = net::dial_tcp(h, int(ro.peers[size_t(j)].port), deadline, fds[size_t(j)], err))
      return err.set(rc, "data link to rank {}: {}", j, err.message);
    uint8_t l[kLinkBytes];
    encode_link(uint32_t(o.rank), ro.token, l);
    if (int rc = net::write_all(fds[size_t(j)].get(), l, sizeof l, deadline, "group link", err))
      return rc;
  }
  if (o.rank + 1 == o.size) return DS4TP_OK;
  return serve_links(o, ro.token, lfd, deadline, fds, err);
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

int Group::connect(Error &err) {
  if (medium_) return err.set(DS4TP_ESTATE, "group already connected");
  const uint64_t deadline = now_ns() + opt_.connect_timeout_ns;
  net::Fd data_l;
  int data_port = 0;
  if (int rc = net::listen_tcp("0.0.0.0", data_listen_port(), data_l, data_port, err)) return rc;
  data_port = data_advertised_port(data_port);
  const auto host_id = host_identity();
  wire::Hello hello;
  hello.role = DS4TP_ROLE_WORKER;  // rank 0 is the leader of the rendezvous
  hello.host_id = host_id;
  hello.id = opt_.id;
  const std::vector<uint8_t> hello_bytes = wire::encode_hello(hello);
  Roster ro;
  std::vector<net::Fd> ctl(size_t(opt_.size));

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
    ctl = std::move(in.ctl);
    Error first;
    // Transport: shm only when every rank shares this host.
    bool same_host = true, want_tcp = opt_.transport == DS4TP_TRANSPORT_TCP,
         want_shm = opt_.transport == DS4TP_TRANSPORT_SHM;
    for (int r = 1; first.ok() && r < opt_.size; r++) {
      same_host = same_host && joins[size_t(r)].host_id == host_id;
      want_tcp = want_tcp || joins[size_t(r)].transport == DS4TP_TRANSPORT_TCP;
      want_shm = want_shm || joins[size_t(r)].transport == DS4TP_TRANSPORT_SHM;
    }
    if (first.ok() && want_shm && want_tcp)
      first.set(DS4TP_EINVAL, "ranks ask for both shm and tcp");
    if (first.ok() && want_shm && !same_host)
      first.set(DS4TP_EUNSUPPORTED, "shm asked for but the ranks are on different hosts");
    std::shared_ptr<ShmArea> area;
    if (first.ok()) {
      ro.transport = (same_host && !want_tcp) ? DS4TP_TRANSPORT_SHM : DS4TP_TRANSPORT_TCP;
      ro.size = uint32_t(opt_.size);
      ro.peers.resize(size_t(opt_.size));
      ro.peers[0].port = uint32_t(data_port);
      std::vector<std::array<uint8_t, 16>> hosts = {host_id};  // by host index
      for (int r = 1; r < opt_.size; r++) {
        const auto &h = joins[size_t(r)].host_id;
        const size_t index = size_t(std::find(hosts.begin(), hosts.end(), h) - hosts.begin());
        if (index == hosts.size()) hosts.push_back(h);
        ro.peers[size_t(r)] = {in.hosts[size_t(r)], joins[size_t(r)].data_port, uint32_t(index)};
      }
      wire::Nonce token{};
      if (auth::fresh_nonce(token, first) == DS4TP_OK)
        std::copy_n(token.begin(), ro.token.size(), ro.token.begin());
      if (ro.transport == DS4TP_TRANSPORT_SHM &&
          shm_area_create(opt_.size, opt_.chunk_bytes, ro.shm_name, area, first) == DS4TP_OK)
        for (int r = 1; r < opt_.size; r++) shm_area_expect(*area, r, joins[size_t(r)].pid);
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
    std::vector<net::Fd> fds;
    int rc = DS4TP_OK;
    if (ro.transport == DS4TP_TRANSPORT_TCP)
      rc = build_mesh(opt_, ro, data_l.get(), deadline, fds, err);
    for (int r = 1; rc == DS4TP_OK && r < opt_.size; r++) {
      uint8_t ready = 0;
      rc = net::read_exact(ctl[size_t(r)].get(), &ready, 1, deadline, "group ready", err);
      if (rc != DS4TP_OK) err.set(rc, "rank {} did not become ready: {}", r, err.message);
    }
    if (area) shm_area_unlink(*area);
    if (rc != DS4TP_OK) return rc;
    uint8_t go = 1;
    for (int r = 1; r < opt_.size; r++)
      if (int wrc = net::write_all(ctl[size_t(r)].get(), &go, 1, deadline, "group go", err))
        return wrc;
    std::vector<int> watch(size_t(opt_.size), -1);
    for (int r = 1; r < opt_.size; r++) watch[size_t(r)] = ctl[size_t(r)].get();
    const Waiting wait = waiting(opt_.size, opt_.spin_ns, opt_.yield_ns);
    medium_ = area ? shm_medium(area, 0, true, opt_.op_timeout_ns, wait,
                                     std::move(watch))
                   : tcp_medium(std::move(fds), 0, opt_.chunk_bytes, opt_.op_timeout_ns, wait,
                                buffer_);
    ctl_ = std::move(ctl);
    listen_fd_.reset();
    note_hosts(ro);
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
  j.data_port = uint32_t(data_port);
  j.chunk = opt_.chunk_bytes;
  j.host_id = host_id;
  j.hello_bytes = uint32_t(hello_bytes.size());
  j.has_mac = opt_.key.empty() ? 0 : 1;
  j.pid = uint32_t(getpid());
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
  std::shared_ptr<ShmArea> area;
  std::vector<net::Fd> fds;
  if (ro.transport == DS4TP_TRANSPORT_SHM) {
    if (int rc = shm_area_open(ro.shm_name, opt_.size, opt_.chunk_bytes, area, err)) return rc;
  } else if (int rc = build_mesh(opt_, ro, data_l.get(), deadline, fds, err)) {
    return rc;
  }
  uint8_t b = 1;
  if (int rc = net::write_all(c.get(), &b, 1, deadline, "group ready", err)) return rc;
  if (int rc = net::read_exact(c.get(), &b, 1, deadline, "group go", err))
    return err.set(rc, "waiting for rank 0 to start the group: {}", err.message);
  std::vector<int> watch(size_t(opt_.size), -1);
  watch[0] = c.get();
  const Waiting wait = waiting(opt_.size, opt_.spin_ns, opt_.yield_ns);
  medium_ = area ? shm_medium(area, opt_.rank, true, opt_.op_timeout_ns, wait,
                                     std::move(watch))
                 : tcp_medium(std::move(fds), opt_.rank, opt_.chunk_bytes, opt_.op_timeout_ns,
                              wait, buffer_);
  ctl_.clear();
  ctl_.push_back(std::move(c));
  note_hosts(ro);
  return start_heartbeat(err);
}

}  // namespace ds4tp::group
