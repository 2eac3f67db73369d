// The test verbs provider's state (provider.cpp: set-up calls;
// data_path.cpp: posting, progress and polling). Test-only.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "ring.hpp"

namespace fv {

struct Config {
  bool apple = false;
  uint32_t max_msg = 1u << 20;
  uint64_t drop_at = 0, wc_at = 0;
  uint64_t cut_at = 0;  // from this send on, every message is lost (good completions)
  int cut_device = -1;  // cut_at counts this device's sends only (-1: all sends)
  int wc_status = 0;
  uint32_t dead_qps = 0;
  int dead_device = -1;  // dead_qps counts this device's QPs only (-1: all QPs)
  uint32_t dead_after = 0;      // QPs after this many on dead_after_device never receive (0: off)
  int dead_after_device = 0;
  uint64_t delay_us = 0;  // device delay_device's sends leave this long after their post
  int delay_device = 0;
  bool port_down = false, no_ipv4 = false, no_gid = false;
  std::string fail;  // the call made to fail
};

// The profile and faults from the environment (read at each use).
Config read_config();

inline constexpr int kMaxWr = 4096, kMaxCqe = 65536, kGids = 2, kDevices = 3;

// Everything is guarded by one lock: simple, and the binding's posting and
// polling may come from different threads.
inline std::mutex g_mu;
inline uint64_t g_sends = 0;    // messages posted by this process (fault counters)
inline uint64_t g_device_sends[kDevices] = {};  // ... by each device
inline uint32_t g_device_created[kDevices] = {};  // QPs created on each device
inline uint32_t g_created = 0;  // QPs created by this process
inline int g_open = 0;          // open contexts; counters restart when none are

struct Ctx {
  verbs_context v;  // ends with the ibv_context
};
struct Pd {
  ibv_pd pd;
};
struct Mr {
  ibv_mr mr;
};
struct Qp;
struct Cq {
  ibv_cq cq;
  std::deque<ibv_wc> done;
  std::vector<Qp *> qps;
  bool overrun = false;
};
struct SendWr {
  uint64_t wr_id;
  uint64_t addr;
  uint32_t len, lkey, imm;
  ibv_wr_opcode op;
  bool signaled;
  uint64_t posted_ns;  // CLOCK_MONOTONIC (the delay fault)
};
struct RecvWr {
  uint64_t wr_id, addr;
  uint32_t len, lkey;
};
struct Qp {
  ibv_qp qp;
  Config cfg;
  bool sig_all = false, dead_in = false;
  uint32_t max_send = 0, max_recv = 0;
  uint32_t rq_psn = 0, sq_psn = 0, dest_qp = 0;
  uint8_t dgid[16]{};
  std::deque<SendWr> sq;
  std::deque<RecvWr> rq;
  Ring in, out;
};

inline std::vector<Mr *> g_mrs;

// GID `index` of device `device`'s port 1 under `c`; false (zeroed) for
// an empty entry. Both GIDs of device d end in byte d + 1.
bool gid_of(const Config &c, int device, int index, ibv_gid &g);
// The index (0..kDevices-1) of the device `ctx` was opened on.
int device_of(const ibv_context *ctx);
void fill_port(const Config &c, ibv_port_attr &a);

// The context's ops (also exported as functions by the Apple variant).
int op_post_send(ibv_qp *qp, ibv_send_wr *wr, ibv_send_wr **bad);
int op_post_recv(ibv_qp *qp, ibv_recv_wr *wr, ibv_recv_wr **bad);
int op_poll_cq(ibv_cq *cq, int n, ibv_wc *wc);

}  // namespace fv
