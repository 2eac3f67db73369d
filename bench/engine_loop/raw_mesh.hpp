// The raw busy-polling TCP baseline of bench/engine_loop: what an engine's
// own collectives look like when it spins on its sockets. A full mesh of
// loopback TCP connections (TCP_NODELAY, non-blocking), and collectives
// that never sleep: every peer's socket is tried with a non-blocking
// send and recv in turn until the call's bytes have moved.
//   all-reduce: this rank's whole vector to every peer, each peer's whole
//               vector into its own slot, then the sum in rank order
//               0..N-1 (the order the library sums in: the same bits);
//   all-gather: this rank's segment to every peer, each peer's segment
//               into its place in the output.
// No header, no checks beyond the byte counts, no library code.
// Spin::Poll (raw-poll) spins on a zero-timeout poll() of the sockets
// still due bytes and reads only those it reports: it measures whether
// the spin's recv (which takes the socket's lock) or the readiness check
// (which does not) is the faster way to busy-poll.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace engine {

class RawMesh {
 public:
  enum class Spin { Recv, Poll };
  explicit RawMesh(Spin spin = Spin::Recv) : spin_(spin) {}
  // Listening sockets for all ranks, made before the ranks fork (so a
  // rank can dial a lower one at once); the ports they got.
  static std::vector<int> listen_all(int ranks, std::vector<int> &ports);
  // Rank `rank`'s connections: dials every lower rank, accepts every
  // higher one. Closes the other ranks' listeners. False with `err` set.
  bool connect(int rank, int ranks, const std::vector<int> &listeners,
               const std::vector<int> &ports, std::string &err);
  ~RawMesh();

  // engine_coll_fn's shape (engine_core.h).
  int collective(int coll, float *buf, const float *in, float *out, size_t bytes, char *err,
                 size_t cap);

 private:
  // Moves `out_bytes` from out[p] to every peer p and `in_bytes` into
  // in[p] from each, spinning; false with a message when a peer is gone or
  // nothing moved for 10 s.
  bool exchange(const char *const *out, size_t out_bytes, char *const *in, size_t in_bytes,
                char *err, size_t cap);

  Spin spin_;
  int rank_ = 0, n_ = 0;
  std::vector<int> fds_;  // by rank; -1 at this rank
  std::vector<float> slots_;
};

}  // namespace engine
