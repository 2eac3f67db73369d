// The pair mode of ds4tp_soak (main.cpp has the overview): each cycle the
// supervisor takes the leader's or the worker's role at random and starts
// the other side as a child (pair-child), both run the same seeded traffic
// of gates, commands and exchanges, one fault goes into the child, and the
// cycle is judged and sampled.
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cinttypes>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "soak.hpp"

namespace soak {

// ---- pair traffic -------------------------------------------------------

// The cycle's identity: 4 layers of 16 KiB row vectors, the default
// schedule (every slot in order).
ds4tp_identity pair_identity() {
  ds4tp_identity id;
  ds4tp_identity_init(&id);
  id.model_id = 0x50a4;
  id.n_layer = 4;
  id.n_embd = 4096;
  id.n_vocab = 32000;
  id.quant_bits = 32;
  return id;
}

namespace {

// One rank's side of a pair cycle's mixed traffic. Both ranks derive the
// same sequence of calls from the cycle's seed, so they stay in lockstep
// without talking about it.
class PairTraffic {
 public:
  PairTraffic(ds4tp_pair *tp, uint64_t seed) : tp_(tp), seed_(seed), id_(pair_identity()) {
    rank_ = ds4tp_rank(tp);
    layout_.size = sizeof layout_;
    ds4tp_slab_layout_get(tp, &layout_);
    slab_ = static_cast<uint8_t *>(ds4tp_slab_base(tp));
    ds4tp_command_init(&cmd_);
  }
  ~PairTraffic() { ds4tp_command_free(&cmd_); }

  // The session the EVAL, SYNC and HASH frames name.
  int open(std::string &why) {
    if (rank_ == 0) {
      int32_t st = 0;
      int rc = ds4tp_send_session_create(tp_, 1, 4096);
      if (rc == 0) rc = ds4tp_wait_ack(tp_, 1, &st);
      return rc ? fail(rc, "session create") : st ? bad(why, "session create ack status") : 0;
    }
    int rc = recv(DS4TP_CMD_SESSION_CREATE, why);
    if (rc == 0) rc = ds4tp_send_ack(tp_, 0);
    return rc ? fail(rc, "session create") : 0;
  }

  // The leader's STOP; the worker must read it as the next command.
  int close(std::string &why) {
    if (rank_ == 0) return ds4tp_send_stop(tp_) ? fail(-1, "stop") : 0;
    int rc = recv(DS4TP_CMD_STOP, why);
    return rc ? fail(rc, "stop") : 0;
  }

  // Call i of the cycle: 0, a DS4TP_E* status or kWrongBits (why says).
  int step(uint64_t i, std::string &why) {
    const uint64_t r = mix(seed_ ^ (i + 1) * 0xd1b54a32d192ed03ull);
    const int k = int(r % 100);
    if (k < 55) return row(why);
    if (k < 70) return batch(r, why);
    if (k < 75) return big(r, why);
    if (k < 83) return small(r, why);
    if (k < 91) return eval(r, why);
    if (k < 95) return sync(r, why);
    return hash(why);
  }

  const char *last_call() const { return call_; }

 private:
  int fail(int rc, const char *what) {
    call_ = what;
    return rc < 0 ? rc : DS4TP_EFAILED;
  }
  int bad(std::string &why, const std::string &what) {
    why = what;
    return kWrongBits;
  }
  int recv(int kind, std::string &why) {
    int rc = ds4tp_recv_command(tp_, &cmd_, kArrivalMs);
    if (rc) return rc;
    if (cmd_.kind != kind) {
      why = std::string("worker read ") + ds4tp_command_name(cmd_.kind) + ", expected " +
            ds4tp_command_name(kind);
      return kWrongBits;
    }
    return 0;
  }

  int row(std::string &why) {
    call_ = "row gate";
    const uint64_t seq = ++row_seq_;
    const int64_t slot = ds4tp_schedule_slot(&id_, seq);
    const uint32_t layer = uint32_t(slot / 2), gate = uint32_t(slot % 2);
    fill_words(slab_ + ds4tp_slab_out_offset(tp_, layer, gate), layout_.vec_bytes,
               word_base(seed_, rank_, seq));
    if (int rc = ds4tp_gate_exchange(tp_, layer, gate, seq)) return rc;
    if (!check_words(slab_ + ds4tp_slab_in_offset(tp_, layer, gate), layout_.vec_bytes,
                     word_base(seed_, 1 - rank_, seq)))
      return bad(why, "row gate seq " + std::to_string(seq) + ": payload differs");
    return 0;
  }

  int batch(uint64_t r, std::string &why) {
    call_ = "batch gate";
    const uint64_t seq = ++batch_seq_;
    const uint32_t index = uint32_t((r >> 8) % layout_.batch_gates);
    const uint32_t rows = 1 + uint32_t((r >> 16) % DS4TP_BATCH_MAX_ROWS);
    const uint64_t out = ds4tp_slab_batch_out_offset(tp_, index);
    const uint64_t in = ds4tp_slab_batch_in_offset(tp_, index);
    for (uint32_t row = 0; row < rows; row++)
      fill_words(slab_ + out + row * layout_.vec_stride, layout_.vec_bytes,
                 word_base(seed_, rank_, (1ull << 40) + seq * 8 + row));
    if (int rc = ds4tp_batch_gate_exchange(tp_, index, rows, seq)) return rc;
    for (uint32_t row = 0; row < rows; row++)
      if (!check_words(slab_ + in + row * layout_.vec_stride, layout_.vec_bytes,
                       word_base(seed_, 1 - rank_, (1ull << 40) + seq * 8 + row)))
        return bad(why, "batch gate seq " + std::to_string(seq) + " row " +
                            std::to_string(row) + ": payload differs");
    return 0;
  }

  int big(uint64_t r, std::string &why) {
    call_ = "big gate";
    const uint64_t seq = ++big_seq_;
    const uint64_t bytes = 4096 * (1 + (r >> 8) % 256) - (r >> 20) % 4;  // up to 1 MiB, odd sizes
    const uint32_t layer = uint32_t((r >> 32) % id_.n_layer);
    uint8_t *out = bufs().a.data(), *in = bufs().b.data();
    fill_words(out, bytes, word_base(seed_, rank_, (2ull << 40) + seq));
    if (int rc = ds4tp_big_gate_exchange(tp_, layer, seq, out, in, bytes)) return rc;
    if (!check_words(in, bytes, word_base(seed_, 1 - rank_, (2ull << 40) + seq)))
      return bad(why, "big gate seq " + std::to_string(seq) + " (" + std::to_string(bytes) +
                          " bytes): payload differs");
    return 0;
  }

  int small(uint64_t r, std::string &why) {
    call_ = "small exchange";
    const uint64_t seq = ++small_seq_;
    const uint32_t bytes = 1 + uint32_t((r >> 8) % DS4TP_SMALL_EXCHANGE_MAX);
    uint8_t mine[DS4TP_SMALL_EXCHANGE_MAX], peer[DS4TP_SMALL_EXCHANGE_MAX];
    fill_words(mine, bytes, word_base(seed_, rank_, (3ull << 40) + seq));
    if (int rc = ds4tp_small_exchange(tp_, mine, peer, bytes)) return rc;
    if (!check_words(peer, bytes, word_base(seed_, 1 - rank_, (3ull << 40) + seq)))
      return bad(why, "small exchange " + std::to_string(seq) + ": payload differs");
    return 0;
  }

  // EVAL with a logits half back from the worker.
  int eval(uint64_t r, std::string &why) {
    call_ = "EVAL + logits";
    const uint64_t seq = ++eval_seq_;
    const uint32_t floats = 16 + uint32_t((r >> 8) % 2048);
    const int32_t token = int32_t((r >> 24) % 32000);
    float *logits = bufs().logits.data();
    const uint32_t base = word_base(seed_, 1, (4ull << 40) + seq);
    if (rank_ == 0) {
      if (int rc = ds4tp_send_eval(tp_, 1, seq, token, floats)) return rc;
      if (int rc = ds4tp_recv_logits(tp_, logits, floats)) return rc;
      if (!check_words(logits, uint64_t(floats) * 4, base))
        return bad(why, "logits of EVAL " + std::to_string(seq) + " differ");
      return 0;
    }
    if (int rc = recv(DS4TP_CMD_EVAL, why)) return rc;
    if (cmd_.seq != seq || cmd_.token != token || cmd_.logits_floats != floats)
      return bad(why, "EVAL " + std::to_string(seq) + " arrived with other fields");
    fill_words(logits, uint64_t(floats) * 4, base);
    return ds4tp_send_logits(tp_, logits, floats);
  }

  int sync(uint64_t r, std::string &why) {
    call_ = "SYNC";
    const uint32_t n = uint32_t((r >> 8) % 64);
    int32_t *tokens = bufs().tokens.data();
    for (uint32_t t = 0; t < n; t++) tokens[t] = int32_t(mix(r + t) % 32000);
    if (rank_ == 0) {
      int32_t st = 0;
      uint32_t pos = 0;
      if (int rc = ds4tp_send_sync(tp_, 1, tokens, n, 0)) return rc;
      if (int rc = ds4tp_wait_sync(tp_, 1, &st, &pos)) return rc;
      return st == 0 && pos == n ? 0 : bad(why, "SYNC ack with another status or position");
    }
    if (int rc = recv(DS4TP_CMD_SYNC, why)) return rc;
    if (cmd_.n_tokens != n || (n && std::memcmp(cmd_.tokens, tokens, n * 4) != 0))
      return bad(why, "SYNC of " + std::to_string(n) + " tokens arrived with other tokens");
    return ds4tp_send_sync_ack(tp_, 0, n);
  }

  int hash(std::string &why) {
    call_ = "HASH";
    const uint64_t seq = ++hash_seq_, h = mix(seed_ ^ seq);
    if (rank_ == 1) {
      if (int rc = recv(DS4TP_CMD_HASH, why)) return rc;
      if (cmd_.seq != seq || cmd_.hash != h) return bad(why, "HASH arrived with other fields");
    }
    return ds4tp_hash_check(tp_, 1, seq, h);
  }

  ds4tp_pair *tp_;
  uint64_t seed_;
  ds4tp_identity id_;
  int rank_ = 0;
  ds4tp_slab_layout layout_{};
  uint8_t *slab_ = nullptr;
  ds4tp_command cmd_;
  uint64_t row_seq_ = 0, batch_seq_ = 0, big_seq_ = 0, small_seq_ = 0, eval_seq_ = 0,
           hash_seq_ = 0;
  const char *call_ = "bring-up";
};

void quiet_log(void *, int level, const char *msg) {
  if (level <= DS4TP_LOG_WARN) emit(2, "ds4tp[%d]: %s", int(getpid()), msg);
}

ds4tp_options pair_options(int role, int transport, int port) {
  ds4tp_options o;
  ds4tp_options_init(&o);
  o.role = role;
  o.transport = transport;
  o.listen_host = "127.0.0.1";
  o.leader_host = "127.0.0.1";
  o.listen_port = role == DS4TP_ROLE_LEADER ? 0 : -1;
  o.leader_port = port;
  o.connect_timeout_ms = kConnectMs;
  o.peer_silence_ms = kSilenceMs;
  o.peer_arrival_timeout_ms = kArrivalMs;
  o.log_fn = quiet_log;
  o.log_level = DS4TP_LOG_WARN;
  return o;
}


// Connect (tp is new), run the plan's calls, close. ops < 0: until a call
// fails or `overdue` (may be empty) says the fault went unnoticed;
// exit_after >= 0: free and return after that many calls (the "clean exit"
// fault, run by the child).
void pair_side(ds4tp_pair *tp, uint64_t seed, long ops, long exit_after, Side &s,
               const std::function<void()> &connected, const std::function<bool()> &overdue) {
  std::string why;
  int rc = ds4tp_connect(tp);
  if (rc == 0) rc = ds4tp_attach_slab(tp, nullptr, 0);
  if (rc) {
    s.rc = rc, s.t_err = now_ns(), s.where = "bring-up", s.msg = one_line(ds4tp_errmsg(tp));
    return;
  }
  if (connected) connected();
  PairTraffic t(tp, seed);
  rc = t.open(why);
  for (long i = 0; rc == 0 && (ops < 0 || i < ops); i++) {
    if (exit_after >= 0 && i == exit_after) return;
    if (overdue && overdue()) {
      s.rc = kUnnoticed, s.t_err = now_ns(), s.where = "traffic", s.msg = "no call failed";
      return;
    }
    rc = t.step(uint64_t(i), why);
    if (rc == 0) s.ops++;
  }
  if (rc == 0) rc = t.close(why);
  if (rc) {
    s.rc = rc, s.t_err = now_ns(), s.where = t.last_call();
    s.msg = rc == kWrongBits ? why : one_line(ds4tp_errmsg(tp));
  }
}

}  // namespace

// ---- pair: child and supervisor ---------------------------------------------

int pair_child(const Args &a) {
  ds4tp_options o = pair_options(a.role, a.transport, a.port);
  ds4tp_identity id = pair_identity();
  ds4tp_pair *tp = nullptr;
  if (ds4tp_new(&tp, &o, &id) != 0) {
    emit(2, "soak child %d: ds4tp_new: %s", int(getpid()), ds4tp_last_error());
    return kExitSetup;
  }
  if (a.port_fd >= 0) {
    int port = ds4tp_listen_port(tp);
    (void)!write(a.port_fd, &port, sizeof port);
    ::close(a.port_fd);
  }
  Side s;
  pair_side(tp, a.seed, a.ops, a.exit_after, s, nullptr, nullptr);
  ds4tp_free(tp);
  if (s.rc == 0) return kExitOk;
  emit(2, "soak child %d (%s): %s at %s: %s", int(getpid()), a.tag.c_str(), code_name(s.rc),
       s.where.c_str(), s.msg.c_str());
  return named_code(s.rc) ? kExitNamed : kExitUnexpected;
}

int pair_supervisor(const Args &a) {
  std::mt19937_64 rng(a.seed);
  const std::string tr = ds4tp_transport_name(a.transport);
  const uint64_t t0 = now_ns(), t_end = t0 + uint64_t(a.seconds * 1e9);
  long failures = 0, n = 0;
  emit(1, "start tag=%s pid=%d seed=%" PRIu64 " transport=%s", a.tag.c_str(), int(getpid()), a.seed,
       tr.c_str());
  while (now_ns() < t_end) {
    n++;
    g_dog.cycle = n;
    g_dog.set("pair cycle");
    const bool lead = rng() & 1;
    const Fault f = pick_fault(rng);
    const uint64_t seed = rng();
    const long ops = f == Fault::None ? long(50 + rng() % 350) : -1;
    const long exit_after = f == Fault::Exit ? long(rng() % 300) : -1;
    const int delay = f == Fault::BringupKill ? int(rng() % 8) : int(rng() % 300);
    const int stop_ms = kSilenceMs + 500 + int(rng() % 1000);

    Verdict v;
    Side s;
    Injector inj;
    pid_t child = -1;
    ds4tp_pair *tp = nullptr;
    ds4tp_identity id = pair_identity();
    std::vector<std::string> args = {"pair-child", "--transport", tr, "--tag", a.tag, "--seed",
                                     std::to_string(seed), "--ops", std::to_string(ops),
                                     "--exit-after", std::to_string(exit_after)};
    if (lead) {
      ds4tp_options o = pair_options(DS4TP_ROLE_LEADER, a.transport, 0);
      if (ds4tp_new(&tp, &o, &id) != 0) {
        v.no(std::string("ds4tp_new: ") + one_line(ds4tp_last_error()));
      } else {
        args.insert(args.end(), {"--role", "worker", "--port",
                                 std::to_string(ds4tp_listen_port(tp))});
        child = spawn(args);
      }
    } else {
      int p[2];
      if (pipe2(p, O_CLOEXEC) != 0) {
        v.no("pipe");
      } else {
        args.insert(args.end(), {"--role", "leader", "--port-fd", std::to_string(p[1])});
        child = spawn(args, p[1]);
        ::close(p[1]);
        int port = -1;
        pollfd pf{p[0], POLLIN, 0};
        if (poll(&pf, 1, 10000) != 1 || read(p[0], &port, sizeof port) != sizeof port)
          v.no("the child leader never said its port");
        ::close(p[0]);
        ds4tp_options o = pair_options(DS4TP_ROLE_WORKER, a.transport, port);
        if (v.ok && ds4tp_new(&tp, &o, &id) != 0)
          v.no(std::string("ds4tp_new: ") + one_line(ds4tp_last_error()));
      }
    }
    if (v.ok) {
      g_dog.set(lead ? "pair: leader side" : "pair: worker side");
      if (f == Fault::BringupKill) inj.start(f, child, delay, 0);
      pair_side(
          tp, seed, ops, -1, s,
          [&] {
            if (f == Fault::Kill || f == Fault::Stop) inj.start(f, child, delay, stop_ms);
          },
          [&] { return past_bound(f, inj.fired_ns(), stop_ms); });
    }
    g_dog.set("pair: free");
    ds4tp_free(tp);
    g_dog.set("pair: reaping the child");
    inj.join();
    int st = -1;
    std::string how = child > 0 ? reap(child, kChildExitMs, &st) : "none";
    double ms = -1;
    if (v.ok) {
      judge_survivor(lead ? "leader" : "worker", f, s, inj.fired_ns(), v, ms);
      judge_victim(f, st, how, v);
    }
    if (!v.ok) failures++;
    const char *outcome = !v.ok ? "fail" : f == Fault::None ? "ok" : "named";
    emit(1, "cycle tag=%s n=%ld role=%s fault=%s outcome=%s code=%s ms=%.1f ops=%ld child=%s "
            "pids=%d msg=\"%s%s%s\"",
         a.tag.c_str(), n, lead ? "leader" : "worker", fault_name(f), outcome, code_name(s.rc),
         ms, s.ops, how.c_str(), int(child), v.ok ? "" : v.why.c_str(), v.ok ? "" : ": ",
         s.where.empty() ? "" : (s.where + ": " + s.msg).c_str());
    if (!v.ok)
      emit(1, "fail tag=%s n=%ld what=\"%s\"", a.tag.c_str(), n, v.why.c_str());
    g_dog.set("pair: between cycles");
    print_sample(a.tag.c_str(), a.tag.c_str(), n, t0);
    g_dog.since = 0;
    usleep(useconds_t(20000 + rng() % 180000));
  }
  emit(1, "end tag=%s cycles=%ld failures=%ld", a.tag.c_str(), n, failures);
  return failures ? 1 : 0;
}

}  // namespace soak
