// libFuzzer targets for every wire decoder (see scripts/fuzz.sh). Each target
// is an ordinary function so the same code also runs in the normal test
// suite over the seed corpus and the committed regression inputs
// (test_fuzz_regress); built with DS4TP_LIBFUZZER it also defines
// LLVMFuzzerTestOneInput.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#ifdef DS4TP_LIBFUZZER
#define DS4TP_FUZZ_ENTRY(name)                                               \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) {        \
    return ds4tp::fuzz::name(d, n);                                          \
  }
#else
#define DS4TP_FUZZ_ENTRY(name)
#endif

// A broken invariant is a crash libFuzzer records (and the regression test
// reports); never an exception or a silent pass.
#define FUZZ_CHECK(cond)                                                      \
  do {                                                                        \
    if (!(cond)) {                                                            \
      std::fprintf(stderr, "fuzz check failed: %s (%s:%d)\n", #cond, __FILE__, \
                   __LINE__);                                                 \
      __builtin_trap();                                                       \
    }                                                                         \
  } while (0)

namespace ds4tp::fuzz {

using Bytes = std::vector<uint8_t>;

// Preamble + hello, data cookie, data ack and the auth messages.
int hello(const uint8_t *d, size_t n);
// The 32-byte gate header.
int gate_header(const uint8_t *d, size_t n);
// A control frame: 16-byte header then the payload it announces.
int frame_header(const uint8_t *d, size_t n);
// Every command payload decoder: byte 0 picks the frame type, the rest is
// the payload (one target dispatching on the first byte).
int frame_payloads(const uint8_t *d, size_t n);
// The RDMA set-up payloads: byte 0 picks the frame, the rest is the payload.
int rdma_frames(const uint8_t *d, size_t n);
// Group bring-up and step messages: byte 0 picks the decoder.
int group_frames(const uint8_t *d, size_t n);
std::vector<Bytes> group_seeds();
// The shm transport's handshake: a header, then an offer or a ready body.
int shm_offer(const uint8_t *d, size_t n);
std::vector<Bytes> shm_offer_seeds();
// An all-to-all's plan from hostile count matrices (group/all_to_all.hpp).
int all_to_all(const uint8_t *d, size_t n);
std::vector<Bytes> all_to_all_seeds();
int failover(const uint8_t *d, size_t n);
std::vector<Bytes> failover_seeds();

// Valid messages of each kind, encoded with the library's own encoders.
std::vector<Bytes> seeds(const std::string &target);
const std::vector<std::string> &targets();
int run(const std::string &target, const uint8_t *d, size_t n);

}  // namespace ds4tp::fuzz
