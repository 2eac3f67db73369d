#include "group/call.hpp"

#include <fmt/format.h>

namespace ds4tp::group {

size_t dtype_bytes(Dtype t) {
  switch (t) {
    case Dtype::F64: case Dtype::I64: return 8;
    case Dtype::F32: case Dtype::I32: return 4;
    case Dtype::F16: case Dtype::BF16: return 2;
    case Dtype::U8: return 1;
  }
  return 1;
}

const char *dtype_name(Dtype t) {
  switch (t) {
    case Dtype::F32: return "f32";
    case Dtype::F16: return "f16";
    case Dtype::BF16: return "bf16";
    case Dtype::F64: return "f64";
    case Dtype::I32: return "i32";
    case Dtype::I64: return "i64";
    case Dtype::U8: return "u8";
  }
  return "?";
}

const char *op_name(Op op) {
  switch (op) {
    case Op::Sum: return "sum";
    case Op::Max: return "max";
    case Op::Min: return "min";
    case Op::Prod: return "prod";
  }
  return "?";
}

const char *kind_name(Kind k) {
  switch (k) {
    case Kind::AllReduce: return "all_reduce";
    case Kind::AllGather: return "all_gather";
    case Kind::Broadcast: return "broadcast";
    case Kind::Barrier: return "barrier";
    case Kind::ReduceScatter: return "reduce_scatter";
    case Kind::Reduce: return "reduce";
    case Kind::Gather: return "gather";
    case Kind::Scatter: return "scatter";
    case Kind::AllGatherV: return "all_gather_v";
    case Kind::AllGatherRows: return "all_gather_rows";
    case Kind::AllToAllV: return "all_to_all_v";
    case Kind::Counts: return "all_to_all_v counts";
  }
  return "a call of another version";
}

uint32_t call_word(Kind k, int dtype, Op op, int root) {
  return (uint32_t(k) & 0x1fu) | uint32_t(dtype + 1) << 5 | uint32_t(op) << 8 |
         (uint32_t(root) & 0x3fu) << 10;
}

std::string call_name(uint32_t call) {
  const Kind k = Kind(call & 0x1fu);
  const int dtype = int((call >> 5) & 7u) - 1;
  const Op op = Op((call >> 8) & 3u);
  const int root = int((call >> 10) & 0x3fu);
  std::string s = kind_name(k);
  if (dtype >= 0) s += fmt::format(" {}", dtype_name(Dtype(dtype)));
  const bool reduces = k == Kind::AllReduce || k == Kind::ReduceScatter || k == Kind::Reduce;
  if (reduces) s += fmt::format(" {}", op_name(op));
  if (k == Kind::Broadcast || k == Kind::Reduce || k == Kind::Gather || k == Kind::Scatter)
    s += fmt::format(" at rank {}", root);
  return s;
}

}  // namespace ds4tp::group
