// One step of a group's links, the same for every backend that offers a
// mesh (tcp/mesh.hpp, rdma/mesh.hpp): this rank's message to each peer
// and each peer's message to this rank. Each message is a step header
// (the caller's bytes, checked by the caller's function once whole) and
// a body.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/error.hpp"

namespace ds4tp::transport {

// A step's header: `bytes` of it go first on every link; `check` judges
// the header a peer sent (EDESYNC naming both when it is on another step).
// A step that sends its body to some peers only (a ring's shift: src[r]
// null for the rest) sends those the `alone` header (a body of 0).
struct StepHeader {
  const uint8_t *bytes;
  size_t size;
  uint64_t step;
  uint64_t body;  // body bytes of every message of the step
  int (*check)(const uint8_t *got, uint64_t step, uint64_t body, int peer, Error &err);
  const uint8_t *alone = nullptr;  // `size` bytes: the header of a message without a body
  // The header for a peer that gets `body_out` bytes of body.
  const uint8_t *for_body(uint64_t body_out) const {
    return body_out == 0 && alone != nullptr ? alone : bytes;
  }
};

}  // namespace ds4tp::transport
