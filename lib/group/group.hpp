// A group of N ranks (2..16) and its collectives: a protocol over links
// (link/link.hpp), the pair's protocol's sibling.
//
// Every collective is built on steps of a lane's link (lane.hpp): each
// contributing rank publishes `bytes` and receives a view of every other
// contributor's bytes; the caller reduces or copies from the views and
// then calls Lane::done, after which the views may be reused. Steps are
// numbered identically on every rank because all ranks call the same
// collectives in the same order. A Group is used by one thread at a
// time; mark_failed may come from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "auth/key.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "talk/group_beat.hpp"
#include "group/clock_align.hpp"
#include "group/cross_worker.hpp"
#include "group/flight.hpp"
#include "group/lane.hpp"
#include "group/layout.hpp"
#include "group/reduce.hpp"
#include "group/wire.hpp"
#include "net/socket.hpp"
#include "os/wait.hpp"
#include "stats/stats.hpp"
#include "wire/hello.hpp"

namespace ds4tp::shm { struct Area; }

namespace ds4tp::group {

constexpr int kMaxRanks = 16;
// Options::spin_ns: learn the spin window; spin without limit; neither
// spin nor yield (waiting()).
constexpr int64_t kSpinAdaptive = -1;
constexpr int64_t kSpinAlways = -2;
constexpr int64_t kSpinNever = -3;

struct Options {
  int rank = -1;
  int size = -1;
  std::string host = "127.0.0.1";
  int port = 29600;
  int transport = DS4TP_TRANSPORT_AUTO;
  uint64_t connect_timeout_ns = 60'000'000'000ull;
  uint64_t op_timeout_ns = 10'000'000'000ull;  // once every rank is in a call
  uint64_t arrival_ns = 300'000'000'000ull;  // a rank not yet in it, while alive
  size_t chunk_bytes = 1u << 20;
  int64_t spin_ns = kSpinAdaptive;  // busy-poll before blocking (see waiting())
  int64_t yield_ns = -1;            // then yield; -1: DS4TP_GROUP_YIELD_US or 200 us
  uint64_t peer_silence_ns = 1'000'000'000;  // tcp: a rank not heard this long fails the group
  auth::Key key;
  wire::Identity id;
  // The job (ds4tp_group_options.job_id): its token (all zero: none) and
  // its name for messages ("TORCHELASTIC_RUN_ID=abc").
  std::array<uint8_t, 16> job{};
  std::string job_name;
  // Rank 0 says who joined and who it waits for this often in bring-up.
  uint64_t report_ns = 5'000'000'000ull;
  // Bring-up refusals (strangers at a listener, a join of another group).
  Logger log{nullptr, nullptr, DS4TP_LOG_WARN};
};

struct Roster;  // group/wire.hpp

// The crossovers of a group's meshes (flat, or between the leaders):
// rank 0's, carried in the roster, so every rank runs the same algorithm
// whatever its own environment says.
struct MeshCrossovers {
  uint64_t two_shot_bytes = 0;
  uint64_t ring_bytes = UINT64_MAX;  // before the member rule (ring_for)
};

class Group {
 public:
  Group(Options o);
  ~Group();

  // Process form: rank 0 starts listening here (port readable at once).
  int listen(Error &err);
  int connect(Error &err);
  // Thread form: n connected groups over one shared slot area.
  static int make_local(int n, const Options &o, std::vector<std::unique_ptr<Group>> &out,
                        Error &err);

  int all_reduce(void *buf, uint64_t count, Dtype t, Op op, Error &err);
  int all_gather(const void *in, void *out, uint64_t bytes, Error &err);
  int broadcast(void *buf, uint64_t bytes, int root, Error &err);
  int barrier(Error &err);
  // The collectives of collectives.cpp (docs/GROUPS.md has each one's
  // algorithm, order and in-place rules).
  int reduce_scatter(const void *in, void *out, uint64_t count, Dtype t, Op op, Error &err);
  int reduce(void *buf, uint64_t count, Dtype t, Op op, int root, Error &err);
  int gather(const void *in, void *out, uint64_t bytes, int root, Error &err);
  int scatter(const void *in, void *out, uint64_t bytes, int root, Error &err);
  int all_gather_v(const void *in, void *out, const uint64_t *bytes, Error &err);
  int all_gather_rows(const void *in, void *out, uint64_t rows, uint64_t row_bytes, Error &err);
  // Per-peer byte counts and offsets into `in` and `out` (MoE dispatch).
  struct Plan {
    const uint64_t *send_bytes, *send_offsets, *recv_bytes, *recv_offsets;
  };
  int all_to_all_v(const void *in, void *out, const Plan &plan, Error &err);

  int rank() const { return opt_.rank; }
  int size() const { return opt_.size; }
  // A tiered group's is the one between its hosts (tcp or rdma).
  int transport() const {
    return tiered_ ? cross_transport_ : local_ ? local_.link->kind() : DS4TP_TRANSPORT_AUTO;
  }
  int port() const { return opt_.port; }
  // The host medium's home when it has one (shm, once connected), else a
  // heap buffer with kBufferRoom in front (tcp).
  void *buffer() {
    link::Homes *h = local_ ? local_.link->homes() : nullptr;
    return h ? h->home() : buffer_;
  }
  size_t buffer_bytes() const { return opt_.chunk_bytes; }
  uint64_t op_timeout_ns() const { return opt_.op_timeout_ns; }

  // Failure latch: the first failure is kept; later calls return EFAILED.
  int failed() const { return failed_.load(std::memory_order_acquire); }
  std::string message() const;
  // Latches the first failure; true when this call latched it.
  bool fail(int code, const std::string &msg);
  void mark_failed();
  // Fails the group here and on every rank with this reason (any thread);
  // `culprit`: the rank it is about (-1: this one).
  void abort_with(int code, const std::string &msg, int culprit = -1);

  // Where `rank` sits (ds4tp_group_topology): ESTATE before connect.
  struct Place {
    int host = 0, local = 0;
    bool tiered = false;
  };
  int place(int rank, Place &out, Error &err) const;

  // The plan in one line ("plan: 1 host x 4 ranks; shm within the host;
  // all-reduce ..."), the same on every rank (group/plan.hpp); "" before
  // connect.
  std::string plan() const;

  // Observability: collectives by kind, bytes, all-reduce latency.
  const stats::Stats &stats() const { return stats_; }
  void stats_reset() { stats_.reset(); }
  // The flight recorder (flight.hpp): its calls, and its text and trace
  // written to `path` and `path`.json ("%r": the rank). Any thread.
  const FlightRecorder &flight() const { return flight_; }
  FlightHeader flight_header() const;
  int dump(const std::string &path, Error &err) const;
  // Dumps to `path` each time the process gets `signo` (0: no longer).
  int dump_on_signal(int signo, const std::string &path, Error &err);

 private:
  // Lanes: the whole group (flat), or in a tiered group the ranks of this
  // host (local_) and the hosts' leaders (cross_, on leaders only).
  struct Links;  // bring-up's links before they become lanes (bringup.cpp)

  bool connected() const { return local_ || cross_; }
  // Refuses a call on a failed or unconnected group; else the lanes' steps
  // carry `call` (call.hpp) from now on.
  int begin(Error &err, uint32_t call);
  // The call begun last ended with rc: a success is counted, timed from
  // begin() and its payload bytes (this rank's to the others, the others'
  // to it) added. Returns rc.
  int ended(int rc, uint64_t sent, uint64_t received);
  int reduce(Lane &l, uint8_t *p, uint64_t count, Dtype t, Op op, Error &err, uint64_t call_bytes = 0);
  int one_shot(Lane &l, uint8_t *p, uint64_t count, Dtype t, Op op, Error &err);
  int two_shot(Lane &l, uint8_t *p, uint64_t count, Dtype t, Op op, Error &err);
  int ring(Lane &l, uint8_t *p, uint64_t count, Dtype t, Op op, Error &err);  // ring.cpp
  // The three-step forms of a tiered group (tiered.cpp).
  int tiered_all_reduce(uint8_t *p, uint64_t count, Dtype t, Op op, Error &err);
  int pipelined_all_reduce(uint8_t *p, uint64_t count, Dtype t, Op op, Error &err);
  int host_sum(uint8_t *q, uint64_t m, Dtype t, Op op, Error &err);
  static int cross_chunk(void *self, uint8_t *q, uint64_t m, Error &err);  // on worker_
  int tiered_all_gather(const uint8_t *src, uint8_t *dst, uint64_t bytes, Error &err);
  int tiered_broadcast(uint8_t *p, uint64_t bytes, int root, Error &err);
  int tiered_barrier(Error &err);
  int rooted_step(Lane &l, uint8_t *q, uint64_t m, int root, bool give, Error &err);
  template <typename Mine, typename Take>
  int flat_steps(uint64_t bytes, int root, Mine mine, Take take, Error &err);
  int finish(Lane &l, int rc, Error &err);
  void abort_lanes(int culprit, int code);
  int start_heartbeat(Error &err);
  // hub_fd: the rendezvous connection to rank 0 (-1 on rank 0).
  int open_links(const Roster &ro, int data_lfd, int hub_fd, uint64_t deadline, Links &out,
                 Error &err);
  int open_mesh(const Roster &ro, std::vector<int> names, uint64_t deadline, Links &out,
                Error &err);
  std::unique_ptr<link::Link> make_mesh(Links &links, int transport);
  // A lane of `n` members over `link`, this rank member `me`.
  void make_lane(Lane &l, std::unique_ptr<link::Link> link, int n, int me, const Crossovers &x);
  // The shm link of `area` (a flat shm group's, a tiered host's), member `me`.
  std::unique_ptr<link::Link> shm_link(std::shared_ptr<ds4tp::shm::Area> area, int me, bool watch,
                                       uint64_t timeout_ns, int members,
                                       std::vector<int> ctl = {}, std::vector<int> names = {});
  // Each lane's wait without progress (flat, or a tiered group's lanes).
  struct Timeouts {
    uint64_t flat, cross, host;
  };
  Timeouts timeouts() const;
  void take_links(const Roster &ro, Links &links, bool rdma, std::vector<int> watch);

  Options opt_;
  Lane local_, cross_;
  bool tiered_ = false;
  // A tiered leader's second thread for pipelined_all_reduce, and the
  // call it serves (set before each post).
  std::unique_ptr<CrossWorker> worker_;
  Dtype worker_dtype_ = Dtype::F32;
  Op worker_op_ = Op::Sum;
  uint64_t worker_call_bytes_ = 0;
  int cross_transport_ = DS4TP_TRANSPORT_TCP;  // tiered: between the leaders
  MeshCrossovers crossovers_;  // from the roster
  Layout layout_;  // from the roster (one host, rank order, for a local group)
  // ds4tp_group_buffer: kBufferRoom bytes the medium may use, then the
  // caller's chunk_bytes (buffer_ points past the room).
  static constexpr size_t kBufferRoom = 64;
  uint8_t *buffer_ = nullptr;
  uint8_t *scratch_ = nullptr;  // two-shot staging: chunk_bytes, never the user's buffer_
  // A tiered group's staging for the collectives it composes of its
  // all-reduce, all-gather and broadcast (collectives.cpp); grows once.
  std::vector<uint8_t> spare_;
  // The largest piece a member may send each other member in one step
  // (pieces of every member fit a step's chunk and its tables).
  uint64_t piece_cap() const;
  template <typename Give, typename Take>
  int piece_steps(uint64_t steps, Give give, Take take, Error &err);
  net::Fd listen_fd_;
  // Rendezvous sockets, kept for the group's life: their hang-up tells a
  // peer's death where nothing else does (an shm group, a zombie rank),
  // and tcp groups beat on them (talk/group_beat.hpp).
  // Rank 0 holds one per rank (index = rank); the others hold [0].
  std::vector<net::Fd> ctl_;
  // A tiered host's links between its leader and its other ranks, which
  // the host's shm waits watch (bringup.cpp, open_links).
  std::vector<net::Fd> host_links_;
  std::unique_ptr<talk::Heartbeat> heartbeat_;  // tcp only; joined before ctl_ closes
  int call_kind_ = 0;        // the call begun last: its stats::Coll
  uint64_t call_t0_ = 0;     // and when it began (0: untimed)
  uint64_t call_entry_ns_ = 0;         // when it began, always read (its mark)
  const char *call_algorithm_ = "";    // the all-reduce algorithm it ran, if any
  // A tiered leader's steps across carry its host's latest entry as its
  // mark once its host has met (host_sum), so the other hosts see a late
  // rank here as this host late.
  bool host_marked_ = false;
  // This rank's clock to the group's (rank 0's), as bring-up measured
  // it (off rank 0's host), and its rounds, which the heartbeats go on
  // from; a call's marks use the heartbeats' latest (call_offset_ns_).
  ClockOffset clock_;
  std::vector<ClockRound> clock_rounds_;
  int64_t call_offset_ns_ = 0;
  FlightRecorder flight_;
  // A call that failed writes the recorder here (DS4TP_GROUP_DUMP, "%r"
  // the rank), else logs its last calls; read once at creation.
  std::string dump_path_;
  // The collectives this rank has entered; its heartbeats carry it.
  std::atomic<uint32_t> calls_entered_{0};
  std::atomic<int> failed_{0};
  mutable std::mutex mu_;
  std::string msg_;
  stats::Stats stats_;
};

// The two-shot crossover of a transport (bytes per all_reduce call):
// measured defaults (README "Groups"), or DS4TP_GROUP_TWO_SHOT_BYTES, read
// by one rank for all: rank 0 for the meshes (the roster carries it), the
// rank that makes an shm segment for its ranks (kept in its header).
uint64_t two_shot_threshold(int transport);
constexpr uint64_t kTwoShotShmBytes = 64 * 1024;
constexpr uint64_t kTwoShotTcpBytes = 64 * 1024;
// The ring's crossover on a mesh (tcp, rdma): all_reduce calls from this
// many bytes run reduce-scatter and all-gather around the ring of the
// mesh's members (ring.cpp). kRingBytes is the measured default
// (bench/README.md "Groups across hosts"); DS4TP_GROUP_RING_BYTES
// overrides it (0: never), read by rank 0 for all (the roster).
uint64_t ring_threshold();
constexpr uint64_t kRingBytes = 1024 * 1024;
constexpr int kRingMembers = 3;
// A mesh of `members`' crossover from the agreed one: never below
// kRingMembers, where the ring is two-shot's steps with the same bits.
inline uint64_t ring_for(uint64_t ring_bytes, int members) {
  return members < kRingMembers ? UINT64_MAX : ring_bytes;
}
// shm all_reduce calls from this many bytes up to chunk_bytes go through
// the homes (link::Homes::reduce_home), measured (README "Groups"): from 4 KiB
// while every rank can have a core, from 256 KiB when ranks outnumber
// the cores (each of its three waits then costs a context switch).
// DS4TP_GROUP_HOME_BYTES overrides it; read by the rank that makes the
// segment (rank 0, or new_local) and kept in its header for all.
uint64_t home_threshold(int ranks);
constexpr uint64_t kHomeBytes = 4 * 1024;
constexpr uint64_t kHomeOversubscribedBytes = 256 * 1024;

// How a rank waits for its peers (both media): os::Waiter with this
// policy: busy-poll, then yield the CPU until yield_ns more have passed,
// then sleep in the kernel. Options::spin_ns as the pair's spin_us:
// kSpinAdaptive (the default) learns the spin window from how late the
// peers arrive (os::SpinBudget), at most 1 ms, when this process may run
// on at least as many CPUs as `ranks` share the host, and none otherwise
// (spinning then only keeps the awaited rank off the CPU); kSpinAlways
// spins without limit and never yields; kSpinNever neither spins nor
// yields; 0 never spins; more spins that long. DS4TP_GROUP_SPIN_US, when
// set, fixes the spin (a negative value: none). yield: Options::yield_ns
// when >= 0, else DS4TP_GROUP_YIELD_US, else 200 us (handing the CPU
// straight to the awaited rank costs far less than a sleep and a
// wake-up; bench/README.md "Groups"). `tally`: where the waits' phases
// are counted (the group's stats), may be null.
constexpr uint64_t kAdaptiveSpinCapNs = os::SpinBudget::kDefaultCapNs;
// How long a tcp rank whose link closed waits for the closing rank's
// verdict (at most a quarter of peer_silence): rank 0 relays it in
// microseconds on one host, a few round trips across hosts.
constexpr uint64_t kVerdictWaitNs = 100'000'000;
struct Waiting {
  os::WaitPolicy policy;
  bool adaptive = false;  // policy.spin_ns is the cap of a learned window
};
Waiting waiting(int ranks, int64_t spin_option_ns, int64_t yield_option_ns = -1,
                os::WaitTally *tally = nullptr);

// An shm area's crossovers, as its maker chose them (it keeps them in its
// header for every member).
Crossovers area_crossovers(const shm::Area &area);

}  // namespace ds4tp::group
