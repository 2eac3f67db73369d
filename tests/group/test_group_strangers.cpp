// Strangers at a group's listeners: rank 0's rendezvous and the data
// listeners serve every connection at once, so garbage, zeros, huge
// lengths, half-sent messages held open, resets, hundreds of idle
// connections, a replayed key proof and joins of another group are each
// dropped (and logged with the cause) while the real ranks form the group.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "auth/proof.hpp"
#include "common/clock.hpp"
#include "group/rendezvous.hpp"
#include "group/wire.hpp"
#include "support/group_util.hpp"
#include "net/endpoint.hpp"

using namespace ds4tp;
using namespace ds4tp::group;

namespace {

struct Captured {
  std::mutex mu;
  std::vector<std::string> lines;
  bool has(const std::string &s) {
    std::lock_guard<std::mutex> l(mu);
    for (auto &x : lines)
      if (x.find(s) != std::string::npos) return true;
    return false;
  }
  std::string all() {
    std::lock_guard<std::mutex> l(mu);
    std::string s;
    for (auto &x : lines) s += x + "\n";
    return s;
  }
};

void capture(void *ud, int, const char *msg) {
  auto *c = static_cast<Captured *>(ud);
  std::lock_guard<std::mutex> l(c->mu);
  c->lines.emplace_back(msg);
}

Options desk_options(int size, Captured &cap) {
  Options o;
  o.rank = 0;
  o.size = size;
  o.connect_timeout_ns = 10'000'000'000ull;
  o.chunk_bytes = 1 << 16;
  o.log = Logger(capture, &cap, DS4TP_LOG_DEBUG);
  o.job_name = "DS4TP_JOB_ID=this-job";
  o.job = job_token(o.job_name);
  return o;
}

// Thread-safe (no Catch2 assertion): an invalid fd when it failed.
net::Fd raw_connect(int port) {
  net::Fd fd;
  Error e;
  net::dial_tcp("127.0.0.1", port, now_ns() + 2'000'000'000ull, fd, e);
  return fd;
}

bool send_bytes(const net::Fd &fd, const void *p, size_t n) {
  Error e;
  return fd.valid() &&
         net::write_all(fd.get(), p, n, now_ns() + 2'000'000'000ull, "stranger", e) == 0;
}

// The bytes a rank sends after the nonce: the fixed join and its hello.
// `job`: another job's name (empty: o's job).
std::vector<uint8_t> join_bytes(const Options &o, int rank, const wire::Nonce &nonce,
                                uint32_t size_claim = 0, const std::string &job = "") {
  wire::Hello hello;
  hello.role = DS4TP_ROLE_WORKER;
  hello.id = o.id;
  const std::vector<uint8_t> hb = wire::encode_hello(hello);
  Join j;
  j.rank = uint32_t(rank);
  j.size = size_claim ? size_claim : uint32_t(o.size);
  j.chunk = o.chunk_bytes;
  j.data_port = 1;
  j.hello_bytes = uint32_t(hb.size());
  j.has_mac = o.key.empty() ? 0 : 1;
  j.job = job.empty() ? o.job : job_token(job);
  std::vector<uint8_t> out(kJoinFixedBytes);
  encode_join(j, out.data());
  if (j.has_mac) {
    join_mac(o.key, nonce, out.data(), j.mac);
    encode_join(j, out.data());
  }
  out.insert(out.end(), hb.begin(), hb.end());
  return out;
}

// A real rank's side of the join: read the nonce, answer it (any thread).
bool join_as(const Options &o, int rank, int port, net::Fd &out) {
  net::Fd fd = raw_connect(port);
  uint8_t nm[kNonceMsgBytes];
  wire::Nonce nonce{};
  Error e;
  if (!fd.valid() ||
      net::read_exact(fd.get(), nm, sizeof nm, now_ns() + 5'000'000'000ull, "nonce", e) ||
      decode_nonce(nm, sizeof nm, nonce, e))
    return false;
  const std::vector<uint8_t> b = join_bytes(o, rank, nonce);
  out = std::move(fd);
  return send_bytes(out, b.data(), b.size());
}

double seconds_since(uint64_t t0) { return double(now_ns() - t0) / 1e9; }

}  // namespace

TEST_CASE("group rendezvous: strangers are dropped, each logged, while the ranks join",
          "[group][strangers]") {
  Captured cap;
  Options o = desk_options(3, cap);
  net::Fd lfd;
  int port = 0;
  Error err;
  REQUIRE(net::listen_tcp("127.0.0.1", 0, lfd, port, err) == 0);

  std::vector<net::Fd> strangers;
  auto stranger = [&](const void *p, size_t n) {
    strangers.push_back(raw_connect(port));
    REQUIRE(strangers.back().valid());
    if (n) REQUIRE(send_bytes(strangers.back(), p, n));
  };
  uint8_t garbage[300];
  for (size_t i = 0; i < sizeof garbage; i++) garbage[i] = uint8_t(i * 37 + 11);
  stranger(garbage, sizeof garbage);
  const uint8_t zeros[kJoinFixedBytes] = {};
  stranger(zeros, sizeof zeros);
  // A join whose hello length is absurd, and one held half-sent.
  Join huge;
  huge.rank = 1;
  huge.size = 3;
  huge.hello_bytes = 0xffffffffu;
  uint8_t hb[kJoinFixedBytes];
  encode_join(huge, hb);
  stranger(hb, sizeof hb);
  stranger(hb, 40);  // slowloris: 40 of 96 bytes, then nothing
  // A reset instead of a close.
  {
    net::Fd r = raw_connect(port);
    linger lg{1, 0};
    setsockopt(r.get(), SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  }
  // Joins of another job at the same port (one of another size, one
  // claiming rank 0): refused, and the group goes on forming.
  const wire::Nonce stale{};
  const std::vector<uint8_t> other = join_bytes(o, 2, stale, 5, "DS4TP_JOB_ID=other-job");
  stranger(other.data(), other.size());
  const size_t other_at = strangers.size() - 1;
  const std::vector<uint8_t> zero_rank = join_bytes(o, 0, stale, 0, "SLURM_JOB_ID=7");
  stranger(zero_rank.data(), zero_rank.size());
  for (int i = 0; i < 200; i++) stranger(nullptr, 0);  // idle: 200 of the 1024 fds

  net::Fd r1, r2;
  bool joined = false;
  std::thread ranks([&] { joined = join_as(o, 1, port, r1) && join_as(o, 2, port, r2); });
  const uint64_t t0 = now_ns();
  Joined in;
  const int rc = serve_joins(o, lfd.get(), now_ns() + o.connect_timeout_ns, in, err);
  const double secs = seconds_since(t0);
  ranks.join();
  INFO(err.message);
  INFO(cap.all());
  REQUIRE(joined);
  REQUIRE(rc == DS4TP_OK);
  CHECK(in.ctl[1].valid());
  CHECK(in.ctl[2].valid());
  // No stranger held the ranks up: a connection's own allowance is 5 s.
  CHECK(secs < 3.0);
  CHECK(cap.has("not a join: group join: bad magic"));
  CHECK(cap.has("hello"));  // the absurd hello length, named
  CHECK(cap.has("a join claiming rank 2 belongs to another job"));
  CHECK(cap.has("a join claiming rank 0 belongs to another job"));
  CHECK(cap.has("too many connections pending"));
  // The refused join of another group reads why, after its nonce.
  uint8_t nm[kNonceMsgBytes];
  REQUIRE(net::read_exact(strangers[other_at].get(), nm, sizeof nm, now_ns() + 2'000'000'000ull,
                          "nonce", err) == 0);
  uint8_t rb[kRosterBytes];
  REQUIRE(net::read_exact(strangers[other_at].get(), rb, sizeof rb, now_ns() + 2'000'000'000ull, "roster",
                          err) == 0);
  Roster ro;
  REQUIRE(decode_roster(rb, sizeof rb, ro, err) == 0);
  CHECK(ro.status == DS4TP_EPROTO);
  CHECK(ro.message.find("another job") != std::string::npos);
  CHECK(ro.message.find("DS4TP_JOB_ID=this-job") != std::string::npos);
}

TEST_CASE("group rendezvous: a replayed key proof is refused and the keyed group forms",
          "[group][strangers]") {
  Captured cap;
  Options o = desk_options(2, cap);
  const char k[] = "0123456789abcdef-group-key";
  o.key = auth::Key(k, sizeof k - 1);
  net::Fd lfd;
  int port = 0;
  Error err;
  REQUIRE(net::listen_tcp("127.0.0.1", 0, lfd, port, err) == 0);
  wire::Nonce earlier{};
  earlier[0] = 1;  // a proof made for another group's nonce
  const std::vector<uint8_t> replay = join_bytes(o, 1, earlier);
  net::Fd s = raw_connect(port);
  REQUIRE(send_bytes(s, replay.data(), replay.size()));
  net::Fd r1;
  bool joined = false;
  std::thread rank([&] { joined = join_as(o, 1, port, r1); });
  Joined in;
  const int rc = serve_joins(o, lfd.get(), now_ns() + o.connect_timeout_ns, in, err);
  rank.join();
  INFO(err.message);
  INFO(cap.all());
  REQUIRE(joined);
  REQUIRE(rc == DS4TP_OK);
  CHECK(in.ctl[1].valid());
  CHECK(cap.has("key proof does not verify"));
}

TEST_CASE("group rendezvous: a refused rank of this job ends bring-up at once, naming it",
          "[group][strangers]") {
  struct Case {
    int rank;
    uint32_t size;
    const char *named;
  };
  for (const Case &c : {Case{1, 4, "rank 1 has group size 4, rank 0 has 2"},
                        Case{0, 0, "a second rank 0 joined"}}) {
    INFO(c.named);
    Captured cap;
    Options o = desk_options(2, cap);  // a 10 s deadline
    net::Fd lfd;
    int port = 0;
    Error err;
    REQUIRE(net::listen_tcp("127.0.0.1", 0, lfd, port, err) == 0);
    const std::vector<uint8_t> bad = join_bytes(o, c.rank, wire::Nonce{}, c.size);
    net::Fd s = raw_connect(port);
    REQUIRE(send_bytes(s, bad.data(), bad.size()));
    Joined in;
    const uint64_t t0 = now_ns();
    const int rc = serve_joins(o, lfd.get(), now_ns() + o.connect_timeout_ns, in, err);
    INFO(err.message);
    CHECK(rc != DS4TP_OK);
    CHECK(rc != DS4TP_ETIMEDOUT);
    CHECK(err.message.find("bring-up ended") != std::string::npos);
    CHECK(err.message.find(c.named) != std::string::npos);
    CHECK(seconds_since(t0) < 5.0);  // not at the deadline
  }
}

TEST_CASE("group rendezvous: rank 0 says who joined and who it waits for, and names the missing "
          "rank at the deadline",
          "[group][strangers]") {
  Captured cap;
  Options o = desk_options(3, cap);
  o.connect_timeout_ns = 800'000'000ull;
  o.report_ns = 100'000'000ull;
  net::Fd lfd;
  int port = 0;
  Error err;
  REQUIRE(net::listen_tcp("127.0.0.1", 0, lfd, port, err) == 0);
  net::Fd r1;
  bool joined = false;
  std::thread rank([&] { joined = join_as(o, 1, port, r1); });
  Joined in;
  const int rc = serve_joins(o, lfd.get(), now_ns() + o.connect_timeout_ns, in, err);
  rank.join();
  INFO(err.message);
  INFO(cap.all());
  REQUIRE(joined);
  CHECK(rc == DS4TP_ETIMEDOUT);
  CHECK(err.message.find("rank 2 did not join within 800 ms") != std::string::npos);
  CHECK(cap.has("2 of 3 ranks joined (0, 1); waiting for 2"));
}

TEST_CASE("group data listener: strangers and other groups' links are dropped",
          "[group][strangers]") {
  Captured cap;
  Options o = desk_options(3, cap);
  LinkToken token{};
  token[0] = 42;
  LinkToken other = token;
  other[15] = 1;
  net::Fd lfd;
  int port = 0;
  Error err;
  REQUIRE(net::listen_tcp("127.0.0.1", 0, lfd, port, err) == 0);
  std::vector<net::Fd> strangers;
  auto link = [&](uint32_t rank, const LinkToken &t, size_t bytes) {
    uint8_t l[kLinkBytes];
    encode_link(rank, t, l);
    strangers.push_back(raw_connect(port));
    REQUIRE(send_bytes(strangers.back(), l, bytes));
  };
  link(1, other, kLinkBytes);  // another group's token, claiming rank 1
  link(0, token, kLinkBytes);  // rank 0 never dials rank 0
  link(2, token, 10);          // half a link message, held
  const uint8_t junk[kLinkBytes] = {1, 2, 3};
  strangers.push_back(raw_connect(port));
  REQUIRE(send_bytes(strangers.back(), junk, sizeof junk));
  link(1, token, kLinkBytes);  // the real ranks, after the strangers
  link(2, token, kLinkBytes);
  std::vector<net::Fd> fds(3);
  const uint64_t t0 = now_ns();
  const int rc = serve_links(o, token, {1, 2}, lfd.get(), now_ns() + o.connect_timeout_ns, fds, err);
  INFO(err.message);
  INFO(cap.all());
  REQUIRE(rc == DS4TP_OK);
  CHECK(fds[1].valid());
  CHECK(fds[2].valid());
  CHECK(seconds_since(t0) < 3.0);
  CHECK(cap.has("shows another group's token"));
  CHECK(cap.has("which takes no link from it"));
  CHECK(cap.has("not a data link"));
}

TEST_CASE("group: a tcp group forms at once with strangers at rank 0's port",
          "[group][strangers]") {
  // Rank 0 listens on a port found free here; the other ranks start
  // 300 ms late, so the strangers are there first.
  net::Fd probe;
  int port = 0;
  Error err;
  REQUIRE(net::listen_tcp("127.0.0.1", 0, probe, port, err) == 0);
  probe.reset();
  // The crowd is a process, not a thread: the ranks are forked next, and
  // a fork with other threads running is what ThreadSanitizer refuses.
  int report[2], hold[2];
  REQUIRE(pipe(report) == 0);
  REQUIRE(pipe(hold) == 0);
  const pid_t crowd = fork();
  REQUIRE(crowd >= 0);
  if (crowd == 0) {
    close(report[0]);
    close(hold[1]);
    std::vector<net::Fd> strangers;
    net::Fd first;
    Error e;
    if (net::dial_tcp("127.0.0.1", port, now_ns() + 5'000'000'000ull, first, e) == 0) {
      const uint8_t held[20] = {0x44, 0x34, 0x47, 0x4a};
      send_bytes(first, held, sizeof held);  // half a join, held open
      strangers.push_back(std::move(first));
      for (int i = 0; i < 50; i++) strangers.push_back(raw_connect(port));
    }
    int opened = 0;
    for (const auto &f : strangers) opened += f.valid();
    (void)!write(report[1], &opened, sizeof opened);
    char b;
    (void)!read(hold[0], &b, 1);  // until the test closes its end
    _exit(0);
  }
  close(report[1]);
  close(hold[0]);
  const uint64_t t0 = now_ns();
  test::GroupRun run = test::run_group_procs(
      3, DS4TP_TRANSPORT_TCP,
      [](ds4tp_group *g, int, uint64_t &d, std::string &why) {
        return test::group_checks(g, {1, 2560}, why, d);
      },
      [port](int r, ds4tp_group_options &o, ds4tp_identity &) {
        o.rendezvous_port = port;
        o.connect_timeout_ms = 20000;
        if (r > 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
      });
  const double secs = seconds_since(t0);
  int opened = 0;
  pollfd pf{report[0], POLLIN, 0};
  if (poll(&pf, 1, 5000) == 1) (void)!read(report[0], &opened, sizeof opened);
  close(hold[1]);  // the crowd ends
  close(report[0]);
  waitpid(crowd, nullptr, 0);
  INFO(run.why);
  CHECK(run.rc == 0);
  CHECK(opened == 51);
  CHECK(secs < 4.0);  // one held connection used to cost 5 s
}
