// The tcp group's heartbeat thread (group_beat.hpp).
#include "talk/group_beat.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <thread>

#include "common/status.hpp"
#include "common/clock.hpp"
#include "talk/silence.hpp"
#include "os/os.hpp"

namespace ds4tp::talk {

BeatReader::Event BeatReader::feed(const uint8_t *p, size_t n, size_t &used) {
  for (used = 0; used < n;) {
    const uint8_t b = p[used++];
    if (n_ > 0) {
      got_[n_++] = b;
      if (n_ == want_) {
        n_ = 0;
        return kNoticed;
      }
    } else if ((b == kNotice && notices_) || b == kVerdict) {
      got_[0] = b;
      want_ = b == kVerdict ? 4 : 3;
      n_ = 1;
    } else if (b != kBeat) {
      bad_ = b;
      return kBadByte;
    }
  }
  return kNone;
}

struct Heartbeat::Impl {
  struct Link {
    explicit Link(const HeartbeatLink &l) : at(l), reader(l.rank == 0) {}  // rank 0 sends notices
    HeartbeatLink at;
    BeatReader reader;
    bool open = true;
  };
  HeartbeatConfig cfg;
  Verdict verdict;
  std::vector<Link> links;
  int wake[2] = {-1, -1};
  std::atomic<bool> hub_gone{false};  // rank 0's connection closed (hub_gone())
  std::thread thread;

  void run() {
    os::name_this_thread("ds4tp-gbeat");
    const uint64_t beat = beat_period(cfg.beat_ns, cfg.silence_ns);
    uint64_t now = now_ns(), next_beat = now;
    SilenceJudge judge(cfg.silence_ns, int(links.size()), now);  // by index in links
    for (;;) {
      pollfd pf[kMaxBeatLinks + 1];
      int idx[kMaxBeatLinks + 1];
      int np = 0;
      pf[np++] = {wake[0], POLLIN, 0};
      for (int i = 0; i < int(links.size()); i++)
        if (links[size_t(i)].open) {
          idx[np] = i;
          pf[np++] = {links[size_t(i)].at.fd, POLLIN, 0};
        }
      const int ms = next_beat > now ? int((next_beat - now) / 1'000'000) + 1 : 0;
      if (poll(pf, nfds_t(np), ms) < 0 && errno != EINTR) return;
      if (pf[0].revents != 0) return;  // the destructor
      now = now_ns();
      for (int k = 1; k < np; k++)
        if (pf[k].revents != 0 && read_link(links[size_t(idx[k])], idx[k], judge, now)) return;
      if (now < next_beat) continue;
      next_beat = now + beat;
      for (auto &l : links)
        if (l.open) (void)os::send_nosignal(l.at.fd, &kBeat, 1);  // a full socket: it is not reading
      const int q = judge.beat(now, [&](int i) { return links[size_t(i)].open; });
      if (q >= 0) {
        decide(DS4TP_ETIMEDOUT,
               fmt::format("rank {} has not been heard for {} ms (stopped, frozen, or the link "
                           "to it is cut); rank {} gave up on it",
                           links[size_t(q)].at.rank, judge.quiet_for(q, now) / 1'000'000, cfg.rank),
               links[size_t(q)].at.rank);
        return;
      }
    }
  }

  // Takes what the link holds. true when it brought a verdict.
  bool read_link(Link &l, int index, SilenceJudge &judge, uint64_t now) {
    uint8_t buf[256];
    for (;;) {
      const ssize_t n = ::recv(l.at.fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        l.open = false;  // closed: the data links tell whether that matters
        if (l.at.rank == 0) hub_gone.store(true, std::memory_order_release);
        return false;
      }
      if (n < 0) return false;
      judge.heard(index, now);
      size_t used = 0;
      switch (l.reader.feed(buf, size_t(n), used)) {
        case BeatReader::kNone: break;
        case BeatReader::kNoticed: return notice(l.reader, l);
        case BeatReader::kBadByte:
          decide(DS4TP_EPROTO,
                 fmt::format("rank {} sent byte 0x{:02x} on its rendezvous connection (a "
                             "heartbeat or rank 0's notice expected)",
                             l.at.rank, l.reader.bad_byte()),
                 l.at.rank);
          return true;
      }
    }
  }

  bool notice(const BeatReader &r, const Link &from) {
    const int culprit = r.notice_rank(), code = r.notice_code(), finder = r.notice_finder();
    if (finder >= 0) {  // a verdict: rank 0 passes a rank's on to the others
      if (cfg.rank == 0) send_verdict(culprit, code, finder, from.at.rank);
      verdict(code, culprit, fmt::format("rank {} failed the group ({}): rank {} found it{}", culprit,
                                status_message(code), finder,
                                cfg.rank == 0 ? "" : "; rank 0 told rank " +
                                                         std::to_string(cfg.rank)));
      return true;
    }
    if (code == DS4TP_ETIMEDOUT)
      verdict(code, culprit, fmt::format("rank {} has not been heard by rank 0 for over {} ms (stopped, "
                                "frozen, or its link is cut); rank 0 told rank {}",
                                culprit, cfg.silence_ns / 1'000'000, cfg.rank));
    else
      verdict(code, culprit, fmt::format("rank {} failed ({}); rank 0 told rank {}", culprit,
                                status_message(code), cfg.rank));
    return true;
  }

  // A verdict on every link but to `skip` and the culprit (rank 0's
  // links), or to rank 0. Reads no state the beat thread writes, so any
  // thread may call it; a closed link just refuses the bytes.
  void send_verdict(int culprit, int code, int finder, int skip) const {
    const uint8_t msg[4] = {kVerdict, uint8_t(culprit), uint8_t(-code), uint8_t(finder)};
    for (const auto &l : links)
      if (l.at.rank != skip && l.at.rank != culprit)
        (void)os::send_nosignal(l.at.fd, msg, sizeof msg);
  }

  // Rank 0 first tells every other rank who failed, so all name it.
  void decide(int code, const std::string &why, int culprit) {
    if (cfg.rank == 0) {
      const uint8_t msg[3] = {kNotice, uint8_t(culprit), uint8_t(-code)};
      for (auto &l : links)
        if (l.open && l.at.rank != culprit) (void)os::send_nosignal(l.at.fd, msg, sizeof msg);
    }
    verdict(code, culprit, why);
  }
};

int Heartbeat::start(const HeartbeatConfig &cfg, Verdict verdict, std::unique_ptr<Heartbeat> &out,
                     Error &err) {
  std::unique_ptr<Heartbeat> h(new Heartbeat());
  h->impl_ = std::make_unique<Impl>();
  Impl &im = *h->impl_;
  im.cfg = cfg;
  im.verdict = std::move(verdict);
  for (const auto &l : cfg.links) im.links.emplace_back(l);
  if (!os::wake_open(im.wake))
    return err.set(DS4TP_EIO, "group heartbeat: wake-up handle: {}", std::strerror(errno));
  im.thread = std::thread([&im] { im.run(); });
  out = std::move(h);
  return DS4TP_OK;
}

void Heartbeat::tell(int culprit, int code) {
  if (impl_) impl_->send_verdict(culprit, code, impl_->cfg.rank, -1);
}

bool Heartbeat::hub_gone() const {
  return impl_ && impl_->hub_gone.load(std::memory_order_acquire);
}

Heartbeat::~Heartbeat() {
  if (!impl_) return;
  os::wake_signal(impl_->wake);
  if (impl_->thread.joinable()) impl_->thread.join();
  os::wake_close(impl_->wake);
}

}  // namespace ds4tp::talk
