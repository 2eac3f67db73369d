// Ring all-reduce over a mesh lane (tcp or rdma): the members stand in a
// ring (member m sends to m + 1 and hears from m - 1) and each chunk of
// the call is cut into n segments. n - 1 reduce-scatter steps pass a
// growing partial sum of each segment around the ring until member m
// holds the whole sum of segment m + 1; n - 1 all-gather steps then pass
// the summed segments around once more. Each member sends and receives
// (n - 1) / n of the chunk per phase, as two-shot does, but only to its
// neighbour: the schedule for links that are not a full mesh of equal
// paths, and for many members, where two-shot's all-to-all bursts meet
// at every receiver at once.
//
// Summation order: segment s is summed along the ring from member s,
// ((x_s + x_s+1) + x_s+2) + ... + x_s-1, rounded to the element type at
// each hop (f16 and bf16 partial sums travel as f16 and bf16). Each
// segment is summed once, on one member, and copied to the others, so
// every rank gets the same bits; they are not the member-order sum of
// one-shot and two-shot (docs/GROUPS.md "Algorithms").
#include <algorithm>
#include <cstring>

#include "group/group.hpp"

namespace ds4tp::group {

int Group::ring(Lane &l, uint8_t *p, uint64_t count, Dtype t, Op op, Error &err) {
  const size_t esz = dtype_bytes(t);
  const uint64_t n = uint64_t(l.n), me = uint64_t(l.me);
  const int to = int((me + 1) % n), from = int((me + n - 1) % n);
  const uint64_t per = opt_.chunk_bytes / esz / n * n;
  const void *views[kMaxRanks];
  for (uint64_t off = 0; off < count;) {
    const uint64_t m = std::min(count - off, per);
    // Every message of a step has the same size: seg elements; the last
    // segment may be shorter and goes padded from scratch_.
    const uint64_t seg = (m + n - 1) / n;
    const size_t segb = size_t(seg * esz);
    uint8_t *q = p + off * esz;
    auto lo = [&](uint64_t s) { return std::min(s * seg, m); };
    auto len = [&](uint64_t s) { return lo(s + 1) - lo(s); };
    auto out = [&](uint64_t s) -> const uint8_t * {
      if (len(s) == seg) return q + lo(s) * esz;
      std::memcpy(scratch_, q + lo(s) * esz, size_t(len(s) * esz));
      std::memset(scratch_ + len(s) * esz, 0, size_t((seg - len(s)) * esz));
      return scratch_;
    };
    // Reduce-scatter: at step k this member passes segment me - k on and
    // adds its own part of segment me - k - 1 to the partial it receives.
    for (uint64_t k = 0; k + 1 < n; k++) {
      const uint64_t give = (me + n - k) % n, take = (me + 2 * n - k - 1) % n;
      const uint64_t s = ++l.step;
      if (int rc = l.shift(s, out(give), segb, to, from, views, err)) return finish(l, rc, err);
      uint8_t *mine = q + lo(take) * esz;
      const void *two[2] = {views[from], mine};
      if (len(take)) group::reduce(t, op, two, 2, mine, size_t(len(take)));
      l.done(s);
    }
    // All-gather: at step k this member passes segment me + 1 - k on and
    // takes segment me - k, already summed.
    for (uint64_t k = 0; k + 1 < n; k++) {
      const uint64_t give = (me + 1 + n - k) % n, take = (me + n - k) % n;
      const uint64_t s = ++l.step;
      if (int rc = l.shift(s, out(give), segb, to, from, views, err)) return finish(l, rc, err);
      if (len(take)) std::memcpy(q + lo(take) * esz, views[from], size_t(len(take) * esz));
      l.done(s);
    }
    off += m;
  }
  return DS4TP_OK;
}

}  // namespace ds4tp::group
