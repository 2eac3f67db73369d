#include "session/worker_loop.hpp"

namespace ds4tp::session {

using wire::FrameType;

namespace {

const char *callback_name(FrameType t) {
  switch (t) {
    case FrameType::SessionCreate: return "session_create";
    case FrameType::SessionDestroy: return "session_destroy";
    case FrameType::Sync: return "sync";
    case FrameType::SyncImages: return "sync_images";
    case FrameType::Eval: return "eval";
    case FrameType::Mtp: return "mtp";
    case FrameType::Rewind: return "rewind";
    case FrameType::Invalidate: return "invalidate";
    case FrameType::SpecRestore: return "spec_restore";
    case FrameType::EvalBatch: return "eval_batch";
    case FrameType::MixedBatch: return "mixed_batch";
    case FrameType::Verify: return "verify";
    case FrameType::VerifyCommit: return "verify_commit";
    case FrameType::Draft: return "draft";
    case FrameType::Hash: return "hash";
    default: return "?";
  }
}

// Lockstep or format errors the leader should hear about before the loop
// ends (a dead connection cannot carry the report).
bool worth_reporting(int rc) {
  return rc == DS4TP_EPROTO || rc == DS4TP_EDESYNC || rc == DS4TP_EUNSUPPORTED ||
         rc == DS4TP_EINVAL || rc == DS4TP_ESTATE;
}

}  // namespace

int run_worker(const WorkerEnv &env, Error &err) {
  Session &s = *env.session;
  Command cmd;
  std::vector<float> logits;
  Reply reply;

  // Tells the leader (best effort) why this worker stops, then returns rc.
  auto report = [&](int status, const std::string &why, int rc) {
    Error ignored;
    if (s.send_error(status, why, ignored) != DS4TP_OK)
      env.log.debug("could not report the failure to the leader: {}", ignored.message);
    return rc;
  };

  for (;;) {
    if (env.failed())
      return err.set(DS4TP_EFAILED, "worker loop: the pair failed; stopping");
    int rc = s.recv_command(cmd, control::kNoTimeout, err);
    if (rc != DS4TP_OK) {
      if (worth_reporting(rc)) return report(rc, err.message, rc);
      return rc;
    }
    if (cmd.type == FrameType::Stop) return DS4TP_OK;

    if (!env.engine->runs(cmd.type)) {
      err.set(DS4TP_EUNSUPPORTED, "the worker engine has no {} callback for {} commands",
              callback_name(cmd.type), wire::frame_name(cmd.type));
      return report(DS4TP_EUNSUPPORTED, err.message, DS4TP_EUNSUPPORTED);
    }
    reply.logits = nullptr;
    reply.logits_rows = logits_rows(cmd);
    reply.logits_floats = cmd.logits_floats;
    size_t floats = size_t(reply.logits_rows) * reply.logits_floats;  // bounded by recv_command
    if (floats > 0) {
      if (logits.size() < floats) logits.resize(floats);
      reply.logits = logits.data();
    }
    reply.position = cmd.type == FrameType::Sync || cmd.type == FrameType::SyncImages
                         ? uint32_t(cmd.tokens.size())
                         : 0;
    reply.hash = 0;
    reply.message.clear();  // keeps its capacity

    int status = env.engine->run(cmd, reply);

    const bool soft_ok = status > 0 && has_status_reply(cmd.type);
    if (status < 0 || (status > 0 && !soft_ok)) {
      std::string why = !reply.message.empty()
                            ? reply.message
                            : fmt::format("the {} callback returned {}", callback_name(cmd.type),
                                          status);
      if (status > 0)
        why += fmt::format(" ({} has no status reply: return 0, or a negative status on failure)",
                           wire::frame_name(cmd.type));
      err.set(DS4TP_EFAILED, "worker {} callback failed with status {}: {} (reported to the leader)",
              callback_name(cmd.type), status, why);
      return report(status, why, DS4TP_EFAILED);
    }
    if (env.failed())  // a control call or gate inside the callback failed
      return err.set(DS4TP_EFAILED, "worker loop: the pair failed inside the {} callback",
                     callback_name(cmd.type));

    switch (cmd.type) {
      case FrameType::Sync:
      case FrameType::SyncImages: rc = s.send_sync_ack(status, reply.position, err); break;
      case FrameType::Hash:
        rc = s.hash_check(cmd.session, cmd.seq, reply.hash, err);
        if (rc == DS4TP_EDIVERGED) {
          env.log.warn("{}", err.message);
          rc = DS4TP_OK;  // both ranks know; the leader decides how to recover
        }
        break;
      default:
        if (has_status_reply(cmd.type)) rc = s.send_ack(status, err);
    }
    if (rc != DS4TP_OK) return worth_reporting(rc) ? report(rc, err.message, rc) : rc;
    for (uint32_t row = 0; s.logits_owed() > 0; row++) {
      rc = s.send_logits(logits.data() + size_t(row) * cmd.logits_floats, cmd.logits_floats, err);
      if (rc != DS4TP_OK) return rc;
    }
  }
}

}  // namespace ds4tp::session
