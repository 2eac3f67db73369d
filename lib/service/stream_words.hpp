// Stream words: the ready/release words a GPU stream writes and waits on
// with stream memory operations (cuStreamWriteValue64 / cuStreamWaitValue64
// GEQ), in a library-allocated, page-aligned block the engine registers
// with cudaHostRegister (or maps for its device any other way).
//
// Block layout (stride 64 bytes, one word per line so a host poll never
// shares a line with a device write of another slot):
//   ready[s]    at s * stride                  engine (stream) writes
//   release[s]  at slots * stride + s * stride service writes
//   data        at the next page boundary       groups: slot s's vector at
//                                               data + s * slot_bytes
// Word values (32 or 64 bits; 32-bit values are the low bits of the 64-bit
// ones, so both wrap and compare cyclically, as GEQ stream waits do):
//   seq mode:   both words carry the gate seq (what a direct stream uses)
//   fixed mode: both carry slot + 1 on every token, so a captured graph
//               replays unchanged; the service clears ready[s] when it
//               takes it and clears the previous slot's release once the
//               stream has shown it passed that wait (it wrote a later ready)
// Poison: release[s] = last released value + 2^(bits-2): ahead of any
// value a stream waits for (cyclic GEQ passes) and never equal to it, so
// "release != the value I waited for" means failed.
//
// Threading: one service thread calls everything but the constructor;
// the engine writes ready words only, the service release words only.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/error.hpp"

namespace ds4tp {

class StreamWords {
 public:
  static constexpr uint32_t kStride = 64;
  enum class Poll { NotYet, Ready, Bad };

  // EINVAL for bad bits (32/64), mode or slots (1..4096; fixed mode needs
  // 2); ENOMEM when the block cannot be mapped. `who` prefixes messages
  // ("gate stream", "group stream"; static text).
  static int create(uint32_t slots, uint32_t bits, int mode, uint64_t slot_bytes,
                    const char *who, std::unique_ptr<StreamWords> &out, Error &err);
  ~StreamWords();
  StreamWords(const StreamWords &) = delete;
  StreamWords &operator=(const StreamWords &) = delete;

  // The value both words carry for gate `seq` at `slot`.
  uint64_t value(uint32_t slot, uint64_t seq) const;
  // Ready: ready[slot] holds seq's value. NotYet: it still holds what
  // the slot held after its last gate. Bad: anything else (EDESYNC).
  Poll poll(uint32_t slot, uint64_t seq, Error &err) const;
  // True (EDESYNC in err) when a slot other than `slot` holds a ready
  // value the service has not taken: the stream fired gates out of order.
  bool misplaced(uint32_t slot, uint64_t seq, Error &err) const;
  // The service took ready[slot] for seq (before serving it).
  void take(uint32_t slot, uint64_t seq);
  // Publishes release[slot] for seq (release order: after the data).
  void release(uint32_t slot, uint64_t seq);
  // Every release word ahead of any wait, never equal to a released value.
  void poison();
  // Before a (re)start, with the stream idle: undoes a poison.
  void rearm();
  // Other bits or mode on the same block (its layout does not depend on
  // them): every word back to 0, history forgotten. EINVAL as create().
  int reconfigure(uint32_t bits, int mode, Error &err);

  uint8_t *base() const { return base_; }
  uint64_t bytes() const { return bytes_; }
  uint8_t *ready_word(uint32_t s) const { return base_ + uint64_t(s) * kStride; }
  uint8_t *release_word(uint32_t s) const {
    return base_ + (uint64_t(slots_) + s) * kStride;
  }
  uint8_t *data() const { return base_ + data_offset_; }
  uint64_t slot_bytes() const { return slot_bytes_; }
  uint32_t slots() const { return slots_; }
  uint32_t bits() const { return bits_; }
  int mode() const { return mode_; }
  uint64_t poison_gap() const { return uint64_t(1) << (bits_ - 2); }

 private:
  StreamWords() = default;
  uint64_t load(const uint8_t *w) const;
  void store(uint8_t *w, uint64_t v) const;
  uint64_t mask() const { return bits_ == 64 ? ~uint64_t(0) : 0xffffffffull; }

  uint8_t *base_ = nullptr;
  uint64_t bytes_ = 0;
  uint64_t data_offset_ = 0;
  uint64_t slot_bytes_ = 0;
  uint32_t slots_ = 0;
  uint32_t bits_ = 64;
  int mode_ = 0;
  const char *who_ = "";
  std::vector<uint64_t> taken_;     // per slot: last ready value taken (seq mode)
  std::vector<uint64_t> released_;  // per slot: last release value published
  int64_t last_slot_ = -1;          // fixed mode: release word to clear next
};

}  // namespace ds4tp
