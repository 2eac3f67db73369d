#include "auth/proof.hpp"

#include <cstring>
#include <initializer_list>
#include <string_view>

#include "auth/crypto.hpp"
#include "wire/codec.hpp"

namespace ds4tp::auth {

namespace {

struct Part {
  const uint8_t *p;
  size_t n;
};

Part part(const std::vector<uint8_t> &v) { return {v.data(), v.size()}; }
Part part(const wire::Nonce &v) { return {v.data(), v.size()}; }

// HMAC-SHA256 over label, a NUL, then the parts. Every part is either a
// whole wire message (self-delimiting through its preamble) or fixed-size,
// so the concatenation is unambiguous.
int hmac(const Key &key, std::string_view label, std::initializer_list<Part> parts,
         wire::Mac &out, Error &err) {
  if (key.empty()) return err.set(DS4TP_EAUTH, "no pre-shared key to compute a proof with");
  std::vector<uint8_t> msg(label.begin(), label.end());
  msg.push_back(0);
  for (const Part &p : parts) msg.insert(msg.end(), p.p, p.p + p.n);
  static_assert(std::tuple_size_v<wire::Mac> == crypto::kHmacSha256Bytes);
  bool ok = crypto::hmac_sha256(key.data(), key.size(), msg.data(), msg.size(), out.data());
  crypto::wipe(msg.data(), msg.size());
  if (!ok)
    return err.set(DS4TP_EIO, "{} could not compute HMAC-SHA256", crypto::backend_name());
  return DS4TP_OK;
}

}  // namespace

int fresh_nonce(wire::Nonce &out, Error &err) {
  if (!crypto::random_bytes(out.data(), out.size()))
    return err.set(DS4TP_EIO, "{} could not produce {} random bytes for a nonce",
                   crypto::backend_name(), out.size());
  return DS4TP_OK;
}

bool mac_equal(const wire::Mac &a, const wire::Mac &b) {
  return crypto::equal(a.data(), b.data(), a.size());
}

int worker_proof(const Key &key, const Transcript &t, wire::Mac &out, Error &err) {
  return hmac(key, "ds4tp/1 worker proof",
              {part(t.worker_nonce_msg), part(t.leader_nonce_msg), part(t.worker_hello_msg)},
              out, err);
}

int leader_proof(const Key &key, const Transcript &t, wire::Mac &out, Error &err) {
  return hmac(key, "ds4tp/1 leader proof",
              {part(t.worker_nonce_msg), part(t.leader_nonce_msg), part(t.worker_hello_msg),
               part(t.leader_hello_msg)},
              out, err);
}

namespace {

// The data connection's proofs differ only by label: both bind the cookie.
int cookie_proof(const char *label, const Key &key, const Transcript &t, uint64_t cookie,
                 wire::Mac &out, Error &err) {
  uint8_t c[8];
  wire::put_u64(c, cookie);
  return hmac(key, label, {part(t.worker_nonce), part(t.leader_nonce), Part{c, sizeof c}}, out,
              err);
}

}  // namespace

int data_proof(const Key &key, const Transcript &t, uint64_t cookie, wire::Mac &out,
               Error &err) {
  return cookie_proof("ds4tp/1 data", key, t, cookie, out, err);
}

int data_ack_proof(const Key &key, const Transcript &t, uint64_t cookie, wire::Mac &out,
                   Error &err) {
  return cookie_proof("ds4tp/1 data ack", key, t, cookie, out, err);
}

}  // namespace ds4tp::auth
