// Shared by ds4tp_cuda_stream.cu: the toy model's kernels, the CPU
// reference, and the three ways a stream can write and wait on a
// library word (64-bit or 32-bit stream memory operations from the CUDA
// driver API, or a one-thread spin kernel where neither runs).
#pragma once

#include <cuda.h>
#include <cuda/atomic>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#define CUDA_OK(call)                                                             \
  do {                                                                            \
    cudaError_t e_ = (call);                                                      \
    if (e_ != cudaSuccess) {                                                      \
      std::fprintf(stderr, "cuda stream: %s: %s\n", #call, cudaGetErrorString(e_)); \
      return 1;                                                                   \
    }                                                                             \
  } while (0)

#define CU_OK(call)                                                               \
  do {                                                                            \
    CUresult r_ = (call);                                                         \
    if (r_ != CUDA_SUCCESS) {                                                     \
      const char *s_ = nullptr;                                                   \
      cuGetErrorName(r_, &s_);                                                    \
      std::fprintf(stderr, "cuda stream: %s: %s\n", #call, s_ ? s_ : "?");        \
      return 1;                                                                   \
    }                                                                             \
  } while (0)

namespace demo {

constexpr int kThreads = 256;
constexpr uint64_t kSpinGiveUpNs = 60ull * 1000000000ull;  // a spin kernel never waits forever

// Toy partial: exact float arithmetic so the CPU reproduces it bit for bit.
__host__ __device__ inline float weight(int rank, uint64_t seq, int e) {
  uint64_t x = (uint64_t(rank) << 56) ^ (seq * 0x9e3779b97f4a7c15ull) ^ (uint64_t(e) * 0x100000001b3ull);
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 29;
  return float(int32_t(x >> 40) - (1 << 23)) * (1.0f / 8388608.0f);  // exact, in [-1, 1)
}
__device__ inline float partial_dev(int rank, uint64_t seq, int e, float h) {
  return __fadd_rn(weight(rank, seq, e), __fmul_rn(h, -0.25f));
}
inline float partial_host(int rank, uint64_t seq, int e, float h) {
  volatile float scaled = h * -0.25f;  // keep the host from fusing
  return weight(rank, seq, e) + scaled;
}

// Kernel-to-host report in mapped memory: the device-side poison check
// lands here, and the host reads it after synchronising.
struct Status {
  unsigned long long failed_seq;  // first model seq that saw poison (0 = none)
  unsigned long long bad_word;    // the release word's value there
  unsigned long long mismatches;  // elements of the peer's data that differed
};

// Model seq of `slot` in the token the device counter names, so a
// captured graph computes a new token on every replay.
__device__ inline uint64_t model_seq(const unsigned long long *token, int slots, int slot) {
  return *token * uint64_t(slots) + uint64_t(slot) + 1;
}

// This rank's partial into `out` (the slab's out vector, or the group's
// slot vector all-reduced in place).
__global__ void partial_kernel(float *out, const float *h, int rank, int slots, int slot,
                               const unsigned long long *token, int embd) {
  const uint64_t seq = model_seq(token, slots, slot);
  for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < embd; e += gridDim.x * blockDim.x)
    out[e] = partial_dev(rank, seq, e, h[e]);
}

__device__ inline unsigned long long load_word(const void *w, int bits) {
  if (bits == 64)
    return cuda::atomic_ref<unsigned long long, cuda::thread_scope_system>(
               *const_cast<unsigned long long *>(static_cast<const unsigned long long *>(w)))
        .load(cuda::memory_order_acquire);
  return cuda::atomic_ref<unsigned int, cuda::thread_scope_system>(
             *const_cast<unsigned int *>(static_cast<const unsigned int *>(w)))
      .load(cuda::memory_order_acquire);
}

// After the stream's wait: the poison check, then h += own + peer (pair)
// or h += the all-reduced sum (group), each element checked on the way.
// `release` NULL: the host ran the exchange (sync way), nothing to check.
__global__ void consume_kernel(const float *out, const float *in, const void *release,
                               unsigned long long want, int bits, int rank, bool group,
                               int slots, int slot, const unsigned long long *token, int embd,
                               float *h, Status *st) {
  const uint64_t seq = model_seq(token, slots, slot);
  if (release != nullptr) {
    const unsigned long long v = load_word(release, bits);
    if (v != want) {  // poison: the library gave up on this gate
      if (threadIdx.x == 0 && blockIdx.x == 0 && st->failed_seq == 0)
        st->bad_word = v, st->failed_seq = seq;
      return;
    }
  }
  if (st->failed_seq != 0) return;  // an earlier gate failed: stop computing
  unsigned long long bad = 0;
  for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < embd; e += gridDim.x * blockDim.x) {
    const float p0 = partial_dev(0, seq, e, h[e]), p1 = partial_dev(1, seq, e, h[e]);
    const float want_in = group ? __fadd_rn(p0, p1) : (rank == 0 ? p1 : p0);
    const float got = in[e];
    if (__float_as_uint(got) != __float_as_uint(want_in)) bad++;
    h[e] = __fadd_rn(h[e], group ? got : __fadd_rn(out[e], got));
  }
  if (bad) atomicAdd(&st->mismatches, bad);
}

__global__ void next_token_kernel(unsigned long long *token) { *token += 1; }

// Spin fallback: one thread stores / polls the word with system scope.
__global__ void spin_write_kernel(void *w, unsigned long long v, int bits) {
  __threadfence_system();  // the partial's stores land before the ready word
  if (bits == 64)
    cuda::atomic_ref<unsigned long long, cuda::thread_scope_system>(
        *static_cast<unsigned long long *>(w)).store(v, cuda::memory_order_release);
  else
    cuda::atomic_ref<unsigned int, cuda::thread_scope_system>(*static_cast<unsigned int *>(w))
        .store(unsigned(v), cuda::memory_order_release);
}
__global__ void spin_wait_kernel(const void *w, unsigned long long v, int bits) {
  uint64_t t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  for (;;) {
    const unsigned long long x = load_word(w, bits);
    // Cyclic GEQ, as CU_STREAM_WAIT_VALUE_GEQ compares.
    if (bits == 64 ? (long long)(x - v) >= 0 : (int)(unsigned(x) - unsigned(v)) >= 0) return;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (t - t0 > kSpinGiveUpNs) return;  // the consume kernel reports it
    __nanosleep(100);
  }
}

// How this run writes and waits on words.
enum class Ops { Mem64, Mem32, Spin };
inline const char *ops_name(Ops o) {
  return o == Ops::Mem64 ? "64-bit stream memory operations"
         : o == Ops::Mem32 ? "32-bit stream memory operations"
                           : "spin kernels (no stream memory operations)";
}
inline int ops_bits(Ops o) { return o == Ops::Mem32 ? 32 : 64; }

// Stream-ordered write of `v` into the word at device address `w`.
inline CUresult write_word(Ops o, cudaStream_t s, void *w, unsigned long long v) {
  const auto addr = CUdeviceptr(reinterpret_cast<uintptr_t>(w));
  switch (o) {
    case Ops::Mem64: return cuStreamWriteValue64(s, addr, v, CU_STREAM_WRITE_VALUE_DEFAULT);
    case Ops::Mem32: return cuStreamWriteValue32(s, addr, cuuint32_t(v), CU_STREAM_WRITE_VALUE_DEFAULT);
    default:
      spin_write_kernel<<<1, 1, 0, s>>>(w, v, 64);
      return cudaGetLastError() == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_LAUNCH_FAILED;
  }
}
// Stream-ordered wait until the word >= v (cyclic).
inline CUresult wait_word(Ops o, cudaStream_t s, void *w, unsigned long long v) {
  const auto addr = CUdeviceptr(reinterpret_cast<uintptr_t>(w));
  switch (o) {
    case Ops::Mem64: return cuStreamWaitValue64(s, addr, v, CU_STREAM_WAIT_VALUE_GEQ);
    case Ops::Mem32: return cuStreamWaitValue32(s, addr, cuuint32_t(v), CU_STREAM_WAIT_VALUE_GEQ);
    default:
      spin_wait_kernel<<<1, 1, 0, s>>>(w, v, 64);
      return cudaGetLastError() == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_LAUNCH_FAILED;
  }
}

// What the device supports: 64-bit mem ops, else 32-bit (always there
// since CUDA 12), else spin kernels. `forced` ("64", "32", "spin") wins.
inline Ops pick_ops(int device, const char *forced) {
  if (forced != nullptr && forced[0] == '6') return Ops::Mem64;
  if (forced != nullptr && forced[0] == '3') return Ops::Mem32;
  if (forced != nullptr && forced[0] == 's') return Ops::Spin;
  CUdevice dev;
  int v64 = 0;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, device) != CUDA_SUCCESS) return Ops::Spin;
  if (cuDeviceGetAttribute(&v64, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev) ==
          CUDA_SUCCESS && v64)
    return Ops::Mem64;
  return Ops::Mem32;
}

// CPU reference of `tokens` tokens from h = 0: h += p0 + p1 per gate.
inline void reference(int slots, int embd, int tokens, float *ref) {
  for (int e = 0; e < embd; e++) ref[e] = 0.0f;
  for (int t = 0; t < tokens; t++)
    for (int slot = 0; slot < slots; slot++) {
      const uint64_t seq = uint64_t(t) * slots + slot + 1;
      for (int e = 0; e < embd; e++) {
        const float p0 = partial_host(0, seq, e, ref[e]), p1 = partial_host(1, seq, e, ref[e]);
        ref[e] = ref[e] + (p0 + p1);
      }
    }
}

}  // namespace demo
