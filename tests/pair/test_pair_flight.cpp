// A pair's flight recorder: a peer made late before one gate is the wait
// the recorder shows at that gate, over every local transport; it is
// written on demand, and by itself when a gate fails the pair.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <regex>
#include <string>

#include <unistd.h>

#include "ds4tp/ds4tp.h"
#include "support/expect.hpp"
#include "support/files.hpp"
#include "support/ranks.hpp"

using namespace ds4tp::test;

namespace {

constexpr int kLateMs = 200;
constexpr double kSeenUs = 100000;  // the least wait the leader may see (half the sleep)

// The row gate with `seq`: its peer_wait_us column (-1 for "-") and status.
bool gate_line(const std::string &text, uint64_t seq, double &wait, std::string &status) {
  std::istringstream in(text);
  const std::regex line("^\\s*\\S+\\s+\\S+\\s+(\\S+)\\s+row\\s+\\d+\\s+" + std::to_string(seq) +
                        "\\s+\\d+\\s+(\\S+)$");
  for (std::string l; std::getline(in, l);) {
    std::smatch m;
    if (std::regex_match(l, m, line)) {
      wait = m[1] == "-" ? -1 : std::stod(m[1]);
      status = m[2];
      return true;
    }
  }
  return false;
}

int row_gates(ds4tp_pair *tp, uint64_t from, uint64_t to, uint64_t late_before) {
  for (uint64_t seq = from; seq <= to; seq++) {
    if (seq == late_before) usleep(kLateMs * 1000);
    CHILD_EXPECT_OK(ds4tp_gate_exchange(tp, uint32_t((seq - 1) / 2), uint32_t((seq - 1) % 2), seq),
                    tp);
  }
  return 0;
}

}  // namespace

TEST_CASE("pair flight: the gate a late peer held up shows its wait", "[stats][flight]") {
  int transport = GENERATE(from_range(local_transports()));
  if (transport == DS4TP_TRANSPORT_RDMA) return;  // the fake provider tells no peer arrival
  CAPTURE(ds4tp_transport_name(transport));
  const TempDir tmp("ds4tp-pair-flight");
  REQUIRE(!tmp.path().empty());
  const std::string &dir = tmp.path();
  RankSetup s;
  s.transport = transport;
  s.gate_timeout_ms = 10000;
  Outcome o = run_pair(
      s,
      [&](ds4tp_pair *tp, Ctx &) -> int {
        if (int rc = connect_attach(tp)) return rc;
        if (int rc = row_gates(tp, 1, 4, 0)) return rc;
        const std::string path = dir + "/flight-%r";
        CHILD_EXPECT_OK(ds4tp_dump(tp, path.c_str()), tp);
        const std::string text = read_file(dir + "/flight-0");
        double wait = -1;
        std::string status;
        CHILD_EXPECT(gate_line(text, 3, wait, status) && status == "ok" && wait >= kSeenUs, tp,
                     "gate 3's peer wait %.1f us (%s) in:\n%s", wait, status.c_str(), text.c_str());
        CHILD_EXPECT(text.find("ds4tp pair flight recorder: rank 0 (leader)") != std::string::npos,
                     tp, "%s", text.c_str());
        const std::string trace = read_file(dir + "/flight-0.json");
        CHILD_EXPECT(trace.find("\"peer_wait_us\"") != std::string::npos, tp, "%s", trace.c_str());
        CHILD_EXPECT(ds4tp_dump(tp, nullptr) == DS4TP_EINVAL, tp, "no path and no DS4TP_PAIR_DUMP");
        return 0;
      },
      [&](ds4tp_pair *tp, Ctx &) -> int {
        if (int rc = connect_attach(tp)) return rc;
        return row_gates(tp, 1, 4, 3);
      });
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("pair flight: a gate that fails the pair writes the recorder", "[stats][flight]") {
  const TempDir tmp("ds4tp-pair-flight");
  REQUIRE(!tmp.path().empty());
  const std::string &dir = tmp.path();
  const std::string path = dir + "/failed-%r";
  setenv("DS4TP_PAIR_DUMP", path.c_str(), 1);  // the ranks fork with it
  RankSetup s;
  s.transport = DS4TP_TRANSPORT_TCP;
  s.gate_timeout_ms = 10000;
  Outcome o = run_pair(
      s,
      [&](ds4tp_pair *tp, Ctx &) -> int {
        if (int rc = connect_attach(tp)) return rc;
        if (int rc = row_gates(tp, 1, 2, 0)) return rc;
        const int rc = ds4tp_gate_exchange(tp, 1, 0, 3);  // the worker has left
        CHILD_EXPECT(rc != DS4TP_OK, tp, "gate 3 without a worker succeeded");
        const std::string text = read_file(dir + "/failed-0");
        CHILD_EXPECT(text.find("the pair failed: ") != std::string::npos, tp, "%s", text.c_str());
        double wait = -1;
        std::string ok, failed;
        CHILD_EXPECT(gate_line(text, 2, wait, ok) && ok == "ok", tp, "gate 2:\n%s", text.c_str());
        CHILD_EXPECT(gate_line(text, 3, wait, failed) && failed.rfind("DS4TP_E", 0) == 0, tp,
                     "gate 3 (failed):\n%s", text.c_str());
        return 0;
      },
      [&](ds4tp_pair *tp, Ctx &) -> int {
        if (int rc = connect_attach(tp)) return rc;
        return row_gates(tp, 1, 2, 0);  // then it exits
      });
  unsetenv("DS4TP_PAIR_DUMP");
  REQUIRE_RANKS_OK(o);
}
