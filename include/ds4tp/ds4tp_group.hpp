// Groups of N ranks for C++20 (part of the header-only wrapper; included
// by ds4tp.hpp, do not include alone). RAII over ds4tp_group_*:
//
//   auto groups = ds4tp::Group::local(4);     // one handle per thread
//   // on thread r:
//   groups[r].all_reduce(hidden);             // a std::vector<float>, in place
//   groups[r].all_reduce(logits_max, ds4tp::ReduceOp::Max);
//
//   ds4tp::GroupOptions o;  o.rank = r;  o.group_size = 4;
//   ds4tp::Group g(o, id);  g.connect();      // one process per rank
//
// Buffers are contiguous ranges (std::vector, std::array, std::span, C
// arrays). Reductions take the element types of ds4tp_dtype (float, Half,
// BFloat16, double, int32_t, int64_t, uint8_t); the calls that only move
// data take any trivially copyable type, and their counts are elements of
// it. Failures throw ds4tp::Error with the handle's message; sizes that do
// not fit throw DS4TP_EINVAL before any rank waits. One thread per handle
// at a time; mark_failed() from any thread.
#ifndef DS4TP_GROUP_HPP
#define DS4TP_GROUP_HPP

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <ranges>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ds4tp.h"

namespace ds4tp {
inline namespace cxx {

struct GroupOptions : ds4tp_group_options {
  GroupOptions() noexcept { ds4tp_group_options_init(this); }
};
static_assert(sizeof(GroupOptions) == sizeof(ds4tp_group_options), "GroupOptions adds no fields");

// Element carriers of f16 and bf16 (the bits; the library converts).
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};
static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2);

// ds4tp_reduce_op: how a reduction combines the ranks' elements.
enum class ReduceOp : int {
  Sum = DS4TP_OP_SUM,
  Max = DS4TP_OP_MAX,
  Min = DS4TP_OP_MIN,
  Prod = DS4TP_OP_PROD
};

// The ds4tp_dtype of each element type the reductions take.
template <class T>
struct DtypeOf;  // no definition: not an element type of the reductions
template <> struct DtypeOf<float> { static constexpr int value = DS4TP_DTYPE_F32; };
template <> struct DtypeOf<Half> { static constexpr int value = DS4TP_DTYPE_F16; };
template <> struct DtypeOf<BFloat16> { static constexpr int value = DS4TP_DTYPE_BF16; };
template <> struct DtypeOf<double> { static constexpr int value = DS4TP_DTYPE_F64; };
template <> struct DtypeOf<int32_t> { static constexpr int value = DS4TP_DTYPE_I32; };
template <> struct DtypeOf<int64_t> { static constexpr int value = DS4TP_DTYPE_I64; };
template <> struct DtypeOf<uint8_t> { static constexpr int value = DS4TP_DTYPE_U8; };

template <class T>
concept Element = requires { DtypeOf<T>::value; };

namespace group_detail {
template <class R>
concept Contiguous = std::ranges::contiguous_range<R> && std::ranges::sized_range<R>;
template <class R>
using ElementOf = std::remove_cv_t<std::ranges::range_value_t<R>>;
// A range the call may write into (not a const view).
template <class R>
concept Writable = Contiguous<R> &&
    !std::is_const_v<std::remove_pointer_t<decltype(std::ranges::data(std::declval<R &>()))>>;
// in (read) and out (written) of one element type the reductions take.
template <class In, class Out>
concept Reducible = Contiguous<In> && Writable<Out> && Element<ElementOf<Out>> &&
                    std::same_as<ElementOf<In>, ElementOf<Out>>;
// in and out of one trivially copyable element type (the moving calls).
template <class In, class Out>
concept Movable = Contiguous<In> && Writable<Out> &&
                  std::is_trivially_copyable_v<ElementOf<Out>> &&
                  std::same_as<ElementOf<In>, ElementOf<Out>>;

inline bool overlap(const void *a, size_t an, const void *b, size_t bn) {
  const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return an != 0 && bn != 0 && x < y + bn && y < x + an;
}
}  // namespace group_detail

class Group {
 public:
  Group() noexcept = default;
  // ds4tp_group_new: rank 0 binds the rendezvous listener here.
  explicit Group(const ds4tp_group_options &opt, const ds4tp_identity *identity = nullptr) {
    ds4tp_group *g = nullptr;
    if (int rc = ds4tp_group_new(&g, &opt, identity); rc != DS4TP_OK) {
      const char *m = ds4tp_last_error();
      throw Error(rc, m != nullptr && m[0] != '\0' ? m : ds4tp_strerror(rc));
    }
    g_ = g;
  }
  // Adopts a raw handle (freed by this object).
  explicit Group(ds4tp_group *raw) noexcept : g_(raw) {}
  ~Group() { ds4tp_group_free(g_); }
  Group(const Group &) = delete;
  Group &operator=(const Group &) = delete;
  Group(Group &&o) noexcept : g_(std::exchange(o.g_, nullptr)) {}
  Group &operator=(Group &&o) noexcept {
    if (this != &o) {
      ds4tp_group_free(g_);
      g_ = std::exchange(o.g_, nullptr);
    }
    return *this;
  }

  // ds4tp_group_new_local: n connected handles for n threads of this process.
  static std::vector<Group> local(int n, const ds4tp_group_options *opt = nullptr,
                                  const ds4tp_identity *identity = nullptr) {
    std::vector<ds4tp_group *> raw(n > 0 ? size_t(n) : 0);
    if (int rc = ds4tp_group_new_local(raw.data(), n, opt, identity); rc != DS4TP_OK) {
      const char *m = ds4tp_last_error();
      throw Error(rc, m != nullptr && m[0] != '\0' ? m : ds4tp_strerror(rc));
    }
    std::vector<Group> out;
    out.reserve(raw.size());
    for (ds4tp_group *g : raw) out.emplace_back(g);
    return out;
  }

  void connect() { check_here(ds4tp_group_connect(live())); }

  // In place: every rank's `buf` becomes the op over the ranks' (rank order;
  // identical bits on every rank). Every rank passes the same count and op.
  template <class R>
    requires group_detail::Writable<R> && Element<group_detail::ElementOf<R>>
  void all_reduce(R &&buf, ReduceOp op = ReduceOp::Sum) {
    using T = group_detail::ElementOf<R>;
    check_here(ds4tp_group_all_reduce(live(), std::ranges::data(buf), std::ranges::size(buf),
                                      DtypeOf<T>::value, int(op)));
  }
  // Raw form: `count` elements of `dtype` (DS4TP_DTYPE_*) at `buf`.
  void all_reduce(void *buf, uint64_t count, int dtype, int op = DS4TP_OP_SUM) {
    check_here(ds4tp_group_all_reduce(live(), buf, count, dtype, op));
  }
  // out (count elements) = this rank's segment of the op over every rank's
  // `in` (size() * count elements): in_r[rank() * count, +count).
  template <class In, class Out>
    requires group_detail::Reducible<In, Out>
  void reduce_scatter(const In &in, Out &&out, ReduceOp op = ReduceOp::Sum) {
    ds4tp_group *const g = live();  // before size() and rank()
    using T = group_detail::ElementOf<Out>;
    const size_t count = std::ranges::size(out);
    need(std::ranges::size(in) == count * size_t(size()), "reduce_scatter: in has",
         std::ranges::size(in), "elements; size() x out.size() =", count * size_t(size()));
    if (group_detail::overlap(std::ranges::data(in), std::ranges::size(in) * sizeof(T),
                              std::ranges::data(out), count * sizeof(T)))
      throw Error(DS4TP_EINVAL, "reduce_scatter: in and out overlap (reduce_scatter_in_place "
                                "takes one buffer)");
    check_here(ds4tp_group_reduce_scatter(g, std::ranges::data(in), std::ranges::data(out),
                                          count, DtypeOf<T>::value, int(op)));
  }
  // In place: `buf` holds size() segments; this rank's becomes its segment
  // of the reduction, and is returned (the others are left as they were).
  template <class R>
    requires group_detail::Writable<R> && Element<group_detail::ElementOf<R>>
  std::span<group_detail::ElementOf<R>> reduce_scatter_in_place(R &&buf,
                                                                ReduceOp op = ReduceOp::Sum) {
    ds4tp_group *const g = live();  // before size() and rank()
    using T = group_detail::ElementOf<R>;
    const size_t n = size_t(size()), total = std::ranges::size(buf), count = total / n;
    need(total % n == 0, "reduce_scatter_in_place: buf has", total,
         "elements, not size() equal segments: a multiple of size() =", n);
    T *seg = std::ranges::data(buf) + size_t(rank()) * count;
    check_here(ds4tp_group_reduce_scatter(g, std::ranges::data(buf), seg, count,
                                          DtypeOf<T>::value, int(op)));
    return {seg, count};
  }
  // The root's `buf` becomes the op over every rank's, in place; the other
  // ranks' are left as they were.
  template <class R>
    requires group_detail::Writable<R> && Element<group_detail::ElementOf<R>>
  void reduce(R &&buf, int root, ReduceOp op = ReduceOp::Sum) {
    using T = group_detail::ElementOf<R>;
    check_here(ds4tp_group_reduce(live(), std::ranges::data(buf), std::ranges::size(buf),
                                  DtypeOf<T>::value, int(op), root));
  }
  // out (size() * in.size() bytes) gets every rank's `in`, in rank order.
  void all_gather(std::span<const std::byte> in, std::span<std::byte> out) {
    if (out.size() != in.size() * size_t(size()))
      throw Error(DS4TP_EINVAL, "all_gather: out has " + std::to_string(out.size()) +
                                    " bytes, size() * in.size() = " +
                                    std::to_string(in.size() * size_t(size())) + " needed");
    check_here(ds4tp_group_all_gather(live(), in.data(), out.data(), in.size()));
  }
  void broadcast(std::span<std::byte> buf, int root) {
    check_here(ds4tp_group_broadcast(live(), buf.data(), buf.size(), root));
  }
  void barrier() { check_here(ds4tp_group_barrier(live())); }

  // The calls below move elements of any trivially copyable type; counts
  // are elements of it. At the root, out (size() * in.size()) gets every
  // rank's `in` in rank order; elsewhere out is not used (may be empty).
  template <class In, class Out>
    requires group_detail::Movable<In, Out>
  void gather(const In &in, Out &&out, int root) {
    ds4tp_group *const g = live();  // before size() and rank()
    using T = group_detail::ElementOf<Out>;
    const size_t k = std::ranges::size(in);
    T *dst = nullptr;
    if (root == rank()) {
      need(std::ranges::size(out) == k * size_t(size()), "gather: out has",
           std::ranges::size(out), "elements; size() x in.size() =", k * size_t(size()));
      dst = std::ranges::data(out);
      disjoint("gather", in, out);
    }
    check_here(ds4tp_group_gather(g, std::ranges::data(in), dst, k * sizeof(T), root));
  }
  // Every rank's out gets its part of the root's `in` (size() * out.size()):
  // rank k's is in[k * out.size(), +out.size()); elsewhere in is not used.
  template <class In, class Out>
    requires group_detail::Movable<In, Out>
  void scatter(const In &in, Out &&out, int root) {
    ds4tp_group *const g = live();  // before size() and rank()
    using T = group_detail::ElementOf<Out>;
    const size_t k = std::ranges::size(out);
    const T *src = nullptr;
    if (root == rank()) {
      need(std::ranges::size(in) == k * size_t(size()), "scatter: in has", std::ranges::size(in),
           "elements; size() x out.size() =", k * size_t(size()));
      src = std::ranges::data(in);
      disjoint("scatter", in, out);
    }
    check_here(ds4tp_group_scatter(g, src, std::ranges::data(out), k * sizeof(T), root));
  }
  // Uneven parts: rank r gives counts[r] elements (the same counts on every
  // rank; in.size() == counts[rank()]); out (their sum) gets them packed in
  // rank order.
  template <class In, class Out>
    requires group_detail::Movable<In, Out>
  void all_gather_v(const In &in, Out &&out, std::span<const uint64_t> counts) {
    ds4tp_group *const g = live();  // before size() and rank()
    using T = group_detail::ElementOf<Out>;
    const std::vector<uint64_t> bytes = scaled("all_gather_v: counts has", counts, sizeof(T));
    need(std::ranges::size(in) == counts[size_t(rank())], "all_gather_v: in has",
         std::ranges::size(in), "elements; counts[rank()] =", counts[size_t(rank())]);
    const uint64_t total = std::accumulate(counts.begin(), counts.end(), uint64_t(0));
    need(std::ranges::size(out) == total, "all_gather_v: out has", std::ranges::size(out),
         "elements; the sum of counts =", total);
    disjoint("all_gather_v", in, out);
    check_here(ds4tp_group_all_gather_v(g, std::ranges::data(in), std::ranges::data(out),
                                        bytes.data()));
  }
  // Rows: `in` holds `rows` rows of this rank's slice (in.size() / rows
  // elements each); out (size() * in.size()) holds `rows` full rows, rank
  // r's slice of row i at i * size() * slice + r * slice.
  template <class In, class Out>
    requires group_detail::Movable<In, Out>
  void all_gather_rows(const In &in, Out &&out, uint64_t rows) {
    ds4tp_group *const g = live();  // before size() and rank()
    using T = group_detail::ElementOf<Out>;
    const size_t k = std::ranges::size(in);
    need(rows == 0 ? k == 0 : k % rows == 0, "all_gather_rows: in has", k,
         "elements, not whole rows: a multiple of rows =", rows);
    need(std::ranges::size(out) == k * size_t(size()), "all_gather_rows: out has",
         std::ranges::size(out), "elements; size() x in.size() =", k * size_t(size()));
    disjoint("all_gather_rows", in, out);
    const uint64_t row_bytes = rows == 0 ? 0 : k / rows * sizeof(T);
    check_here(ds4tp_group_all_gather_rows(g, std::ranges::data(in), std::ranges::data(out),
                                           rows, row_bytes));
  }
  // All-to-all with per-peer counts (MoE dispatch and combine), one entry
  // per rank each: send_counts[r] elements of `in` from send_offsets[r] go
  // to rank r; rank r's land in `out` from recv_offsets[r], recv_counts[r]
  // of them (what rank r sends, else EDESYNC). Empty offsets: packed.
  template <class In, class Out>
    requires group_detail::Movable<In, Out>
  void all_to_all_v(const In &in, std::span<const uint64_t> send_counts, Out &&out,
                    std::span<const uint64_t> recv_counts,
                    std::span<const uint64_t> send_offsets = {},
                    std::span<const uint64_t> recv_offsets = {}) {
    ds4tp_group *const g = live();  // before size() and rank()
    using T = group_detail::ElementOf<Out>;
    const size_t t = sizeof(T);
    const auto sb = scaled("all_to_all_v: send_counts has", send_counts, t);
    const auto rb = scaled("all_to_all_v: recv_counts has", recv_counts, t);
    const auto so = offsets("send", send_counts, send_offsets, std::ranges::size(in), t);
    const auto ro = offsets("recv", recv_counts, recv_offsets, std::ranges::size(out), t);
    disjoint("all_to_all_v", in, out);
    check_here(ds4tp_group_all_to_all_v(g, std::ranges::data(in), sb.data(), so.data(),
                                        std::ranges::data(out), rb.data(), ro.data()));
  }

  // Library-allocated buffer of chunk_bytes (valid for the handle's life);
  // over shm, once connected, all_reduce of a vector at its start needs
  // no copy in (take it after connect).
  std::span<std::byte> buffer() {
    void *p = nullptr;
    uint64_t n = 0;
    check_here(ds4tp_group_buffer(live(), &p, &n));
    return {static_cast<std::byte *>(p), size_t(n)};
  }

  // The plan the group runs, in one line (ds4tp_group_plan); after connect.
  std::string plan() const {
    size_t need = 0;
    ds4tp_group_plan(live(), nullptr, 0, &need);
    std::string text(need + 1, '\0');
    check_here(ds4tp_group_plan(live(), text.data(), text.size(), &need));
    text.resize(need);
    return text;
  }

  // The flight recorder (the last 256 calls, each rank's arrival) as text
  // to `path` and a Chrome trace to `path`.json ("%r": the rank); any thread.
  void dump(const char *path) const { check(ds4tp_group_dump(live(), path)); }

  int rank() const noexcept { return ds4tp_group_rank(g_); }
  int size() const noexcept { return ds4tp_group_size(g_); }
  int transport() const noexcept { return ds4tp_group_transport(g_); }
  int rendezvous_port() const noexcept { return ds4tp_group_rendezvous_port(g_); }
  int failed() const noexcept { return ds4tp_group_failed(g_); }
  const char *errmsg() const noexcept { return ds4tp_group_errmsg(g_); }
  void mark_failed() noexcept { ds4tp_group_mark_failed(g_); }

  ds4tp_group *get() const noexcept { return g_; }
  explicit operator bool() const noexcept { return g_ != nullptr; }
  // Gives up ownership: the caller must ds4tp_group_free the result.
  ds4tp_group *release() noexcept { return std::exchange(g_, nullptr); }

 private:
  ds4tp_group *live() const {
    if (g_ == nullptr) throw Error(DS4TP_EINVAL, "the group handle is empty (moved from?)");
    return g_;
  }
  // DS4TP_EINVAL "<what> <got> <want_what> <want> needed" unless ok.
  static void need(bool ok, const char *what, uint64_t got, const char *want_what, uint64_t want) {
    if (!ok)
      throw Error(DS4TP_EINVAL, std::string(what) + " " + std::to_string(got) + " " + want_what +
                                    " " + std::to_string(want) + " needed");
  }
  template <class In, class Out>
  static void disjoint(const char *call, const In &in, const Out &out) {
    using T = group_detail::ElementOf<Out>;
    if (group_detail::overlap(std::ranges::data(in), std::ranges::size(in) * sizeof(T),
                              std::ranges::data(out), std::ranges::size(out) * sizeof(T)))
      throw Error(DS4TP_EINVAL, std::string(call) + ": in and out overlap");
  }
  // One count per rank, in bytes of elements of `esize`.
  std::vector<uint64_t> scaled(const char *what, std::span<const uint64_t> counts,
                               size_t esize) const {
    need(counts.size() == size_t(size()), what, counts.size(), "entries; one per rank:",
         uint64_t(size()));
    std::vector<uint64_t> bytes(counts.begin(), counts.end());
    for (auto &b : bytes) b *= esize;
    return bytes;
  }
  // all_to_all_v's `side` ("send" or "recv") offsets in bytes (packed when
  // `given` is empty), each part inside the buffer of `have` elements.
  std::vector<uint64_t> offsets(const std::string &side, std::span<const uint64_t> counts,
                                std::span<const uint64_t> given, size_t have,
                                size_t esize) const {
    const std::string what = "all_to_all_v: " + side + "_offsets";
    if (!given.empty())
      need(given.size() == counts.size(), (what + " has").c_str(), given.size(),
           "entries; one per rank:", counts.size());
    std::vector<uint64_t> out(counts.size());
    uint64_t at = 0;
    for (size_t r = 0; r < counts.size(); r++) {
      const uint64_t off = given.empty() ? at : given[r];
      at = off + counts[r];
      if (counts[r] != 0 && at > have)
        throw Error(DS4TP_EINVAL, what + "[" + std::to_string(r) + "] + " + side + "_counts[" +
                                      std::to_string(r) + "] = " + std::to_string(at) +
                                      " is past the buffer's " + std::to_string(have) +
                                      " elements");
      out[r] = off * esize;
    }
    return out;
  }
  // The handle's own message: another thread's call cannot overwrite it.
  void check_here(int rc) const {
    if (rc != DS4TP_OK) throw Error(rc, ds4tp_group_errmsg(g_));
  }

  ds4tp_group *g_ = nullptr;
};

}  // namespace cxx
}  // namespace ds4tp

#endif  // DS4TP_GROUP_HPP
