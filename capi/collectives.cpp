// extern "C" group collectives beside all-reduce, all-gather, broadcast
// and barrier (group.cpp): argument checks naming the argument, then the
// group's call through the one wrapper (group_handle.hpp).
#include <string>

#include "group_handle.hpp"

using ds4tp::Error;
using ds4tp::capi::guard;
using ds4tp::capi::record;
namespace grp = ds4tp::group;

namespace {

// EINVAL naming the call and what is wrong, recorded on `g`.
template <typename... Args>
int refuse(ds4tp_group *g, fmt::format_string<Args...> f, Args &&...args) {
  Error e;
  e.set(DS4TP_EINVAL, f, std::forward<Args>(args)...);
  return record(g, e.code, e);
}

// Why `dtype`/`op`/`root` cannot be used, or "" where they can.
std::string bad_dtype(int dtype) {
  if (dtype >= DS4TP_DTYPE_F32 && dtype <= DS4TP_DTYPE_U8) return "";
  return fmt::format("dtype {} is not a ds4tp_dtype (DS4TP_DTYPE_F32 .. DS4TP_DTYPE_U8)", dtype);
}
std::string bad_op(int op) {
  if (op >= DS4TP_OP_SUM && op <= DS4TP_OP_PROD) return "";
  return fmt::format("op {} is not a ds4tp_reduce_op (DS4TP_OP_SUM .. DS4TP_OP_PROD)", op);
}
std::string bad_root(const ds4tp_group *g, int root) {
  const int n = g->impl->size();
  if (root >= 0 && root < n) return "";
  return fmt::format("root {} is outside the group's ranks 0..{}", root, n - 1);
}

}  // namespace

extern "C" {

int ds4tp_group_reduce_scatter(ds4tp_group *g, const void *in, void *out, uint64_t count,
                               int dtype, int op) {
  if (g != nullptr) {
    std::string why = bad_dtype(dtype) + bad_op(op);
    if (!why.empty()) return refuse(g, "reduce_scatter: {}", why);
    if (count != 0 && (in == nullptr || out == nullptr))
      return refuse(g, "reduce_scatter: NULL buffer for {} elements per rank", count);
  }
  GROUP_CALL(g, g->impl->reduce_scatter(in, out, count, grp::Dtype(dtype), grp::Op(op), e));
}

int ds4tp_group_reduce(ds4tp_group *g, void *buf, uint64_t count, int dtype, int op, int root) {
  if (g != nullptr) {
    std::string why = bad_dtype(dtype) + bad_op(op) + bad_root(g, root);
    if (!why.empty()) return refuse(g, "reduce: {}", why);
    if (count != 0 && buf == nullptr) return refuse(g, "reduce: NULL buffer for {} elements", count);
  }
  GROUP_CALL(g, g->impl->reduce(buf, count, grp::Dtype(dtype), grp::Op(op), root, e));
}

int ds4tp_group_gather(ds4tp_group *g, const void *in, void *out, uint64_t bytes, int root) {
  if (g != nullptr) {
    if (std::string why = bad_root(g, root); !why.empty()) return refuse(g, "gather: {}", why);
    const bool me = root == g->impl->rank();
    if (bytes != 0 && (in == nullptr || (me && out == nullptr)))
      return refuse(g, "gather: NULL {} buffer for {} bytes", in == nullptr ? "in" : "out", bytes);
  }
  GROUP_CALL(g, g->impl->gather(in, out, bytes, root, e));
}

int ds4tp_group_scatter(ds4tp_group *g, const void *in, void *out, uint64_t bytes, int root) {
  if (g != nullptr) {
    if (std::string why = bad_root(g, root); !why.empty()) return refuse(g, "scatter: {}", why);
    const bool me = root == g->impl->rank();
    if (bytes != 0 && (out == nullptr || (me && in == nullptr)))
      return refuse(g, "scatter: NULL {} buffer for {} bytes", out == nullptr ? "out" : "in", bytes);
  }
  GROUP_CALL(g, g->impl->scatter(in, out, bytes, root, e));
}

int ds4tp_group_all_gather_v(ds4tp_group *g, const void *in, void *out, const uint64_t *bytes) {
  if (g != nullptr) {
    if (bytes == nullptr) return refuse(g, "all_gather_v: bytes (one count per rank) is NULL");
    uint64_t total = 0;
    for (int r = 0; r < g->impl->size(); r++) total += bytes[r];
    const uint64_t mine = bytes[g->impl->rank()];
    if ((mine != 0 && in == nullptr) || (total != 0 && out == nullptr))
      return refuse(g, "all_gather_v: NULL {} buffer ({} bytes)", in == nullptr ? "in" : "out",
                    in == nullptr ? mine : total);
  }
  GROUP_CALL(g, g->impl->all_gather_v(in, out, bytes, e));
}

int ds4tp_group_all_gather_rows(ds4tp_group *g, const void *in, void *out, uint64_t rows,
                                uint64_t row_bytes) {
  if (g != nullptr && rows != 0 && row_bytes != 0 && (in == nullptr || out == nullptr))
    return refuse(g, "all_gather_rows: NULL buffer for {} rows of {} bytes", rows, row_bytes);
  GROUP_CALL(g, g->impl->all_gather_rows(in, out, rows, row_bytes, e));
}

int ds4tp_group_all_to_all_v(ds4tp_group *g, const void *in, const uint64_t *send_bytes,
                             const uint64_t *send_offsets, void *out, const uint64_t *recv_bytes,
                             const uint64_t *recv_offsets) {
  if (g != nullptr) {
    if (send_bytes == nullptr || send_offsets == nullptr || recv_bytes == nullptr ||
        recv_offsets == nullptr)
      return refuse(g, "all_to_all_v: the counts and offsets (one per rank each) must not be NULL");
    uint64_t sent = 0, got = 0;
    for (int r = 0; r < g->impl->size(); r++) sent += send_bytes[r], got += recv_bytes[r];
    if ((sent != 0 && in == nullptr) || (got != 0 && out == nullptr))
      return refuse(g, "all_to_all_v: NULL {} buffer ({} bytes)", in == nullptr ? "in" : "out",
                    in == nullptr ? sent : got);
  }
  const grp::Group::Plan plan{send_bytes, send_offsets, recv_bytes, recv_offsets};
  GROUP_CALL(g, g->impl->all_to_all_v(in, out, plan, e));
}

}  // extern "C"
