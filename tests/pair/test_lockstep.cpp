// Lockstep mirroring through the C API between two real processes, each
// with a toy engine: a scripted session over every command, divergence,
// worker failures, liveness, and the start-up and verify-block agreements.
#include <catch2/catch.hpp>

#include <poll.h>
#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "support/ranks.hpp"
#include "support/toy_engine.hpp"

using namespace ds4tp::test;

namespace {

constexpr uint32_t kHalf = 96;  // logits floats per half

// A pipe both processes inherit: the worker tells the leader its digest, or
// the leader tells the worker it may exit.
struct Pipe {
  int fd[2] = {-1, -1};
  Pipe() { REQUIRE(pipe(fd) == 0); }
  ~Pipe() {
    close(fd[0]);
    close(fd[1]);
  }
  void put(uint64_t v) { (void)!write(fd[1], &v, sizeof v); }
  bool get(uint64_t &v, int timeout_ms) {
    pollfd p{fd[0], POLLIN, 0};
    if (poll(&p, 1, timeout_ms) != 1) return false;
    return read(fd[0], &v, sizeof v) == sizeof v;
  }
};

int check_logits(ds4tp_pair *tp, ToyEngine &e, uint64_t sid) {
  std::vector<float> got(kHalf), want(kHalf);
  CHILD_EXPECT_OK(ds4tp_recv_logits(tp, got.data(), kHalf), tp);
  e.logits_half(sid, want.data());
  CHILD_EXPECT(std::memcmp(got.data(), want.data(), kHalf * 4) == 0, tp);
  return 0;
}

int worker_body(ds4tp_pair *tp, Pipe *digest, bool perturb) {
  if (int rc = connect_attach(tp)) return rc;
  ToyEngine e(tp, kHalf);
  e.perturb_next = perturb;
  ds4tp_worker_ops ops = toy_worker_ops();
  int rc = ds4tp_worker_run(tp, &ops, &e);
  if (digest) digest->put(e.digest());
  CHILD_EXPECT_OK(rc, tp, "worker_run");
  return 0;
}

RankSetup setup(int transport) {
  RankSetup s;
  s.transport = transport;
  s.leader_id = s.worker_id = small_identity(3, 64);
  return s;
}

// The scripted session of the issue, every command kind, states compared.
int leader_script(ds4tp_pair *tp, uint64_t &digest) {
  if (int rc = connect_attach(tp)) return rc;
  ToyEngine e(tp, kHalf);
  const uint64_t A = 1, B = 2, C = 3;
  int32_t st = -1;
  uint32_t pos = 0, wpos = 0;
  uint64_t seq = 0;

  for (uint64_t sid : {A, B, C}) {
    CHILD_EXPECT_OK(ds4tp_send_session_create(tp, sid, 4096), tp);
    CHILD_EXPECT_OK(e.create(sid), tp);
    CHILD_EXPECT_OK(ds4tp_wait_ack(tp, sid, &st), tp);
    CHILD_EXPECT(st == 0, tp);
  }
  // Sync a prompt (big gates and checkpoints inside), then its logits.
  std::vector<int32_t> prompt;
  for (int i = 0; i < 13; i++) prompt.push_back(1000 + i * 7);
  CHILD_EXPECT_OK(ds4tp_send_sync(tp, A, prompt.data(), uint32_t(prompt.size()), kHalf), tp);
  CHILD_EXPECT_OK(e.sync(A, prompt.data(), uint32_t(prompt.size()), nullptr, 0, &pos), tp);
  CHILD_EXPECT_OK(ds4tp_wait_sync(tp, A, &st, &wpos), tp);
  CHILD_EXPECT(st == 0 && wpos == 13 && pos == 13, tp);
  if (int rc = check_logits(tp, e, A)) return rc;

  // 32 evals with row gates between the ranks and a hash check every token.
  for (int t = 0; t < 32; t++) {
    int32_t tok = 200 + t * 3;
    CHILD_EXPECT_OK(ds4tp_send_eval(tp, A, ++seq, tok, kHalf), tp);
    CHILD_EXPECT_OK(e.eval(A, tok), tp);
    if (int rc = check_logits(tp, e, A)) return rc;
    CHILD_EXPECT_OK(ds4tp_hash_check(tp, A, seq, e.hash(A)), tp);
  }
  CHILD_EXPECT(e.row_seq() == 32u * 3 * 2, tp);

  // Rewind, one more token.
  CHILD_EXPECT_OK(ds4tp_send_rewind(tp, A, 40), tp);
  CHILD_EXPECT_OK(e.rewind(A, 40), tp);
  CHILD_EXPECT_OK(ds4tp_send_eval(tp, A, ++seq, 77, 0), tp);
  CHILD_EXPECT_OK(e.eval(A, 77), tp);
  CHILD_EXPECT_OK(ds4tp_hash_check(tp, A, seq, e.hash(A)), tp);

  // A verify block with head split (block agreement, batch gates, small
  // exchange, head row) and a prefix commit.
  const int32_t drafts[4] = {501, 502, 503, 504};
  CHILD_EXPECT_OK(ds4tp_send_verify(tp, A, drafts, 4, DS4TP_VERIFY_HEAD_SPLIT), tp);
  CHILD_EXPECT_OK(e.verify(A, drafts, 4, DS4TP_VERIFY_HEAD_SPLIT), tp);
  CHILD_EXPECT_OK(ds4tp_send_verify_commit(tp, DS4TP_COMMIT_PREFIX, 2, 0), tp);
  CHILD_EXPECT_OK(e.commit(A, DS4TP_COMMIT_PREFIX, 2), tp);
  CHILD_EXPECT_OK(ds4tp_hash_check(tp, A, ++seq, e.hash(A)), tp);
  // A second block rolled back with one replayed token and its logits.
  CHILD_EXPECT_OK(ds4tp_send_verify(tp, A, drafts + 1, 3, 0), tp);
  CHILD_EXPECT_OK(e.verify(A, drafts + 1, 3, 0), tp);
  CHILD_EXPECT_OK(ds4tp_send_verify_commit(tp, DS4TP_COMMIT_ROLLBACK, 1, kHalf), tp);
  CHILD_EXPECT_OK(e.commit(A, DS4TP_COMMIT_ROLLBACK, 1), tp);
  if (int rc = check_logits(tp, e, A)) return rc;
  CHILD_EXPECT_OK(ds4tp_hash_check(tp, A, ++seq, e.hash(A)), tp);

  // Speculative restore the worker cannot do: invalidate and sync in full.
  CHILD_EXPECT_OK(ds4tp_send_spec_restore(tp, A, 20), tp);
  int mine = e.spec_restore(A, 20);
  CHILD_EXPECT_OK(ds4tp_wait_ack(tp, A, &st), tp);
  CHILD_EXPECT(st == DS4TP_ACK_UNAVAILABLE && mine == DS4TP_ACK_UNAVAILABLE, tp);
  std::vector<int32_t> full = e.session(A).tokens;
  CHILD_EXPECT_OK(ds4tp_send_invalidate(tp, A), tp);
  CHILD_EXPECT_OK(e.invalidate(A), tp);
  CHILD_EXPECT_OK(ds4tp_send_sync(tp, A, full.data(), uint32_t(full.size()), kHalf), tp);
  CHILD_EXPECT_OK(e.sync(A, full.data(), uint32_t(full.size()), nullptr, 0, &pos), tp);
  CHILD_EXPECT_OK(ds4tp_wait_sync(tp, A, &st, &wpos), tp);
  CHILD_EXPECT(st == 0 && wpos == pos && pos == full.size(), tp);
  if (int rc = check_logits(tp, e, A)) return rc;
  CHILD_EXPECT_OK(ds4tp_hash_check(tp, A, ++seq, e.hash(A)), tp);

  // Mixed batch: a prefill chunk for B plus decode steps for A and C.
  const int32_t chunk[5] = {11, 12, 13, 14, 15};
  const ds4tp_batch_item items[2] = {{A, 300, 0}, {C, 301, 0}};
  std::vector<float> want(kHalf * 3), got(kHalf);
  CHILD_EXPECT_OK(ds4tp_send_mixed_batch(tp, B, chunk, 5, items, 2, kHalf), tp);
  CHILD_EXPECT_OK(e.mixed_batch(B, chunk, 5, items, 2, want.data()), tp);
  CHILD_EXPECT_OK(ds4tp_wait_ack(tp, B, &st), tp);
  CHILD_EXPECT(st == 0, tp);
  for (int r = 0; r < 3; r++) {
    CHILD_EXPECT_OK(ds4tp_recv_logits(tp, got.data(), kHalf), tp);
    CHILD_EXPECT(std::memcmp(got.data(), want.data() + r * kHalf, kHalf * 4) == 0, tp);
  }
  // Eval batch, one logits half per item.
  const ds4tp_batch_item items2[2] = {{A, 400, 0}, {B, 401, 0}};
  CHILD_EXPECT_OK(ds4tp_send_eval_batch(tp, items2, 2, kHalf), tp);
  CHILD_EXPECT_OK(e.eval_batch(items2, 2, want.data()), tp);
  CHILD_EXPECT_OK(ds4tp_wait_ack(tp, 0, &st), tp);
  for (int r = 0; r < 2; r++) {
    CHILD_EXPECT_OK(ds4tp_recv_logits(tp, got.data(), kHalf), tp);
    CHILD_EXPECT(std::memcmp(got.data(), want.data() + r * kHalf, kHalf * 4) == 0, tp);
  }
  // MTP cycle and a drafter step.
  CHILD_EXPECT_OK(ds4tp_send_mtp(tp, A, ++seq, 600, 2), tp);
  CHILD_EXPECT_OK(e.mtp(A, 600, 2), tp);
  CHILD_EXPECT_OK(ds4tp_wait_ack(tp, A, &st), tp);
  CHILD_EXPECT(st == 0, tp);
  int32_t dpos = int32_t(e.session(A).tokens.size());
  CHILD_EXPECT_OK(ds4tp_send_draft(tp, A, 601, dpos, DS4TP_DRAFT_PROPOSE), tp);
  CHILD_EXPECT_OK(e.draft(A, 601, dpos, DS4TP_DRAFT_PROPOSE), tp);

  // A prompt with an image on C.
  std::vector<int32_t> ctoks = {5, 6, 0, 0, 0, 7, 8, 9, 10, 11};
  std::vector<float> embd(3 * 64);
  for (size_t i = 0; i < embd.size(); i++) embd[i] = float(i % 17) * 0.125f;
  ds4tp_image_span img{};
  img.token_start = 2;
  img.token_count = 3;
  img.data_width = 64;
  img.width = img.content_width = 48;
  img.height = img.content_height = 32;
  for (int i = 0; i < DS4TP_IMAGE_FINGERPRINT_BYTES; i++) img.fingerprint[i] = uint8_t(i);
  img.embd = embd.data();
  CHILD_EXPECT_OK(
      ds4tp_send_sync_images(tp, C, ctoks.data(), uint32_t(ctoks.size()), &img, 1, kHalf), tp);
  CHILD_EXPECT_OK(e.sync(C, ctoks.data(), uint32_t(ctoks.size()), &img, 1, &pos), tp);
  CHILD_EXPECT_OK(ds4tp_wait_sync(tp, C, &st, &wpos), tp);
  CHILD_EXPECT(st == 0 && wpos == 10, tp);
  if (int rc = check_logits(tp, e, C)) return rc;
  CHILD_EXPECT_OK(ds4tp_hash_check(tp, C, ++seq, e.hash(C)), tp);

  // A sync both ranks agree to cancel: the leader asks at 8 new tokens.
  std::vector<int32_t> longer = e.session(B).tokens;
  uint32_t before = uint32_t(longer.size());
  for (int i = 0; i < 20; i++) longer.push_back(700 + i);
  e.cancel_at = int32_t(before + 8);
  CHILD_EXPECT_OK(ds4tp_send_sync(tp, B, longer.data(), uint32_t(longer.size()), kHalf), tp);
  int lst = e.sync(B, longer.data(), uint32_t(longer.size()), nullptr, 0, &pos);
  e.cancel_at = -1;
  CHILD_EXPECT_OK(ds4tp_wait_sync(tp, B, &st, &wpos), tp);
  CHILD_EXPECT(lst == DS4TP_ACK_CANCELLED && st == DS4TP_ACK_CANCELLED, tp);
  CHILD_EXPECT(pos == wpos && pos < longer.size() && pos >= before + 8, tp);
  CHILD_EXPECT_OK(ds4tp_hash_check(tp, B, ++seq, e.hash(B)), tp);

  // Destroy one session, and one the worker does not know.
  CHILD_EXPECT_OK(ds4tp_send_session_destroy(tp, C), tp);
  CHILD_EXPECT_OK(e.destroy(C), tp);
  CHILD_EXPECT_OK(ds4tp_wait_ack(tp, C, &st), tp);
  CHILD_EXPECT(st == 0, tp);
  CHILD_EXPECT_OK(ds4tp_send_session_destroy(tp, 99), tp);
  CHILD_EXPECT_OK(ds4tp_wait_ack(tp, 99, &st), tp);
  CHILD_EXPECT(st == DS4TP_ACK_UNAVAILABLE && e.destroy(99) == DS4TP_ACK_UNAVAILABLE, tp);

  CHILD_EXPECT_OK(ds4tp_send_stop(tp), tp);
  CHILD_EXPECT(ds4tp_failed(tp) == 0, tp);
  digest = e.digest();
  return 0;
}

}  // namespace

TEST_CASE("a scripted session runs in lockstep and leaves both engines in the same state") {
  int transport = GENERATE(from_range(local_transports()));
  INFO(ds4tp_transport_name(transport));
  RankSetup s = setup(transport);
  Pipe pipe;
  uint64_t leader_digest = 0;
  Outcome o = run_pair(
      s, [&](ds4tp_pair *tp, Ctx &) { return leader_script(tp, leader_digest); },
      [&](ds4tp_pair *tp, Ctx &) { return worker_body(tp, &pipe, false); });
  REQUIRE_RANKS_OK(o);
  uint64_t worker_digest = 0;
  REQUIRE(pipe.get(worker_digest, 1000));
  REQUIRE(leader_digest != 0);
  REQUIRE(worker_digest == leader_digest);
}

TEST_CASE("a perturbed engine is reported as a divergence, not a transport error, and can resync") {
  RankSetup s = setup(DS4TP_TRANSPORT_TCP);
  Pipe pipe;
  uint64_t leader_digest = 0;
  auto leader = [&](ds4tp_pair *tp, Ctx &) -> int {
    if (int rc = connect_attach(tp)) return rc;
    ToyEngine e(tp, kHalf);
    const uint64_t A = 4;
    int32_t st = -1;
    uint32_t pos = 0, wpos = 0;
    CHILD_EXPECT_OK(ds4tp_send_session_create(tp, A, 512), tp);
    CHILD_EXPECT_OK(e.create(A), tp);
    CHILD_EXPECT_OK(ds4tp_wait_ack(tp, A, &st), tp);
    const int32_t prompt[6] = {1, 2, 3, 4, 5, 6};
    CHILD_EXPECT_OK(ds4tp_send_sync(tp, A, prompt, 6, 0), tp);
    CHILD_EXPECT_OK(e.sync(A, prompt, 6, nullptr, 0, &pos), tp);
    CHILD_EXPECT_OK(ds4tp_wait_sync(tp, A, &st, &wpos), tp);
    // The worker's engine adds an error to its state in this eval.
    CHILD_EXPECT_OK(ds4tp_send_eval(tp, A, 1, 42, 0), tp);
    CHILD_EXPECT_OK(e.eval(A, 42), tp);
    int rc = ds4tp_hash_check(tp, A, 1, e.hash(A));
    CHILD_EXPECT_RC(rc, DS4TP_EDIVERGED, tp);
    std::string m = ds4tp_errmsg(tp);
    CHILD_EXPECT(m.find("divergence at session 4 seq 1") != std::string::npos, tp);
    char mine[32];
    std::snprintf(mine, sizeof mine, "0x%016llx", (unsigned long long)e.hash(A));
    CHILD_EXPECT(m.find(mine) != std::string::npos, tp);
    CHILD_EXPECT(ds4tp_failed(tp) == 0, tp);  // the transport is fine
    // Recover: invalidate and sync in full on both ranks.
    std::vector<int32_t> full = e.session(A).tokens;
    CHILD_EXPECT_OK(ds4tp_send_invalidate(tp, A), tp);
    CHILD_EXPECT_OK(e.invalidate(A), tp);
    CHILD_EXPECT_OK(ds4tp_send_sync(tp, A, full.data(), uint32_t(full.size()), 0), tp);
    CHILD_EXPECT_OK(e.sync(A, full.data(), uint32_t(full.size()), nullptr, 0, &pos), tp);
    CHILD_EXPECT_OK(ds4tp_wait_sync(tp, A, &st, &wpos), tp);
    CHILD_EXPECT_OK(ds4tp_hash_check(tp, A, 2, e.hash(A)), tp);
    for (uint64_t q = 3; q < 6; q++) {
      CHILD_EXPECT_OK(ds4tp_send_eval(tp, A, q, int32_t(q), 0), tp);
      CHILD_EXPECT_OK(e.eval(A, int32_t(q)), tp);
      CHILD_EXPECT_OK(ds4tp_hash_check(tp, A, q, e.hash(A)), tp);
    }
    CHILD_EXPECT_OK(ds4tp_send_stop(tp), tp);
    leader_digest = e.digest();
    return 0;
  };
  Outcome o = run_pair(s, leader, [&](ds4tp_pair *tp, Ctx &) { return worker_body(tp, &pipe, true); });
  REQUIRE_RANKS_OK(o);
  uint64_t wd = 0;
  REQUIRE(pipe.get(wd, 1000));
  REQUIRE(wd == leader_digest);
}

namespace {

int failing_create(void *, ds4tp_pair *, const ds4tp_command *, ds4tp_reply *r) {
  std::snprintf(r->message, sizeof r->message, "no memory for a %s KV cache", "4096-token");
  return -42;
}
int failing_eval(void *, ds4tp_pair *, const ds4tp_command *c, ds4tp_reply *r) {
  std::snprintf(r->message, sizeof r->message, "GPU fault at token %d", c->token);
  return -7;
}

}  // namespace

TEST_CASE("a failing worker callback reaches the leader's wait as DS4TP_EREMOTE with its status") {
  RankSetup s = setup(DS4TP_TRANSPORT_TCP);
  Pipe done;
  auto leader = [&](ds4tp_pair *tp, Ctx &) -> int {
    if (int rc = connect_attach(tp)) return rc;
    CHILD_EXPECT_OK(ds4tp_send_session_create(tp, 9, 4096), tp);
    int32_t st = 0;
    int rc = ds4tp_wait_ack(tp, 9, &st);
    done.put(1);  // the worker may exit now
    CHILD_EXPECT_RC(rc, DS4TP_EREMOTE, tp);
    CHILD_EXPECT(st == -42 && ds4tp_remote_status(tp) == -42, tp);
    std::string m = ds4tp_errmsg(tp);
    CHILD_EXPECT(m.find("SESSION_CREATE") != std::string::npos &&
                     m.find("-42") != std::string::npos &&
                     m.find("no memory for a 4096-token KV cache") != std::string::npos,
                 tp);
    CHILD_EXPECT(ds4tp_failed(tp) == 1, tp);
    CHILD_EXPECT_RC(ds4tp_send_eval(tp, 9, 1, 1, 0), DS4TP_EFAILED, tp);
    return 0;
  };
  auto worker = [&](ds4tp_pair *tp, Ctx &) -> int {
    if (int rc = connect_attach(tp)) return rc;
    ds4tp_worker_ops ops;
    ds4tp_worker_ops_init(&ops);
    ops.session_create = failing_create;
    int rc = ds4tp_worker_run(tp, &ops, nullptr);
    uint64_t v;
    done.get(v, 10000);
    CHILD_EXPECT_RC(rc, DS4TP_EFAILED, tp);
    CHILD_EXPECT(std::string(ds4tp_errmsg(tp)).find("status -42") != std::string::npos, tp);
    CHILD_EXPECT(ds4tp_failed(tp), tp);
    return 0;
  };
  Outcome o = run_pair(s, leader, worker);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("a worker that fails and exits while the leader is not reading latches the leader failed") {
  RankSetup s = setup(DS4TP_TRANSPORT_TCP);
  auto leader = [&](ds4tp_pair *tp, Ctx &) -> int {
    if (int rc = connect_attach(tp)) return rc;
    CHILD_EXPECT_OK(ds4tp_send_eval(tp, 9, 1, 123, 0), tp);  // no reply is due
    auto t0 = Clock::now();
    while (!ds4tp_failed(tp) && ms_since(t0) < 5000)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    CHILD_EXPECT(ds4tp_failed(tp) == 1, tp);
    CHILD_EXPECT(ds4tp_remote_status(tp) == -7, tp);
    std::string m = ds4tp_errmsg(tp);
    CHILD_EXPECT(m.find("EVAL") != std::string::npos &&
                     m.find("GPU fault at token 123") != std::string::npos,
                 tp);
    CHILD_EXPECT_RC(ds4tp_send_eval(tp, 9, 2, 1, 0), DS4TP_EFAILED, tp);
    return 0;
  };
  auto worker = [&](ds4tp_pair *tp, Ctx &) -> int {
    if (int rc = connect_attach(tp)) return rc;
    ds4tp_worker_ops ops;
    ds4tp_worker_ops_init(&ops);
    ops.eval = failing_eval;
    int rc = ds4tp_worker_run(tp, &ops, nullptr);
    CHILD_EXPECT_RC(rc, DS4TP_EFAILED, tp);
    return 0;  // then ds4tp_free closes the connection
  };
  Outcome o = run_pair(s, leader, worker);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("a killed worker latches the idle leader failed, and wakes a waiting one at once") {
  RankSetup s = setup(DS4TP_TRANSPORT_TCP);
  SECTION("idle between tokens") {
    auto leader = [&](ds4tp_pair *tp, Ctx &c) -> int {
      if (int rc = connect_attach(tp)) return rc;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      kill(c.worker_pid, SIGKILL);
      auto t0 = Clock::now();
      while (!ds4tp_failed(tp) && ms_since(t0) < 5000)
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      CHILD_EXPECT(ds4tp_failed(tp) == 1, tp);
      CHILD_EXPECT(ms_since(t0) < 2000, tp);
      CHILD_EXPECT(
          std::string(ds4tp_errmsg(tp)).find("closed the control connection") != std::string::npos,
          tp);
      return 0;
    };
    auto worker = [&](ds4tp_pair *tp, Ctx &) -> int {
      if (int rc = connect_attach(tp)) return rc;
      pause();
      return 0;
    };
    Outcome o = run_pair(s, leader, worker);
    INFO(o.describe());
    REQUIRE(o.leader == 0);
    REQUIRE(o.worker_signal == SIGKILL);
  }
  SECTION("blocked in a wait with a 30 s deadline") {
    auto leader = [&](ds4tp_pair *tp, Ctx &c) -> int {
      if (int rc = connect_attach(tp)) return rc;
      CHILD_EXPECT_OK(ds4tp_send_session_create(tp, 3, 100), tp);
      std::thread killer([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(150));
        kill(c.worker_pid, SIGKILL);
      });
      auto t0 = Clock::now();
      int rc = ds4tp_wait_ack(tp, 3, nullptr);
      double took = ms_since(t0);
      killer.join();
      CHILD_EXPECT(rc == DS4TP_EPEERCLOSED || rc == DS4TP_EFAILED, tp);
      CHILD_EXPECT(took < 2000, tp, "took %.0f ms", took);
      CHILD_EXPECT(ds4tp_failed(tp) == 1, tp);
      return 0;
    };
    auto worker = [&](ds4tp_pair *tp, Ctx &) -> int {
      if (int rc = connect_attach(tp)) return rc;
      ds4tp_command cmd;
      ds4tp_command_init(&cmd);
      ds4tp_recv_command(tp, &cmd, 5000);  // takes the command, never answers
      pause();
      return 0;
    };
    Outcome o = run_pair(s, leader, worker);
    INFO(o.describe());
    REQUIRE(o.leader == 0);
    REQUIRE(o.worker_signal == SIGKILL);
  }
}

TEST_CASE("a live worker that never answers times the leader's wait out at frame_timeout_ms") {
  RankSetup s = setup(DS4TP_TRANSPORT_TCP);
  s.leader_tweak = [](ds4tp_options &o) { o.frame_timeout_ms = 300; };
  Pipe done;
  auto leader = [&](ds4tp_pair *tp, Ctx &) -> int {
    if (int rc = connect_attach(tp)) return rc;
    CHILD_EXPECT_OK(ds4tp_send_spec_restore(tp, 3, 0), tp);
    auto t0 = Clock::now();
    int rc = ds4tp_wait_ack(tp, 3, nullptr);
    double took = ms_since(t0);
    std::string m = ds4tp_errmsg(tp);
    done.put(1);
    CHILD_EXPECT_RC(rc, DS4TP_ETIMEDOUT, tp);
    CHILD_EXPECT(took >= 280 && took < 3000, tp, "took %.0f ms", took);
    CHILD_EXPECT(
        m.find("300 ms") != std::string::npos && m.find("SPEC_RESTORE") != std::string::npos, tp);
    return 0;
  };
  auto worker = [&](ds4tp_pair *tp, Ctx &) -> int {
    if (int rc = connect_attach(tp)) return rc;
    ds4tp_command cmd;
    ds4tp_command_init(&cmd);
    CHILD_EXPECT_OK(ds4tp_recv_command(tp, &cmd, 5000), tp);
    CHILD_EXPECT(cmd.kind == DS4TP_CMD_SPEC_RESTORE, tp, "kind %d", int(cmd.kind));
    uint64_t v;
    done.get(v, 10000);
    return 0;
  };
  Outcome o = run_pair(s, leader, worker);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("ds4tp_mark_failed from another thread stops a worker loop waiting for commands") {
  RankSetup s = setup(DS4TP_TRANSPORT_TCP);
  Pipe done;
  auto leader = [&](ds4tp_pair *tp, Ctx &) -> int {
    if (int rc = connect_attach(tp)) return rc;
    uint64_t v = 0;
    CHILD_EXPECT(done.get(v, 10000) && v == 1, tp);
    return 0;
  };
  auto worker = [&](ds4tp_pair *tp, Ctx &) -> int {
    if (int rc = connect_attach(tp)) return rc;
    std::thread stopper([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      ds4tp_mark_failed(tp, "shutting down");
    });
    ds4tp_worker_ops ops = toy_worker_ops();
    auto t0 = Clock::now();
    int rc = ds4tp_worker_run(tp, &ops, nullptr);
    double took = ms_since(t0);
    stopper.join();
    done.put(1);
    CHILD_EXPECT_RC(rc, DS4TP_EFAILED, tp);
    CHILD_EXPECT(took < 2000, tp, "took %.0f ms", took);
    return 0;
  };
  Outcome o = run_pair(s, leader, worker);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("start-up agreements and verify-block agreements on every transport") {
  int transport = GENERATE(from_range(local_transports()));
  RankSetup s = setup(transport);
  auto body = [](ds4tp_pair *tp, Ctx &c) -> int {
    if (int rc = connect_attach(tp)) return rc;
    const bool lead = c.rank == 0;
    // Execution mode: same flags, capabilities intersected.
    uint32_t caps = lead ? 0xbu : 0x6u;
    CHILD_EXPECT_OK(ds4tp_agree_execution_mode(tp, 0x3, &caps), tp);
    CHILD_EXPECT(caps == 0x2u, tp);
    // Drafter split: only the leader opts in, then both with one metadata.
    uint8_t meta[DS4TP_DRAFTER_META_BYTES];
    for (int i = 0; i < DS4TP_DRAFTER_META_BYTES; i++) meta[i] = uint8_t(i * 5);
    int agreed = -1, peer_on = -1;
    CHILD_EXPECT_OK(ds4tp_agree_drafter_split(tp, lead, meta, &agreed, &peer_on), tp);
    CHILD_EXPECT(agreed == 0 && peer_on == (lead ? 0 : 1), tp);
    CHILD_EXPECT_OK(ds4tp_agree_drafter_split(tp, 1, meta, &agreed, &peer_on), tp);
    CHILD_EXPECT(agreed == 1 && peer_on == 1, tp);
    // Verify block: the leader offers 2 gates per layer, the worker 1.
    uint32_t gpl = lead ? 2 : 1;
    CHILD_EXPECT_OK(ds4tp_block_begin(tp, 4, 2, &gpl), tp);
    CHILD_EXPECT(gpl == 1, tp);
    CHILD_EXPECT_RC(ds4tp_block_begin(tp, 4, 2, &gpl), DS4TP_ESTATE, tp);  // still open
    uint8_t mine[192], peer[192];
    for (int i = 0; i < 192; i++) mine[i] = uint8_t(i + c.rank);
    CHILD_EXPECT_OK(ds4tp_small_exchange(tp, mine, peer, 192), tp);
    for (int i = 0; i < 192; i++) CHILD_EXPECT(peer[i] == uint8_t(i + 1 - c.rank), tp);
    std::vector<float> row(DS4TP_HEAD_ROW_MAX), got(DS4TP_HEAD_ROW_MAX);
    for (size_t i = 0; i < row.size(); i++) row[i] = float(i) * 0.5f;
    // Block 1: the worker sends a row the leader never reads (it rolled the
    // block back); it must not be taken for block 2's row.
    if (!lead) CHILD_EXPECT_OK(ds4tp_head_row_send(tp, 1, row.data(), 1000), tp);
    CHILD_EXPECT_OK(ds4tp_block_end(tp), tp);
    gpl = 2;
    CHILD_EXPECT_OK(ds4tp_block_begin(tp, 2, 3, &gpl), tp);
    CHILD_EXPECT(gpl == 2, tp);
    CHILD_EXPECT_OK(ds4tp_block_end(tp), tp);
    if (!lead) {
      row[0] = 99.0f;
      CHILD_EXPECT_OK(ds4tp_head_row_send(tp, 1, row.data(), DS4TP_HEAD_ROW_MAX), tp);
    } else {
      CHILD_EXPECT_OK(ds4tp_head_row_recv(tp, 1, got.data(), DS4TP_HEAD_ROW_MAX), tp);
      CHILD_EXPECT(got[0] == 99.0f && got[DS4TP_HEAD_ROW_MAX - 1] == row[DS4TP_HEAD_ROW_MAX - 1],
                   tp);
    }
    // Argument checks do not fail the pair.
    CHILD_EXPECT_RC(ds4tp_small_exchange(tp, mine, peer, 193), DS4TP_EINVAL, tp);
    CHILD_EXPECT_RC(ds4tp_block_begin(tp, 9, 2, nullptr), DS4TP_EINVAL, tp);
    CHILD_EXPECT_RC(ds4tp_block_begin(tp, 1, 4, nullptr), DS4TP_EINVAL, tp);  // 3 layers
    CHILD_EXPECT(ds4tp_failed(tp) == 0, tp);
    // An orderly end: the worker may find the leader gone before it reads
    // STOP; that is not a failure.
    if (lead) {
      CHILD_EXPECT_OK(ds4tp_send_stop(tp), tp);
    } else {
      ds4tp_command cmd;
      ds4tp_command_init(&cmd);
      CHILD_EXPECT_OK(ds4tp_recv_command(tp, &cmd, 5000), tp);
      CHILD_EXPECT(cmd.kind == DS4TP_CMD_STOP, tp);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      CHILD_EXPECT(ds4tp_failed(tp) == 0, tp);
    }
    return 0;
  };
  Outcome o = run_pair(s, body, body);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("agreements that cannot hold fail on both ranks naming both values") {
  struct Case {
    const char *name;
    int want;
    const char *needle;
    int (*run)(ds4tp_pair *, int rank);
  };
  static const Case cases[] = {
      {"execution flags", DS4TP_EIDENTITY, "0x3",
       [](ds4tp_pair *tp, int rank) { return ds4tp_agree_execution_mode(tp, rank ? 0x1 : 0x3, nullptr); }},
      {"drafter metadata", DS4TP_EIDENTITY, "byte 7",
       [](ds4tp_pair *tp, int rank) {
         uint8_t meta[DS4TP_DRAFTER_META_BYTES] = {};
         meta[7] = uint8_t(rank + 1);
         return ds4tp_agree_drafter_split(tp, 1, meta, nullptr, nullptr);
       }},
      {"block rows", DS4TP_EDESYNC, "3 rows",
       [](ds4tp_pair *tp, int rank) { return ds4tp_block_begin(tp, rank ? 4 : 3, 2, nullptr); }},
      {"small exchange size", DS4TP_EDESYNC, "16 bytes",
       [](ds4tp_pair *tp, int rank) {
         uint8_t b[32] = {};
         return ds4tp_small_exchange(tp, b, b, rank ? 16 : 24);
       }},
      {"checkpoint boundaries", DS4TP_EDESYNC, "point 2",
       [](ds4tp_pair *tp, int rank) { return ds4tp_sync_checkpoint(tp, rank ? 1 : 2, 4, 8, 0, nullptr); }},
  };
  for (const Case &k : cases) {
    INFO(k.name);
    RankSetup s = setup(DS4TP_TRANSPORT_TCP);
    auto body = [&k](ds4tp_pair *tp, Ctx &c) -> int {
      if (int rc = connect_attach(tp)) return rc;
      int rc = k.run(tp, c.rank);
      CHILD_EXPECT_RC(rc, k.want, tp, "%s", k.name);
      CHILD_EXPECT(std::string(ds4tp_errmsg(tp)).find(k.needle) != std::string::npos, tp,
                   "%s: wanted \"%s\" in the message", k.name, k.needle);
      CHILD_EXPECT(ds4tp_failed(tp), tp, "%s", k.name);
      return 0;
    };
    Outcome o = run_pair(s, body, body);
    REQUIRE_RANKS_OK(o);
  }
}

TEST_CASE("control frames on one thread while gates run on another, on both ranks") {
  int transport = GENERATE(from_range(local_transports()));
  RankSetup s = setup(transport);
  auto body = [](ds4tp_pair *tp, Ctx &c) -> int {
    if (int rc = connect_attach(tp)) return rc;
    std::atomic<int> gate_rc{0};
    std::thread gates([&] {
      uint64_t seq = 0;
      for (int t = 0; t < 60 && gate_rc == 0; t++)
        for (uint32_t layer = 0; layer < 3 && gate_rc == 0; layer++)
          for (uint32_t g = 0; g < 2 && gate_rc == 0; g++)
            gate_rc = ds4tp_gate_exchange(tp, layer, g, ++seq);
    });
    auto control = [&]() -> int {
      for (int i = 0; i < 200; i++) {
        uint8_t mine[8], peer[8];
        std::memset(mine, i + c.rank, sizeof mine);
        CHILD_EXPECT_OK(ds4tp_small_exchange(tp, mine, peer, 8), tp, "round %d", i);
        CHILD_EXPECT(peer[0] == uint8_t(i + 1 - c.rank), tp, "round %d", i);
        int cancelled = -1;
        CHILD_EXPECT_OK(ds4tp_sync_checkpoint(tp, 7, i, 200, i == 150 && c.rank == 1, &cancelled),
                        tp, "round %d", i);
        CHILD_EXPECT(cancelled == (i == 150), tp, "round %d", i);
      }
      return 0;
    };
    int control_rc = control();
    gates.join();
    if (control_rc) return control_rc;
    CHILD_EXPECT_OK(gate_rc.load(), tp, "gate thread");
    return 0;
  };
  Outcome o = run_pair(s, body, body);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("a worker driven by hand owns the command arrays it receives") {
  RankSetup s = setup(DS4TP_TRANSPORT_TCP);
  auto leader = [](ds4tp_pair *tp, Ctx &) -> int {
    if (int rc = connect_attach(tp)) return rc;
    std::vector<int32_t> toks = {9, 8, 7, 6};
    std::vector<float> embd(2 * 64, 0.5f);
    ds4tp_image_span img{};
    img.token_start = 1;
    img.token_count = 2;
    img.data_width = 64;
    img.width = img.height = 8;
    img.embd = embd.data();
    CHILD_EXPECT_OK(ds4tp_send_sync_images(tp, 5, toks.data(), 4, &img, 1, 3), tp);
    int32_t st = -1;
    uint32_t pos = 0;
    CHILD_EXPECT_OK(ds4tp_wait_sync(tp, 5, &st, &pos), tp);
    CHILD_EXPECT(st == 0 && pos == 4, tp);
    float half[3];
    CHILD_EXPECT_OK(ds4tp_recv_logits(tp, half, 3), tp);
    CHILD_EXPECT(half[2] == 2.5f, tp);
    const ds4tp_batch_item items[3] = {{5, 1, 0}, {6, 2, 0}, {7, 3, 0}};
    CHILD_EXPECT_OK(ds4tp_send_eval_batch(tp, items, 3, 0), tp);
    CHILD_EXPECT_OK(ds4tp_wait_ack(tp, 0, &st), tp);
    // Bad arguments never reach the wire.
    CHILD_EXPECT_OK(ds4tp_send_sync_images(tp, 5, toks.data(), 4, &img, 1, 0), tp);
    CHILD_EXPECT_OK(ds4tp_wait_sync(tp, 5, &st, &pos), tp);
    img.data_width = 65;
    CHILD_EXPECT_RC(ds4tp_send_sync_images(tp, 5, toks.data(), 4, &img, 1, 0), DS4TP_EINVAL, tp);
    CHILD_EXPECT_RC(ds4tp_send_eval(tp, 0, 1, 1, 0), DS4TP_EINVAL, tp);
    CHILD_EXPECT_RC(ds4tp_send_verify(tp, 5, toks.data(), 9, 0), DS4TP_EINVAL, tp);
    CHILD_EXPECT_RC(ds4tp_send_mtp(tp, 5, 1, 1, 8), DS4TP_EINVAL, tp);
    CHILD_EXPECT(ds4tp_failed(tp) == 0, tp);
    CHILD_EXPECT_OK(ds4tp_send_stop(tp), tp);
    return 0;
  };
  auto worker = [](ds4tp_pair *tp, Ctx &) -> int {
    if (int rc = connect_attach(tp)) return rc;
    ds4tp_command cmd;
    ds4tp_command_init(&cmd);
    CHILD_EXPECT_OK(ds4tp_recv_command(tp, &cmd, 5000), tp);
    CHILD_EXPECT(cmd.kind == DS4TP_CMD_SYNC_IMAGES && cmd.n_tokens == 4 && cmd.tokens[3] == 6, tp);
    CHILD_EXPECT(
        cmd.n_images == 1 && cmd.images[0].token_count == 2 && cmd.images[0].embd[127] == 0.5f, tp);
    CHILD_EXPECT(cmd.logits_floats == 3, tp);
    CHILD_EXPECT_RC(ds4tp_recv_command(tp, &cmd, 10), DS4TP_ESTATE, tp);  // SYNC_ACK owed
    CHILD_EXPECT_OK(ds4tp_send_sync_ack(tp, 0, 4), tp);
    const float half[3] = {0.5f, 1.5f, 2.5f};
    CHILD_EXPECT_OK(ds4tp_send_logits(tp, half, 3), tp);
    ds4tp_command_free(&cmd);
    CHILD_EXPECT_OK(ds4tp_recv_command(tp, &cmd, 5000), tp);
    CHILD_EXPECT(
        cmd.kind == DS4TP_CMD_EVAL_BATCH && cmd.n_items == 3 && cmd.items[2].session_id == 7, tp);
    CHILD_EXPECT_OK(ds4tp_send_ack(tp, 0), tp);
    ds4tp_command_free(&cmd);
    CHILD_EXPECT_OK(ds4tp_recv_command(tp, &cmd, 5000), tp);
    CHILD_EXPECT_OK(ds4tp_send_sync_ack(tp, 0, 4), tp);
    ds4tp_command_free(&cmd);
    CHILD_EXPECT_OK(ds4tp_recv_command(tp, &cmd, 5000), tp);
    CHILD_EXPECT(cmd.kind == DS4TP_CMD_STOP, tp);
    CHILD_EXPECT_RC(ds4tp_recv_command(tp, &cmd, 10), DS4TP_ESTATE, tp);
    ds4tp_command_free(&cmd);
    ds4tp_command_free(&cmd);  // twice is harmless
    return 0;
  };
  Outcome o = run_pair(s, leader, worker);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("a leader that sends STOP and exits at once does not fail a worker that has not read it yet") {
  RankSetup s = setup(DS4TP_TRANSPORT_TCP);
  auto leader = [](ds4tp_pair *tp, Ctx &) -> int {
    if (int rc = connect_attach(tp)) return rc;
    CHILD_EXPECT_OK(ds4tp_send_stop(tp), tp);
    return 0;  // ds4tp_free closes at once
  };
  auto worker = [](ds4tp_pair *tp, Ctx &) -> int {
    if (int rc = connect_attach(tp)) return rc;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // busy elsewhere
    CHILD_EXPECT(ds4tp_failed(tp) == 0, tp);
    ds4tp_worker_ops ops = toy_worker_ops();
    CHILD_EXPECT_OK(ds4tp_worker_run(tp, &ops, nullptr), tp);  // reads the STOP, returns 0
    return 0;
  };
  Outcome o = run_pair(s, leader, worker);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("a reply sent just before the worker closes is still delivered to the leader") {
  int transport = GENERATE(from_range(local_transports()));
  RankSetup s;
  s.transport = transport;
  auto worker = [](ds4tp_pair *tp, Ctx &) -> int {
    CHILD_EXPECT_OK(ds4tp_connect(tp), tp);
    ds4tp_command cmd;
    ds4tp_command_init(&cmd);
    CHILD_EXPECT_OK(ds4tp_recv_command(tp, &cmd, 10000), tp);
    ds4tp_command_free(&cmd);
    CHILD_EXPECT_OK(ds4tp_send_ack(tp, 0), tp);
    return 0;  // the harness frees the pair and exits at once
  };
  auto leader = [](ds4tp_pair *tp, Ctx &c) -> int {
    CHILD_EXPECT_OK(ds4tp_connect(tp), tp);
    CHILD_EXPECT_OK(ds4tp_send_session_create(tp, 7, 128), tp);
    // Let the worker ack and close before this rank reads anything.
    int st = 0;
    waitpid(c.worker_pid, &st, 0);
    // A leader busy with its own half for a while (longer than a reader
    // needs to finish a frame it started) must still get the reply.
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    int32_t status = -1;
    CHILD_EXPECT_OK(ds4tp_wait_ack(tp, 7, &status), tp, "after the worker closed");
    CHILD_EXPECT(status == 0, tp, "status %d", int(status));
    // Once the reply is taken, the close counts: failed latches by itself.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!ds4tp_failed(tp) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    CHILD_EXPECT(ds4tp_failed(tp), tp);
    return 0;
  };
  Outcome o = run_pair(s, leader, worker);
  INFO(o.describe());
  REQUIRE(o.leader == 0);
}
