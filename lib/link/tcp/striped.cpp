// The striped big gate (striped.hpp): every link's share moving at once,
// a lost rail recovered on link 0.
#include <poll.h>

#include <algorithm>
#include <new>

#include "common/clock.hpp"
#include "talk/peer_state.hpp"
#include "link/tcp/gate_stream.hpp"
#include "link/tcp/striped_impl.hpp"

namespace ds4tp::tcp {

// Link 0 carries, after its share, the gate's control messages: gate
// headers of the gate whose aux says what they are. kAck: "I have every
// share"; kResend | k: "link k is lost; here is my share k again" (its
// bytes follow). A gate is done on a rank once it has every share, sent
// its own, acknowledged, and read the peer's acknowledgement after any
// resend, so neither rank leaves a gate the other may still need.
constexpr uint32_t kAck = 0xA0000000u, kResend = 0xB0000000u;

int StripedLink::striped(uint32_t layer, uint64_t seq, const uint8_t *out, uint8_t *in,
                              uint64_t bytes, uint64_t started, Error &err) {
  const int n = plan_.links;
  // Outbound segments of a link: its share, then (link 0) control messages.
  struct Seg {
    uint8_t hdr[wire::kGateHeaderBytes];
    const uint8_t *body = nullptr;
    uint64_t total = 0, sent = 0;
  };
  struct Link {
    GateHeader mine;
    uint64_t offset = 0, length = 0;
    Seg seg[4];
    int segs = 1, at = 0;  // segments queued, the one being sent
    uint64_t last = 0;     // last progress either way (ns)
    bool dead = false;
  } links[wire::kMaxLinks];
  alignas(GateInbound) unsigned char rx_room[wire::kMaxLinks][sizeof(GateInbound)];
  GateInbound *rx[wire::kMaxLinks];
  for (int k = 0; k < n; k++) {
    Link &l = links[k];
    stripe_range(plan_, bytes, k, l.offset, l.length);
    l.mine = GateHeader{uint16_t(GateKind::Big), layer, uint32_t(k), seq, l.length};
    wire::encode_gate_header(l.mine, l.seg[0].hdr);
    l.seg[0].body = out + l.offset;
    l.seg[0].total = wire::kGateHeaderBytes + l.length;
    l.last = started;
    l.dead = dead_[k];
    rx[k] = new (rx_room[k]) GateInbound(l.mine, in + l.offset, l.seg[0].total);
  }
  auto queue = [&](uint32_t aux, const uint8_t *body, uint64_t len) {
    Link &l = links[0];
    Seg &s = l.seg[l.segs++];
    wire::encode_gate_header({uint16_t(GateKind::Big), layer, aux, seq, len}, s.hdr);
    s.body = body;
    s.total = wire::kGateHeaderBytes + len;
  };
  // Link 0's control messages in: a header, then a resend's bytes.
  uint8_t chdr[wire::kGateHeaderBytes];
  uint64_t cgot = 0, cbody = 0, cbody_got = 0;
  uint8_t *cdst = nullptr;
  bool acked = false, peer_acked = false, resent = false, peer_resent = false;
  int lost = -1;  // the link being recovered

  // Link 0 closing is the peer leaving; a rail's end is a lost link.
  os::PeerWatch watch;
  watch.watch_socket(fds_[0], link_name(0, standby_));
  talk::watch_peer(watch, cfg_.peer);
  os::Waiter w(policy_, &watch, 0, started);
  const uint64_t meet_ns = cfg_.arrival(true), progress_ns = cfg_.big_gate_timeout_ns;
  const uint64_t stall_ns = std::max<uint64_t>(cfg_.gate_timeout_ns, 1);
  uint64_t deadline = os::deadline_after(started, meet_ns);
  bool heard = false, met = false;  // met: the peer's heartbeats put it in the gate
  uint64_t heard_at = 0;  // links are judged from when the peer was first heard
  auto fail = [&](int k, int code, const char *what) {
    return err.set(code, "big gate (layer {}, seq {}) striped over {} links: link {} {} (sent "
                   "{} and received {} of its {} bytes)",
                   layer, seq, n, k, what, links[k].seg[0].sent, rx[k]->got,
                   links[k].seg[0].total);
  };
  // Link k is lost: this rank sends its share k again on link 0.
  auto recover = [&](int k) {
    lost = k;
    links[k].dead = true;
    lost_[k] = true;
    acked = false;
    peer_acked = false;  // the peer acknowledges again after its resend
    if (!resent) queue(kResend | uint32_t(k), out + links[k].offset, links[k].length);
    resent = true;
  };
  for (;;) {
    bool progress = false;
    const uint64_t now = w.now();
    for (int k = 0; k < n; k++) {
      Link &l = links[k];
      if (l.dead) continue;
      const int fd = fds_[size_t(k)];
      while (l.at < l.segs) {
        Seg &s = l.seg[l.at];
        const ssize_t r = send_stream(fd, s.hdr, s.body, s.sent, s.total);
        if (r > 0) {
          s.sent += uint64_t(r);
          wrote_[k] += uint64_t(r);
          progress = true;
          l.last = now;
          if (s.sent == s.total) l.at++;
          if (k == 0 && cut_at_ != 0 &&
              l.seg[0].sent >= std::min(cut_at_ + wire::kGateHeaderBytes, l.seg[0].total)) {
            ::shutdown(fd, SHUT_RDWR);  // the test hook: link 0 lost mid share
            cut_at_ = 0;
          }
          continue;
        }
        if (r < 0 && !retry_later(errno)) {
          if (k != 0 && lost < 0) recover(k);
          else return fail(k, DS4TP_EPEERCLOSED, std::strerror(errno));
        }
        break;
      }
      if (l.dead) continue;
      if (rx[k]->got < l.seg[0].total) {
        ssize_t r;
        const int rc = rx[k]->read(fd, r, err);
        if (r > 0) read_[k] += uint64_t(r);  // counted even where its header is refused
        if (rc != DS4TP_OK) return rc;
        if (r > 0) {
          progress = heard = true;
          l.last = now;
        } else if ((r == 0 || !retry_later(errno)) && k != 0 && lost < 0) {
          recover(k);
        } else if (r == 0) {
          return fail(k, DS4TP_EPEERCLOSED, "closed by the peer");
        } else if (!retry_later(errno)) {
          return fail(k, DS4TP_EPEERCLOSED, std::strerror(errno));
        }
      }
    }
    // Link 0's control messages, once the peer's share 0 is in, until its
    // acknowledgement with every share in: what follows is the next gate's.
    auto shares_in = [&] {
      for (int k = 0; k < n; k++)
        if (!links[k].dead && rx[k]->got < links[k].seg[0].total) return false;
      return true;
    };
    while (rx[0]->got == links[0].seg[0].total &&
           !(peer_acked && cgot == 0 && shares_in() && (lost < 0 || peer_resent))) {
      ssize_t r;
      if (cgot < sizeof chdr) {
        r = ::recv(fds_[0], chdr + cgot, sizeof chdr - cgot, MSG_DONTWAIT);
      } else {
        r = ::recv(fds_[0], cdst + cbody_got, cbody - cbody_got, MSG_DONTWAIT);
      }
      if (r == 0) return fail(0, DS4TP_EPEERCLOSED, "closed by the peer");
      if (r < 0) {
        if (!retry_later(errno)) return fail(0, DS4TP_EPEERCLOSED, std::strerror(errno));
        break;
      }
      progress = heard = true;
      if (cgot < sizeof chdr) {
        cgot += uint64_t(r);
        if (cgot < sizeof chdr) continue;
        GateHeader h;
        if (int rc = wire::decode_gate_header(chdr, sizeof chdr, h, err)) return rc;
        const uint32_t k = h.aux & 0xFFFFu;
        if (h.kind != uint16_t(GateKind::Big) || h.layer != layer || h.seq != seq ||
            (h.aux != kAck && ((h.aux & 0xFFFF0000u) != kResend || k == 0 || int(k) >= n ||
                               h.bytes != links[k].length)))
          return err.set(DS4TP_EDESYNC, "big gate (layer {}, seq {}) striped over {} links: "
                         "link 0 carried a control message this gate does not expect "
                         "(layer {}, aux 0x{:x}, seq {}, {} bytes)",
                         layer, seq, n, h.layer, h.aux, h.seq, h.bytes);
        if (h.aux == kAck) {
          peer_acked = true;
          cgot = 0;
          continue;
        }
        // Two links lost in one gate (each rank lost another): neither
        // rank has every share, so the striped links fail as a whole.
        if (lost >= 0 && int(k) != lost)
          return err.set(DS4TP_EIO, "big gate (layer {}, seq {}) striped over {} links: the "
                         "peer lost link {} while this rank lost link {}",
                         layer, seq, n, k, lost);
        peer_acked = false;  // an acknowledgement before it is void
        peer_resent = true;
        if (lost < 0) recover(int(k));
        cdst = in + links[k].offset;
        cbody = h.bytes;
        cbody_got = 0;
      } else {
        cbody_got += uint64_t(r);
      }
      if (cgot == sizeof chdr && cbody_got == cbody) cgot = cbody = cbody_got = 0, cdst = nullptr;
    }
    // A link that moved nothing for a gate deadline while it still owed
    // bytes is lost (link 0 carries the recovery: its loss fails the gate).
    if (heard && heard_at == 0) heard_at = now;
    for (int k = 1; k < n && lost < 0 && heard_at != 0; k++) {
      const Link &l = links[k];
      const bool owed = !l.dead && (l.at < l.segs || rx[k]->got < l.seg[0].total);
      if (owed && now - std::max(l.last, heard_at) >= stall_ns) recover(k);
    }
    bool all_in = cgot == 0 && shares_in() && (lost < 0 || peer_resent);
    if (all_in && !acked) {
      queue(kAck, nullptr, 0);
      acked = true;
      continue;
    }
    bool all_out = true;
    for (int k = 0; k < n; k++) all_out = all_out && (links[k].dead || links[k].at == links[k].segs);
    if (all_in && all_out && peer_acked) break;
    if (progress) {
      w.progress();
      deadline = heard || met ? w.last_progress() + progress_ns : deadline;
      continue;
    }
    // A peer whose heartbeats say it entered this gate has sent its shares:
    // their loss is told by the progress deadline (as a plain tcp gate's).
    if (!heard && !met && cfg_.peer != nullptr &&
        cfg_.peer->peer_in_gate(uint16_t(GateKind::Big), seq)) {
      met = true;
      deadline = os::deadline_after(w.now(), progress_ns);
    }
    const int rc = w.idle(deadline, [&](uint64_t) {
      // Only links that still owe bytes (link 0: its control messages may
      // come until the end): a finished rail that hangs up must not wake
      // this wait over and over. poll skips a negative fd.
      pollfd p[wire::kMaxLinks];
      for (int k = 0; k < n; k++) {
        const Link &l = links[k];
        const bool in_due = k == 0 || rx[k]->got < l.seg[0].total, out_due = l.at < l.segs;
        p[k] = {l.dead || !(in_due || out_due) ? -1 : fds_[size_t(k)],
                short((in_due ? POLLIN : 0) | (out_due ? POLLOUT : 0)), 0};
      }
      ::poll(p, nfds_t(n), std::min(ms_left(deadline), kLivenessSliceMs));
    });
    if (rc == DS4TP_ETIMEDOUT)
      return err.set(rc, "big gate (layer {}, seq {}) striped over {} links timed out: no "
                     "progress for {} ms",
                     layer, seq, n, (heard || met ? progress_ns : meet_ns) / 1000000);
    if (rc != DS4TP_OK)
      return err.set(watch.code(), "big gate (layer {}, seq {}) striped over {} links: the "
                     "peer {}",
                     layer, seq, n, watch.why());
  }
  if (lost >= 0) drop_link(lost);
  return DS4TP_OK;
}

std::unique_ptr<link::Link> make_striped_link(std::vector<net::Fd> links,
                                                  const wire::RailPlan &plan,
                                                  const DataConfig &cfg, const BigPlan &big,
                                                  const Logger &log) {
  return std::make_unique<StripedLink>(std::move(links), plan, cfg, big, log,
                                            std::vector<int>{});
}

}  // namespace ds4tp::tcp
