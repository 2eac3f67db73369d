#include "group_variant.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "cases.hpp"

namespace bench {

namespace {

constexpr uint64_t kPeriod = 4099;

// Two periods of rank 0's values and of the two ranks' sums, so any run of
// up to kPeriod elements is one contiguous slice.
struct Pattern {
  std::vector<float> value, sum;
  Pattern() : value(2 * kPeriod), sum(2 * kPeriod) {
    for (uint64_t j = 0; j < 2 * kPeriod; j++) {
      value[j] = float(j % kPeriod);
      sum[j] = float(j % kPeriod) + float((j + 3) % kPeriod);  // rank 1 is 3 ahead
    }
  }
};
const Pattern &pattern() {
  static const Pattern p;
  return p;
}

// Where element 0 of `rank`'s vector (or of the sum, rank < 0) starts in
// the tables at iteration k.
uint64_t start_of(uint64_t k, int rank) { return (k * 131 + uint64_t(rank > 0 ? 3 : 0)) % kPeriod; }

}  // namespace

void fill_group(uint8_t *p, uint64_t bytes, uint64_t k, int rank) {
  const float *v = pattern().value.data() + start_of(k, rank);
  for (uint64_t off = 0; off < bytes; off += kPeriod * 4)
    std::memcpy(p + off, v, std::min<uint64_t>(bytes - off, kPeriod * 4));
}

uint64_t group_mismatch(const uint8_t *p, uint64_t bytes, uint64_t k, int rank) {
  const float *want = (rank >= 0 ? pattern().value : pattern().sum).data() + start_of(k, rank);
  for (uint64_t off = 0; off < bytes; off += kPeriod * 4) {
    const uint64_t n = std::min<uint64_t>(bytes - off, kPeriod * 4);
    if (std::memcmp(p + off, want, n) == 0) continue;
    uint64_t i = 0;
    while (std::memcmp(p + off + i, reinterpret_cast<const uint8_t *>(want) + i, 4) == 0) i += 4;
    return (off + i) / 4;
  }
  return bytes / 4;
}

Status open_group(Session &s, int transport, int spin_us, ds4tp_group **out,
                  std::string &unavailable) {
  ds4tp_group_options o;
  ds4tp_group_options_init(&o);
  o.rank = s.rank;
  o.group_size = 2;
  o.transport = transport;
  o.connect_timeout_ms = s.connect_timeout_ms;
  o.op_timeout_ms = s.gate_timeout_ms;
  o.spin_us = spin_us;  // the same meaning as the pair's
  o.rendezvous_host = s.lib_host.c_str();
  std::string mine;
  Status st;
  if (s.rank == 0) {
    o.rendezvous_port = s.lib_port;
    if (ds4tp_group_new(out, &o, nullptr) != DS4TP_OK)
      mine = std::string("ds4tp_group_new: ") + ds4tp_last_error();
    const int port = mine.empty() ? ds4tp_group_rendezvous_port(*out) : 0;
    if (!(st = offer_port(s, "GROUP", mine, port)).ok) return st;
  } else {
    if (!(st = take_port(s, "GROUP", "group", o.rendezvous_port, mine)).ok) return st;
    if (mine.empty() && ds4tp_group_new(out, &o, nullptr) != DS4TP_OK)
      mine = std::string("ds4tp_group_new: ") + ds4tp_last_error();
  }
  if (mine.empty()) {
    int rc = ds4tp_group_connect(*out);
    if (rc != DS4TP_OK) mine = std::string(ds4tp_err_name(rc)) + ": " + ds4tp_group_errmsg(*out);
  }
  return agree_open(s, mine, unavailable);
}

}  // namespace bench
