#include "multipath/resume_wait.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/clock.hpp"
#include "os/wait.hpp"
#include "talk/peer_state.hpp"
#include "link/tcp/gate_stream.hpp"
#include "link/data_config.hpp"

namespace ds4tp::multipath {

int read_resume(int fd, int control_fd, const talk::PeerState *peer_state, uint64_t limit,
                wire::Resume &peer, std::string &why) {
  net::set_nonblocking(fd);
  os::PeerWatch watch;
  watch.watch_socket(control_fd, "control connection");
  talk::watch_peer(watch, peer_state);
  os::WaitPolicy block_at_once;
  os::Waiter w(block_at_once, &watch);
  const uint64_t deadline = os::deadline_after(w.now(), limit);
  uint8_t b[wire::kResumeBytes];
  size_t got = 0;
  while (got < sizeof b) {
    const ssize_t n = ::recv(fd, b + got, sizeof b - got, MSG_DONTWAIT);
    if (n > 0) {
      got += size_t(n);
      w.progress();
      continue;
    }
    // A reset: the peer closed it with this rank's resume unread.
    if (n == 0 || (n < 0 && (errno == ECONNRESET || errno == EPIPE))) {
      why = "the peer closed the standby link too (it has exited)";
      return DS4TP_EPEERCLOSED;
    }
    if (!tcp::retry_later(errno)) {
      why = fmt::format("the standby link failed: {}", std::strerror(errno));
      return DS4TP_EIO;
    }
    const int rc = w.idle(deadline, [&](uint64_t) {
      pollfd p{fd, POLLIN, 0};
      ::poll(&p, 1, std::min(ms_left(deadline), kLivenessSliceMs));
    });
    if (rc == DS4TP_ETIMEDOUT) {
      why = fmt::format("the peer did not come to the standby link within {} ms", limit / 1000000);
      return rc;
    }
    if (rc != DS4TP_OK) {
      why = watch.silent() ? watch.why() : "the peer " + watch.why();
      return rc;
    }
  }
  Error de;
  if (wire::decode_resume(b, sizeof b, peer, de) != DS4TP_OK) {
    why = de.message;
    return DS4TP_EPROTO;
  }
  return DS4TP_OK;
}

}  // namespace ds4tp::multipath
