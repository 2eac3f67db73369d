// The test verbs provider's wire: one single-producer, single-consumer
// message ring per queue pair, in a file mapped by both processes
// (/dev/shm, or $DS4TP_VERBS_PROVIDER_DIR), named by the owner's GID and
// QP number. The receiving QP creates its ring when it moves to RTR; the
// sender opens it by (dgid, dest_qp_num) at its first send. Test-only,
// never installed.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace fv {

struct RingHeader {
  std::atomic<uint64_t> head;  // bytes written (producer)
  std::atomic<uint64_t> tail;  // bytes consumed (consumer)
  uint64_t size;               // data bytes after the header
  int32_t owner_pid;           // for sweeping rings of dead processes
  uint32_t pad;
};

// One message: this header, then `len` payload bytes, padded to 16.
struct Record {
  uint32_t len;
  uint32_t imm;     // network order, as posted
  uint32_t flags;   // kRecImm, kRecWrap
  uint32_t psn;     // the sender's packet sequence number (24 bits)
  uint32_t src_qp;  // the sending QP
  uint32_t pad[3];
};
constexpr uint32_t kRecImm = 1, kRecWrap = 2;
constexpr uint64_t kRingBytes = 8u << 20;

class Ring {
 public:
  Ring() = default;
  Ring(const Ring &) = delete;
  Ring &operator=(const Ring &) = delete;
  ~Ring();
  // The receiver's side: creates (and on destruction unlinks) the file.
  bool create(const std::string &path);
  // The sender's side: false while the file does not exist yet.
  bool open(const std::string &path);
  bool mapped() const { return h_ != nullptr; }

  // Producer: false when the ring has no room now (retry later).
  bool push(const Record &r, const void *payload);
  // Consumer: the oldest record (payload follows it), or nullptr.
  const Record *front();
  void pop();

 private:
  static uint64_t need(uint32_t len) { return sizeof(Record) + ((uint64_t(len) + 15) & ~15ull); }
  uint8_t *data() const { return reinterpret_cast<uint8_t *>(h_ + 1); }
  RingHeader *h_ = nullptr;
  std::string unlink_;
};

// "<dir>/ds4tp-fv-<gid hex>-<qpn hex>"
std::string ring_path(const uint8_t gid[16], uint32_t qpn);
// Unlinks rings left by processes that have exited.
void sweep_rings();

}  // namespace fv
