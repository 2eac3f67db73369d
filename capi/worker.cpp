// The worker's C calls: command receipt and replies, and ds4tp_worker_run,
// which adapts ds4tp_worker_ops onto the library's worker loop. Commands
// reach C as ds4tp_command: a view into the loop's buffers for callbacks
// (no allocation per command), malloc'd copies for ds4tp_recv_command
// (freed by ds4tp_command_free).
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "convert.hpp"
#include "handle.hpp"
#include "session/session.hpp"
#include "session/worker_loop.hpp"
#include "wire/frame_table.hpp"

namespace ds4tp::capi {
namespace {

using session::Command;
using wire::FrameType;

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

// A non-owning C view of a Command: arrays point into the Command, valid
// until it changes. The spans keep their capacity across commands.
struct CommandView {
  ds4tp_command c{};
  std::vector<ds4tp_image_span> spans;

  void fill(const Command &cmd) {
    fill_scalars(cmd, c);
    c.tokens = const_cast<int32_t *>(cmd.tokens.data());
    c.n_tokens = uint32_t(cmd.tokens.size());
    c.items = c_items(cmd.items.data());
    c.n_items = uint32_t(cmd.items.size());
    spans.resize(cmd.images.size());
    for (size_t i = 0; i < cmd.images.size(); i++)
      fill_span(cmd.images[i], cmd.embd.data() + cmd.images[i].embd_offset, spans[i]);
    c.images = spans.empty() ? nullptr : spans.data();
    c.n_images = uint32_t(spans.size());
  }
};

// Copies a command into the caller's C struct with malloc'd arrays (freed
// by ds4tp_command_free). ENOMEM when malloc fails.
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

// The callback the frame table names for a command (SLOT(field)); NULL
// when the engine has none. A callback field without a table row fails the
// count below.
ds4tp_command_fn pick(const ds4tp_worker_ops &o, FrameType t) {
#define SLOT(field) o.field
#define NO_SLOT nullptr
#define DS4TP_PICK(type, number, name, sender, min, unit, max, reply, rows, slot, msg) \
  if (t == FrameType::type) return slot;
  DS4TP_COMMAND_FRAMES(DS4TP_PICK)
#undef DS4TP_PICK
#undef NO_SLOT
#undef SLOT
  return nullptr;
}
static_assert((sizeof(ds4tp_worker_ops) - offsetof(ds4tp_worker_ops, session_create)) /
                  sizeof(ds4tp_command_fn) == wire::worker_callback_count());

// The engine's C callbacks as the loop's WorkerEngine.
class OpsEngine final : public session::WorkerEngine {
 public:
  OpsEngine(ds4tp_pair *pair, const ds4tp_worker_ops &ops, void *user_data)
      : pair_(pair), ops_(ops), user_data_(user_data) {}

  bool runs(FrameType t) const override { return pick(ops_, t) != nullptr; }

  int run(const Command &cmd, session::Reply &reply) override {
    view_.fill(cmd);
    std::memset(&c_reply_, 0, sizeof c_reply_);
    c_reply_.logits = reply.logits;
    c_reply_.logits_rows = reply.logits_rows;
    c_reply_.logits_floats = reply.logits_floats;
    c_reply_.position = reply.position;
    int status = pick(ops_, cmd.type)(user_data_, pair_, &view_.c, &c_reply_);
    c_reply_.message[sizeof c_reply_.message - 1] = 0;
    reply.position = c_reply_.position;
    reply.hash = c_reply_.hash;
    if (status != 0 && c_reply_.message[0] != 0) reply.message = c_reply_.message;
    return status;
  }

 private:
  ds4tp_pair *pair_;  // handed to the callbacks for symmetric calls and gates
  ds4tp_worker_ops ops_;
  void *user_data_;
  CommandView view_;
  ds4tp_reply c_reply_{};
};

}  // namespace
}  // namespace ds4tp::capi

using namespace ds4tp::capi;
using ds4tp::Error;
using ds4tp::session::Session;

extern "C" {

void ds4tp_command_init(ds4tp_command *cmd) {
  if (cmd == nullptr) return;
  std::memset(cmd, 0, sizeof *cmd);
  cmd->size = sizeof *cmd;
}

void ds4tp_command_free(ds4tp_command *cmd) {
  if (cmd == nullptr || cmd->size < offsetof(ds4tp_command, tokens)) return;
  auto holds = [cmd](size_t end) { return cmd->size >= end; };
  if (holds(offsetof(ds4tp_command, n_tokens) + sizeof cmd->n_tokens)) {
    std::free(cmd->tokens);
    cmd->tokens = nullptr;
    cmd->n_tokens = 0;
  }
  if (holds(offsetof(ds4tp_command, n_items) + sizeof cmd->n_items)) {
    std::free(cmd->items);
    cmd->items = nullptr;
    cmd->n_items = 0;
  }
  if (holds(offsetof(ds4tp_command, n_images) + sizeof cmd->n_images)) {
    std::free(cmd->images);  // one block: spans and their floats
    cmd->images = nullptr;
    cmd->n_images = 0;
  }
}

int ds4tp_recv_command(ds4tp_pair *p, ds4tp_command *cmd, int32_t timeout_ms) {
  if (cmd == nullptr) return invalid(p, "ds4tp_recv_command: cmd is NULL");
  if (cmd->size < offsetof(ds4tp_command, tokens) || cmd->size > (1u << 16))
    return invalid(p, "ds4tp_recv_command: cmd->size is invalid: call ds4tp_command_init");
  if (timeout_ms < DS4TP_WAIT_FOREVER)
    return invalid(p, "ds4tp_recv_command: timeout_ms must be >= 0 or DS4TP_WAIT_FOREVER");
  ds4tp_command_free(cmd);  // a reused command gives back the previous arrays
  return control_call(p, [&](Session &s, Error &e) {
    ds4tp::session::Command c;
    int rc = s.recv_command(c, timeout_ms, e);
    if (rc != DS4TP_OK) return rc;
    return copy_command(c, cmd, e);
  });
}

int ds4tp_send_ack(ds4tp_pair *p, int32_t status) {
  return control_call(p, [&](Session &s, Error &e) { return s.send_ack(status, e); });
}

int ds4tp_send_sync_ack(ds4tp_pair *p, int32_t status, uint32_t position) {
  return control_call(p, [&](Session &s, Error &e) { return s.send_sync_ack(status, position, e); });
}

int ds4tp_send_logits(ds4tp_pair *p, const float *half, uint32_t count) {
  if (half == nullptr && count > 0) return invalid(p, "ds4tp_send_logits: half is NULL");
  return control_call(p, [&](Session &s, Error &e) { return s.send_logits(half, count, e); });
}

int ds4tp_send_error(ds4tp_pair *p, int32_t status, const char *message) {
  return control_call(p, [&](Session &s, Error &e) {
    return s.send_error(status, message != nullptr ? message : "", e);
  });
}

void ds4tp_worker_ops_init(ds4tp_worker_ops *ops) {
  if (ops == nullptr) return;
  std::memset(ops, 0, sizeof *ops);
  ops->size = sizeof *ops;
}

int ds4tp_worker_run(ds4tp_pair *p, const ds4tp_worker_ops *ops, void *user_data) {
  if (ops == nullptr) return invalid(p, "ds4tp_worker_run: ops is NULL");
  ds4tp_worker_ops o;
  ds4tp_worker_ops_init(&o);
  if (!copy_sized(ops, o))
    return invalid(p, "ds4tp_worker_run: ops->size is invalid: call ds4tp_worker_ops_init");
  if (int rc = check_live(p)) return rc;
  return guarded(p, [&] {
    Error err;
    OpsEngine engine(p, o, user_data);
    return finish(p, p->impl->run_worker(engine, err), err);
  });
}

}  // extern "C"
