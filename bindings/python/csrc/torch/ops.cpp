#include "ops.hpp"

#include <c10/util/Exception.h>
#include <ds4tp/ds4tp.h>

namespace ds4tp_torch {
namespace {

// all_reduce's element types: what ds4tp_group_all_reduce sums (in f32).
struct DtypeRow {
  c10::ScalarType torch;
  int ds4tp;
};
constexpr DtypeRow kSummed[] = {
    {c10::ScalarType::Float, DS4TP_DTYPE_F32},
    {c10::ScalarType::Half, DS4TP_DTYPE_F16},
    {c10::ScalarType::BFloat16, DS4TP_DTYPE_BF16},
};

struct OpRow {
  c10d::ReduceOp::RedOpType torch;
  int ds4tp;
};
constexpr OpRow kReduceOps[] = {
    {c10d::ReduceOp::SUM, DS4TP_OP_SUM},
};

const char *reduce_op_name(c10d::ReduceOp::RedOpType r) {
  switch (r) {
    case c10d::ReduceOp::SUM: return "SUM";
    case c10d::ReduceOp::AVG: return "AVG";
    case c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case c10d::ReduceOp::MIN: return "MIN";
    case c10d::ReduceOp::MAX: return "MAX";
    case c10d::ReduceOp::BAND: return "BAND";
    case c10d::ReduceOp::BOR: return "BOR";
    case c10d::ReduceOp::BXOR: return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return "an unknown ReduceOp";
  }
}

constexpr const char *kGloo =
    "use Gloo for this op: gloo = dist.new_group(backend='gloo') (every rank, once), then pass "
    "group=gloo";

}  // namespace

const char *dtype_name(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float: return "torch.float32";
    case c10::ScalarType::Half: return "torch.float16";
    case c10::ScalarType::BFloat16: return "torch.bfloat16";
    case c10::ScalarType::Double: return "torch.float64";
    case c10::ScalarType::Byte: return "torch.uint8";
    case c10::ScalarType::Char: return "torch.int8";
    case c10::ScalarType::Short: return "torch.int16";
    case c10::ScalarType::Int: return "torch.int32";
    case c10::ScalarType::Long: return "torch.int64";
    case c10::ScalarType::Bool: return "torch.bool";
    case c10::ScalarType::ComplexFloat: return "torch.complex64";
    case c10::ScalarType::ComplexDouble: return "torch.complex128";
    default: return c10::toString(t);
  }
}

int reduce_dtype(c10::ScalarType t, const char *op) {
  for (const auto &row : kSummed)
    if (row.torch == t) return row.ds4tp;
  TORCH_CHECK(false, "ds4tp backend: ", op, " sums torch.float32, torch.float16 and torch.bfloat16 ",
              "(accumulated in float32); this tensor is ", dtype_name(t),
              ", which libds4tp does not sum yet. Convert it (e.g. t.float()) or ", kGloo);
}

int reduce_op(const c10d::ReduceOp &r, const char *op) {
  for (const auto &row : kReduceOps)
    if (row.torch == r.op_) return row.ds4tp;
  TORCH_CHECK(false, "ds4tp backend: ", op, " with ReduceOp.", reduce_op_name(r.op_),
              ": libds4tp reduces with SUM only so far; ", kGloo);
}

void refuse(const char *op) {
  TORCH_CHECK(false, "ds4tp backend: ", op,
              " is not in libds4tp yet (it has all_reduce, all_gather, _all_gather_base, "
              "broadcast and barrier); ",
              kGloo);
}

}  // namespace ds4tp_torch
