// Turns the leader's case results into the human table, results.csv,
// samples-16k.csv and the target verdicts.
#pragma once

#include <string>
#include <vector>

#include "cases.hpp"

namespace bench {

struct ReportConfig {
  std::string out_dir;    // files go here (created if missing)
  std::string preamble;   // config and machine lines printed first
  std::vector<std::string> skipped;  // "shm: skipped: why" lines
  uint64_t headline_bytes = 16384;
};

// Prints the table to stdout and writes table.txt, results.csv and
// samples-16k.csv into out_dir. Returns a failed Status when a file
// cannot be written.
Status write_report(const ReportConfig &cfg, std::vector<CaseResult> &results);

}  // namespace bench
