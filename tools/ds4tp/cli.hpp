// What the ds4tp tool's commands share: the parsed command line, the
// engine identity to compare, and the output helpers (ds4tp_cli.cpp).
#pragma once

#include <cstdint>
#include <string>

#include "ds4tp/ds4tp.h"

namespace ds4tp_cli {

struct Args {
  std::string cmd;
  bool json = false;
  bool quiet = false;
  int role = DS4TP_ROLE_NONE;
  std::string host = "127.0.0.1";
  int port = 0;
  int transport = DS4TP_TRANSPORT_AUTO;
  std::string rdma_device;
  int rdma_gid_index = -1;
  std::string key_file;
  uint64_t size = 16384;  // bytes per gate vector
  uint64_t count = 2000;  // gates
  uint64_t big = 8ull << 20;
  int timeout_s = 60;
  std::string identity;  // "k=v,k=v" or "@file"
  bool metrics = false;   // print the Prometheus text after the run
  std::string trace;      // write a Chrome/Perfetto trace here
  bool failover = true;   // a standby tcp link beside rdma, shm or tcp rails
  uint64_t fail_after = 0;  // test: give the primary up after this many row gates
  std::string rails;        // the leader's addresses of more tcp links, comma-separated
  std::string rdma_rails;   // this host's ports of more rdma links, comma-separated
};

struct IdentitySpec {
  ds4tp_identity id;
  std::string blob;
};

struct LogCtx {
  bool json;
};

std::string json_escape(const std::string &s);
// The library's log sink: stderr, and only warnings and errors with --json.
void log_cb(void *ud, int level, const char *msg);

// ds4tp pair (pair_cmd.cpp): the exit status.
int cmd_pair(const Args &a, const IdentitySpec &spec);

}  // namespace ds4tp_cli
