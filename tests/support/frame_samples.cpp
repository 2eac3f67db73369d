#include "support/frame_samples.hpp"

#include <cstring>

#include "wire/frames.hpp"
#include "wire/rdma_frames.hpp"

namespace ds4tp::test {

using namespace ds4tp::wire;

namespace {

template <typename F>
std::vector<uint8_t> build(uint64_t n, F &&fill) {
  std::vector<uint8_t> b(n);
  Writer w(b.data(), b.size());
  fill(w);
  if (!w.ok() || w.size() != n) b.clear();  // a test bug: the sample check will notice
  return b;
}

template <typename Msg>
std::vector<uint8_t> fixed(size_t n, const Msg &m) {
  return build(n, [&](Writer &w) { encode(w, m); });
}

template <size_t N>
std::vector<uint8_t> raw(const uint8_t (&a)[N]) {
  return std::vector<uint8_t>(a, a + N);
}

RdmaInfo sample_rdma_info() {
  RdmaInfo m;
  m.attempt = 1;
  m.qp_num = 0x1234;
  m.psn = 0xabcde;
  m.lid = 3;
  m.gid_index = 1;
  m.port = 1;
  m.link_layer = kLinkEthernet;
  m.mtu = 3;
  m.qp_type = kQpRc;
  for (int i = 0; i < 16; i++) m.gid[size_t(i)] = uint8_t(i * 7);
  m.slab_addr = 0x7f0000001000ull;
  m.slab_bytes = 1 << 20;
  m.rkey = 0x55aa;
  m.max_msg = 65536;
  m.send_depth = 256;
  m.recv_depth = 512;
  return m;
}

}  // namespace

std::vector<FrameSample> frame_samples() {
  std::vector<FrameSample> s;
  auto add = [&](FrameType t, std::vector<uint8_t> p, std::vector<size_t> counts = {}) {
    s.push_back(FrameSample{uint16_t(t), std::move(p), std::move(counts)});
  };
  const int32_t tokens[] = {11, 22, -3, 44, 55, 66};
  const float floats[] = {1.5f, -2.25f, 3.0e-7f, 4.0f, -0.0f, 6.5f, 7.0f, 8.0f};

  add(FrameType::Sync, build(sync_bytes(4), [&](Writer &w) { encode_sync(w, 7, 500, tokens, 4); }),
      {8});
  add(FrameType::Eval, fixed(kEvalBytes, EvalMsg{7, 42, 99, 500}));
  add(FrameType::Rewind, fixed(kPosBytes, PosMsg{7, 12}));
  add(FrameType::Invalidate, fixed(kSessionBytes, SessionMsg{7}));
  add(FrameType::Stop, {});
  add(FrameType::Hash, fixed(kHashBytes, HashMsg{7, 42, 0xfeedface12345678ull}));
  {
    uint8_t b[kRdmaInfoPayload];
    encode_rdma_info(sample_rdma_info(), b);
    add(FrameType::RdmaInfo, raw(b));
  }
  add(FrameType::SyncAck, fixed(kSyncAckBytes, SyncAckMsg{7, 2, 100}));
  {
    uint8_t b[kRdmaReadyPayload];
    encode_rdma_ready(RdmaReady{1}, b);
    add(FrameType::RdmaReady, raw(b));
  }
  add(FrameType::Logits, build(logits_bytes(3), [&](Writer &w) { encode_logits(w, 1, floats, 3); }),
      {0});
  add(FrameType::Verify,
      build(verify_bytes(3), [&](Writer &w) { encode_verify(w, 7, kVerifyDraftShared | kVerifyDraftSeed, tokens, 3); }),
      {8});
  add(FrameType::VerifyCommit, fixed(kCommitBytes, CommitMsg{7, kCommitPrefix, 2, 0}));
  add(FrameType::SessionCreate, fixed(kCreateBytes, CreateMsg{7, 4096}));
  add(FrameType::SessionDestroy, fixed(kSessionBytes, SessionMsg{7}));
  {
    const BatchItem items[] = {{7, 1, 0}, {8, 2, 0}};
    add(FrameType::EvalBatch,
        build(eval_batch_bytes(2), [&](Writer &w) { encode_eval_batch(w, 500, items, 2); }), {0});
  }
  {
    const BatchItem items[] = {{7, 4, 0}};
    add(FrameType::MixedBatch,
        build(mixed_batch_bytes(3, 1),
              [&](Writer &w) { encode_mixed_batch(w, 9, 10, tokens, 3, items, 1); }),
        {8, 12});
  }
  add(FrameType::CommandAck, fixed(kAckBytes, AckMsg{7, 1, uint16_t(FrameType::SpecRestore)}));
  {
    ImageMeta im;
    im.token_start = 1;
    im.token_count = 2;
    im.data_width = 4;
    im.width = 32;
    im.height = 16;
    im.content_width = 30;
    im.content_height = 15;
    for (size_t i = 0; i < im.fingerprint.size(); i++) im.fingerprint[i] = uint8_t(0xa0 + i);
    const float *embd[] = {floats};
    add(FrameType::SyncImages,
        build(sync_images_bytes(6, &im, 1),
              [&](Writer &w) { encode_sync_images(w, 7, 500, tokens, 6, &im, embd, 1); }),
        {8, 12, 24 + 6 * 4 + 4});
  }
  {
    uint8_t b[kRdmaWarmPayload];
    encode_rdma_warm(RdmaWarm{1, kWarmReceived | kWarmSent, 16384}, b);
    add(FrameType::RdmaWarm, raw(b));
  }
  {
    uint8_t b[kRdmaPostedPayload];
    encode_rdma_posted(RdmaPosted{1, 1}, b);
    add(FrameType::RdmaPosted, raw(b));
  }
  add(FrameType::Mtp, fixed(kMtpBytes, MtpMsg{7, 43, 5, 2}));
  add(FrameType::SyncCheckpoint, fixed(kCheckpointBytes, CheckpointMsg{3, 1, 100, 400, 1}));
  add(FrameType::Draft, fixed(kDraftBytes, DraftMsg{7, 5, 10, kDraftPropose}));
  add(FrameType::SpecRestore, fixed(kPosBytes, PosMsg{7, 30}));
  add(FrameType::BlockBegin, fixed(kBlockBeginBytes, BlockBeginMsg{1, 4, 6, 2}));
  add(FrameType::BlockEnd, fixed(kBlockEndBytes, BlockEndMsg{1}));
  {
    SmallMsg m;
    m.seq = 1;
    m.bytes = 16;
    for (uint32_t i = 0; i < 16; i++) m.data[i] = uint8_t(i * 13);
    add(FrameType::SmallExchange, fixed(small_bytes(16), m), {8});
  }
  add(FrameType::HeadRow,
      build(head_row_bytes(5), [&](Writer &w) { encode_head_row(w, 1, 2, floats, 5); }), {12});
  add(FrameType::ExecMode, fixed(kExecModeBytes, ExecModeMsg{3, 5}));
  {
    DrafterSplitMsg m;
    m.on = 1;
    for (size_t i = 0; i < m.meta.size(); i++) m.meta[i] = uint8_t(i);
    add(FrameType::DrafterSplit, fixed(kDrafterSplitBytes, m));
  }
  {
    const char msg[] = "engine ran out of KV cache";
    add(FrameType::WorkerError,
        build(worker_error_bytes(sizeof msg - 1),
              [&](Writer &w) { encode_worker_error(w, 7, -5, 2, msg, sizeof msg - 1); }),
        {16});
  }
  add(FrameType::Heartbeat, fixed(kHeartbeatBytes, HeartbeatMsg{1, 12, 3409, 7}));
  return s;
}

int reencode(uint16_t type, const uint8_t *p, size_t n, std::vector<uint8_t> &out, Error &err) {
  int rc = DS4TP_OK;
  auto fixed_again = [&](auto &m, size_t bytes, auto decoder) {
    rc = decoder(m);
    if (rc == DS4TP_OK) out = fixed(bytes, m);
  };
  switch (FrameType(type)) {
    case FrameType::Sync: {
      SyncMsg m;
      if ((rc = decode(p, n, m, err)) == DS4TP_OK)
        out = build(sync_bytes(m.tokens.size()), [&](Writer &w) {
          encode_sync(w, m.session, m.logits_floats, m.tokens.data(), uint32_t(m.tokens.size()));
        });
      break;
    }
    case FrameType::SyncImages: {
      SyncImagesMsg m;
      if ((rc = decode(p, n, m, err)) == DS4TP_OK) {
        std::vector<const float *> embd;
        for (auto &im : m.images) embd.push_back(m.embd.data() + im.embd_offset);
        out = build(sync_images_bytes(m.tokens.size(), m.images.data(), m.images.size()),
                    [&](Writer &w) {
                      encode_sync_images(w, m.session, m.logits_floats, m.tokens.data(),
                                         uint32_t(m.tokens.size()), m.images.data(), embd.data(),
                                         uint32_t(m.images.size()));
                    });
      }
      break;
    }
    case FrameType::Verify: {
      VerifyMsg m;
      if ((rc = decode(p, n, m, err)) == DS4TP_OK)
        out = build(verify_bytes(m.drafts.size()), [&](Writer &w) {
          encode_verify(w, m.session, m.flags, m.drafts.data(), uint32_t(m.drafts.size()));
        });
      break;
    }
    case FrameType::EvalBatch: {
      EvalBatchMsg m;
      if ((rc = decode(p, n, m, err)) == DS4TP_OK)
        out = build(eval_batch_bytes(m.items.size()), [&](Writer &w) {
          encode_eval_batch(w, m.logits_floats, m.items.data(), uint32_t(m.items.size()));
        });
      break;
    }
    case FrameType::MixedBatch: {
      MixedBatchMsg m;
      if ((rc = decode(p, n, m, err)) == DS4TP_OK)
        out = build(mixed_batch_bytes(m.prompt.size(), m.items.size()), [&](Writer &w) {
          encode_mixed_batch(w, m.session, m.logits_floats, m.prompt.data(),
                             uint32_t(m.prompt.size()), m.items.data(), uint32_t(m.items.size()));
        });
      break;
    }
    case FrameType::Logits: {
      LogitsHead h;
      if ((rc = decode(p, n, h, err)) == DS4TP_OK) {
        std::vector<float> v(h.count);
        read_floats(h.floats, v.data(), v.size());
        out = build(logits_bytes(h.count), [&](Writer &w) { encode_logits(w, h.row, v.data(), h.count); });
      }
      break;
    }
    case FrameType::HeadRow: {
      HeadRowHead h;
      if ((rc = decode(p, n, h, err)) == DS4TP_OK) {
        std::vector<float> v(h.floats);
        read_floats(h.data, v.data(), v.size());
        out = build(head_row_bytes(h.floats),
                    [&](Writer &w) { encode_head_row(w, h.block, h.row, v.data(), h.floats); });
      }
      break;
    }
    case FrameType::WorkerError: {
      WorkerErrorMsg m;
      if ((rc = decode(p, n, m, err)) == DS4TP_OK)
        out = build(worker_error_bytes(m.message.size()), [&](Writer &w) {
          encode_worker_error(w, m.session, m.status, m.command, m.message.data(), m.message.size());
        });
      break;
    }
    case FrameType::SmallExchange: {
      SmallMsg m;
      if ((rc = decode(p, n, m, err)) == DS4TP_OK) out = fixed(small_bytes(m.bytes), m);
      break;
    }
    case FrameType::Stop:
      if ((rc = decode_stop(p, n, err)) == DS4TP_OK) out.clear();
      break;
    case FrameType::Eval: { EvalMsg m; fixed_again(m, kEvalBytes, [&](EvalMsg &x) { return decode(p, n, x, err); }); break; }
    case FrameType::Mtp: { MtpMsg m; fixed_again(m, kMtpBytes, [&](MtpMsg &x) { return decode(p, n, x, err); }); break; }
    case FrameType::Rewind:
    case FrameType::SpecRestore: {
      PosMsg m;
      fixed_again(m, kPosBytes, [&](PosMsg &x) { return decode_pos(FrameType(type), p, n, x, err); });
      break;
    }
    case FrameType::Invalidate:
    case FrameType::SessionDestroy: {
      SessionMsg m;
      fixed_again(m, kSessionBytes, [&](SessionMsg &x) { return decode_session(FrameType(type), p, n, x, err); });
      break;
    }
    case FrameType::Hash: { HashMsg m; fixed_again(m, kHashBytes, [&](HashMsg &x) { return decode(p, n, x, err); }); break; }
    case FrameType::SyncAck: { SyncAckMsg m; fixed_again(m, kSyncAckBytes, [&](SyncAckMsg &x) { return decode(p, n, x, err); }); break; }
    case FrameType::CommandAck: { AckMsg m; fixed_again(m, kAckBytes, [&](AckMsg &x) { return decode(p, n, x, err); }); break; }
    case FrameType::VerifyCommit: { CommitMsg m; fixed_again(m, kCommitBytes, [&](CommitMsg &x) { return decode(p, n, x, err); }); break; }
    case FrameType::SessionCreate: { CreateMsg m; fixed_again(m, kCreateBytes, [&](CreateMsg &x) { return decode(p, n, x, err); }); break; }
    case FrameType::SyncCheckpoint: { CheckpointMsg m; fixed_again(m, kCheckpointBytes, [&](CheckpointMsg &x) { return decode(p, n, x, err); }); break; }
    case FrameType::Draft: { DraftMsg m; fixed_again(m, kDraftBytes, [&](DraftMsg &x) { return decode(p, n, x, err); }); break; }
    case FrameType::BlockBegin: { BlockBeginMsg m; fixed_again(m, kBlockBeginBytes, [&](BlockBeginMsg &x) { return decode(p, n, x, err); }); break; }
    case FrameType::BlockEnd: { BlockEndMsg m; fixed_again(m, kBlockEndBytes, [&](BlockEndMsg &x) { return decode(p, n, x, err); }); break; }
    case FrameType::Heartbeat: { HeartbeatMsg m; fixed_again(m, kHeartbeatBytes, [&](HeartbeatMsg &x) { return decode(p, n, x, err); }); break; }
    case FrameType::ExecMode: { ExecModeMsg m; fixed_again(m, kExecModeBytes, [&](ExecModeMsg &x) { return decode(p, n, x, err); }); break; }
    case FrameType::DrafterSplit: { DrafterSplitMsg m; fixed_again(m, kDrafterSplitBytes, [&](DrafterSplitMsg &x) { return decode(p, n, x, err); }); break; }
    case FrameType::RdmaInfo: {
      RdmaInfo m;
      if ((rc = decode_rdma_info(p, n, m, err)) == DS4TP_OK) {
        out.resize(kRdmaInfoPayload);
        encode_rdma_info(m, out.data());
      }
      break;
    }
    case FrameType::RdmaReady: {
      RdmaReady m;
      if ((rc = decode_rdma_ready(p, n, m, err)) == DS4TP_OK) {
        out.resize(kRdmaReadyPayload);
        encode_rdma_ready(m, out.data());
      }
      break;
    }
    case FrameType::RdmaWarm: {
      RdmaWarm m;
      if ((rc = decode_rdma_warm(p, n, m, err)) == DS4TP_OK) {
        out.resize(kRdmaWarmPayload);
        encode_rdma_warm(m, out.data());
      }
      break;
    }
    case FrameType::RdmaPosted: {
      RdmaPosted m;
      if ((rc = decode_rdma_posted(p, n, m, err)) == DS4TP_OK) {
        out.resize(kRdmaPostedPayload);
        encode_rdma_posted(m, out.data());
      }
      break;
    }
    default: return err.set(DS4TP_EPROTO, "unknown type {}", type);
  }
  return rc;
}

}  // namespace ds4tp::test
