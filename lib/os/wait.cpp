#include "os/wait.hpp"

#include "wire/gate_header.hpp"

namespace ds4tp::os {

std::string PeerState::where_peer_is() const {
  uint64_t kl = peer_kind_layer.load(std::memory_order_relaxed);
  uint64_t seq = peer_seq.load(std::memory_order_relaxed);
  if (heartbeats.load(std::memory_order_relaxed) == 0)
    return fmt::format("no heartbeat from the {} arrived yet", peer);
  if (seq == 0) return fmt::format("the {} is alive and has completed no gate yet", peer);
  return fmt::format("the {} is alive, its last completed gate is {} layer {} seq {}", peer,
                     wire::gate_kind_name(uint16_t(kl >> 32)), uint32_t(kl), seq);
}

std::string PeerState::silence() const {
  return fmt::format("the {} went silent: no heartbeat for {} ms (peer_silence_ms {}): it is "
                     "stopped, frozen, or the link is cut",
                     peer, silent_for_ns.load(std::memory_order_relaxed) / 1000000,
                     silence_ns / 1000000);
}

void PeerWatch::watch_socket(int fd, const char *what) {
  if (nfds_ == 2) return;
  fds_[nfds_] = fd;
  names_[nfds_] = what;
  nfds_++;
}

void PeerWatch::watch_process(pid_t pid, uint64_t start_time) {
  pid_ = pid;
  start_ = start_time;
}

void PeerWatch::watch_flag(bool (*raised)(const void *), const void *ctx) {
  raised_ = raised;
  ctx_ = ctx;
}

void PeerWatch::saw_hangup(int index, Hangup h) {
  which_ = index;
  how_ = h == Hangup::kReset ? How::kReset : How::kClosed;
}

bool PeerWatch::check(uint64_t now) {
  if (how_ != How::kAlive) return true;
  if (state_ != nullptr && state_->silent()) {
    how_ = How::kSilent;
    return true;
  }
  if (flag_raised()) {
    how_ = How::kFlag;
    return true;
  }
  if (nfds_ > 0 && now >= next_socket_) {
    next_socket_ = now + kSocketCheckNs;
    Hangup h;
    int i = wait_hangup(fds_, nfds_, 0, h);
    if (i >= 0) {
      saw_hangup(i, h);
      return true;
    }
  }
  if (start_ != 0 && now >= next_process_) {
    next_process_ = now + kProcessCheckNs;
    if (!process_alive(pid_, start_)) {
      how_ = How::kExited;
      return true;
    }
  }
  return false;
}

bool PeerWatch::nap(uint64_t ns) {
  if (how_ != How::kAlive) return true;
  if (nfds_ == 0) {
    sleep_ns(ns);
  } else {
    Hangup h;
    int i = wait_hangup(fds_, nfds_, ns, h);
    if (i >= 0) {
      saw_hangup(i, h);
      return true;
    }
  }
  return check(now_ns());
}

const char *PeerWatch::socket_name() const {
  return (how_ == How::kClosed || how_ == How::kReset) && which_ >= 0 ? names_[which_] : nullptr;
}

std::string PeerWatch::why() const {
  switch (how_) {
    case How::kClosed: return std::string("closed the ") + names_[which_];
    case How::kReset: return std::string("reset the ") + names_[which_];
    case How::kExited: return "process has exited";
    case How::kFlag: return "failed";
    case How::kSilent: return state_ != nullptr ? state_->silence() : "went silent";
    case How::kAlive: break;
  }
  return "went away";
}

}  // namespace ds4tp::os
