#include "wire/hello.hpp"

#include <cstring>

#include "wire/codec.hpp"

namespace ds4tp::wire {

size_t encode_preamble(const Preamble &p, uint8_t out[kPreambleBytes]) {
  Writer w(out, kPreambleBytes);
  w.u32(p.magic);
  w.u16(p.version);
  w.u16(p.kind);
  w.u32(p.body_bytes);
  return w.size();
}

namespace {

std::vector<uint8_t> with_preamble(Kind kind, const uint8_t *body, size_t n) {
  std::vector<uint8_t> out(kPreambleBytes + n);
  Preamble p;
  p.kind = uint16_t(kind);
  p.body_bytes = uint32_t(n);
  encode_preamble(p, out.data());
  if (n) std::memcpy(out.data() + kPreambleBytes, body, n);
  return out;
}

}  // namespace

// A body that is exactly one value (an integer or a byte array): EPROTO
// "<what> body is N bytes, want M" for any other size.
template <class T>
int read_body(const char *what, const uint8_t *buf, size_t len, T &out, Error &err) {
  size_t want;
  if constexpr (std::is_integral_v<T>) want = sizeof(T);
  else want = std::tuple_size_v<T>;
  if (len != want)
    return err.set(DS4TP_EPROTO, "{} body is {} bytes, want {}", what, len, want);
  Reader r(buf, len);
  r.get(out);
  return DS4TP_OK;
}

// The hello body's fixed fields in wire order, for its encoder and decoder;
// the gate mask (with its word count), features and blob follow.
constexpr auto kHelloHead = layout(&Hello::role, &Hello::transport_request, Pad<uint16_t>{},
                                   &Hello::caps, &Hello::host_id, &Hello::cookie);
constexpr auto kIdentityHead =
    layout(&Identity::model_bytes, &Identity::model_id, &Identity::n_layer, &Identity::n_embd,
           &Identity::n_vocab, &Identity::quant_bits, &Identity::ctx_size,
           &Identity::gate_slot_start, &Identity::gate_slot_step, &Identity::gates_per_token);

std::vector<uint8_t> encode_hello(const Hello &h) {
  const Identity &id = h.id;
  std::vector<uint8_t> body(kHelloFixedBytes + id.blob.size());
  Writer w(body.data(), body.size());
  write(w, h, kHelloHead);
  write(w, id, kIdentityHead);
  w.u32(kMaskWords);
  for (uint64_t m : id.gate_slot_mask) w.u64(m);
  w.u64(id.features);
  w.u32(uint32_t(id.blob.size()));
  w.bytes(id.blob.data(), id.blob.size());
  return with_preamble(Kind::Control, body.data(), w.size());
}

std::vector<uint8_t> encode_data(uint64_t cookie, const Mac *mac) {
  uint8_t body[8 + kMacBytes];
  put_u64(body, cookie);
  if (mac) std::memcpy(body + 8, mac->data(), kMacBytes);
  return with_preamble(Kind::Data, body, mac ? sizeof body : 8);
}

std::vector<uint8_t> encode_data_ack(const Mac *mac) {
  return with_preamble(Kind::DataAck, mac ? mac->data() : nullptr, mac ? kMacBytes : 0);
}

std::vector<uint8_t> encode_auth_nonce(const Nonce &n) {
  return with_preamble(Kind::AuthNonce, n.data(), n.size());
}

std::vector<uint8_t> encode_auth_proof(const Mac &m) {
  return with_preamble(Kind::AuthProof, m.data(), m.size());
}

std::vector<uint8_t> encode_auth_reject(RejectReason r) {
  uint8_t body[4];
  put_u32(body, uint32_t(r));
  return with_preamble(Kind::AuthReject, body, sizeof body);
}

const char *reject_reason_name(uint32_t reason) {
  switch (reason) {
    case uint32_t(RejectReason::KeyRequired):
      return "the leader requires a pre-shared key and this worker has none";
    case uint32_t(RejectReason::KeyUnexpected):
      return "this worker has a pre-shared key but the leader has none";
    case uint32_t(RejectReason::BadProof):
      return "the leader could not verify this worker's proof: the two keys differ";
    case uint32_t(RejectReason::BadVersion):
      return "the leader speaks another protocol version";
    default: return "unknown reason";
  }
}

int decode_preamble(const uint8_t *buf, size_t len, size_t max_body,
                    Preamble &out, Error &err) {
  if (len < kPreambleBytes)
    return err.set(DS4TP_EPROTO, "preamble truncated: {} of {} bytes", len,
                   kPreambleBytes);
  Reader r(buf, len);
  out.magic = r.u32();
  out.version = r.u16();
  out.kind = r.u16();
  out.body_bytes = r.u32();
  if (out.magic == kMagicSwapped)
    return err.set(DS4TP_EPROTO,
                   "bad magic 0x{:08x}: the peer uses the other byte order",
                   out.magic);
  if (out.magic != kMagic)
    return err.set(DS4TP_EPROTO,
                   "bad magic 0x{:08x} (want 0x{:08x}): not a ds4tp peer",
                   out.magic, kMagic);
  if (out.kind < uint16_t(Kind::Control) || out.kind > kKindMax)
    return err.set(DS4TP_EPROTO, "unknown connection kind {}", out.kind);
  if (out.body_bytes > max_body)
    return err.set(DS4TP_EPROTO, "preamble body of {} bytes exceeds the {} byte limit",
                   out.body_bytes, max_body);
  return DS4TP_OK;
}

int decode_hello_body(const uint8_t *buf, size_t len, Hello &out, Error &err) {
  if (len < kHelloFixedBytes)
    return err.set(DS4TP_EPROTO, "hello truncated: {} bytes, need at least {}",
                   len, kHelloFixedBytes);
  Reader r(buf, len);
  Hello h;
  read(r, h, kHelloHead);  // the reserved u16 is ignored, for forward compatibility
  Identity &id = h.id;
  read(r, id, kIdentityHead);
  uint32_t words = r.u32();
  if (words != kMaskWords)
    return err.set(DS4TP_EPROTO, "hello gate mask has {} words, want {}", words,
                   kMaskWords);
  for (uint64_t &m : id.gate_slot_mask) m = r.u64();
  id.features = r.u64();
  uint32_t blob = r.u32();
  if (!r.ok())
    return err.set(DS4TP_EPROTO, "hello truncated at byte {}", r.consumed());
  if (blob > kBlobMax)
    return err.set(DS4TP_EPROTO, "hello engine blob of {} bytes exceeds {}",
                   blob, kBlobMax);
  if (r.remaining() != blob)
    return err.set(DS4TP_EPROTO,
                   "hello length {} does not match its engine blob of {} bytes",
                   len, blob);
  const uint8_t *b = r.bytes(blob);
  id.blob.assign(b, b + blob);
  if (h.role != DS4TP_ROLE_LEADER && h.role != DS4TP_ROLE_WORKER)
    return err.set(DS4TP_EPROTO, "hello role {} is neither leader (1) nor worker (2)",
                   h.role);
  if (h.transport_request > DS4TP_TRANSPORT_RDMA)
    return err.set(DS4TP_EPROTO, "hello transport request {} unknown",
                   h.transport_request);
  out = std::move(h);
  return DS4TP_OK;
}

int decode_data_body(const uint8_t *buf, size_t len, uint64_t &cookie,
                     Error &err) {
  return read_body("data preamble", buf, len, cookie, err);
}

int decode_data_body(const uint8_t *buf, size_t len, uint64_t &cookie, bool &has_mac,
                     Mac &mac, Error &err) {
  if (len != 8 && len != 8 + kMacBytes)
    return err.set(DS4TP_EPROTO, "data preamble body is {} bytes, want 8 or {}", len,
                   8 + kMacBytes);
  cookie = get_u64(buf);
  has_mac = len == 8 + kMacBytes;
  if (has_mac) std::memcpy(mac.data(), buf + 8, kMacBytes);
  return DS4TP_OK;
}

int decode_data_ack_body(const uint8_t *buf, size_t len, bool &has_mac, Mac &mac,
                         Error &err) {
  if (len != 0 && len != kMacBytes)
    return err.set(DS4TP_EPROTO, "data ack body is {} bytes, want 0 or {}", len, kMacBytes);
  has_mac = len == kMacBytes;
  if (has_mac) std::memcpy(mac.data(), buf, kMacBytes);
  return DS4TP_OK;
}

int decode_auth_nonce_body(const uint8_t *buf, size_t len, Nonce &out, Error &err) {
  return read_body("auth nonce", buf, len, out, err);
}

int decode_auth_proof_body(const uint8_t *buf, size_t len, Mac &out, Error &err) {
  return read_body("auth proof", buf, len, out, err);
}

int decode_auth_reject_body(const uint8_t *buf, size_t len, uint32_t &reason,
                            Error &err) {
  return read_body("auth reject", buf, len, reason, err);
}

int compare_identity(const Identity &a, const Identity &b, Error &err) {
  auto diff = [&](const char *field, uint64_t x, uint64_t y) {
    return err.set(DS4TP_EIDENTITY,
                   "engine identity mismatch: {} is {} here but {} on the peer",
                   field, x, y);
  };
#define DS4TP_CMP_(f) \
  if (a.f != b.f) return diff(#f, a.f, b.f);
  DS4TP_CMP_(model_bytes)
  DS4TP_CMP_(model_id)
  DS4TP_CMP_(n_layer)
  DS4TP_CMP_(n_embd)
  DS4TP_CMP_(n_vocab)
  DS4TP_CMP_(quant_bits)
  DS4TP_CMP_(gate_slot_start)
  DS4TP_CMP_(gate_slot_step)
  DS4TP_CMP_(gates_per_token)
#undef DS4TP_CMP_
  for (uint32_t i = 0; i < kMaskWords; i++) {
    if (a.gate_slot_mask[i] != b.gate_slot_mask[i])
      return err.set(DS4TP_EIDENTITY,
                     "engine identity mismatch: gate_slot_mask[{}] is 0x{:016x} "
                     "here but 0x{:016x} on the peer",
                     i, a.gate_slot_mask[i], b.gate_slot_mask[i]);
  }
  if (a.features != b.features)
    return err.set(DS4TP_EIDENTITY,
                   "engine identity mismatch: features are 0x{:x} here but 0x{:x} "
                   "on the peer (differing bits 0x{:x})",
                   a.features, b.features, a.features ^ b.features);
  if (a.blob != b.blob) {
    size_t n = a.blob.size() < b.blob.size() ? a.blob.size() : b.blob.size();
    size_t at = 0;
    while (at < n && a.blob[at] == b.blob[at]) at++;
    return err.set(DS4TP_EIDENTITY,
                   "engine identity mismatch: engine_blob differs ({} bytes here, "
                   "{} on the peer, first difference at byte {})",
                   a.blob.size(), b.blob.size(), at);
  }
  return DS4TP_OK;
}

}  // namespace ds4tp::wire
