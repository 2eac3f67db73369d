// Loopback TCP for tests that play a peer by hand: a connected socket
// pair set up like the library's control connection, blocking-free raw
// writes, and control frames built byte by byte (wire/frames.hpp layout).
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <vector>

#include "wire/frames.hpp"

namespace ds4tp::test {

// A TCP socket bound to 127.0.0.1 on a free port, `addr` filled with it
// (-1 if no socket).
int bind_loopback(sockaddr_in &addr);

// A connected pair of loopback TCP sockets, non-blocking like the pair's.
struct TcpPair {
  int a = -1, b = -1;
  TcpPair();
  ~TcpPair();
  TcpPair(const TcpPair &) = delete;
  TcpPair &operator=(const TcpPair &) = delete;
};

// Writes all of `v` to a non-blocking socket (gives up on a hard error).
void raw_write(int fd, const std::vector<uint8_t> &v);

// A control frame header as a peer sends it; `magic` lets a test forge one.
std::vector<uint8_t> frame_header(uint16_t type, uint32_t bytes, uint32_t counter = 1,
                                  uint32_t magic = wire::kFrameMagic);
// Header and payload together.
std::vector<uint8_t> frame_bytes(uint16_t type, uint32_t counter,
                                 const std::vector<uint8_t> &payload);

}  // namespace ds4tp::test
