// What a group call is, in the 16 bits every step of it carries (the step
// header's call word over tcp and rdma, the rank line's over shm): ranks
// in different collectives, dtypes, reduce ops or roots at the same step
// fail it with EDESYNC naming both calls, instead of mixing their bytes.
// Pure.
#pragma once

#include <cstdint>
#include <string>

namespace ds4tp::group {

enum class Dtype : int { F32 = 0, F16 = 1, BF16 = 2, F64 = 3, I32 = 4, I64 = 5, U8 = 6 };
constexpr int kDtypes = 7;
enum class Op : int { Sum = 0, Max = 1, Min = 2, Prod = 3 };
constexpr int kOps = 4;

// The collectives; a call's steps all carry its kind.
enum class Kind : uint32_t {
  AllReduce = 1, AllGather = 2, Broadcast = 3, Barrier = 4, ReduceScatter = 5, Reduce = 6,
  Gather = 7, Scatter = 8, AllGatherV = 9, AllGatherRows = 10, AllToAllV = 11,
  Counts = 12,  // the counts every rank sends and takes, ahead of an all-to-all
};

size_t dtype_bytes(Dtype t);
const char *dtype_name(Dtype t);
const char *op_name(Op op);
const char *kind_name(Kind k);

// kind in bits 0..4, dtype + 1 in bits 5..7 (0: bytes, no dtype), op in
// bits 8..9, root in bits 10..15 (0 where the call has none).
uint32_t call_word(Kind k, int dtype = -1, Op op = Op::Sum, int root = 0);
// "all_reduce f16 sum", "broadcast from rank 2", "barrier".
std::string call_name(uint32_t call);

}  // namespace ds4tp::group
