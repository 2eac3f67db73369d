// What each command's payload struct (the frame table's last column) gives
// the worker's Command, and which of the Command's vectors it borrows while
// it decodes, so a decode reuses their capacity instead of allocating.
// Session::decode_command runs these for the row of the frame's type; a new
// command adds its struct's overloads here.
#pragma once

#include "session/session.hpp"
#include "wire/frames.hpp"

namespace ds4tp::session::fields {

// Lends the Command's vectors to the struct before the decode and takes
// them back, filled, after it (a struct without vectors: nothing to lend).
template <class Msg>
void lend(Command &, Msg &) {}
inline void lend(Command &c, wire::SyncMsg &m) { m.tokens.swap(c.tokens); }
inline void lend(Command &c, wire::SyncImagesMsg &m) {
  m.tokens.swap(c.tokens);
  m.images.swap(c.images);
  m.embd.swap(c.embd);
}
inline void lend(Command &c, wire::VerifyMsg &m) { m.drafts.swap(c.tokens); }
inline void lend(Command &c, wire::EvalBatchMsg &m) { m.items.swap(c.items); }
inline void lend(Command &c, wire::MixedBatchMsg &m) {
  m.prompt.swap(c.tokens);
  m.items.swap(c.items);
}

inline void take(Command &c, wire::SyncMsg &m) {
  c.session = m.session;
  c.logits_floats = m.logits_floats;
  c.tokens.swap(m.tokens);
}
inline void take(Command &c, wire::SyncImagesMsg &m) {
  c.session = m.session;
  c.logits_floats = m.logits_floats;
  c.tokens.swap(m.tokens);
  c.images.swap(m.images);
  c.embd.swap(m.embd);
}
inline void take(Command &c, wire::EvalMsg &m) {
  c.session = m.session;
  c.seq = m.seq;
  c.token = m.token;
  c.logits_floats = m.logits_floats;
}
inline void take(Command &c, wire::MtpMsg &m) {
  c.session = m.session;
  c.seq = m.seq;
  c.token = m.token;
  c.limit = int32_t(m.limit);
}
inline void take(Command &c, wire::PosMsg &m) {
  c.session = m.session;
  c.pos = m.pos;
}
inline void take(Command &c, wire::SessionMsg &m) { c.session = m.session; }
inline void take(Command &, wire::StopMsg &) {}
inline void take(Command &c, wire::HashMsg &m) {
  c.session = m.session;
  c.seq = m.seq;
  c.hash = m.hash;
}
inline void take(Command &c, wire::VerifyMsg &m) {
  c.session = m.session;
  c.flags = m.flags;
  c.tokens.swap(m.drafts);
}
inline void take(Command &c, wire::CommitMsg &m) {
  c.session = m.session;
  c.mode = uint32_t(m.mode);
  c.count = m.count;
  c.logits_floats = m.logits_floats;
}
inline void take(Command &c, wire::CreateMsg &m) {
  c.session = m.session;
  c.ctx_size = m.ctx_size;
}
inline void take(Command &c, wire::EvalBatchMsg &m) {
  c.logits_floats = m.logits_floats;
  c.items.swap(m.items);
}
inline void take(Command &c, wire::MixedBatchMsg &m) {
  c.session = m.session;
  c.logits_floats = m.logits_floats;
  c.tokens.swap(m.prompt);
  c.items.swap(m.items);
}
inline void take(Command &c, wire::DraftMsg &m) {
  c.session = m.session;
  c.token = m.token;
  c.pos = m.pos;
  c.mode = m.mode;
}

}  // namespace ds4tp::session::fields
