// ds4tp: operator tool. Answers "will these two ranks work together, and how
// fast?" before an engine loads its weights. Uses only the public C API.
//
//   ds4tp probe [--json]
//   ds4tp pair --listen [HOST:]PORT  [options]      (on one host)
//   ds4tp pair --connect HOST:PORT   [options]      (on the other)
//   ds4tp trace merge a.json b.json -o both.json
#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "ds4tp/ds4tp.h"
#include "cli.hpp"

namespace ds4tp_cli {

void usage(FILE *f) {
  std::fprintf(f,
               "usage:\n"
               "  ds4tp probe [--json]\n"
               "  ds4tp pair (--listen [HOST:]PORT | --connect HOST:PORT) [options]\n"
               "  ds4tp group --local N [--transport auto|shm|tcp] [--dtype f32|f16|bf16|f64|i32|i64|u8]\n"
               "              [--op NAME[,NAME...]|all] [--reduce sum|max|min|prod]\n"
               "              [--count ELEMS] [--iters N] [--hosts H]   (N rank processes on this\n"
               "              host; --hosts: they claim H hosts, to try the tiered plan)\n"
               "              --op: all_reduce (the default), reduce_scatter, reduce, gather, scatter,\n"
               "              all_gather, all_gather_v, all_gather_rows, all_to_all_v, broadcast,\n"
               "              barrier; every call checked bit for bit, p50/p99 per op and size\n"
               "  ds4tp group --rank R --size N --rendezvous HOST:PORT [...]\n"
               "  ds4tp trace merge A.json B.json -o BOTH.json   (two ranks, one timeline)\n"
               "  mpirun -np N ds4tp group   (rank/size from OMPI_COMM_WORLD_*, RANK/WORLD_SIZE,\n"
               "              SLURM_PROCID/SLURM_NTASKS; rendezvous MASTER_ADDR:MASTER_PORT)\n"
               "options:\n"
               "  --transport auto|tcp|shm|rdma   transport to request (default auto)\n"
               "  --rdma-device NAME  --rdma-gid-index N\n"
               "  --rdma-rail DEV[:PORT[:GID]]   (rdma) one more rdma link on this host's DEV;\n"
               "                      repeat for more; both hosts list as many, in cable order\n"
               "  --key-file PATH     pre-shared key (both hosts need the same file)\n"
               "  --size BYTES        gate vector size (default 16384 = n_embd 4096)\n"
               "  --count N           gates to run (default 2000)\n"
               "  --big BYTES         big-gate payload each way (default 8 MiB, 0 = skip)\n"
               "  --metrics           print the Prometheus text of the pair's stats after the run\n"
               "  --no-failover       no standby tcp link beside rdma or shm\n"
               "  --rail ADDR         (tcp) one more link, to the leader's ADDR; repeat for more;\n"
               "                      both hosts list the same, in the same order\n"
               "  --fail-primary-after N   (a test) give the primary link up after N row gates:\n"
               "                      both links are measured, and the failover is timed\n"
               "  --trace PATH        write a Chrome/Perfetto trace of the run (%%r = rank)\n"
               "  --timeout SEC       bring-up deadline (default 60)\n"
               "  --identity SPEC     engine identity to compare with the peer:\n"
               "                      k=v,... or @FILE with k=v lines; keys: model_bytes,\n"
               "                      model_id, n_layer, n_embd, n_vocab, quant_bits,\n"
               "                      ctx_size, features, blob\n"
               "  --json              machine-readable output on stdout\n");
}

// The transports this library knows, by the names it gives them: AUTO,
// then every value up to the first without a name.
bool known_transport(int t) { return std::strcmp(ds4tp_transport_name(t), "?") != 0; }

int parse_transport(const std::string &s) {
  for (int t = DS4TP_TRANSPORT_AUTO; known_transport(t); t++)
    if (s == ds4tp_transport_name(t)) return t;
  return -1;
}

bool parse_u64(const std::string &s, uint64_t &out) {
  if (s.empty()) return false;
  char *end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s.c_str(), &end, 0);
  if (errno || *end || s[0] == '-') return false;
  out = v;
  return true;
}

bool split_host_port(const std::string &s, std::string &host, int &port) {
  size_t colon = s.rfind(':');
  std::string p = colon == std::string::npos ? s : s.substr(colon + 1);
  if (colon != std::string::npos) host = s.substr(0, colon);
  uint64_t v;
  if (!parse_u64(p, v) || v > 65535) return false;
  port = int(v);
  return true;
}

int parse_args(int argc, char **argv, Args &a, std::string &err) {
  if (argc < 2) {
    err = "missing command";
    return -1;
  }
  a.cmd = argv[1];
  if (a.cmd == "-h" || a.cmd == "--help") {
    usage(stdout);
    std::exit(0);
  }
  if (a.cmd != "probe" && a.cmd != "pair") {
    err = "unknown command '" + a.cmd + "'";
    return -1;
  }
  for (int i = 2; i < argc; i++) {
    std::string o = argv[i];
    auto val = [&](std::string &v) {
      if (i + 1 >= argc) {
        err = o + " needs a value";
        return false;
      }
      v = argv[++i];
      return true;
    };
    std::string v;
    if (o == "--json") {
      a.json = true;
    } else if (o == "--quiet") {
      a.quiet = true;
    } else if (o == "--metrics") {
      a.metrics = true;
    } else if (o == "--trace") {
      if (!val(a.trace)) return -1;
    } else if (o == "--listen") {
      if (!val(v)) return -1;
      a.role = DS4TP_ROLE_LEADER;
      a.host = "127.0.0.1";
      if (!split_host_port(v, a.host, a.port)) return err = "bad --listen " + v, -1;
    } else if (o == "--connect") {
      if (!val(v)) return -1;
      a.role = DS4TP_ROLE_WORKER;
      if (v.find(':') == std::string::npos || !split_host_port(v, a.host, a.port) ||
          a.port == 0)
        return err = "--connect needs HOST:PORT, got " + v, -1;
    } else if (o == "--transport") {
      if (!val(v)) return -1;
      a.transport = parse_transport(v);
      if (a.transport < 0) return err = "unknown transport " + v, -1;
    } else if (o == "--rdma-device") {
      if (!val(a.rdma_device)) return -1;
    } else if (o == "--rdma-gid-index") {
      uint64_t n;
      if (!val(v) || !parse_u64(v, n) || n > 255) return err = "bad --rdma-gid-index", -1;
      a.rdma_gid_index = int(n);
    } else if (o == "--key-file") {
      if (!val(a.key_file)) return -1;
    } else if (o == "--size" || o == "--count" || o == "--big" || o == "--timeout") {
      uint64_t n;
      if (!val(v) || !parse_u64(v, n)) return err = "bad " + o + " value", -1;
      if (o == "--size") a.size = n;
      if (o == "--count") a.count = n;
      if (o == "--big") a.big = n;
      if (o == "--timeout") a.timeout_s = int(std::min<uint64_t>(n, 86400));
    } else if (o == "--rail") {
      if (!val(v)) return -1;
      a.rails += (a.rails.empty() ? "" : ",") + v;
    } else if (o == "--rdma-rail") {
      if (!val(v)) return -1;
      a.rdma_rails += (a.rdma_rails.empty() ? "" : ",") + v;
    } else if (o == "--no-failover") {
      a.failover = false;
    } else if (o == "--fail-primary-after") {
      if (!val(v) || !parse_u64(v, a.fail_after) || a.fail_after == 0)
        return err = "--fail-primary-after needs a gate count of at least 1", -1;
    } else if (o == "--identity") {
      if (!val(a.identity)) return -1;
    } else {
      err = "unknown option " + o;
      return -1;
    }
  }
  if (a.cmd == "pair") {
    if (a.role == DS4TP_ROLE_NONE) return err = "pair needs --listen or --connect", -1;
    if (a.size < 4 || a.size % 4 || a.size > (16u << 20))
      return err = "--size must be a multiple of 4 between 4 and 16 MiB", -1;
    if (a.count < 1) return err = "--count must be at least 1", -1;
    if (a.timeout_s < 1) return err = "--timeout must be at least 1", -1;
  }
  return 0;
}

// ---- identity -----------------------------------------------------------

int parse_identity(const Args &a, IdentitySpec &spec, std::string &err) {
  ds4tp_identity_init(&spec.id);
  ds4tp_identity &id = spec.id;
  // The default identity: what two ds4tp tools compare when no engine is named.
  id.model_bytes = 0;
  id.model_id = 0x7e57;
  id.n_layer = 4;
  id.n_embd = uint32_t(a.size / 4);
  id.n_vocab = 32000;
  id.quant_bits = 32;
  if (a.identity.empty()) return 0;
  std::string text = a.identity;
  if (text[0] == '@') {
    std::ifstream f(text.substr(1));
    if (!f) return err = "cannot read identity file " + text.substr(1), -1;
    std::stringstream ss;
    ss << f.rdbuf();
    text = ss.str();
  }
  for (char &c : text)
    if (c == '\n' || c == ';') c = ',';
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item.erase(0, item.find_first_not_of(" \t\r"));
    item.erase(item.find_last_not_of(" \t\r") + 1);
    if (item.empty() || item[0] == '#') continue;
    size_t eq = item.find('=');
    if (eq == std::string::npos) return err = "identity entry '" + item + "' is not key=value", -1;
    std::string k = item.substr(0, eq), v = item.substr(eq + 1);
    if (k == "blob") {
      spec.blob = v;
      continue;
    }
    uint64_t n;
    if (!parse_u64(v, n)) return err = "identity " + k + " value '" + v + "' is not a number", -1;
    if (k == "model_bytes") id.model_bytes = n;
    else if (k == "model_id") id.model_id = uint32_t(n);
    else if (k == "n_layer") id.n_layer = uint32_t(n);
    else if (k == "n_embd") id.n_embd = uint32_t(n);
    else if (k == "n_vocab") id.n_vocab = uint32_t(n);
    else if (k == "quant_bits") id.quant_bits = uint32_t(n);
    else if (k == "ctx_size") id.ctx_size = uint32_t(n);
    else if (k == "features") id.features = n;
    else return err = "unknown identity key '" + k + "'", -1;
  }
  if (!spec.blob.empty()) {
    id.engine_blob = spec.blob.data();
    id.engine_blob_bytes = uint32_t(spec.blob.size());
  }
  return 0;
}

// ---- output -------------------------------------------------------------

std::string json_escape(const std::string &s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\', o += c;
    else if (c == '\n') o += "\\n";
    else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      o += buf;
    } else o += c;
  }
  return o;
}

void log_cb(void *ud, int level, const char *msg) {
  auto *ctx = static_cast<LogCtx *>(ud);
  if (ctx->json && level > DS4TP_LOG_WARN) return;
  static const char *names[] = {"error", "warning", "", ""};
  if (level <= DS4TP_LOG_WARN)
    std::fprintf(stderr, "ds4tp: %s: %s\n", names[level], msg);
  else
    std::fprintf(stderr, "ds4tp: %s\n", msg);
}

// ---- probe --------------------------------------------------------------

// linux, linux-posix (-DDS4TP_PLATFORM=posix) or darwin. On Darwin the rdma
// row says why RDMA is or is not there: librdma missing, no rdma_en*
// device, no IPv4-mapped GID (lib/link/rdma).
#ifdef DS4TP_PLATFORM_LABEL
constexpr const char *kPlatform = DS4TP_PLATFORM_LABEL;
#else
constexpr const char *kPlatform = "unknown";
#endif

int cmd_probe(const Args &a) {
  struct Row {
    int t;
    int ok;
    std::string why;
  };
  std::vector<Row> rows;
  for (int t = DS4TP_TRANSPORT_AUTO + 1; known_transport(t); t++) {
    char why[512] = "";
    int ok = ds4tp_transport_available(t, why, sizeof why);
    rows.push_back({t, ok, why});
  }
  // The library's rule, for a peer that offers what this host offers.
  const char *auto_same = ds4tp_transport_name(ds4tp_transport_auto(1));
  const char *auto_other = ds4tp_transport_name(ds4tp_transport_auto(0));
  if (a.json) {
    std::printf("{\"library\":\"%s\",\"protocol\":%u,\"platform\":\"%s\",\"transports\":[",
                ds4tp_version_string(), ds4tp_protocol_version(), kPlatform);
    for (size_t i = 0; i < rows.size(); i++)
      std::printf("%s{\"name\":\"%s\",\"available\":%s,\"detail\":\"%s\"}", i ? "," : "",
                  ds4tp_transport_name(rows[i].t), rows[i].ok ? "true" : "false",
                  json_escape(rows[i].why).c_str());
    std::printf("],\"auto_same_host\":\"%s\",\"auto_two_hosts\":\"%s\"}\n", auto_same,
                auto_other);
    return 0;
  }
  std::printf("libds4tp %s, wire protocol %u, platform %s\n", ds4tp_version_string(),
              ds4tp_protocol_version(), kPlatform);
  std::printf("transports on this host:\n");
  for (auto &r : rows)
    std::printf("  %-5s %-13s %s\n", ds4tp_transport_name(r.t),
                r.ok ? "available" : "unavailable", r.why.c_str());
  std::printf("auto would pick: %s with a peer on this host, %s with a peer on another host\n",
              auto_same, auto_other);
  return 0;
}

// ds4tp trace merge A B -o OUT
int cmd_trace(int argc, char **argv) {
  std::string in[2], out;
  int n = 0;
  bool ok = argc >= 3 && std::strcmp(argv[2], "merge") == 0;
  for (int i = 3; ok && i < argc; i++) {
    if (std::strcmp(argv[i], "-o") == 0 && i + 1 < argc)
      out = argv[++i];
    else if (n < 2 && argv[i][0] != '-')
      in[n++] = argv[i];
    else
      ok = false;
  }
  if (!ok || n != 2 || out.empty()) {
    std::fprintf(stderr, "usage: ds4tp trace merge A.json B.json -o BOTH.json\n");
    return 2;
  }
  double off = 0, unc = 0;
  if (ds4tp_trace_merge(in[0].c_str(), in[1].c_str(), out.c_str(), &off, &unc) != DS4TP_OK) {
    std::fprintf(stderr, "ds4tp trace merge FAILED: %s\n", ds4tp_last_error());
    return 1;
  }
  std::printf("ds4tp trace merge OK: %s (%s shifted by %.3f us, +/- %.3f us)\n", out.c_str(),
              in[1].c_str(), off, unc);
  return 0;
}

}  // namespace ds4tp_cli

int cmd_group(int argc, char **argv);  // group_cmd.cpp

using namespace ds4tp_cli;

int main(int argc, char **argv) {
  if (argc >= 2 && std::strcmp(argv[1], "group") == 0) return cmd_group(argc, argv);
  if (argc >= 2 && std::strcmp(argv[1], "trace") == 0) return cmd_trace(argc, argv);
  Args a;
  std::string err;
  if (parse_args(argc, argv, a, err) != 0) {
    std::fprintf(stderr, "ds4tp: %s\n", err.c_str());
    usage(stderr);
    return 2;
  }
  if (a.cmd == "probe") return cmd_probe(a);

  IdentitySpec spec;
  if (parse_identity(a, spec, err) != 0) {
    std::fprintf(stderr, "ds4tp: %s\n", err.c_str());
    return 2;
  }
  return cmd_pair(a, spec);
}
