#include "link/tcp/rails.hpp"

#include <algorithm>
#include <vector>

#include "common/clock.hpp"
#include "net/socket.hpp"
#include "multipath/rail_share.hpp"

namespace ds4tp::tcp {
namespace {

constexpr int kPings = 4;
constexpr size_t kPingBytes = 32;

int leader_measure(int fd, uint64_t deadline, uint64_t &rtt_ns, uint32_t &mbit, Error &err) {
  uint8_t ping[kPingBytes] = {'D', '4', 'P', 'G'};
  rtt_ns = UINT64_MAX;
  for (int i = 0; i < kPings; i++) {
    const uint64_t t0 = now_ns();
    if (int rc = net::write_all(fd, ping, sizeof ping, deadline, "rail ping", err)) return rc;
    if (int rc = net::read_exact(fd, ping, sizeof ping, deadline, "rail ping", err)) return rc;
    rtt_ns = std::min(rtt_ns, now_ns() - t0);
  }
  std::vector<uint8_t> sample(kRailSampleBytes, 0x5a);
  const uint64_t t0 = now_ns();
  if (int rc = net::write_all(fd, sample.data(), sample.size(), deadline, "rail sample", err))
    return rc;
  if (int rc = net::read_exact(fd, ping, sizeof ping, deadline, "rail sample", err)) return rc;
  const uint64_t ns = std::max<uint64_t>(now_ns() - t0, 1000);
  mbit = uint32_t(std::max<uint64_t>(1, kRailSampleBytes * 8 * 1000 / ns));  // bits/us = Mbit/s
  return DS4TP_OK;
}

int worker_echo(int fd, uint64_t deadline, Error &err) {
  uint8_t ping[kPingBytes];
  for (int i = 0; i < kPings; i++) {
    if (int rc = net::read_exact(fd, ping, sizeof ping, deadline, "rail ping", err)) return rc;
    if (int rc = net::write_all(fd, ping, sizeof ping, deadline, "rail ping", err)) return rc;
  }
  std::vector<uint8_t> sample(kRailSampleBytes);
  if (int rc = net::read_exact(fd, sample.data(), sample.size(), deadline, "rail sample", err))
    return rc;
  return net::write_all(fd, ping, sizeof ping, deadline, "rail sample", err);
}

}  // namespace

int plan_rails(int rank, const std::vector<int> &fds, uint64_t deadline, int pinned,
               wire::RailPlan &plan, Error &err) {
  const int links = int(fds.size());
  if (rank != 0) {
    for (int fd : fds)
      if (int rc = worker_echo(fd, deadline, err)) return rc;
    return receive_rail_plan(fds[0], links, deadline, plan, err);
  }
  uint64_t rtt[wire::kMaxLinks] = {};
  uint32_t mbit[wire::kMaxLinks] = {};
  for (int k = 0; k < links; k++)
    if (int rc = leader_measure(fds[size_t(k)], deadline, rtt[k], mbit[k], err)) return rc;
  share_rails(mbit, rtt, links, plan);
  plan.row_link = uint16_t(pin_row_link(links, plan.row_link, pinned));
  return send_rail_plan(fds[0], plan, deadline, err);
}

}  // namespace ds4tp::tcp
