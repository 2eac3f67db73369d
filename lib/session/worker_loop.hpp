// The worker loop behind ds4tp_worker_run: receives each command, calls the
// engine's callback for its kind and sends the replies the protocol
// requires (docs/PROTOCOL.md, "Worker loop").
//
// Threading: runs on the caller's thread (the engine thread); callbacks run
// on it too and may make symmetric control calls and gates on the same
// pair. Allocation: none per EVAL once the reply buffers have grown.
#pragma once

#include <functional>
#include <vector>

#include "common/error.hpp"
#include "common/log.hpp"
#include "ds4tp/ds4tp.h"
#include "session/session.hpp"

namespace ds4tp::session {

// A non-owning C view of a Command: arrays point into the Command, valid
// until it changes.
struct CommandView {
  ds4tp_command c{};
  std::vector<ds4tp_image_span> spans;
  void fill(const Command &cmd);
};

// Copies a command into the caller's C struct with malloc'd arrays (freed
// by ds4tp_command_free). ENOMEM when malloc fails.
int copy_command(const Command &cmd, ds4tp_command *out, Error &err);

struct WorkerEnv {
  Session *session = nullptr;
  ds4tp_pair *handle = nullptr;  // passed to the callbacks
  ds4tp_worker_ops ops{};
  void *user_data = nullptr;
  std::function<bool()> failed;  // the pair's failure latch
  Logger log;
};

// Runs until STOP (DS4TP_OK) or an error (code and message in err).
int run_worker(const WorkerEnv &env, Error &err);

}  // namespace ds4tp::session
