// The rdma descriptor: availability (the port probe), set-up (opening the
// device and the set-up link on the data connection), the pair's link, and
// a group's mesh over its tcp links.
#include "link/descriptor.hpp"
#include "link/rdma/group_link.hpp"
#include "link/rdma/probe.hpp"
#include "link/rdma/setup_link.hpp"
#include "link/rdma/pair_link_impl.hpp"
#include "wire/hello.hpp"

namespace ds4tp::link {
namespace {

ds4tp::rdma::ProbeRequest request(const Query &q) {
  return {q.rdma_device, q.rdma_port, q.rdma_gid_index, {}};
}

// What the probe found, then the device set-up opened.
struct Found final : State {
  ds4tp::rdma::ProbeRequest req;
  ds4tp::rdma::ProbeResult result;
};
struct Opened final : State {
  std::unique_ptr<ds4tp::rdma::Device> device;
  std::vector<std::unique_ptr<ds4tp::rdma::Device>> rails;
};

void rdma_available(const Query &q, Availability &out) {
  auto f = std::make_shared<Found>();
  f->req = request(q);
  f->result = ds4tp::rdma::probe(f->req);
  out.usable = f->result.usable;
  out.why = f->result.reason;
  out.found = std::move(f);
}

int rdma_setup(Connection &c, const Availability &probed, std::unique_ptr<State> &prepared,
               std::string &, Error &err) {
  auto *f = static_cast<const Found *>(probed.found.get());  // only rdma_available sets it
  if (f == nullptr)
    return err.set(DS4TP_EUNSUPPORTED, "rdma: this rank did not probe its RDMA devices");
  auto o = std::make_unique<Opened>();
  if (int rc = ds4tp::rdma::open_device(f->req, f->result, o->device, err)) return rc;
  for (size_t k = 0; k < c.rdma_rails.size(); k++)
    if (int rc = ds4tp::rdma::open_rail(c.rdma_rails[k], int(k + 1), o->rails, err)) return rc;
  prepared = std::move(o);
  return DS4TP_OK;
}

std::unique_ptr<link::Link> rdma_make(Connection &c, std::unique_ptr<State> prepared) {
  ds4tp::rdma::Endpoint ep;
  ep.device = std::move(static_cast<Opened &>(*prepared).device);
  ep.rails = std::move(static_cast<Opened &>(*prepared).rails);
  // Set-up frames travel on the data connection: the transport owns it,
  // so they never interleave with the session's control frames.
  ep.link = ds4tp::rdma::make_socket_setup_link(c.data.get());
  ep.data = std::move(c.data);
  ep.control_fd = c.control_fd;
  ep.rank = c.rank;
  ep.rail_rows = c.rail_rows;
  ep.row_link = c.row_link;
  ds4tp::rdma::Tuning tun;
  tun.setup_timeout_ns = c.frame_timeout_ns;
  return ds4tp::rdma::make_pair_link(std::move(ep), c.data_config, tun, c.schedule, c.log);
}

// A group's queue pairs, up over its tcp links until the group decides.
struct MeshUp final : State {
  std::unique_ptr<ds4tp::rdma::Mesh> mesh;
};

// A rank without a usable port still trades its status on every link,
// so its peers learn why; `fallback` then says it for this rank.
int rdma_mesh_setup(const MeshConnection &c, const Availability &probed,
                    std::unique_ptr<State> &prepared, std::string &fallback, Error &err) {
  auto *f = static_cast<const Found *>(probed.found.get());  // only rdma_available sets it
  std::unique_ptr<ds4tp::rdma::Device> dev;
  std::string none = f == nullptr        ? "this rank did not probe its RDMA devices"
                     : f->result.usable ? ""
                                         : f->result.reason;
  if (none.empty()) {
    Error e;
    if (ds4tp::rdma::open_device(f->req, f->result, dev, e) != DS4TP_OK) none = e.message;
  }
  auto up = std::make_unique<MeshUp>();
  if (int rc = ds4tp::rdma::Mesh::open(std::move(dev), none, ds4tp::rdma::MeshConfig(c), up->mesh,
                                       fallback, err))
    return rc;
  if (up->mesh) prepared = std::move(up);
  return DS4TP_OK;
}

std::unique_ptr<link::Link> rdma_mesh_make(const MeshConnection &, std::vector<net::Fd> fds,
                                         std::unique_ptr<State> prepared) {
  auto &up = static_cast<MeshUp &>(*prepared);  // the group runs rdma only when set-up made it
  up.mesh->adopt(std::move(fds));
  return std::move(up.mesh);
}

}  // namespace

const Descriptor kRdma{"rdma",          "RDMA",          DS4TP_TRANSPORT_RDMA, wire::kCapRdma, true,
                       rdma_available,  rdma_setup,      rdma_make,
                       rdma_mesh_setup, rdma_mesh_make};

}  // namespace ds4tp::link
