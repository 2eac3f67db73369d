// ds4tp_soak: the long-lived processes of bench/soak.sh. A leak shows up
// only as growth inside one process that outlives many pairs and groups,
// so each mode below stays up for --seconds and re-forms its pair or group
// every cycle with fresh child processes, injects one fault at random into
// a child, checks that every survivor ends with a named error in time (or,
// without a fault, that every rank succeeds and every payload arrived bit
// for bit), frees everything and samples its own fds, VmRSS and threads.
// Public C API only; linked statically, so the copy soak.sh runs does not
// change under a rebuild of the library.
//
//   ds4tp_soak pair  --transport tcp|shm|rdma --seconds S [--seed N] [--tag NAME]
//   ds4tp_soak group --transport tcp|shm      --seconds S [--seed N] [--tag NAME]
//   ds4tp_soak probe           one line per transport: name, available 0/1, why
//
// Pair: the supervisor takes the leader's or the worker's role at random
// each cycle (so both bring-up paths, the listener's and the dialer's, run
// in the long-lived process) and starts the other side as a child. Group:
// the supervisor is rank 0, a second long-lived process (started once) is
// rank 1, ranks 2..N-1 (N = 3 or 4) are children of the cycle, and the
// victim is one of them. Faults (the child side only): none, SIGKILL at a
// random moment of the traffic, SIGSTOP past the liveness bound then
// SIGCONT, a clean exit (free, exit 0) after a random number of calls, and
// SIGKILL a few ms after start (inside bring-up).
//
// Output, one line each, key=value (soak.sh parses it; msg= comes last):
//   start  tag= pid= seed= transport=
//   cycle  tag= n= role= fault= outcome=ok|named|fail code= ms= ops= child= pids= [msg=]
//   sample tag= role= n= t= fds= rss_kb= threads=
//   fail   tag= n= what=...             (also counted in the cycle line)
//   end    tag= cycles= failures=
// Exit status: 0 when every cycle ended ok or named, 1 otherwise.
//
// Internal modes, started by the two above: pair-child, group-rank.
#include <dirent.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ds4tp/ds4tp.h"

namespace {

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

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // shared by all processes: times cross them
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// One write per line, so lines of processes sharing stdout never interleave.
void emit(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void emit(int fd, const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = std::vsnprintf(buf, sizeof buf - 1, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if (size_t(n) > sizeof buf - 2) n = int(sizeof buf - 2);
  buf[n++] = '\n';
  (void)!write(fd, buf, size_t(n));
}

// Library messages go last on a line: no newlines, quotes made single.
std::string one_line(const char *s) {
  std::string o = s ? s : "";
  for (char &c : o)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
    else if (c == '"') c = '\'';
  if (o.size() > 300) o.resize(300);
  return o;
}

bool named_code(int rc) {
  return rc == DS4TP_ETIMEDOUT || rc == DS4TP_EPEERCLOSED || rc == DS4TP_EFAILED ||
         rc == DS4TP_EIO;
}

const char *code_name(int rc) {
  return rc == kWrongBits ? "wrong-bits" : rc == kUnnoticed ? "unnoticed" : rc == 0 ? "-"
                                                                            : ds4tp_err_name(rc);
}

// ---- resources --------------------------------------------------------

struct Usage {
  long fds = -1, rss_kb = -1, threads = -1;
};

Usage usage() {
  Usage u;
  if (FILE *f = std::fopen("/proc/self/status", "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, f)) {
      if (std::strncmp(line, "VmRSS:", 6) == 0) u.rss_kb = std::atol(line + 6);
      if (std::strncmp(line, "Threads:", 8) == 0) u.threads = std::atol(line + 8);
    }
    std::fclose(f);
  }
  if (DIR *d = opendir("/proc/self/fd")) {
    long n = 0;
    while (dirent *e = readdir(d))
      if (e->d_name[0] != '.') n++;
    closedir(d);
    u.fds = n - 1;  // the directory's own fd
  }
  return u;
}

// ---- faults -----------------------------------------------------------

enum class Fault { None, Kill, Stop, Exit, BringupKill };
const char *fault_name(Fault f) {
  switch (f) {
    case Fault::None: return "none";
    case Fault::Kill: return "kill";
    case Fault::Stop: return "stop";
    case Fault::Exit: return "exit";
    case Fault::BringupKill: return "bringup-kill";
  }
  return "?";
}

Fault pick_fault(std::mt19937_64 &rng) {
  const int r = int(rng() % 100);
  return r < 30 ? Fault::None : r < 55 ? Fault::Kill : r < 70 ? Fault::Stop
         : r < 85 ? Fault::Exit : Fault::BringupKill;
}

// Sends one fault to a pid from its own thread after a delay: SIGKILL, or
// SIGSTOP and, stop_ms later, SIGCONT. cancel() drops a fault not yet
// sent; a stopped pid always gets its SIGCONT before join() returns.
class Injector {
 public:
  ~Injector() { join(); }
  void start(Fault f, pid_t pid, int delay_ms, int stop_ms) {
    t_ = std::thread([=, this] {
      std::unique_lock<std::mutex> lk(mu_);
      if (cv_.wait_for(lk, std::chrono::milliseconds(delay_ms), [&] { return cancel_; })) return;
      fired_ns_ = now_ns();
      if (f != Fault::Stop) {
        kill(pid, SIGKILL);
        return;
      }
      kill(pid, SIGSTOP);
      lk.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(stop_ms));
      kill(pid, SIGCONT);
    });
  }
  void cancel() {
    std::lock_guard<std::mutex> lk(mu_);
    cancel_ = true;
    cv_.notify_all();
  }
  void join() {
    cancel();
    if (t_.joinable()) t_.join();
  }
  uint64_t fired_ns() {
    std::lock_guard<std::mutex> lk(mu_);
    return fired_ns_;
  }

 private:
  std::thread t_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool cancel_ = false;
  uint64_t fired_ns_ = 0;
};

// ---- child processes ----------------------------------------------------

// Starts this binary with `args`; `keep_fd` (or -1) stays open across exec.
// The child dies with this process (PR_SET_PDEATHSIG), so a supervisor
// killed by soak.sh leaves nothing behind. It runs in a process group of
// its own, whose parent (this process) is outside it: a group that holds
// a stopped process and is orphaned gets SIGHUP from the kernel, which
// would otherwise kill a SIGSTOPped child whenever the shell that started
// the soak exits.
pid_t spawn(const std::vector<std::string> &args, int keep_fd = -1, int keep_fd2 = -1) {
  std::vector<char *> argv;
  static char self[] = "/proc/self/exe";
  argv.push_back(self);
  for (const auto &a : args) argv.push_back(const_cast<char *>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid != 0) return pid;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(kExitSetup);
  setpgid(0, 0);
  for (int fd : {keep_fd, keep_fd2})
    if (fd >= 0) fcntl(fd, F_SETFD, 0);
  execv(self, argv.data());
  _exit(127);
}

// Waits for `pid` up to ms; -1 in *status when it is still running.
bool wait_exit(pid_t pid, int ms, int *status) {
  const uint64_t end = now_ns() + uint64_t(ms) * 1000000ull;
  for (;;) {
    int st = 0;
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) {
      *status = st;
      return true;
    }
    if (r < 0 || now_ns() >= end) {
      *status = -1;
      return r < 0;
    }
    usleep(2000);
  }
}

// Reaps `pid`, killing it when it outlives ms; says how it ended.
std::string reap(pid_t pid, int ms, int *status) {
  if (!wait_exit(pid, ms, status)) {
    kill(pid, SIGCONT);
    kill(pid, SIGKILL);
    int st;
    waitpid(pid, &st, 0);
    *status = -1;
    return "hung";
  }
  if (WIFSIGNALED(*status)) return std::string("signal") + std::to_string(WTERMSIG(*status));
  return std::string("exit") + std::to_string(WEXITSTATUS(*status));
}

bool exited_with(int st, int code) { return st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == code; }
bool killed(int st) { return st >= 0 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL; }

// Reads one line (without its newline) from fd within ms.
bool read_line(int fd, int ms, std::string &line) {
  line.clear();
  const uint64_t end = now_ns() + uint64_t(ms) * 1000000ull;
  for (;;) {
    int left = int((end - std::min(end, now_ns())) / 1000000ull);
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || poll(&p, 1, left) <= 0) return false;
    char c;
    ssize_t r = read(fd, &c, 1);
    if (r <= 0) return false;
    if (c == '\n') return true;
    line += c;
  }
}

// ---- the watchdog -----------------------------------------------------

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
  void run() {
    std::thread([this] {
      for (;;) {
        std::this_thread::sleep_for(std::chrono::seconds(1));
        uint64_t s = since.load();
        if (s != 0 && now_ns() - s > uint64_t(kCycleHangS) * 1000000000ull) {
          emit(1, "fail tag=%s n=%ld what=hang stage=%s", tag.c_str(), cycle.load(), stage.load());
          _exit(4);
        }
      }
    }).detach();
  }
};
Watchdog g_dog;

// ---- buffers ------------------------------------------------------------

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
Buffers &bufs() {
  static Buffers b;
  return b;
}

// Returns the heap's free memory to the system before a sample, so the
// RSS read after it is what is in use, not what the allocator kept.
void trim_heap() {
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

// ---- pair traffic -------------------------------------------------------

// The cycle's identity: 4 layers of 16 KiB row vectors, the default
// schedule (every slot in order).
ds4tp_identity pair_identity() {
  ds4tp_identity id;
  ds4tp_identity_init(&id);
  id.model_id = 0x50a4;
  id.n_layer = 4;
  id.n_embd = 4096;
  id.n_vocab = 32000;
  id.quant_bits = 32;
  return id;
}

// Words that name (cycle seed, rank, what, i): a stale or misplaced
// payload never matches.
uint32_t word_base(uint64_t seed, int rank, uint64_t what) {
  return uint32_t(mix(seed ^ (uint64_t(rank) << 60) ^ mix(what)));
}
void fill_words(void *p, uint64_t bytes, uint32_t base) {
  auto *b = static_cast<uint8_t *>(p);
  for (uint64_t i = 0; i < bytes / 4; i++) {
    uint32_t w = base + uint32_t(i) * 0x9e3779b1u;
    std::memcpy(b + i * 4, &w, 4);
  }
  for (uint64_t i = bytes & ~uint64_t(3); i < bytes; i++) b[i] = uint8_t(base >> (i % 4 * 8));
}
bool check_words(const void *p, uint64_t bytes, uint32_t base) {
  const auto *b = static_cast<const uint8_t *>(p);
  for (uint64_t i = 0; i < bytes / 4; i++) {
    uint32_t w = base + uint32_t(i) * 0x9e3779b1u, got;
    std::memcpy(&got, b + i * 4, 4);
    if (got != w) return false;
  }
  for (uint64_t i = bytes & ~uint64_t(3); i < bytes; i++)
    if (b[i] != uint8_t(base >> (i % 4 * 8))) return false;
  return true;
}

// One rank's side of a pair cycle's mixed traffic. Both ranks derive the
// same sequence of calls from the cycle's seed, so they stay in lockstep
// without talking about it.
class PairTraffic {
 public:
  PairTraffic(ds4tp_pair *tp, uint64_t seed) : tp_(tp), seed_(seed), id_(pair_identity()) {
    rank_ = ds4tp_rank(tp);
    layout_.size = sizeof layout_;
    ds4tp_slab_layout_get(tp, &layout_);
    slab_ = static_cast<uint8_t *>(ds4tp_slab_base(tp));
    ds4tp_command_init(&cmd_);
  }
  ~PairTraffic() { ds4tp_command_free(&cmd_); }

  // The session the EVAL, SYNC and HASH frames name.
  int open(std::string &why) {
    if (rank_ == 0) {
      int32_t st = 0;
      int rc = ds4tp_send_session_create(tp_, 1, 4096);
      if (rc == 0) rc = ds4tp_wait_ack(tp_, 1, &st);
      return rc ? fail(rc, "session create") : st ? bad(why, "session create ack status") : 0;
    }
    int rc = recv(DS4TP_CMD_SESSION_CREATE, why);
    if (rc == 0) rc = ds4tp_send_ack(tp_, 0);
    return rc ? fail(rc, "session create") : 0;
  }

  // The leader's STOP; the worker must read it as the next command.
  int close(std::string &why) {
    if (rank_ == 0) return ds4tp_send_stop(tp_) ? fail(-1, "stop") : 0;
    int rc = recv(DS4TP_CMD_STOP, why);
    return rc ? fail(rc, "stop") : 0;
  }

  // Call i of the cycle: 0, a DS4TP_E* status or kWrongBits (why says).
  int step(uint64_t i, std::string &why) {
    const uint64_t r = mix(seed_ ^ (i + 1) * 0xd1b54a32d192ed03ull);
    const int k = int(r % 100);
    if (k < 55) return row(why);
    if (k < 70) return batch(r, why);
    if (k < 75) return big(r, why);
    if (k < 83) return small(r, why);
    if (k < 91) return eval(r, why);
    if (k < 95) return sync(r, why);
    return hash(why);
  }

  const char *last_call() const { return call_; }

 private:
  int fail(int rc, const char *what) {
    call_ = what;
    return rc < 0 ? rc : DS4TP_EFAILED;
  }
  int bad(std::string &why, const std::string &what) {
    why = what;
    return kWrongBits;
  }
  int recv(int kind, std::string &why) {
    int rc = ds4tp_recv_command(tp_, &cmd_, kArrivalMs);
    if (rc) return rc;
    if (cmd_.kind != kind) {
      why = std::string("worker read ") + ds4tp_command_name(cmd_.kind) + ", expected " +
            ds4tp_command_name(kind);
      return kWrongBits;
    }
    return 0;
  }

  int row(std::string &why) {
    call_ = "row gate";
    const uint64_t seq = ++row_seq_;
    const int64_t slot = ds4tp_schedule_slot(&id_, seq);
    const uint32_t layer = uint32_t(slot / 2), gate = uint32_t(slot % 2);
    fill_words(slab_ + ds4tp_slab_out_offset(tp_, layer, gate), layout_.vec_bytes,
               word_base(seed_, rank_, seq));
    if (int rc = ds4tp_gate_exchange(tp_, layer, gate, seq)) return rc;
    if (!check_words(slab_ + ds4tp_slab_in_offset(tp_, layer, gate), layout_.vec_bytes,
                     word_base(seed_, 1 - rank_, seq)))
      return bad(why, "row gate seq " + std::to_string(seq) + ": payload differs");
    return 0;
  }

  int batch(uint64_t r, std::string &why) {
    call_ = "batch gate";
    const uint64_t seq = ++batch_seq_;
    const uint32_t index = uint32_t((r >> 8) % layout_.batch_gates);
    const uint32_t rows = 1 + uint32_t((r >> 16) % DS4TP_BATCH_MAX_ROWS);
    const uint64_t out = ds4tp_slab_batch_out_offset(tp_, index);
    const uint64_t in = ds4tp_slab_batch_in_offset(tp_, index);
    for (uint32_t row = 0; row < rows; row++)
      fill_words(slab_ + out + row * layout_.vec_stride, layout_.vec_bytes,
                 word_base(seed_, rank_, (1ull << 40) + seq * 8 + row));
    if (int rc = ds4tp_batch_gate_exchange(tp_, index, rows, seq)) return rc;
    for (uint32_t row = 0; row < rows; row++)
      if (!check_words(slab_ + in + row * layout_.vec_stride, layout_.vec_bytes,
                       word_base(seed_, 1 - rank_, (1ull << 40) + seq * 8 + row)))
        return bad(why, "batch gate seq " + std::to_string(seq) + " row " +
                            std::to_string(row) + ": payload differs");
    return 0;
  }

  int big(uint64_t r, std::string &why) {
    call_ = "big gate";
    const uint64_t seq = ++big_seq_;
    const uint64_t bytes = 4096 * (1 + (r >> 8) % 256) - (r >> 20) % 4;  // up to 1 MiB, odd sizes
    const uint32_t layer = uint32_t((r >> 32) % id_.n_layer);
    uint8_t *out = bufs().a.data(), *in = bufs().b.data();
    fill_words(out, bytes, word_base(seed_, rank_, (2ull << 40) + seq));
    if (int rc = ds4tp_big_gate_exchange(tp_, layer, seq, out, in, bytes)) return rc;
    if (!check_words(in, bytes, word_base(seed_, 1 - rank_, (2ull << 40) + seq)))
      return bad(why, "big gate seq " + std::to_string(seq) + " (" + std::to_string(bytes) +
                          " bytes): payload differs");
    return 0;
  }

  int small(uint64_t r, std::string &why) {
    call_ = "small exchange";
    const uint64_t seq = ++small_seq_;
    const uint32_t bytes = 1 + uint32_t((r >> 8) % DS4TP_SMALL_EXCHANGE_MAX);
    uint8_t mine[DS4TP_SMALL_EXCHANGE_MAX], peer[DS4TP_SMALL_EXCHANGE_MAX];
    fill_words(mine, bytes, word_base(seed_, rank_, (3ull << 40) + seq));
    if (int rc = ds4tp_small_exchange(tp_, mine, peer, bytes)) return rc;
    if (!check_words(peer, bytes, word_base(seed_, 1 - rank_, (3ull << 40) + seq)))
      return bad(why, "small exchange " + std::to_string(seq) + ": payload differs");
    return 0;
  }

  // EVAL with a logits half back from the worker.
  int eval(uint64_t r, std::string &why) {
    call_ = "EVAL + logits";
    const uint64_t seq = ++eval_seq_;
    const uint32_t floats = 16 + uint32_t((r >> 8) % 2048);
    const int32_t token = int32_t((r >> 24) % 32000);
    float *logits = bufs().logits.data();
    const uint32_t base = word_base(seed_, 1, (4ull << 40) + seq);
    if (rank_ == 0) {
      if (int rc = ds4tp_send_eval(tp_, 1, seq, token, floats)) return rc;
      if (int rc = ds4tp_recv_logits(tp_, logits, floats)) return rc;
      if (!check_words(logits, uint64_t(floats) * 4, base))
        return bad(why, "logits of EVAL " + std::to_string(seq) + " differ");
      return 0;
    }
    if (int rc = recv(DS4TP_CMD_EVAL, why)) return rc;
    if (cmd_.seq != seq || cmd_.token != token || cmd_.logits_floats != floats)
      return bad(why, "EVAL " + std::to_string(seq) + " arrived with other fields");
    fill_words(logits, uint64_t(floats) * 4, base);
    return ds4tp_send_logits(tp_, logits, floats);
  }

  int sync(uint64_t r, std::string &why) {
    call_ = "SYNC";
    const uint32_t n = uint32_t((r >> 8) % 64);
    int32_t *tokens = bufs().tokens.data();
    for (uint32_t t = 0; t < n; t++) tokens[t] = int32_t(mix(r + t) % 32000);
    if (rank_ == 0) {
      int32_t st = 0;
      uint32_t pos = 0;
      if (int rc = ds4tp_send_sync(tp_, 1, tokens, n, 0)) return rc;
      if (int rc = ds4tp_wait_sync(tp_, 1, &st, &pos)) return rc;
      return st == 0 && pos == n ? 0 : bad(why, "SYNC ack with another status or position");
    }
    if (int rc = recv(DS4TP_CMD_SYNC, why)) return rc;
    if (cmd_.n_tokens != n || (n && std::memcmp(cmd_.tokens, tokens, n * 4) != 0))
      return bad(why, "SYNC of " + std::to_string(n) + " tokens arrived with other tokens");
    return ds4tp_send_sync_ack(tp_, 0, n);
  }

  int hash(std::string &why) {
    call_ = "HASH";
    const uint64_t seq = ++hash_seq_, h = mix(seed_ ^ seq);
    if (rank_ == 1) {
      if (int rc = recv(DS4TP_CMD_HASH, why)) return rc;
      if (cmd_.seq != seq || cmd_.hash != h) return bad(why, "HASH arrived with other fields");
    }
    return ds4tp_hash_check(tp_, 1, seq, h);
  }

  ds4tp_pair *tp_;
  uint64_t seed_;
  ds4tp_identity id_;
  int rank_ = 0;
  ds4tp_slab_layout layout_{};
  uint8_t *slab_ = nullptr;
  ds4tp_command cmd_;
  uint64_t row_seq_ = 0, batch_seq_ = 0, big_seq_ = 0, small_seq_ = 0, eval_seq_ = 0,
           hash_seq_ = 0;
  const char *call_ = "bring-up";
};

void quiet_log(void *, int level, const char *msg) {
  if (level <= DS4TP_LOG_WARN) emit(2, "ds4tp[%d]: %s", int(getpid()), msg);
}

ds4tp_options pair_options(int role, int transport, int port) {
  ds4tp_options o;
  ds4tp_options_init(&o);
  o.role = role;
  o.transport = transport;
  o.listen_host = "127.0.0.1";
  o.leader_host = "127.0.0.1";
  o.listen_port = role == DS4TP_ROLE_LEADER ? 0 : -1;
  o.leader_port = port;
  o.connect_timeout_ms = kConnectMs;
  o.peer_silence_ms = kSilenceMs;
  o.peer_arrival_timeout_ms = kArrivalMs;
  o.log_fn = quiet_log;
  o.log_level = DS4TP_LOG_WARN;
  return o;
}

// What one rank's side of a cycle came to.
struct Side {
  int rc = 0;          // first failure: a DS4TP_E* status or kWrongBits; 0 none
  uint64_t t_err = 0;  // when it returned
  long ops = 0;        // calls completed
  std::string where, msg;
};

// Connect (tp is new), run the plan's calls, close. ops < 0: until a call
// fails or `overdue` (may be empty) says the fault went unnoticed;
// exit_after >= 0: free and return after that many calls (the "clean exit"
// fault, run by the child).
void pair_side(ds4tp_pair *tp, uint64_t seed, long ops, long exit_after, Side &s,
               const std::function<void()> &connected, const std::function<bool()> &overdue) {
  std::string why;
  int rc = ds4tp_connect(tp);
  if (rc == 0) rc = ds4tp_attach_slab(tp, nullptr, 0);
  if (rc) {
    s.rc = rc, s.t_err = now_ns(), s.where = "bring-up", s.msg = one_line(ds4tp_errmsg(tp));
    return;
  }
  if (connected) connected();
  PairTraffic t(tp, seed);
  rc = t.open(why);
  for (long i = 0; rc == 0 && (ops < 0 || i < ops); i++) {
    if (exit_after >= 0 && i == exit_after) return;
    if (overdue && overdue()) {
      s.rc = kUnnoticed, s.t_err = now_ns(), s.where = "traffic", s.msg = "no call failed";
      return;
    }
    rc = t.step(uint64_t(i), why);
    if (rc == 0) s.ops++;
  }
  if (rc == 0) rc = t.close(why);
  if (rc) {
    s.rc = rc, s.t_err = now_ns(), s.where = t.last_call();
    s.msg = rc == kWrongBits ? why : one_line(ds4tp_errmsg(tp));
  }
}

// ---- group traffic --------------------------------------------------------

// Small integers, exact in f16 and bf16 and in any rank-order sum of 16 of
// them, so the reference is the plain sum whatever the dtype.
int elem(uint64_t seed, int rank, uint64_t i, uint64_t e) {
  uint32_t h = uint32_t(mix(seed ^ (uint64_t(rank) << 56) ^ (i << 24))) + uint32_t(e) * 0x9e3779b1u;
  return int(h >> 27) - 16;
}
uint16_t half_of_int(int v) {
  if (v == 0) return 0;
  uint16_t s = v < 0 ? 0x8000 : 0;
  unsigned a = unsigned(v < 0 ? -v : v), e = 0;
  while ((a >> (e + 1)) != 0) e++;
  return uint16_t(s | ((e + 15) << 10) | (((a << (10 - e)) & 0x3ffu)));
}
void store(int dt, uint8_t *p, uint64_t e, int v) {
  float f = float(v);
  if (dt == DS4TP_DTYPE_F32) {
    std::memcpy(p + e * 4, &f, 4);
    return;
  }
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint16_t h = dt == DS4TP_DTYPE_BF16 ? uint16_t(u >> 16) : half_of_int(v);
  std::memcpy(p + e * 2, &h, 2);
}

// Collective i of a group cycle, derived from the seed on every rank.
int group_step(ds4tp_group *g, uint64_t seed, uint64_t i, const char *&call, std::string &why) {
  static const uint64_t counts[] = {1, 33, 1024, 4096, 16384, 40001, 131072, 300000};
  static const uint64_t sizes[] = {1, 64, 1000, 4096, 65536, 200001};
  const int me = ds4tp_group_rank(g), n = ds4tp_group_size(g);
  const uint64_t r = mix(seed ^ (i + 1) * 0xd1b54a32d192ed03ull);
  const int k = int(r % 100);
  if (k < 55) {
    call = "all_reduce";
    const int dt = int((r >> 8) % 3);
    const uint64_t count = counts[(r >> 12) % 8], es = dt == DS4TP_DTYPE_F32 ? 4 : 2;
    const uint64_t bytes = count * es;
    uint8_t *mine = bufs().a.data(), *want = bufs().b.data();
    int *sum = bufs().sum.data();
    std::memset(sum, 0, count * sizeof *sum);
    for (int rk = 0; rk < n; rk++)
      for (uint64_t e = 0; e < count; e++) {
        int v = elem(seed, rk, i, e);
        sum[e] += v;
        if (rk == me) store(dt, mine, e, v);
      }
    for (uint64_t e = 0; e < count; e++) store(dt, want, e, sum[e]);
    uint8_t *buf = mine;
    void *home = nullptr;
    uint64_t room = 0;
    if ((r >> 16) & 1 && ds4tp_group_buffer(g, &home, &room) == 0 && room >= bytes) {
      buf = static_cast<uint8_t *>(home);  // the no-copy path over shm
      std::memcpy(buf, mine, bytes);
    }
    if (int rc = ds4tp_group_all_reduce(g, buf, count, dt, DS4TP_OP_SUM)) return rc;
    if (std::memcmp(buf, want, bytes) != 0) {
      why = "all_reduce of " + std::to_string(count) + " elements, dtype " + std::to_string(dt) +
            ": result differs from the sum";
      return kWrongBits;
    }
    return 0;
  }
  const uint64_t bytes = sizes[(r >> 12) % 6];
  uint8_t *a = bufs().a.data(), *b = bufs().b.data();
  if (k < 72) {
    call = "all_gather";
    std::memset(b, 0, bytes * uint64_t(n));
    fill_words(a, bytes, word_base(seed, me, i));
    if (int rc = ds4tp_group_all_gather(g, a, b, bytes)) return rc;
    for (int rk = 0; rk < n; rk++)
      if (!check_words(b + uint64_t(rk) * bytes, bytes, word_base(seed, rk, i))) {
        why = "all_gather of " + std::to_string(bytes) + " bytes: rank " + std::to_string(rk) +
              "'s part differs";
        return kWrongBits;
      }
    return 0;
  }
  if (k < 88) {
    call = "broadcast";
    const int root = int((r >> 32) % uint64_t(n));
    fill_words(a, bytes, word_base(seed, me, i));
    if (int rc = ds4tp_group_broadcast(g, a, bytes, root)) return rc;
    if (!check_words(a, bytes, word_base(seed, root, i))) {
      why = "broadcast of " + std::to_string(bytes) + " bytes from rank " + std::to_string(root) +
            ": result differs";
      return kWrongBits;
    }
    return 0;
  }
  call = "barrier";
  return ds4tp_group_barrier(g);
}

struct GroupPlan {
  int n = 3, rank = 0, port = 0, transport = DS4TP_TRANSPORT_TCP;
  uint64_t seed = 0;
  long ops = -1, exit_after = -1;
};

ds4tp_group_options group_options(const GroupPlan &p) {
  ds4tp_group_options o;
  ds4tp_group_options_init(&o);
  o.rank = p.rank;
  o.group_size = p.n;
  o.rendezvous_host = "127.0.0.1";
  o.rendezvous_port = p.rank == 0 ? 0 : p.port;
  o.transport = p.transport;
  o.connect_timeout_ms = kConnectMs;
  o.op_timeout_ms = kGroupOpMs;
  o.peer_silence_ms = kSilenceMs;
  return o;
}

// As pair_side, for a group handle made by ds4tp_group_new. Giving up on
// an unnoticed fault fails the group on every rank (ds4tp_group_mark_failed).
void group_side(ds4tp_group *g, const GroupPlan &p, Side &s, const std::function<void()> &connected,
                const std::function<bool()> &overdue) {
  const char *call = "bring-up";
  std::string why;
  int rc = ds4tp_group_connect(g);
  if (rc == 0 && connected) connected();
  for (long i = 0; rc == 0 && (p.ops < 0 || i < p.ops); i++) {
    if (p.exit_after >= 0 && i == p.exit_after) return;
    if (overdue && overdue()) {
      ds4tp_group_mark_failed(g);
      s.rc = kUnnoticed, s.t_err = now_ns(), s.where = "collectives", s.msg = "no call failed";
      return;
    }
    rc = group_step(g, p.seed, uint64_t(i), call, why);
    if (rc == 0) s.ops++;
  }
  if (rc == 0) {
    call = "final barrier";
    rc = ds4tp_group_barrier(g);
  }
  if (rc) {
    s.rc = rc, s.t_err = now_ns(), s.where = call;
    s.msg = rc == kWrongBits ? why : one_line(ds4tp_group_errmsg(g));
  }
}

ds4tp_identity group_identity() {
  ds4tp_identity id = pair_identity();
  id.model_id = 0x50a5;
  return id;
}

// ---- arguments ------------------------------------------------------------

struct Args {
  std::string mode, tag;
  int transport = DS4TP_TRANSPORT_TCP, role = 0, port = -1, port_fd = -1, rank = -1, n = 0;
  int plan_fd = -1, report_fd = -1;
  double seconds = 60;
  uint64_t seed = 0;
  long ops = -1, exit_after = -1;
  bool has_seed = false;
};

int parse_transport(const std::string &t) {
  return t == "tcp" ? DS4TP_TRANSPORT_TCP : t == "shm" ? DS4TP_TRANSPORT_SHM
         : t == "rdma" ? DS4TP_TRANSPORT_RDMA : -1;
}

bool parse(int argc, char **argv, Args &a) {
  if (argc < 2) return false;
  a.mode = argv[1];
  for (int i = 2; i < argc; i++) {
    std::string o = argv[i];
    if (i + 1 >= argc) return false;
    std::string v = argv[++i];
    if (o == "--transport") {
      if ((a.transport = parse_transport(v)) < 0) return false;
    } else if (o == "--seconds") a.seconds = std::atof(v.c_str());
    else if (o == "--seed") a.seed = std::strtoull(v.c_str(), nullptr, 0), a.has_seed = true;
    else if (o == "--tag") a.tag = v;
    else if (o == "--role") a.role = v == "leader" ? DS4TP_ROLE_LEADER : DS4TP_ROLE_WORKER;
    else if (o == "--port") a.port = std::atoi(v.c_str());
    else if (o == "--port-fd") a.port_fd = std::atoi(v.c_str());
    else if (o == "--rank") a.rank = std::atoi(v.c_str());
    else if (o == "--size") a.n = std::atoi(v.c_str());
    else if (o == "--ops") a.ops = std::atol(v.c_str());
    else if (o == "--exit-after") a.exit_after = std::atol(v.c_str());
    else if (o == "--plan-fd") a.plan_fd = std::atoi(v.c_str());
    else if (o == "--report-fd") a.report_fd = std::atoi(v.c_str());
    else return false;
  }
  if (a.tag.empty()) a.tag = a.mode + "-" + ds4tp_transport_name(a.transport);
  return true;
}

// ---- pair: child and supervisor ---------------------------------------------

int pair_child(const Args &a) {
  ds4tp_options o = pair_options(a.role, a.transport, a.port);
  ds4tp_identity id = pair_identity();
  ds4tp_pair *tp = nullptr;
  if (ds4tp_new(&tp, &o, &id) != 0) {
    emit(2, "soak child %d: ds4tp_new: %s", int(getpid()), ds4tp_last_error());
    return kExitSetup;
  }
  if (a.port_fd >= 0) {
    int port = ds4tp_listen_port(tp);
    (void)!write(a.port_fd, &port, sizeof port);
    ::close(a.port_fd);
  }
  Side s;
  pair_side(tp, a.seed, a.ops, a.exit_after, s, nullptr, nullptr);
  ds4tp_free(tp);
  if (s.rc == 0) return kExitOk;
  emit(2, "soak child %d (%s): %s at %s: %s", int(getpid()), a.tag.c_str(), code_name(s.rc),
       s.where.c_str(), s.msg.c_str());
  return named_code(s.rc) ? kExitNamed : kExitUnexpected;
}

struct Verdict {
  bool ok = true;
  std::string why;
  void no(const std::string &w) {
    if (ok) why = w;
    ok = false;
  }
};

int fault_bound_ms(Fault f) {
  return f == Fault::Kill ? kKillBoundMs : f == Fault::Stop ? kStopBoundMs : kBringupBoundMs;
}

// Judges a survivor's side: no fault, success; a fault, a named error
// within the fault's bound of the moment it was injected.
void judge_survivor(const char *who, Fault f, const Side &s, uint64_t fired, Verdict &v,
                    double &ms) {
  ms = -1;
  if (f == Fault::None) {
    if (s.rc) v.no(std::string(who) + " failed without a fault: " + code_name(s.rc));
    return;
  }
  if (s.rc == 0) return v.no(std::string(who) + " succeeded despite the fault");
  ms = fired && s.t_err > fired ? double(s.t_err - fired) / 1e6 : 0;
  if (s.rc == kUnnoticed)
    return v.no(std::string(who) + ": the " + fault_name(f) + " went unnoticed, no call failed in " +
                std::to_string(int(ms)) + " ms");
  // A leader killed in bring-up frees its port, and another listener (a
  // group's rendezvous, another test) may take it before the worker's next
  // dial: the worker then names a stranger (EPROTO, "not a ds4tp peer").
  const bool stranger = f == Fault::BringupKill && s.rc == DS4TP_EPROTO;
  if (!named_code(s.rc) && !stranger)
    return v.no(std::string(who) + " ended with " + code_name(s.rc));
  if (f == Fault::Exit) return;  // the child chose its moment: nothing to time
  if (fired == 0) return v.no(std::string(who) + " failed before the fault was injected");
  const int bound = fault_bound_ms(f);
  if (ms > bound)
    v.no(std::string(who) + " took " + std::to_string(int(ms)) + " ms, bound " +
         std::to_string(bound));
}

// True once a fault sent at `fired` (0: not yet) is past its bound, and,
// for a stop, past the SIGCONT too.
bool past_bound(Fault f, uint64_t fired, int stop_ms) {
  if (fired == 0 || f == Fault::None || f == Fault::Exit) return false;
  const int ms = fault_bound_ms(f) + (f == Fault::Stop ? stop_ms : 0) + 500;
  return now_ns() > fired + uint64_t(ms) * 1000000ull;
}

// How the victim child must end: killed, or by itself.
void judge_victim(Fault f, int st, const std::string &how, Verdict &v) {
  bool good = f == Fault::None || f == Fault::Exit ? exited_with(st, kExitOk)
              : f == Fault::Stop                   ? exited_with(st, kExitNamed)
                                                   : killed(st);
  if (!good) v.no(std::string("victim child ended ") + how);
}

void print_sample(const char *tag, const char *role, long n, uint64_t t0) {
  trim_heap();
  Usage u = usage();
  emit(1, "sample tag=%s role=%s n=%ld t=%.1f fds=%ld rss_kb=%ld threads=%ld", tag, role, n,
       double(now_ns() - t0) / 1e9, u.fds, u.rss_kb, u.threads);
}

int pair_supervisor(const Args &a) {
  std::mt19937_64 rng(a.seed);
  const std::string tr = ds4tp_transport_name(a.transport);
  const uint64_t t0 = now_ns(), t_end = t0 + uint64_t(a.seconds * 1e9);
  long failures = 0, n = 0;
  emit(1, "start tag=%s pid=%d seed=%" PRIu64 " transport=%s", a.tag.c_str(), int(getpid()), a.seed,
       tr.c_str());
  while (now_ns() < t_end) {
    n++;
    g_dog.cycle = n;
    g_dog.set("pair cycle");
    const bool lead = rng() & 1;
    const Fault f = pick_fault(rng);
    const uint64_t seed = rng();
    const long ops = f == Fault::None ? long(50 + rng() % 350) : -1;
    const long exit_after = f == Fault::Exit ? long(rng() % 300) : -1;
    const int delay = f == Fault::BringupKill ? int(rng() % 8) : int(rng() % 300);
    const int stop_ms = kSilenceMs + 500 + int(rng() % 1000);

    Verdict v;
    Side s;
    Injector inj;
    pid_t child = -1;
    ds4tp_pair *tp = nullptr;
    ds4tp_identity id = pair_identity();
    std::vector<std::string> args = {"pair-child", "--transport", tr, "--tag", a.tag, "--seed",
                                     std::to_string(seed), "--ops", std::to_string(ops),
                                     "--exit-after", std::to_string(exit_after)};
    if (lead) {
      ds4tp_options o = pair_options(DS4TP_ROLE_LEADER, a.transport, 0);
      if (ds4tp_new(&tp, &o, &id) != 0) {
        v.no(std::string("ds4tp_new: ") + one_line(ds4tp_last_error()));
      } else {
        args.insert(args.end(), {"--role", "worker", "--port",
                                 std::to_string(ds4tp_listen_port(tp))});
        child = spawn(args);
      }
    } else {
      int p[2];
      if (pipe2(p, O_CLOEXEC) != 0) {
        v.no("pipe");
      } else {
        args.insert(args.end(), {"--role", "leader", "--port-fd", std::to_string(p[1])});
        child = spawn(args, p[1]);
        ::close(p[1]);
        int port = -1;
        pollfd pf{p[0], POLLIN, 0};
        if (poll(&pf, 1, 10000) != 1 || read(p[0], &port, sizeof port) != sizeof port)
          v.no("the child leader never said its port");
        ::close(p[0]);
        ds4tp_options o = pair_options(DS4TP_ROLE_WORKER, a.transport, port);
        if (v.ok && ds4tp_new(&tp, &o, &id) != 0)
          v.no(std::string("ds4tp_new: ") + one_line(ds4tp_last_error()));
      }
    }
    if (v.ok) {
      g_dog.set(lead ? "pair: leader side" : "pair: worker side");
      if (f == Fault::BringupKill) inj.start(f, child, delay, 0);
      pair_side(
          tp, seed, ops, -1, s,
          [&] {
            if (f == Fault::Kill || f == Fault::Stop) inj.start(f, child, delay, stop_ms);
          },
          [&] { return past_bound(f, inj.fired_ns(), stop_ms); });
    }
    g_dog.set("pair: free");
    ds4tp_free(tp);
    g_dog.set("pair: reaping the child");
    inj.join();
    int st = -1;
    std::string how = child > 0 ? reap(child, kChildExitMs, &st) : "none";
    double ms = -1;
    if (v.ok) {
      judge_survivor(lead ? "leader" : "worker", f, s, inj.fired_ns(), v, ms);
      judge_victim(f, st, how, v);
    }
    if (!v.ok) failures++;
    const char *outcome = !v.ok ? "fail" : f == Fault::None ? "ok" : "named";
    emit(1, "cycle tag=%s n=%ld role=%s fault=%s outcome=%s code=%s ms=%.1f ops=%ld child=%s "
            "pids=%d msg=\"%s%s%s\"",
         a.tag.c_str(), n, lead ? "leader" : "worker", fault_name(f), outcome, code_name(s.rc),
         ms, s.ops, how.c_str(), int(child), v.ok ? "" : v.why.c_str(), v.ok ? "" : ": ",
         s.where.empty() ? "" : (s.where + ": " + s.msg).c_str());
    if (!v.ok)
      emit(1, "fail tag=%s n=%ld what=\"%s\"", a.tag.c_str(), n, v.why.c_str());
    g_dog.set("pair: between cycles");
    print_sample(a.tag.c_str(), a.tag.c_str(), n, t0);
    g_dog.since = 0;
    usleep(useconds_t(20000 + rng() % 180000));
  }
  emit(1, "end tag=%s cycles=%ld failures=%ld", a.tag.c_str(), n, failures);
  return failures ? 1 : 0;
}

// ---- group: ranks and supervisor ----------------------------------------------

// A short-lived rank (2..N-1) of one cycle.
int group_child(const Args &a) {
  GroupPlan p;
  p.n = a.n, p.rank = a.rank, p.port = a.port, p.transport = a.transport;
  p.seed = a.seed, p.ops = a.ops, p.exit_after = a.exit_after;
  ds4tp_group_options o = group_options(p);
  ds4tp_identity id = group_identity();
  ds4tp_group *g = nullptr;
  if (ds4tp_group_new(&g, &o, &id) != 0) {
    emit(2, "soak rank %d: ds4tp_group_new: %s", a.rank, ds4tp_last_error());
    return kExitSetup;
  }
  Side s;
  group_side(g, p, s, nullptr, nullptr);
  ds4tp_group_free(g);
  if (s.rc == 0) return kExitOk;
  emit(2, "soak rank %d pid %d (%s): %s at %s: %s", a.rank, int(getpid()), a.tag.c_str(),
       code_name(s.rc), s.where.c_str(), s.msg.c_str());
  return named_code(s.rc) ? kExitNamed : kExitUnexpected;
}

// The long-lived rank 1: one cycle per plan line from rank 0
// ("n port seed ops cycle"), one report line back
// ("rc t_err_ns ops where|msg"); ends at EOF of the plan.
int group_rank1(const Args &a) {
  const uint64_t t0 = now_ns();
  bufs();
  const std::string role = a.tag + "/rank1";
  g_dog.tag = role;
  g_dog.run();
  for (;;) {
    std::string line;
    if (!read_line(a.plan_fd, 24 * 3600 * 1000, line)) break;
    GroupPlan p;
    unsigned long long seed = 0;
    long cycle = 0;
    if (std::sscanf(line.c_str(), "%d %d %llu %ld %ld", &p.n, &p.port, &seed, &p.ops, &cycle) != 5)
      break;
    p.rank = 1, p.seed = seed, p.transport = a.transport;
    g_dog.cycle = cycle;
    g_dog.set("rank 1: cycle");
    ds4tp_group_options o = group_options(p);
    ds4tp_identity id = group_identity();
    ds4tp_group *g = nullptr;
    Side s;
    if (ds4tp_group_new(&g, &o, &id) != 0) {
      s.rc = DS4TP_EINVAL, s.t_err = now_ns(), s.where = "new", s.msg = one_line(ds4tp_last_error());
    } else {
      group_side(g, p, s, nullptr, nullptr);
    }
    g_dog.set("rank 1: free");
    ds4tp_group_free(g);
    emit(a.report_fd, "%d %" PRIu64 " %ld %s|%s", s.rc, s.t_err, s.ops, s.where.c_str(),
         s.msg.c_str());
    print_sample(a.tag.c_str(), role.c_str(), cycle, t0);
    g_dog.since = 0;
  }
  return 0;
}

int group_supervisor(const Args &a) {
  std::mt19937_64 rng(a.seed);
  const std::string tr = ds4tp_transport_name(a.transport);
  const std::string role0 = a.tag + "/rank0";
  const uint64_t t0 = now_ns(), t_end = t0 + uint64_t(a.seconds * 1e9);
  long failures = 0, n = 0;
  int plan[2], report[2];
  if (pipe2(plan, O_CLOEXEC) != 0 || pipe2(report, O_CLOEXEC) != 0) return 1;
  pid_t rank1 = spawn({"group-rank", "--rank", "1", "--transport", tr, "--tag", a.tag, "--plan-fd",
                       std::to_string(plan[0]), "--report-fd", std::to_string(report[1])},
                      plan[0], report[1]);
  ::close(plan[0]);
  ::close(report[1]);
  emit(1, "start tag=%s pid=%d seed=%" PRIu64 " transport=%s rank1=%d", a.tag.c_str(),
       int(getpid()), a.seed, tr.c_str(), int(rank1));
  bool rank1_lost = false;
  while (now_ns() < t_end && !rank1_lost) {
    n++;
    g_dog.cycle = n;
    g_dog.set("group cycle");
    GroupPlan p;
    p.n = 3 + int(rng() % 2);
    p.transport = a.transport;
    p.seed = rng();
    const Fault f = pick_fault(rng);
    const int victim = 2 + int(rng() % uint64_t(p.n - 2));
    p.ops = f == Fault::None ? long(20 + rng() % 150) : -1;
    const long exit_after = f == Fault::Exit ? long(rng() % 100) : -1;
    const int delay = f == Fault::BringupKill ? int(rng() % 8) : int(rng() % 300);
    const int stop_ms = kSilenceMs + 500 + int(rng() % 1000);

    Verdict v;
    Side s;
    Injector inj;
    std::vector<pid_t> kids(size_t(p.n), -1);
    ds4tp_group_options o = group_options(p);
    ds4tp_identity id = group_identity();
    ds4tp_group *g = nullptr;
    bool planned = false;
    if (ds4tp_group_new(&g, &o, &id) != 0) {
      v.no(std::string("ds4tp_group_new: ") + one_line(ds4tp_last_error()));
    } else {
      p.port = ds4tp_group_rendezvous_port(g);
      emit(plan[1], "%d %d %" PRIu64 " %ld %ld", p.n, p.port, p.seed, p.ops, n);
      planned = true;
      for (int r = 2; r < p.n; r++)
        kids[size_t(r)] = spawn({"group-rank", "--rank", std::to_string(r), "--size",
                                 std::to_string(p.n), "--port", std::to_string(p.port),
                                 "--transport", tr, "--tag", a.tag, "--seed", std::to_string(p.seed),
                                 "--ops", std::to_string(p.ops), "--exit-after",
                                 std::to_string(r == victim ? exit_after : -1)});
      g_dog.set("group: rank 0");
      if (f == Fault::BringupKill) inj.start(f, kids[size_t(victim)], delay, 0);
      group_side(
          g, p, s,
          [&] {
            if (f == Fault::Kill || f == Fault::Stop)
              inj.start(f, kids[size_t(victim)], delay, stop_ms);
          },
          [&] { return past_bound(f, inj.fired_ns(), stop_ms); });
    }
    g_dog.set("group: free");
    ds4tp_group_free(g);
    g_dog.set("group: rank 1's report");
    inj.join();
    Side s1;
    if (planned) {
      std::string rep;
      if (!read_line(report[0], kChildExitMs + kConnectMs, rep)) {
        v.no("rank 1 sent no report");
        rank1_lost = true;
      } else {
        unsigned long long t = 0;
        int used = 0;
        std::sscanf(rep.c_str(), "%d %llu %ld %n", &s1.rc, &t, &s1.ops, &used);
        s1.t_err = t;
        s1.where = rep.substr(size_t(used));
      }
    }
    g_dog.set("group: reaping the children");
    std::string how, pids = std::to_string(getpid()) + "," + std::to_string(rank1);
    double ms = -1, ms1 = -1;
    const uint64_t fired = inj.fired_ns();
    if (v.ok) judge_survivor("rank 0", f, s, fired, v, ms);
    if (v.ok && !rank1_lost) judge_survivor("rank 1", f, s1, fired, v, ms1);
    for (int r = 2; r < p.n; r++) {
      if (kids[size_t(r)] <= 0) continue;
      int st = -1;
      std::string h = reap(kids[size_t(r)], kChildExitMs, &st);
      how += (how.empty() ? "" : ",") + std::to_string(r) + ":" + h;
      pids += "," + std::to_string(kids[size_t(r)]);
      if (r == victim) judge_victim(f, st, h, v);
      else if (!exited_with(st, f == Fault::None ? kExitOk : kExitNamed))
        v.no("rank " + std::to_string(r) + " (a survivor) ended " + h);
    }
    if (!v.ok) failures++;
    const char *outcome = !v.ok ? "fail" : f == Fault::None ? "ok" : "named";
    emit(1, "cycle tag=%s n=%ld role=rank0 size=%d victim=%d fault=%s outcome=%s code=%s code1=%s "
            "ms=%.1f ms1=%.1f ops=%ld child=%s pids=%s msg=\"%s%s%s | rank 1: %s\"",
         a.tag.c_str(), n, p.n, victim, fault_name(f), outcome, code_name(s.rc), code_name(s1.rc),
         ms, ms1, s.ops + s1.ops, how.c_str(), pids.c_str(), v.ok ? "" : v.why.c_str(),
         v.ok ? "" : ": ", s.where.empty() ? "" : (s.where + ": " + s.msg).c_str(),
         one_line(s1.where.c_str()).c_str());
    if (!v.ok) emit(1, "fail tag=%s n=%ld what=\"%s\"", a.tag.c_str(), n, v.why.c_str());
    g_dog.set("group: between cycles");
    print_sample(a.tag.c_str(), role0.c_str(), n, t0);
    g_dog.since = 0;
    usleep(useconds_t(20000 + rng() % 180000));
  }
  ::close(plan[1]);  // rank 1 takes EOF as the end
  int st = -1;
  std::string how = reap(rank1, kChildExitMs, &st);
  if (!exited_with(st, 0)) {
    emit(1, "fail tag=%s n=%ld what=\"rank 1 ended %s\"", a.tag.c_str(), n, how.c_str());
    failures++;
  }
  ::close(report[0]);
  emit(1, "end tag=%s cycles=%ld failures=%ld", a.tag.c_str(), n, failures);
  return failures ? 1 : 0;
}

int probe() {
  for (int t : {DS4TP_TRANSPORT_TCP, DS4TP_TRANSPORT_SHM, DS4TP_TRANSPORT_RDMA}) {
    char why[512] = "";
    int ok = ds4tp_transport_available(t, why, sizeof why);
    emit(1, "%s %d %s", ds4tp_transport_name(t), ok, one_line(why).c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN);  // a rank gone: its pipe's write fails with EPIPE, which is judged
  Args a;
  if (!parse(argc, argv, a)) {
    std::fprintf(stderr,
                 "usage: ds4tp_soak pair|group --transport tcp|shm|rdma --seconds S [--seed N] "
                 "[--tag NAME]\n       ds4tp_soak probe\n");
    return 2;
  }
  if (!a.has_seed) a.seed = mix(now_ns() ^ uint64_t(getpid()));
  if (a.mode == "probe") return probe();
  if (a.mode == "pair-child") return pair_child(a);
  if (a.mode == "group-rank") return a.rank == 1 ? group_rank1(a) : group_child(a);
  bufs();  // before the first sample: the driver's buffers are no growth
  g_dog.tag = a.tag;
  g_dog.run();
  if (a.mode == "pair") return pair_supervisor(a);
  if (a.mode == "group") return group_supervisor(a);
  std::fprintf(stderr, "ds4tp_soak: unknown mode %s\n", a.mode.c_str());
  return 2;
}
