// The group's step forms over a lane's link (lane.hpp). Each message is a
// 24-byte step header (group/wire.hpp) and a body; links that move
// through memory (shm) check the members' byte counts instead.
#include "group/lane.hpp"

#include <algorithm>

#include "group/group.hpp"
#include "group/wire.hpp"
#include "talk/group_beat.hpp"

namespace ds4tp::group {

link::Sum sum_of(Dtype t, Op op) {
  constexpr auto fn = [](const void *ctx, const void *const *views, int n, void *out,
                         size_t count) {
    const auto packed = reinterpret_cast<intptr_t>(ctx);
    reduce(Dtype(packed & 0xff), Op(packed >> 8), views, n, out, count);
  };
  return {fn, reinterpret_cast<const void *>(intptr_t(t) | intptr_t(op) << 8), dtype_bytes(t)};
}

namespace {

// The step header of the group's wire (wire.hpp), as a link encodes and
// checks it.
void encode(const link::Step &s, uint64_t body, uint8_t *out) {
  encode_step_header(s.number, body, s.call, s.mark, out);
}
int check(const uint8_t *got, const link::Step &s, uint64_t body, int member, Error &err) {
  if (int rc = check_step_header(got, s.number, body, s.call, member, err)) return rc;
  if (s.marks != nullptr) s.marks->take(member, step_header_mark(got));
  return DS4TP_OK;
}

}  // namespace

link::Step Lane::like() {
  link::Step st;
  st.size = kStepHeaderBytes;
  st.call = call;
  st.check = check;
  st.encode = encode;
  st.mark = mark;
  st.marks = &marks;
  if (first || every) st.arrival_ns = arrival_ns;
  first = false;
  if (beat != nullptr) {
    st.in_call = in_call;
    st.in_call_ctx = this;
  }
  return st;
}

bool Lane::in_call(const void *lane, int member) {
  const auto *l = static_cast<const Lane *>(lane);
  const int rank = l->ranks.empty() ? member : l->ranks[size_t(member)];
  return int32_t(l->beat->entered(rank) - l->call_index) >= 0;  // counts wrap
}

static_assert(link::kMaxMembers >= kMaxRanks && link::kRoom >= kStepHeaderBytes);

int Lane::exchange(uint64_t s, const void *mine, size_t bytes, int root, const void **views,
                   Error &err) {
  const uint8_t *src[kMaxRanks];
  for (int r = 0; r < n; r++) src[r] = static_cast<const uint8_t *>(mine);
  return run(s, bytes, root, mine != nullptr ? src : nullptr, views, err);
}

int Lane::exchange_segments(uint64_t s, const void *mine, size_t seg, const void **views,
                            Error &err) {
  const uint8_t *src[kMaxRanks];
  for (int r = 0; r < n; r++) src[r] = static_cast<const uint8_t *>(mine) + size_t(r) * seg;
  const int rc = run(s, seg, -1, src, views, err);
  if (link->kind() != DS4TP_TRANSPORT_SHM) views[me] = src[me];  // shm reads its slot's copy
  return rc;
}

int Lane::shift(uint64_t s, const void *mine, size_t bytes, int to, int from, const void **views,
                Error &err) {
  const uint8_t *src[kMaxRanks] = {};
  src[to] = static_cast<const uint8_t *>(mine);
  uint8_t alone[kStepHeaderBytes];
  encode_step_header(s, 0, call, mark, alone);
  return run(s, bytes, from, src, views, err, alone);
}

int Lane::pieces(uint64_t s, const uint8_t *const *src, const uint64_t *out, const uint64_t *in,
                 const void **views, Error &err) {
  link::Step st = like();
  st.number = s;
  for (int m = 0; m < n; m++) st.body = std::max({st.body, out[m], in[m]});
  st.src = src;
  st.sizes_out = out;
  st.sizes_in = in;
  st.views = views;
  const int rc = link->step(st, err);
  views[me] = src[me];
  return rc;
}

int Lane::run(uint64_t s, size_t bytes, int root, const uint8_t *const *src, const void **views,
              Error &err, const uint8_t *alone) {
  uint8_t own[kStepHeaderBytes];
  // From the group buffer's start the header goes in the room before it.
  uint8_t *hdr = src != nullptr && roomy != nullptr && src[0] == roomy && src[n - 1] == roomy
                     ? const_cast<uint8_t *>(roomy) - kStepHeaderBytes
                     : own;
  encode_step_header(s, src != nullptr ? bytes : 0, call, mark, hdr);
  link::Step st = like();
  st.hdr = hdr;
  st.number = s;
  st.body = bytes;
  st.alone = alone;
  st.src = src;
  st.root = root;
  st.views = views;
  return link->step(st, err);
}

}  // namespace ds4tp::group
