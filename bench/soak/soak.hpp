// What the files of ds4tp_soak share (the overview is in main.cpp): the
// deadlines and bounds, the exit statuses, output lines, child processes,
// resource samples, the driver's buffers, payload words, the faults and
// how a cycle is judged. common.cpp and faults.cpp define it; pair.cpp and
// group.cpp are the two modes; main.cpp parses the arguments.
#pragma once

#include <sys/types.h>
#include <time.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ds4tp/ds4tp.h"

namespace soak {

// ---- deadlines --------------------------------------------------------
// Short bring-up and op deadlines, so a fault inside bring-up or a stopped
// group rank ends a cycle in seconds; the pair keeps the library's default
// liveness (peer_silence_ms 1000).
constexpr int kConnectMs = 3000;
constexpr int kGroupOpMs = 2000;
constexpr int kSilenceMs = 1000;
constexpr int kArrivalMs = 10000;  // a desync in this driver: ETIMEDOUT, not a 5 min wait
constexpr int kSlackMs = 1500;     // scheduling slack on a shared 2-core host
// A survivor must fail within these of the fault (ms): a death at once
// (1 s: a gate's 750 ms deadline at worst), a stop after the liveness bound (pairs: no heartbeat for
// peer_silence_ms, one 100 ms beat late at worst; tcp groups the same, shm
// groups a rank seen stopped for 1 s), a death in bring-up at the connect
// deadline.
constexpr int kKillBoundMs = 1000 + kSlackMs;
constexpr int kStopBoundMs = kSilenceMs + 100 + kSlackMs;
constexpr int kBringupBoundMs = kConnectMs + kSlackMs;
constexpr int kChildExitMs = 10000;  // a survivor child must exit by itself after its peer
constexpr int kCycleHangS = 60;      // the watchdog's bound on one cycle

// Child exit statuses.
constexpr int kExitOk = 0, kExitNamed = 10, kExitUnexpected = 11, kExitSetup = 12;
// A step's status when the call succeeded but the bits are wrong.
constexpr int kWrongBits = 1;
// A survivor's status when no call failed long past the fault's bound:
// the fault went unnoticed (a stopped rank, resumed, is simply waited for),
// and the survivor gives up so that the cycle ends.
constexpr int kUnnoticed = 2;

inline uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // shared by all processes: times cross them
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

inline uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// ---- output (common.cpp) ------------------------------------------------

// One write per line, so lines of processes sharing stdout never interleave.
void emit(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// Library messages go last on a line: no newlines, quotes made single.
std::string one_line(const char *s);
// The errors a survivor may name for a fault of its peer.
bool named_code(int rc);
// A status for the lines: kWrongBits, kUnnoticed, "-" or the DS4TP_E* name.
const char *code_name(int rc);

// ---- resources (common.cpp) ---------------------------------------------

struct Usage {
  long fds = -1, rss_kb = -1, threads = -1;
};
Usage usage();
// The "sample" line, after returning the heap's free memory to the system.
void print_sample(const char *tag, const char *role, long n, uint64_t t0);

// ---- child processes (common.cpp) ---------------------------------------

// Starts this binary with `args`; `keep_fd` (or -1) stays open across exec.
// The child dies with this process and runs in a process group of its own
// (common.cpp says why).
pid_t spawn(const std::vector<std::string> &args, int keep_fd = -1, int keep_fd2 = -1);
// Reaps `pid`, killing it when it outlives ms; says how it ended.
std::string reap(pid_t pid, int ms, int *status);
bool exited_with(int st, int code);
bool killed(int st);
// Reads one line (without its newline) from fd within ms.
bool read_line(int fd, int ms, std::string &line);

// ---- the watchdog (common.cpp) ------------------------------------------

// A cycle that runs past kCycleHangS is a hang: say where, then exit (the
// children go with this process).
struct Watchdog {
  std::atomic<uint64_t> since{0};
  std::atomic<const char *> stage{"idle"};
  std::atomic<long> cycle{0};
  std::string tag;
  void set(const char *s) {
    stage.store(s);
    since.store(now_ns());
  }
  void run();
};
extern Watchdog g_dog;

// ---- buffers (common.cpp) -----------------------------------------------

// The driver's own buffers, sized once for the largest call and kept for
// the process's life, so that its RSS moves only with what the library
// holds (per-call vectors of random sizes would leave the allocator's
// fragmentation in the figures).
struct Buffers {
  static constexpr size_t kBytes = 2 << 20;  // > 1 MiB big gate, 300000 f32, 4 x 200001 bytes
  std::vector<uint8_t> a = std::vector<uint8_t>(kBytes), b = std::vector<uint8_t>(kBytes);
  std::vector<int> sum = std::vector<int>(300000);
  std::vector<float> logits = std::vector<float>(16 + 2048);
  std::vector<int32_t> tokens = std::vector<int32_t>(64);
};
Buffers &bufs();

// ---- payload words (common.cpp) -----------------------------------------

// Words that name (cycle seed, rank, what, i): a stale or misplaced
// payload never matches.
uint32_t word_base(uint64_t seed, int rank, uint64_t what);
void fill_words(void *p, uint64_t bytes, uint32_t base);
bool check_words(const void *p, uint64_t bytes, uint32_t base);

// ---- faults and verdicts (faults.cpp) -----------------------------------

enum class Fault { None, Kill, Stop, Exit, BringupKill };
const char *fault_name(Fault f);
Fault pick_fault(std::mt19937_64 &rng);

// Sends one fault to a pid from its own thread after a delay: SIGKILL, or
// SIGSTOP and, stop_ms later, SIGCONT. cancel() drops a fault not yet
// sent; a stopped pid always gets its SIGCONT before join() returns.
class Injector {
 public:
  ~Injector() { join(); }
  void start(Fault f, pid_t pid, int delay_ms, int stop_ms);
  void cancel();
  void join();
  uint64_t fired_ns();

 private:
  std::thread t_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool cancel_ = false;
  uint64_t fired_ns_ = 0;
};

// What one rank's side of a cycle came to.
struct Side {
  int rc = 0;          // first failure: a DS4TP_E* status or kWrongBits; 0 none
  uint64_t t_err = 0;  // when it returned
  long ops = 0;        // calls completed
  std::string where, msg;
};

struct Verdict {
  bool ok = true;
  std::string why;
  void no(const std::string &w) {
    if (ok) why = w;
    ok = false;
  }
};

// Judges a survivor's side: no fault, success; a fault, a named error
// within the fault's bound of the moment it was injected.
void judge_survivor(const char *who, Fault f, const Side &s, uint64_t fired, Verdict &v,
                    double &ms);
// True once a fault sent at `fired` (0: not yet) is past its bound, and,
// for a stop, past the SIGCONT too.
bool past_bound(Fault f, uint64_t fired, int stop_ms);
// How the victim child must end: killed, or by itself.
void judge_victim(Fault f, int st, const std::string &how, Verdict &v);

// ---- the modes (pair.cpp, group.cpp) ------------------------------------

struct Args {
  std::string mode, tag;
  int transport = DS4TP_TRANSPORT_TCP, role = 0, port = -1, port_fd = -1, rank = -1, n = 0;
  int plan_fd = -1, report_fd = -1;
  double seconds = 60;
  uint64_t seed = 0;
  long ops = -1, exit_after = -1;
  bool has_seed = false;
};

// The pair's identity; a group's differs only in its model id.
ds4tp_identity pair_identity();
int pair_child(const Args &a);
int pair_supervisor(const Args &a);
int group_child(const Args &a);
int group_rank1(const Args &a);
int group_supervisor(const Args &a);

}  // namespace soak
