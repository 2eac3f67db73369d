#include "support/ranks.hpp"

#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/loopback.hpp"
#include "link/shm/pair_link.hpp"

namespace ds4tp::test {

std::vector<int> local_transports() {
  std::vector<int> t{DS4TP_TRANSPORT_TCP};
  std::string why;
  if (ds4tp::shm_available(nullptr, why)) t.push_back(DS4TP_TRANSPORT_SHM);
  return t;
}

ds4tp_identity small_identity(uint32_t n_layer, uint32_t n_embd) {
  ds4tp_identity id;
  ds4tp_identity_init(&id);
  id.model_bytes = 123456789;
  id.model_id = 7;
  id.n_layer = n_layer;
  id.n_embd = n_embd;
  id.n_vocab = 1000;
  id.quant_bits = 4;
  id.ctx_size = 2048;
  return id;
}

float pattern(int rank, uint64_t seq, uint64_t index) {
  uint64_t x = (uint64_t(rank) << 56) ^ (seq * 0x9e3779b97f4a7c15ull) ^ (index * 0x100000001b3ull);
  x ^= x >> 29;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 32;
  return float(uint32_t(x) % 100000) / 7.0f - float(rank);
}

int connect_attach(ds4tp_pair *tp) {
  CHILD_EXPECT_OK(ds4tp_connect(tp), tp);
  CHILD_EXPECT_OK(ds4tp_attach_slab(tp, nullptr, 0), tp);
  return 0;
}

int big_gate(ds4tp_pair *tp, uint64_t bytes) {
  int rank = ds4tp_rank(tp);
  std::vector<uint32_t> out(bytes / 4), in(bytes / 4, 0);
  for (size_t i = 0; i < out.size(); i++) out[i] = uint32_t(i * 2654435761u) ^ uint32_t(rank);
  CHILD_EXPECT_OK(ds4tp_big_gate_exchange(tp, 5, 1, out.data(), in.data(), bytes), tp);
  for (size_t i = 0; i < in.size(); i++)
    CHILD_EXPECT(in[i] == (uint32_t(i * 2654435761u) ^ uint32_t(1 - rank)), tp, "word %zu", i);
  return 0;
}

std::string Outcome::describe() const {
  std::string s = "leader body returned " + std::to_string(leader) + "\n" + leader_failures;
  if (worker_hung)
    s += "worker hung (killed by the harness)\n";
  else if (worker_signal)
    s += "worker killed by signal " + std::to_string(worker_signal) + "\n";
  else
    s += "worker exited " + std::to_string(worker_exit) + "\n";
  return s + worker_failures;
}

int loopback_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

int unused_loopback_port() {
  sockaddr_in a;
  close(bind_loopback(a));
  return ntohs(a.sin_port);
}

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

namespace {

ds4tp_options base_options(const RankSetup &s, int role) {
  ds4tp_options o;
  ds4tp_options_init(&o);
  o.role = role;
  o.transport = s.transport;
  o.listen_port = 0;
  o.gate_timeout_ms = s.gate_timeout_ms;
  o.connect_timeout_ms = s.connect_timeout_ms;
  o.hello_timeout_ms = 2000;
  o.peer_arrival_timeout_ms = 1;  // arrival waits = the gate timeouts (tweaks may change it)
  o.spin_us = s.spin_us;
  o.log_level = s.log_level;
  return o;
}

}  // namespace

Outcome run_pair(const RankSetup &s, const Body &leader, const Body &worker, int wait_ms) {
  Outcome out;
  ds4tp_options lo = base_options(s, DS4TP_ROLE_LEADER);
  if (s.leader_tweak) s.leader_tweak(lo);
  ds4tp_pair *lp = nullptr;
  int rc = ds4tp_new(&lp, &lo, &s.leader_id);
  if (rc != DS4TP_OK) {
    std::fprintf(stderr, "leader ds4tp_new: %s\n", ds4tp_last_error());
    return out;
  }
  int port = ds4tp_listen_port(lp);
  int failures[2] = {-1, -1};
  if (pipe2(failures, O_CLOEXEC) != 0) failures[0] = failures[1] = -1;
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    ds4tp_free(lp);  // the child must not hold the leader's listener
    if (failures[0] >= 0) close(failures[0]);
    set_failure_label("worker");
    set_failure_sink(failures[1]);
    ds4tp_options wo = base_options(s, DS4TP_ROLE_WORKER);
    wo.leader_port = port;
    if (s.worker_tweak) s.worker_tweak(wo);
    ds4tp_pair *wp = nullptr;
    int wrc = ds4tp_new(&wp, &wo, &s.worker_id);
    if (wrc != DS4TP_OK) {
      expect_failed(__FILE__, __LINE__, "worker ds4tp_new == DS4TP_OK", nullptr, true, wrc, false,
                    0);
      _exit(100);
    }
    Ctx ctx;
    ctx.rank = 1;
    int code = worker(wp, ctx);
    ds4tp_free(wp);
    _exit(code & 0xff);
  }
  if (failures[1] >= 0) close(failures[1]);
  Ctx ctx;
  ctx.rank = 0;
  ctx.worker_pid = pid;
  take_failures();
  set_failure_label("leader");
  out.leader = leader(lp, ctx);
  set_failure_label(nullptr);
  out.leader_failures = take_failures();
  ds4tp_free(lp);

  int status = 0;
  int waited = 0;
  for (;;) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0) {
      if (failures[0] >= 0) close(failures[0]);
      return out;
    }
    if (waited >= wait_ms) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      out.worker_hung = true;
      break;
    }
    usleep(5000);
    waited += 5;
  }
  if (WIFEXITED(status)) out.worker_exit = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) out.worker_signal = WTERMSIG(status);
  out.worker_failures = drain_failures(failures[0]);
  if (failures[0] >= 0) close(failures[0]);
  return out;
}

ds4tp_slab_layout layout_of(ds4tp_pair *tp) {
  ds4tp_slab_layout l{};
  l.size = sizeof l;
  ds4tp_slab_layout_get(tp, &l);
  return l;
}

ds4tp_gate_service_options test_service_options() {
  ds4tp_gate_service_options o;
  ds4tp_gate_service_options_init(&o);
  o.spin_us = 20;
  o.yield_us = 200000;
  o.sleep_us = 50;
  return o;
}

int final_barrier(ds4tp_pair *tp) {
  char a = 1, b = 0;
  CHILD_EXPECT_OK(ds4tp_big_gate_exchange(tp, 0, 0xBA11, &a, &b, 1), tp, "final barrier");
  return 0;
}

Hold::Hold() { REQUIRE(pipe(fds_) == 0); }

Hold::~Hold() {
  close(fds_[0]);
  close(fds_[1]);
}

void Hold::done() const { (void)!write(fds_[1], "x", 1); }

bool Hold::wait(int ms) const {
  pollfd p{fds_[0], POLLIN, 0};
  char c;
  return poll(&p, 1, ms) == 1 && read(fds_[0], &c, 1) == 1;
}

}  // namespace ds4tp::test
