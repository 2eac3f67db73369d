#include "net/intake.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "common/clock.hpp"
#include "net/endpoint.hpp"

namespace ds4tp::net {
namespace {

using Visitors = std::vector<std::unique_ptr<Visitor>>;

class Intake {
 public:
  Intake(int lfd, IntakeHandler &h, const IntakeConfig &cfg, IntakeCounts &counts)
      : lfd_(lfd), h_(h), cfg_(cfg), counts_(counts) {}

  int serve(uint64_t deadline, Error &err) {
    std::vector<pollfd> pfds;
    while (!h_.done()) {
      const uint64_t now = now_ns();
      if (now >= deadline) return err.set(DS4TP_ETIMEDOUT, "{}: deadline passed", cfg_.what);
      if (int rc = take_all(now, deadline, err)) return rc;
      if (h_.done()) break;
      h_.tick(now);
      uint64_t wake = std::min<uint64_t>(deadline, now + 100'000'000);
      pfds.assign(1, pollfd{lfd_, POLLIN, 0});
      for (size_t i = 0; i < vs_.size();) {
        Visitor &v = *vs_[i];
        if (now >= v.deadline_ns) {
          drop(i, "no complete message in time");
          continue;
        }
        wake = std::min(wake, v.deadline_ns);
        short ev = v.in.size() < v.need ? POLLIN : 0;
        if (v.sent < v.out.size()) ev |= POLLOUT;
        pfds.push_back(pollfd{v.fd.get(), ev, 0});
        i++;
      }
      const int ms = int((wake - std::min(wake, now)) / 1'000'000 + 1);
      if (poll(pfds.data(), nfds_t(pfds.size()), ms) < 0 && errno != EINTR)
        return err.set(DS4TP_EIO, "{}: poll: {}", cfg_.what, std::strerror(errno));
      // Visit back to front so a drop does not shift the ones not yet seen.
      for (size_t k = pfds.size() - 1; k >= 1; k--)
        if (pfds[k].revents) visit(k - 1);
    }
    return DS4TP_OK;
  }

 private:
  // Accepts every pending connection; a full table evicts to make room.
  int take_all(uint64_t now, uint64_t deadline, Error &err) {
    for (;;) {
      Fd fd;
      auto v = std::make_unique<Visitor>();
      Error e;
      if (accept_tcp(lfd_, fd, v->host, v->port, e) != DS4TP_OK) {
        if ((errno == EMFILE || errno == ENFILE) && !vs_.empty()) {
          evict("the process is out of file descriptors");
          continue;
        }
        return err.set(e.code, "{}: {}", cfg_.what, e.message);
      }
      if (!fd.valid()) return DS4TP_OK;
      counts_.accepted++;
      if (vs_.size() >= cfg_.max_pending) evict("too many connections pending");
      v->fd = std::move(fd);
      v->deadline_ns = std::min<uint64_t>(deadline, now + cfg_.visit_ns);
      h_.open(*v);
      vs_.push_back(std::move(v));
      visit(vs_.size() - 1);  // what it sent already is judged before more come in
      if (h_.done()) return DS4TP_OK;
    }
  }

  // The oldest of the least advanced: a real peer races through its
  // stages in milliseconds; strangers idle in the first.
  void evict(const char *why) {
    size_t pick = 0;
    for (size_t i = 1; i < vs_.size(); i++)
      if (vs_[i]->stage < vs_[pick]->stage) pick = i;
    drop(pick, why);
  }

  void drop(size_t i, const std::string &why) {
    Visitor &v = *vs_[i];
    if (v.fd.valid() && v.sent < v.out.size()) {
      size_t done = v.sent;  // a refusal the peer may read; what does not fit is lost
      send_until_blocked(v.fd.get(), v.out.data(), v.out.size(), done);
    }
    cfg_.log.warn("{}: dropped the connection from {}: {}", cfg_.what, v.label(), why);
    counts_.dropped++;
    vs_.erase(vs_.begin() + std::ptrdiff_t(i));
  }

  void visit(size_t i) {
    Visitor &v = *vs_[i];
    for (;;) {
      if (v.sent < v.out.size()) {
        size_t done = v.sent;
        if (int e = send_until_blocked(v.fd.get(), v.out.data(), v.out.size(), done))
          return drop(i, std::string("send: ") + std::strerror(e));
        v.sent = done;
      }
      if (v.in.size() >= v.need) return;  // only sending
      const size_t have = v.in.size();
      v.in.resize(v.need);
      const ssize_t n = ::recv(v.fd.get(), v.in.data() + have, v.need - have, 0);
      v.in.resize(have + size_t(std::max<ssize_t>(n, 0)));
      if (n == 0)
        return drop(i, fmt::format("closed after {} of {} bytes", have, v.need));
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        return drop(i, std::string("recv: ") + std::strerror(errno));
      }
      if (v.in.size() < v.need) continue;
      std::string why;
      const Verdict verdict = h_.judge(v, why);
      if (verdict == Verdict::kDrop) return drop(i, why);
      if (verdict == Verdict::kKeep) {
        vs_.erase(vs_.begin() + std::ptrdiff_t(i));
        return;
      }
      v.in.clear();  // kMore: the next message
    }
  }

  int lfd_;
  IntakeHandler &h_;
  const IntakeConfig &cfg_;
  IntakeCounts &counts_;
  Visitors vs_;
};

}  // namespace

int serve_intake(int lfd, IntakeHandler &h, const IntakeConfig &cfg, uint64_t deadline_ns,
                 IntakeCounts &counts, Error &err) {
  Intake in(lfd, h, cfg, counts);
  return in.serve(deadline_ns, err);
}

}  // namespace ds4tp::net
