#include "transport/standby.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "common/clock.hpp"
#include "net/endpoint.hpp"
#include "net/intake.hpp"
#include "wire/failover.hpp"

namespace ds4tp::transport {
namespace {

using wire::StandbyKind;
using wire::StandbyMsg;

// The dial gets this long at most, so an address that drops packets
// leaves the pair without a standby rather than stuck at bring-up.
constexpr uint64_t kDialNs = 2'000'000'000ull;

StandbyMsg msg(StandbyKind k) {
  StandbyMsg m;
  m.kind = uint16_t(k);
  return m;
}

int send_msg(int fd, const StandbyMsg &m, uint64_t deadline, Error &err) {
  uint8_t b[wire::kStandbyBytes];
  wire::encode_standby(m, b);
  return net::write_all(fd, b, sizeof b, deadline, "standby set-up", err);
}

int recv_msg(int fd, StandbyKind want, StandbyMsg &m, uint64_t deadline, Error &err) {
  uint8_t b[wire::kStandbyBytes];
  if (int rc = net::read_exact(fd, b, sizeof b, deadline, "standby set-up", err)) return rc;
  if (int rc = wire::decode_standby(b, sizeof b, m, err)) return rc;
  if (m.kind != uint16_t(want))
    return err.set(DS4TP_EPROTO, "standby set-up: message kind {} where {} was due", m.kind,
                   uint16_t(want));
  return DS4TP_OK;
}

// An IPv4 address of `fd`'s local (or peer) end, "" when it has none.
std::string address_of(int fd, bool peer) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  auto *sa = reinterpret_cast<sockaddr *>(&ss);
  if ((peer ? getpeername(fd, sa, &len) : getsockname(fd, sa, &len)) != 0) return "";
  if (ss.ss_family != AF_INET) return "";
  char buf[INET_ADDRSTRLEN];
  const auto *in = reinterpret_cast<const sockaddr_in *>(&ss);
  return inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf) ? std::string(buf) : "";
}

// Accepts the one connection that proves the cookie; strangers are dropped.
class StandbyDesk final : public net::IntakeHandler {
 public:
  StandbyDesk(uint64_t cookie, net::Fd &out) : cookie_(cookie), out_(out) {}
  void open(net::Visitor &v) override { v.need = wire::kStandbyBytes; }
  net::Verdict judge(net::Visitor &v, std::string &why) override {
    StandbyMsg m;
    Error e;
    if (wire::decode_standby(v.in.data(), v.in.size(), m, e) != DS4TP_OK) {
      why = "not a standby link: " + e.message;
      return net::Verdict::kDrop;
    }
    if (m.kind != uint16_t(StandbyKind::Proof) || m.cookie != cookie_) {
      why = "a standby link without this pair's cookie";
      return net::Verdict::kDrop;
    }
    out_ = std::move(v.fd);
    return net::Verdict::kKeep;
  }
  bool done() const override { return out_.valid(); }

 private:
  uint64_t cookie_;
  net::Fd &out_;
};

int leader_side(const StandbySetup &s, net::Fd &out, std::string &why_not, Error &err) {
  StandbyMsg offer = msg(StandbyKind::Offer);
  net::Fd lfd;
  const std::string host = address_of(s.data_fd, false);
  if (host.empty()) {
    offer.ok = false;
    offer.reason = "the data connection is not IPv4";
  } else {
    int port = 0;
    Error le;
    if (net::listen_tcp(host, 0, lfd, port, le) != DS4TP_OK) {
      offer.ok = false;
      offer.reason = "the leader cannot listen: " + le.message;
    }
    offer.port = uint16_t(port);
  }
  if (int rc = send_msg(s.data_fd, offer, s.deadline_ns, err)) return rc;
  if (!offer.ok) {
    why_not = offer.reason;
    return DS4TP_OK;
  }
  StandbyMsg dialed;
  if (int rc = recv_msg(s.data_fd, StandbyKind::Dialed, dialed, s.deadline_ns, err)) return rc;
  if (!dialed.ok) {
    why_not = "the worker could not reach the standby listener: " + dialed.reason;
    return DS4TP_OK;
  }
  StandbyDesk desk(s.cookie, out);
  net::IntakeConfig ic;
  ic.what = "standby listener";
  ic.max_pending = 8;
  ic.log = s.log;
  net::IntakeCounts counts;
  if (int rc = net::serve_intake(lfd.get(), desk, ic, s.deadline_ns, counts, err)) return rc;
  return send_msg(out.get(), msg(StandbyKind::Ack), s.deadline_ns, err);
}

int worker_side(const StandbySetup &s, net::Fd &out, std::string &why_not, Error &err) {
  StandbyMsg offer;
  if (int rc = recv_msg(s.data_fd, StandbyKind::Offer, offer, s.deadline_ns, err)) return rc;
  if (!offer.ok) {
    why_not = offer.reason;
    return DS4TP_OK;
  }
  StandbyMsg dialed = msg(StandbyKind::Dialed);
  std::string host = address_of(s.data_fd, true);
  // Test only: dial another address (one where nothing listens).
  if (const char *t = std::getenv("DS4TP_TEST_STANDBY_HOST"); t != nullptr && *t != 0) host = t;
  net::Fd fd;
  Error de;
  if (host.empty()) {
    dialed.ok = false;
    dialed.reason = "the data connection is not IPv4";
  } else if (net::dial_tcp(host, offer.port, std::min(s.deadline_ns, now_ns() + kDialNs), fd,
                           de) != DS4TP_OK) {
    dialed.ok = false;
    dialed.reason = de.message;
  } else {
    StandbyMsg proof = msg(StandbyKind::Proof);
    proof.cookie = s.cookie;
    if (send_msg(fd.get(), proof, s.deadline_ns, de) != DS4TP_OK) {
      dialed.ok = false;
      dialed.reason = de.message;
    }
  }
  if (int rc = send_msg(s.data_fd, dialed, s.deadline_ns, err)) return rc;
  if (!dialed.ok) {
    why_not = "the worker could not reach the standby listener: " + dialed.reason;
    return DS4TP_OK;
  }
  StandbyMsg ack;
  if (int rc = recv_msg(fd.get(), StandbyKind::Ack, ack, s.deadline_ns, err)) return rc;
  out = std::move(fd);
  return DS4TP_OK;
}

}  // namespace

int open_standby(const StandbySetup &s, net::Fd &out, std::string &why_not, Error &err) {
  out = net::Fd();
  why_not.clear();
  return s.rank == 0 ? leader_side(s, out, why_not, err) : worker_side(s, out, why_not, err);
}

}  // namespace ds4tp::transport
