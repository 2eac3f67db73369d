// Payloads of the RDMA set-up frames exchanged on the control connection
// while a slab is attached (docs/PROTOCOL.md, "RDMA set-up"). The frame
// header belongs to the control channel; this file only encodes and
// decodes the bodies. Pure code, fixed little-endian layouts, and every
// decoder rejects a wrong length or an out-of-range field with EPROTO.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/error.hpp"

namespace ds4tp::wire {

// Frame types (shared numbering with the control channel).
constexpr uint32_t kFrameRdmaInfo = 7;
constexpr uint32_t kFrameRdmaReady = 9;
constexpr uint32_t kFrameRdmaWarm = 19;
constexpr uint32_t kFrameRdmaPosted = 20;

// Queue pair service types.
enum : uint8_t { kQpRc = 1, kQpUc = 2 };
// Link layers (values of the verbs enum).
enum : uint8_t { kLinkUnspecified = 0, kLinkInfiniBand = 1, kLinkEthernet = 2 };

// Largest set-up attempt number a peer may send (QP recreations are few).
constexpr uint32_t kMaxSetupAttempt = 15;

// RDMA_INFO: one rank's queue pair address and registered slab.
constexpr size_t kRdmaInfoPayload = 68;
struct RdmaInfo {
  uint32_t attempt = 0;     // set-up attempt; both ranks must agree
  uint32_t qp_num = 0;      // 24-bit queue pair number, nonzero
  uint32_t psn = 0;         // 24-bit initial packet sequence number
  uint16_t lid = 0;         // InfiniBand local id (0 on Ethernet)
  uint16_t gid_index = 0;   // our GID table index (for logs)
  uint8_t port = 1;         // device port, 1..255
  uint8_t link_layer = kLinkUnspecified;
  uint8_t mtu = 0;          // verbs MTU enum, 1 (256 B) .. 5 (4096 B)
  uint8_t qp_type = kQpRc;  // kQpRc or kQpUc
  std::array<uint8_t, 16> gid{};
  uint64_t slab_addr = 0;   // registered slab base in the sender's space
  uint64_t slab_bytes = 0;  // registered bytes
  uint32_t rkey = 0;
  uint32_t max_msg = 0;     // largest message this rank accepts, >= 64
  uint32_t send_depth = 0;  // granted work requests, >= 1
  uint32_t recv_depth = 0;
};

// RDMA_READY: the sender's queue pair is ready to send (RTS).
constexpr size_t kRdmaReadyPayload = 4;
struct RdmaReady {
  uint32_t attempt = 0;
};

// RDMA_POSTED: the sender has posted `posted` receives for the warm-up.
constexpr size_t kRdmaPostedPayload = 8;
struct RdmaPosted {
  uint32_t attempt = 0;
  uint32_t posted = 0;
};

// RDMA_WARM: how the sender's warm-up round went.
constexpr size_t kRdmaWarmPayload = 12;
enum : uint32_t {
  kWarmReceived = 1u << 0,  // the peer's warm-up message landed intact
  kWarmSent = 1u << 1,      // our warm-up send completed without error
};
struct RdmaWarm {
  uint32_t attempt = 0;
  uint32_t flags = 0;  // kWarm* bits, no others
  uint32_t bytes = 0;  // size of the warm-up message
};

void encode_rdma_info(const RdmaInfo &m, uint8_t out[kRdmaInfoPayload]);
void encode_rdma_ready(const RdmaReady &m, uint8_t out[kRdmaReadyPayload]);
void encode_rdma_posted(const RdmaPosted &m, uint8_t out[kRdmaPostedPayload]);
void encode_rdma_warm(const RdmaWarm &m, uint8_t out[kRdmaWarmPayload]);

// Each returns DS4TP_OK, or EPROTO naming the frame and the bad field.
int decode_rdma_info(const uint8_t *buf, size_t len, RdmaInfo &out, Error &err);
int decode_rdma_ready(const uint8_t *buf, size_t len, RdmaReady &out, Error &err);
int decode_rdma_posted(const uint8_t *buf, size_t len, RdmaPosted &out, Error &err);
int decode_rdma_warm(const uint8_t *buf, size_t len, RdmaWarm &out, Error &err);

// "RC" / "UC" / "?".
const char *qp_type_name(uint8_t t);

// A group's rdma link status (link/rdma/group_link.hpp), before RDMA_INFO:
// 'R' (this end can; RDMA_INFO follows), or 'N', a u8 length and that
// many bytes of reason (this end cannot).
constexpr uint8_t kLinkCan = 'R', kLinkCannot = 'N';
constexpr size_t kLinkStatusMax = 2 + 255;
// Returns the bytes written (the reason cut at 255 bytes).
size_t encode_link_status(bool can, const std::string &reason, uint8_t out[kLinkStatusMax]);
// Sets `need` to the status's whole length as far as `len` bytes tell
// (1, 2, then 2 + the reason); `can` and `reason` once len >= need.
// EPROTO for a first byte that is neither.
int decode_link_status(const uint8_t *buf, size_t len, bool &can, std::string &reason,
                       size_t &need, Error &err);

}  // namespace ds4tp::wire
