// A gate on the tcp data connection is one byte stream each way: the
// gate header (wire::kGateHeaderBytes), then the payload. The duplex
// gate is a step of the tcp mesh (mesh.cpp, over net::send_stream and
// recv_stream); the alternating big gate (big_exchange.cpp) and the
// striped one (striped.cpp) move their part with these. When the header
// sits right before the payload (row gates: the slab's header room) the
// stream is one buffer and moves with plain send/recv; a two-piece
// sendmsg/recvmsg measured ~8% slower at 16 KiB on loopback.
// Non-blocking, no allocation: gate path.
#pragma once

#include <cerrno>
#include <cstdint>

#include "net/socket.hpp"
#include "wire/gate_header.hpp"

namespace ds4tp::tcp {

// Sends what the socket takes of the stream's bytes [sent, limit): the
// send/sendmsg result (-1 with errno, EAGAIN when the socket is full).
inline ssize_t send_stream(int fd, const uint8_t *hdr, const uint8_t *body, uint64_t sent,
                           uint64_t limit) {
  return net::send_stream(fd, hdr, wire::kGateHeaderBytes, body, sent, limit);
}

// Reads what the socket holds of the stream's bytes [got, total): the
// recv/recvmsg result (0 at EOF, -1 with errno, EAGAIN when nothing is there).
inline ssize_t recv_stream(int fd, uint8_t *hdr, uint8_t *body, uint64_t got, uint64_t total) {
  return net::recv_stream(fd, hdr, wire::kGateHeaderBytes, body, got, total);
}

// The receiving half of one gate's stream: the peer's header, checked
// against ours once it is whole, then the payload into `body`.
struct GateInbound {
  GateInbound(const wire::GateHeader &m, uint8_t *b, uint64_t t) : mine(m), body(b), total(t) {}
  const wire::GateHeader &mine;
  uint8_t *body;
  uint64_t total;  // header + payload bytes
  uint64_t got = 0;
  bool header_checked = false;
  uint8_t hdr[wire::kGateHeaderBytes];

  // Reads what the socket holds: DS4TP_OK with `r` the recvmsg result (> 0
  // bytes, 0 at EOF, -1 with errno untouched), or the header check's error
  // (EDESYNC, EPROTO) in `err`.
  int read(int fd, ssize_t &r, Error &err) {
    r = recv_stream(fd, hdr, body, got, total);
    if (r <= 0) return DS4TP_OK;
    got += uint64_t(r);
    if (header_checked || got < wire::kGateHeaderBytes) return DS4TP_OK;
    header_checked = true;
    return wire::check_peer_gate_header(mine, hdr, err);
  }
};

// Errors a non-blocking retry absorbs.
inline bool retry_later(int e) { return e == EAGAIN || e == EWOULDBLOCK || e == EINTR; }

}  // namespace ds4tp::tcp
