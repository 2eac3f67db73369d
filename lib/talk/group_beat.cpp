// The tcp group's heartbeat thread (group_beat.hpp).
#include "talk/group_beat.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

#include "common/status.hpp"
#include "common/clock.hpp"
#include "talk/silence.hpp"
#include "wire/codec.hpp"
#include "os/os.hpp"

namespace ds4tp::talk {

using wire::get_u32;
using wire::get_u64;
using wire::put_u32;
using wire::put_u64;

BeatReader::Event BeatReader::feed(const uint8_t *p, size_t n, size_t &used) {
  for (used = 0; used < n;) {
    const uint8_t b = p[used++];
    if (n_ == 0) {
      const bool beat = b == (hub_ ? kBeats : kBeat);
      if (!beat && !(b == kNotice && hub_) && b != kVerdict) {
        bad_ = b;
        return kBadByte;
      }
      want_ = b == kVerdict ? 5 : b == kNotice ? 3 : b == kBeat ? kBeatBytes : 2;
      got_[n_++] = b;
      continue;
    }
    got_[n_++] = b;
    if (got_[0] == kBeats && n_ == 2) {  // the rank count: the beat's length
      if (b == 0 || b > kMaxBeatLinks) {
        bad_ = b;
        n_ = 0;
        return kBadByte;
      }
      want_ = beats_bytes(b);
    }
    if (got_[0] == kVerdict && n_ == 5) {  // the reason's length
      if (b > kMaxReason) {
        bad_ = b;
        n_ = 0;
        return kBadByte;
      }
      want_ = 5 + b;
    }
    if (n_ < want_) continue;
    n_ = 0;
    if (complete()) return kNoticed;
  }
  return kNone;
}

bool BeatReader::complete() {
  if (got_[0] == kBeat) {
    counts_[0] = get_u32(got_ + 1);
    count_n_ = 1;
    sent_ = get_u64(got_ + 5);
    return false;
  }
  if (got_[0] == kBeats) {
    count_n_ = got_[1];
    for (int r = 0; r < count_n_; r++) counts_[r] = get_u32(got_ + 2 + 4 * r);
    const uint8_t *t = got_ + 2 + 4 * count_n_;
    round_ = {get_u64(t), get_u64(t + 8), get_u64(t + 16), 0};
    return false;
  }
  return true;  // a notice or a verdict
}

std::string BeatReader::notice_reason() const {
  if (got_[0] != kVerdict) return {};
  return std::string(reinterpret_cast<const char *>(got_ + 5), got_[4]);
}

struct Heartbeat::Impl {
  struct Link {
    explicit Link(const HeartbeatLink &l) : at(l), reader(l.rank == 0) {}  // rank 0's beats and notices
    HeartbeatLink at;
    BeatReader reader;
    bool open = true;
    // The tail of a message the socket took only part of (it was nearly
    // full): sent before anything else, so messages never interleave.
    uint8_t rest[kMaxBeatMessage] = {};
    size_t rest_n = 0;
    // Rank 0: the rank's last beat, its send time (its clock) and when
    // rank 0 read it, echoed in rank 0's next beat to it.
    uint64_t beat_sent = 0, beat_read = 0;
  };
  HeartbeatConfig cfg;
  Verdict verdict;
  std::vector<Link> links;
  int wake[2] = {-1, -1};
  std::atomic<bool> hub_gone{false};  // rank 0's connection closed (hub_gone())
  // Each rank's collectives entered, as the beats last said (entered()).
  std::atomic<uint32_t> entered[kMaxBeatLinks] = {};
  // A rank's last kClockRounds rounds with rank 0 (the bring-up's first),
  // on the beat thread, and their estimate for any thread.
  ClockRound rounds[kClockKept] = {};
  uint64_t round_n = 0;
  uint64_t last_echo = 0;  // the echo taken last (a beat repeats it until this rank beats again)
  std::atomic<int64_t> offset_ns{0};
  std::atomic<uint64_t> uncertainty_ns{UINT64_MAX};  // max: not measured
  // Sends come from the beat thread and from tell() on the caller's.
  mutable std::mutex send_mu;
  std::thread thread;

  // Sends `msg` whole on l, or its tail later (its rest), or nothing when
  // an earlier tail is still waiting: a socket that full has a peer not
  // reading, whose silence the judges see. Under send_mu.
  void send_whole(Link &l, const uint8_t *msg, size_t len) const {
    if (l.rest_n > 0) {
      const ssize_t k = os::send_nosignal(l.at.fd, l.rest, l.rest_n);
      if (k > 0) {
        std::memmove(l.rest, l.rest + k, l.rest_n - size_t(k));
        l.rest_n -= size_t(k);
      }
      if (l.rest_n > 0) return;
    }
    const ssize_t k = os::send_nosignal(l.at.fd, msg, len);
    if (k > 0 && size_t(k) < len) {
      std::memcpy(l.rest, msg + k, len - size_t(k));
      l.rest_n = len - size_t(k);
    }
  }

  uint32_t own() const {
    return cfg.entered != nullptr ? cfg.entered->load(std::memory_order_relaxed) : 0;
  }
  // This rank's beat: its count and clock to rank 0; rank 0's, every
  // rank's count and the clock round of that rank's last beat.
  void beat_all() {
    uint8_t msg[kMaxBeatMessage];
    std::lock_guard<std::mutex> g(send_mu);
    if (cfg.rank != 0) {
      msg[0] = kBeat;
      put_u32(msg + 1, own());
      put_u64(msg + 5, now_ns());
      for (auto &l : links)
        if (l.open) send_whole(l, msg, kBeatBytes);
      return;
    }
    entered[0].store(own(), std::memory_order_relaxed);
    msg[0] = kBeats;
    msg[1] = uint8_t(cfg.size);
    for (int r = 0; r < cfg.size; r++)
      put_u32(msg + 2 + 4 * r, entered[r].load(std::memory_order_relaxed));
    uint8_t *t = msg + 2 + 4 * cfg.size;
    for (auto &l : links) {
      if (!l.open) continue;
      put_u64(t, l.beat_sent);
      put_u64(t + 8, l.beat_read);
      put_u64(t + 16, now_ns());
      send_whole(l, msg, beats_bytes(cfg.size));
    }
  }

  // Rank 0's beat echoed this rank's last one: a round, read at `now`.
  void take_round(const ClockRound &echo, uint64_t now) {
    if (echo.t0 == 0 || echo.t1 == 0) return;  // it had not heard this rank yet
    ClockRound r = echo;
    r.t3 = now;
    rounds[round_n++ % kClockKept] = r;
    const ClockOffset o = clock_offset(rounds, kClockKept);
    offset_ns.store(o.offset_ns, std::memory_order_relaxed);
    uncertainty_ns.store(o.uncertainty_ns, std::memory_order_release);
  }

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
      beat_all();
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
      const BeatReader::Event e = l.reader.feed(buf, size_t(n), used);
      take_counts(l, now);
      switch (e) {
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

  // A beat's counts: a rank's own (rank 0 keeps it), or every rank's
  // from rank 0 (this rank's own is its own to tell).
  // And the clock: rank 0 keeps a rank's beat's send time to echo; a
  // rank takes rank 0's echo as a round. `now`: when the bytes were read.
  void take_counts(Link &l, uint64_t now) {
    const BeatReader &r = l.reader;
    if (r.count_n() == 1 && cfg.rank == 0 && l.at.rank > 0 && l.at.rank < kMaxBeatLinks) {
      entered[l.at.rank].store(r.counts()[0], std::memory_order_relaxed);
      if (r.sent() != l.beat_sent) {  // a new beat (the beat thread alone touches these)
        l.beat_sent = r.sent();
        l.beat_read = now;
      }
    }
    if (l.at.rank == 0) {
      for (int q = 0; q < r.count_n() && q < kMaxBeatLinks; q++)
        if (q != cfg.rank) entered[q].store(r.counts()[q], std::memory_order_relaxed);
      if (r.count_n() > 0 && r.round().t0 != last_echo) {
        last_echo = r.round().t0;
        take_round(r.round(), now);
      }
    }
  }

  bool notice(const BeatReader &r, const Link &from) {
    const int culprit = r.notice_rank(), code = r.notice_code(), finder = r.notice_finder();
    if (finder >= 0) {  // a verdict: rank 0 passes a rank's on to the others
      const std::string reason = r.notice_reason();
      if (cfg.rank == 0) send_verdict(culprit, code, finder, reason, from.at.rank);
      verdict(code, culprit,
              fmt::format("rank {} failed the group ({}): rank {} found it{}{}", culprit,
                          status_message(code), finder, reason.empty() ? "" : ": " + reason,
                          cfg.rank == 0 ? "" : "; rank 0 told rank " + std::to_string(cfg.rank)));
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

  // A verdict on every link but to `skip` (rank 0's links), or to rank 0.
  // The culprit is told too: a rank that is alive but late (its data stuck
  // on the way, or not yet in the call) learns the cause, not a deadline.
  // Reads no state the beat thread writes, so any thread may call it; a
  // closed link just refuses the bytes.
  void send_verdict(int culprit, int code, int finder, const std::string &why, int skip) {
    uint8_t msg[5 + kMaxReason] = {kVerdict, uint8_t(culprit), uint8_t(-code), uint8_t(finder)};
    const size_t len = std::min<size_t>(why.size(), kMaxReason);
    msg[4] = uint8_t(len);
    std::memcpy(msg + 5, why.data(), len);
    std::lock_guard<std::mutex> g(send_mu);
    for (auto &l : links)
      if (l.at.rank != skip) send_whole(l, msg, 5 + len);
  }

  // Rank 0 first tells every other rank who failed, so all name it.
  void decide(int code, const std::string &why, int culprit) {
    if (cfg.rank == 0) {
      const uint8_t msg[3] = {kNotice, uint8_t(culprit), uint8_t(-code)};
      std::lock_guard<std::mutex> g(send_mu);
      for (auto &l : links)
        if (l.open && l.at.rank != culprit) send_whole(l, msg, sizeof msg);
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
  for (size_t i = 0; i < cfg.clock_rounds.size() && i < size_t(kClockKept); i++)
    im.rounds[im.round_n++] = cfg.clock_rounds[i];
  if (im.round_n > 0) {
    const ClockOffset o = clock_offset(im.rounds, kClockKept);
    im.offset_ns.store(o.offset_ns, std::memory_order_relaxed);
    im.uncertainty_ns.store(o.uncertainty_ns, std::memory_order_release);
  }
  if (!os::wake_open(im.wake))
    return err.set(DS4TP_EIO, "group heartbeat: wake-up handle: {}", std::strerror(errno));
  im.thread = std::thread([&im] { im.run(); });
  out = std::move(h);
  return DS4TP_OK;
}

void Heartbeat::tell(int culprit, int code, const std::string &why) {
  if (impl_) impl_->send_verdict(culprit, code, impl_->cfg.rank, why, -1);
}

bool Heartbeat::hub_gone() const {
  return impl_ && impl_->hub_gone.load(std::memory_order_acquire);
}

uint32_t Heartbeat::entered(int rank) const {
  if (!impl_ || rank < 0 || rank >= kMaxBeatLinks) return 0;
  if (rank == impl_->cfg.rank) return impl_->own();
  return impl_->entered[rank].load(std::memory_order_relaxed);
}

bool Heartbeat::clock(ClockOffset &out) const {
  if (!impl_) return false;
  const uint64_t u = impl_->uncertainty_ns.load(std::memory_order_acquire);
  if (u == UINT64_MAX) return false;
  out.offset_ns = impl_->offset_ns.load(std::memory_order_relaxed);
  out.uncertainty_ns = u;
  out.measured = true;
  return true;
}

Heartbeat::~Heartbeat() {
  if (!impl_) return;
  os::wake_signal(impl_->wake);
  if (impl_->thread.joinable()) impl_->thread.join();
  os::wake_close(impl_->wake);
}

}  // namespace ds4tp::talk
