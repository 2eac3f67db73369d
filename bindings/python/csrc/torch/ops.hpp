// What libds4tp offers torch.distributed, in one place: the element types
// the reductions take, the reduce ops, and the refusal every other op gets.
// When the C API gains a dtype or a reduce op it is one line in the tables
// of ops.cpp; a new collective is a method (process_group.cpp or
// collectives.cpp) that calls the library instead of refuse().
#pragma once

#include <c10/core/ScalarType.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

namespace ds4tp_torch {

// The DS4TP_DTYPE_* that the reductions (all_reduce, reduce,
// reduce_scatter) combine for `t`, or throws naming the dtype and the ways
// round it. `op` is the torch.distributed call's name.
int reduce_dtype(c10::ScalarType t, const char *op);

// The DS4TP_OP_* for `r`, or throws naming the reduce op.
int reduce_op(const c10d::ReduceOp &r, const char *op);

// Throws: `op` (torch.distributed's name for it) is not in libds4tp yet;
// the message says what ds4tp has and how to run the op over Gloo beside it.
[[noreturn]] void refuse(const char *op);
// The same, with `why` in place of the list of what ds4tp has.
[[noreturn]] void refuse(const char *op, const char *why);

// "torch.float32": the name a Python user knows a dtype by.
const char *dtype_name(c10::ScalarType t);

}  // namespace ds4tp_torch
