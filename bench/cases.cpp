#include "cases.hpp"

#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>

#include "ds4tp/ds4tp.h"
#include "group/reduce.hpp"
#include "group/wire.hpp"
#include "group_variant.hpp"
#include "variant_thread.hpp"
#include "wire/frames.hpp"
#include "wire/gate_header.hpp"

namespace bench {

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
  enum class Kind { Lib, Group, TcpBlock, TcpBusy, TcpBusySum, TcpAlternate, ShmCopy } kind =
      Kind::Lib;
  ds4tp_pair *pair = nullptr;   // Lib: owned
  ds4tp_group *group = nullptr;  // Group: owned
  uint64_t gate_seq = 0;        // Lib: last row gate seq
  uint64_t k = 0;               // exchanges done (tokens for the token loop)
  std::vector<uint8_t *> out, in;  // per slot
  std::vector<uint8_t> raw_mem;    // raw variants: private out/in vectors
  uint64_t xfer = 0;            // bytes per exchange each way
  uint64_t frame = 0;           // TcpBusy(Sum): bytes sent in front of the vector (a header's room)
  ds4tp_command cmd;            // Lib, control section, worker side

  Variant() { ds4tp_command_init(&cmd); }
  Variant(const Variant &) = delete;
  ~Variant() {
    ds4tp_command_free(&cmd);
    ds4tp_free(pair);
    ds4tp_group_free(group);
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
      case Section::Group: slots = 1; break;     // the group's buffer
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
      if (rc != DS4TP_OK) mine = std::string("ds4tp_new: ") + ds4tp_last_error();
      if (!(st = offer_port(s, "LIB", mine, rc == DS4TP_OK ? ds4tp_listen_port(v.pair) : 0)).ok)
        return st;
      if (rc == DS4TP_OK && (rc = ds4tp_connect(v.pair)) != DS4TP_OK)
        mine = std::string(ds4tp_err_name(rc)) + ": " + ds4tp_errmsg(v.pair);
    } else {
      int port = 0;
      if (!(st = take_port(s, "LIB", "pair", port, mine)).ok) return st;
      if (mine.empty()) {
        o.leader_host = s.lib_host.c_str();
        o.leader_port = port;
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
    if (!(st = agree_open(s, mine, unavailable)).ok || !unavailable.empty()) return st;
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
        case Section::Group:
          break;  // frames live in the library; groups open in open_group_lib
      }
    }
    return {};
  }

  // One 2-rank group per policy; its vector is the group's own buffer.
  Status open_group_lib(int spin_us, Variant &v, std::string &unavailable) {
    Status st = open_group(s, c.transport, spin_us, &v.group, unavailable);
    if (!st.ok || !unavailable.empty()) return st;
    void *buf = nullptr;
    uint64_t cap = 0;
    if (ds4tp_group_buffer(v.group, &buf, &cap) != DS4TP_OK || cap < c.bytes)
      return Status::fail("the group buffer holds " + std::to_string(cap) + " bytes, fewer than " +
                          bytes_label(c.bytes));
    v.kind = Variant::Kind::Group;
    v.res.lib = true;
    v.res.spin_us = spin_us;
    v.res.name = spin_us == DS4TP_SPIN_ADAPTIVE ? std::string("lib default")
                                                : "lib spin_us=" + std::to_string(spin_us);
    v.out = v.in = {static_cast<uint8_t *>(buf)};
    v.xfer = c.bytes;
    return {};
  }

  // A raw variant lays its private buffers out like the slab (one vector
  // per slot, page-rounded strides), so both touch the same amount of
  // memory. Row and group vectors start 64 bytes into their pages: room
  // for a framed reference's header, and the unframed ones sit at the same
  // cache-line-aligned offset so the variants differ only in what they send.
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
    // Row and group vectors keep 64 bytes of room in front, for the framed references.
    const uint64_t front = c.section == Section::Group || c.section == Section::Row ? 64 : 0;
    uint64_t stride = (front + xfer + 4095) & ~uint64_t(4095);
    v.raw_mem.assign(size_t(stride) * 2 * slots + 4096, 0);
    auto *p = reinterpret_cast<uint8_t *>(
        (reinterpret_cast<uintptr_t>(v.raw_mem.data()) + 4095) & ~uintptr_t(4095));
    for (uint32_t i = 0; i < slots; i++) {
      v.out.push_back(p + stride * i + front);
      v.in.push_back(p + stride * (slots + i) + front);
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
          case Section::Group:
            return Status::fail("control rounds and groups have their own calls");
        }
        if (rc == DS4TP_OK) return {};
        return Status::fail(v.res.name + ": " + ds4tp_err_name(rc) + ": " +
                            ds4tp_errmsg(v.pair));
      }
      case Variant::Kind::Group: {
        int rc = ds4tp_group_all_reduce(v.group, v.out[0], v.xfer / 4, DS4TP_DTYPE_F32,
                                        DS4TP_OP_SUM);
        if (rc == DS4TP_OK) return {};
        return Status::fail(v.res.name + ": all_reduce: " + ds4tp_err_name(rc) + ": " +
                            ds4tp_group_errmsg(v.group));
      }
      case Variant::Kind::TcpBusySum: {  // the exchange (framed or not), then the library's sum
        Status st = s.raw_tcp.exchange(v.out[slot] - v.frame, v.in[slot] - v.frame,
                                       v.frame + v.xfer, RawTcp::Wait::Busy, 3000);
        if (!st.ok) return st;
        const void *src[2] = {s.rank == 0 ? v.out[slot] : v.in[slot],
                              s.rank == 0 ? v.in[slot] : v.out[slot]};
        ds4tp::group::reduce_sum(ds4tp::group::Dtype::F32, src, 2, v.out[slot], v.xfer / 4);
        return {};
      }
      case Variant::Kind::TcpBlock:
        return s.raw_tcp.exchange(v.out[slot], v.in[slot], v.xfer, RawTcp::Wait::Block, 3000);
      case Variant::Kind::TcpBusy:  // framed: the header room's bytes go too
        return s.raw_tcp.exchange(v.out[slot] - v.frame, v.in[slot] - v.frame, v.frame + v.xfer,
                                  RawTcp::Wait::Busy, 3000);
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

  // Group section: the sum (library, raw busy+sum) or the peer's vector.
  Status check_group(const Variant &v, uint64_t k) const {
    const bool summed = v.kind == Variant::Kind::Group || v.kind == Variant::Kind::TcpBusySum;
    const uint64_t i = group_mismatch(summed ? v.out[0] : v.in[0], v.xfer, k, summed ? -1 : peer);
    if (i == v.xfer / 4) return {};
    return Status::fail(v.res.name + ": element " + std::to_string(i) + " of exchange " +
                        std::to_string(k) + " is not " +
                        (summed ? "the two ranks' sum" : "the peer's value"));
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
      } else if (c.section == Section::Group) {
        fill_group(v.out[0], v.xfer, k, s.rank);
        t0 = now_ns();
        Status st = exchange(v, 0, k);
        t1 = now_ns();
        if (!st.ok || !(st = check_group(v, k)).ok) return st;
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
      Status st = c.section == Section::Group ? run.open_group_lib(spin, *v, why)
                                              : run.open_lib(spin, mode, *v, why);
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
    if (c.section == Section::Row) {
      // A reference, not a baseline: the same exchange with the gate
      // header's bytes in front, which is what the library sends.
      static_assert(ds4tp::wire::kGateHeaderBytes == 32, "the reference's name says +32 B");
      raw.push_back(std::make_unique<Variant>());
      run.open_raw(Variant::Kind::TcpBusy, "raw busy+32 B", xfer, *raw.back());
      raw.back()->frame = ds4tp::wire::kGateHeaderBytes;
      raw.back()->res.reference = true;
    }
    if (c.section == Section::Group) {
      // References, not baselines: what an all-reduce cannot skip (the
      // sum), then also the library's step header's bytes on the wire.
      static_assert(ds4tp::group::kStepHeaderBytes == 24, "the reference's name says +24 B");
      for (uint64_t frame : {uint64_t(0), uint64_t(ds4tp::group::kStepHeaderBytes)}) {
        raw.push_back(std::make_unique<Variant>());
        run.open_raw(Variant::Kind::TcpBusySum, frame ? "raw busy+24 B+sum" : "raw busy+sum",
                     xfer, *raw.back());
        raw.back()->frame = frame;
        raw.back()->res.reference = true;
      }
    }
  } else if (c.transport == DS4TP_TRANSPORT_SHM && s.raw_shm.valid()) {
    raw.push_back(std::make_unique<Variant>());
    run.open_raw(Variant::Kind::ShmCopy, "raw copy2", xfer, *raw.back());
  }

  // A B A B: library and raw variants alternate in the warm-up round;
  // each recorded round then runs them in its own shuffled order (the same
  // on every run), so no variant always runs right after another. A
  // rotation kept each one's predecessor: the default policy always ran
  // right after raw block, whose sleeping ranks left it 0.1 us slower.
  std::vector<Variant *> order;
  for (size_t i = 0; i < lib.size() || i < raw.size(); i++) {
    if (i < lib.size()) order.push_back(lib[i].get());
    if (i < raw.size()) order.push_back(raw[i].get());
  }
  for (Variant *v : order) v->res.ns.reserve(size_t(c.rounds) * size_t(c.iters));

  // Each variant sends from its own thread (variant_thread.hpp says why).
  std::vector<std::unique_ptr<VariantThread>> threads;
  for (size_t j = 0; j < order.size(); j++) threads.push_back(std::make_unique<VariantThread>());
  // Both ranks shuffle alike, so they run the same block at the same time:
  // Fisher-Yates on mt19937's raw output (fixed by the standard, unlike
  // std::shuffle's), so two hosts' builds agree too.
  std::vector<size_t> turn(order.size());
  std::mt19937 shuffler(20);
  for (int round = 0; round <= c.rounds; round++) {
    std::iota(turn.begin(), turn.end(), size_t(0));
    for (size_t k = turn.size(); round > 0 && k > 1; k--)
      std::swap(turn[k - 1], turn[shuffler() % k]);
    for (size_t j = 0; j < order.size(); j++) {
      const size_t at = turn[j];
      Variant &v = *order[at];
      Status st;
      threads[at]->run([&] {
        st = round == 0 ? run.block(v, c.warm_first, false) : run.block(v, c.warm, false);
        if (st.ok && round > 0) st = run.block(v, c.iters, true);
      });
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
