// Finding a usable RDMA port, and opening it as a Device.
//
// probe() answers "can this rank offer RDMA?" with the reason in words when
// it cannot: built without verbs, libibverbs not installed, no devices (and
// why: e.g. a kernel without RDMA support), the named device missing, its
// port down, or no usable GID. Without a forced GID index it takes the
// first device with an ACTIVE port and prefers a RoCE v2 GID (an
// IPv4-mapped one first) where the port has a choice.
//
// Implemented by verbs_device.cpp and verbs_port.cpp (the verbs binding)
// or no_verbs.cpp (DS4TP_WITH_RDMA=OFF).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "link/rdma/queue_pair.hpp"

namespace ds4tp::rdma {

struct ProbeRequest {
  std::string device;     // empty = any device
  int port = 1;           // 1..255
  int gid_index = -1;     // -1 = pick
  std::string library;    // empty = $DS4TP_VERBS_LIB, else os::verbs_library_names()
};

struct ProbeResult {
  bool usable = false;
  // Unusable: why, e.g. "libibverbs found no RDMA devices (the kernel has
  // no RDMA support: ibv_get_device_list: Function not implemented)".
  // Usable: what was found, e.g. "mlx5_0 port 1 GID 3 (RoCE v2)".
  std::string reason;
  std::string device;
  int port = 0;
  int gid_index = -1;
};

// An rdma rail's port, "device[:port[:gid_index]]" (ds4tp_options.rdma_rails),
// into `req`'s device, port (default 1) and GID index (default -1: pick).
// False for an empty device, a port outside 1..255 or an index outside
// 0..65535. Pure.
bool parse_rail(const std::string &text, ProbeRequest &req);

// Probes and opens rail `index`'s port (`text` as parse_rail reads it) and
// appends it to `out`; EINVAL or the probe's reason naming the rail.
int open_rail(const std::string &text, int index, std::vector<std::unique_ptr<Device>> &out,
              Error &err);

// True when this library was built with the verbs binding.
bool built_with_verbs();

// Looks for a usable port. No network I/O; opens and closes devices.
ProbeResult probe(const ProbeRequest &req);

// Opens the port `found` names (from a usable probe) with a protection
// domain, ready to register the slab and create queue pairs. EUNSUPPORTED
// or EIO with the reason.
int open_device(const ProbeRequest &req, const ProbeResult &found,
                std::unique_ptr<Device> &out, Error &err);

}  // namespace ds4tp::rdma
