// ds4tp_cuda_stream: stream-ordered gates (pair) and all-reduce (group of
// 2) with no host call per gate, next to the sync-per-gate baseline.
//
// Per gate the engine's stream runs: partial kernel (this rank's output,
// written through a host mapping into the slab / the group's slot
// vector) -> write READY -> wait RELEASE >= value -> consume kernel
// (device-side poison check: release != value means the library failed
// the gate; the kernel records it and skips its work). The library's
// service thread serves the ready words in slot order.
//
// Ways, one line each with the time per token (2 x layers gates):
//   sync    partial, cudaStreamSynchronize, ds4tp_gate_exchange /
//           ds4tp_group_all_reduce on the host, consume (the baseline)
//   stream  the words written/waited by the stream (DS4TP_STREAM_SEQ):
//           the host enqueues every token without waiting
//   graph   one token captured in a CUDA graph (DS4TP_STREAM_FIXED: the
//           same word values every token) and replayed per token
// Words: cuStreamWriteValue64/cuStreamWaitValue64 (GEQ) when the device
// has 64-bit stream memory operations, else the 32-bit ones (word_bits
// 32), else one-thread spin kernels (--ops 64|32|spin forces one).
// Every way checks the hidden state bit for bit against a CPU reference.
//
//   ds4tp_cuda_stream [--group] [--layers 43] [--embd 4096] [--tokens 32]
//                     [--transport shm|tcp|auto] [--ops auto|64|32|spin]
// Pair: the leader forks and execs the worker; both use one GPU when
// there is one. Group: two threads of this process (ds4tp_group_new_local).
// Exit: 0 all ways bit-identical, 1 a mismatch or error, 77 no device.
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "ds4tp/ds4tp.h"
#define DS4TP_CUDA_EXAMPLE "cuda stream"
#include "stream_engine.cuh"

using namespace demo;

namespace {

struct Config : Args {
  Config() {
    layers = 43;
    tokens = 32;
    transport = DS4TP_TRANSPORT_SHM;
  }
  bool group = false;
  const char *ops = "auto";
};

// One rank's engine state.
struct Rank {
  int rank = 0, slots = 0, embd = 0, blocks = 1;
  ds4tp_pair *tp = nullptr;
  ds4tp_group *g = nullptr;
  cudaStream_t s = nullptr;
  Ops ops = Ops::Mem64;
  float *h = nullptr;                  // device hidden state
  unsigned long long *token = nullptr; // device token counter (model seq source)
  Status *st = nullptr, *dst = nullptr;
  uint8_t *slab = nullptr, *dslab = nullptr;  // pair: mapped slab
  ds4tp_slab_layout l{};
  ds4tp_stream_words w{};
  uint8_t *dwords = nullptr;           // device address of the words block

  const char *errmsg() const { return tp ? ds4tp_errmsg(tp) : ds4tp_group_errmsg(g); }
  uint8_t *dev(const void *host) const {  // host address in the words block -> device
    return dwords + (static_cast<const uint8_t *>(host) - static_cast<uint8_t *>(w.base));
  }
  float *out(int slot) const {
    if (g != nullptr) return reinterpret_cast<float *>(dev(w.data) + slot * w.slot_bytes);
    return reinterpret_cast<float *>(dslab + l.out_offset + slot * l.slot_stride);
  }
  float *in(int slot) const {
    if (g != nullptr) return out(slot);  // all-reduced in place
    return reinterpret_cast<float *>(dslab + l.in_offset + slot * l.slot_stride);
  }
  void *ready(int slot) const { return dev(w.ready) + slot * w.stride; }
  void *release(int slot) const { return dev(w.release) + slot * w.stride; }
};

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int fail(const Rank &r, const char *what, int rc) {
  std::fprintf(stderr, "cuda stream rank %d: %s: %s: %s\n", r.rank, what, ds4tp_err_name(rc),
               r.errmsg());
  return 1;
}

int start_words(Rank &r, int mode) {
  ds4tp_stream_options o;
  ds4tp_stream_options_init(&o);
  o.word_bits = uint32_t(ops_bits(r.ops));
  o.mode = mode;
  o.slots = uint32_t(r.slots);
  o.count = uint64_t(r.embd);
  o.dtype = DS4TP_DTYPE_F32;
  r.w.size = sizeof r.w;
  int rc = r.tp ? ds4tp_gate_stream_start(r.tp, nullptr, &o, &r.w)
                : ds4tp_group_stream_start(r.g, nullptr, &o, &r.w);
  return rc == DS4TP_OK ? 0 : fail(r, "stream start", rc);
}

int stop_words(Rank &r) {
  int rc = r.tp ? ds4tp_gate_service_stop(r.tp) : ds4tp_group_stream_stop(r.g);
  return rc == DS4TP_OK ? 0 : fail(r, "stream stop", rc);
}

// Device buffers, the slab (pair) and the registered words block.
int setup(Rank &r, const Config &c) {
  r.slots = c.layers * 2;
  r.embd = c.embd;
  r.blocks = (c.embd + kThreads - 1) / kThreads;
  int ndev = 0;
  CUDA_OK(cudaGetDeviceCount(&ndev));
  CUDA_OK(cudaSetDevice(r.rank % ndev));
  CUDA_OK(cudaStreamCreateWithFlags(&r.s, cudaStreamNonBlocking));
  CUDA_OK(cudaMalloc(&r.h, size_t(r.embd) * 4));
  CUDA_OK(cudaMalloc(&r.token, sizeof *r.token));
  CUDA_OK(cudaHostAlloc(reinterpret_cast<void **>(&r.st), sizeof *r.st, cudaHostAllocMapped));
  CUDA_OK(cudaHostGetDevicePointer(reinterpret_cast<void **>(&r.dst), r.st, 0));
  int dev = 0;
  CUDA_OK(cudaGetDevice(&dev));
  r.ops = pick_ops(dev, c.ops);
  if (r.tp != nullptr) {
    // The slab: pinned, host-mapped, page aligned.
    const uint64_t bytes = ds4tp_slab_bytes(r.tp);
    CUDA_OK(cudaHostAlloc(reinterpret_cast<void **>(&r.slab), bytes, cudaHostAllocMapped));
    std::memset(r.slab, 0, bytes);
    CUDA_OK(cudaHostGetDevicePointer(reinterpret_cast<void **>(&r.dslab), r.slab, 0));
    int rc = ds4tp_connect(r.tp);
    if (rc == DS4TP_OK) rc = ds4tp_attach_slab(r.tp, r.slab, bytes);
    r.l.size = sizeof r.l;
    if (rc == DS4TP_OK) rc = ds4tp_slab_layout_get(r.tp, &r.l);
    if (rc != DS4TP_OK) return fail(r, "connect/attach", rc);
  }
  // The words block is library memory: register it once (it is kept for
  // the handle's life, across stop/start and mode changes).
  if (start_words(r, DS4TP_STREAM_SEQ) || stop_words(r)) return 1;
  CUDA_OK(cudaHostRegister(r.w.base, r.w.bytes, cudaHostRegisterMapped));
  CUDA_OK(cudaHostGetDevicePointer(reinterpret_cast<void **>(&r.dwords), r.w.base, 0));
  return 0;
}

void teardown(Rank &r) {
  if (r.dwords != nullptr) cudaHostUnregister(r.w.base);
  if (r.tp != nullptr && r.slab != nullptr) ds4tp_detach_slab(r.tp);  // before the memory goes
  if (r.slab != nullptr) cudaFreeHost(r.slab);
  if (r.st != nullptr) cudaFreeHost(r.st);
  cudaFree(r.h);
  cudaFree(r.token);
  if (r.s != nullptr) cudaStreamDestroy(r.s);
}

int reset(Rank &r) {
  CUDA_OK(cudaMemsetAsync(r.h, 0, size_t(r.embd) * 4, r.s));
  CUDA_OK(cudaMemsetAsync(r.token, 0, sizeof *r.token, r.s));
  CUDA_OK(cudaStreamSynchronize(r.s));
  std::memset(r.st, 0, sizeof *r.st);
  return 0;
}

// One gate on the stream; `value` is what both words carry (0: sync way,
// the host exchanges in between, see way_sync).
int enqueue_gate(Rank &r, int slot, unsigned long long value) {
  partial_kernel<<<r.blocks, kThreads, 0, r.s>>>(r.out(slot), r.h, r.rank, r.slots, slot,
                                                 r.token, r.embd);
  CUDA_OK(cudaGetLastError());
  if (value != 0) {
    CU_OK(write_word(r.ops, r.s, r.ready(slot), value));
    CU_OK(wait_word(r.ops, r.s, r.release(slot), value));
  }
  return 0;
}

int enqueue_consume(Rank &r, int slot, unsigned long long value) {
  consume_kernel<<<r.blocks, kThreads, 0, r.s>>>(
      r.out(slot), r.in(slot), value != 0 ? r.release(slot) : nullptr, value, ops_bits(r.ops),
      r.rank, r.g != nullptr, r.slots, slot, r.token, r.embd, r.h, r.dst);
  CUDA_OK(cudaGetLastError());
  return 0;
}

int way_sync(Rank &r, int tokens, double &secs) {
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t seq = r.tp ? ds4tp_gate_seq(r.tp) : 0;
  for (int t = 0; t < tokens; t++) {
    for (int slot = 0; slot < r.slots; slot++) {
      if (enqueue_gate(r, slot, 0)) return 1;
      CUDA_OK(cudaStreamSynchronize(r.s));  // the host call per gate this example removes
      int rc = r.tp ? ds4tp_gate_exchange(r.tp, uint32_t(slot / 2), uint32_t(slot % 2), ++seq)
                    : ds4tp_group_all_reduce(r.g, r.w.data ? static_cast<uint8_t *>(r.w.data) +
                                                               slot * r.w.slot_bytes : nullptr,
                                             uint64_t(r.embd), DS4TP_DTYPE_F32, DS4TP_OP_SUM);
      if (rc != DS4TP_OK) return fail(r, "host exchange", rc);
      if (enqueue_consume(r, slot, 0)) return 1;
    }
    next_token_kernel<<<1, 1, 0, r.s>>>(r.token);
  }
  CUDA_OK(cudaStreamSynchronize(r.s));
  secs = since(t0);
  return 0;
}

int way_stream(Rank &r, int tokens, double &secs) {
  if (start_words(r, DS4TP_STREAM_SEQ)) return 1;
  const auto t0 = std::chrono::steady_clock::now();
  const uint64_t mask = r.w.word_bits == 64 ? ~0ull : 0xffffffffull;
  uint64_t seq = r.tp ? ds4tp_gate_seq(r.tp) : ds4tp_group_stream_seq(r.g);
  for (int t = 0; t < tokens; t++) {
    for (int slot = 0; slot < r.slots; slot++) {
      const unsigned long long v = (++seq) & mask;
      if (enqueue_gate(r, slot, v) || enqueue_consume(r, slot, v)) return 1;
    }
    next_token_kernel<<<1, 1, 0, r.s>>>(r.token);
  }
  CUDA_OK(cudaStreamSynchronize(r.s));
  secs = since(t0);
  return stop_words(r);
}

// Captures one token (fixed word values slot + 1) into r's graph.
int capture_token(Rank &r, cudaGraphExec_t &exec) {
  cudaGraph_t graph = nullptr;
  CUDA_OK(cudaStreamBeginCapture(r.s, cudaStreamCaptureModeThreadLocal));
  int bad = 0;
  for (int slot = 0; slot < r.slots && !bad; slot++)
    bad = enqueue_gate(r, slot, unsigned(slot) + 1) || enqueue_consume(r, slot, unsigned(slot) + 1);
  if (!bad) next_token_kernel<<<1, 1, 0, r.s>>>(r.token);
  cudaError_t e = cudaStreamEndCapture(r.s, &graph);
  if (bad || e != cudaSuccess) {
    cudaGetLastError();
    if (graph != nullptr) cudaGraphDestroy(graph);
    return 1;
  }
  e = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  return e == cudaSuccess ? 0 : 1;
}

int way_graph(Rank &r, int tokens, double &secs, bool &fell_back) {
  cudaGraphExec_t exec = nullptr;
  if (capture_token(r, exec) != 0) {
    // Stream memory operations not capturable here: the spin kernels are.
    std::fprintf(stderr, "cuda stream rank %d: capture with %s failed; using spin kernels\n",
                 r.rank, ops_name(r.ops));
    r.ops = Ops::Spin;
    fell_back = true;
    if (capture_token(r, exec) != 0) return fail(r, "graph capture", DS4TP_EFAILED);
  }
  if (start_words(r, DS4TP_STREAM_FIXED)) return 1;
  const auto t0 = std::chrono::steady_clock::now();
  for (int t = 0; t < tokens; t++) CUDA_OK(cudaGraphLaunch(exec, r.s));
  CUDA_OK(cudaStreamSynchronize(r.s));
  secs = since(t0);
  cudaGraphExecDestroy(exec);
  return stop_words(r);
}

// Bit-for-bit check against the CPU reference; prints rank 0's line.
int check(Rank &r, const char *way, Ops ops, int tokens, double seconds) {
  std::vector<float> h(size_t(r.embd)), ref(size_t(r.embd));
  CUDA_OK(cudaMemcpy(h.data(), r.h, size_t(r.embd) * 4, cudaMemcpyDeviceToHost));
  reference(r.slots, r.embd, tokens, ref.data());
  const bool same = std::memcmp(h.data(), ref.data(), size_t(r.embd) * 4) == 0;
  const bool ok = same && r.st->failed_seq == 0 && r.st->mismatches == 0;
  if (r.st->failed_seq != 0)
    std::fprintf(stderr, "cuda stream rank %d: way %s: poisoned at model seq %llu "
                 "(release word %llu): %s\n", r.rank, way, r.st->failed_seq, r.st->bad_word,
                 r.errmsg());
  if (r.rank == 0 || !ok)
    std::printf("%s way %-6s rank %d: %-44s %9.1f us/token (%d gates of %d B): %s\n",
                r.g ? "group" : "pair ", way, r.rank, way[1] == 'y' ? "host calls per gate" :
                ops_name(ops), seconds * 1e6 / tokens, r.slots, r.embd * 4,
                ok ? "bit-identical" : "MISMATCH");
  return ok ? 0 : 1;
}

// Every way on one rank; 0 when all of them matched.
int run_ways(Rank &r, const Config &c) {
  if (setup(r, c)) return 1;
  int bad = 0;
  auto timed = [&](const char *way, auto &&body) {
    if (reset(r)) return 1;
    double secs = 0;
    if (body(secs)) return 1;
    return check(r, way, r.ops, c.tokens, secs);
  };
  bad |= timed("sync", [&](double &secs) { return way_sync(r, c.tokens, secs); });
  bad |= timed("stream", [&](double &secs) { return way_stream(r, c.tokens, secs); });
  bool fell_back = false;
  const Ops before = r.ops;
  bad |= timed("graph", [&](double &secs) { return way_graph(r, c.tokens, secs, fell_back); });
  if (fell_back) r.ops = before;
  teardown(r);
  return bad;
}

int parse(int argc, char **argv, Config &c) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (!std::strcmp(a, "--group")) { c.group = true; continue; }
    if (v == nullptr) return -1;
    i++;
    if (!std::strcmp(a, "--ops")) c.ops = v;
    else if (parse_arg(c, a, v) != 1) return -1;
  }
  if (std::strcmp(c.ops, "auto") && std::strcmp(c.ops, "64") && std::strcmp(c.ops, "32") &&
      std::strcmp(c.ops, "spin"))
    return -1;
  return args_ok(c) ? 0 : -1;
}

// Group of 2: two threads of this process, one stream each, one GPU.
int run_group(const Config &c) {
  ds4tp_identity id = identity(c);
  ds4tp_group *gs[2] = {nullptr, nullptr};
  if (ds4tp_group_new_local(gs, 2, nullptr, &id) != DS4TP_OK) {
    std::fprintf(stderr, "cuda stream: group: %s\n", ds4tp_last_error());
    return 1;
  }
  int rcs[2] = {1, 1};
  std::vector<std::thread> ts;
  for (int i = 0; i < 2; i++)
    ts.emplace_back([&, i] {
      Rank r;
      r.rank = i;
      r.g = gs[i];
      rcs[i] = run_ways(r, c);
      if (rcs[i] != 0) ds4tp_group_mark_failed(gs[i]);  // release the other thread
    });
  for (auto &t : ts) t.join();
  ds4tp_group_free(gs[0]);
  ds4tp_group_free(gs[1]);
  return rcs[0] | rcs[1];
}

int run_pair(const Config &c, int argc, char **argv) {
  const ds4tp_identity id = identity(c);
  ds4tp_pair *tp = nullptr;
  pid_t child = 0;
  if (start_role(&tp, &child, c.transport, c.worker_port, &id, argc, argv, "cuda stream")) return 1;
  Rank r;
  r.rank = ds4tp_rank(tp);
  r.tp = tp;
  return end_role(tp, child, run_ways(r, c));
}

}  // namespace

int main(int argc, char **argv) {
  Config c;
  if (parse(argc, argv, c) != 0) {
    std::fprintf(stderr, "usage: ds4tp_cuda_stream [--group] [--layers N] [--embd N] "
                         "[--tokens N] [--transport auto|tcp|shm] [--ops auto|64|32|spin]\n");
    return 2;
  }
  if (!have_device()) return 77;
  const int result = c.group ? run_group(c) : run_pair(c, argc, argv);
  if (c.worker_port == 0)
    std::printf("cuda stream %s %s\n", c.group ? "group" : "pair", result == 0 ? "OK" : "FAILED");
  return result;
}
