// Group wire formats (pure: no I/O). docs/PROTOCOL.md "Groups".
//
// Bring-up, on each rank's connection to rank 0:
//   rank 0 -> rank: Nonce  {u32 "D4GN", u16 version, u16 0, 32-byte nonce}
//   rank -> rank 0: Join   fixed 112 bytes, then the identity hello bytes
//   rank 0 -> rank: Roster fixed 64 bytes + 16 peers * 56 (host, port,
//                   host index, pid, local rank) + 256 message
//                   + 16-byte link token + the meshes' two crossovers
//                   (u64 two-shot bytes, u64 ring bytes)
//   rank -> rank 0: one byte "ready" (data links up: 1; its rdma links
//                   could not come up: 2); rank 0 -> rank: "go" (1; 2:
//                   run tcp over the same links instead of rdma)
// Data links (tcp): the dialler sends {u32 "D4GL", u32 rank, link token},
// so a stranger at a data listener cannot take a rank's place; every
// exchange step then starts with {u32 "D4GS", u32 step, u64 bytes}.
// Over rdma each link first trades a status byte and RDMA_INFO
// (link/rdma/group_link.hpp); the step header then leads each message.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "wire/hello.hpp"

namespace ds4tp::group {

// 10: step headers carry arrival marks, clocks align after go; 9: joins
// carry the job; 8: verdicts their reason.
constexpr uint16_t kGroupVersion = 10;
constexpr size_t kNonceMsgBytes = 40;
constexpr size_t kJoinFixedBytes = 112;
constexpr size_t kRosterPeers = 16;
constexpr size_t kLinkTokenBytes = 16;
constexpr size_t kRosterPeerBytes = 56;
constexpr size_t kRosterBytes = 64 + kRosterPeers * kRosterPeerBytes + 256 + kLinkTokenBytes + 16;
constexpr size_t kLinkBytes = 8 + kLinkTokenBytes;
constexpr size_t kStepHeaderBytes = 24;
constexpr uint8_t kReady = 1, kReadyWithoutRdma = 2;
constexpr uint8_t kGo = 1, kGoOverTcp = 2;
constexpr size_t kMaxJoinHello = wire::kHelloMaxBytes + wire::kPreambleBytes;

constexpr uint32_t kNoLocalRank = 0xffffffffu;
// The join's transport word: the DS4TP_TRANSPORT_* asked for in the low
// byte, and this bit when the rank has a usable RDMA port.
constexpr uint32_t kJoinOffersRdma = 1u << 8;

struct Join {
  uint32_t rank = 0;
  uint32_t size = 0;
  uint32_t transport = 0;  // asked for (DS4TP_TRANSPORT_*)
  bool offers_rdma = false;  // a usable RDMA port (auto may then run rdma)
  uint32_t data_port = 0;
  uint64_t chunk = 0;
  std::array<uint8_t, 16> host_id{};
  uint32_t hello_bytes = 0;  // identity hello following the fixed part
  uint32_t has_mac = 0;
  wire::Mac mac{};  // HMAC(key, nonce || fixed part with mac zeroed)
  // The joiner's process id: over shm, rank 0 writes it into the rank's
  // line of the segment, so a rank stopped before it attaches is watched.
  uint32_t pid = 0;
  // LOCAL_RANK (or its MPI / Slurm names) where the launcher set one:
  // it orders the ranks of a host (kNoLocalRank: by rank).
  uint32_t local_rank = kNoLocalRank;
  // The job's token (JobToken; all zero: none): rank 0 refuses a join of
  // another job without ending its bring-up.
  std::array<uint8_t, 16> job{};
};

// Random per group, sent only to its ranks: a data link must show it.
using LinkToken = std::array<uint8_t, kLinkTokenBytes>;

struct RosterPeer {
  std::string host;  // <= 39 bytes
  uint32_t port = 0;
  // The rank's host: ranks with equal host ids (their joins) share a
  // number, numbered in rank order from 0 (rank 0's host).
  uint32_t host_index = 0;
  uint32_t pid = 0;  // from its join: a host's leader watches its ranks from the start
  uint32_t local_rank = kNoLocalRank;  // from its join
};

// How the ranks reach each other: one medium for all (flat), or shm
// within each host and a tcp mesh between the hosts' leaders (tiered;
// group/layout.hpp).
enum class Tiers : uint32_t { Flat = 0, Hosts = 1 };

struct Roster {
  int32_t status = 0;     // DS4TP_OK, or the failure every rank returns
  uint32_t transport = 0;  // TCP, SHM or RDMA (flat); TCP or RDMA across hosts (tiered)
  uint32_t size = 0;
  Tiers tiers = Tiers::Flat;
  std::string shm_name;  // <= 39 bytes; flat shm only
  std::vector<RosterPeer> peers;
  std::string message;  // <= 255 bytes
  LinkToken token{};
  // Rank 0's crossovers for every mesh of the group (flat, or between
  // the leaders), so all ranks pick the same algorithm whatever their own
  // environment says: two_shot_threshold(tcp), and ring_threshold before
  // the member rule (UINT64_MAX: never).
  uint64_t two_shot_bytes = 0;
  uint64_t ring_bytes = UINT64_MAX;
};

void encode_nonce(const wire::Nonce &n, uint8_t out[kNonceMsgBytes]);
int decode_nonce(const uint8_t *buf, size_t len, wire::Nonce &n, Error &err);
void encode_join(const Join &j, uint8_t out[kJoinFixedBytes]);
int decode_join(const uint8_t *buf, size_t len, Join &j, Error &err);
void encode_roster(const Roster &r, uint8_t out[kRosterBytes]);
int decode_roster(const uint8_t *buf, size_t len, Roster &r, Error &err);
void encode_link(uint32_t rank, const LinkToken &token, uint8_t out[kLinkBytes]);
// Checks the magic and the rank's range; the caller compares the token.
int decode_link(const uint8_t *buf, size_t len, uint32_t n, uint32_t &rank, LinkToken &token,
                Error &err);
// "D4GC", u32 step (low 32 bits), u64 body bytes, u32 call (call.hpp),
// u32 mark: when the sender entered the call, in microseconds of the group
// clock, low 32 bits (group/flight.hpp).
void encode_step_header(uint64_t step, uint64_t bytes, uint32_t call, uint32_t mark,
                        uint8_t out[kStepHeaderBytes]);
uint32_t step_header_mark(const uint8_t *buf);
// EDESYNC naming both steps and sizes when the peer is on another step,
// and both calls when it is in another call.
int check_step_header(const uint8_t *buf, uint64_t step, uint64_t bytes, uint32_t call, int peer,
                      Error &err);

}  // namespace ds4tp::group
