// Clock alignment with rank 0 at bring-up (clock_align.hpp): rank r sends
// one byte 'T'; rank 0 answers u64 t1 (when it read the ping) and u64 t2
// (when it answered), little-endian, of its monotonic clock.
#include "group/clock_align.hpp"

#include "common/clock.hpp"
#include "net/socket.hpp"
#include "wire/codec.hpp"

namespace ds4tp::group {

int serve_clock(const std::vector<int> &fds, uint64_t deadline, Error &err) {
  for (int fd : fds)
    for (int i = 0; i < kClockRounds; i++) {
      uint8_t ping = 0, answer[16];
      if (int rc = net::read_exact(fd, &ping, 1, deadline, "group clock ping", err)) return rc;
      const uint64_t t1 = now_ns();
      if (ping != kClockPing) return err.set(DS4TP_EPROTO, "group clock: ping byte {}", ping);
      wire::put_u64(answer, t1);
      wire::put_u64(answer + 8, now_ns());
      if (int rc = net::write_all(fd, answer, sizeof answer, deadline, "group clock", err))
        return rc;
    }
  return DS4TP_OK;
}

int align_clock(int fd, uint64_t deadline, ClockOffset &out, std::vector<ClockRound> &rounds,
                Error &err) {
  rounds.assign(kClockRounds, ClockRound{});
  for (ClockRound &r : rounds) {
    uint8_t answer[16];
    r.t0 = now_ns();
    if (int rc = net::write_all(fd, &kClockPing, 1, deadline, "group clock ping", err)) return rc;
    if (int rc = net::read_exact(fd, answer, sizeof answer, deadline, "group clock", err))
      return rc;
    r.t3 = now_ns();
    r.t1 = wire::get_u64(answer);
    r.t2 = wire::get_u64(answer + 8);
  }
  out = clock_offset(rounds);
  return DS4TP_OK;
}

}  // namespace ds4tp::group
