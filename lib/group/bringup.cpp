// Group bring-up: the rendezvous at rank 0, the roster and the data links.
// Blocking sockets code bounded by the connect deadline; runs once per
// group, on the thread that calls ds4tp_group_connect.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "auth/crypto.hpp"
#include "auth/proof.hpp"
#include "common/clock.hpp"
#include "group/group.hpp"
#include "group/wire.hpp"
#include "os/os.hpp"
#include "pair/pair.hpp"

namespace ds4tp::group {
namespace {

int listen_on(const std::string &host, int port, net::Fd &out, int &bound, Error &err) {
  net::Fd fd(os::open_socket(AF_INET, SOCK_STREAM, 0));
  if (!fd.valid()) return err.set(DS4TP_EIO, "socket: {}", std::strerror(errno));
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  if (host.empty() || host == "0.0.0.0") {
    a.sin_addr.s_addr = htonl(INADDR_ANY);
  } else if (inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_INET;
    if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr)
      return err.set(DS4TP_EINVAL, "cannot resolve rendezvous host '{}'", host);
    a.sin_addr = reinterpret_cast<sockaddr_in *>(res->ai_addr)->sin_addr;
    freeaddrinfo(res);
  }
  if (bind(fd.get(), reinterpret_cast<sockaddr *>(&a), sizeof a) != 0)
    return err.set(DS4TP_EIO, "bind {}:{}: {}", host, port, std::strerror(errno));
  if (::listen(fd.get(), 64) != 0) return err.set(DS4TP_EIO, "listen: {}", std::strerror(errno));
  socklen_t len = sizeof a;
  getsockname(fd.get(), reinterpret_cast<sockaddr *>(&a), &len);
  bound = ntohs(a.sin_port);
  net::set_nonblocking(fd.get());
  out = std::move(fd);
  return DS4TP_OK;
}

// Dials until connected or the deadline (the peer may not listen yet).
int dial(const std::string &host, int port, uint64_t deadline, net::Fd &out, Error &err) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  std::string ps = std::to_string(port);
  if (getaddrinfo(host.c_str(), ps.c_str(), &hints, &res) != 0 || res == nullptr)
    return err.set(DS4TP_EINVAL, "cannot resolve '{}'", host);
  int last = 0;
  for (;;) {
    net::Fd fd(os::open_socket(AF_INET, SOCK_STREAM, 0));  // non-blocking
    bool ok = fd.valid() && ::connect(fd.get(), res->ai_addr, res->ai_addrlen) == 0;
    if (!ok && fd.valid() && errno == EINPROGRESS) {
      pollfd p{fd.get(), POLLOUT, 0};
      uint64_t now = now_ns();
      int ms = now < deadline ? int(std::min<uint64_t>((deadline - now) / 1'000'000 + 1, 1000)) : 0;
      if (poll(&p, 1, ms) == 1) {
        int e = 0;
        socklen_t el = sizeof e;
        getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &e, &el);
        ok = e == 0;
        errno = e;
      } else {
        errno = ETIMEDOUT;
      }
    }
    if (ok) {
      freeaddrinfo(res);
      net::tune_data_socket(fd.get());
      out = std::move(fd);
      return DS4TP_OK;
    }
    last = errno;
    if (now_ns() >= deadline) break;
    os::sleep_ns(20'000'000);
  }
  freeaddrinfo(res);
  return err.set(DS4TP_ETIMEDOUT, "could not connect to {}:{} before the deadline: {}", host,
                 port, std::strerror(last));
}

int accept_one(int lfd, uint64_t deadline, net::Fd &out, std::string *peer_host, Error &err) {
  for (;;) {
    sockaddr_in a{};
    socklen_t len = sizeof a;
    int fd = ::accept(lfd, reinterpret_cast<sockaddr *>(&a), &len);
    if (fd >= 0) {
      out = net::Fd(fd);
      net::tune_data_socket(fd);
      if (peer_host) {
        char buf[INET_ADDRSTRLEN] = {0};
        inet_ntop(AF_INET, &a.sin_addr, buf, sizeof buf);
        *peer_host = buf;
      }
      return DS4TP_OK;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      return err.set(DS4TP_EIO, "accept: {}", std::strerror(errno));
    uint64_t now = now_ns();
    if (now >= deadline) return err.set(DS4TP_ETIMEDOUT, "accept: deadline passed");
    pollfd p{lfd, POLLIN, 0};
    poll(&p, 1, int(std::min<uint64_t>((deadline - now) / 1'000'000 + 1, 100)));
  }
}

bool join_mac(const auth::Key &key, const wire::Nonce &nonce, const uint8_t *fixed,
              wire::Mac &out) {
  uint8_t msg[kNonceMsgBytes + kJoinFixedBytes];
  std::memcpy(msg, nonce.data(), nonce.size());
  std::memcpy(msg + nonce.size(), fixed, kJoinFixedBytes);
  std::memset(msg + nonce.size() + 56, 0, 32);  // the mac field itself
  static_assert(sizeof(wire::Mac) == auth::crypto::kHmacSha256Bytes);
  return auth::crypto::hmac_sha256(key.data(), key.size(), msg, nonce.size() + kJoinFixedBytes,
                                   out.data());
}

std::string list_ranks(const std::vector<int> &rs) {
  std::string s;
  for (int r : rs) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

}  // namespace

int Group::listen(Error &err) {
  if (opt_.rank != 0) return DS4TP_OK;
  int bound = 0;
  if (int rc = listen_on(opt_.host, opt_.port, listen_fd_, bound, err)) return rc;
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
    if (int rc = dial(h, int(ro.peers[size_t(j)].port), deadline, fds[size_t(j)], err))
      return err.set(rc, "data link to rank {}: {}", j, err.message);
    uint8_t l[kLinkBytes];
    encode_link(uint32_t(o.rank), l);
    if (int rc = net::write_all(fds[size_t(j)].get(), l, sizeof l, deadline, "group link", err))
      return rc;
  }
  for (int k = o.rank + 1; k < o.size; k++) {
    net::Fd fd;
    if (int rc = accept_one(lfd, deadline, fd, nullptr, err))
      return err.set(rc, "data links from higher ranks: {}", err.message);
    uint8_t l[kLinkBytes];
    if (int rc = net::read_exact(fd.get(), l, sizeof l, deadline, "group link", err)) return rc;
    uint32_t r = 0;
    if (int rc = decode_link(l, sizeof l, uint32_t(o.size), r, err)) return rc;
    if (int(r) <= o.rank || fds[r].valid())
      return err.set(DS4TP_EPROTO, "data link from rank {} unexpected at rank {}", r, o.rank);
    fds[r] = std::move(fd);
  }
  return DS4TP_OK;
}

int Group::connect(Error &err) {
  if (medium_) return err.set(DS4TP_ESTATE, "group already connected");
  const uint64_t deadline = now_ns() + opt_.connect_timeout_ns;
  const uint64_t hello_ns = std::min<uint64_t>(opt_.connect_timeout_ns, 5'000'000'000ull);
  net::Fd data_l;
  int data_port = 0;
  if (int rc = listen_on("0.0.0.0", 0, data_l, data_port, err)) return rc;
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
    std::vector<Join> joins(size_t(opt_.size));
    std::vector<std::string> hosts(size_t(opt_.size));
    std::vector<net::Fd> extra;  // connections refused for a reason we report to them
    Error first;
    int joined = 1;
    while (joined < opt_.size && first.ok()) {
      net::Fd fd;
      std::string peer;
      if (accept_one(listen_fd_.get(), deadline, fd, &peer, err) != DS4TP_OK) {
        if (err.code != DS4TP_ETIMEDOUT) return err.code;
        std::vector<int> missing;
        for (int r = 1; r < opt_.size; r++)
          if (!ctl[size_t(r)].valid()) missing.push_back(r);
        first.set(DS4TP_ETIMEDOUT, "rank{} {} did not join within {} ms",
                  missing.size() > 1 ? "s" : "", list_ranks(missing),
                  opt_.connect_timeout_ns / 1'000'000);
        break;
      }
      const uint64_t hd = std::min(deadline, now_ns() + hello_ns);
      wire::Nonce nonce{};
      if (auth::fresh_nonce(nonce, err) != DS4TP_OK) return err.code;
      uint8_t nm[kNonceMsgBytes], fixed[kJoinFixedBytes];
      encode_nonce(nonce, nm);
      Error e;
      Join j;
      if (net::write_all(fd.get(), nm, sizeof nm, hd, "group nonce", e) ||
          net::read_exact(fd.get(), fixed, sizeof fixed, hd, "group join", e) ||
          decode_join(fixed, sizeof fixed, j, e))
        continue;  // not a rank of ours (or gone): drop it, keep waiting
      std::vector<uint8_t> hb(j.hello_bytes);
      if (net::read_exact(fd.get(), hb.data(), hb.size(), hd, "group hello", e)) continue;
      wire::Preamble pre;
      wire::Hello ph;
      const int r = int(j.rank);
      if (j.size != uint32_t(opt_.size)) {
        first.set(DS4TP_EINVAL, "rank {} has group size {}, rank 0 has {}", r, j.size, opt_.size);
      } else if (!opt_.key.empty() && !j.has_mac) {
        first.set(DS4TP_EAUTH, "rank {} sent no key proof; rank 0 has a key", r);
      } else if (opt_.key.empty() && j.has_mac) {
        first.set(DS4TP_EAUTH, "rank {} sent a key proof; rank 0 has no key", r);
      } else if (j.has_mac) {
        wire::Mac want{};
        if (!join_mac(opt_.key, nonce, fixed, want) || !auth::mac_equal(want, j.mac))
          first.set(DS4TP_EAUTH, "rank {}: key proof does not verify (the keys differ)", r);
      }
      if (first.ok() && r == 0) first.set(DS4TP_EPROTO, "a second rank 0 joined from {}", peer);
      if (first.ok() && ctl[size_t(r)].valid())
        first.set(DS4TP_EPROTO, "rank {} joined twice (from {} and {})", r, hosts[size_t(r)], peer);
      if (first.ok() && j.chunk != opt_.chunk_bytes)
        first.set(DS4TP_EINVAL, "rank {} has chunk_bytes {}, rank 0 has {}", r, j.chunk,
                  opt_.chunk_bytes);
      if (first.ok()) {
        if (wire::decode_preamble(hb.data(), hb.size(), wire::kHelloMaxBytes, pre, e) ||
            wire::decode_hello_body(hb.data() + wire::kPreambleBytes,
                                    hb.size() - wire::kPreambleBytes, ph, e))
          first.set(e.code, "rank {}: {}", r, e.message);
        else if (wire::compare_identity(opt_.id, ph.id, e) != DS4TP_OK)
          first.set(e.code, "rank {}: {}", r, e.message);
      }
      if (!first.ok() && (r == 0 || ctl[size_t(r)].valid())) {
        extra.push_back(std::move(fd));
        break;
      }
      j.host_id = ph.host_id;
      joins[size_t(r)] = j;
      hosts[size_t(r)] = peer;
      ctl[size_t(r)] = std::move(fd);
      joined++;
    }
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
      for (int r = 1; r < opt_.size; r++)
        ro.peers[size_t(r)] = {hosts[size_t(r)], joins[size_t(r)].data_port};
      if (ro.transport == DS4TP_TRANSPORT_SHM)
        shm_area_create(opt_.size, opt_.chunk_bytes, ro.shm_name, area, first);
    }
    if (!first.ok()) {
      ro.status = first.code;
      ro.message = first.message;
    }
    uint8_t rb[kRosterBytes];
    encode_roster(ro, rb);
    Error ignore;
    for (auto &fd : ctl)
      if (fd.valid()) net::write_all(fd.get(), rb, sizeof rb, deadline, "group roster", ignore);
    for (auto &fd : extra) net::write_all(fd.get(), rb, sizeof rb, deadline, "group roster", ignore);
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
    return start_heartbeat(err);
  }

  // Ranks 1..N-1: join at rank 0, then open the data links.
  net::Fd c;
  if (int rc = dial(opt_.host, opt_.port, deadline, c, err))
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
  return start_heartbeat(err);
}

}  // namespace ds4tp::group
