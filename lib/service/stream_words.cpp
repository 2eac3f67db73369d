#include "service/stream_words.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>

#include "common/shared_word.hpp"

namespace ds4tp {
namespace {
uint64_t round_up(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }
}  // namespace

namespace {
int check_kind(uint32_t slots, uint32_t bits, int mode, const char *who, Error &err) {
  if (bits != 32 && bits != 64)
    return err.set(DS4TP_EINVAL, "{}: word_bits is {}; use 64 or 32", who, bits);
  if (mode != DS4TP_STREAM_SEQ && mode != DS4TP_STREAM_FIXED)
    return err.set(DS4TP_EINVAL, "{}: mode {} is neither DS4TP_STREAM_SEQ nor DS4TP_STREAM_FIXED",
                   who, mode);
  // Fixed mode clears the previous slot's release: one slot would clear its own.
  const uint32_t min_slots = mode == DS4TP_STREAM_FIXED ? 2 : 1;
  if (slots < min_slots || slots > 4096)
    return err.set(DS4TP_EINVAL, "{}: {} slots outside {}..4096", who, slots, min_slots);
  return DS4TP_OK;
}
}  // namespace

int StreamWords::create(uint32_t slots, uint32_t bits, int mode, uint64_t slot_bytes,
                        const char *who, std::unique_ptr<StreamWords> &out, Error &err) {
  if (int rc = check_kind(slots, bits, mode, who, err)) return rc;
  if (slot_bytes > (uint64_t(1) << 30))
    return err.set(DS4TP_EINVAL, "{}: slot_bytes {} above 1 GiB", who, slot_bytes);
  const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
  std::unique_ptr<StreamWords> w(new StreamWords);
  w->data_offset_ = round_up(uint64_t(slots) * 2 * kStride, page);
  w->bytes_ = round_up(w->data_offset_ + uint64_t(slots) * slot_bytes, page);
  // mmap: page-aligned and zeroed, what cudaHostRegister wants.
  void *p = mmap(nullptr, w->bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return err.set(DS4TP_ENOMEM, "{}: cannot map {} bytes of stream words", who, w->bytes_);
  w->base_ = static_cast<uint8_t *>(p);
  w->slot_bytes_ = slot_bytes;
  w->slots_ = slots;
  w->bits_ = bits;
  w->mode_ = mode;
  w->who_ = who;
  w->taken_.assign(slots, 0);
  w->released_.assign(slots, 0);
  out = std::move(w);
  return DS4TP_OK;
}

StreamWords::~StreamWords() {
  if (base_ != nullptr) munmap(base_, bytes_);
}

uint64_t StreamWords::load(const uint8_t *w) const {
  auto *p = const_cast<uint8_t *>(w);
  if (bits_ == 64) return SharedWord<uint64_t>(p).load(std::memory_order_acquire);
  return SharedWord<uint32_t>(p).load(std::memory_order_acquire);
}

void StreamWords::store(uint8_t *w, uint64_t v) const {
  if (bits_ == 64)
    SharedWord<uint64_t>(w).store(v, std::memory_order_release);
  else
    SharedWord<uint32_t>(w).store(uint32_t(v), std::memory_order_release);
}

uint64_t StreamWords::value(uint32_t slot, uint64_t seq) const {
  return (mode_ == DS4TP_STREAM_FIXED ? uint64_t(slot) + 1 : seq) & mask();
}

StreamWords::Poll StreamWords::poll(uint32_t slot, uint64_t seq, Error &err) const {
  const uint64_t v = load(ready_word(slot));
  if (v == value(slot, seq)) return Poll::Ready;
  if (v == taken_[slot]) return Poll::NotYet;
  err.set(DS4TP_EDESYNC,
          "{}: out-of-order ready: slot {} (layer {}, gate {}) holds {} but the next gate is "
          "seq {}, whose ready value there is {} (the slot's last taken value is {}): the "
          "stream skipped a gate or wrote a wrong value",
          who_, slot, slot / 2, slot % 2, v, seq, value(slot, seq), taken_[slot]);
  return Poll::Bad;
}

bool StreamWords::misplaced(uint32_t slot, uint64_t seq, Error &err) const {
  for (uint32_t s = 0; s < slots_; s++) {
    if (s == slot) continue;
    const uint64_t v = load(ready_word(s));
    if (v != taken_[s]) {
      err.set(DS4TP_EDESYNC,
              "{}: out-of-order ready: slot {} (layer {}, gate {}) holds {} while the next "
              "gate is seq {} at slot {} (layer {}, gate {}); streams must fire gates in "
              "schedule order, one at a time",
              who_, s, s / 2, s % 2, v, seq, slot, slot / 2, slot % 2);
      return true;
    }
  }
  return false;
}

void StreamWords::take(uint32_t slot, uint64_t seq) {
  if (mode_ == DS4TP_STREAM_FIXED)
    store(ready_word(slot), 0);  // the stream's next write here follows our release
  else
    taken_[slot] = value(slot, seq);
}

void StreamWords::release(uint32_t slot, uint64_t seq) {
  // Fixed mode: a stream that wrote this ready has passed the previous
  // slot's wait, so that word may go back to 0 for its next token.
  if (mode_ == DS4TP_STREAM_FIXED && last_slot_ >= 0 && uint32_t(last_slot_) != slot) {
    store(release_word(uint32_t(last_slot_)), 0);
    released_[size_t(last_slot_)] = 0;
  }
  const uint64_t v = value(slot, seq);
  released_[slot] = v;
  last_slot_ = slot;
  store(release_word(slot), v);
}

void StreamWords::poison() {
  for (uint32_t s = 0; s < slots_; s++)
    store(release_word(s), (released_[s] + poison_gap()) & mask());
}

int StreamWords::reconfigure(uint32_t bits, int mode, Error &err) {
  if (int rc = check_kind(slots_, bits, mode, who_, err)) return rc;
  bits_ = 64;  // clear the whole 8 bytes of every word, whatever the old width
  for (uint32_t s = 0; s < slots_; s++) {
    store(ready_word(s), 0);
    store(release_word(s), 0);
  }
  bits_ = bits;
  mode_ = mode;
  taken_.assign(slots_, 0);
  released_.assign(slots_, 0);
  last_slot_ = -1;
  return DS4TP_OK;
}

void StreamWords::rearm() {
  for (uint32_t s = 0; s < slots_; s++) {
    if (mode_ == DS4TP_STREAM_FIXED) {
      store(ready_word(s), 0);
      released_[s] = 0;
    }
    store(release_word(s), released_[s]);
  }
  last_slot_ = -1;
}

}  // namespace ds4tp
