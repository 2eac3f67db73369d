// Groups of N ranks for C++20 (part of the header-only wrapper; included
// by ds4tp.hpp, do not include alone). RAII over ds4tp_group_*:
//
//   auto groups = ds4tp::Group::local(4);     // one handle per thread
//   // on thread r:
//   groups[r].all_reduce(std::span<float>(hidden));
//
//   ds4tp::GroupOptions o;  o.rank = r;  o.group_size = 4;
//   ds4tp::Group g(o, id);  g.connect();      // one process per rank
//
// Failures throw ds4tp::Error with the handle's message. One thread per
// handle at a time; mark_failed() from any thread.
#ifndef DS4TP_GROUP_HPP
#define DS4TP_GROUP_HPP

#include <cstdint>
#include <span>
#include <string>
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

  // In place; identical bits on every rank (rank-order f32 sum).
  void all_reduce(std::span<float> v) {
    check_here(ds4tp_group_all_reduce(live(), v.data(), v.size(), DS4TP_DTYPE_F32, DS4TP_OP_SUM));
  }
  void all_reduce(std::span<Half> v) {
    check_here(ds4tp_group_all_reduce(live(), v.data(), v.size(), DS4TP_DTYPE_F16, DS4TP_OP_SUM));
  }
  void all_reduce(std::span<BFloat16> v) {
    check_here(ds4tp_group_all_reduce(live(), v.data(), v.size(), DS4TP_DTYPE_BF16, DS4TP_OP_SUM));
  }
  // Raw form: `count` elements of `dtype` (DS4TP_DTYPE_*) at `buf`.
  void all_reduce(void *buf, uint64_t count, int dtype) {
    check_here(ds4tp_group_all_reduce(live(), buf, count, dtype, DS4TP_OP_SUM));
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
  // The handle's own message: another thread's call cannot overwrite it.
  void check_here(int rc) const {
    if (rc != DS4TP_OK) throw Error(rc, ds4tp_group_errmsg(g_));
  }

  ds4tp_group *g_ = nullptr;
};

}  // namespace cxx
}  // namespace ds4tp

#endif  // DS4TP_GROUP_HPP
