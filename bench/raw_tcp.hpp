// Raw TCP baseline: the floor the library's TCP transport is judged
// against. One plain connected socket with exactly the options the
// library puts on its data socket (ds4tp::net::tune_data_socket), moving
// the same payload bytes with no header, no checks and no bookkeeping.
//
// Two wait policies, both full duplex so payloads larger than the socket
// buffers cannot deadlock:
//   Block: send what fits, then sleep in one recv(MSG_WAITALL) (or in
//          poll() while both directions are stuck); the cheapest way to
//          sleep until the data lands.
//   Busy:  never sleep; retry non-blocking send/recv until done.
// And one half-duplex way for big payloads, alternate(): rounds of
// `round` bytes, one direction at a time (the leader's round first),
// each side blocking in send/recv like Block.
#pragma once

#include <cstddef>
#include <cstdint>

#include "sock.hpp"

namespace bench {

class RawTcp {
 public:
  enum class Wait { Block, Busy };

  RawTcp() = default;
  // Takes a connected socket and applies the library's data-socket tuning.
  explicit RawTcp(Fd fd);
  bool valid() const { return fd_.valid(); }

  // Sends `n` bytes from `out` and receives the peer's `n` bytes into
  // `in`. Fails after `idle_ms` without progress or if the peer is gone.
  Status exchange(const void *out, void *in, size_t n, Wait wait, int idle_ms);
  // One direction at a time, for request/reply round trips.
  Status send_all(const void *out, size_t n, int idle_ms);
  Status recv_all(void *in, size_t n, Wait wait, int idle_ms);
  // `n` bytes each way in alternating rounds; `first` sends round 0.
  Status alternate(const void *out, void *in, size_t n, size_t round, bool first, int idle_ms);

 private:
  Status exchange(const void *out, void *in, size_t n_out, size_t n_in, Wait wait, int idle_ms);
  Fd fd_;
};

}  // namespace bench
