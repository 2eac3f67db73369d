// The messages of a pair's extra links (wire/failover.hpp): a link set-up
// message, a resume message, a rail plan or rail counts, by the first
// bytes' magic; what decodes encodes back to the same bytes.
#include "fuzz/fuzz.hpp"

#include <cstring>

#include "wire/codec.hpp"
#include "wire/failover.hpp"

namespace ds4tp::fuzz {

// A message of N bytes: what does not decode is EPROTO with a reason;
// what decodes passes `ok` and encodes back to the same bytes.
template <size_t N, typename M, typename Decode, typename Encode, typename Ok>
int round_trip(const uint8_t *d, size_t n, Decode decode, Encode encode, Ok ok) {
  M m;
  Error err;
  if (decode(d, n, m, err) != DS4TP_OK) {
    FUZZ_CHECK(err.code == DS4TP_EPROTO && !err.message.empty());
    return 0;
  }
  FUZZ_CHECK(ok(m));
  uint8_t again[N];
  encode(m, again);
  FUZZ_CHECK(std::memcmp(again, d, N) == 0);
  return 0;
}

int failover(const uint8_t *d, size_t n) {
  using namespace ds4tp::wire;
  Error err;
  if (n >= 4 && get_u32(d) == kResumeMagic) {
    Resume r;
    if (decode_resume(d, n, r, err) != DS4TP_OK) {
      FUZZ_CHECK(err.code == DS4TP_EPROTO && !err.message.empty());
      return 0;
    }
    FUZZ_CHECK(r.in_flight.kind != 0 && r.reason.size() <= kResumeReasonMax);
    uint8_t again[kResumeBytes];
    encode_resume(r, again);
    // Each gate header's reserved half-word is not kept: compare around it.
    uint8_t want[kResumeBytes];
    std::memcpy(want, d, sizeof want);
    std::memset(want + 8 + 6, 0, 2);
    std::memset(want + 40 + 6, 0, 2);
    FUZZ_CHECK(std::memcmp(again, want, sizeof want) == 0);
    return 0;
  }
  if (n >= 4 && get_u32(d) == kRailPlanMagic)
    return round_trip<kRailPlanBytes, RailPlan>(d, n, decode_rail_plan, encode_rail_plan,
                                                [](const RailPlan &p) {
      return p.links >= 2 && p.links <= kMaxLinks && p.row_link < p.links;
    });
  if (n >= 4 && get_u32(d) == kRailSyncMagic)
    return round_trip<kRailSyncBytes, RailSync>(d, n, decode_rail_sync, encode_rail_sync,
                                                [](const RailSync &m) {
      return m.links >= 2 && m.links <= kMaxLinks && (m.keep & 1u) == 0;
    });
  return round_trip<kStandbyBytes, StandbyMsg>(d, n, decode_standby, encode_standby,
                                               [](const StandbyMsg &m) {
    return m.ok || m.reason.size() <= kStandbyReasonMax;
  });
}

std::vector<Bytes> failover_seeds() {
  using namespace ds4tp::wire;
  std::vector<Bytes> out;
  auto standby = [&](StandbyKind k, bool ok, const char *why) {
    StandbyMsg m;
    m.kind = uint16_t(k);
    m.port = 40123;
    m.ok = ok;
    m.cookie = 0x0123456789abcdefull;
    m.reason = why;
    Bytes b(kStandbyBytes);
    encode_standby(m, b.data());
    out.push_back(b);
  };
  standby(StandbyKind::Offer, true, "");
  standby(StandbyKind::Offer, false, "the leader cannot listen: bind: Address in use");
  standby(StandbyKind::Dialed, false, "could not connect before the deadline");
  standby(StandbyKind::Proof, true, "");
  standby(StandbyKind::Ack, true, "");
  Resume r;
  r.in_flight = {uint16_t(GateKind::Row), 3, 1, 17, 16384};
  r.done = {uint16_t(GateKind::Row), 3, 0, 16, 16384};
  r.holds_done = true;
  r.reason = "rdma row gate (layer 3, gate 1, seq 17): a send work request failed";
  Bytes b(kResumeBytes);
  encode_resume(r, b.data());
  out.push_back(b);
  RailPlan plan;
  plan.links = 2;
  plan.row_link = 0;
  plan.share[0] = 667;
  plan.share[1] = 333;
  plan.mbit[0] = 400;
  plan.mbit[1] = 200;
  Bytes pb(kRailPlanBytes);
  encode_rail_plan(plan, pb.data());
  out.push_back(pb);
  RailSync sync;
  sync.links = 3;
  sync.keep = 6;
  sync.sent[0] = 262176;
  sync.sent[1] = 1376288;
  sync.sent[2] = 917536;
  Bytes sb(kRailSyncBytes);
  encode_rail_sync(sync, sb.data());
  out.push_back(sb);
  Resume first;
  first.in_flight = {uint16_t(GateKind::Big), 5, 0, 1, 1u << 20};
  encode_resume(first, b.data());
  out.push_back(b);
  return out;
}

}  // namespace ds4tp::fuzz

DS4TP_FUZZ_ENTRY(failover)
