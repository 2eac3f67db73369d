// A tiered leader's second thread: it runs chunk k's all-reduce across
// hosts while the leader's own thread runs the host's shm steps of chunk
// k + 1 (Group::pipelined_all_reduce), so the link between the hosts does
// not idle while a host sums or hands back. One chunk at a time; made on
// the first call that needs it and joined when the group is freed (it is
// idle then: every call waits for its last chunk before it returns).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "common/error.hpp"

namespace ds4tp::group {

class CrossWorker {
 public:
  // `run(q, m, err)`: chunk q's step across hosts, `m` elements; its status.
  using Run = int (*)(void *ctx, uint8_t *q, uint64_t m, Error &err);
  CrossWorker(Run run, void *ctx);
  ~CrossWorker();
  CrossWorker(const CrossWorker &) = delete;
  CrossWorker &operator=(const CrossWorker &) = delete;

  void post(uint8_t *q, uint64_t m);
  // Waits for the posted chunk: its status, its error in `err` (left as
  // it is on success), and its time added to `ns`.
  int wait(Error &err, uint64_t &ns);
  bool busy() const { return posted_; }  // the caller's thread only

 private:
  void loop();

  Run run_;
  void *ctx_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint8_t *q_ = nullptr;
  uint64_t m_ = 0;
  bool has_job_ = false, done_ = false, quit_ = false;
  int rc_ = DS4TP_OK;
  Error err_;
  uint64_t ns_ = 0;
  bool posted_ = false;
  std::thread thread_;  // last: starts once the rest is set
};

}  // namespace ds4tp::group
