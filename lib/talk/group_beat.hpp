// Liveness for tcp groups (the pair's is liveness.hpp; both judge by the
// one silence rule of silence.hpp): a thread per rank that beats on the rendezvous
// connections (rank 0 to every rank, every rank to rank 0) and judges the
// ranks it hears. A rank not heard for silence_ns (stopped, frozen, or
// its link cut: nothing closes the socket) fails the group here; rank 0
// then tells every other rank which rank it was, so all of them name it.
//
// Wire (after the rendezvous "go" byte, both directions): kBeat bytes;
// from rank 0 a 3-byte notice: kNotice, the silent rank, and the error
// code negated; and, either way, a 4-byte verdict: kVerdict, the rank a
// failed call names, the code negated, the rank that found it. A rank
// that fails a call tells rank 0 (tell()), which passes it on, so every
// rank names the same cause. A connection that closes is left to the data
// links: a rank that exits after its last collective is not a failure,
// and one that dies mid-collective already fails its peers' steps.
//
// Threading: start() spawns the thread ("ds4tp-gbeat"); the destructor
// stops and joins it, so no verdict runs after it returns. The verdict
// runs on the thread, at most once.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/error.hpp"

namespace ds4tp::talk {

constexpr int kMaxBeatLinks = 16;  // a group's ranks at most
constexpr uint8_t kBeat = 0x48;    // 'H'
constexpr uint8_t kNotice = 0x46;  // 'F'
constexpr uint8_t kVerdict = 0x56;  // 'V'

// Reads one link's byte stream as it arrives (a notice or verdict may be
// split across reads). feed() stops at the first notice, verdict or bad
// byte: `used` says how many bytes it took.
class BeatReader {
 public:
  enum Event { kNone, kNoticed, kBadByte };
  explicit BeatReader(bool notices_allowed) : notices_(notices_allowed) {}
  Event feed(const uint8_t *p, size_t n, size_t &used);
  int notice_rank() const { return got_[1]; }
  int notice_code() const { return -int(got_[2]); }  // a ds4tp_status
  // A verdict's finder; -1 for rank 0's silence notice.
  int notice_finder() const { return got_[0] == kVerdict ? got_[3] : -1; }
  uint8_t bad_byte() const { return bad_; }

 private:
  bool notices_;  // silence notices: only rank 0 sends them
  uint8_t got_[4] = {};
  int n_ = 0;     // bytes of a message read so far (0: none under way)
  int want_ = 0;  // its length
  uint8_t bad_ = 0;
};

struct HeartbeatLink {
  int fd = -1;   // borrowed rendezvous socket; outlives the thread
  int rank = -1;  // the rank at its other end
};

struct HeartbeatConfig {
  int rank = 0;  // this rank; rank 0 relays its verdicts
  std::vector<HeartbeatLink> links;
  uint64_t silence_ns = 1'000'000'000;
  uint64_t beat_ns = 100'000'000;  // at most silence_ns / 4 is used
};

// `culprit`: the rank the verdict is about.
using Verdict = std::function<void(int code, int culprit, const std::string &why)>;

class Heartbeat {
 public:
  static int start(const HeartbeatConfig &cfg, Verdict verdict, std::unique_ptr<Heartbeat> &out,
                   Error &err);
  // This rank failed a call naming `culprit` with `code`: rank 0 tells
  // every other rank; another rank tells rank 0, which passes it on. Any
  // thread; a send that does not fit at once is dropped (the data links
  // still fail the others, naming this rank).
  void tell(int culprit, int code);
  // True once rank 0's rendezvous connection closed under this rank (any
  // rank but 0): rank 0 is gone, so no verdict can be relayed any more.
  bool hub_gone() const;
  ~Heartbeat();
  Heartbeat(const Heartbeat &) = delete;
  Heartbeat &operator=(const Heartbeat &) = delete;

  struct Impl;

 private:
  Heartbeat() = default;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds4tp::talk
