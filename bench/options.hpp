// ds4tp_bench's command line: what to measure and how (bench/README.md
// lists the options; `ds4tp_bench --help` prints them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cases.hpp"
#include "ds4tp/ds4tp.h"

namespace bench {

constexpr uint64_t kHeadline = 16384;  // n_embd 4096 in f32

struct Config {
  enum { Local, Leader, Worker } role = Local;
  std::string listen_host = "127.0.0.1";
  int port = 0;
  std::string connect_host;
  int connect_port = 0;
  std::vector<int> transports = {DS4TP_TRANSPORT_TCP, DS4TP_TRANSPORT_SHM,
                                 DS4TP_TRANSPORT_RDMA};
  std::vector<Section> sections = {Section::Row,   Section::Batch,   Section::Big,
                                   Section::Token, Section::Control, Section::Group};
  std::vector<uint64_t> sizes = {1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20};
  std::vector<uint32_t> rows = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<uint64_t> big_sizes = {8ull << 20, 64ull << 20};
  std::vector<int> policies = {0, DS4TP_SPIN_ADAPTIVE, 1000000};
  std::vector<std::string> big_modes;  // DS4TP_BIG_GATE values for big tcp pairs
  // Many short rounds: a load change on a shared machine then hits every
  // variant alike, which keeps the lib/raw ratios meaningful.
  int rounds = 8;
  int iters = 100;            // row (up to 64 KiB) and batch, per variant per round
  int headline_iters = 500;   // row 16 KiB, per variant per round
  int warm = 10;
  int warm_first = 100;
  int big_iters = 3;          // 8 MiB; 64 MiB gets a third of it, at least 1
  int tokens = 12;            // per variant per round
  uint32_t layers = 43;
  int pin = -1;               // CPU for this process; -1 = no pinning (--no-pin)
  std::string out_dir = "bench-out";
  int connect_timeout_ms = 10000;
  std::vector<std::string> argv;  // as given, for the table's preamble
};

// Parses argv; prints the usage and exits (2) on a bad option.
Config parse(int argc, char **argv);

}  // namespace bench
