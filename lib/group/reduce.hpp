// Element conversions and the rank-order reduction (pure: no I/O).
//
// Every rank runs reduce_sum over the same N contributions in the same
// order (rank 0, 1, ..., N-1), accumulating in f32 and rounding once to
// the element type, so every rank produces identical bits. Compiled
// without fast-math, so the compiler keeps that order. The one exception:
// where two different NaNs meet, which payload the NaN result keeps is
// the operand order the compiler gave that add (it may swap them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "group/call.hpp"

namespace ds4tp::group {

float half_to_float(uint16_t h);
uint16_t float_to_half(float f);  // round to nearest even; NaN stays NaN
float bf16_to_float(uint16_t h);
uint16_t float_to_bf16(float f);  // round to nearest even; NaN stays NaN

// out[i] = round(src[0][i] + src[1][i] + ... + src[n-1][i]) in f32, left to
// right, for n = 1..16 ranks, f32, f16 and bf16. `out` may alias any src at
// the same offset (each element is read from every src before it is
// written).
void reduce_sum(Dtype t, const void *const *src, int n, void *out, size_t count);

// out[i] = src[0][i] op src[1][i] op ... op src[n-1][i], left to right, for
// every dtype and op (reduce_ops.cpp; sums of f32, f16 and bf16 are
// reduce_sum's). f16 and bf16 sums and products accumulate in f32 and
// round once; f64 in f64; integers wrap as unsigned arithmetic does (two's
// complement). max and min keep the first NaN in rank order where a float
// operand is one; otherwise they return one of the operands, so their bits
// never depend on rounding. `out` may alias a src as above.
void reduce(Dtype t, Op op, const void *const *src, int n, void *out, size_t count);

// float_to_half over an array, in vector lanes as reduce_sum's f16
// path does it (the tests hold it to the scalar bit for bit).
void floats_to_half(const float *in, uint16_t *out, size_t count);

// The kernels behind reduce_sum, all giving the same bits (NaN payloads
// aside when two different NaNs meet): the portable one (the compilers'
// generic vectors: SSE2 on x86-64, NEON on Arm) everywhere; on x86-64 one
// with AVX2 and F16C when the CPU has them; on AArch64 one with NEON's
// half conversions (every AArch64 CPU). reduce_sum takes the best one,
// once per process; DS4TP_SUM_KERNEL=portable in the environment keeps
// the portable one (for comparing them, or a CPU that misreports).
enum class Kernel : int { Portable = 0, X86Avx2 = 1, Arm64Neon = 2 };
bool kernel_usable(Kernel k);
// Every kernel this CPU can run: the portable one first, then the
// hardware one of this build's architecture when the CPU has it.
std::vector<Kernel> usable_kernels();
Kernel active_kernel();
const char *kernel_name(Kernel k);  // "portable", "avx2+f16c", "neon"
// reduce_sum / floats_to_half with a given kernel (tests, bench); the
// kernel must be usable. A 1-rank sum always runs the portable kernel.
void reduce_sum_with(Kernel k, Dtype t, const void *const *src, int n, void *out, size_t count);
void floats_to_half_with(Kernel k, const float *in, uint16_t *out, size_t count);

}  // namespace ds4tp::group
