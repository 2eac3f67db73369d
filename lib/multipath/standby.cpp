#include "multipath/standby.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "common/clock.hpp"
#include "common/test_hooks.hpp"
#include "net/endpoint.hpp"
#include "net/intake.hpp"
#include "wire/failover.hpp"

namespace ds4tp::multipath {
namespace {

using wire::StandbyKind;
using wire::StandbyMsg;

// Each dial gets this long at most, so an address that drops packets
// ends the set-up with a reason rather than holding bring-up.
constexpr uint64_t kDialNs = 2'000'000'000ull;

StandbyMsg msg(StandbyKind k) {
  StandbyMsg m;
  m.kind = uint16_t(k);
  return m;
}

int send_msg(int fd, const StandbyMsg &m, uint64_t deadline, Error &err) {
  uint8_t b[wire::kStandbyBytes];
  wire::encode_standby(m, b);
  return net::write_all(fd, b, sizeof b, deadline, "link set-up", err);
}

int recv_msg(int fd, StandbyKind want, StandbyMsg &m, uint64_t deadline, Error &err) {
  uint8_t b[wire::kStandbyBytes];
  if (int rc = net::read_exact(fd, b, sizeof b, deadline, "link set-up", err)) return rc;
  if (int rc = wire::decode_standby(b, sizeof b, m, err)) return rc;
  if (m.kind != uint16_t(want))
    return err.set(DS4TP_EPROTO, "link set-up: message kind {} where {} was due", m.kind,
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

// Takes the links that prove the cookie, each at its index; strangers are
// dropped. With rails, a link must arrive at its own rail's address.
class LinkDesk final : public net::IntakeHandler {
 public:
  LinkDesk(uint64_t cookie, const std::vector<std::string> &rails, std::vector<net::Fd> &out)
      : cookie_(cookie), rails_(rails), out_(out) {}
  void open(net::Visitor &v) override { v.need = wire::kStandbyBytes; }
  net::Verdict judge(net::Visitor &v, std::string &why) override {
    StandbyMsg m;
    Error e;
    if (wire::decode_standby(v.in.data(), v.in.size(), m, e) != DS4TP_OK) {
      why = "not one of this pair's links: " + e.message;
      return net::Verdict::kDrop;
    }
    if (m.kind != uint16_t(StandbyKind::Proof) || m.cookie != cookie_ ||
        m.index >= out_.size() || out_[m.index].valid()) {
      why = "a link without this pair's cookie, or one it has already";
      return net::Verdict::kDrop;
    }
    if (!rails_.empty()) {
      const std::string at = address_of(v.fd.get(), false);
      if (at != rails_[m.index]) {
        const auto it = std::find(rails_.begin(), rails_.end(), at);
        crossed_ = it == rails_.end()
                       ? fmt::format("the worker's rail {} ({}) reached this leader at {}, "
                                     "which is none of its rails",
                                     m.index, rails_[m.index], at)
                       : fmt::format("the worker's rail {} reached this leader's rail {} ({}): "
                                     "the ranks list their rails in another order (crossed)",
                                     m.index, it - rails_.begin(), at);
        why = crossed_;
        return net::Verdict::kDrop;
      }
    }
    out_[m.index] = std::move(v.fd);
    taken_++;
    return net::Verdict::kKeep;
  }
  bool done() const override { return taken_ == out_.size() || !crossed_.empty(); }
  const std::string &crossed() const { return crossed_; }

 private:
  uint64_t cookie_;
  const std::vector<std::string> &rails_;
  std::vector<net::Fd> &out_;
  size_t taken_ = 0;
  std::string crossed_;
};

int leader_side(const StandbySetup &s, std::vector<net::Fd> &out, std::string &why_not,
                Error &err) {
  const size_t count = s.rails.empty() ? 1 : s.rails.size();
  StandbyMsg offer = msg(StandbyKind::Offer);
  offer.count = uint16_t(count);
  net::Fd lfd;
  const std::string host = s.rails.empty() ? address_of(s.data_fd, false) : "0.0.0.0";
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
    why_not = dialed.reason;
    return DS4TP_OK;
  }
  std::vector<net::Fd> links(count);
  LinkDesk desk(s.cookie, s.rails, links);
  net::IntakeConfig ic;
  ic.what = s.rails.empty() ? "standby listener" : "rail listener";
  ic.max_pending = 16;
  ic.log = s.log;
  net::IntakeCounts counts;
  if (int rc = net::serve_intake(lfd.get(), desk, ic, s.deadline_ns, counts, err)) return rc;
  StandbyMsg ack = msg(StandbyKind::Ack);
  ack.ok = desk.crossed().empty();
  ack.reason = desk.crossed();
  if (int rc = send_msg(s.data_fd, ack, s.deadline_ns, err)) return rc;
  if (!ack.ok) {
    why_not = ack.reason;
    return DS4TP_OK;
  }
  out = std::move(links);
  return DS4TP_OK;
}

int worker_side(const StandbySetup &s, std::vector<net::Fd> &out, std::string &why_not,
                Error &err) {
  StandbyMsg offer;
  if (int rc = recv_msg(s.data_fd, StandbyKind::Offer, offer, s.deadline_ns, err)) return rc;
  if (!offer.ok) {
    why_not = offer.reason;
    return DS4TP_OK;
  }
  const size_t count = s.rails.empty() ? 1 : s.rails.size();
  StandbyMsg dialed = msg(StandbyKind::Dialed);
  std::vector<net::Fd> links(count);
  if (offer.count != count) {
    dialed.ok = false;
    dialed.reason = fmt::format("the leader lists {} rails, the worker {}", offer.count, count);
  }
  std::string peer = address_of(s.data_fd, true);
  if (!test_hooks().standby_host.empty()) peer = test_hooks().standby_host;  // tests only
  for (size_t i = 0; i < count && dialed.ok; i++) {
    const std::string host = s.rails.empty() ? peer : s.rails[i];
    Error de;
    if (host.empty()) {
      dialed.ok = false;
      dialed.reason = "the data connection is not IPv4";
    } else if (net::dial_tcp(host, offer.port, std::min(s.deadline_ns, now_ns() + kDialNs),
                             links[i], de) != DS4TP_OK) {
      dialed.ok = false;
      dialed.reason = (s.rails.empty() ? "the worker could not reach the standby listener: "
                                       : fmt::format("the worker could not reach rail {}: ", i)) +
                      de.message;
    } else {
      StandbyMsg proof = msg(StandbyKind::Proof);
      proof.cookie = s.cookie;
      proof.index = uint16_t(i);
      proof.count = uint16_t(count);
      if (send_msg(links[i].get(), proof, s.deadline_ns, de) != DS4TP_OK) {
        dialed.ok = false;
        dialed.reason = de.message;
      }
    }
  }
  if (int rc = send_msg(s.data_fd, dialed, s.deadline_ns, err)) return rc;
  if (!dialed.ok) {
    why_not = dialed.reason;
    return DS4TP_OK;
  }
  StandbyMsg ack;
  if (int rc = recv_msg(s.data_fd, StandbyKind::Ack, ack, s.deadline_ns, err)) return rc;
  if (!ack.ok) {
    why_not = ack.reason;
    return DS4TP_OK;
  }
  out = std::move(links);
  return DS4TP_OK;
}

}  // namespace

int open_links(const StandbySetup &s, std::vector<net::Fd> &out, std::string &why_not,
               Error &err) {
  out.clear();
  why_not.clear();
  if (s.rails.size() > size_t(wire::kMaxLinks) - 1)
    return err.set(DS4TP_EINVAL, "{} rails: at most {}", s.rails.size(), wire::kMaxLinks - 1);
  return s.rank == 0 ? leader_side(s, out, why_not, err) : worker_side(s, out, why_not, err);
}

}  // namespace ds4tp::multipath
