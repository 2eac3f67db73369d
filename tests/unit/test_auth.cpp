// Pre-shared key authentication: key sources and their checks, the mutual
// challenge-response, refusal of keyless and wrong-key peers while the
// leader keeps waiting, tamper detection, and the data-connection proof.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "auth/proof.hpp"
#include "support/fault_proxy.hpp"
#include "support/procs.hpp"
#include "support/ranks.hpp"
#include "wire/codec.hpp"
#include "wire/hello.hpp"

using namespace ds4tp::test;

namespace {

const char kKey[] = "0123456789abcdef0123456789abcdef";
const char kOtherKey[] = "fedcba9876543210fedcba9876543210";

// Collects log lines of handles in this process.
struct LogSink {
  std::mutex mu;
  std::string text;
  static void fn(void *ud, int, const char *msg) {
    auto *s = static_cast<LogSink *>(ud);
    std::lock_guard<std::mutex> lock(s->mu);
    s->text += msg;
    s->text += '\n';
  }
  std::string get() {
    std::lock_guard<std::mutex> lock(mu);
    return text;
  }
};

void use_key(ds4tp_options &o, const char *key) {
  o.psk = key;
  o.psk_bytes = uint32_t(std::strlen(key));
}

std::string temp_dir() {
  char tmpl[] = "/tmp/ds4tp-auth-XXXXXX";
  const char *d = mkdtemp(tmpl);
  return d ? d : "/tmp";
}

std::string write_file(const std::string &dir, const char *name, const std::string &body,
                       mode_t mode) {
  std::string path = dir + "/" + name;
  int fd = open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
  (void)!write(fd, body.data(), body.size());
  close(fd);
  chmod(path.c_str(), mode);
  return path;
}

int try_new(const ds4tp_options &o, std::string *msg = nullptr) {
  ds4tp_identity id = small_identity();
  ds4tp_pair *tp = nullptr;
  int rc = ds4tp_new(&tp, &o, &id);
  if (msg) *msg = ds4tp_last_error();
  ds4tp_free(tp);
  return rc;
}

// Connects, attaches and runs `gates` row gates checked bit for bit.
int connect_and_gate(ds4tp_pair *tp, int gates) {
  int rc = ds4tp_connect(tp);
  if (rc) return rc;
  rc = ds4tp_attach_slab(tp, nullptr, 0);
  if (rc) return rc;
  auto *slab = static_cast<uint8_t *>(ds4tp_slab_base(tp));
  int rank = ds4tp_rank(tp);
  for (int s = 1; s <= gates; s++) {
    uint32_t slot = uint32_t(s - 1) % 8, layer = slot / 2, gate = slot % 2;
    auto *out = reinterpret_cast<float *>(slab + ds4tp_slab_out_offset(tp, layer, gate));
    auto *in = reinterpret_cast<float *>(slab + ds4tp_slab_in_offset(tp, layer, gate));
    for (int i = 0; i < 256; i++) out[i] = pattern(rank, uint64_t(s), uint64_t(i));
    rc = ds4tp_gate_exchange(tp, layer, gate, uint64_t(s));
    if (rc) return rc;
    for (int i = 0; i < 256; i++) {
      float want = pattern(1 - rank, uint64_t(s), uint64_t(i));
      CHILD_EXPECT(std::memcmp(&in[i], &want, 4) == 0, tp, "gate seq %d float %d", s, i);
    }
  }
  return 0;
}

// A worker child: dials `port` with `key` (NULL = none) after `delay_ms`,
// reports its connect result, then runs a few gates.
Child spawn_worker(ds4tp_pair *leader, int port, const char *key, int delay_ms,
                   int connect_timeout_ms = 5000, int gates = 4) {
  return Child::spawn([=](int fd) {
    ds4tp_free(leader);  // not ours: the child must not hold the listener
    usleep(useconds_t(delay_ms) * 1000);
    ds4tp_options o = rank_options(DS4TP_ROLE_WORKER, port);
    o.connect_timeout_ms = connect_timeout_ms;
    if (key) use_key(o, key);
    ds4tp_identity id = small_identity();
    ds4tp_pair *tp = nullptr;
    int rc = ds4tp_new(&tp, &o, &id);
    if (rc) send_report(fd, kReportResult, 0, rc);
    CHILD_EXPECT_OK(rc, nullptr, "worker ds4tp_new");
    uint64_t t0 = mono_ns();
    rc = connect_and_gate(tp, gates);
    send_report(fd, kReportResult, int64_t((mono_ns() - t0) / 1000000), rc, tp);
    ds4tp_free(tp);
    return 0;
  });
}

ds4tp_pair *keyed_leader(const char *key, LogSink &log, int connect_timeout_ms = 10000) {
  ds4tp_options o = rank_options(DS4TP_ROLE_LEADER);
  o.connect_timeout_ms = connect_timeout_ms;
  o.log_fn = LogSink::fn;
  o.log_user_data = &log;
  o.log_level = DS4TP_LOG_WARN;
  if (key) use_key(o, key);
  ds4tp_identity id = small_identity();
  ds4tp_pair *tp = nullptr;
  REQUIRE(ds4tp_new(&tp, &o, &id) == DS4TP_OK);
  return tp;
}

}  // namespace

TEST_CASE("pre-shared key sources are checked at ds4tp_new") {
  unsetenv("DS4TP_PSK");
  unsetenv("DS4TP_PSK_FILE");
  ds4tp_options o = rank_options(DS4TP_ROLE_LEADER);
  std::string msg;
  std::string dir = temp_dir();

  SECTION("psk and psk_bytes must agree") {
    o.psk_bytes = 20;
    REQUIRE(try_new(o, &msg) == DS4TP_EINVAL);
    REQUIRE_THAT(msg, Catch::Contains("psk is NULL"));
    o.psk = kKey;
    o.psk_bytes = 0;
    REQUIRE(try_new(o, &msg) == DS4TP_EINVAL);
  }
  SECTION("a short key is refused with advice") {
    o.psk = "short";
    o.psk_bytes = 5;
    REQUIRE(try_new(o, &msg) == DS4TP_EINVAL);
    REQUIRE_THAT(msg, Catch::Contains("5 bytes") && Catch::Contains("at least 16"));
  }
  SECTION("psk and psk_file together are ambiguous") {
    use_key(o, kKey);
    o.psk_file = "/nonexistent";
    REQUIRE(try_new(o, &msg) == DS4TP_EINVAL);
    REQUIRE_THAT(msg, Catch::Contains("not both"));
  }
  SECTION("a missing key file is named") {
    o.psk_file = "/nonexistent/ds4tp.key";
    REQUIRE(try_new(o, &msg) == DS4TP_EINVAL);
    REQUIRE_THAT(msg, Catch::Contains("/nonexistent/ds4tp.key"));
  }
  SECTION("a key file others can read is refused") {
    std::string path = write_file(dir, "open.key", std::string(kKey) + "\n", 0644);
    o.psk_file = path.c_str();
    REQUIRE(try_new(o, &msg) == DS4TP_EINVAL);
    REQUIRE_THAT(msg, Catch::Contains("0644") && Catch::Contains("chmod 600"));
    std::string g = write_file(dir, "group.key", std::string(kKey), 0640);
    o.psk_file = g.c_str();
    REQUIRE(try_new(o, &msg) == DS4TP_EINVAL);
    unlink(path.c_str());
    unlink(g.c_str());
  }
  SECTION("a private key file works; a directory does not") {
    std::string path = write_file(dir, "ok.key", std::string(kKey) + "\n", 0600);
    o.psk_file = path.c_str();
    REQUIRE(try_new(o, &msg) == DS4TP_OK);
    o.psk_file = dir.c_str();
    chmod(dir.c_str(), 0700);
    REQUIRE(try_new(o, &msg) == DS4TP_EINVAL);
    unlink(path.c_str());
  }
  SECTION("the environment is used when the options name no key") {
    setenv("DS4TP_PSK", "tooshort", 1);
    REQUIRE(try_new(o, &msg) == DS4TP_EINVAL);
    REQUIRE_THAT(msg, Catch::Contains("DS4TP_PSK"));
    setenv("DS4TP_PSK", kKey, 1);
    REQUIRE(try_new(o) == DS4TP_OK);
    unsetenv("DS4TP_PSK");
    std::string path = write_file(dir, "env.key", "0123456789\n", 0600);
    setenv("DS4TP_PSK_FILE", path.c_str(), 1);
    REQUIRE(try_new(o, &msg) == DS4TP_EINVAL);  // 10 bytes after the newline goes
    REQUIRE_THAT(msg, Catch::Contains("DS4TP_PSK_FILE") && Catch::Contains("10 bytes"));
    unsetenv("DS4TP_PSK_FILE");
    unlink(path.c_str());
  }
  rmdir(dir.c_str());
}

TEST_CASE("ranks holding the same key pair up and exchange bit for bit") {
  // Leader: key bytes in the options; worker: the same key from a key file
  // with a trailing newline (which is not part of the key).
  std::string dir = temp_dir();
  std::string path = write_file(dir, "pair.key", std::string(kKey) + "\n", 0600);
  RankSetup s;
  s.leader_tweak = [](ds4tp_options &o) { use_key(o, kKey); };
  s.worker_tweak = [&](ds4tp_options &o) { o.psk_file = path.c_str(); };
  auto body = [](ds4tp_pair *tp, Ctx &) -> int {
    CHILD_EXPECT_OK(connect_and_gate(tp, 16), tp, "keyed pair");
    return 0;
  };
  Outcome o = run_pair(s, body, body);
  unlink(path.c_str());
  rmdir(dir.c_str());
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("a peer without the key or with another key is refused while the leader waits") {
  struct Case {
    const char *name;
    const char *leader_key, *stranger_key, *worker_key;
    const char *stranger_says;
  };
  Case c = GENERATE(Case{"no key", kKey, nullptr, kKey, "requires a pre-shared key"},
                    Case{"wrong key", kKey, kOtherKey, kKey, "keys differ"},
                    Case{"key against a keyless leader", nullptr, kKey, nullptr,
                         "leader has none"});
  INFO(c.name);
  LogSink log;
  ds4tp_pair *leader = keyed_leader(c.leader_key, log);
  int port = ds4tp_listen_port(leader);
  // The stranger dials at once; the real worker 400 ms later.
  Child stranger = spawn_worker(leader, port, c.stranger_key, 0);
  Child worker = spawn_worker(leader, port, c.worker_key, 400);
  int rc = connect_and_gate(leader, 4);
  Report rs, rw;
  bool got_s = stranger.next_of(kReportResult, rs, 10000);
  bool got_w = worker.next_of(kReportResult, rw, 10000);
  stranger.reap(2000);
  INFO("stranger: " << stranger.failures());
  worker.reap(2000);
  INFO("worker: " << worker.failures());
  std::string leader_msg = ds4tp_errmsg(leader);
  ds4tp_free(leader);
  INFO("leader: " << leader_msg << "\nlog:\n" << log.get() << "stranger: " << rs.msg);
  REQUIRE(rc == DS4TP_OK);
  REQUIRE(got_w);
  REQUIRE(rw.rc == DS4TP_OK);
  REQUIRE(got_s);
  REQUIRE(rs.rc == DS4TP_EAUTH);
  REQUIRE(rs.value < 3000);  // refused at once, not at its 5 s deadline
  REQUIRE_THAT(std::string(rs.msg), Catch::Contains(c.stranger_says));
  REQUIRE_THAT(log.get(), Catch::Contains("dropping connection") &&
                              Catch::Contains("DS4TP_EAUTH"));
}

TEST_CASE("with only a wrong-key worker the leader times out naming the refusals") {
  LogSink log;
  ds4tp_pair *leader = keyed_leader(kKey, log, 1500);
  int port = ds4tp_listen_port(leader);
  Child stranger = spawn_worker(leader, port, kOtherKey, 0);
  uint64_t t0 = mono_ns();
  int rc = ds4tp_connect(leader);
  double took = double(mono_ns() - t0) / 1e6;
  std::string msg = ds4tp_errmsg(leader);
  Report rs;
  REQUIRE(stranger.next_of(kReportResult, rs, 5000));
  stranger.reap(2000);
  INFO("stranger: " << stranger.failures());
  ds4tp_free(leader);
  INFO(msg);
  REQUIRE(rc == DS4TP_ETIMEDOUT);
  REQUIRE(took >= 1400);
  REQUIRE(took < 4000);
  REQUIRE_THAT(msg, Catch::Contains("1 of them for a missing or wrong key") &&
                        Catch::Contains("same pre-shared key"));
  REQUIRE(rs.rc == DS4TP_EAUTH);
}

TEST_CASE("a hello altered on the way is caught by the key") {
  // Offset of ctx_size in a keyed control stream: the 44-byte nonce
  // message, the 12-byte preamble, then 60 bytes into the hello body.
  const uint64_t keyed_at = 44 + 12 + 60, plain_at = 12 + 60;
  int dir = GENERATE(int(FaultProxy::ToLeader), int(FaultProxy::ToWorker));
  bool keyed = GENERATE(true, false);
  INFO((dir == FaultProxy::ToLeader ? "worker's hello" : "leader's hello")
       << (keyed ? ", keyed" : ", no key"));
  LogSink log;
  ds4tp_pair *leader = keyed_leader(keyed ? kKey : nullptr, log, 2500);
  FaultProxy proxy(ds4tp_listen_port(leader));
  Child worker = spawn_worker(leader, proxy.port(), keyed ? kKey : nullptr, 0, 2500, 0);
  const uint64_t at = keyed ? keyed_at : plain_at;
  proxy.set_tap([&](int conn, int d, uint64_t off, uint8_t *p, size_t n) {
    if (conn != 0 || d != dir || at < off || at >= off + n) return;
    p[at - off] ^= 0x40;  // ctx_size 2048 -> 2048 ^ 64 = 2112
  });
  proxy.start();
  int rc = ds4tp_connect(leader);
  uint32_t peer_ctx = ds4tp_peer_ctx_size(leader);
  Report rw;
  bool got = worker.next_of(kReportResult, rw, 8000);
  proxy.stop();
  worker.reap(2000);
  INFO("worker: " << worker.failures());
  ds4tp_free(leader);
  REQUIRE(got);
  INFO("leader rc " << rc << ", worker: " << rw.msg << "\nlog:\n" << log.get());
  if (!keyed) {
    // ctx_size is reported, not compared: without a key nothing notices.
    REQUIRE(rc == DS4TP_OK);
    REQUIRE(rw.rc == DS4TP_OK);
    if (dir == FaultProxy::ToLeader) REQUIRE(peer_ctx == 2112);
    return;
  }
  REQUIRE(rw.rc == DS4TP_EAUTH);
  REQUIRE(rc == DS4TP_ETIMEDOUT);  // the leader kept waiting for a real worker
  if (dir == FaultProxy::ToLeader)
    REQUIRE_THAT(log.get(), Catch::Contains("DS4TP_EAUTH"));
}

namespace {
// Sends `msg` and returns the bytes the leader answers before closing
// (-1 if it neither answers nor closes within 3 s).
long answer_bytes(int port, const std::vector<uint8_t> &msg) {
  int fd = loopback_connect(port);
  if (fd < 0) return -1;
  (void)!write(fd, msg.data(), msg.size());
  long total = 0;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 3000) <= 0) {
      total = -1;
      break;
    }
    char b[256];
    ssize_t n = read(fd, b, sizeof b);
    if (n <= 0) break;
    total += n;
  }
  close(fd);
  return total;
}
}  // namespace

TEST_CASE("the pair cookie alone does not admit a data connection when a key is set") {
  LogSink log;
  ds4tp_pair *leader = keyed_leader(kKey, log, 8000);
  int leader_port = ds4tp_listen_port(leader);
  FaultProxy proxy(leader_port);
  Child worker = spawn_worker(leader, proxy.port(), kKey, 0, 8000, 4);
  // Read the cookie from the leader's hello as it passes, and when the
  // hello is through (its proof not yet), race the worker with two forged
  // data connections straight to the leader.
  uint64_t cookie = 0;
  long plain = -2, forged = -2;
  const uint64_t hello_end = 44 + 12 + 124;
  proxy.set_tap([&](int conn, int d, uint64_t off, uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
      uint64_t at = off + i;
      if (conn == 0 && d == FaultProxy::ToWorker && at >= 44 + 12 + 24 && at < 44 + 12 + 32)
        cookie |= uint64_t(p[i]) << (8 * (at - (44 + 12 + 24)));
    }
  });
  FaultProxy::Trigger t;
  t.conn = 0;
  t.dir = FaultProxy::ToWorker;
  t.at = hello_end;
  t.action = [&] {
    plain = answer_bytes(leader_port, ds4tp::wire::encode_data(cookie));
    ds4tp::wire::Mac fake{};
    fake.fill(0x5a);
    forged = answer_bytes(leader_port, ds4tp::wire::encode_data(cookie, &fake));
  };
  proxy.set_trigger(t);
  proxy.start();
  int rc = connect_and_gate(leader, 4);
  Report rw;
  bool got = worker.next_of(kReportResult, rw, 10000);
  proxy.stop();
  worker.reap(2000);
  INFO("worker: " << worker.failures());
  ds4tp_free(leader);
  INFO("log:\n" << log.get());
  REQUIRE(proxy.triggered());
  REQUIRE(cookie != 0);
  REQUIRE(plain == 0);   // closed without an ack
  REQUIRE(forged == 0);
  REQUIRE_THAT(log.get(), Catch::Contains("carries no proof") &&
                              Catch::Contains("does not verify"));
  REQUIRE(rc == DS4TP_OK);
  REQUIRE(got);
  REQUIRE(rw.rc == DS4TP_OK);
}

TEST_CASE("listening beyond loopback without a key logs a warning") {
  // In a network namespace of its own, so nothing outside can reach the port.
  Child c = Child::spawn([](int fd) {
    if (unshare(CLONE_NEWNET) != 0) {
      send_report(fd, kReportResult, 0, 77);
      return 0;
    }
    for (const char *key : {(const char *)nullptr, kKey}) {
      LogSink log;
      ds4tp_options o = rank_options(DS4TP_ROLE_LEADER);
      o.listen_host = "0.0.0.0";
      o.log_fn = LogSink::fn;
      o.log_user_data = &log;
      o.log_level = DS4TP_LOG_WARN;
      if (key) use_key(o, key);
      ds4tp_identity id = small_identity();
      ds4tp_pair *tp = nullptr;
      int rc = ds4tp_new(&tp, &o, &id);
      ds4tp_free(tp);
      bool warned = log.get().find("without a pre-shared key") != std::string::npos;
      if (rc != 0 || warned != (key == nullptr)) {
        send_report(fd, kReportResult, key ? 2 : 1, rc ? rc : 1);
        CHILD_EXPECT_OK(rc, nullptr, "ds4tp_new %s a key", key ? "with" : "without");
        CHILD_EXPECT(warned == (key == nullptr), nullptr, "%s a key", key ? "with" : "without");
      }
    }
    send_report(fd, kReportResult, 0, 0);
    return 0;
  });
  Report r;
  REQUIRE(c.next_of(kReportResult, r, 10000));
  c.reap(2000);
  if (r.rc == 77) {
    std::printf("ds4tp-skip: cannot create a network namespace here\n");
    return;
  }
  INFO("case " << r.value << "\n" << c.failures());
  REQUIRE(r.rc == 0);
  // The loopback default never warns.
  LogSink log;
  ds4tp_pair *tp = keyed_leader(nullptr, log);
  ds4tp_free(tp);
  REQUIRE(log.get().find("without a pre-shared key") == std::string::npos);
}

TEST_CASE("proofs are bound to the key, both nonces, the transcript and the role") {
  using namespace ds4tp;
  auth::Key key(kKey, sizeof kKey - 1), other(kOtherKey, sizeof kOtherKey - 1);
  auth::Transcript t;
  Error err;
  REQUIRE(auth::fresh_nonce(t.worker_nonce, err) == DS4TP_OK);
  REQUIRE(auth::fresh_nonce(t.leader_nonce, err) == DS4TP_OK);
  REQUIRE(t.worker_nonce != t.leader_nonce);  // 256 random bits each
  t.worker_nonce_msg = wire::encode_auth_nonce(t.worker_nonce);
  t.leader_nonce_msg = wire::encode_auth_nonce(t.leader_nonce);
  wire::Hello h;
  h.role = DS4TP_ROLE_WORKER;
  h.id.n_layer = 4;
  t.worker_hello_msg = wire::encode_hello(h);
  h.role = DS4TP_ROLE_LEADER;
  h.cookie = 99;
  t.leader_hello_msg = wire::encode_hello(h);

  wire::Mac w{}, l{}, d{}, a{}, x{};
  REQUIRE(auth::worker_proof(key, t, w, err) == DS4TP_OK);
  REQUIRE(auth::leader_proof(key, t, l, err) == DS4TP_OK);
  REQUIRE(auth::data_proof(key, t, 99, d, err) == DS4TP_OK);
  REQUIRE(auth::data_ack_proof(key, t, 99, a, err) == DS4TP_OK);
  // Deterministic, and every label gives a different MAC.
  REQUIRE(auth::worker_proof(key, t, x, err) == DS4TP_OK);
  REQUIRE(auth::mac_equal(w, x));
  REQUIRE(!auth::mac_equal(w, l));
  REQUIRE(!auth::mac_equal(d, a));
  REQUIRE(!auth::mac_equal(w, d));
  // Another key, another nonce, a changed hello byte or cookie: no match.
  REQUIRE(auth::worker_proof(other, t, x, err) == DS4TP_OK);
  REQUIRE(!auth::mac_equal(w, x));
  auth::Transcript t2 = t;
  t2.leader_nonce[0] ^= 1;
  t2.leader_nonce_msg = wire::encode_auth_nonce(t2.leader_nonce);
  REQUIRE(auth::worker_proof(key, t2, x, err) == DS4TP_OK);
  REQUIRE(!auth::mac_equal(w, x));
  REQUIRE(auth::data_proof(key, t2, 99, x, err) == DS4TP_OK);
  REQUIRE(!auth::mac_equal(d, x));
  t2 = t;
  t2.worker_hello_msg[12 + 60] ^= 1;  // ctx_size, which nothing else checks
  REQUIRE(auth::worker_proof(key, t2, x, err) == DS4TP_OK);
  REQUIRE(!auth::mac_equal(w, x));
  REQUIRE(auth::leader_proof(key, t2, x, err) == DS4TP_OK);
  REQUIRE(!auth::mac_equal(l, x));
  REQUIRE(auth::data_proof(key, t, 98, x, err) == DS4TP_OK);
  REQUIRE(!auth::mac_equal(d, x));
  // No key, no proof.
  REQUIRE(auth::worker_proof(auth::Key(), t, x, err) == DS4TP_EAUTH);
}

TEST_CASE("auth messages round trip and reject wrong sizes") {
  using namespace ds4tp::wire;
  ds4tp::Error err;
  Nonce n{};
  n.fill(3);
  auto m = encode_auth_nonce(n);
  Preamble p;
  REQUIRE(decode_preamble(m.data(), m.size(), kHelloMaxBytes, p, err) == DS4TP_OK);
  REQUIRE(p.kind == uint16_t(Kind::AuthNonce));
  Nonce back{};
  REQUIRE(decode_auth_nonce_body(m.data() + kPreambleBytes, p.body_bytes, back, err) == DS4TP_OK);
  REQUIRE(back == n);
  REQUIRE(decode_auth_nonce_body(m.data() + kPreambleBytes, 31, back, err) == DS4TP_EPROTO);
  Mac mac{};
  mac.fill(9);
  auto d = encode_data(0x1122334455667788ull, &mac);
  uint64_t cookie = 0;
  bool has = false;
  Mac got{};
  REQUIRE(decode_data_body(d.data() + kPreambleBytes, d.size() - kPreambleBytes, cookie, has, got,
                           err) == DS4TP_OK);
  REQUIRE((has && got == mac && cookie == 0x1122334455667788ull));
  // The plain decoder (no key) refuses a body with a proof.
  REQUIRE(decode_data_body(d.data() + kPreambleBytes, d.size() - kPreambleBytes, cookie, err) ==
          DS4TP_EPROTO);
  auto r = encode_auth_reject(RejectReason::BadProof);
  uint32_t reason = 0;
  REQUIRE(decode_auth_reject_body(r.data() + kPreambleBytes, 4, reason, err) == DS4TP_OK);
  REQUIRE(reason == uint32_t(RejectReason::BadProof));
  REQUIRE_THAT(std::string(reject_reason_name(reason)), Catch::Contains("keys differ"));
}
