// Shared by the failover tests (test_failover.cpp, test_failover_matrix.cpp):
// the ranks' captured log, a pair set-up that captures it, the test verbs
// provider's environment, and the traffic every case runs (row, batch and
// big gates, each payload checked bit for bit).
#pragma once

#include <cstdint>
#include <string>

#include "support/env.hpp"
#include "support/ranks.hpp"

namespace ds4tp::test {

// Each rank's log lines (each rank is its own process).
void capture(void *, int, const char *msg);
// The first captured line holding `what`, "" when none does.
std::string logged(const char *what);

// A pair over `transport` whose ranks capture their log (cleared here).
RankSetup failover_setup(int transport);

// The test verbs provider, `profile` ("rc", "uc-apple"), no fault.
struct Provider {
  explicit Provider(const char *profile = "rc")
      : lib("DS4TP_VERBS_LIB", DS4TP_TEST_VERBS_PROVIDER),
        prof("DS4TP_VERBS_PROVIDER_PROFILE", profile),
        flt("DS4TP_VERBS_PROVIDER_FAULT", nullptr) {}
  ScopedEnv lib, prof, flt;
};

// What a rank's traffic is made of: row gates, batch gates (index and
// rows cycling), big gates from private memory, row gates again.
constexpr int kRows = 40, kBatches = 8, kBigs = 2, kTailRows = 16;
constexpr uint64_t kBigBytes = 4u << 20;

struct Seqs {
  uint64_t row = 0, batch = 0, big = 0;
};

// n gates of each kind, every payload checked; 0, or the child's failure.
int rows(ds4tp_pair *tp, int n, Seqs &q);
int batches(ds4tp_pair *tp, int n, Seqs &q);
int bigs(ds4tp_pair *tp, int n, Seqs &q);
// Row gates as rows() sends them until one fails (at most n): its
// status, quietly.
int rows_until_failure(ds4tp_pair *tp, int n, Seqs &q);
// kRows rows, kBatches batch gates, kBigs big gates, kTailRows rows.
int traffic(ds4tp_pair *tp, Seqs &q);
// The stats' failover count (~0 when unreadable).
uint64_t failovers(ds4tp_pair *tp);

// The whole traffic, bit for bit, then: the pair runs over tcp, counted
// one failover, and this rank's log has `said` (a line of the failover).
// With `rails` the primary is a tcp pair's data connection and one rail,
// the row gates on the rail.
Body survives(int transport, const char *said, bool rails = false);
// `fault` in rank `who`'s provider (-1: both ranks').
Body with_fault(const char *fault, int who, Body body);

}  // namespace ds4tp::test
