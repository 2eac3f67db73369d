// The signal handler, its pipe and the thread that makes the calls
// (signal_calls.hpp). POSIX: the same on Linux and macOS.
#include "os/signal_calls.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "os/os.hpp"

namespace ds4tp::os {
namespace {

struct Entry {
  const void *key;
  int signo;
  std::function<void()> fn;
};

struct Registry {
  std::mutex mu;  // held while calls run: forget waits for them
  std::vector<Entry> entries;
  std::vector<int> installed;  // signals whose handler is ours
  bool started = false;
};

Registry &registry() {
  static Registry *r = new Registry;  // never destroyed: its thread outlives main
  return *r;
}

// The pipe's write end, the handler's only state.
volatile sig_atomic_t g_pipe_w = -1;

void on_signal(int signo) {
  const int saved = errno;
  const auto byte = static_cast<unsigned char>(signo);
  if (g_pipe_w >= 0) (void)!write(g_pipe_w, &byte, 1);
  errno = saved;
}

void serve(int fd) {
  name_this_thread("ds4tp-signal");
  for (;;) {
    unsigned char signo = 0;
    const ssize_t k = read(fd, &signo, 1);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return;
    Registry &reg = registry();
    std::lock_guard<std::mutex> l(reg.mu);
    for (const Entry &e : reg.entries)
      if (e.signo == signo) e.fn();
  }
}

// The pipe and thread once, the handler once per signal (reg.mu held).
bool install(Registry &reg, int signo, std::string &why) {
  if (!reg.started) {
    int fds[2];
    if (pipe(fds) != 0) return why = std::string("pipe: ") + std::strerror(errno), false;
    for (int fd : fds) fcntl(fd, F_SETFD, FD_CLOEXEC);
    // A full pipe drops a call; the handler never blocks.
    fcntl(fds[1], F_SETFL, fcntl(fds[1], F_GETFL) | O_NONBLOCK);
    g_pipe_w = fds[1];
    std::thread(serve, fds[0]).detach();
    reg.started = true;
  }
  if (std::find(reg.installed.begin(), reg.installed.end(), signo) != reg.installed.end())
    return true;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (sigaction(signo, &sa, nullptr) != 0)
    return why = "signal " + std::to_string(signo) + " cannot be caught: " + std::strerror(errno),
           false;
  reg.installed.push_back(signo);
  return true;
}

void erase(Registry &reg, const void *key) {
  reg.entries.erase(std::remove_if(reg.entries.begin(), reg.entries.end(),
                                   [&](const Entry &e) { return e.key == key; }),
                    reg.entries.end());
}

}  // namespace

bool call_on_signal(const void *key, int signo, std::function<void()> fn, std::string &why) {
  if (signo <= 0 || signo >= 256 || signo == SIGKILL || signo == SIGSTOP)
    return why = "signal " + std::to_string(signo) + " cannot be caught", false;
  Registry &reg = registry();
  std::lock_guard<std::mutex> l(reg.mu);
  erase(reg, key);
  if (!install(reg, signo, why)) return false;
  reg.entries.push_back({key, signo, std::move(fn)});
  return true;
}

void forget_signal_calls(const void *key) {
  Registry &reg = registry();
  std::lock_guard<std::mutex> l(reg.mu);
  erase(reg, key);
}

}  // namespace ds4tp::os
