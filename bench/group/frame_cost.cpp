// What a framed message costs the kernel next to its bare payload: raw
// exchanges over loopback TCP (two processes, no library) of several
// message sizes, e.g. 16384 (a 16 KiB vector) and 16400 (the same vector
// with the group's 16-byte step header in front). Each size has its own
// connection and its own thread, and the threads take turns in blocks of
// exchanges, so a load change hits every size alike. Own threads matter:
// Linux copies a TCP send into the sending thread's page fragment (32
// KiB), so sizes sent from one thread shift each other's offsets there.
// Prints the p50 of each size and its ratio to the first. --one-thread
// sends every size from one thread instead, to show how sizes sent from
// one thread shift each other (ds4tp_bench gives each variant a thread).
// --pin puts the parent on CPU 0 and the child on CPU 1, as ds4tp_bench
// pins its ranks. --per-round also prints each size's p50 in every round:
// on some hosts the framed sizes' cost comes and goes in stretches of
// seconds, for raw sockets as for the library (bench/README.md, "Targets").
//   g++ -O2 -std=c++17 -o /tmp/frame_cost bench/group/frame_cost.cpp -lpthread
//   /tmp/frame_cost [--one-thread] [--pin] [--per-round] [rounds] size...
//   (default: 20 16384 16400)
#include <arpa/inet.h>
#include <fcntl.h>
#include <sched.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

namespace {

constexpr int kBlock = 300;  // exchanges per turn; the first tenth unrecorded

// The library's data socket tuning (net::tune_data_socket), non-blocking.
void tune(int fd) {
  int one = 1, buf = 4 << 20;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool would_block() { return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR; }

// One exchange: send n and receive n, busy, like ds4tp_bench's raw busy.
// False when the peer closed or the socket failed.
bool exchange(int fd, const char *out, char *in, size_t n) {
  size_t sent = 0, got = 0;
  while (sent < n || got < n) {
    if (sent < n) {
      ssize_t k = send(fd, out + sent, n - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (k > 0) sent += size_t(k);
      if (k < 0 && !would_block()) return false;
    }
    if (got < n) {
      ssize_t k = recv(fd, in + got, n - got, MSG_DONTWAIT);
      if (k > 0) got += size_t(k);
      if (k == 0 || (k < 0 && !would_block())) return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char **argv) {
  int arg = 1;
  bool one_thread = false, pin = false, per_round = false;
  for (; arg < argc && argv[arg][0] == '-' && argv[arg][1] == '-'; arg++) {
    if (std::strcmp(argv[arg], "--one-thread") == 0) one_thread = true;
    else if (std::strcmp(argv[arg], "--pin") == 0) pin = true;
    else if (std::strcmp(argv[arg], "--per-round") == 0) per_round = true;
    else break;  // refused below as a size
  }
  const int rounds = argc > arg ? std::atoi(argv[arg++]) : 20;
  std::vector<size_t> sizes;
  for (int i = arg; i < argc; i++) sizes.push_back(size_t(std::strtoull(argv[i], nullptr, 10)));
  if (sizes.empty()) sizes = {16384, 16400};
  const int n = int(sizes.size());
  if (rounds < 1 || std::count(sizes.begin(), sizes.end(), size_t(0)) > 0) {
    std::fprintf(stderr,
                 "usage: frame_cost [--one-thread] [--pin] [--per-round] [ROUNDS >= 1 [BYTES > 0 "
                 "...]]\n");
    return 2;
  }

  int ls = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  if (bind(ls, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0 || listen(ls, n) != 0 ||
      getsockname(ls, reinterpret_cast<sockaddr *>(&a), &al) != 0) {
    std::perror("frame_cost: listen");
    return 1;
  }
  const pid_t kid = fork();
  if (kid < 0) {
    std::perror("frame_cost: fork");
    return 1;
  }
  const bool leader = kid != 0;
  if (pin) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(leader ? 0 : 1, &one);
    if (sched_setaffinity(0, sizeof one, &one) != 0) std::perror("frame_cost: --pin");
  }
  std::vector<int> fds(static_cast<size_t>(n));
  for (int v = 0; v < n; v++) {
    int fd = leader ? accept(ls, nullptr, nullptr) : socket(AF_INET, SOCK_STREAM, 0);
    if (!leader && connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0) fd = -1;
    if (fd < 0) {
      std::perror("frame_cost: connect");
      return 1;
    }
    tune(fd);
    fds[size_t(v)] = fd;
  }

  std::mutex mu;
  std::condition_variable cv;
  int turn = 0;
  bool broken = false;
  std::vector<std::vector<double>> us(static_cast<size_t>(n));
  std::vector<std::vector<char>> out, in;
  for (int v = 0; v < n; v++) {
    out.emplace_back(sizes[size_t(v)], char(v));
    in.emplace_back(sizes[size_t(v)]);
  }
  auto block = [&](int v) {
    for (int i = 0; i < kBlock && !broken; i++) {
      const double t0 = now_us();
      if (!exchange(fds[size_t(v)], out[size_t(v)].data(), in[size_t(v)].data(), sizes[size_t(v)]))
        broken = true;
      if (i >= kBlock / 10) us[size_t(v)].push_back(now_us() - t0);
    }
  };
  if (one_thread) {
    for (int r = 0; r < rounds; r++)
      for (int v = 0; v < n; v++) block(v);
  } else {
    std::vector<std::thread> threads;
    for (int v = 0; v < n; v++)
      threads.emplace_back([&, v] {
        for (int r = 0; r < rounds; r++) {
          {
            std::unique_lock<std::mutex> l(mu);
            cv.wait(l, [&] { return turn % n == v; });
          }
          block(v);
          {
            std::lock_guard<std::mutex> l(mu);
            turn++;
          }
          cv.notify_all();
        }
      });
    for (auto &t : threads) t.join();
  }
  if (broken) {
    std::fprintf(stderr, "frame_cost: a connection closed or failed\n");
    return 1;
  }
  if (!leader) return 0;
  const size_t per_block = size_t(kBlock - kBlock / 10);
  auto median = [](std::vector<double> s) {
    std::sort(s.begin(), s.end());
    return s[s.size() / 2];
  };
  for (int v = 0; v < n && per_round; v++) {
    const auto &s = us[size_t(v)];
    std::printf("%zu bytes, p50 per round:", sizes[size_t(v)]);
    for (size_t b = 0; b + per_block <= s.size(); b += per_block)
      std::printf(" %.1f", median({s.begin() + long(b), s.begin() + long(b + per_block)}));
    std::printf("\n");
  }
  double first = 0;
  for (int v = 0; v < n; v++) {
    auto &s = us[size_t(v)];
    std::sort(s.begin(), s.end());
    const double p50 = s[s.size() / 2];
    if (v == 0) first = p50;
    std::printf("%zu bytes: p50 %.2f us, %.3fx\n", sizes[size_t(v)], p50, p50 / first);
  }
  int st = 0;
  waitpid(kid, &st, 0);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
