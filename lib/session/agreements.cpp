// The symmetric agreements: both ranks make the same call at the same
// point, each sends its side and reads the peer's (hash checks, sync
// checkpoints, start-up modes, verify blocks, small exchanges).
#include "session/session.hpp"

#include <cstdio>
#include <cstring>

namespace ds4tp::session {

using wire::FrameType;
using wire::frame_name;
using Lock = std::lock_guard<std::mutex>;

// Sends this rank's `mine` and reads the peer's of the same type.
template <typename Msg>
int Session::swap(FrameType t, size_t bytes, const Msg &mine, Msg &peer, const char *what,
                  Error &err) {
  if (int rc = send(t, bytes, [&](wire::Writer &w) { wire::encode(w, mine); }, err)) return rc;
  talk::Frame f;
  if (int rc = read_expect(t, what, f, err)) return rc;
  return wire::decode(f.payload, f.bytes(), peer, err);
}

// ---- both ranks ------------------------------------------------------------

int Session::hash_check(uint64_t session, uint64_t seq, uint64_t hash, Error &err) {
  Lock l(mu_);
  wire::HashMsg mine{session, seq, hash};
  wire::HashMsg peer;
  if (is_leader()) {
    if (int rc = leader_command(FrameType::Hash, err)) return rc;
    if (int rc = swap(FrameType::Hash, wire::kHashBytes, mine, peer,
                      "waiting for the worker's HASH", err))
      return rc;
  } else {
    if (int rc = worker_only("ds4tp_hash_check", err)) return rc;
    if (owe_ != wire::Reply::Hash)
      return err.set(DS4TP_ESTATE, "on the worker, ds4tp_hash_check answers the leader's HASH "
                     "command: call it after ds4tp_recv_command returned DS4TP_CMD_HASH");
    peer = leader_hash_;
    if (int rc = send(FrameType::Hash, mine, err)) return rc;
    owe_ = wire::Reply::None;
  }
  if (peer.session != session || peer.seq != seq)
    return err.set(DS4TP_EDESYNC,
                   "hash check of (session {}, seq {}) here, (session {}, seq {}) on the peer: the "
                   "ranks are checking different points",
                   session, seq, peer.session, peer.seq);
  if (peer.hash != hash) {
    const bool lead = is_leader();
    return err.set(DS4TP_EDIVERGED,
                   "lockstep divergence at session {} seq {}: leader state hash 0x{:016x}, worker "
                   "0x{:016x}; the transport is fine but the engines computed different states "
                   "(invalidate and sync the session again on both ranks, or stop)",
                   session, seq, lead ? hash : peer.hash, lead ? peer.hash : hash);
  }
  return DS4TP_OK;
}

int Session::sync_checkpoint(uint32_t point, int32_t current, int32_t total, bool requested,
                             bool *cancelled, Error &err) {
  Lock l(mu_);
  if (finished_) return err.set(DS4TP_ESTATE, "this worker already reported a failure");
  wire::CheckpointMsg mine{checkpoint_seq_ + 1, point, current, total, requested ? 1u : 0u};
  wire::CheckpointMsg peer;
  char what[96];
  std::snprintf(what, sizeof what, "waiting for the peer's SYNC_CHECKPOINT %llu (point %u)",
                (unsigned long long)mine.seq, point);
  if (int rc = swap(FrameType::SyncCheckpoint, wire::kCheckpointBytes, mine, peer, what, err))
    return rc;
  if (peer.seq != mine.seq || peer.point != point || peer.current != current ||
      peer.total != total)
    return err.set(DS4TP_EDESYNC,
                   "sync checkpoints differ: here (#{}, point {}, {}/{}), peer (#{}, point {}, "
                   "{}/{}): both ranks must call ds4tp_sync_checkpoint at the same boundaries",
                   mine.seq, point, current, total, peer.seq, peer.point, peer.current, peer.total);
  checkpoint_seq_ = mine.seq;
  if (cancelled) *cancelled = requested || peer.cancel != 0;
  return DS4TP_OK;
}

int Session::agree_exec_mode(uint32_t flags, uint32_t *caps, Error &err) {
  Lock l(mu_);
  wire::ExecModeMsg mine{flags, caps ? *caps : 0};
  wire::ExecModeMsg peer;
  if (int rc = swap(FrameType::ExecMode, wire::kExecModeBytes, mine, peer,
                    "waiting for the peer's EXEC_MODE", err))
    return rc;
  if (peer.flags != flags)
    return err.set(DS4TP_EIDENTITY,
                   "execution mode flags differ: this rank 0x{:x}, peer 0x{:x} (bits 0x{:x} set on "
                   "one side only): resident layouts must match, so enable the same modes on both "
                   "ranks",
                   flags, peer.flags, flags ^ peer.flags);
  if (caps) *caps = mine.caps & peer.caps;
  return DS4TP_OK;
}

int Session::agree_drafter_split(bool on, const uint8_t *meta, bool *agreed, bool *peer_on,
                                 Error &err) {
  Lock l(mu_);
  wire::DrafterSplitMsg mine;
  mine.on = on ? 1 : 0;
  if (meta) std::memcpy(mine.meta.data(), meta, mine.meta.size());
  wire::DrafterSplitMsg peer;
  if (int rc = swap(FrameType::DrafterSplit, wire::kDrafterSplitBytes, mine, peer,
                    "waiting for the peer's DRAFTER_SPLIT", err))
    return rc;
  if (peer_on) *peer_on = peer.on != 0;
  bool both = mine.on && peer.on;
  if (both && mine.meta != peer.meta) {
    size_t k = 0;
    while (mine.meta[k] == peer.meta[k]) k++;
    return err.set(DS4TP_EIDENTITY,
                   "both ranks opted into the split drafter with different metadata: byte {} is "
                   "0x{:02x} here and 0x{:02x} on the peer; load the same drafter on both ranks",
                   k, mine.meta[k], peer.meta[k]);
  }
  if (agreed) *agreed = both;
  return DS4TP_OK;
}

int Session::block_begin(uint32_t rows, uint32_t n_layers, uint32_t *gpl, Error &err) {
  Lock l(mu_);
  uint32_t offered = gpl ? *gpl : 1;
  if (rows < 1 || rows > wire::kVerifyRowsMax)
    return err.set(DS4TP_EINVAL, "verify block rows {} outside 1..{}", rows, wire::kVerifyRowsMax);
  if (n_layers < 1 || n_layers > cfg_.n_layer)
    return err.set(DS4TP_EINVAL, "verify block n_layers {} outside 1..{}", n_layers, cfg_.n_layer);
  if (offered < 1 || offered > wire::kBlockGatesMax)
    return err.set(DS4TP_EINVAL, "gates per layer {} outside 1..{}", offered, wire::kBlockGatesMax);
  if (block_open_)
    return err.set(DS4TP_ESTATE, "verify block {} is still open: call ds4tp_block_end first", block_);
  wire::BlockBeginMsg mine{block_ + 1, rows, n_layers, offered};
  wire::BlockBeginMsg peer;
  if (int rc = swap(FrameType::BlockBegin, wire::kBlockBeginBytes, mine, peer,
                    "waiting for the peer's BLOCK_BEGIN", err))
    return rc;
  if (peer.block != mine.block || peer.rows != rows || peer.n_layers != n_layers)
    return err.set(DS4TP_EDESYNC,
                   "verify blocks differ: here block {} of {} rows x {} layers, peer block {} of "
                   "{} rows x {} layers",
                   mine.block, rows, n_layers, peer.block, peer.rows, peer.n_layers);
  block_ = mine.block;
  block_open_ = true;
  if (gpl) *gpl = offered < peer.gates_per_layer ? offered : peer.gates_per_layer;
  return DS4TP_OK;
}

int Session::block_end(Error &err) {
  Lock l(mu_);
  if (!block_open_) return err.set(DS4TP_ESTATE, "no verify block is open");
  wire::BlockEndMsg mine{block_};
  wire::BlockEndMsg peer;
  if (int rc = swap(FrameType::BlockEnd, wire::kBlockEndBytes, mine, peer,
                    "waiting for the peer's BLOCK_END", err))
    return rc;
  if (peer.block != block_)
    return err.set(DS4TP_EDESYNC, "verify block {} ends here but block {} on the peer", block_,
                   peer.block);
  block_open_ = false;
  return DS4TP_OK;
}

int Session::small_exchange(const void *mine_bytes, void *peer_bytes, uint32_t bytes,
                            Error &err) {
  Lock l(mu_);
  if (bytes < 1 || bytes > wire::kSmallExchangeMax)
    return err.set(DS4TP_EINVAL, "small exchange of {} bytes: 1..{} allowed", bytes,
                   wire::kSmallExchangeMax);
  wire::SmallMsg mine;
  mine.seq = small_seq_ + 1;
  mine.bytes = bytes;
  std::memcpy(mine.data.data(), mine_bytes, bytes);
  wire::SmallMsg peer;
  if (int rc = swap(FrameType::SmallExchange, wire::small_bytes(bytes), mine, peer,
                    "waiting for the peer's SMALL_EXCHANGE", err))
    return rc;
  if (peer.seq != mine.seq || peer.bytes != bytes)
    return err.set(DS4TP_EDESYNC,
                   "small exchange #{} of {} bytes here, #{} of {} bytes on the peer: both ranks "
                   "must pass the same byte count",
                   mine.seq, bytes, peer.seq, peer.bytes);
  small_seq_ = mine.seq;
  std::memcpy(peer_bytes, peer.data.data(), bytes);
  return DS4TP_OK;
}


}  // namespace ds4tp::session
