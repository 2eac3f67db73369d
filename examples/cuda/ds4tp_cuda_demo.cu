// ds4tp_cuda_demo: a CUDA kernel drives tensor-parallel gates itself.
//
// The slab is pinned host memory mapped into the GPU's address space
// (cudaHostAlloc with cudaHostAllocMapped), so the transport reads and
// writes it directly and no staging hooks are needed. One persistent
// kernel per rank decodes --tokens tokens of a toy model; at every gate it
//   1. writes this rank's partial into out[slot] (through the mapping),
//   2. stores seq into ready[slot] with system-scope release order,
//   3. spins on release[slot] (system-scope acquire) until it reaches seq;
//      DS4TP_GATE_POISON means the pair failed: the kernel gives up,
//   4. reads the peer's partial from in[slot], checks it bit for bit and
//      adds both partials to the hidden state.
// The library's gate service thread (ds4tp_gate_service_start) sees each
// ready word, runs the exchange and stores the release word.
//
// The host checks the final hidden state bit for bit against a CPU
// computation of both ranks, and the ranks compare their final states.
// Without a CUDA device it prints why and exits 77 (ctest: skipped).
//
//   ds4tp_cuda_demo [--layers N] [--embd N] [--tokens N] [--transport auto|tcp|shm]
#include <cuda/atomic>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "ds4tp/ds4tp.h"
#define DS4TP_CUDA_EXAMPLE "cuda demo"
#include "cuda_common.cuh"

using namespace demo;

namespace {

constexpr int kThreads = 256;
constexpr uint64_t kKernelGiveUpNs = 60ull * 1000000000ull;  // a kernel never waits forever

// Offsets a kernel needs, copied from ds4tp_slab_layout.
struct SlabView {
  uint8_t *base;  // device pointer of the mapped slab
  uint64_t out, in, ready, release, slot_stride, flag_stride;
};

// Kernel-to-host report, in mapped memory.
struct Status {
  unsigned long long failed_seq;   // 0 = no failure
  unsigned long long mismatches;   // peer partial elements that differed
  unsigned long long gates;        // gates completed
  int poisoned;                    // 1 when the release word said the pair failed
};

__device__ inline uint64_t globaltimer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

using SysWord = cuda::atomic_ref<unsigned long long, cuda::thread_scope_system>;

__global__ void decode_kernel(SlabView s, int rank, int slots, int embd, int tokens,
                              float *h, Status *status) {
  __shared__ int give_up;
  __shared__ unsigned long long mismatches;  // atomics stay on chip, not over PCIe
  const int tid = threadIdx.x;
  if (tid == 0) give_up = 0, mismatches = 0;
  __syncthreads();
  for (int t = 0; t < tokens; t++) {
    for (int slot = 0; slot < slots; slot++) {
      const uint64_t seq = uint64_t(t) * slots + slot + 1;
      auto *out = reinterpret_cast<volatile float *>(s.base + s.out + slot * s.slot_stride);
      auto *in = reinterpret_cast<volatile float *>(s.base + s.in + slot * s.slot_stride);
      for (int e = tid; e < embd; e += blockDim.x) out[e] = partial_dev(rank, seq, e, h[e]);
      __syncthreads();
      if (tid == 0) {
        // Every thread's out stores are ordered before the ready word by
        // the barrier plus this system-scope release.
        __threadfence_system();
        auto *rw = reinterpret_cast<unsigned long long *>(s.base + s.ready + slot * s.flag_stride);
        auto *lw = reinterpret_cast<unsigned long long *>(s.base + s.release + slot * s.flag_stride);
        SysWord(*rw).store(seq, cuda::memory_order_release);
        const uint64_t t0 = globaltimer_ns();
        unsigned long long v;
        while ((v = SysWord(*lw).load(cuda::memory_order_acquire)) < seq) {
          if (globaltimer_ns() - t0 > kKernelGiveUpNs) break;
          __nanosleep(200);
        }
        if (v == DS4TP_GATE_POISON || v < seq) {
          status->poisoned = v == DS4TP_GATE_POISON;
          status->failed_seq = seq;
          give_up = 1;
        }
      }
      __syncthreads();
      if (give_up) return;
      __threadfence_system();  // each thread's in[] loads come after the release
      unsigned long long bad = 0;
      for (int e = tid; e < embd; e += blockDim.x) {
        const float peer = in[e];
        const float want = partial_dev(1 - rank, seq, e, h[e]);
        if (__float_as_uint(peer) != __float_as_uint(want)) bad++;
        h[e] = __fadd_rn(h[e], __fadd_rn(out[e], peer));
      }
      if (bad) atomicAdd(&mismatches, bad);
      __syncthreads();
      if (tid == 0) status->gates = seq, status->mismatches = mismatches;
    }
  }
}

struct Config : Args {};

int run_rank(const Config &c, ds4tp_pair *tp) {
  const int rank = ds4tp_rank(tp), slots = c.layers * 2, embd = c.embd;
  int ndev = 0;
  CUDA_OK(cudaGetDeviceCount(&ndev));
  CUDA_OK(cudaSetDevice(rank % ndev));  // with unified addressing pinned memory is mapped

  // The slab: pinned, host-mapped, page aligned (>= the 64 bytes required).
  const uint64_t bytes = ds4tp_slab_bytes(tp);
  void *slab = nullptr, *dslab = nullptr;
  CUDA_OK(cudaHostAlloc(&slab, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
  std::memset(slab, 0, bytes);
  CUDA_OK(cudaHostGetDevicePointer(&dslab, slab, 0));
  Status *status = nullptr, *dstatus = nullptr;
  CUDA_OK(cudaHostAlloc(reinterpret_cast<void **>(&status), sizeof *status, cudaHostAllocMapped));
  std::memset(status, 0, sizeof *status);
  CUDA_OK(cudaHostGetDevicePointer(reinterpret_cast<void **>(&dstatus), status, 0));
  float *dh = nullptr;
  CUDA_OK(cudaMalloc(&dh, size_t(embd) * 4));
  CUDA_OK(cudaMemset(dh, 0, size_t(embd) * 4));

  int rc = ds4tp_connect(tp);
  if (rc == DS4TP_OK) rc = ds4tp_attach_slab(tp, slab, bytes);
  ds4tp_slab_layout l{};
  l.size = sizeof l;
  if (rc == DS4TP_OK) rc = ds4tp_slab_layout_get(tp, &l);
  if (rc == DS4TP_OK) rc = ds4tp_gate_service_start(tp, nullptr);
  if (rc != DS4TP_OK) {
    std::fprintf(stderr, "cuda demo rank %d: %s: %s\n", rank, ds4tp_err_name(rc), ds4tp_errmsg(tp));
    return 1;
  }
  SlabView view{static_cast<uint8_t *>(dslab), l.out_offset, l.in_offset, l.gpu_flags_offset,
                l.gpu_release_offset, l.slot_stride, l.flag_stride};
  const auto t0 = std::chrono::steady_clock::now();
  decode_kernel<<<1, kThreads>>>(view, rank, slots, embd, c.tokens, dh, dstatus);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  rc = ds4tp_gate_service_stop(tp);
  bool ok = rc == DS4TP_OK && status->failed_seq == 0 && status->mismatches == 0;
  if (status->failed_seq != 0)
    std::fprintf(stderr, "cuda demo rank %d: kernel gave up at gate seq %llu (%s): %s\n", rank,
                 status->failed_seq, status->poisoned ? "release word poisoned" : "no release in 60 s",
                 ds4tp_errmsg(tp));

  // CPU reference of both ranks, same float operations.
  std::vector<float> h(embd), ref(embd, 0.0f), peer(embd);
  CUDA_OK(cudaMemcpy(h.data(), dh, size_t(embd) * 4, cudaMemcpyDeviceToHost));
  for (int t = 0; t < c.tokens; t++)
    for (int slot = 0; slot < slots; slot++) {
      const uint64_t seq = uint64_t(t) * slots + slot + 1;
      for (int e = 0; e < embd; e++) {
        float own = partial_host(rank, seq, e, ref[e]), other = partial_host(1 - rank, seq, e, ref[e]);
        ref[e] = ref[e] + (own + other);
      }
    }
  const bool same_as_ref = std::memcmp(h.data(), ref.data(), size_t(embd) * 4) == 0;
  bool same_as_peer = false;
  if (ok) {
    rc = ds4tp_big_gate_exchange(tp, 0, 1, h.data(), peer.data(), uint64_t(embd) * 4);
    same_as_peer = rc == DS4TP_OK && std::memcmp(h.data(), peer.data(), size_t(embd) * 4) == 0;
  }
  ok = ok && same_as_ref && same_as_peer;
  if (rank == 0) {
    std::printf("ds4tp cuda demo: %d layers, n_embd %d, %d tokens, transport %s, %llu gates\n",
                c.layers, embd, c.tokens, ds4tp_transport_name(ds4tp_transport_active(tp)),
                status->gates);
    std::printf("  peer partials checked in the kernel: %llu elements differ\n", status->mismatches);
    std::printf("  hidden state vs CPU reference: %s, vs the worker's: %s\n",
                same_as_ref ? "bit-identical" : "MISMATCH", same_as_peer ? "bit-identical" : "MISMATCH");
    // Same line shape as ds4tp_cuda_stream's, for scripts/gpu-check.sh.
    std::printf("pair  way spin   rank 0: %-44s %9.1f us/token (%d gates of %d B): %s\n",
                "persistent kernel spinning on the slab words", secs * 1e6 / c.tokens, slots,
                embd * 4, ok && same_as_ref && same_as_peer ? "bit-identical" : "MISMATCH");
  }
  ds4tp_detach_slab(tp);  // before the pinned memory goes
  cudaFree(dh);
  cudaFreeHost(status);
  cudaFreeHost(slab);
  return ok ? 0 : 1;
}

int parse(int argc, char **argv, Config &c) {
  if (argc % 2 == 0) return -1;
  for (int i = 1; i + 1 < argc; i += 2)
    if (parse_arg(c, argv[i], argv[i + 1]) != 1) return -1;
  return args_ok(c) ? 0 : -1;
}

}  // namespace

int main(int argc, char **argv) {
  Config c;
  if (parse(argc, argv, c) != 0) {
    std::fprintf(stderr, "usage: ds4tp_cuda_demo [--layers N] [--embd N] [--tokens N] "
                         "[--transport auto|tcp|shm]\n");
    return 2;
  }
  if (!have_device()) return 77;
  const ds4tp_identity id = identity(c);
  ds4tp_pair *tp = nullptr;
  pid_t child = 0;
  if (start_role(&tp, &child, c.transport, c.worker_port, &id, argc, argv, "cuda demo")) return 1;
  const int result = end_role(tp, child, run_rank(c, tp));
  if (child > 0) std::printf("%s\n", result == 0 ? "cuda demo OK" : "cuda demo FAILED");
  return result;
}
