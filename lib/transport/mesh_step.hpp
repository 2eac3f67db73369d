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
struct StepHeader {
  const uint8_t *bytes;
  size_t size;
  uint64_t step;
  uint64_t body;  // body bytes of every message of the step
  int (*check)(const uint8_t *got, uint64_t step, uint64_t body, int peer, Error &err);
};

}  // namespace ds4tp::transport
