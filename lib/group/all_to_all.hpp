// An all-to-all's plan from the counts every rank declared (pure; the
// fuzz target fuzz_all_to_all feeds it hostile matrices).
#pragma once

#include <cstdint>

#include "common/error.hpp"

namespace ds4tp::group {

constexpr int kAllToAllRanks = 16;

// `matrix[r][q]`: the bytes rank r declared it sends rank q (the counts
// step: row r is rank r's send_bytes), the same matrix on every rank.
// EDESYNC naming the first rank whose count for rank `me` differs from
// what `me` expects from it (recv_bytes); else `steps`: how many steps of
// `cap`-byte pieces the largest piece takes (at least 1), the same on
// every rank.
int all_to_all_steps(const uint64_t (*matrix)[kAllToAllRanks], int n, int me,
                     const uint64_t *recv_bytes, uint64_t cap, uint64_t &steps, Error &err);

}  // namespace ds4tp::group
