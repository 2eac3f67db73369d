// Minimal leader and worker with the C++ wrapper (include/ds4tp/ds4tp.hpp):
// one token of row gates, then the leader mirrors one EVAL and the worker
// serves it from a ds4tp::Worker.
//   ds4tp_cxx_example leader 7070      (prints "port P" first)
//   ds4tp_cxx_example worker 127.0.0.1 7070
#include <ds4tp/ds4tp.hpp>

#include <algorithm>
#include <cstdio>
#include <string>

namespace {

ds4tp::Identity identity() {
  ds4tp::Identity id;
  id.model_bytes = 1;
  id.n_layer = 2;
  id.n_embd = 64;
  id.n_vocab = 1000;
  return id;
}

// One token: every gate swaps this rank's partial (all `value`).
void gates(ds4tp::Pair &tp, float value, const char *peer) {
  uint64_t seq = 0;
  for (uint32_t layer = 0; layer < 2; layer++)
    for (uint32_t gate : {DS4TP_GATE_ATTN, DS4TP_GATE_FFN}) {
      std::ranges::fill(tp.out_vector(layer, gate), value);
      tp.gate_exchange(layer, gate, ++seq);
      std::printf("layer %u gate %u: %s sent %g\n", layer, gate, peer, tp.in_vector(layer, gate)[0]);
    }
}

// The worker's engine: one method per command kind it supports.
struct Engine : ds4tp::Worker {
  int session_create(ds4tp::PairRef &, const ds4tp::Command &cmd, ds4tp::Reply &) override {
    std::printf("session %llu with ctx %u\n", (unsigned long long)cmd.session_id(), cmd.ctx_size());
    return 0;
  }
  int eval(ds4tp::PairRef &, const ds4tp::Command &cmd, ds4tp::Reply &reply) override {
    std::ranges::fill(reply.logits(), float(cmd.token()));
    return 0;  // or an ack status, or < 0 to fail the command
  }
};

}  // namespace

int main(int argc, char **argv) {
  std::string role = argc > 1 ? argv[1] : "";
  try {
    if (role == "leader") {
      int port = argc > 2 ? std::stoi(argv[2]) : 7070;
      ds4tp::Pair tp(ds4tp::Options::leader(port), identity());
      std::printf("port %d\n", tp.listen_port());  // port 0 picks a free one
      std::fflush(stdout);
      tp.connect();  // waits for the worker, checks its identity
      tp.attach_slab();
      gates(tp, 1.0f, "worker");
      tp.send_session_create(1, 4096);
      tp.wait_ack(1);
      tp.send_eval(1, 1, 42, 8);
      float half[8];
      tp.recv_logits(half);
      std::printf("worker logits half: %g ... %g\n", half[0], half[7]);
      tp.send_stop();
    } else if (role == "worker") {
      const char *host = argc > 2 ? argv[2] : "127.0.0.1";
      int port = argc > 3 ? std::stoi(argv[3]) : 7070;
      ds4tp::Pair tp(ds4tp::Options::worker(host, port), identity());
      tp.connect();  // dials with retry
      tp.attach_slab();
      gates(tp, 2.0f, "leader");
      Engine engine;
      tp.worker_run(engine);  // until the leader's STOP
    } else {
      std::fprintf(stderr, "usage: ds4tp_cxx_example leader [PORT] | worker [HOST] [PORT]\n");
      return 2;
    }
  } catch (const ds4tp::Error &e) {
    std::fprintf(stderr, "ds4tp_cxx_example: %s\n", e.what());
    return 1;
  }
  return 0;
}
