// Shared by the CUDA examples (ds4tp_cuda_demo.cu, ds4tp_cuda_stream.cu):
// the toy model's partial (exact float arithmetic, so a CPU reference
// reproduces it bit for bit), the common command-line arguments, the
// identity both ranks present, and the no-device skip.
//
// Define DS4TP_CUDA_EXAMPLE (the name messages start with, e.g. "cuda
// demo") before including this header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "ds4tp/ds4tp.h"
#include "../common/spawn_worker.h"

#ifndef DS4TP_CUDA_EXAMPLE
#error "define DS4TP_CUDA_EXAMPLE (the name messages start with) before cuda_common.cuh"
#endif

// Returns 1 from the calling function when a CUDA runtime call fails.
#define CUDA_OK(call)                                                                   \
  do {                                                                                  \
    cudaError_t e_ = (call);                                                            \
    if (e_ != cudaSuccess) {                                                            \
      std::fprintf(stderr, DS4TP_CUDA_EXAMPLE ": %s: %s\n", #call, cudaGetErrorString(e_)); \
      return 1;                                                                         \
    }                                                                                   \
  } while (0)

namespace demo {

// Toy partial: exact float arithmetic (no contraction) so the CPU can
// reproduce it bit for bit.
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
  volatile float scaled = h * -0.25f;  // keep the host from fusing either
  return weight(rank, seq, e) + scaled;
}

// The arguments both examples take; each example's Config adds its own
// and sets its defaults.
struct Args {
  int layers = 4, embd = 4096, tokens = 8, transport = DS4TP_TRANSPORT_AUTO;
  int worker_port = 0;  // set in the spawned worker (--role-worker PORT)
};

// One "--name value" pair: 1 when it was one of Args's, 0 when the name
// is not, -1 for a bad value.
inline int parse_arg(Args &c, const char *a, const char *v) {
  if (!std::strcmp(a, "--layers")) c.layers = std::atoi(v);
  else if (!std::strcmp(a, "--embd")) c.embd = std::atoi(v);
  else if (!std::strcmp(a, "--tokens")) c.tokens = std::atoi(v);
  else if (!std::strcmp(a, "--role-worker")) c.worker_port = std::atoi(v);
  else if (!std::strcmp(a, "--transport")) {
    if (!std::strcmp(v, "auto")) c.transport = DS4TP_TRANSPORT_AUTO;
    else if (!std::strcmp(v, "tcp")) c.transport = DS4TP_TRANSPORT_TCP;
    else if (!std::strcmp(v, "shm")) c.transport = DS4TP_TRANSPORT_SHM;
    else return -1;
  } else return 0;
  return 1;
}

inline bool args_ok(const Args &c) {
  return c.layers >= 1 && c.layers <= 128 && c.embd >= 1 && c.embd <= (1 << 20) && c.tokens >= 1;
}

inline ds4tp_identity identity(const Args &c) {
  ds4tp_identity id;
  ds4tp_identity_init(&id);
  id.model_bytes = 1;
  id.model_id = 0xC0DA;
  id.n_layer = uint32_t(c.layers);
  id.n_embd = uint32_t(c.embd);
  id.n_vocab = 32000;
  id.quant_bits = 32;
  id.ctx_size = 4096;
  return id;
}

// False (after printing "ds4tp <example>: skipped: ...") without a CUDA
// device; the caller then exits 77 (ctest: skipped).
inline bool have_device() {
  int ndev = 0;
  cudaError_t ce = cudaGetDeviceCount(&ndev);
  if (ce == cudaSuccess && ndev > 0) return true;
  std::printf("ds4tp " DS4TP_CUDA_EXAMPLE ": skipped: no CUDA device (%s)\n",
              ce != cudaSuccess ? cudaGetErrorString(ce) : "0 devices");
  return false;
}

}  // namespace demo
