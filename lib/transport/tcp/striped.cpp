#include "transport/tcp/striped.hpp"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "common/clock.hpp"
#include "os/wait.hpp"
#include "talk/peer_state.hpp"
#include "transport/tcp/gate_stream.hpp"
#include "transport/tcp/transport.hpp"

namespace ds4tp::tcp {

void stripe_range(const wire::RailPlan &plan, uint64_t bytes, int k, uint64_t &offset,
                  uint64_t &length) {
  constexpr uint64_t kAlign = 4096;
  offset = 0;
  length = 0;
  for (int i = 0; i <= k; i++) {
    offset += length;
    length = bytes * plan.share[i] / 1000 / kAlign * kAlign;
  }
  if (k == plan.links - 1) length = bytes - offset;
}

namespace {

using wire::GateHeader;
using wire::GateKind;

class StripedTransport final : public Transport {
 public:
  StripedTransport(std::vector<net::Fd> links, const wire::RailPlan &plan, const DataConfig &cfg,
                   const BigPlan &big)
      : plan_(plan), cfg_(cfg) {
    for (auto &l : links) fds_.push_back(l.get());
    // The row link's socket goes to its tcp transport; the rest stay here.
    row_ = make_tcp_transport(std::move(links[plan.row_link]), cfg, big);
    for (size_t k = 0; k < links.size(); k++)
      if (links[k].valid()) {
        net::set_nonblocking(links[k].get());
        net::tune_data_socket(links[k].get());
        rest_.push_back(std::move(links[k]));
      }
    os::set_spin(policy_, budget_, 0, false);  // multi-MiB gates: block at once
    policy_.grace_ns = 2'000'000;  // after a hang-up, bytes sent before it still drain
  }

  const char *name() const override { return "tcp"; }
  int attach(uint8_t *base, const slab::Layout &layout, Error &err) override {
    return row_->attach(base, layout, err);
  }
  void detach() override { row_->detach(); }

  int gate(uint32_t layer, uint32_t gate, uint32_t slot, uint64_t seq, uint64_t start_ns,
           Error &err) override {
    const int rc = row_->gate(layer, gate, slot, seq, start_ns, err);
    seen_ns_ = row_->peer_seen_ns();
    return rc;
  }
  int batch_gate(uint32_t index, uint32_t rows, uint64_t seq, uint64_t start_ns,
                 Error &err) override {
    const int rc = row_->batch_gate(index, rows, seq, start_ns, err);
    seen_ns_ = row_->peer_seen_ns();
    return rc;
  }
  int big_gate(uint32_t layer, uint64_t seq, const void *out, void *in, uint64_t bytes,
               uint64_t start_ns, Error &err) override {
    if (bytes < kStripeMinBytes) {
      const int rc = row_->big_gate(layer, seq, out, in, bytes, start_ns, err);
      seen_ns_ = row_->peer_seen_ns();
      return rc;
    }
    seen_ns_ = 0;
    return striped(layer, seq, static_cast<const uint8_t *>(out), static_cast<uint8_t *>(in),
                   bytes, start_ns, err);
  }

 private:
  int striped(uint32_t layer, uint64_t seq, const uint8_t *out, uint8_t *in, uint64_t bytes,
              uint64_t started, Error &err);

  wire::RailPlan plan_;
  DataConfig cfg_;
  std::vector<int> fds_;  // by link; the row link's is row_'s
  std::unique_ptr<Transport> row_;
  std::vector<net::Fd> rest_;
  os::WaitPolicy policy_;
  os::SpinBudget budget_;
};

int StripedTransport::striped(uint32_t layer, uint64_t seq, const uint8_t *out, uint8_t *in,
                              uint64_t bytes, uint64_t started, Error &err) {
  const int n = plan_.links;
  struct Link {
    GateHeader mine;
    uint8_t hdr[wire::kGateHeaderBytes];
    uint64_t offset = 0, total = 0, sent = 0;
  } links[wire::kMaxLinks];
  // The receiving halves live apart: a GateInbound may point into itself.
  alignas(GateInbound) unsigned char rx_room[wire::kMaxLinks][sizeof(GateInbound)];
  GateInbound *rx[wire::kMaxLinks];
  for (int k = 0; k < n; k++) {
    uint64_t length = 0;
    stripe_range(plan_, bytes, k, links[k].offset, length);
    links[k].mine = GateHeader{uint16_t(GateKind::Big), layer, uint32_t(k), seq, length};
    wire::encode_gate_header(links[k].mine, links[k].hdr);
    links[k].total = wire::kGateHeaderBytes + length;
    rx[k] = new (rx_room[k]) GateInbound(links[k].mine, in + links[k].offset, links[k].total);
  }
  os::PeerWatch watch;
  for (int k = 0; k < n; k++) watch.watch_socket(fds_[size_t(k)], "rail");
  talk::watch_peer(watch, cfg_.peer);
  os::Waiter w(policy_, &watch, 0, started);
  const uint64_t meet_ns = cfg_.arrival(true), progress_ns = cfg_.big_gate_timeout_ns;
  uint64_t deadline = os::deadline_after(started, meet_ns);
  bool heard = false;
  auto fail = [&](int k, int code, const char *what) {
    return err.set(code, "big gate (layer {}, seq {}) striped over {} links: link {} {} (sent "
                   "{} and received {} of its {} bytes)",
                   layer, seq, n, k, what, links[k].sent, rx[k]->got, links[k].total);
  };
  for (;;) {
    bool progress = false, done = true;
    for (int k = 0; k < n; k++) {
      Link &l = links[k];
      const int fd = fds_[size_t(k)];
      if (l.sent < l.total) {
        const ssize_t r = send_stream(fd, l.hdr, out + l.offset, l.sent, l.total);
        if (r > 0) {
          l.sent += uint64_t(r);
          progress = true;
        } else if (r < 0 && !retry_later(errno)) {
          return fail(k, DS4TP_EPEERCLOSED, std::strerror(errno));
        }
      }
      if (rx[k]->got < l.total) {
        ssize_t r;
        if (int rc = rx[k]->read(fd, r, err)) return rc;
        if (r > 0) {
          progress = heard = true;
        } else if (r == 0) {
          return fail(k, DS4TP_EPEERCLOSED, "closed by the peer");
        } else if (!retry_later(errno)) {
          return fail(k, DS4TP_EPEERCLOSED, std::strerror(errno));
        }
      }
      done = done && l.sent == l.total && rx[k]->got == l.total;
    }
    if (done) return DS4TP_OK;
    if (progress) {
      w.progress();
      deadline = heard ? w.last_progress() + progress_ns : deadline;
      continue;
    }
    const int rc = w.idle(deadline, [&](uint64_t) {
      pollfd p[wire::kMaxLinks];
      for (int k = 0; k < n; k++)
        p[k] = {fds_[size_t(k)],
                short((rx[k]->got < links[k].total ? POLLIN : 0) |
                      (links[k].sent < links[k].total ? POLLOUT : 0)),
                0};
      ::poll(p, nfds_t(n), std::min(ms_left(deadline), kLivenessSliceMs));
    });
    if (rc == DS4TP_ETIMEDOUT)
      return err.set(rc, "big gate (layer {}, seq {}) striped over {} links timed out: no "
                     "progress for {} ms",
                     layer, seq, n, (heard ? progress_ns : meet_ns) / 1000000);
    if (rc != DS4TP_OK)
      return err.set(watch.code(), "big gate (layer {}, seq {}) striped over {} links: the "
                     "peer {}",
                     layer, seq, n, watch.why());
  }
}

}  // namespace

std::unique_ptr<Transport> make_striped_transport(std::vector<net::Fd> links,
                                                  const wire::RailPlan &plan,
                                                  const DataConfig &cfg, const BigPlan &big) {
  return std::make_unique<StripedTransport>(std::move(links), plan, cfg, big);
}

}  // namespace ds4tp::tcp
