// A shm group rank stopped after it joined but before it attached (before
// it wrote its own pid into its line of the segment) is still watched:
// rank 0 writes every joiner's pid from its join, so a wait on the rank
// ends within the stop bound (1 s), not at op_timeout_ms. The stopped rank
// is played by a child that speaks the rendezvous by hand up to "go" and
// then stops itself; rank 0 is the real library, in this process.
#include <cstring>
#include <string>

#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "common/error.hpp"
#include "ds4tp/ds4tp.h"
#include "group/wire.hpp"
#include "net/endpoint.hpp"
#include "net/socket.hpp"
#include "os/os.hpp"
#include "pair/pair.hpp"
#include "support/procs.hpp"

using namespace ds4tp;
using namespace ds4tp::test;

namespace {

// Rank 1 of 2: joins at rank 0's port (read from `port_fd`), answers
// ready, takes go, and stops itself before any attach.
int joiner_main(int report_fd, int port_fd) {
  int port = 0;
  if (read(port_fd, &port, sizeof port) != sizeof port) return 10;
  const uint64_t deadline = mono_ns() + 10'000'000'000ull;
  Error err;
  net::Fd c;
  if (net::dial_tcp("127.0.0.1", port, deadline, c, err) != DS4TP_OK) return 11;
  uint8_t nonce[group::kNonceMsgBytes], fixed[group::kJoinFixedBytes], rb[group::kRosterBytes];
  if (net::read_exact(c.get(), nonce, sizeof nonce, deadline, "nonce", err) != DS4TP_OK) return 12;
  wire::Hello hello;
  hello.role = DS4TP_ROLE_WORKER;
  hello.host_id = host_identity();
  const std::vector<uint8_t> hb = wire::encode_hello(hello);
  group::Join j;
  j.rank = 1;
  j.size = 2;
  j.chunk = 1u << 20;
  j.host_id = hello.host_id;
  j.hello_bytes = uint32_t(hb.size());
  j.pid = uint32_t(getpid());
  group::encode_join(j, fixed);
  if (net::write_all(c.get(), fixed, sizeof fixed, deadline, "join", err) != DS4TP_OK ||
      net::write_all(c.get(), hb.data(), hb.size(), deadline, "hello", err) != DS4TP_OK ||
      net::read_exact(c.get(), rb, sizeof rb, deadline, "roster", err) != DS4TP_OK)
    return 13;
  group::Roster ro;
  if (group::decode_roster(rb, sizeof rb, ro, err) != DS4TP_OK || ro.status != DS4TP_OK) return 14;
  if (ro.transport != DS4TP_TRANSPORT_SHM) return 15;
  uint8_t b = 1;
  if (net::write_all(c.get(), &b, 1, deadline, "ready", err) != DS4TP_OK ||
      net::read_exact(c.get(), &b, 1, deadline, "go", err) != DS4TP_OK)
    return 16;
  send_report(report_fd, kReportReady, 0);
  raise(SIGSTOP);  // never attaches: its line holds only what rank 0 wrote
  return 0;
}

}  // namespace

TEST_CASE("group: a shm rank stopped before it attaches fails the others within the stop bound",
          "[group]") {
  int port_pipe[2];
  REQUIRE(pipe(port_pipe) == 0);
  const int rfd = port_pipe[0];
  Child joiner = Child::spawn([rfd](int fd) { return joiner_main(fd, rfd); }, "rank 1");
  close(port_pipe[0]);
  ds4tp_group_options o;
  ds4tp_group_options_init(&o);
  o.rank = 0;
  o.group_size = 2;
  o.rendezvous_host = "127.0.0.1";
  o.rendezvous_port = 0;
  o.transport = DS4TP_TRANSPORT_SHM;
  o.connect_timeout_ms = 10000;
  o.op_timeout_ms = 20000;  // far past the 1 s stop bound
  ds4tp_group *g = nullptr;
  REQUIRE(ds4tp_group_new(&g, &o, nullptr) == DS4TP_OK);
  const int port = ds4tp_group_rendezvous_port(g);
  REQUIRE(write(port_pipe[1], &port, sizeof port) == sizeof port);
  close(port_pipe[1]);
  const int up = ds4tp_group_connect(g);
  INFO("connect: " << ds4tp_err_name(up) << " " << ds4tp_group_errmsg(g));
  REQUIRE(up == DS4TP_OK);
  Report r;
  REQUIRE(joiner.next_of(kReportReady, r, 10000));
  bool stopped = false;  // the joiner stops itself right after its report
  for (int i = 0; i < 100 && !stopped; i++, usleep(10000)) stopped = os::process_stopped(joiner.pid());
  if (!stopped) {  // portable POSIX: no way to see a stop, only the op deadline
    WARN("this platform cannot tell a stopped process: nothing to check");
    ds4tp_group_free(g);
    joiner.signal(SIGKILL);
    joiner.reap(2000);
    return;
  }
  float v[16] = {};
  const uint64_t t0 = mono_ns();
  const int rc = ds4tp_group_all_reduce(g, v, 16, DS4TP_DTYPE_F32, DS4TP_OP_SUM);
  const double ms = double(mono_ns() - t0) / 1e6;
  const std::string msg = ds4tp_group_errmsg(g);
  INFO("all_reduce: " << ds4tp_err_name(rc) << " after " << ms << " ms: " << msg);
  CHECK(rc == DS4TP_ETIMEDOUT);
  CHECK(msg.find("stopped") != std::string::npos);
  CHECK(ms < 5000);  // the stop bound (1 s) and slack, not op_timeout_ms (20 s)
  ds4tp_group_free(g);
  joiner.signal(SIGKILL);
  joiner.reap(2000);
}
