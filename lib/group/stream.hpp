// Group stream service: a library thread that all-reduces slot vectors
// for a GPU stream that writes ready words and waits on release words
// (StreamWords; the protocol is in include/ds4tp/ds4tp.h, "GPU streams").
//
// Per seq 1, 2, ...: slot = (seq - 1) % slots; wait for ready[slot],
// all-reduce slot's vector in place (Group::all_reduce, so the bits match
// the direct call), publish release[slot]. On any failure (group failed:
// a peer's death, stop or mark_failed; an all-reduce error; an
// out-of-order ready) the group is failed with the message and the
// release words are poisoned; a stop poisons them too.
//
// Threading: start/stop/halt from the group's owner thread; while
// running, the service thread is the group's only caller (capi refuses
// direct collectives). state()/seq() from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "common/error.hpp"
#include "group/group.hpp"
#include "service/gate_service.hpp"
#include "service/service_thread.hpp"
#include "service/stream_words.hpp"

namespace ds4tp::group {

struct StreamSpec {
  uint32_t bits = 64;
  int mode = DS4TP_STREAM_SEQ;
  uint32_t slots = 2;
  uint64_t count = 0;
  Dtype dtype = Dtype::F32;
};

class GroupStream {
 public:
  explicit GroupStream(Group &g) : g_(g) {}
  ~GroupStream() { halt(); }
  GroupStream(const GroupStream &) = delete;
  GroupStream &operator=(const GroupStream &) = delete;

  // Creates the words on first use (EINVAL for other slots, count or
  // dtype later; other bits or mode reconfigure the same block);
  // ESTATE when running or not connected; EFAILED on a failed group.
  int start(const ServiceConfig &cfg, const StreamSpec &spec, Error &err);
  // OK once the thread ended (words poisoned); ETIMEDOUT when it is
  // still inside an all-reduce at the deadline (call again).
  int stop(Error &err);
  // Stop without a deadline (bounded by the op timeout).
  void halt();
  int state() const { return thread_.state(); }
  bool running() const { return thread_.running(); }
  uint64_t seq() const { return seq_.load(std::memory_order_acquire); }
  StreamWords *words() const { return words_.get(); }

 private:
  void run();
  // True when ready[slot] holds seq's value; false on stop or failure
  // (`failed` set, err holding the reason when it is ours).
  bool wait_ready(uint32_t slot, uint64_t seq, uint64_t idle_since, bool &failed, Error &err);

  Group &g_;
  ServiceConfig cfg_;
  os::WaitPolicy policy_;  // from cfg_ at start; service thread only
  os::SpinBudget budget_;  // the adaptive spin's window, learned across gates
  StreamSpec spec_;
  std::unique_ptr<StreamWords> words_;
  std::atomic<uint64_t> seq_{0};  // last released
  ServiceThread thread_;
};

}  // namespace ds4tp::group
