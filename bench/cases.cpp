#include "cases.hpp"

#include <cstdlib>
#include <cstring>

#include "ds4tp/ds4tp.h"
#include "wire/frames.hpp"

namespace bench {

const char *section_name(Section s) {
  switch (s) {
    case Section::Row: return "row";
    case Section::Batch: return "batch";
    case Section::Big: return "big";
    case Section::Token: return "token";
    case Section::Control: return "control";
  }
  return "?";
}

const char *control_op_name(uint32_t op) { return op == kMtpAck ? "mtp+ack" : "eval+logits"; }

bool section_from_name(const std::string &n, Section &out) {
  for (Section s : {Section::Row, Section::Batch, Section::Big, Section::Token, Section::Control})
    if (n == section_name(s)) {
      out = s;
      return true;
    }
  return false;
}

Msg Case::to_msg() const {
  Msg m;
  m.verb = "CASE";
  std::string pol;
  for (int p : policies) pol += (pol.empty() ? "" : ",") + std::to_string(p);
  m.set("section", section_name(section))
      .set("transport", transport)
      .set("bytes", int64_t(bytes))
      .set("rows", rows)
      .set("layers", layers)
      .set("op", op)
      .set("rounds", rounds)
      .set("iters", iters)
      .set("warm", warm)
      .set("warm_first", warm_first)
      .set("policies", pol);
  std::string modes;
  for (auto &b : big_modes) modes += (modes.empty() ? "" : ",") + b;
  if (!modes.empty()) m.set("big_modes", modes);
  return m;
}

bool Case::from_msg(const Msg &m, Case &c) {
  if (m.verb != "CASE" || !section_from_name(m.get("section"), c.section)) return false;
  c.transport = int(m.num("transport"));
  c.bytes = uint64_t(m.num("bytes"));
  c.rows = uint32_t(m.num("rows", 1));
  c.layers = uint32_t(m.num("layers", 1));
  c.op = uint32_t(m.num("op", 0));
  c.rounds = int(m.num("rounds", 1));
  c.iters = int(m.num("iters", 1));
  c.warm = int(m.num("warm", 0));
  c.warm_first = int(m.num("warm_first", 0));
  c.policies.clear();
  for (auto &p : split(m.get("policies"), ',')) c.policies.push_back(std::stoi(p));
  c.big_modes = split(m.get("big_modes"), ',');
  return c.bytes > 0 && c.bytes % 4 == 0 && c.rows >= 1 && c.layers >= 1 && c.rounds >= 0 &&
         c.iters >= 1;
}

std::string Case::label() const {
  std::string s = std::string(section_name(section)) + " " + ds4tp_transport_name(transport);
  if (section == Section::Batch) return s + " " + std::to_string(rows) + " rows";
  if (section == Section::Token) return s + " " + std::to_string(layers) + " layers";
  if (section == Section::Control) return s + " " + control_op_name(op);
  return s + " " + bytes_label(bytes);
}

namespace {

// Vectors (n_embd f32) per row gate for each section.
uint32_t embd_of(const Case &c) {
  if (c.section == Section::Big || c.section == Section::Control) return 1024;  // slab unused
  return uint32_t(c.bytes / 4);
}

// Stamps: the first and last 8 bytes of every payload carry (iteration,
// rank); the receiver checks the peer's. Costs two stores and two loads.
inline uint64_t stamp_value(uint64_t k, int rank) { return (k << 1) | uint64_t(rank); }

inline void stamp(uint8_t *p, uint64_t n, uint64_t k, int rank) {
  uint64_t v = stamp_value(k, rank);
  std::memcpy(p, &v, 8);
  std::memcpy(p + n - 8, &v, 8);
}

inline bool stamped(const uint8_t *p, uint64_t n, uint64_t k, int rank) {
  uint64_t a, b, v = stamp_value(k, rank);
  std::memcpy(&a, p, 8);
  std::memcpy(&b, p + n - 8, 8);
  return a == v && b == v;
}

// Rounds of the raw half-duplex baseline: the library's (tcp/big_exchange.hpp).
constexpr size_t kRawRoundBytes = 2u << 20;

// What one variant exchanges with: a library pair or a raw medium, plus
// where iteration k's bytes live.
struct Variant {
  VariantResult res;
  enum class Kind { Lib, TcpBlock, TcpBusy, TcpAlternate, ShmCopy } kind = Kind::Lib;
  ds4tp_pair *pair = nullptr;   // Lib: owned
  uint64_t gate_seq = 0;        // Lib: last row gate seq
  uint64_t k = 0;               // exchanges done (tokens for the token loop)
  std::vector<uint8_t *> out, in;  // per slot
  std::vector<uint8_t> raw_mem;    // raw variants: private out/in vectors
  uint64_t xfer = 0;            // bytes per exchange each way
  ds4tp_command cmd;            // Lib, control section, worker side

  Variant() { ds4tp_command_init(&cmd); }
  Variant(const Variant &) = delete;
  ~Variant() {
    ds4tp_command_free(&cmd);
    ds4tp_free(pair);
  }
};

// Bytes on the wire of one control round trip (docs/PROTOCOL.md, "Control
// frames"): the raw baseline moves exactly these.
size_t request_bytes(uint32_t op) {
  return ds4tp::wire::kFrameHeaderBytes +
         (op == kMtpAck ? ds4tp::wire::kMtpBytes : ds4tp::wire::kEvalBytes);
}
size_t reply_bytes(uint32_t op) {
  // COMMAND_ACK, or LOGITS with one float: u32 count, u32 row, f32.
  return ds4tp::wire::kFrameHeaderBytes + (op == kMtpAck ? ds4tp::wire::kAckBytes : 8 + 4);
}
inline float logit_of(uint64_t k) { return float(k % 1000003); }
inline int32_t token_of(uint64_t k) { return int32_t(k % 129280); }

struct Runner {
  Session &s;
  const Case &c;
  uint32_t slots = 1;   // buffers the exchanges cycle through
  uint32_t gates = 1;   // exchanges per sample (token loop: 2 * layers)
  int peer = 0;

  Runner(Session &s_, const Case &c_) : s(s_), c(c_), peer(1 - s_.rank) {
    switch (c.section) {
      case Section::Row: slots = 2; break;       // layer 0: attention, ffn
      case Section::Batch: slots = 2; break;     // batch indices 0 and 1
      case Section::Big: slots = 1; break;
      case Section::Token: slots = gates = 2 * c.layers; break;
      case Section::Control: slots = 1; break;
    }
  }

  ds4tp_identity identity() const {
    ds4tp_identity id;
    ds4tp_identity_init(&id);
    id.model_bytes = 1;
    id.model_id = 0xbe;
    id.n_layer = c.section == Section::Token ? c.layers : 1;
    id.n_embd = embd_of(c);
    id.n_vocab = 1000;
    id.quant_bits = 4;
    id.ctx_size = 4096;
    return id;  // default schedule: slot(seq) = (seq - 1) % (2 * n_layer)
  }

  // Opens the library pair for one policy (and big-gate mode, "" for the
  // environment's). Both ranks do the same steps and then swap a STATUS,
  // so a failure on either side is seen by both.
  Status open_lib(int spin_us, const std::string &mode, Variant &v, std::string &unavailable) {
    // The tcp transport reads DS4TP_BIG_GATE when it is made, in connect.
    const char *was = std::getenv("DS4TP_BIG_GATE");
    std::string saved = was ? was : "";
    if (!mode.empty()) setenv("DS4TP_BIG_GATE", mode.c_str(), 1);
    Status st = open_lib_now(spin_us, v, unavailable);
    if (!mode.empty()) {
      if (was) setenv("DS4TP_BIG_GATE", saved.c_str(), 1);
      else unsetenv("DS4TP_BIG_GATE");
    }
    if (!mode.empty()) v.res.name += " " + mode;
    return st;
  }

  Status open_lib_now(int spin_us, Variant &v, std::string &unavailable) {
    ds4tp_options o;
    ds4tp_options_init(&o);
    o.role = s.rank == 0 ? DS4TP_ROLE_LEADER : DS4TP_ROLE_WORKER;
    o.transport = c.transport;
    o.spin_us = spin_us;
    o.connect_timeout_ms = s.connect_timeout_ms;
    o.gate_timeout_ms = s.gate_timeout_ms;
    o.log_level = DS4TP_LOG_WARN;
    ds4tp_identity id = identity();
    std::string mine;  // this rank's failure, if any
    Status st;
    if (s.rank == 0) {
      o.listen_host = s.lib_host.c_str();
      o.listen_port = s.lib_port;
      int rc = ds4tp_new(&v.pair, &o, &id);
      Msg m;
      m.verb = "LIB";
      if (rc != DS4TP_OK) {
        mine = std::string("ds4tp_new: ") + ds4tp_last_error();
        m.set("why", mine);
      } else {
        m.set("port", ds4tp_listen_port(v.pair));
      }
      if (!(st = s.coord.send(m)).ok) return st;
      if (rc == DS4TP_OK && (rc = ds4tp_connect(v.pair)) != DS4TP_OK)
        mine = std::string(ds4tp_err_name(rc)) + ": " + ds4tp_errmsg(v.pair);
    } else {
      Msg m;
      if (!(st = s.coord.recv(m, 30000, "LIB")).ok) return st;
      if (m.kv.count("why")) {
        mine = "the leader could not open its pair";
      } else {
        o.leader_host = s.lib_host.c_str();
        o.leader_port = int(m.num("port"));
        int rc = ds4tp_new(&v.pair, &o, &id);
        if (rc != DS4TP_OK)
          mine = std::string("ds4tp_new: ") + ds4tp_last_error();
        else if ((rc = ds4tp_connect(v.pair)) != DS4TP_OK)
          mine = std::string(ds4tp_err_name(rc)) + ": " + ds4tp_errmsg(v.pair);
      }
    }
    if (mine.empty()) {
      int rc = ds4tp_attach_slab(v.pair, nullptr, 0);
      if (rc != DS4TP_OK) mine = std::string("ds4tp_attach_slab: ") + ds4tp_errmsg(v.pair);
    }
    Msg my;
    my.verb = "STATUS";
    my.set("ok", mine.empty() ? 1 : 0);
    if (!mine.empty()) my.set("why", mine);
    Msg theirs;
    if (!(st = s.coord.send(my)).ok || !(st = s.coord.recv(theirs, 60000, "STATUS")).ok)
      return st;
    if (!mine.empty() || theirs.num("ok") != 1) {
      unavailable = !mine.empty() ? mine : "peer: " + theirs.get("why");
      return {};
    }
    v.kind = Variant::Kind::Lib;
    v.res.lib = true;
    v.res.spin_us = spin_us;
    v.res.name = spin_us == DS4TP_SPIN_ADAPTIVE ? std::string("lib adaptive")
                                                : "lib spin_us=" + std::to_string(spin_us);
    auto *base = static_cast<uint8_t *>(ds4tp_slab_base(v.pair));
    ds4tp_slab_layout lay;
    lay.size = sizeof lay;
    ds4tp_slab_layout_get(v.pair, &lay);
    for (uint32_t i = 0; i < slots; i++) {
      switch (c.section) {
        case Section::Row:
        case Section::Token:
          v.out.push_back(base + ds4tp_slab_out_offset(v.pair, i / 2, i % 2));
          v.in.push_back(base + ds4tp_slab_in_offset(v.pair, i / 2, i % 2));
          v.xfer = lay.vec_bytes;
          break;
        case Section::Batch:
          v.out.push_back(base + ds4tp_slab_batch_out_offset(v.pair, i));
          v.in.push_back(base + ds4tp_slab_batch_in_offset(v.pair, i));
          v.xfer = uint64_t(c.rows - 1) * lay.vec_stride + lay.vec_bytes;
          break;
        case Section::Big:
          v.out.push_back(s.big_out.data());
          v.in.push_back(s.big_in.data());
          v.xfer = c.bytes;
          break;
        case Section::Control:
          break;  // frames live in the library
      }
    }
    return {};
  }

  // A raw variant lays its private buffers out like the slab (one vector
  // per slot, the same stride), so both touch the same amount of memory.
  void open_raw(Variant::Kind kind, const char *name, uint64_t xfer, Variant &v) {
    v.kind = kind;
    v.res.name = name;
    v.xfer = xfer;
    if (c.section == Section::Big) {
      v.out.push_back(s.big_out.data());
      v.in.push_back(s.big_in.data());
      return;
    }
    if (c.section == Section::Control) xfer = 64;  // holds a request or a reply
    uint64_t stride = (xfer + 4095) & ~uint64_t(4095);
    v.raw_mem.assign(size_t(stride) * 2 * slots + 4096, 0);
    auto *p = reinterpret_cast<uint8_t *>(
        (reinterpret_cast<uintptr_t>(v.raw_mem.data()) + 4095) & ~uintptr_t(4095));
    for (uint32_t i = 0; i < slots; i++) {
      v.out.push_back(p + stride * i);
      v.in.push_back(p + stride * (slots + i));
    }
  }

  Status exchange(Variant &v, uint32_t slot, uint64_t k) {
    switch (v.kind) {
      case Variant::Kind::Lib: {
        int rc = DS4TP_OK;
        switch (c.section) {
          case Section::Row:
          case Section::Token:
            rc = ds4tp_gate_exchange(v.pair, slot / 2, slot % 2, ++v.gate_seq);
            break;
          case Section::Batch:
            rc = ds4tp_batch_gate_exchange(v.pair, slot, c.rows, k);
            break;
          case Section::Big:
            rc = ds4tp_big_gate_exchange(v.pair, 0, k, v.out[0], v.in[0], v.xfer);
            break;
          case Section::Control:
            return Status::fail("control rounds go through control_round()");
        }
        if (rc == DS4TP_OK) return {};
        return Status::fail(v.res.name + ": " + ds4tp_err_name(rc) + ": " +
                            ds4tp_errmsg(v.pair));
      }
      case Variant::Kind::TcpBlock:
        return s.raw_tcp.exchange(v.out[slot], v.in[slot], v.xfer, RawTcp::Wait::Block, 3000);
      case Variant::Kind::TcpBusy:
        return s.raw_tcp.exchange(v.out[slot], v.in[slot], v.xfer, RawTcp::Wait::Busy, 3000);
      case Variant::Kind::TcpAlternate:  // the library's round size, the leader first
        return s.raw_tcp.alternate(v.out[slot], v.in[slot], v.xfer, kRawRoundBytes,
                                   s.rank == 0, 3000);
      case Variant::Kind::ShmCopy:
        return s.raw_shm.exchange(v.out[slot], v.in[slot], v.xfer, 3000);
    }
    return Status::fail("unknown variant");
  }

  // One control round trip, checked: the leader sends the command and
  // reads the reply; the worker takes the command and answers it.
  Status control_round(Variant &v, uint64_t k) {
    const bool mtp = c.op == kMtpAck;
    if (v.kind != Variant::Kind::Lib) {
      auto wait = v.kind == Variant::Kind::TcpBusy ? RawTcp::Wait::Busy : RawTcp::Wait::Block;
      const size_t req = request_bytes(c.op), rep = reply_bytes(c.op);
      Status st;
      if (s.rank == 0) {
        stamp(v.out[0], req, k, 0);
        if (!(st = s.raw_tcp.send_all(v.out[0], req, 3000)).ok) return st;
        if (!(st = s.raw_tcp.recv_all(v.in[0], rep, wait, 3000)).ok) return st;
        return stamped(v.in[0], rep, k, 1) ? Status{} : Status::fail(v.res.name + ": bad reply");
      }
      if (!(st = s.raw_tcp.recv_all(v.in[0], req, wait, 3000)).ok) return st;
      if (!stamped(v.in[0], req, k, 0)) return Status::fail(v.res.name + ": bad request");
      stamp(v.out[0], rep, k, 1);
      return s.raw_tcp.send_all(v.out[0], rep, 3000);
    }
    auto fail = [&](const char *what, int rc) {
      return Status::fail(v.res.name + ": " + what + ": " + ds4tp_err_name(rc) + ": " +
                          ds4tp_errmsg(v.pair));
    };
    int rc;
    if (s.rank == 0) {
      if (mtp) {
        if ((rc = ds4tp_send_mtp(v.pair, 1, k, token_of(k), 1))) return fail("send_mtp", rc);
        int32_t status = -1;
        if ((rc = ds4tp_wait_ack(v.pair, 1, &status))) return fail("wait_ack", rc);
        if (status != DS4TP_ACK_DONE) return Status::fail(v.res.name + ": ack status " +
                                                          std::to_string(status));
        return {};
      }
      if ((rc = ds4tp_send_eval(v.pair, 1, k, token_of(k), 1))) return fail("send_eval", rc);
      float f = -1;
      if ((rc = ds4tp_recv_logits(v.pair, &f, 1))) return fail("recv_logits", rc);
      if (f != logit_of(k)) return Status::fail(v.res.name + ": wrong logits value");
      return {};
    }
    if ((rc = ds4tp_recv_command(v.pair, &v.cmd, 3000))) return fail("recv_command", rc);
    const int want = mtp ? DS4TP_CMD_MTP : DS4TP_CMD_EVAL;
    if (v.cmd.kind != want || v.cmd.seq != k || v.cmd.token != token_of(k))
      return Status::fail(v.res.name + ": received " + ds4tp_command_name(v.cmd.kind) +
                          " seq " + std::to_string(v.cmd.seq) + ", expected " +
                          ds4tp_command_name(want) + " seq " + std::to_string(k));
    if (mtp) {
      if ((rc = ds4tp_send_ack(v.pair, DS4TP_ACK_DONE))) return fail("send_ack", rc);
      return {};
    }
    float f = logit_of(k);
    if ((rc = ds4tp_send_logits(v.pair, &f, 1))) return fail("send_logits", rc);
    return {};
  }

  Status check(const Variant &v, uint32_t slot, uint64_t tag) const {
    if (stamped(v.in[slot], v.xfer, tag, peer)) return {};
    uint64_t got;
    std::memcpy(&got, v.in[slot], 8);
    return Status::fail(v.res.name + ": payload check failed at exchange " +
                        std::to_string(tag) + " slot " + std::to_string(slot) +
                        ": expected stamp " + std::to_string(stamp_value(tag, peer)) +
                        ", found " + std::to_string(got));
  }

  // `count` samples of variant v; recorded when `record`.
  Status block(Variant &v, int count, bool record) {
    for (int i = 0; i < count; i++) {
      uint64_t k = ++v.k;
      uint64_t t0, t1;
      if (c.section == Section::Token) {
        // One token: every gate of every layer in schedule order. Stamps
        // and checks stay inside the timing for library and raw alike
        // (an engine writes and reads these vectors too).
        t0 = now_ns();
        for (uint32_t g = 0; g < gates; g++) {
          uint64_t tag = (k - 1) * gates + g + 1;
          stamp(v.out[g], v.xfer, tag, s.rank);
          Status st = exchange(v, g, tag);
          if (!st.ok) return st;
          if (!(st = check(v, g, tag)).ok) return st;
        }
        t1 = now_ns();
      } else if (c.section == Section::Control) {
        t0 = now_ns();
        Status st = control_round(v, k);
        t1 = now_ns();
        if (!st.ok) return st;
      } else {
        uint32_t slot = uint32_t((k - 1) % slots);
        stamp(v.out[slot], v.xfer, k, s.rank);
        t0 = now_ns();
        Status st = exchange(v, slot, k);
        t1 = now_ns();
        if (!st.ok) return st;
        if (!(st = check(v, slot, k)).ok) return st;
      }
      if (record) v.res.ns.push_back(t1 - t0);
    }
    return {};
  }
};

}  // namespace

Status run_case(Session &s, const Case &c, CaseResult &out) {
  out = CaseResult{};
  out.c = c;
  Runner run(s, c);
  std::vector<std::unique_ptr<Variant>> lib, raw;

  std::vector<std::string> modes = {""};
  if (c.section == Section::Big && c.transport == DS4TP_TRANSPORT_TCP && !c.big_modes.empty())
    modes = c.big_modes;
  for (int spin : c.policies)
    for (const std::string &mode : modes) {
      auto v = std::make_unique<Variant>();
      std::string why;
      Status st = run.open_lib(spin, mode, *v, why);
      if (!st.ok) return st;
      if (!why.empty()) {
        // The first policy failing means the transport itself is out; a
        // later one failing alone is unexpected but reported the same way.
        out.unavailable = lib.empty();
        out.why = why;
        if (lib.empty()) return {};
        continue;
      }
      lib.push_back(std::move(v));
    }

  uint64_t xfer = lib.empty() ? c.bytes : lib[0]->xfer;
  if (c.transport == DS4TP_TRANSPORT_TCP && s.raw_tcp.valid()) {
    raw.push_back(std::make_unique<Variant>());
    run.open_raw(Variant::Kind::TcpBlock, "raw block", xfer, *raw.back());
    raw.push_back(std::make_unique<Variant>());
    run.open_raw(Variant::Kind::TcpBusy, "raw busy", xfer, *raw.back());
    if (c.section == Section::Big) {
      raw.push_back(std::make_unique<Variant>());
      run.open_raw(Variant::Kind::TcpAlternate, "raw alternate", xfer, *raw.back());
    }
  } else if (c.transport == DS4TP_TRANSPORT_SHM && s.raw_shm.valid()) {
    raw.push_back(std::make_unique<Variant>());
    run.open_raw(Variant::Kind::ShmCopy, "raw copy2", xfer, *raw.back());
  }

  // A B A B: library and raw variants alternate; the starting point
  // rotates each round so no variant always runs right after another.
  std::vector<Variant *> order;
  for (size_t i = 0; i < lib.size() || i < raw.size(); i++) {
    if (i < lib.size()) order.push_back(lib[i].get());
    if (i < raw.size()) order.push_back(raw[i].get());
  }
  for (Variant *v : order) v->res.ns.reserve(size_t(c.rounds) * size_t(c.iters));

  for (int round = 0; round <= c.rounds; round++) {
    for (size_t j = 0; j < order.size(); j++) {
      Variant &v = *order[(j + size_t(round)) % order.size()];
      Status st = round == 0 ? run.block(v, c.warm_first, false)
                             : run.block(v, c.warm, false);
      if (st.ok && round > 0) st = run.block(v, c.iters, true);
      if (!st.ok) return st;
    }
  }
  // Orderly end: the control lockstep ends with STOP, and neither rank
  // closes a pair before both are done with it (a close the peer sees
  // while it still reads a reply would fail that read).
  if (c.section == Section::Control) {
    for (auto &v : lib) {
      int rc = s.rank == 0 ? ds4tp_send_stop(v->pair) : ds4tp_recv_command(v->pair, &v->cmd, 3000);
      if (rc != DS4TP_OK)
        return Status::fail(v->res.name + ": ending the lockstep: " + ds4tp_err_name(rc) + ": " +
                            ds4tp_errmsg(v->pair));
      if (s.rank == 1 && v->cmd.kind != DS4TP_CMD_STOP)
        return Status::fail(v->res.name + ": expected STOP, received " +
                            ds4tp_command_name(v->cmd.kind));
    }
  }
  Msg end, theirs;
  end.verb = "END";
  Status st = s.coord.send(end);
  if (st.ok) st = s.coord.recv(theirs, 60000, "END");
  if (!st.ok) return st;
  for (Variant *v : order) out.variants.push_back(std::move(v->res));
  return {};
}

}  // namespace bench
