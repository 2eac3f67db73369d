// An all-to-all's plan from hostile counts (group/all_to_all.hpp): the
// count matrix every rank declared, this rank's expectations and the
// piece size come from the input. A plan is refused exactly when some
// rank's count for this rank differs from what it expects, naming that
// rank; an accepted one covers the largest piece, is never empty, and
// takes no step beyond it (no overflow near 2^64).
#include "fuzz/fuzz.hpp"

#include <cstring>
#include <string>

#include "group/all_to_all.hpp"

namespace ds4tp::fuzz {

namespace {
uint64_t take64(const uint8_t *&d, size_t &n) {
  uint64_t v = 0;
  const size_t k = n < 8 ? n : 8;
  std::memcpy(&v, d, k);
  d += k;
  n -= k;
  return v;
}
}  // namespace

int all_to_all(const uint8_t *d, size_t n) {
  using group::kAllToAllRanks;
  if (n < 2) return 0;
  const int ranks = 2 + d[0] % (kAllToAllRanks - 1), me = d[1] % ranks;
  d += 2;
  n -= 2;
  const uint64_t cap = 64 + (take64(d, n) % (1u << 20));
  uint64_t matrix[kAllToAllRanks][kAllToAllRanks] = {};
  uint64_t expect[kAllToAllRanks] = {};
  // Small counts mostly, some huge: the low byte picks the scale.
  for (int r = 0; r < ranks; r++)
    for (int q = 0; q < ranks; q++) {
      const uint64_t v = take64(d, n);
      matrix[r][q] = (v & 1) ? v : (v >> 1) % (4 * cap);
    }
  int mismatch = -1;
  for (int r = 0; r < ranks; r++) {
    const uint64_t v = take64(d, n);
    expect[r] = (v & 3) == 3 ? v : matrix[r][me];  // mostly what the rank declared
    if (mismatch < 0 && expect[r] != matrix[r][me]) mismatch = r;
  }
  uint64_t steps = 0, most = 0;
  for (int r = 0; r < ranks; r++)
    for (int q = 0; q < ranks; q++) most = most > matrix[r][q] ? most : matrix[r][q];
  Error err;
  const int rc = group::all_to_all_steps(matrix, ranks, me, expect, cap, steps, err);
  if (mismatch >= 0) {
    FUZZ_CHECK(rc == DS4TP_EDESYNC);
    FUZZ_CHECK(err.message.find("rank " + std::to_string(mismatch) + " sends") !=
               std::string::npos);
    return 0;
  }
  FUZZ_CHECK(rc == DS4TP_OK);
  FUZZ_CHECK(steps >= 1);
  FUZZ_CHECK(steps - 1 <= most / cap);  // steps * cap, without overflowing
  FUZZ_CHECK(most == 0 || (steps - 1) * cap < most);  // no step beyond the largest piece
  FUZZ_CHECK(most <= steps * cap || steps > UINT64_MAX / cap);  // covers it
  return 0;
}

std::vector<Bytes> all_to_all_seeds() {
  std::vector<Bytes> out;
  for (int ranks : {2, 3, 4, 16}) {
    Bytes b = {uint8_t(ranks - 2), 1};
    const uint64_t cap = 4096 - 64;
    b.resize(2 + 8);
    std::memcpy(b.data() + 2, &cap, 8);
    for (int i = 0; i < ranks * ranks + ranks; i++) {
      const uint64_t v = uint64_t(i * 2 + 2) << 1;  // even: small counts, as declared
      b.resize(b.size() + 8);
      std::memcpy(b.data() + b.size() - 8, &v, 8);
    }
    out.push_back(b);
  }
  return out;
}

}  // namespace ds4tp::fuzz

DS4TP_FUZZ_ENTRY(all_to_all)
