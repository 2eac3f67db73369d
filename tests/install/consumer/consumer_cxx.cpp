// The installed C++ wrapper (ds4tp/ds4tp.hpp) from an out-of-tree project:
// leader in this process, worker in a forked child, one gate and a big gate.
#include <ds4tp/ds4tp.hpp>

#include <cstdio>
#include <cstring>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

ds4tp::Identity identity() {
  ds4tp::Identity id;
  id.model_bytes = 4321;
  id.n_layer = 1;
  id.n_embd = 32;
  id.n_vocab = 100;
  id.quant_bits = 32;
  return id;
}

// Fills out with `mine`, swaps, and checks the peer sent `theirs`.
bool exchange(ds4tp::Pair &tp, float mine, float theirs) {
  tp.connect();
  tp.attach_slab();
  for (float &v : tp.out_vector(0, DS4TP_GATE_ATTN)) v = mine;
  tp.gate_exchange(0, DS4TP_GATE_ATTN, 1);
  for (float v : tp.in_vector(0, DS4TP_GATE_ATTN))
    if (v != theirs) return false;
  std::vector<int> out(1000, int(mine)), in(1000, 0);
  tp.big_gate_exchange(0, 1, std::as_bytes(std::span(out)), std::as_writable_bytes(std::span(in)));
  for (int v : in)
    if (v != int(theirs)) return false;
  return true;
}

}  // namespace

int main() {
  try {
    auto opt = ds4tp::Options::leader(0);
    opt.log_level = DS4TP_LOG_WARN;
    opt.transport = DS4TP_TRANSPORT_TCP;
    ds4tp::Pair leader(opt, identity());
    int port = leader.listen_port();
    std::fflush(stdout);
    pid_t child = fork();
    if (child < 0) return 1;
    if (child == 0) {
      leader = ds4tp::Pair();  // the child must not hold the leader's listener
      int code = 1;
      try {
        auto wopt = ds4tp::Options::worker("127.0.0.1", port);
        wopt.log_level = DS4TP_LOG_WARN;
        wopt.transport = DS4TP_TRANSPORT_TCP;
        ds4tp::Pair tp(wopt, identity());
        code = exchange(tp, 2.0f, 1.0f) ? 0 : 1;
      } catch (const ds4tp::Error &e) {
        std::fprintf(stderr, "worker: %s\n", e.what());
      }
      _exit(code);
    }
    bool leader_ok = exchange(leader, 1.0f, 2.0f);
    int status = 0;
    bool worker_ok = waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!leader_ok || !worker_ok) {
      std::fprintf(stderr, "consumer_cxx: payload mismatch or worker failure\n");
      return 1;
    }
    std::printf("consumer OK: C++ wrapper, ds4tp %s\n", ds4tp::version_string());
    return 0;
  } catch (const ds4tp::Error &e) {
    std::fprintf(stderr, "consumer_cxx: %s (status %d)\n", e.what(), e.status());
    return 1;
  }
}
