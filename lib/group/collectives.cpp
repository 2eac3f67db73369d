// The collectives beside all-reduce, all-gather, broadcast and barrier:
// reduce-scatter, reduce and gather to a root, scatter from one, all-gather
// of uneven parts and of rows, and all-to-all with per-peer counts. A flat
// group runs each as steps of pieces (Lane::pieces: a piece per member, in
// one step of the lane's link); a tiered group composes them of its
// all-reduce, all-gather and broadcast through spare_ (all-to-all is flat
// only). Reductions combine in member order, as all-reduce's one-shot
// does, so every rank that gets a result gets the same bits.
#include <algorithm>
#include <cstring>

#include "group/all_to_all.hpp"
#include "group/group.hpp"

namespace ds4tp::group {
namespace {

uint64_t clip(uint64_t total, uint64_t at, uint64_t cap) {
  return total > at ? std::min(total - at, cap) : 0;
}

}  // namespace

int all_to_all_steps(const uint64_t (*matrix)[kAllToAllRanks], int n, int me,
                     const uint64_t *recv_bytes, uint64_t cap, uint64_t &steps, Error &err) {
  uint64_t most = 0;
  for (int r = 0; r < n; r++) {
    if (matrix[r][me] != recv_bytes[r])
      return err.set(DS4TP_EDESYNC, "all_to_all_v: rank {} sends rank {} {} bytes, which "
                     "expects {} from it (counts differ)",
                     r, me, matrix[r][me], recv_bytes[r]);
    for (int q = 0; q < n; q++) most = std::max(most, matrix[r][q]);
  }
  steps = std::max<uint64_t>(1, most / cap + (most % cap != 0));  // no overflow near 2^64
  return DS4TP_OK;
}

uint64_t Group::piece_cap() const {
  const uint64_t per = opt_.chunk_bytes / uint64_t(opt_.size);
  return per > 192 ? (per - 128) & ~uint64_t(63) : 64;
}

// `steps` steps of pieces: give(k, src, out, in) fills step k's pieces and
// sizes, take(k, views, in) reads what came.
template <typename Give, typename Take>
int Group::piece_steps(uint64_t steps, Give give, Take take, Error &err) {
  const uint8_t *src[kMaxRanks];
  uint64_t out[kMaxRanks], in[kMaxRanks];
  const void *views[kMaxRanks];
  for (uint64_t k = 0; k < steps; k++) {
    std::fill(src, src + kMaxRanks, nullptr);
    give(k, src, out, in);
    const uint64_t s = ++local_.step;
    if (int rc = local_.pieces(s, src, out, in, views, err)) return finish(local_, rc, err);
    take(k, views, in);
    local_.done(s);
  }
  return DS4TP_OK;
}

int Group::reduce_scatter(const void *in, void *out, uint64_t count, Dtype t, Op op, Error &err) {
  if (int rc = begin(err, call_word(Kind::ReduceScatter, int(t), op))) return rc;
  const uint64_t others = count * dtype_bytes(t) * uint64_t(opt_.size - 1);
  const size_t esz = dtype_bytes(t);
  const int n = opt_.size;
  const auto *src = static_cast<const uint8_t *>(in);
  auto *dst = static_cast<uint8_t *>(out);
  if (tiered_) {  // each chunk of every segment, packed, all-reduced; this rank's kept
    const uint64_t m = std::max<uint64_t>(1, opt_.chunk_bytes / esz / uint64_t(n));
    spare_.resize(size_t(m * esz) * size_t(n));
    for (uint64_t off = 0; off < count; off += m) {
      const uint64_t c = std::min(m, count - off);
      for (int r = 0; r < n; r++)
        std::memcpy(spare_.data() + size_t(r) * c * esz, src + (uint64_t(r) * count + off) * esz,
                    size_t(c * esz));
      if (int rc = tiered_all_reduce(spare_.data(), c * uint64_t(n), t, op, err))
        return ended(rc, 0, 0);
      std::memmove(dst + off * esz, spare_.data() + size_t(opt_.rank) * c * esz, size_t(c * esz));
    }
    return ended(DS4TP_OK, others, others);
  }
  const uint64_t m = std::max<uint64_t>(1, piece_cap() / esz);
  return ended(piece_steps(
      (count + m - 1) / m,
      [&](uint64_t k, const uint8_t **s, uint64_t *o, uint64_t *i) {
        const uint64_t c = clip(count, k * m, m);
        for (int r = 0; r < n; r++) {
          s[r] = src + (uint64_t(r) * count + k * m) * esz;
          o[r] = i[r] = c * esz;
        }
      },
      [&](uint64_t k, const void **views, const uint64_t *i) {
        if (i[0]) group::reduce(t, op, views, n, dst + k * m * esz, size_t(i[0] / esz));
      },
      err),
               others, others);
}

int Group::reduce(void *buf, uint64_t count, Dtype t, Op op, int root, Error &err) {
  if (int rc = begin(err, call_word(Kind::Reduce, int(t), op, root))) return rc;
  const size_t esz = dtype_bytes(t);
  auto *p = static_cast<uint8_t *>(buf);
  const bool me = root == opt_.rank;
  // Payload bytes: the others' vectors to the root.
  const uint64_t mine = count * esz, sent = me ? 0 : mine,
                 got = me ? mine * uint64_t(opt_.size - 1) : 0;
  if (tiered_) {  // all-reduced in chunks; the root's in place, the others' in spare_
    const uint64_t m = std::max<uint64_t>(1, opt_.chunk_bytes / esz);
    if (!me) spare_.resize(size_t(m * esz));
    for (uint64_t off = 0; off < count; off += m) {
      const uint64_t c = std::min(m, count - off);
      uint8_t *q = p + off * esz;
      if (!me) q = static_cast<uint8_t *>(std::memcpy(spare_.data(), q, size_t(c * esz)));
      if (int rc = tiered_all_reduce(q, c, t, op, err)) return ended(rc, 0, 0);
    }
    return ended(DS4TP_OK, sent, got);
  }
  const uint64_t m = std::max<uint64_t>(1, piece_cap() / esz);
  return ended(piece_steps(
      (count + m - 1) / m,
      [&](uint64_t k, const uint8_t **s, uint64_t *o, uint64_t *i) {
        const uint64_t b = clip(count, k * m, m) * esz;
        for (int r = 0; r < opt_.size; r++) {
          o[r] = r == root ? b : 0;
          i[r] = me ? b : 0;
        }
        s[root] = p + k * m * esz;
      },
      [&](uint64_t k, const void **views, const uint64_t *i) {
        if (me && i[0]) group::reduce(t, op, views, opt_.size, p + k * m * esz, size_t(i[0] / esz));
      },
      err),
               sent, got);
}

int Group::gather(const void *in, void *out, uint64_t bytes, int root, Error &err) {
  if (int rc = begin(err, call_word(Kind::Gather, -1, Op::Sum, root))) return rc;
  const auto *src = static_cast<const uint8_t *>(in);
  auto *dst = static_cast<uint8_t *>(out);
  const bool me = root == opt_.rank;
  const uint64_t sent = me ? 0 : bytes, got = me ? bytes * uint64_t(opt_.size - 1) : 0;
  const uint64_t n = uint64_t(opt_.size);
  if (tiered_) {  // all-gathered in chunks through spare_; the root keeps them
    const uint64_t m = std::max<uint64_t>(1, opt_.chunk_bytes / n);
    spare_.resize(size_t(m * n));
    for (uint64_t off = 0; off < bytes; off += m) {
      const uint64_t c = std::min(m, bytes - off);
      if (int rc = tiered_all_gather(src + off, spare_.data(), c, err)) return ended(rc, 0, 0);
      for (uint64_t r = 0; me && r < n; r++)
        std::memmove(dst + r * bytes + off, spare_.data() + r * c, size_t(c));
    }
    return ended(DS4TP_OK, sent, got);
  }
  const uint64_t m = piece_cap();
  return ended(piece_steps(
      std::max<uint64_t>(1, (bytes + m - 1) / m),
      [&](uint64_t k, const uint8_t **s, uint64_t *o, uint64_t *i) {
        const uint64_t b = clip(bytes, k * m, m);
        for (int r = 0; r < opt_.size; r++) {
          o[r] = r == root ? b : 0;
          i[r] = me ? b : 0;
        }
        s[root] = src + k * m;
      },
      [&](uint64_t k, const void **views, const uint64_t *i) {
        for (uint64_t r = 0; me && i[0] && r < n; r++)
          std::memmove(dst + r * bytes + k * m, views[r], size_t(i[r]));
      },
      err),
               sent, got);
}

int Group::scatter(const void *in, void *out, uint64_t bytes, int root, Error &err) {
  if (int rc = begin(err, call_word(Kind::Scatter, -1, Op::Sum, root))) return rc;
  const auto *src = static_cast<const uint8_t *>(in);
  auto *dst = static_cast<uint8_t *>(out);
  const bool me = root == opt_.rank;
  const uint64_t sent = me ? bytes * uint64_t(opt_.size - 1) : 0, got = me ? 0 : bytes;
  const uint64_t n = uint64_t(opt_.size);
  if (tiered_) {  // the root's pieces of each chunk, packed, broadcast; each keeps its own
    const uint64_t m = std::max<uint64_t>(1, opt_.chunk_bytes / n);
    spare_.resize(size_t(m * n));
    for (uint64_t off = 0; off < bytes; off += m) {
      const uint64_t c = std::min(m, bytes - off);
      for (uint64_t r = 0; me && r < n; r++)
        std::memcpy(spare_.data() + r * c, src + r * bytes + off, size_t(c));
      if (int rc = tiered_broadcast(spare_.data(), c * n, root, err)) return ended(rc, 0, 0);
      std::memmove(dst + off, spare_.data() + uint64_t(opt_.rank) * c, size_t(c));
    }
    return ended(DS4TP_OK, sent, got);
  }
  const uint64_t m = piece_cap();
  return ended(piece_steps(
      std::max<uint64_t>(1, (bytes + m - 1) / m),
      [&](uint64_t k, const uint8_t **s, uint64_t *o, uint64_t *i) {
        const uint64_t b = clip(bytes, k * m, m);
        for (int r = 0; r < opt_.size; r++) {
          o[r] = me ? b : 0;
          i[r] = r == root ? b : 0;
          if (me) s[r] = src + uint64_t(r) * bytes + k * m;
        }
      },
      [&](uint64_t k, const void **views, const uint64_t *i) {
        if (i[root]) std::memmove(dst + k * m, views[root], size_t(i[root]));
      },
      err),
               sent, got);
}

int Group::all_gather_v(const void *in, void *out, const uint64_t *bytes, Error &err) {
  if (int rc = begin(err, call_word(Kind::AllGatherV))) return rc;
  const auto *src = static_cast<const uint8_t *>(in);
  auto *dst = static_cast<uint8_t *>(out);
  const int n = opt_.size, me = opt_.rank;
  uint64_t at[kMaxRanks], most = 0;  // where rank r's part goes in `out`
  for (int r = 0; r < n; r++) {
    at[r] = r == 0 ? 0 : at[r - 1] + bytes[r - 1];
    most = std::max(most, bytes[r]);
  }
  const uint64_t sent = bytes[me] * uint64_t(n - 1), got = at[n - 1] + bytes[n - 1] - bytes[me];
  if (tiered_) {  // every part padded to the largest, all-gathered in chunks
    const uint64_t m = std::max<uint64_t>(1, opt_.chunk_bytes / uint64_t(n));
    spare_.resize(size_t(m) * size_t(n + 1));
    uint8_t *mine = spare_.data() + m * uint64_t(n);
    for (uint64_t off = 0; off < most; off += m) {
      const uint64_t c = std::min(m, most - off), have = clip(bytes[me], off, c);
      std::memcpy(mine, src + off, size_t(have));
      std::memset(mine + have, 0, size_t(c - have));
      if (int rc = tiered_all_gather(mine, spare_.data(), c, err)) return ended(rc, 0, 0);
      for (int r = 0; r < n; r++)
        std::memmove(dst + at[r] + off, spare_.data() + uint64_t(r) * c,
                     size_t(clip(bytes[r], off, c)));
    }
    return ended(DS4TP_OK, sent, got);
  }
  const uint64_t m = piece_cap();
  return ended(piece_steps(
      std::max<uint64_t>(1, (most + m - 1) / m),
      [&](uint64_t k, const uint8_t **s, uint64_t *o, uint64_t *i) {
        for (int r = 0; r < n; r++) {
          s[r] = src + k * m;
          o[r] = clip(bytes[me], k * m, m);
          i[r] = clip(bytes[r], k * m, m);
        }
      },
      [&](uint64_t k, const void **views, const uint64_t *i) {
        for (int r = 0; r < n; r++)
          if (i[r]) std::memmove(dst + at[r] + k * m, views[r], size_t(i[r]));
      },
      err),
               sent, got);
}

int Group::all_gather_rows(const void *in, void *out, uint64_t rows, uint64_t row_bytes,
                           Error &err) {
  if (int rc = begin(err, call_word(Kind::AllGatherRows))) return rc;
  const auto *src = static_cast<const uint8_t *>(in);
  auto *dst = static_cast<uint8_t *>(out);
  const uint64_t n = uint64_t(opt_.size), total = rows * row_bytes, wide = n * row_bytes;
  const uint64_t others = total * (n - 1);
  // Byte b of rank r's rows lands in row b / row_bytes at r's place in it.
  auto place = [&](uint64_t r, uint64_t off, const uint8_t *from, uint64_t len) {
    while (len > 0) {
      const uint64_t row = off / row_bytes, col = off % row_bytes;
      const uint64_t take = std::min(len, row_bytes - col);
      std::memmove(dst + row * wide + r * row_bytes + col, from, size_t(take));
      from += take, off += take, len -= take;
    }
  };
  const uint64_t m = tiered_ ? std::max<uint64_t>(1, opt_.chunk_bytes / n) : piece_cap();
  if (tiered_) spare_.resize(size_t(m * n));
  for (uint64_t off = 0, k = 0; off < total || (k == 0 && total == 0); off += m, k++) {
    const uint64_t c = std::min(m, total - off);
    if (tiered_) {
      if (int rc = tiered_all_gather(src + off, spare_.data(), c, err)) return ended(rc, 0, 0);
      for (uint64_t r = 0; r < n; r++) place(r, off, spare_.data() + r * c, c);
    } else {
      const void *views[kMaxRanks];
      const uint64_t s = ++local_.step;
      if (int rc = local_.exchange(s, src + off, size_t(c), -1, views, err))
        return finish(local_, rc, err);
      for (uint64_t r = 0; r < n; r++) place(r, off, static_cast<const uint8_t *>(views[r]), c);
      local_.done(s);
    }
    if (total == 0) break;
  }
  return ended(DS4TP_OK, others, others);
}

int Group::all_to_all_v(const void *in, void *out, const Plan &plan, Error &err) {
  if (int rc = begin(err, call_word(Kind::AllToAllV))) return rc;
  if (tiered_)
    return err.set(DS4TP_EUNSUPPORTED, "all_to_all_v runs on flat groups, and this one is tiered "
                   "(its ranks span hosts and share some): give every rank transport TCP, or "
                   "DS4TP_GROUP_FLAT=1 at rank 0");
  const int n = opt_.size, me = opt_.rank;
  // Every rank's send counts to every rank first: each rank learns what it
  // gets and how many steps the largest piece takes.
  local_.call = call_word(Kind::Counts);
  static_assert(kAllToAllRanks == kMaxRanks);
  uint64_t matrix[kMaxRanks][kMaxRanks];
  {
    const void *views[kMaxRanks];
    const uint64_t s = ++local_.step;
    if (int rc = local_.exchange(s, plan.send_bytes, size_t(n) * 8, -1, views, err))
      return ended(finish(local_, rc, err), 0, 0);
    for (int r = 0; r < n; r++) std::memcpy(matrix[r], views[r], size_t(n) * 8);
    local_.done(s);
  }
  local_.call = call_word(Kind::AllToAllV);
  const uint64_t m = piece_cap();
  uint64_t steps = 0, sent = 0, got = 0;
  if (int rc = all_to_all_steps(matrix, n, me, plan.recv_bytes, m, steps, err))
    return ended(finish(local_, rc, err), 0, 0);
  for (int r = 0; r < n; r++)
    if (r != me) sent += plan.send_bytes[r], got += plan.recv_bytes[r];
  const auto *src = static_cast<const uint8_t *>(in);
  auto *dst = static_cast<uint8_t *>(out);
  return ended(piece_steps(
      steps,
      [&](uint64_t k, const uint8_t **s, uint64_t *o, uint64_t *i) {
        for (int r = 0; r < n; r++) {
          o[r] = clip(plan.send_bytes[r], k * m, m);
          i[r] = clip(plan.recv_bytes[r], k * m, m);
          s[r] = src + plan.send_offsets[r] + k * m;
        }
      },
      [&](uint64_t k, const void **views, const uint64_t *i) {
        for (int r = 0; r < n; r++)
          if (i[r]) std::memmove(dst + plan.recv_offsets[r] + k * m, views[r], size_t(i[r]));
      },
      err),
               sent, got);
}

}  // namespace ds4tp::group
