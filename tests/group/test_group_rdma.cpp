// Groups over rdma (link/rdma/group_link.hpp) through the test verbs
// provider (tests/verbs_provider), which moves messages between the rank
// processes through shared memory: profiles rc and uc-apple (UC only,
// messages of at most 16 KiB, a message that finds no receive kills the
// direction). Checked: every collective over the flat rdma mesh and over
// tiered hosts with rdma between the leaders, against the references,
// the same bits on every rank; auto picking rdma across hosts; a rank
// without a usable port, or whose queue pair cannot be made or connected
// (the group runs tcp and says why); a rank killed mid-call, a lost
// message, a completion error and a queue pair that never receives, each
// ending every rank with a named error.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>

#include "ds4tp/ds4tp.h"
#include "support/group_util.hpp"

using namespace ds4tp::test;

namespace {

// The provider and its profile for every rank (forked ranks inherit it).
struct Provider {
  explicit Provider(const char *profile) {
    setenv("DS4TP_VERBS_LIB", DS4TP_TEST_VERBS_PROVIDER, 1);
    setenv("DS4TP_VERBS_PROVIDER_PROFILE", profile, 1);
    unsetenv("DS4TP_VERBS_PROVIDER_FAULT");
  }
  ~Provider() {
    unsetenv("DS4TP_VERBS_LIB");
    unsetenv("DS4TP_VERBS_PROVIDER_PROFILE");
    unsetenv("DS4TP_VERBS_PROVIDER_FAULT");
  }
};

// Rank r's stderr goes to a file of its own, read back after the run
// (named by the test's pid, which the forked ranks see as their parent's).
const pid_t g_test_pid = getpid();
std::string log_path(int r) {
  return "/tmp/ds4tp-test-group-rdma-" + std::to_string(g_test_pid) + "-" + std::to_string(r);
}
std::string read_log(int r) {
  std::ifstream f(log_path(r));
  std::stringstream s;
  s << f.rdbuf();
  std::remove(log_path(r).c_str());
  return s.str();
}

// A fault of the provider's (DS4TP_VERBS_PROVIDER_FAULT) on rank `who` only.
GroupEdit fault_on(int who, const char *fault, int op_timeout_ms = 5000) {
  return [who, fault, op_timeout_ms](int r, ds4tp_group_options &o, ds4tp_identity &) {
    if (r == who) setenv("DS4TP_VERBS_PROVIDER_FAULT", fault, 1);
    o.op_timeout_ms = op_timeout_ms;
    o.peer_silence_ms = 1000;
    (void)!std::freopen(log_path(r).c_str(), "w", stderr);
    std::setvbuf(stderr, nullptr, _IONBF, 0);  // ranks end with _exit
  };
}

// 200 all-reduces of 16 KiB (rank `victim` raises SIGKILL at call 20);
// OK only when every call succeeded.
int loop_body(ds4tp_group *g, int rank, uint64_t &, std::string &why, int victim) {
  std::vector<float> v(4096, 1.0f);
  for (int i = 0; i < 200; i++) {
    if (rank == victim && i == 20) raise(SIGKILL);
    if (int rc = ds4tp_group_all_reduce(g, v.data(), v.size(), DS4TP_DTYPE_F32, DS4TP_OP_SUM)) {
      why = ds4tp_group_errmsg(g);
      return rc;
    }
  }
  return 0;
}

}  // namespace

TEST_CASE("group rdma: every collective over the flat rdma mesh", "[group][rdma]") {
  for (const char *profile : {"rc", "uc-apple"}) {
    Provider p(profile);
    for (int n : {2, 3}) {
      INFO("profile " << profile << ", " << n << " ranks");
      HostOrder order(1);
      for (int r = 0; r < n; r++) order[0].push_back(r);
      check_run(run_group_procs(n, DS4TP_TRANSPORT_RDMA,
                                [&](ds4tp_group *g, int me, uint64_t &d, std::string &why) {
                                  if (ds4tp_group_transport(g) != DS4TP_TRANSPORT_RDMA) {
                                    why = "transport " + std::to_string(ds4tp_group_transport(g));
                                    return int(DS4TP_EIO);
                                  }
                                  return collectives_body(order, "rdma between every two ranks "
                                                                 "(flat)")(g, me, d, why);
                                }));
    }
  }
}

TEST_CASE("group rdma: 4 MiB chunks at 16 KiB messages, a ring as deep as the receive queue",
          "[group][rdma]") {
  // 2 x ceil((64 + 4 MiB) / 16 KiB) = 514 receives per peer: the queue
  // pair is made exactly that deep, so each receive taken is posted again
  // in the place it left.
  Provider p("uc-apple");
  check_run(run_group_procs(
      2, DS4TP_TRANSPORT_RDMA,
      [](ds4tp_group *g, int me, uint64_t &, std::string &why) {
        if (ds4tp_group_transport(g) != DS4TP_TRANSPORT_RDMA) {
          why = "transport " + std::to_string(ds4tp_group_transport(g));
          return int(DS4TP_EIO);
        }
        std::vector<float> v(1u << 20);
        for (int call = 0; call < 3; call++) {
          for (size_t i = 0; i < v.size(); i++) v[i] = float(me + 1 + call) + float(i % 7);
          if (int rc = ds4tp_group_all_reduce(g, v.data(), v.size(), DS4TP_DTYPE_F32, DS4TP_OP_SUM)) {
            why = ds4tp_group_errmsg(g);
            return rc;
          }
          for (size_t i = 0; i < v.size(); i++)
            if (v[i] != float(3 + 2 * call) + 2 * float(i % 7)) {
              why = "call " + std::to_string(call) + " element " + std::to_string(i);
              return int(DS4TP_EIO);
            }
        }
        return 0;
      },
      [](int, ds4tp_group_options &o, ds4tp_identity &) { o.chunk_bytes = 4u << 20; }));
}

TEST_CASE("group rdma: auto runs rdma across hosts, tiered and flat", "[group][rdma]") {
  Provider p("uc-apple");
  SECTION("2 hosts x 2 ranks: shm within a host, rdma between the leaders") {
    check_run(run_group_procs(4, DS4TP_TRANSPORT_AUTO,
                              collectives_body({{0, 1}, {2, 3}},
                                               "plan: 2 hosts x 2 ranks; shm within a host, rdma "
                                               "across hosts between leaders 0 and 2"),
                              on_hosts({0, 0, 1, 1})));
  }
  SECTION("2 + 3 ranks, interleaved") {
    check_run(run_group_procs(5, DS4TP_TRANSPORT_AUTO,
                              collectives_body({{0, 3}, {1, 2, 4}},
                                               "shm within a host, rdma across hosts between "
                                               "leaders 0 and 1"),
                              on_hosts({0, 1, 1, 0, 1})));
  }
  SECTION("4 hosts x 1 rank: the flat rdma mesh") {
    check_run(run_group_procs(4, DS4TP_TRANSPORT_AUTO,
                              collectives_body({{0, 1, 2, 3}}, "plan: 4 hosts x 1 rank; rdma "
                                                               "between every two ranks (flat)"),
                              on_hosts({0, 1, 2, 3})));
  }
}

TEST_CASE("group rdma: a rank without a usable port: the group runs tcp and says why",
          "[group][rdma]") {
  Provider p("rc");
  auto tcp_body = [](ds4tp_group *g, int me, uint64_t &d, std::string &why) {
    if (ds4tp_group_transport(g) != DS4TP_TRANSPORT_TCP) {
      why = "transport " + std::to_string(ds4tp_group_transport(g)) + ", expected tcp";
      return int(DS4TP_EIO);
    }
    return collectives_body({{0, 1, 2}}, "tcp between every two ranks (flat)")(g, me, d, why);
  };
  SECTION("asked for rdma") {
    const GroupRun run = run_group_procs(3, DS4TP_TRANSPORT_RDMA, tcp_body, fault_on(1, "port_down"));
    check_run(run);
    // The rank without a port, and each of its peers, name the cause.
    for (int r = 0; r < 3; r++) {
      const std::string log = read_log(r);
      INFO("rank " << r << "'s log: " << log);
      CHECK(log.find("rdma links could not come up") != std::string::npos);
      CHECK(log.find("runs over tcp") != std::string::npos);
      if (r != 1) CHECK(log.find("rank 1 cannot") != std::string::npos);
      CHECK(log.find("DOWN") != std::string::npos);
    }
  }
  SECTION("auto across hosts: rank 1 offers no rdma, so tcp from the start") {
    auto edit = fault_on(1, "port_down");
    auto hosts = on_hosts({0, 1, 2});
    check_run(run_group_procs(3, DS4TP_TRANSPORT_AUTO, tcp_body,
                              [&](int r, ds4tp_group_options &o, ds4tp_identity &id) {
                                edit(r, o, id);
                                hosts(r, o, id);
                              }));
    for (int r = 0; r < 3; r++) CHECK(read_log(r).find("rdma") == std::string::npos);
  }
  SECTION("a queue pair that cannot be created") {
    check_run(run_group_procs(3, DS4TP_TRANSPORT_RDMA, tcp_body, fault_on(2, "fail=qp")));
    for (int r = 0; r < 3; r++) {
      const std::string log = read_log(r);
      INFO("rank " << r << "'s log: " << log);
      CHECK(log.find("creating a queue pair") != std::string::npos);
    }
  }
  SECTION("a queue pair that cannot be connected") {
    check_run(run_group_procs(3, DS4TP_TRANSPORT_RDMA, tcp_body, fault_on(2, "fail=rtr")));
    const std::string log0 = read_log(0), log1 = read_log(1), log2 = read_log(2);
    INFO("logs: " << log0 << " / " << log1 << " / " << log2);
    CHECK(log0.find("ranks without them: 2") != std::string::npos);
    CHECK(log1.find("at another rank, which logs why") != std::string::npos);
    CHECK(log2.find("the queue pair to rank") != std::string::npos);
  }
}

TEST_CASE("group rdma: faults end every rank with a named error", "[group][rdma]") {
  for (const char *profile : {"rc", "uc-apple"}) {
    Provider p(profile);
    INFO("profile " << profile);
    SECTION(std::string("a rank killed mid-call (") + profile + ")") {
      const GroupRun run = run_group_procs(
          3, DS4TP_TRANSPORT_RDMA,
          [](ds4tp_group *g, int me, uint64_t &d, std::string &why) {
            return loop_body(g, me, d, why, 2);
          },
          fault_on(-1, ""));
      for (int r = 0; r < 2; r++) {
        INFO("rank " << r << ": " << run.rcs[size_t(r)] << " " << run.msgs[size_t(r)]);
        CHECK((run.rcs[size_t(r)] == DS4TP_EPEERCLOSED || run.rcs[size_t(r)] == DS4TP_EFAILED));
        CHECK(run.msgs[size_t(r)].find("rank 2") != std::string::npos);
        read_log(r);
      }
      read_log(2);
    }
    SECTION(std::string("a message lost, a completion in error, a dead queue pair (") + profile + ")") {
      for (const char *fault : {"drop=40", "wc=12@40", "dead=1"}) {
        INFO("fault " << fault);
        const GroupRun run = run_group_procs(
            3, DS4TP_TRANSPORT_RDMA,
            [](ds4tp_group *g, int me, uint64_t &d, std::string &why) {
              return loop_body(g, me, d, why, -1);
            },
            fault_on(1, fault, 1500));
        for (int r = 0; r < 3; r++) {
          INFO("rank " << r << ": " << run.rcs[size_t(r)] << " " << run.msgs[size_t(r)]);
          CHECK(run.rcs[size_t(r)] != 0);
          CHECK(run.rcs[size_t(r)] != -999);  // it reported (no hang, no crash)
          CHECK(!run.msgs[size_t(r)].empty());
          read_log(r);
        }
      }
    }
  }
}
