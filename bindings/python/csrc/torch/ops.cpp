#include "ops.hpp"

#include <c10/util/Exception.h>
#include <ds4tp/ds4tp.h>

namespace ds4tp_torch {
namespace {

// The reductions' element types: what ds4tp_group_all_reduce, _reduce and
// _reduce_scatter combine (f16 and bf16 in f32, integers wrapping).
struct DtypeRow {
  c10::ScalarType torch;
  int ds4tp;
};
constexpr DtypeRow kReduced[] = {
    {c10::ScalarType::Float, DS4TP_DTYPE_F32},   {c10::ScalarType::Half, DS4TP_DTYPE_F16},
    {c10::ScalarType::BFloat16, DS4TP_DTYPE_BF16}, {c10::ScalarType::Double, DS4TP_DTYPE_F64},
    {c10::ScalarType::Int, DS4TP_DTYPE_I32},     {c10::ScalarType::Long, DS4TP_DTYPE_I64},
    {c10::ScalarType::Byte, DS4TP_DTYPE_U8},
};

struct OpRow {
  c10d::ReduceOp::RedOpType torch;
  int ds4tp;
};
constexpr OpRow kReduceOps[] = {
    {c10d::ReduceOp::SUM, DS4TP_OP_SUM},
    {c10d::ReduceOp::MAX, DS4TP_OP_MAX},
    {c10d::ReduceOp::MIN, DS4TP_OP_MIN},
    {c10d::ReduceOp::PRODUCT, DS4TP_OP_PROD},
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
  for (const auto &row : kReduced)
    if (row.torch == t) return row.ds4tp;
  TORCH_CHECK(false, "ds4tp backend: ", op, " reduces torch.float32, torch.float16, ",
              "torch.bfloat16, torch.float64, torch.int32, torch.int64 and torch.uint8; this ",
              "tensor is ", dtype_name(t), ", which libds4tp does not reduce. Convert it (e.g. ",
              "t.int() or t.float()) or ", kGloo);
}

int reduce_op(const c10d::ReduceOp &r, const char *op) {
  for (const auto &row : kReduceOps)
    if (row.torch == r.op_) return row.ds4tp;
  const char *instead = r.op_ == c10d::ReduceOp::AVG
                            ? "for AVG reduce with SUM and divide by the group's size "
                              "(t /= dist.get_world_size(group)), or "
                            : "";
  TORCH_CHECK(false, "ds4tp backend: ", op, " with ReduceOp.", reduce_op_name(r.op_),
              ": libds4tp reduces with SUM, MAX, MIN and PRODUCT; ", instead, kGloo);
}

void refuse(const char *op, const char *why) {
  TORCH_CHECK(false, "ds4tp backend: ", op, " is not in libds4tp yet (", why, "); ", kGloo);
}

void refuse(const char *op) {
  refuse(op,
         "its groups have all_reduce, reduce, reduce_scatter, all_gather, gather, scatter, "
         "broadcast, all_to_all and barrier");
}

}  // namespace ds4tp_torch
