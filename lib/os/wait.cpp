#include "os/wait.hpp"

namespace ds4tp::os {

void PeerWatch::watch_socket(int fd, const char *what, int tag) {
  if (nfds_ == kMaxSockets) return;
  fds_[nfds_] = fd;
  names_[nfds_] = what;
  tags_[nfds_] = tag;
  nfds_++;
}

void PeerWatch::watch_process(pid_t pid, uint64_t start_time, uint64_t stopped_ns) {
  pid_ = pid;
  start_ = start_time;
  stopped_limit_ = stopped_ns;
  stopped_since_ = 0;
}

void PeerWatch::watch_flag(bool (*raised)(const void *), const void *ctx) {
  raised_ = raised;
  ctx_ = ctx;
}

void PeerWatch::saw_hangup(int index, Hangup h) {
  which_ = index;
  how_ = h == Hangup::kReset ? How::kReset : How::kClosed;
}

// wait_hangup takes four sockets at a time: a longer list is looked at
// in fours, and only a list of four or fewer can be waited on.
bool PeerWatch::look_sockets(uint64_t timeout_ns) {
  for (int i = 0; i < nfds_; i += 4) {
    const int k = nfds_ - i < 4 ? nfds_ - i : 4;
    Hangup h;
    const int j = wait_hangup(fds_ + i, k, nfds_ <= 4 ? timeout_ns : 0, h);
    if (j >= 0) {
      saw_hangup(i + j, h);
      return true;
    }
  }
  return false;
}

bool PeerWatch::look_process(uint64_t now) {
  if (!process_alive(pid_, start_)) {
    how_ = How::kExited;
    return true;
  }
  if (stopped_limit_ == 0) return false;
  if (!process_stopped(pid_)) {
    stopped_since_ = 0;
  } else if (stopped_since_ == 0) {
    stopped_since_ = now;
  } else if (now - stopped_since_ >= stopped_limit_) {
    stopped_for_ = now - stopped_since_;
    how_ = How::kStopped;
    return true;
  }
  return false;
}

bool PeerWatch::check(uint64_t now) {
  if (how_ != How::kAlive) return true;
  if (silent_ != nullptr && silent_(silence_ctx_)) {
    how_ = How::kSilent;
    return true;
  }
  if (flag_raised()) {
    how_ = How::kFlag;
    return true;
  }
  if (nfds_ > 0 && now >= next_socket_) {
    next_socket_ = now + kSocketCheckNs;
    if (look_sockets(0)) return true;
  }
  if (start_ != 0 && now >= next_process_) {
    next_process_ = now + kProcessCheckNs;
    if (look_process(now)) return true;
  }
  return false;
}

bool PeerWatch::nap(uint64_t ns) {
  if (how_ != How::kAlive) return true;
  if (nfds_ == 0 || nfds_ > 4) {
    if (nfds_ > 4 && look_sockets(0)) return true;
    sleep_ns(ns);
  } else if (look_sockets(ns)) {
    return true;
  }
  return check(now_ns());
}

const char *PeerWatch::socket_name() const {
  return (how_ == How::kClosed || how_ == How::kReset) && which_ >= 0 ? names_[which_] : nullptr;
}

int PeerWatch::socket_tag() const {
  return (how_ == How::kClosed || how_ == How::kReset) && which_ >= 0 ? tags_[which_] : -1;
}

std::string PeerWatch::why() const {
  switch (how_) {
    case How::kClosed: return std::string("closed the ") + names_[which_];
    case How::kReset: return std::string("reset the ") + names_[which_];
    case How::kExited: return "process has exited";
    case How::kFlag: return "failed";
    case How::kSilent: return silence_why_ != nullptr ? silence_why_(silence_ctx_) : "went silent";
    case How::kStopped:
      return fmt::format("process has been stopped (SIGSTOP or a debugger) for {} ms",
                         stopped_for_ / 1000000);
    case How::kAlive: break;
  }
  return "went away";
}

}  // namespace ds4tp::os
