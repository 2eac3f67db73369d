// Seed corpora: valid messages of every kind, made with the library's own
// encoders so they follow the format as it is today.
#include <cstring>

#include "fuzz/fuzz.hpp"
#include "wire/frames.hpp"
#include "wire/gate_header.hpp"
#include "wire/hello.hpp"
#include "wire/rdma_frames.hpp"

namespace ds4tp::fuzz {

namespace {

using namespace ds4tp::wire;

std::vector<Bytes> hello_seeds() {
  std::vector<Bytes> out;
  Hello h;
  h.role = DS4TP_ROLE_WORKER;
  h.caps = kCapTcp | kCapShm;
  h.id.model_bytes = 123456789;
  h.id.n_layer = 43;
  h.id.n_embd = 4096;
  h.id.n_vocab = 129280;
  h.id.quant_bits = 2;
  h.id.ctx_size = 32768;
  h.id.gate_slot_mask = {0x5555, 0, 0, 1};
  out.push_back(encode_hello(h));
  h.role = DS4TP_ROLE_LEADER;
  h.cookie = 0x0123456789abcdefull;
  h.id.blob = {'s', 'h', 'a', '2', '5', '6', ':', 0xaa, 0xbb};
  out.push_back(encode_hello(h));
  out.push_back(encode_data(0x0123456789abcdefull));
  Mac mac{};
  mac.fill(0x42);
  out.push_back(encode_data(0x0123456789abcdefull, &mac));
  out.push_back(encode_data_ack());
  out.push_back(encode_data_ack(&mac));
  Nonce nonce{};
  nonce.fill(7);
  out.push_back(encode_auth_nonce(nonce));
  out.push_back(encode_auth_proof(mac));
  out.push_back(encode_auth_reject(RejectReason::BadProof));
  return out;
}

std::vector<Bytes> gate_seeds() {
  std::vector<Bytes> out;
  for (GateHeader h : {GateHeader{uint16_t(GateKind::Row), 3, 1, 42, 16384},
                       GateHeader{uint16_t(GateKind::Batch), 7, 8, 9, 8 * 16384},
                       GateHeader{uint16_t(GateKind::Big), 0, 0, 1, 1ull << 30}}) {
    Bytes b(kGateHeaderBytes);
    encode_gate_header(h, b.data());
    out.push_back(b);
  }
  return out;
}

// RDMA set-up payloads, each prefixed by the byte that picks its decoder.
std::vector<Bytes> rdma_seeds() {
  std::vector<Bytes> out;
  RdmaInfo info;
  info.attempt = 1;
  info.qp_num = 0x1234;
  info.psn = 0xABCDE;
  info.link_layer = kLinkEthernet;
  info.mtu = 3;
  info.qp_type = kQpRc;
  info.gid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1};
  info.slab_addr = 0x7f0000000000ull;
  info.slab_bytes = 26 << 20;
  info.rkey = 0x55;
  info.max_msg = 1 << 20;
  info.send_depth = 256;
  info.recv_depth = 512;
  Bytes b(1 + kRdmaInfoPayload, 0);
  encode_rdma_info(info, b.data() + 1);
  out.push_back(b);
  b.assign(1 + kRdmaReadyPayload, 1);
  encode_rdma_ready(RdmaReady{2}, b.data() + 1);
  out.push_back(b);
  b.assign(1 + kRdmaPostedPayload, 2);
  encode_rdma_posted(RdmaPosted{0, 1}, b.data() + 1);
  out.push_back(b);
  b.assign(1 + kRdmaWarmPayload, 3);
  encode_rdma_warm(RdmaWarm{0, kWarmReceived | kWarmSent, 16384}, b.data() + 1);
  out.push_back(b);
  for (bool can : {true, false}) {  // a group link's status
    uint8_t st[kLinkStatusMax];
    const size_t n = encode_link_status(can, "port 1 of fv0 is DOWN", st);
    b.assign(1, 4);
    b.insert(b.end(), st, st + n);
    out.push_back(b);
  }
  return out;
}

// Payload seeds, each as {type, payload}.
std::vector<std::pair<uint16_t, Bytes>> payload_seeds() {
  std::vector<std::pair<uint16_t, Bytes>> out;
  // Every type at its minimum size (zeros: valid for many, a near miss for
  // the rest).
  for (uint16_t t = kFrameTypeMin; t <= kFrameTypeMax; t++)
    if (const FrameRule *r = frame_rule(t)) out.push_back({t, Bytes(r->min, 0)});
  uint8_t buf[4096];
  auto take = [&](uint16_t t, Writer &w) {
    if (w.ok()) out.push_back({t, Bytes(buf, buf + w.size())});
  };
  {
    Writer w(buf, sizeof buf);
    EvalMsg m;
    m.session = 1;
    m.seq = 17;
    m.token = 42;
    m.logits_floats = 129280;
    encode(w, m);
    take(uint16_t(FrameType::Eval), w);
  }
  {
    Writer w(buf, sizeof buf);
    const int32_t toks[] = {1, 2, 3, 4, 5};
    encode_sync(w, 1, 0, toks, 5);
    take(uint16_t(FrameType::Sync), w);
  }
  {
    Writer w(buf, sizeof buf);
    const int32_t drafts[] = {9, 8, 7};
    encode_verify(w, 1, kVerifyHeadSplit, drafts, 3);
    take(uint16_t(FrameType::Verify), w);
  }
  {
    Writer w(buf, sizeof buf);
    BatchItem items[2];
    items[0].session = 1;
    items[1].session = 2;
    encode_eval_batch(w, 0, items, 2);
    take(uint16_t(FrameType::EvalBatch), w);
  }
  {
    Writer w(buf, sizeof buf);
    const char msg[] = "worker out of memory";
    encode_worker_error(w, 1, DS4TP_ENOMEM, uint16_t(FrameType::Eval), msg, sizeof msg - 1);
    take(uint16_t(FrameType::WorkerError), w);
  }
  return out;
}

}  // namespace

const std::vector<std::string> &targets() {
  static const std::vector<std::string> t = {"hello", "gate_header", "frame_header",
                                             "frame_payloads", "rdma_frames",
                                             "group_frames", "shm_offer", "failover",
                                             "all_to_all"};
  return t;
}

int run(const std::string &target, const uint8_t *d, size_t n) {
  if (target == "hello") return hello(d, n);
  if (target == "gate_header") return gate_header(d, n);
  if (target == "frame_header") return frame_header(d, n);
  if (target == "frame_payloads") return frame_payloads(d, n);
  if (target == "rdma_frames") return rdma_frames(d, n);
  if (target == "group_frames") return group_frames(d, n);
  if (target == "shm_offer") return shm_offer(d, n);
  if (target == "failover") return failover(d, n);
  if (target == "all_to_all") return all_to_all(d, n);
  return -1;
}

std::vector<Bytes> seeds(const std::string &target) {
  if (target == "hello") return hello_seeds();
  if (target == "gate_header") return gate_seeds();
  if (target == "rdma_frames") return rdma_seeds();
  if (target == "group_frames") return group_seeds();
  if (target == "shm_offer") return shm_offer_seeds();
  if (target == "failover") return failover_seeds();
  if (target == "all_to_all") return all_to_all_seeds();
  std::vector<Bytes> out;
  uint32_t counter = 1;
  for (auto &[type, payload] : payload_seeds()) {
    Bytes b;
    if (target == "frame_header") {
      FrameHeader h;
      h.type = type;
      h.bytes = uint32_t(payload.size());
      h.counter = counter++;
      b.resize(kFrameHeaderBytes);
      encode_frame_header(h, b.data());
    } else {
      b.push_back(uint8_t(type));
    }
    b.insert(b.end(), payload.begin(), payload.end());
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace ds4tp::fuzz
