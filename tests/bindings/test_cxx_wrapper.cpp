// include/ds4tp/ds4tp.hpp, the header-only C++ wrapper, against the C
// counterpart tests/bindings/ds4tp_peer (a child process): the data-plane
// script (row, batch and big gates driven by call, callback, staging hooks
// or the gate service) and the control-plane script (every command, both
// worker styles), with every payload checked on both sides.
#include <catch2/catch.hpp>

#include <array>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ds4tp/ds4tp.hpp"

extern char **environ;

namespace {

using Clock = std::chrono::steady_clock;

// ---- the C peer as a child process ----------------------------------------

class Peer {
 public:
  explicit Peer(std::vector<std::string> args) {
    args.insert(args.begin(), DS4TP_PEER_PATH);
    int fds[2];
    REQUIRE(pipe2(fds, O_CLOEXEC) == 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    std::vector<char *> argv;
    for (auto &a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int rc = posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    out_fd_ = fds[0];
    REQUIRE(rc == 0);
  }
  ~Peer() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_fd_ >= 0) close(out_fd_);
  }

  // A leader's first line, "port P" (within 30 s).
  int read_port() {
    while (out_.find('\n') == std::string::npos)
      if (!read_some(30000)) break;
    REQUIRE(out_.rfind("port ", 0) == 0);
    return std::stoi(out_.substr(5));
  }

  // Waits up to 90 s (then kills); true when the peer exited 0. out() holds stdout.
  bool finish() {
    auto deadline = Clock::now() + std::chrono::seconds(90);
    while (read_some(100)) {
      if (Clock::now() > deadline) break;
    }
    int status = 0;
    for (;;) {
      pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) break;
      if (Clock::now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        pid_ = -1;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    pid_ = -1;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  const std::string &out() const { return out_; }

 private:
  // Reads what is there within timeout_ms; false at end of stream.
  bool read_some(int timeout_ms) {
    pollfd p{out_fd_, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return true;
    char buf[4096];
    ssize_t n = read(out_fd_, buf, sizeof buf);
    if (n <= 0) return false;
    out_.append(buf, size_t(n));
    return true;
  }

  pid_t pid_ = -1;
  int out_fd_ = -1;
  std::string out_;
};

ds4tp::Identity peer_identity(uint32_t n_layer, uint32_t n_embd) {
  ds4tp::Identity id;
  id.model_bytes = 0xB1D;
  id.model_id = 7;
  id.n_layer = n_layer;
  id.n_embd = n_embd;
  id.n_vocab = 1000;
  id.quant_bits = 32;
  id.ctx_size = 512;
  return id;
}

ds4tp::Options quiet(ds4tp::Options o) {
  o.connect_timeout_ms = 30000;
  o.gate_timeout_ms = 5000;
  o.frame_timeout_ms = 20000;
  o.log_level = DS4TP_LOG_WARN;
  return o;
}

// ---- the data-plane script (ds4tp_peer.c, "The script") ------------------

constexpr uint64_t kBigWords = 3 * 65536 + 7;

uint32_t word(uint32_t rank, uint64_t seq, uint64_t i) {
  return rank * 0x9e3779b1u ^ uint32_t(seq) * 0x85ebca6bu ^ uint32_t(i) * 0xc2b2ae35u;
}

void fill(std::span<std::byte> dst, uint32_t rank, uint64_t seq, uint64_t first) {
  for (size_t i = 0; i < dst.size() / 4; i++) {
    uint32_t w = word(rank, seq, first + i);
    std::memcpy(dst.data() + 4 * i, &w, 4);
  }
}

bool matches(std::span<const std::byte> src, uint32_t rank, uint64_t seq, uint64_t first) {
  for (size_t i = 0; i < src.size() / 4; i++) {
    uint32_t w;
    std::memcpy(&w, src.data() + 4 * i, 4);
    if (w != word(rank, seq, first + i)) return false;
  }
  return true;
}

enum class Mode { call, callback, hooks, service };

struct PatternHooks : ds4tp::StagingHooks {
  uint32_t rank;
  uint64_t n, stride;
  int calls = 0;
  PatternHooks(uint32_t r, uint64_t n_, uint64_t s) : rank(r), n(n_), stride(s) {}
  int before_exchange(int kind, uint32_t, uint32_t b, uint64_t seq,
                      std::span<std::byte> out) override {
    calls++;
    if (kind == DS4TP_STAGE_ROW) {
      fill(out, rank, seq, 0);
    } else {
      for (uint32_t k = 0; k < b; k++) fill(out.subspan(k * stride, n * 4), rank, 1000000 + seq, k * n);
    }
    return 0;
  }
  int after_exchange(int kind, uint32_t, uint32_t b, uint64_t seq,
                     std::span<const std::byte> in) override {
    calls++;
    if (kind == DS4TP_STAGE_ROW) return matches(in, 1 - rank, seq, 0) ? 0 : 7;
    for (uint32_t k = 0; k < b; k++)
      if (!matches(in.subspan(k * stride, n * 4), 1 - rank, 1000000 + seq, k * n)) return 8;
    return 0;
  }
};

// The C++ side of the peer's script; Catch assertions on this thread only.
void play(ds4tp::Pair &tp, int tokens, Mode mode) {
  uint32_t rank = uint32_t(tp.rank()), peer = 1 - rank;
  tp.connect();
  tp.attach_slab();
  ds4tp::SlabLayout l = tp.layout();
  uint64_t n = l.vec_bytes / 4;
  PatternHooks hooks(rank, n, l.vec_stride);
  if (mode == Mode::hooks) tp.set_staging_hooks(&hooks);
  ds4tp::GateServiceOptions svc;
  svc.spin_us = 100;
  if (mode == Mode::service) {
    tp.gate_service_start(&svc);
    REQUIRE(tp.gate_service_state() == DS4TP_SERVICE_RUNNING);
  }
  uint64_t seq = 0;
  for (int t = 0; t < tokens; t++) {
    for (uint32_t slot = 0; slot < l.slots; slot++) {
      uint32_t layer = slot / 2, gate = slot % 2;
      seq++;
      if (mode != Mode::hooks) fill(std::as_writable_bytes(tp.out_vector(layer, gate)), rank, seq, 0);
      if (mode == Mode::callback) {
        REQUIRE(tp.gate_callback(layer, gate, seq));
      } else if (mode == Mode::service) {
        tp.ready_word(slot).store(seq, std::memory_order_release);
        auto deadline = Clock::now() + std::chrono::seconds(10);
        uint64_t released;
        while ((released = tp.release_word(slot).load(std::memory_order_acquire)) < seq)
          REQUIRE(Clock::now() < deadline);
        REQUIRE(released == seq);
      } else {
        tp.gate_exchange(layer, gate, seq);
      }
      if (mode != Mode::hooks)
        REQUIRE(matches(std::as_bytes(tp.in_vector(layer, gate)), peer, seq, 0));
    }
    if (mode == Mode::service) {
      REQUIRE(tp.gate_seq() == seq);
      tp.gate_service_stop();
    }
    uint32_t index = uint32_t(t) % l.batch_gates, rows = uint32_t(t) % 8 + 1;
    uint64_t bseq = uint64_t(t) + 1;
    if (mode != Mode::hooks)
      for (uint32_t k = 0; k < rows; k++)
        fill(std::as_writable_bytes(tp.batch_out_row(index, k)), rank, 1000000 + bseq, k * n);
    if (mode == Mode::callback)
      REQUIRE(tp.batch_gate_callback(index, rows, bseq));
    else
      tp.batch_gate_exchange(index, rows, bseq);
    if (mode != Mode::hooks)
      for (uint32_t k = 0; k < rows; k++)
        REQUIRE(matches(std::as_bytes(tp.batch_in_row(index, k)), peer, 1000000 + bseq, k * n));
    if (mode == Mode::service && t + 1 < tokens) tp.gate_service_start(&svc);
  }
  std::vector<uint32_t> out(kBigWords), in(kBigWords);
  for (uint64_t i = 0; i < kBigWords; i++) out[i] = word(rank, 2000000, i);
  auto ob = std::as_bytes(std::span(out));
  auto ib = std::as_writable_bytes(std::span(in));
  if (mode == Mode::callback)
    REQUIRE(tp.big_gate_callback(0, 1, ob, ib));
  else
    tp.big_gate_exchange(0, 1, ob, ib);
  REQUIRE(matches(ib, peer, 2000000, 0));
  if (mode == Mode::hooks) REQUIRE(uint64_t(hooks.calls) == 2 * (seq + uint64_t(tokens)));
  // Stats count exactly the script's gates: every row, a batch per token, one big.
  ds4tp::Stats st = tp.stats();
  REQUIRE(st.row_gates == seq);
  REQUIRE(st.batch_gates == uint64_t(tokens));
  REQUIRE(st.big_gates == 1);
  REQUIRE(tp.prometheus().find("# TYPE ds4tp_gates_total counter\n") != std::string::npos);
}

// ---- the control-plane script (ds4tp_peer.c, control_leader / worker_handle)

constexpr uint64_t SID = 42, SID2 = 43, BAD_SID = 999, GOOD_HASH = 0xABCDEF;
constexpr uint32_t LF = 16, HEAD_FLOATS = 32, N_LAYER = 2, N_EMBD = 32;
constexpr uint32_t LEADER_CAPS = 0xB, WORKER_CAPS = 0x6, EXEC_FLAGS = 0x5;
constexpr int32_t FAIL_STATUS = -42;
constexpr std::array<int32_t, 10> TEN = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};

float logit(int kind, uint32_t row, uint32_t i) { return float(kind * 10000 + int(row) * 100 + int(i)) * 0.5f; }
float embd_value(uint32_t t, uint32_t i) { return float(t * 1000 + i) * 0.25f; }
float head_value(uint32_t i) { return float(1000 + i) * 0.125f; }

std::array<std::byte, DS4TP_DRAFTER_META_BYTES> meta() {
  std::array<std::byte, DS4TP_DRAFTER_META_BYTES> m;
  for (size_t i = 0; i < m.size(); i++) m[i] = std::byte(uint8_t(i ^ 0x5A));
  return m;
}

void read_logits(ds4tp::Pair &tp, int kind, uint32_t row) {
  std::vector<float> half(LF);
  tp.recv_logits(half);
  for (uint32_t i = 0; i < LF; i++) REQUIRE(half[i] == logit(kind, row, i));
}

void leader_script(ds4tp::Pair &tp, bool fail) {
  tp.connect();
  REQUIRE(tp.agree_execution_mode(EXEC_FLAGS, LEADER_CAPS) == (LEADER_CAPS & WORKER_CAPS));
  auto m = meta();
  REQUIRE(tp.agree_drafter_split(true, m) == std::pair<bool, bool>(true, true));

  tp.send_session_create(SID, 512);
  REQUIRE(tp.wait_ack(SID) == DS4TP_ACK_DONE);
  tp.send_sync(SID, TEN, LF);
  REQUIRE(tp.wait_sync(SID) == std::pair<int32_t, uint32_t>(0, 10));
  read_logits(tp, DS4TP_CMD_SYNC, 0);

  tp.send_session_create(SID2, 256);
  REQUIRE(tp.wait_ack(SID2) == 0);
  tp.send_sync(SID2, TEN, LF);
  REQUIRE(tp.sync_checkpoint(1, 5, 10, false));
  REQUIRE(tp.wait_sync(SID2) == std::pair<int32_t, uint32_t>(DS4TP_ACK_CANCELLED, 5));

  std::vector<float> embd(2 * N_EMBD);
  for (uint32_t t = 0; t < 2; t++)
    for (uint32_t i = 0; i < N_EMBD; i++) embd[t * N_EMBD + i] = embd_value(t, i);
  ds4tp::ImageSpan im{};
  im.token_start = 1;
  im.token_count = 2;
  im.data_width = N_EMBD;
  im.width = im.height = im.content_width = 4;
  im.content_height = 3;
  for (uint32_t i = 0; i < DS4TP_IMAGE_FINGERPRINT_BYTES; i++) im.fingerprint[i] = uint8_t(i * 7);
  im.embd = embd.data();
  tp.send_sync_images(SID, std::span(TEN).first(6), std::span(&im, 1), LF);
  REQUIRE(tp.wait_sync(SID) == std::pair<int32_t, uint32_t>(0, 6));
  read_logits(tp, DS4TP_CMD_SYNC_IMAGES, 0);

  tp.send_eval(SID, 1, 77, LF);
  read_logits(tp, DS4TP_CMD_EVAL, 0);
  tp.send_mtp(SID, 2, 78, 3);
  REQUIRE(tp.wait_ack(SID) == 0);
  tp.send_rewind(SID, 5);
  tp.send_invalidate(SID);
  tp.send_spec_restore(SID, 4);
  REQUIRE(tp.wait_ack(SID) == DS4TP_ACK_UNAVAILABLE);

  ds4tp::BatchItem items[2] = {{SID, 5, 0}, {SID2, 6, 0}};
  tp.send_eval_batch(items, LF);
  REQUIRE(tp.wait_ack(0) == 0);
  read_logits(tp, DS4TP_CMD_EVAL_BATCH, 0);
  read_logits(tp, DS4TP_CMD_EVAL_BATCH, 1);
  const int32_t prompt[3] = {9, 8, 7};
  ds4tp::BatchItem one = {SID2, 3, 0};
  tp.send_mixed_batch(SID, prompt, std::span(&one, 1), LF);
  REQUIRE(tp.wait_ack(SID) == 0);
  read_logits(tp, DS4TP_CMD_MIXED_BATCH, 0);
  read_logits(tp, DS4TP_CMD_MIXED_BATCH, 1);

  const int32_t drafts[3] = {11, 12, 13};
  tp.send_verify(SID, drafts, DS4TP_VERIFY_DRAFT_SHARED);
  REQUIRE(tp.block_begin(3, N_LAYER, 1) == 1);
  std::array<std::byte, 8> peer{};
  tp.small_exchange(std::as_bytes(std::span("leader!!", 8)), peer);
  REQUIRE(std::memcmp(peer.data(), "worker!!", 8) == 0);
  std::vector<float> row(HEAD_FLOATS);
  tp.head_row_recv(1, row);
  for (uint32_t i = 0; i < HEAD_FLOATS; i++) REQUIRE(row[i] == head_value(i));
  tp.block_end();
  tp.send_verify_commit(DS4TP_COMMIT_PREFIX, 2);
  tp.send_draft(SID, 5, 7, DS4TP_DRAFT_PROPOSE);

  tp.hash_check(SID, 9, GOOD_HASH);
  try {
    tp.hash_check(SID, 10, 1);
    FAIL("hash check of different hashes passed");
  } catch (const ds4tp::Error &e) {
    REQUIRE(e.status() == DS4TP_EDIVERGED);
  }
  REQUIRE_FALSE(tp.failed());

  tp.send_session_destroy(SID2);
  REQUIRE(tp.wait_ack(SID2) == 0);
  tp.send_session_destroy(SID);
  REQUIRE(tp.wait_ack(SID) == 0);
  if (fail) {
    tp.send_session_destroy(BAD_SID);
    try {
      tp.wait_ack(BAD_SID);
      FAIL("the worker's failure did not reach the leader");
    } catch (const ds4tp::Error &e) {
      // EREMOTE per ds4tp.h; EFAILED (same words) when the library's
      // watcher sees the worker close first (a known library race).
      REQUIRE((e.status() == DS4TP_EREMOTE || e.status() == DS4TP_EFAILED));
      REQUIRE(e.message().find("no session 999") != std::string::npos);
    }
    REQUIRE(tp.remote_status() == FAIL_STATUS);
    REQUIRE(tp.failed());
    return;
  }
  tp.send_stop();
  // Closing handshake (see ds4tp_peer.c): the worker has read STOP.
  std::array<std::byte, 1> bye{};
  tp.small_exchange(std::as_bytes(std::span("L", 1)), bye);
  REQUIRE(bye[0] == std::byte('W'));
}

// The C++ twin of the peer's worker_handle. Checks throw (not Catch
// macros): the loop reports them to the leader, worker_run rethrows.
struct TestWorker : ds4tp::Worker {
  int commands = 0;
  bool failed_on_purpose = false;

  static void expect(bool ok, const char *what) {
    if (!ok) throw std::runtime_error(std::string("check failed: ") + what);
  }
  static bool tokens_are(const ds4tp::Command &c, std::span<const int32_t> want) {
    auto t = c.tokens();
    return t.size() == want.size() && std::equal(t.begin(), t.end(), want.begin());
  }
  static void fill_logits(ds4tp::Reply &r, int kind) {
    auto l = r.logits();
    for (uint32_t row = 0; row < r.logits_rows(); row++)
      for (uint32_t i = 0; i < r.logits_floats(); i++) l[row * r.logits_floats() + i] = logit(kind, row, i);
  }

  int session_create(ds4tp::PairRef &, const ds4tp::Command &c, ds4tp::Reply &) override {
    commands++;
    expect((c.session_id() == SID && c.ctx_size() == 512) || (c.session_id() == SID2 && c.ctx_size() == 256),
           "session create");
    return 0;
  }
  int session_destroy(ds4tp::PairRef &, const ds4tp::Command &c, ds4tp::Reply &r) override {
    commands++;
    if (c.session_id() == BAD_SID) {
      failed_on_purpose = true;
      r.set_message("no session 999 on the worker");
      return FAIL_STATUS;
    }
    expect(c.session_id() == SID || c.session_id() == SID2, "destroy");
    return 0;
  }
  int sync(ds4tp::PairRef &p, const ds4tp::Command &c, ds4tp::Reply &r) override {
    commands++;
    expect(tokens_are(c, TEN) && c.logits_floats() == LF, "sync tokens");
    if (c.session_id() == SID2) {
      expect(p.sync_checkpoint(1, 5, 10, true), "checkpoint");
      r.set_position(5);
      return DS4TP_ACK_CANCELLED;
    }
    expect(r.position() == 10 && r.logits_rows() == 1, "sync reply");
    fill_logits(r, c.kind());
    return 0;
  }
  int sync_images(ds4tp::PairRef &, const ds4tp::Command &c, ds4tp::Reply &r) override {
    commands++;
    expect(tokens_are(c, std::span(TEN).first(6)) && c.images().size() == 1, "images");
    const ds4tp::ImageSpan &im = c.images()[0];
    expect(im.token_start == 1 && im.token_count == 2 && im.data_width == N_EMBD && im.width == 4 &&
               im.height == 4 && im.content_width == 4 && im.content_height == 3,
           "image fields");
    for (uint32_t i = 0; i < DS4TP_IMAGE_FINGERPRINT_BYTES; i++) expect(im.fingerprint[i] == uint8_t(i * 7), "fingerprint");
    for (uint32_t t = 0; t < 2; t++)
      for (uint32_t i = 0; i < N_EMBD; i++) expect(im.embd[t * N_EMBD + i] == embd_value(t, i), "embd");
    fill_logits(r, c.kind());
    return 0;
  }
  int eval(ds4tp::PairRef &, const ds4tp::Command &c, ds4tp::Reply &r) override {
    commands++;
    expect(c.session_id() == SID && c.seq() == 1 && c.token() == 77 && c.logits_floats() == LF, "eval");
    fill_logits(r, c.kind());
    return 0;
  }
  int mtp(ds4tp::PairRef &, const ds4tp::Command &c, ds4tp::Reply &) override {
    commands++;
    expect(c.session_id() == SID && c.seq() == 2 && c.token() == 78 && c.limit() == 3, "mtp");
    return 0;
  }
  int rewind(ds4tp::PairRef &, const ds4tp::Command &c, ds4tp::Reply &) override {
    commands++;
    expect(c.session_id() == SID && c.pos() == 5, "rewind");
    return 0;
  }
  int invalidate(ds4tp::PairRef &, const ds4tp::Command &c, ds4tp::Reply &) override {
    commands++;
    expect(c.session_id() == SID, "invalidate");
    return 0;
  }
  int spec_restore(ds4tp::PairRef &, const ds4tp::Command &c, ds4tp::Reply &) override {
    commands++;
    expect(c.session_id() == SID && c.pos() == 4, "spec restore");
    return DS4TP_ACK_UNAVAILABLE;
  }
  int eval_batch(ds4tp::PairRef &, const ds4tp::Command &c, ds4tp::Reply &r) override {
    commands++;
    auto it = c.items();
    expect(it.size() == 2 && it[0].session_id == SID && it[0].token == 5 && it[1].session_id == SID2 &&
               it[1].token == 6 && r.logits_rows() == 2,
           "eval batch");
    fill_logits(r, c.kind());
    return 0;
  }
  int mixed_batch(ds4tp::PairRef &, const ds4tp::Command &c, ds4tp::Reply &r) override {
    commands++;
    const int32_t prompt[3] = {9, 8, 7};
    auto it = c.items();
    expect(c.session_id() == SID && tokens_are(c, prompt) && it.size() == 1 && it[0].session_id == SID2 &&
               it[0].token == 3 && r.logits_rows() == 2,
           "mixed batch");
    fill_logits(r, c.kind());
    return 0;
  }
  int verify(ds4tp::PairRef &p, const ds4tp::Command &c, ds4tp::Reply &) override {
    commands++;
    const int32_t drafts[3] = {11, 12, 13};
    expect(tokens_are(c, drafts) && c.flags() == DS4TP_VERIFY_DRAFT_SHARED, "verify");
    expect(p.block_begin(3, N_LAYER, 2) == 1, "block begin");
    std::array<std::byte, 8> peer{};
    p.small_exchange(std::as_bytes(std::span("worker!!", 8)), peer);
    expect(std::memcmp(peer.data(), "leader!!", 8) == 0, "small exchange");
    std::vector<float> row(HEAD_FLOATS);
    for (uint32_t i = 0; i < HEAD_FLOATS; i++) row[i] = head_value(i);
    p.head_row_send(1, row);
    p.block_end();
    return 0;
  }
  int verify_commit(ds4tp::PairRef &, const ds4tp::Command &c, ds4tp::Reply &) override {
    commands++;
    expect(c.mode() == DS4TP_COMMIT_PREFIX && c.count() == 2, "verify commit");
    return 0;
  }
  int draft(ds4tp::PairRef &, const ds4tp::Command &c, ds4tp::Reply &) override {
    commands++;
    expect(c.session_id() == SID && c.token() == 5 && c.pos() == 7 && c.mode() == DS4TP_DRAFT_PROPOSE, "draft");
    return 0;
  }
  int hash(ds4tp::PairRef &, const ds4tp::Command &c, ds4tp::Reply &r) override {
    commands++;
    expect(c.session_id() == SID && (c.seq() == 9 || c.seq() == 10), "hash");
    r.set_hash(c.seq() == 9 ? GOOD_HASH : 2);
    return 0;
  }
};

uint32_t rows_owed(const ds4tp::Command &c) {
  if (c.logits_floats() == 0) return 0;
  switch (c.kind()) {
    case DS4TP_CMD_EVAL:
    case DS4TP_CMD_SYNC:
    case DS4TP_CMD_SYNC_IMAGES: return 1;
    case DS4TP_CMD_EVAL_BATCH: return uint32_t(c.items().size());
    case DS4TP_CMD_MIXED_BATCH: return 1 + uint32_t(c.items().size());
    case DS4TP_CMD_VERIFY_COMMIT: return c.mode() == DS4TP_COMMIT_ROLLBACK && c.count() > 0;
    default: return 0;
  }
}

// recv_command and the explicit replies, reusing the Worker through dispatch.
void serve_by_hand(ds4tp::Pair &tp, TestWorker &w) {
  for (;;) {
    ds4tp::Command cmd = tp.recv_command(30000);
    if (cmd.kind() == DS4TP_CMD_STOP) return;
    uint32_t rows = rows_owed(cmd);
    std::vector<float> logits(size_t(rows) * cmd.logits_floats() + 1);
    ds4tp_reply raw{};
    raw.logits = rows ? logits.data() : nullptr;
    raw.logits_rows = rows;
    raw.logits_floats = cmd.logits_floats();
    raw.position = uint32_t(cmd.tokens().size());
    ds4tp::Reply reply(raw);
    int status = w.dispatch(tp, cmd, reply);
    if (status < 0) {
      tp.send_error(status, std::string(reply.message()));
      return;
    }
    switch (cmd.kind()) {
      case DS4TP_CMD_SESSION_CREATE:
      case DS4TP_CMD_SESSION_DESTROY:
      case DS4TP_CMD_MTP:
      case DS4TP_CMD_SPEC_RESTORE:
      case DS4TP_CMD_EVAL_BATCH:
      case DS4TP_CMD_MIXED_BATCH: tp.send_ack(status); break;
      case DS4TP_CMD_SYNC:
      case DS4TP_CMD_SYNC_IMAGES: tp.send_sync_ack(status, reply.position()); break;
      case DS4TP_CMD_HASH:
        try {
          tp.hash_check(cmd.session_id(), cmd.seq(), reply.hash());
        } catch (const ds4tp::Error &e) {
          REQUIRE((e.status() == DS4TP_EDIVERGED && cmd.seq() == 10));
        }
        break;
      default: break;
    }
    if (status == 0)
      for (uint32_t r = 0; r < rows; r++) tp.send_logits(std::span(logits).subspan(r * LF, LF));
  }
}

}  // namespace

TEST_CASE("C++ wrapper: types are RAII and move-only", "[cxx]") {
  static_assert(!std::is_copy_constructible_v<ds4tp::Pair>);
  static_assert(!std::is_copy_assignable_v<ds4tp::Pair>);
  static_assert(std::is_nothrow_move_constructible_v<ds4tp::Pair>);
  static_assert(std::is_nothrow_move_assignable_v<ds4tp::Pair>);
  static_assert(!std::is_copy_constructible_v<ds4tp::Command>);
  static_assert(std::is_base_of_v<std::runtime_error, ds4tp::Error>);

  ds4tp::Pair a(ds4tp::Options::leader(0), peer_identity(2, 64));
  int port = a.listen_port();
  REQUIRE(port > 0);
  ds4tp::Pair b(std::move(a));
  REQUIRE_FALSE(a);
  REQUIRE(b.listen_port() == port);
  try {
    a.connect();
    FAIL("a moved-from pair connected");
  } catch (const ds4tp::Error &e) {
    REQUIRE(e.status() == DS4TP_EINVAL);
    REQUIRE(e.message().find("empty") != std::string::npos);
  }
  ds4tp_pair *raw = b.release();
  REQUIRE_FALSE(b);
  ds4tp::Pair c(raw);  // adopts, frees at scope end
  REQUIRE(c.rank() == 0);
}

TEST_CASE("C++ wrapper: errors carry the status and the library's message", "[cxx]") {
  ds4tp::Options none;  // role NONE
  try {
    ds4tp::Pair p(none, peer_identity(1, 4));
    FAIL("a pair without a role was created");
  } catch (const ds4tp::Error &e) {
    REQUIRE(e.status() == DS4TP_EINVAL);
    REQUIRE(std::string(e.name()) == "DS4TP_EINVAL");
    REQUIRE(e.message().find("role") != std::string::npos);
    REQUIRE(std::string(e.what()).rfind("DS4TP_EINVAL: ", 0) == 0);
  }
  ds4tp::Pair tp(ds4tp::Options::leader(0), peer_identity(2, 64));
  REQUIRE_THROWS_MATCHES(tp.out_vector(0, 0), ds4tp::Error,
                         Catch::Predicate<ds4tp::Error>([](const ds4tp::Error &e) { return e.status() == DS4TP_ESTATE; }));
  REQUIRE_THROWS_AS(tp.gate_exchange(0, 0, 1), ds4tp::Error);
  std::vector<std::byte> a(8), b(16);
  REQUIRE_THROWS_AS(tp.big_gate_exchange(0, 1, a, b), ds4tp::Error);
  tp.mark_failed("engine lost its GPU");
  REQUIRE(tp.failed());
  try {
    tp.connect();
    FAIL("a failed pair connected");
  } catch (const ds4tp::Error &e) {
    REQUIRE(e.status() == DS4TP_EFAILED);
    REQUIRE(e.message().find("engine lost its GPU") != std::string::npos);
  }
}

TEST_CASE("C++ wrapper: pure helpers are the C calls", "[cxx]") {
  ds4tp::Identity id = peer_identity(4, 256);
  ds4tp::SlabLayout l = ds4tp::slab_layout(id);
  ds4tp_slab_layout c{};
  c.size = sizeof c;
  REQUIRE(ds4tp_slab_layout_compute(&id, &c) == DS4TP_OK);
  REQUIRE(std::memcmp(&l, &c, sizeof l) == 0);
  REQUIRE(ds4tp::schedule_slot(id, 9) == ds4tp_schedule_slot(&id, 9));
  REQUIRE_THROWS_AS(ds4tp::slab_layout(ds4tp::Identity()), ds4tp::Error);
  REQUIRE(ds4tp::version() == DS4TP_VERSION_HEX);
  REQUIRE(std::string(ds4tp::command_name(DS4TP_CMD_EVAL)) == "EVAL");
  std::string why;
  REQUIRE(ds4tp::transport_available(DS4TP_TRANSPORT_TCP, &why));
  REQUIRE_FALSE(why.empty());
  REQUIRE(ds4tp::transport_auto(true) == ds4tp_transport_auto(1));
  REQUIRE(ds4tp::transport_auto(false) == ds4tp_transport_auto(0));
  ds4tp::GateServiceOptions svc;
  REQUIRE(svc.size == sizeof(ds4tp_gate_service_options));
}

TEST_CASE("C++ wrapper: data plane, C++ leader against the C worker", "[cxx][pair]") {
  auto mode = GENERATE(Mode::call, Mode::callback, Mode::hooks, Mode::service);
  CAPTURE(int(mode));
  ds4tp::Pair tp(quiet(ds4tp::Options::leader(0)), peer_identity(2, 48));
  Peer peer({"worker", "--port", std::to_string(tp.listen_port()), "--layers", "2", "--embd", "48",
             "--tokens", "3"});
  play(tp, 3, mode);
  REQUIRE(peer.finish());
  REQUIRE(peer.out().find("peer OK: rank 1") != std::string::npos);
}

TEST_CASE("C++ wrapper: data plane, C++ worker against the C leader", "[cxx][pair]") {
  Peer peer({"leader", "--layers", "3", "--embd", "80", "--tokens", "4"});
  int port = peer.read_port();
  ds4tp::Pair tp(quiet(ds4tp::Options::worker("127.0.0.1", port)), peer_identity(3, 80));
  play(tp, 4, Mode::call);
  REQUIRE(tp.peer_ctx_size() == 512);
  REQUIRE(peer.finish());
  REQUIRE(peer.out().find("peer OK: rank 0") != std::string::npos);
}

TEST_CASE("C++ wrapper: control plane, C++ leader against the C worker", "[cxx][control]") {
  auto worker_flag = GENERATE(std::string(), std::string("--manual"));
  auto fail = GENERATE(false, true);
  CAPTURE(worker_flag, fail);
  ds4tp::Pair tp(quiet(ds4tp::Options::leader(0)), peer_identity(N_LAYER, N_EMBD));
  std::vector<std::string> args = {"worker", "--control", "--port", std::to_string(tp.listen_port()),
                                   "--layers", std::to_string(N_LAYER), "--embd", std::to_string(N_EMBD)};
  if (!worker_flag.empty()) args.push_back(worker_flag);
  Peer peer(args);
  leader_script(tp, fail);
  REQUIRE(peer.finish());
  REQUIRE(peer.out().find("peer OK: rank 1") != std::string::npos);
  REQUIRE((peer.out().find("reported the failure") != std::string::npos) == fail);
}

TEST_CASE("C++ wrapper: control plane, C++ worker against the C leader", "[cxx][control]") {
  auto manual = GENERATE(false, true);
  auto fail = GENERATE(false, true);
  CAPTURE(manual, fail);
  std::vector<std::string> args = {"leader", "--control", "--layers", std::to_string(N_LAYER), "--embd",
                                   std::to_string(N_EMBD)};
  if (fail) args.push_back("--fail");
  Peer peer(args);
  int port = peer.read_port();
  ds4tp::Pair tp(quiet(ds4tp::Options::worker("127.0.0.1", port)), peer_identity(N_LAYER, N_EMBD));
  tp.connect();
  REQUIRE(tp.agree_execution_mode(EXEC_FLAGS, WORKER_CAPS) == (LEADER_CAPS & WORKER_CAPS));
  auto m = meta();
  REQUIRE(tp.agree_drafter_split(true, m) == std::pair<bool, bool>(true, true));
  TestWorker w;
  if (manual) {
    serve_by_hand(tp, w);
  } else if (fail) {
    try {
      tp.worker_run(w);
      FAIL("the worker loop ignored a failed command");
    } catch (const ds4tp::Error &e) {
      REQUIRE(e.status() == DS4TP_EFAILED);
    }
  } else {
    tp.worker_run(w);
  }
  if (!fail) {  // the leader's closing handshake
    std::array<std::byte, 1> bye{};
    tp.small_exchange(std::as_bytes(std::span("W", 1)), bye);
    REQUIRE(bye[0] == std::byte('L'));
  }
  REQUIRE(peer.finish());
  REQUIRE(peer.out().find("peer OK: rank 0") != std::string::npos);
  REQUIRE(w.failed_on_purpose == fail);
  REQUIRE(w.commands == 19 + int(fail));
}

TEST_CASE("C++ wrapper: a throwing worker callback reaches the leader and is rethrown", "[cxx][control]") {
  Peer peer({"leader", "--control", "--layers", std::to_string(N_LAYER), "--embd", std::to_string(N_EMBD)});
  int port = peer.read_port();
  ds4tp::Pair tp(quiet(ds4tp::Options::worker("127.0.0.1", port)), peer_identity(N_LAYER, N_EMBD));
  tp.connect();
  tp.agree_execution_mode(EXEC_FLAGS, WORKER_CAPS);
  auto m = meta();
  tp.agree_drafter_split(true, m);
  struct Broken : TestWorker {
    int sync(ds4tp::PairRef &, const ds4tp::Command &, ds4tp::Reply &) override {
      throw std::runtime_error("engine blew up");
    }
  } w;
  REQUIRE_THROWS_WITH(tp.worker_run(w), "engine blew up");
  REQUIRE(tp.failed());
  REQUIRE_FALSE(peer.finish());  // the leader saw EREMOTE instead of its ack
}
