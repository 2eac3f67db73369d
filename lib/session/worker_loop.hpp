// The worker loop behind ds4tp_worker_run: receives each command, has the
// engine run it and sends the replies the protocol requires
// (docs/PROTOCOL.md §5.2). The engine is reached through
// WorkerEngine; the C layer adapts ds4tp_worker_ops onto it.
//
// Threading: runs on the caller's thread (the engine thread); the engine
// runs on it too and may make symmetric control calls and gates on the
// same pair. Allocation: none per EVAL once the reply buffers have grown.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/log.hpp"
#include "session/session.hpp"

namespace ds4tp::session {

// What the engine hands back for one command. The loop presets every
// field; `logits` points into the loop's own buffer.
struct Reply {
  float *logits = nullptr;  // logits_rows * logits_floats floats to fill; null when none are due
  uint32_t logits_rows = 0;
  uint32_t logits_floats = 0;
  uint32_t position = 0;  // SYNC*: tokens held after it (preset to n_tokens)
  uint64_t hash = 0;      // HASH: this rank's state hash
  std::string message;    // why, when the status is not 0 (empty: a generic message)
};

// The engine's side of the loop; both calls run on the loop's thread.
class WorkerEngine {
 public:
  virtual ~WorkerEngine() = default;
  // Whether the engine runs commands of this type. One that arrives without
  // ends the loop with EUNSUPPORTED (reported to the leader).
  virtual bool runs(wire::FrameType t) const = 0;
  // Runs one command: 0 on success, a positive ack status for commands
  // with a status reply, a negative engine status on failure.
  virtual int run(const Command &cmd, Reply &reply) = 0;
};

struct WorkerEnv {
  Session *session = nullptr;
  WorkerEngine *engine = nullptr;
  std::function<bool()> failed;  // the pair's failure latch
  Logger log;
};

// Runs until STOP (DS4TP_OK) or an error (code and message in err).
int run_worker(const WorkerEnv &env, Error &err);

}  // namespace ds4tp::session
