#include "group/wire.hpp"

#include <algorithm>
#include <cstring>

#include "group/call.hpp"

namespace ds4tp::group {
namespace {

constexpr uint32_t kNonceMagic = 0x4e473444u;  // "D4GN"
constexpr uint32_t kJoinMagic = 0x4a473444u;   // "D4GJ"
constexpr uint32_t kRosterMagic = 0x52473444u; // "D4GR"
constexpr uint32_t kLinkMagic = 0x4c473444u;   // "D4GL"
constexpr uint32_t kStepMagic = 0x43473444u;   // "D4GC" (16-byte "D4GS" before the call word)

void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = uint8_t(v >> (8 * i));
}
void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = uint8_t(v >> (8 * i));
}
uint32_t get32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= uint32_t(p[i]) << (8 * i);
  return v;
}
uint64_t get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= uint64_t(p[i]) << (8 * i);
  return v;
}
void put_str(uint8_t *p, size_t cap, const std::string &s) {
  std::memset(p, 0, cap);
  std::memcpy(p, s.data(), s.size() < cap - 1 ? s.size() : cap - 1);
}
std::string get_str(const uint8_t *p, size_t cap) {
  size_t n = 0;
  while (n < cap - 1 && p[n] != 0) n++;
  return std::string(reinterpret_cast<const char *>(p), n);
}
int check_head(const uint8_t *buf, size_t len, size_t need, uint32_t magic, const char *what,
               Error &err) {
  if (len < need) return err.set(DS4TP_EPROTO, "group {}: {} bytes, need {}", what, len, need);
  if (get32(buf) != magic)
    return err.set(DS4TP_EPROTO, "group {}: bad magic {:#010x}", what, get32(buf));
  uint16_t v = uint16_t(buf[4] | (buf[5] << 8));
  if (v != kGroupVersion)
    return err.set(DS4TP_EVERSION, "group {}: protocol version {} here {}", what, v,
                   kGroupVersion);
  return DS4TP_OK;
}
void put_head(uint8_t *p, uint32_t magic) {
  put32(p, magic);
  p[4] = uint8_t(kGroupVersion);
  p[5] = uint8_t(kGroupVersion >> 8);
  p[6] = p[7] = 0;
}

}  // namespace

void encode_nonce(const wire::Nonce &n, uint8_t out[kNonceMsgBytes]) {
  put_head(out, kNonceMagic);
  std::memcpy(out + 8, n.data(), n.size());
}

int decode_nonce(const uint8_t *buf, size_t len, wire::Nonce &n, Error &err) {
  if (int rc = check_head(buf, len, kNonceMsgBytes, kNonceMagic, "nonce", err)) return rc;
  std::memcpy(n.data(), buf + 8, n.size());
  return DS4TP_OK;
}

void encode_join(const Join &j, uint8_t out[kJoinFixedBytes]) {
  std::memset(out, 0, kJoinFixedBytes);
  put_head(out, kJoinMagic);
  put32(out + 8, j.rank);
  put32(out + 12, j.size);
  put32(out + 16, j.transport | (j.offers_rdma ? kJoinOffersRdma : 0));
  put32(out + 20, j.data_port);
  put64(out + 24, j.chunk);
  std::memcpy(out + 32, j.host_id.data(), 16);
  put32(out + 48, j.hello_bytes);
  put32(out + 52, j.has_mac);
  std::memcpy(out + 56, j.mac.data(), 32);
  put32(out + 88, j.pid);
  put32(out + 92, j.local_rank);
  std::memcpy(out + 96, j.job.data(), 16);
}

int decode_join(const uint8_t *buf, size_t len, Join &j, Error &err) {
  if (int rc = check_head(buf, len, kJoinFixedBytes, kJoinMagic, "join", err)) return rc;
  j.rank = get32(buf + 8);
  j.size = get32(buf + 12);
  const uint32_t transport = get32(buf + 16);
  j.transport = transport & 0xffu;
  j.offers_rdma = (transport & kJoinOffersRdma) != 0;
  j.data_port = get32(buf + 20);
  j.chunk = get64(buf + 24);
  std::memcpy(j.host_id.data(), buf + 32, 16);
  j.hello_bytes = get32(buf + 48);
  j.has_mac = get32(buf + 52);
  std::memcpy(j.mac.data(), buf + 56, 32);
  j.pid = get32(buf + 88);
  j.local_rank = get32(buf + 92);
  std::memcpy(j.job.data(), buf + 96, 16);
  if (j.size < 2 || j.size > kRosterPeers)
    return err.set(DS4TP_EPROTO, "group join: size {} outside 2..{}", j.size, kRosterPeers);
  if (j.rank >= j.size) return err.set(DS4TP_EPROTO, "group join: rank {} of {}", j.rank, j.size);
  if (j.hello_bytes > kMaxJoinHello)
    return err.set(DS4TP_EPROTO, "group join: hello of {} bytes (max {})", j.hello_bytes,
                   kMaxJoinHello);
  if (j.has_mac > 1) return err.set(DS4TP_EPROTO, "group join: has_mac {}", j.has_mac);
  if ((transport & ~(kJoinOffersRdma | 0xffu)) != 0 || j.transport > DS4TP_TRANSPORT_RDMA)
    return err.set(DS4TP_EPROTO, "group join: transport word {:#x}", transport);
  if (j.data_port > 65535) return err.set(DS4TP_EPROTO, "group join: port {}", j.data_port);
  return DS4TP_OK;
}

void encode_roster(const Roster &r, uint8_t out[kRosterBytes]) {
  std::memset(out, 0, kRosterBytes);
  put_head(out, kRosterMagic);
  put32(out + 8, uint32_t(r.status));
  put32(out + 12, r.transport);
  put32(out + 16, r.size);
  put_str(out + 20, 40, r.shm_name);  // bytes 20..59
  put32(out + 60, uint32_t(r.tiers));
  for (size_t i = 0; i < r.peers.size() && i < kRosterPeers; i++) {
    uint8_t *p = out + 64 + i * kRosterPeerBytes;
    put_str(p, 40, r.peers[i].host);
    put32(p + 40, r.peers[i].port);
    put32(p + 44, r.peers[i].host_index);
    put32(p + 48, r.peers[i].pid);
    put32(p + 52, r.peers[i].local_rank);
  }
  put_str(out + 64 + kRosterPeers * kRosterPeerBytes, 256, r.message);
  std::memcpy(out + 64 + kRosterPeers * kRosterPeerBytes + 256, r.token.data(), r.token.size());
  put64(out + kRosterBytes - 16, r.two_shot_bytes);
  put64(out + kRosterBytes - 8, r.ring_bytes);
}

int decode_roster(const uint8_t *buf, size_t len, Roster &r, Error &err) {
  if (int rc = check_head(buf, len, kRosterBytes, kRosterMagic, "roster", err)) return rc;
  r.status = int32_t(get32(buf + 8));
  r.transport = get32(buf + 12);
  r.size = get32(buf + 16);
  r.shm_name = get_str(buf + 20, 40);
  const uint32_t tiers = get32(buf + 60);
  r.tiers = Tiers(tiers);
  r.message = get_str(buf + 64 + kRosterPeers * kRosterPeerBytes, 256);
  std::memcpy(r.token.data(), buf + 64 + kRosterPeers * kRosterPeerBytes + 256, r.token.size());
  r.two_shot_bytes = get64(buf + kRosterBytes - 16);
  r.ring_bytes = get64(buf + kRosterBytes - 8);
  if (r.status > 0 || r.status < -100)
    return err.set(DS4TP_EPROTO, "group roster: status {}", r.status);
  if (r.status != DS4TP_OK) return DS4TP_OK;
  if (r.size < 2 || r.size > kRosterPeers)
    return err.set(DS4TP_EPROTO, "group roster: size {}", r.size);
  if (r.transport != DS4TP_TRANSPORT_TCP && r.transport != DS4TP_TRANSPORT_SHM &&
      r.transport != DS4TP_TRANSPORT_RDMA)
    return err.set(DS4TP_EPROTO, "group roster: transport {}", r.transport);
  if (tiers > uint32_t(Tiers::Hosts) ||
      (r.tiers == Tiers::Hosts && r.transport == DS4TP_TRANSPORT_SHM))
    return err.set(DS4TP_EPROTO, "group roster: tiers {} over transport {}", tiers, r.transport);
  r.peers.resize(r.size);
  for (size_t i = 0; i < r.size; i++) {
    const uint8_t *p = buf + 64 + i * kRosterPeerBytes;
    r.peers[i].host = get_str(p, 40);
    r.peers[i].port = get32(p + 40);
    r.peers[i].host_index = get32(p + 44);
    r.peers[i].pid = get32(p + 48);
    r.peers[i].local_rank = get32(p + 52);
    if (r.peers[i].port > 65535)
      return err.set(DS4TP_EPROTO, "group roster: rank {} port {}", i, r.peers[i].port);
    // Numbered in rank order: a rank's host is one seen before or the next.
    uint32_t next = 0;
    for (size_t k = 0; k < i; k++) next = std::max(next, r.peers[k].host_index + 1);
    if (r.peers[i].host_index > next || (i == 0 && r.peers[i].host_index != 0))
      return err.set(DS4TP_EPROTO, "group roster: rank {} on host {} (hosts are numbered in "
                     "rank order)", i, r.peers[i].host_index);
  }
  return DS4TP_OK;
}

void encode_link(uint32_t rank, const LinkToken &token, uint8_t out[kLinkBytes]) {
  put32(out, kLinkMagic);
  put32(out + 4, rank);
  std::memcpy(out + 8, token.data(), token.size());
}

int decode_link(const uint8_t *buf, size_t len, uint32_t n, uint32_t &rank, LinkToken &token,
                Error &err) {
  if (len < kLinkBytes) return err.set(DS4TP_EPROTO, "group link: {} bytes", len);
  if (get32(buf) != kLinkMagic)
    return err.set(DS4TP_EPROTO, "group link: bad magic {:#010x}", get32(buf));
  rank = get32(buf + 4);
  if (rank >= n) return err.set(DS4TP_EPROTO, "group link: rank {} of {}", rank, n);
  std::memcpy(token.data(), buf + 8, token.size());
  return DS4TP_OK;
}

void encode_step_header(uint64_t step, uint64_t bytes, uint32_t call, uint32_t mark,
                        uint8_t out[kStepHeaderBytes]) {
  put32(out, kStepMagic);
  put32(out + 4, uint32_t(step));
  put64(out + 8, bytes);
  put32(out + 16, call);
  put32(out + 20, mark);
}

uint32_t step_header_mark(const uint8_t *buf) { return get32(buf + 20); }

int check_step_header(const uint8_t *buf, uint64_t step, uint64_t bytes, uint32_t call, int peer,
                      Error &err) {
  if (get32(buf) != kStepMagic)
    return err.set(DS4TP_EPROTO, "rank {}: bad step magic {:#010x}", peer, get32(buf));
  const uint32_t s = get32(buf + 4), c = get32(buf + 16);
  const uint64_t b = get64(buf + 8);
  if (s == uint32_t(step) && c != call)
    return err.set(DS4TP_EDESYNC,
                   "rank {} is in {} at step {}, this rank in {} (collectives, dtypes, reduce "
                   "ops or roots differ)",
                   peer, call_name(c), s, call_name(call));
  if (s != uint32_t(step) || b != bytes)
    return err.set(DS4TP_EDESYNC,
                   "rank {} is on step {} with {} bytes, this rank on step {} with {} bytes "
                   "(collectives or counts differ)",
                   peer, s, b, uint32_t(step), bytes);
  return DS4TP_OK;
}

}  // namespace ds4tp::group
