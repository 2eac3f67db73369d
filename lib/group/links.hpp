// The links of group bring-up until the group takes them (links.cpp
// opens them, bringup.cpp's connect holds them until every rank is ready).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "group/group.hpp"
#include "net/socket.hpp"
#include "link/descriptor.hpp"
#include "link/shm/area.hpp"

namespace ds4tp::group {

// The links of bring-up until the group takes them: a segment this rank
// made is unlinked when connect returns (every rank has it open by then,
// or bring-up failed).
struct Group::Links {
  std::shared_ptr<shm::Area> area;  // flat shm: rank 0's; tiered: this host's
  bool made = false;
  std::vector<net::Fd> fds;  // the mesh's links: flat, by rank; tiered, by host (leaders)
  std::vector<net::Fd> host;  // tiered, by member of this host: a leader's to each rank,
                              // a rank's [0] to its leader
  link::Availability rdma_port;  // this rank's, when it may run rdma
  link::MeshConnection mesh;     // this rank's end of the mesh over fds
  std::unique_ptr<link::State> prepared;  // what the roster's backend set up on them
  std::string fallback;  // why this rank's links cannot run the roster's backend
  ~Links() {
    if (made && area) shm::area_unlink(*area);
  }
};

}  // namespace ds4tp::group
