// The group section: ds4tp_group_all_reduce of one f32 vector between the
// leader (rank 0) and the worker (rank 1), next to one raw exchange of the
// same bytes on the session's raw connection, interleaved like every case.
//
// Payload: element i of rank r at iteration k is (k * 131 + r * 3 + i)
// mod 4099 as an f32 (4099 is prime and above a 16 KiB vector's 4096
// elements), so the rank-order sum is exact and both ranks know it. Every
// variant fills its whole vector before the clock starts (an engine writes
// its vector too) and every element is checked after it stops; both are
// copies and compares of precomputed runs, so they stay cheap next to the
// exchange and the ranks stay in step.
#pragma once

#include <cstdint>
#include <string>

#include "ds4tp/ds4tp.h"
#include "sock.hpp"

namespace bench {

struct Session;

void fill_group(uint8_t *p, uint64_t bytes, uint64_t k, int rank);
// First element that is not `rank`'s value (rank >= 0) or the two ranks'
// sum (rank < 0); `bytes` / 4 when all are.
uint64_t group_mismatch(const uint8_t *p, uint64_t bytes, uint64_t k, int rank);

// Opens a 2-rank group on the bench's transport, rank 0 listening on the
// library address; both ranks swap a STATUS like the pairs, so a failure
// on either side is seen by both (and reported, not fatal, in
// `unavailable`). spin_us is the pair policy's value: 0 never spins,
// adaptive is the group's default, others are the group's spin_us.
Status open_group(Session &s, int transport, int spin_us, ds4tp_group **out,
                  std::string &unavailable);

}  // namespace bench
