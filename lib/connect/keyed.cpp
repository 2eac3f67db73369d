// The pre-shared-key exchange of a keyed bring-up (docs/PROTOCOL.md 1.4),
// both sides:
//
//   worker -> leader   nonce W
//   leader -> worker   nonce L
//   worker -> leader   hello W, proof W
//   leader -> worker   hello L, proof L
//
// Each side judges the other's hello only once its proof verifies, so only
// a key holder can end a bring-up with a verdict. The data connection's
// proofs (over the same transcript) are checked in leader.cpp and
// worker.cpp, next to the cookie.
#include "connect/state.hpp"

namespace ds4tp::connect {

// Leader, the worker's nonce: answer with ours, then await its hello.
void Bringup::Impl::leader_nonce(Conn *c) {
  Error e;
  if (wire::decode_auth_nonce_body(c->body(), c->body_len(), c->tr.worker_nonce, e) !=
      DS4TP_OK) {
    drop(c, e.message);
    return;
  }
  if (auth::fresh_nonce(c->tr.leader_nonce, e) != DS4TP_OK) {
    fail(e);
    return;
  }
  c->tr.worker_nonce_msg = c->message();
  c->tr.leader_nonce_msg = wire::encode_auth_nonce(c->tr.leader_nonce);
  c->phase = Conn::Phase::AwaitHello;
  write(c, c->tr.leader_nonce_msg);
  read_next(c);
}

// Leader after the nonces: the worker's hello, then its proof.
void Bringup::Impl::leader_keyed(Conn *c) {
  Error e;
  if (c->phase == Conn::Phase::AwaitHello) {
    if (!c->is(wire::Kind::Control) || c->pre.version != wire::kProtocolVersion) {
      drop(c, fmt::format("expected the worker's hello after the nonces, got kind {} "
                          "version {}",
                          c->pre.kind, c->pre.version));
      return;
    }
    if (wire::decode_hello_body(c->body(), c->body_len(), c->hello, e) != DS4TP_OK) {
      drop(c, e.message);
      return;
    }
    c->tr.worker_hello_msg = c->message();
    c->phase = Conn::Phase::AwaitProof;
    read_next(c);
    return;
  }
  if (!c->is(wire::Kind::AuthProof)) {
    drop(c, fmt::format("expected the worker's proof after its hello, got kind {}",
                        c->pre.kind));
    return;
  }
  wire::Mac got{}, want{};
  if (wire::decode_auth_proof_body(c->body(), c->body_len(), got, e) != DS4TP_OK) {
    drop(c, e.message);
    return;
  }
  if (auth::worker_proof(cfg.key, c->tr, want, e) != DS4TP_OK) {
    fail(e);
    return;
  }
  if (!auth::mac_equal(got, want)) {
    reject(c, wire::RejectReason::BadProof,
           "the worker's proof does not verify: its pre-shared key differs from this "
           "leader's (or its hello was altered on the way)");
    return;
  }
  if (leader_busy(c)) return;
  leader_adopt(c, std::move(c->hello));
  transcript = c->tr;
  transcript.leader_hello_msg = mine_bytes;
  wire::Mac mine_mac{};
  if (auth::leader_proof(cfg.key, transcript, mine_mac, e) != DS4TP_OK) {
    fail(e);
    return;
  }
  write(c, concat(mine_bytes, wire::encode_auth_proof(mine_mac)));
}

// Worker, connected: open with a fresh nonce per attempt, so a recorded
// exchange never verifies again.
bool Bringup::Impl::worker_send_nonce(Conn *c) {
  Error e;
  if (auth::fresh_nonce(c->tr.worker_nonce, e) != DS4TP_OK) {
    fail(e);
    return false;
  }
  c->tr.worker_nonce_msg = wire::encode_auth_nonce(c->tr.worker_nonce);
  c->tr.worker_hello_msg = mine_bytes;
  c->phase = Conn::Phase::AwaitNonce;
  write(c, c->tr.worker_nonce_msg);
  return true;
}

// Worker: the leader's nonce, then its hello, then its proof (a plain
// hello from an unkeyed leader was refused in worker_message).
void Bringup::Impl::worker_keyed(Conn *c) {
  const uint16_t kind = c->pre.kind;
  Error e;
  switch (c->phase) {
    case Conn::Phase::First:
    case Conn::Phase::AwaitNonce: {
      if (!c->is(wire::Kind::AuthNonce) ||
          wire::decode_auth_nonce_body(c->body(), c->body_len(), c->tr.leader_nonce, e) !=
              DS4TP_OK) {
        fail(DS4TP_EPROTO, "the leader at {} answered the nonce with kind {} ({})", c->name,
             kind, e.message.empty() ? "not a nonce" : e.message);
        return;
      }
      c->tr.leader_nonce_msg = c->message();
      wire::Mac proof{};
      if (auth::worker_proof(cfg.key, c->tr, proof, e) != DS4TP_OK) {
        fail(e);
        return;
      }
      c->phase = Conn::Phase::AwaitHello;
      write(c, concat(c->tr.worker_hello_msg, wire::encode_auth_proof(proof)));
      read_next(c);
      return;
    }
    case Conn::Phase::AwaitHello:
      if (!c->is(wire::Kind::Control)) {
        fail(DS4TP_EPROTO, "the leader at {} sent kind {} where its hello belongs", c->name,
             kind);
        return;
      }
      if (!worker_decode_hello(c, c->hello)) return;
      c->tr.leader_hello_msg = c->message();
      c->phase = Conn::Phase::AwaitProof;
      read_next(c);
      return;
    case Conn::Phase::AwaitProof: {
      wire::Mac got{}, want{};
      if (!c->is(wire::Kind::AuthProof) ||
          wire::decode_auth_proof_body(c->body(), c->body_len(), got, e) != DS4TP_OK) {
        fail(DS4TP_EPROTO, "the leader at {} sent kind {} where its proof belongs ({})",
             c->name, kind, e.message.empty() ? "not a proof" : e.message);
        return;
      }
      if (auth::leader_proof(cfg.key, c->tr, want, e) != DS4TP_OK) {
        fail(e);
        return;
      }
      if (!auth::mac_equal(got, want)) {
        fail(DS4TP_EAUTH,
             "the leader at {} could not prove it holds this worker's pre-shared key: the "
             "keys differ, the hellos were altered on the way, or it is not your leader",
             c->name);
        return;
      }
      transcript = c->tr;
      worker_judge(c, std::move(c->hello));
      return;
    }
  }
}

}  // namespace ds4tp::connect
