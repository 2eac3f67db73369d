// Finding a usable RDMA port: the device walk behind probe() and
// open_device() (verbs_device.cpp). Only verbs_*.cpp include this header.
#pragma once

#include <string>

#include "link/rdma/probe.hpp"
#include "link/rdma/verbs_loader.hpp"

namespace ds4tp::rdma {

enum class GidKind { Ib, RoceV1, RoceV2, Unknown };

// What find_port() chose, with the attributes queried on the way.
struct Found {
  std::string device;
  int port = 0;
  int gid_index = -1;
  GidKind kind = GidKind::Unknown;
  abi::Gid gid{};
  abi::PortAttr port_attr{};
  abi::DeviceAttr dev_attr{};
};

// A one-line description: "mlx5_0 port 1 GID 3 (RoCE v2)".
std::string describe_found(const Found &f);

// Walks the device list for the first usable port (or the named
// device's). False with `why` in words when there is none. On success
// `ctx_out` (when non-null) keeps that device open for the caller.
bool find_port(const Verbs &v, const ProbeRequest &req, Found &f, std::string &why,
               abi::Context **ctx_out);

}  // namespace ds4tp::rdma
