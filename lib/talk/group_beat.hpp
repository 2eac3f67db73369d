// Liveness for tcp groups (the pair's is liveness.hpp; both judge by the
// one silence rule of silence.hpp): a thread per rank that beats on the rendezvous
// connections (rank 0 to every rank, every rank to rank 0) and judges the
// ranks it hears. A rank not heard for silence_ns (stopped, frozen, or
// its link cut: nothing closes the socket) fails the group here; rank 0
// then tells every other rank which rank it was, so all of them name it.
//
// Beats also carry how many collectives each rank has entered, so a rank
// waiting in a step knows whether an awaited rank is in the call (its
// bytes are late: the progress deadline) or not yet (it computes: the
// arrival deadline): each rank's beat to rank 0 carries its own count,
// rank 0's beat to each rank every rank's.
//
// Beats keep measuring each rank's clock against rank 0's (the group
// clock, group/clock_align.hpp): a rank's beat carries its send time,
// and rank 0's next beat to it echoes that with when rank 0 read it and
// when it answered: a round (common/clock_offset.hpp) per beat period,
// the best of the last kClockKept kept, so the offset follows drift.
//
// Wire (after the rendezvous "go" byte and the clock rounds): a beat,
// kBeat, the sender's count (u32) and its monotonic clock (u64 ns) to
// rank 0, or from rank 0 kBeats, the rank count (u8), every rank's count
// (u32 each, in rank order), then the echo of the receiving rank's last
// beat (u64 its send time, u64 when rank 0 read it; 0 before one) and
// rank 0's clock as it sends (u64); from rank 0 a 3-byte
// notice: kNotice, the silent rank, and the error code negated; and,
// either way, a verdict: kVerdict, the rank a failed call names, the
// code negated, the rank that found it, the length of its reason (u8, at
// most kMaxReason) and the reason's text (the finder's message, so every
// rank names the values it saw, not only the code). A rank that fails a call
// tells rank 0 (tell()), which passes it on, so every rank names the
// same cause. A connection that closes is left to the data links: a rank
// that exits after its last collective is not a failure, and one that
// dies mid-collective already fails its peers' steps.
//
// Threading: start() spawns the thread ("ds4tp-gbeat"); the destructor
// stops and joins it, so no verdict runs after it returns. The verdict
// runs on the thread, at most once.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/clock_offset.hpp"
#include "common/error.hpp"

namespace ds4tp::talk {

constexpr int kMaxBeatLinks = 16;  // a group's ranks at most
constexpr uint8_t kBeat = 0x48;    // 'H': a rank's beat to rank 0
constexpr uint8_t kBeats = 0x41;   // 'A': rank 0's beat, every rank's count
constexpr uint8_t kNotice = 0x46;  // 'F'
constexpr uint8_t kVerdict = 0x56;  // 'V'
constexpr int kMaxReason = 160;     // a verdict's reason text, bytes at most
constexpr int kBeatBytes = 13;    // a rank's beat
// Rank 0's beat to a rank of a group of n.
constexpr int beats_bytes(int n) { return 2 + 4 * n + 24; }
// The longest message on the stream: rank 0's beat, or a verdict.
constexpr int kMaxBeatMessage = 5 + kMaxReason > beats_bytes(kMaxBeatLinks)
                                    ? 5 + kMaxReason
                                    : beats_bytes(kMaxBeatLinks);
// Clock rounds a rank keeps (the best of them is its offset).
constexpr int kClockKept = 16;

// Reads one link's byte stream as it arrives (any message may be split
// across reads). feed() stops at the first notice, verdict or bad byte:
// `used` says how many bytes it took. Beats are taken on the way; their
// counts wait in counts() until the next beat.
class BeatReader {
 public:
  enum Event { kNone, kNoticed, kBadByte };
  // `from_hub`: the stream comes from rank 0 (its beats carry every
  // rank's count, and it sends notices); else from another rank.
  explicit BeatReader(bool from_hub) : hub_(from_hub) {}
  Event feed(const uint8_t *p, size_t n, size_t &used);
  int notice_rank() const { return got_[1]; }
  int notice_code() const { return -int(got_[2]); }  // a ds4tp_status
  // A verdict's finder; -1 for rank 0's silence notice.
  int notice_finder() const { return got_[0] == kVerdict ? got_[3] : -1; }
  // A verdict's reason (its finder's message); empty for a notice.
  std::string notice_reason() const;
  uint8_t bad_byte() const { return bad_; }
  // The last beat's counts (one from a rank; every rank's from rank 0),
  // and how many there are: 0 before the first beat.
  const uint32_t *counts() const { return counts_; }
  int count_n() const { return count_n_; }
  // A rank's last beat: its send time. Rank 0's: its echo of this rank's
  // last beat and its own send time (t0, t1, t2; t3 is the reader's).
  uint64_t sent() const { return sent_; }
  const ClockRound &round() const { return round_; }

 private:
  bool complete();  // the message in got_ is whole: takes a beat's counts
  bool hub_;
  uint8_t got_[kMaxBeatMessage] = {};
  int n_ = 0;     // bytes of a message read so far (0: none under way)
  int want_ = 0;  // its length (a beat from rank 0: known after its second byte)
  uint8_t bad_ = 0;
  uint32_t counts_[kMaxBeatLinks] = {};
  int count_n_ = 0;
  uint64_t sent_ = 0;
  ClockRound round_;
};

struct HeartbeatLink {
  int fd = -1;   // borrowed rendezvous socket; outlives the thread
  int rank = -1;  // the rank at its other end
};

struct HeartbeatConfig {
  int rank = 0;  // this rank; rank 0 relays its verdicts
  int size = 2;  // the group's ranks
  std::vector<HeartbeatLink> links;
  uint64_t silence_ns = 1'000'000'000;
  uint64_t beat_ns = 100'000'000;  // at most silence_ns / 4 is used
  // The collectives this rank has entered (the group counts them); its
  // beats carry it. Null: 0.
  const std::atomic<uint32_t> *entered = nullptr;
  // The bring-up's clock rounds with rank 0 (a rank off its host), which
  // the beats' rounds then replace one by one; empty: none yet.
  std::vector<ClockRound> clock_rounds;
};

// `culprit`: the rank the verdict is about.
using Verdict = std::function<void(int code, int culprit, const std::string &why)>;

class Heartbeat {
 public:
  static int start(const HeartbeatConfig &cfg, Verdict verdict, std::unique_ptr<Heartbeat> &out,
                   Error &err);
  // This rank failed a call naming `culprit` with `code` for `why`: rank 0
  // tells every other rank; another rank tells rank 0, which passes it on.
  // Any thread; a send that does not fit at once is dropped (the data
  // links still fail the others, naming this rank).
  void tell(int culprit, int code, const std::string &why);
  // True once rank 0's rendezvous connection closed under this rank (any
  // rank but 0): rank 0 is gone, so no verdict can be relayed any more.
  bool hub_gone() const;
  // The collectives `rank` had entered when its last beat (or rank 0's
  // relay of it) left; at most two beat periods old. Any thread.
  uint32_t entered(int rank) const;
  // The offset to rank 0's clock from the rounds kept (bring-up's, then
  // the beats'); false where none (rank 0, or no round yet). Any thread.
  bool clock(ClockOffset &out) const;
  ~Heartbeat();
  Heartbeat(const Heartbeat &) = delete;
  Heartbeat &operator=(const Heartbeat &) = delete;

  struct Impl;

 private:
  Heartbeat() = default;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds4tp::talk
