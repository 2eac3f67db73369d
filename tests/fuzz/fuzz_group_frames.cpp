// Group bring-up and step messages (lib/group/wire.hpp) and the tcp
// heartbeat stream (lib/talk/group_beat.hpp): byte 0 picks the decoder,
// the rest is its input. A decoded message re-encodes to bytes that
// decode to the same values.
#include "fuzz/fuzz.hpp"

#include <algorithm>
#include <cstring>

#include "talk/group_beat.hpp"
#include "group/call.hpp"
#include "group/layout.hpp"
#include "group/wire.hpp"

namespace ds4tp::fuzz {

int group_frames(const uint8_t *d, size_t n) {
  using namespace ds4tp::group;
  using namespace ds4tp::talk;
  if (n == 0) return 0;
  const uint8_t which = d[0] % 6;
  d++;
  n--;
  Error err;
  switch (which) {
    case 0: {
      wire::Nonce nc;
      if (decode_nonce(d, n, nc, err) != DS4TP_OK) {
        FUZZ_CHECK(!err.message.empty());
        return 0;
      }
      uint8_t b[kNonceMsgBytes];
      encode_nonce(nc, b);
      FUZZ_CHECK(std::memcmp(b + 8, d + 8, 32) == 0);
      break;
    }
    case 1: {
      Join j, k;
      if (decode_join(d, n, j, err) != DS4TP_OK) {
        FUZZ_CHECK(err.code == DS4TP_EPROTO || err.code == DS4TP_EVERSION);
        return 0;
      }
      FUZZ_CHECK(j.rank < j.size && j.size <= kRosterPeers);
      uint8_t b[kJoinFixedBytes];
      encode_join(j, b);
      FUZZ_CHECK(decode_join(b, sizeof b, k, err) == DS4TP_OK);
      FUZZ_CHECK(k.rank == j.rank && k.chunk == j.chunk && k.mac == j.mac);
      FUZZ_CHECK(k.pid == j.pid && k.local_rank == j.local_rank);
      break;
    }
    case 2: {
      Roster r, s;
      if (decode_roster(d, n, r, err) != DS4TP_OK) {
        FUZZ_CHECK(err.code == DS4TP_EPROTO || err.code == DS4TP_EVERSION);
        return 0;
      }
      uint8_t b[kRosterBytes];
      encode_roster(r, b);
      FUZZ_CHECK(decode_roster(b, sizeof b, s, err) == DS4TP_OK);
      FUZZ_CHECK(s.status == r.status && s.shm_name == r.shm_name && s.message == r.message);
      FUZZ_CHECK(s.peers.size() == r.peers.size());
      FUZZ_CHECK(s.tiers == r.tiers);
      FUZZ_CHECK(s.two_shot_bytes == r.two_shot_bytes && s.ring_bytes == r.ring_bytes);
      for (size_t i = 0; i < r.peers.size(); i++) {
        FUZZ_CHECK(s.peers[i].host == r.peers[i].host && s.peers[i].port == r.peers[i].port);
        FUZZ_CHECK(s.peers[i].host_index == r.peers[i].host_index &&
                   s.peers[i].pid == r.peers[i].pid &&
                   s.peers[i].local_rank == r.peers[i].local_rank);
      }
      FUZZ_CHECK(r.status != DS4TP_OK || s.token == r.token);
      if (r.status == DS4TP_OK) {  // any accepted roster lays out: each rank once, a leader a host
        const Layout l = layout_of(r.peers, int(r.size) - 1);
        size_t seen = 0;
        for (const auto &ranks : l.ranks_of) {
          FUZZ_CHECK(!ranks.empty());
          seen += ranks.size();
        }
        FUZZ_CHECK(seen == r.size && l.leaders().size() == l.ranks_of.size());
        FUZZ_CHECK(l.mine()[size_t(l.local)] == int(r.size) - 1);
      }
      break;
    }
    case 3: {
      uint32_t rank = 0;
      LinkToken t{}, u{};
      if (decode_link(d, n, kRosterPeers, rank, t, err) != DS4TP_OK) return 0;
      FUZZ_CHECK(rank < kRosterPeers);
      uint8_t b[kLinkBytes];
      encode_link(rank, t, b);
      uint32_t again = 0;
      FUZZ_CHECK(decode_link(b, sizeof b, kRosterPeers, again, u, err) == DS4TP_OK);
      FUZZ_CHECK(again == rank && u == t);
      break;
    }
    case 4: {
      if (n < kStepHeaderBytes) return 0;
      int rc = check_step_header(d, 7, 4096, call_word(Kind::AllReduce, 0), 1, err);
      FUZZ_CHECK(rc == DS4TP_OK || rc == DS4TP_EPROTO || rc == DS4TP_EDESYNC);
      break;
    }
    case 5: {  // fed in pieces whose sizes the input's bytes pick, from rank 0 or not
      BeatReader r(n > 0 && (d[0] & 1) != 0);
      size_t off = 0;
      while (off < n) {
        const size_t piece = std::min<size_t>(n - off, 1 + d[off] % 7);
        size_t took = 0;
        const BeatReader::Event e = r.feed(d + off, piece, took);
        FUZZ_CHECK(took >= 1 && took <= piece);
        FUZZ_CHECK(r.count_n() >= 0 && r.count_n() <= kMaxBeatLinks);
        if (e == BeatReader::kBadByte) break;
        if (e == BeatReader::kNoticed) FUZZ_CHECK(r.notice_rank() >= 0 && r.notice_code() <= 0);
        if (e == BeatReader::kNone) FUZZ_CHECK(took == piece);
        off += took;
      }
      break;
    }
  }
  return 0;
}

std::vector<Bytes> group_seeds() {
  using namespace ds4tp::group;
  using namespace ds4tp::talk;
  std::vector<Bytes> out;
  auto add = [&](uint8_t which, const uint8_t *b, size_t n) {
    Bytes v(1, which);
    v.insert(v.end(), b, b + n);
    out.push_back(std::move(v));
  };
  wire::Nonce nc{};
  nc[0] = 7;
  uint8_t nb[kNonceMsgBytes];
  encode_nonce(nc, nb);
  add(0, nb, sizeof nb);
  Join j;
  j.rank = 2;
  j.size = 4;
  j.chunk = 1 << 20;
  j.hello_bytes = 136;
  uint8_t jb[kJoinFixedBytes];
  encode_join(j, jb);
  add(1, jb, sizeof jb);
  Roster r;
  r.transport = DS4TP_TRANSPORT_TCP;
  r.size = 3;
  r.peers = {{"", 29600}, {"127.0.0.1", 40001}, {"10.1.2.3", 40002}};
  r.token[15] = 0xa5;
  uint8_t rb[kRosterBytes];
  encode_roster(r, rb);
  add(2, rb, sizeof rb);
  r.size = 4;  // tiered: two hosts of two, local ranks on one
  r.tiers = Tiers::Hosts;
  r.peers = {{"", 29600, 0, 100, 1}, {"10.1.2.3", 40001, 1, 200, kNoLocalRank},
             {"", 40002, 0, 300, 0}, {"10.1.2.3", 40003, 1, 400, kNoLocalRank}};
  encode_roster(r, rb);
  add(2, rb, sizeof rb);
  r = Roster{};
  r.status = DS4TP_EIDENTITY;
  r.message = "rank 2: n_embd is 2560 here but 4096 on the peer";
  encode_roster(r, rb);
  add(2, rb, sizeof rb);
  uint8_t lb[kLinkBytes];
  LinkToken token{};
  token[0] = 0x5a;
  encode_link(3, token, lb);
  add(3, lb, sizeof lb);
  uint8_t sb[kStepHeaderBytes];
  encode_step_header(7, 4096, call_word(Kind::AllReduce, 0), 0, sb);
  add(4, sb, sizeof sb);
  // From rank 0 (the first byte odd: the reader's side): two ranks' counts,
  // a notice, a verdict.
  const uint8_t beats[] = {1,  kBeats,   2, 7, 0, 0, 0, 9, 0, 0, 0, kNotice, 3,
                           uint8_t(-DS4TP_ETIMEDOUT), kVerdict, 2, uint8_t(-DS4TP_EPEERCLOSED), 1, 2, 'o', 'k'};
  add(5, beats, sizeof beats);
  return out;
}

}  // namespace ds4tp::fuzz

DS4TP_FUZZ_ENTRY(group_frames)
