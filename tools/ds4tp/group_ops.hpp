// The collectives `ds4tp group --op` runs on a connected group, each call
// checked bit for bit against a reference computed here (group_ops.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ds4tp/ds4tp.h"

namespace ds4tp_cli {

enum class GroupOp {
  AllReduce, ReduceScatter, Reduce, Gather, Scatter, AllGather, AllGatherV, AllGatherRows,
  AllToAllV, Broadcast, Barrier
};
constexpr int kGroupOps = int(GroupOp::Barrier) + 1;

const char *group_op_name(GroupOp op);
// The op named (all_reduce ... barrier); false if none is.
bool parse_group_op(const std::string &name, GroupOp *op);

struct OpCase {
  GroupOp op = GroupOp::AllReduce;
  int dtype = DS4TP_DTYPE_F32;
  int reduce = DS4TP_OP_SUM;  // the reductions' op
  uint64_t count = 0;         // elements of dtype per rank (see group_ops.cpp)
  int iters = 0;
};

struct OpResult {
  std::vector<double> us;  // each timed call, sorted
  uint64_t bytes = 0;      // this rank's bytes per call
  std::string error;       // "" or what failed, with the library's message
};

// Runs 20 untimed calls, then c.iters timed ones, on a connected group of
// plain (flat or tiered) ranks; every result is compared with the
// reference of exact inputs (elements.hpp), so the order the plan combines
// in does not matter. Every rank runs the same cases in the same order.
OpResult run_op(ds4tp_group *g, const OpCase &c);

}  // namespace ds4tp_cli
