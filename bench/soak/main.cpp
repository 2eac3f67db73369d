// ds4tp_soak: the long-lived processes of bench/soak.sh. A leak shows up
// only as growth inside one process that outlives many pairs and groups,
// so each mode below stays up for --seconds and re-forms its pair or group
// every cycle with fresh child processes, injects one fault at random into
// a child, checks that every survivor ends with a named error in time (or,
// without a fault, that every rank succeeds and every payload arrived bit
// for bit), frees everything and samples its own fds, VmRSS and threads.
// Public C API only; linked statically, so the copy soak.sh runs does not
// change under a rebuild of the library.
//
//   ds4tp_soak pair  --transport tcp|shm|rdma --seconds S [--seed N] [--tag NAME]
//   ds4tp_soak group --transport tcp|shm      --seconds S [--seed N] [--tag NAME]
//   ds4tp_soak probe           one line per transport: name, available 0/1, why
//
// Pair: the supervisor takes the leader's or the worker's role at random
// each cycle (so both bring-up paths, the listener's and the dialer's, run
// in the long-lived process) and starts the other side as a child. Group:
// the supervisor is rank 0, a second long-lived process (started once) is
// rank 1, ranks 2..N-1 (N = 3 or 4) are children of the cycle, and the
// victim is one of them. Faults (the child side only): none, SIGKILL at a
// random moment of the traffic, SIGSTOP past the liveness bound then
// SIGCONT, a clean exit (free, exit 0) after a random number of calls, and
// SIGKILL a few ms after start (inside bring-up).
//
// Output, one line each, key=value (soak.sh parses it; msg= comes last):
//   start  tag= pid= seed= transport=
//   cycle  tag= n= role= fault= outcome=ok|named|fail code= ms= ops= child= pids= [msg=]
//   sample tag= role= n= t= fds= rss_kb= threads=
//   fail   tag= n= what=...             (also counted in the cycle line)
//   end    tag= cycles= failures=
// Exit status: 0 when every cycle ended ok or named, 1 otherwise.
//
// Internal modes, started by the two above: pair-child, group-rank.
//
// Files: soak.hpp (what they share), common.cpp (output, samples, child
// processes, watchdog, buffers), faults.cpp (injection and verdicts),
// pair.cpp and group.cpp (the modes), this one (arguments, probe, main).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "soak.hpp"

namespace soak {
namespace {

// ---- arguments ------------------------------------------------------------

int parse_transport(const std::string &t) {
  return t == "tcp" ? DS4TP_TRANSPORT_TCP : t == "shm" ? DS4TP_TRANSPORT_SHM
         : t == "rdma" ? DS4TP_TRANSPORT_RDMA : -1;
}

bool parse(int argc, char **argv, Args &a) {
  if (argc < 2) return false;
  a.mode = argv[1];
  for (int i = 2; i < argc; i++) {
    std::string o = argv[i];
    if (i + 1 >= argc) return false;
    std::string v = argv[++i];
    if (o == "--transport") {
      if ((a.transport = parse_transport(v)) < 0) return false;
    } else if (o == "--seconds") a.seconds = std::atof(v.c_str());
    else if (o == "--seed") a.seed = std::strtoull(v.c_str(), nullptr, 0), a.has_seed = true;
    else if (o == "--tag") a.tag = v;
    else if (o == "--role") a.role = v == "leader" ? DS4TP_ROLE_LEADER : DS4TP_ROLE_WORKER;
    else if (o == "--port") a.port = std::atoi(v.c_str());
    else if (o == "--port-fd") a.port_fd = std::atoi(v.c_str());
    else if (o == "--rank") a.rank = std::atoi(v.c_str());
    else if (o == "--size") a.n = std::atoi(v.c_str());
    else if (o == "--ops") a.ops = std::atol(v.c_str());
    else if (o == "--exit-after") a.exit_after = std::atol(v.c_str());
    else if (o == "--plan-fd") a.plan_fd = std::atoi(v.c_str());
    else if (o == "--report-fd") a.report_fd = std::atoi(v.c_str());
    else return false;
  }
  if (a.tag.empty()) a.tag = a.mode + "-" + ds4tp_transport_name(a.transport);
  return true;
}

int probe() {
  for (int t : {DS4TP_TRANSPORT_TCP, DS4TP_TRANSPORT_SHM, DS4TP_TRANSPORT_RDMA}) {
    char why[512] = "";
    int ok = ds4tp_transport_available(t, why, sizeof why);
    emit(1, "%s %d %s", ds4tp_transport_name(t), ok, one_line(why).c_str());
  }
  return 0;
}

}  // namespace
}  // namespace soak

int main(int argc, char **argv) {
  using namespace soak;
  signal(SIGPIPE, SIG_IGN);  // a rank gone: its pipe's write fails with EPIPE, which is judged
  Args a;
  if (!parse(argc, argv, a)) {
    std::fprintf(stderr,
                 "usage: ds4tp_soak pair|group --transport tcp|shm|rdma --seconds S [--seed N] "
                 "[--tag NAME]\n       ds4tp_soak probe\n");
    return 2;
  }
  if (!a.has_seed) a.seed = mix(now_ns() ^ uint64_t(getpid()));
  if (a.mode == "probe") return probe();
  if (a.mode == "pair-child") return pair_child(a);
  if (a.mode == "group-rank") return a.rank == 1 ? group_rank1(a) : group_child(a);
  bufs();  // before the first sample: the driver's buffers are no growth
  g_dog.tag = a.tag;
  g_dog.run();
  if (a.mode == "pair") return pair_supervisor(a);
  if (a.mode == "group") return group_supervisor(a);
  std::fprintf(stderr, "ds4tp_soak: unknown mode %s\n", a.mode.c_str());
  return 2;
}
