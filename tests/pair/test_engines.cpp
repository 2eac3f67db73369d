// The example engines, end to end, over every local transport: the C demo
// (calls the gates itself) and the CPU engine whose kernel threads drive
// the gates through the gate service or through their own callback
// machinery. Each checks its hidden state bit for bit against a
// single-process reference and against the peer's.
#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <vector>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/ranks.hpp"

using namespace ds4tp::test;

namespace {

struct Run {
  int exit_code = -1;  // -1: killed at the deadline or by a signal
  std::string output;  // stdout and stderr together
};

// Runs `argv` with a deadline, capturing its output.
Run run_program(const std::vector<std::string> &argv, int timeout_ms) {
  Run r;
  int fds[2];
  if (pipe(fds) != 0) return r;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    std::vector<char *> args;
    for (auto &a : argv) args.push_back(const_cast<char *>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  char buf[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) {
      kill(pid, SIGKILL);  // its spawned worker dies with its connection
      r.output += "\n[killed at the test deadline]";
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    if (poll(&p, 1, int(left)) <= 0) continue;
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    r.output.append(buf, size_t(n));
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  return r;
}

}  // namespace

TEST_CASE("the C demo engine (gate calls) is bit-exact over every local transport") {
  int transport = GENERATE(from_range(local_transports()));
  Run r = run_program({DS4TP_DEMO_BIN, "--transport", ds4tp_transport_name(transport), "--tokens",
                       "6", "--layers", "4", "--embd", "512", "--spin-us", "20"},
                      100000);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  REQUIRE_THAT(r.output, Catch::Contains("demo OK") &&
                             Catch::Contains(std::string("transport ") +
                                             ds4tp_transport_name(transport)));
}

TEST_CASE("the CPU engine (kernel threads) is bit-exact through the service and callbacks") {
  int transport = GENERATE(from_range(local_transports()));
  const char *mode = GENERATE("service", "callback");
  Run r = run_program({DS4TP_CPU_ENGINE_BIN, "--mode", mode, "--transport",
                       ds4tp_transport_name(transport), "--threads", "2", "--tokens", "6",
                       "--layers", "4", "--embd", "512", "--ffn", "32"},
                      100000);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  REQUIRE_THAT(r.output, Catch::Contains("cpu engine OK") &&
                             Catch::Contains("reference: bit-identical") &&
                             Catch::Contains(std::string("mode ") + mode) &&
                             Catch::Contains(std::string("transport ") +
                                             ds4tp_transport_name(transport)));
}
