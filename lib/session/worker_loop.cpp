#include "session/worker_loop.hpp"

#include <cstddef>
#include <cstdlib>
#include <cstring>

namespace ds4tp::session {

using wire::FrameType;

// The C batch item and ours share one layout, so arrays pass without copies.
static_assert(sizeof(ds4tp_batch_item) == sizeof(wire::BatchItem));
static_assert(offsetof(ds4tp_batch_item, session_id) == offsetof(wire::BatchItem, session));
static_assert(offsetof(ds4tp_batch_item, token) == offsetof(wire::BatchItem, token));
static_assert(offsetof(ds4tp_batch_item, flags) == offsetof(wire::BatchItem, flags));

namespace {

void fill_span(const wire::ImageMeta &m, const float *embd, ds4tp_image_span &s) {
  s.token_start = m.token_start;
  s.token_count = m.token_count;
  s.data_width = m.data_width;
  s.width = m.width;
  s.height = m.height;
  s.content_width = m.content_width;
  s.content_height = m.content_height;
  std::memcpy(s.fingerprint, m.fingerprint.data(), sizeof s.fingerprint);
  s.embd = embd;
}

void fill_scalars(const Command &cmd, ds4tp_command &c) {
  c.size = sizeof c;
  c.kind = int32_t(cmd.type);
  c.session_id = cmd.session;
  c.seq = cmd.seq;
  c.hash = cmd.hash;
  c.token = cmd.token;
  c.pos = cmd.pos;
  c.limit = cmd.limit;
  c.count = cmd.count;
  c.mode = cmd.mode;
  c.flags = cmd.flags;
  c.ctx_size = cmd.ctx_size;
  c.logits_floats = cmd.logits_floats;
}

// The callback the frame table names for a command (SLOT(field)); nullptr
// for none. A callback field without a table row fails the count below.
ds4tp_command_fn pick(const ds4tp_worker_ops &o, FrameType t) {
#define SLOT(field) o.field
#define NO_SLOT nullptr
#define DS4TP_PICK(type, number, name, sender, min, unit, max, reply, rows, slot) \
  if (t == FrameType::type) return slot;
  DS4TP_COMMAND_FRAMES(DS4TP_PICK)
#undef DS4TP_PICK
#undef NO_SLOT
#undef SLOT
  return nullptr;
}
static_assert((sizeof(ds4tp_worker_ops) - offsetof(ds4tp_worker_ops, session_create)) /
                  sizeof(ds4tp_command_fn) == wire::worker_callback_count());

// Lockstep or format errors the leader should hear about before the loop
// ends (a dead connection cannot carry the report).
bool worth_reporting(int rc) {
  return rc == DS4TP_EPROTO || rc == DS4TP_EDESYNC || rc == DS4TP_EUNSUPPORTED ||
         rc == DS4TP_EINVAL || rc == DS4TP_ESTATE;
}

}  // namespace

void CommandView::fill(const Command &cmd) {
  fill_scalars(cmd, c);
  c.tokens = const_cast<int32_t *>(cmd.tokens.data());
  c.n_tokens = uint32_t(cmd.tokens.size());
  c.items = reinterpret_cast<ds4tp_batch_item *>(const_cast<wire::BatchItem *>(cmd.items.data()));
  c.n_items = uint32_t(cmd.items.size());
  spans.resize(cmd.images.size());
  for (size_t i = 0; i < cmd.images.size(); i++)
    fill_span(cmd.images[i], cmd.embd.data() + cmd.images[i].embd_offset, spans[i]);
  c.images = spans.empty() ? nullptr : spans.data();
  c.n_images = uint32_t(spans.size());
}

int copy_command(const Command &cmd, ds4tp_command *out, Error &err) {
  ds4tp_command c{};
  fill_scalars(cmd, c);
  if (!cmd.tokens.empty()) {
    c.tokens = static_cast<int32_t *>(std::malloc(cmd.tokens.size() * sizeof(int32_t)));
    if (c.tokens == nullptr) return err.set(DS4TP_ENOMEM, "out of memory for {} tokens", cmd.tokens.size());
    std::memcpy(c.tokens, cmd.tokens.data(), cmd.tokens.size() * sizeof(int32_t));
    c.n_tokens = uint32_t(cmd.tokens.size());
  }
  if (!cmd.items.empty()) {
    c.items = static_cast<ds4tp_batch_item *>(std::malloc(cmd.items.size() * sizeof(ds4tp_batch_item)));
    if (c.items == nullptr) {
      std::free(c.tokens);
      return err.set(DS4TP_ENOMEM, "out of memory for {} batch items", cmd.items.size());
    }
    std::memcpy(c.items, cmd.items.data(), cmd.items.size() * sizeof(ds4tp_batch_item));
    c.n_items = uint32_t(cmd.items.size());
  }
  if (!cmd.images.empty()) {
    // One block: the spans, then every image's floats, freed together.
    size_t head = cmd.images.size() * sizeof(ds4tp_image_span);
    head = (head + alignof(float) - 1) / alignof(float) * alignof(float);
    size_t total = head + cmd.embd.size() * sizeof(float);
    auto *block = static_cast<uint8_t *>(std::malloc(total));
    if (block == nullptr) {
      std::free(c.tokens);
      std::free(c.items);
      return err.set(DS4TP_ENOMEM, "out of memory for {} image bytes", total);
    }
    auto *spans = reinterpret_cast<ds4tp_image_span *>(block);
    auto *floats = reinterpret_cast<float *>(block + head);
    if (!cmd.embd.empty()) std::memcpy(floats, cmd.embd.data(), cmd.embd.size() * sizeof(float));
    for (size_t i = 0; i < cmd.images.size(); i++)
      fill_span(cmd.images[i], floats + cmd.images[i].embd_offset, spans[i]);
    c.images = spans;
    c.n_images = uint32_t(cmd.images.size());
  }
  // The caller's struct may be older (smaller) than ours: copy what fits,
  // and never hand over arrays it has no field for.
  uint32_t size = out->size < sizeof c ? out->size : uint32_t(sizeof c);
  auto holds = [size](size_t end) { return size >= end; };
  if (!holds(offsetof(ds4tp_command, n_images) + sizeof c.n_images)) {
    std::free(c.images);
    c.images = nullptr;
  }
  if (!holds(offsetof(ds4tp_command, n_items) + sizeof c.n_items)) {
    std::free(c.items);
    c.items = nullptr;
  }
  if (!holds(offsetof(ds4tp_command, n_tokens) + sizeof c.n_tokens)) {
    std::free(c.tokens);
    c.tokens = nullptr;
  }
  c.size = size;
  std::memcpy(out, &c, size);
  return DS4TP_OK;
}

int run_worker(const WorkerEnv &env, Error &err) {
  Session &s = *env.session;
  Command cmd;
  CommandView view;
  std::vector<float> logits;
  ds4tp_reply reply;

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

    ds4tp_command_fn fn = pick(env.ops, cmd.type);
    if (fn == nullptr) {
      err.set(DS4TP_EUNSUPPORTED, "the worker engine has no {} callback for {} commands",
              callback_name(cmd.type), wire::frame_name(cmd.type));
      return report(DS4TP_EUNSUPPORTED, err.message, DS4TP_EUNSUPPORTED);
    }
    view.fill(cmd);
    std::memset(&reply, 0, sizeof reply);
    reply.logits_rows = logits_rows(cmd);
    reply.logits_floats = cmd.logits_floats;
    size_t floats = size_t(reply.logits_rows) * reply.logits_floats;  // bounded by recv_command
    if (floats > 0) {
      if (logits.size() < floats) logits.resize(floats);
      reply.logits = logits.data();
    }
    if (cmd.type == FrameType::Sync || cmd.type == FrameType::SyncImages)
      reply.position = uint32_t(cmd.tokens.size());

    int status = fn(env.user_data, env.handle, &view.c, &reply);
    reply.message[sizeof reply.message - 1] = 0;

    const bool soft_ok = status > 0 && has_status_reply(cmd.type);
    if (status < 0 || (status > 0 && !soft_ok)) {
      std::string why = reply.message[0] ? std::string(reply.message)
                                         : fmt::format("the {} callback returned {}",
                                                       callback_name(cmd.type), status);
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
