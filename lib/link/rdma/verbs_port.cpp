// Finding a usable RDMA port (verbs_port.hpp): GID choice and the reasons
// a port is refused.
#include "link/rdma/verbs_port.hpp"

#include <cerrno>
#include <cstring>
#include <vector>

#include "os/os.hpp"

namespace ds4tp::rdma {

namespace {

#if defined(__APPLE__)
constexpr const char *kPortDownHint =
    "is the Thunderbolt peer up, with `rdma_ctl enable` run there?";
#else
constexpr const char *kPortDownHint = "check the cable and the link";
#endif

const char *port_state_name(int s) {
  switch (s) {
    case abi::kPortNop: return "NOP";
    case abi::kPortDown: return "DOWN";
    case abi::kPortInit: return "INIT";
    case abi::kPortArmed: return "ARMED";
    case abi::kPortActive: return "ACTIVE";
    case abi::kPortActiveDefer: return "ACTIVE_DEFER";
    default: return "unknown";
  }
}

bool gid_zero(const abi::Gid &g) {
  for (uint8_t b : g.raw)
    if (b) return false;
  return true;
}

bool gid_ipv4_mapped(const abi::Gid &g) {
  for (int i = 0; i < 10; i++)
    if (g.raw[i]) return false;
  return g.raw[10] == 0xff && g.raw[11] == 0xff;
}

bool gid_link_local(const abi::Gid &g) { return g.raw[0] == 0xfe && (g.raw[1] & 0xc0) == 0x80; }

const char *gid_kind_name(GidKind k) {
  switch (k) {
    case GidKind::Ib: return "IB";
    case GidKind::RoceV1: return "RoCE v1";
    case GidKind::RoceV2: return "RoCE v2";
    default: return "unknown type";
  }
}

// Reads one GID and its type: the extended query when the library has it,
// else the plain query plus what the OS says (os::rdma_gid_type). False
// for an empty or unreadable entry.
bool read_gid(const Verbs &v, abi::Context *ctx, const char *dev, int port, int index,
              uint8_t link_layer, abi::Gid &gid, GidKind &kind) {
  if (v.query_gid_ex != nullptr) {
    abi::GidEntry e{};
    if (v.query_gid_ex(ctx, uint32_t(port), uint32_t(index), &e, 0, sizeof e) != 0) return false;
    gid = e.gid;
    kind = e.gid_type == abi::kGidTypeRoceV2   ? GidKind::RoceV2
           : e.gid_type == abi::kGidTypeRoceV1 ? GidKind::RoceV1
                                                : GidKind::Ib;
  } else {
    if (v.query_gid(ctx, uint8_t(port), index, &gid) != 0) return false;
    kind = link_layer == abi::kLinkLayerEthernet ? GidKind::Unknown : GidKind::Ib;
    std::string t;
    if (os::rdma_gid_type(dev, port, index, t))
      kind = t.find("v2") != std::string::npos ? GidKind::RoceV2 : GidKind::RoceV1;
  }
  if (link_layer == abi::kLinkLayerInfiniband) kind = GidKind::Ib;
  return !gid_zero(gid);
}

// Higher is better; 0 = do not use.
int gid_score(const abi::Gid &g, GidKind k, uint8_t link_layer) {
#if defined(__APPLE__)
  // Apple reports no GID types; only the IPv4-mapped GID routes (it
  // appears once the Thunderbolt interface has an IPv4 address).
  (void)k;
  (void)link_layer;
  return gid_ipv4_mapped(g) ? 1 : 0;
#endif
  if (link_layer != abi::kLinkLayerEthernet) return 1;
  switch (k) {
    case GidKind::RoceV2: return gid_ipv4_mapped(g) ? 5 : gid_link_local(g) ? 3 : 4;
    case GidKind::RoceV1: return 2;
    default: return 1;
  }
}

// Checks one opened device's requested port; true with `f` filled when
// usable, else appends the reason to `notes`.
bool check_port(const Verbs &v, abi::Context *ctx, const char *name, const ProbeRequest &req,
                Found &f, std::vector<std::string> &notes) {
  // ibv_query_device and ibv_query_port return the error; errno is not set.
  if (int e = v.query_device(ctx, &f.dev_attr)) {
    notes.push_back(fmt::format("{}: querying the device failed: {}", name, std::strerror(e)));
    return false;
  }
  if (req.port < 1 || req.port > f.dev_attr.phys_port_cnt) {
    notes.push_back(fmt::format("{} has ports 1..{}, not port {}", name,
                                unsigned(f.dev_attr.phys_port_cnt), req.port));
    return false;
  }
  if (int e = v.query_port(ctx, uint8_t(req.port), &f.port_attr)) {
    notes.push_back(fmt::format("{} port {}: query failed: {}", name, req.port, std::strerror(e)));
    return false;
  }
  if (f.port_attr.state != abi::kPortActive) {
    notes.push_back(fmt::format("{} port {} is {} (not ACTIVE: {})", name, req.port,
                                port_state_name(f.port_attr.state), kPortDownHint));
    return false;
  }
  const uint8_t ll = f.port_attr.link_layer;
  if (req.gid_index >= 0) {
    if (req.gid_index >= f.port_attr.gid_tbl_len) {
      notes.push_back(fmt::format("{} port {} has GID indices 0..{}, not {}", name, req.port,
                                  f.port_attr.gid_tbl_len - 1, req.gid_index));
      return false;
    }
    if (!read_gid(v, ctx, name, req.port, req.gid_index, ll, f.gid, f.kind)) {
      notes.push_back(fmt::format("{} port {} GID index {} is empty (no address on it)", name,
                                  req.port, req.gid_index));
      return false;
    }
    f.gid_index = req.gid_index;
  } else {
    int best = 0;
    for (int i = 0; i < f.port_attr.gid_tbl_len; i++) {
      abi::Gid g{};
      GidKind k;
      if (!read_gid(v, ctx, name, req.port, i, ll, g, k)) continue;
      int s = gid_score(g, k, ll);
      if (s > best) {
        best = s;
        f.gid_index = i;
        f.gid = g;
        f.kind = k;
      }
      if (ll != abi::kLinkLayerEthernet) break;  // InfiniBand: the port GID
    }
    if (f.gid_index < 0) {
      notes.push_back(fmt::format(
#if defined(__APPLE__)
          "{} port {} has no IPv4-mapped GID ({} entries): give the Thunderbolt bridge's "
          "member interface its own IPv4 address",
          name, req.port, f.port_attr.gid_tbl_len));
#else
          "{} port {} has no usable GID ({} entries, all empty{})", name, req.port,
          f.port_attr.gid_tbl_len,
          ll == abi::kLinkLayerEthernet ? ": give the interface an IP address" : ""));
#endif
      return false;
    }
  }
  f.device = name;
  f.port = req.port;
  return true;
}

}  // namespace

std::string describe_found(const Found &f) {
  return fmt::format("{} port {} GID {} ({})", f.device, f.port, f.gid_index,
                     gid_kind_name(f.kind));
}

bool find_port(const Verbs &v, const ProbeRequest &req, Found &f, std::string &why,
               abi::Context **ctx_out) {
  int n = 0;
  errno = 0;
  abi::Device **list = v.get_device_list(&n);
  if (list == nullptr) {
    int e = errno;
#if defined(__APPLE__)
    why = fmt::format("librdma found no rdma_en* device (ibv_get_device_list: {}; is a "
                      "Thunderbolt 5 cable connected and RDMA enabled with `rdma_ctl enable`?)",
                      std::strerror(e));
#else
    why = e == ENOSYS ? "libibverbs found no RDMA devices (the kernel has no RDMA support: "
                        "ibv_get_device_list: Function not implemented)"
                      : fmt::format("libibverbs found no RDMA devices (ibv_get_device_list: {})",
                                    std::strerror(e));
#endif
    return false;
  }
  std::vector<std::string> notes, names;
  bool ok = false;
  for (int i = 0; i < n && !ok; i++) {
    const char *name = v.get_device_name(list[i]);
    if (name == nullptr) name = "?";
    names.push_back(name);
    if (!req.device.empty() && req.device != name) continue;
    abi::Context *ctx = v.open_device(list[i]);
    if (ctx == nullptr) {
      notes.push_back(fmt::format("{}: cannot open: {}", name, std::strerror(errno)));
      continue;
    }
    ok = check_port(v, ctx, name, req, f, notes);
    if (ok && ctx_out != nullptr)
      *ctx_out = ctx;
    else
      v.close_device(ctx);
  }
  v.free_device_list(list);
  if (ok) return true;
  if (n == 0) {
#if defined(__APPLE__)
    why = "librdma found no rdma_en* device (is a Thunderbolt 5 cable connected and RDMA "
          "enabled with `rdma_ctl enable`?)";
#else
    why = "libibverbs found no RDMA devices";
#endif
  } else if (!req.device.empty() && notes.empty()) {
    std::string all;
    for (auto &s : names) all += (all.empty() ? "" : ", ") + s;
    why = fmt::format("RDMA device '{}' not found (devices here: {})", req.device, all);
  } else {
    std::string all;
    for (auto &s : notes) all += (all.empty() ? "" : "; ") + s;
    why = "no usable RDMA port: " + all;
  }
  return false;
}

}  // namespace ds4tp::rdma
