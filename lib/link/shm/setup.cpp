// The shm descriptor: availability (can this process create segments
// with room for both ranks'), and the segment handshake on the data
// connection (docs/PROTOCOL.md, "shm transport") that set-up runs.
#include <sys/mman.h>
#include <unistd.h>

#include <fmt/format.h>

#include "common/clock.hpp"
#include "os/os.hpp"
#include "link/descriptor.hpp"
#include "link/shm/segment.hpp"
#include "link/shm/pair_link.hpp"
#include "wire/hello.hpp"
#include "wire/shm_offer.hpp"

namespace ds4tp {

bool shm_available(const slab::Layout *layout, std::string &why) {
  return shm::usable(layout ? 2 * shm_segment_bytes(*layout) : 0, why);
}

namespace link {
namespace {

// Both segments, mapped, and who the peer is.
struct Prepared final : State {
  shm::Segment mine, peer;
  pid_t peer_pid = 0;
  uint64_t peer_start = 0;  // 0: the pid cannot be checked, rely on the connection
};

uint64_t random64() {
  uint64_t v = 0;
  if (!os::random_bytes(&v, sizeof v)) v = now_ns() * 0x9e3779b97f4a7c15ull;
  return v;
}

std::string name_prefix(uint64_t cookie, int rank) {
  // The cookie folded to 32 bits: 19 characters, so that a pid and some
  // randomness still fit Darwin's 31 (shm::unique_name).
  return fmt::format("/ds4tp-{:08x}-r{}-", uint32_t(cookie ^ cookie >> 32), rank);
}

int send_msg(int fd, const std::vector<uint8_t> &m, uint64_t deadline, Error &err) {
  return net::write_all(fd, m.data(), m.size(), deadline, "shm handshake", err);
}

// Reads one handshake message: header, then exactly its body.
int recv_msg(int fd, uint64_t deadline, wire::ShmHeader &h, std::vector<uint8_t> &body,
             Error &err) {
  uint8_t hdr[wire::kShmHeaderBytes];
  int rc = net::read_exact(fd, hdr, sizeof hdr, deadline, "shm handshake", err);
  if (rc != DS4TP_OK) return rc;
  rc = wire::decode_shm_header(hdr, sizeof hdr, h, err);
  if (rc != DS4TP_OK) return rc;
  body.resize(h.body_bytes);
  return net::read_exact(fd, body.data(), body.size(), deadline, "shm handshake", err);
}

void shm_available_entry(const Query &q, Availability &out) {
  out.usable = shm_available(q.layout, out.why);
}

// Outcomes as Descriptor::setup; no segment name outlives this call.
int shm_setup(Connection &s, const Availability &, std::unique_ptr<State> &prepared,
              std::string &fallback_why, Error &err) {
  net::Fd &fd = s.data;
  const uint64_t bytes = shm_segment_bytes(s.layout);
  const int peer_rank = 1 - s.rank;
  shm::Segment mine, peer;
  std::string problem;  // why this rank cannot run shm, empty if it can
  Error e;

  // 1. Create our segment and offer its name at once: the peer removes
  //    the name as soon as it has opened it.
  wire::ShmOffer offer;
  offer.pid = uint32_t(getpid());
  offer.start_time = os::process_start_time(getpid());
  offer.segment_bytes = bytes;
  std::string name = shm::unique_name(name_prefix(s.cookie, s.rank), uint64_t(getpid()),
                                      random64(), os::shm_name_max());
  if (mine.create(name, bytes, e) == DS4TP_OK) {
    offer.ok = true;
    offer.name = name;
  } else {
    offer.reason = problem = e.message;
  }
  int rc = send_msg(fd.get(), wire::encode_shm_offer(offer), s.deadline_ns, err);
  if (rc != DS4TP_OK) return rc;
  if (offer.ok) {
    if (mine.map_created(e) == DS4TP_OK)
      shm::init_control_page(mine, s.layout);
    else
      problem = e.message;
  }

  // 2. Open the peer's segment.
  wire::ShmHeader h;
  std::vector<uint8_t> body;
  rc = recv_msg(fd.get(), s.deadline_ns, h, body, err);
  if (rc != DS4TP_OK) return rc;
  wire::ShmOffer theirs;
  rc = wire::decode_shm_offer(h, body.data(), body.size(), theirs, err);
  if (rc != DS4TP_OK) return rc;
  if (theirs.ok) {
    std::string want = name_prefix(s.cookie, peer_rank);
    if (theirs.name.compare(0, want.size(), want) != 0) {
      if (problem.empty())
        problem = fmt::format("the peer offered segment {}, which does not belong to this pair "
                              "(names start with {})",
                              theirs.name, want);
    } else if (!problem.empty() || theirs.segment_bytes != bytes) {
      if (problem.empty())
        problem = fmt::format("the peer's segment is {} bytes but this rank's layout needs {}",
                              theirs.segment_bytes, bytes);
      shm_unlink(theirs.name.c_str());  // ours to clean up too: nobody will open it
    } else if (peer.open_existing(theirs.name, bytes, e) != DS4TP_OK) {
      problem = e.message;
    }
  }

  // 3. Both say whether they are ready; shm only if both are.
  wire::ShmReady ready{problem.empty() && theirs.ok, problem};
  rc = send_msg(fd.get(), wire::encode_shm_ready(ready), s.deadline_ns, err);
  if (rc != DS4TP_OK) return rc;
  rc = recv_msg(fd.get(), s.deadline_ns, h, body, err);
  if (rc != DS4TP_OK) return rc;
  wire::ShmReady their_ready;
  rc = wire::decode_shm_ready(h, body.data(), body.size(), their_ready, err);
  if (rc != DS4TP_OK) return rc;
  mine.unlink();  // the peer has opened it (or never will)

  if (ready.ok && their_ready.ok) {
    if (int rc2 = shm::check_control_page(peer, s.layout, err)) return rc2;
    // The pid is checked while waiting only if it names the peer here
    // (same pid namespace) and its start time proves it is the same process.
    uint64_t start = theirs.start_time != 0 &&
                             os::process_start_time(pid_t(theirs.pid)) == theirs.start_time
                         ? theirs.start_time
                         : 0;
    auto p = std::make_unique<Prepared>();
    p->mine = std::move(mine);
    p->peer = std::move(peer);
    p->peer_pid = pid_t(theirs.pid);
    p->peer_start = start;
    prepared = std::move(p);
    return DS4TP_OK;
  }
  std::string why = !problem.empty()       ? fmt::format("this rank: {}", problem)
                    : !theirs.ok           ? fmt::format("the peer: {}", theirs.reason)
                                           : fmt::format("the peer: {}", their_ready.reason);
  if (s.forced)
    return err.set(DS4TP_EUNSUPPORTED,
                   "transport shm was requested but shared memory cannot be set up ({}); use "
                   "transport tcp or auto",
                   why);
  fallback_why = why;
  return DS4TP_OK;
}

std::unique_ptr<link::Link> shm_make(Connection &c, std::unique_ptr<State> prepared) {
  auto &p = static_cast<Prepared &>(*prepared);
  return shm::make_transport(std::move(c.data), std::move(p.mine), std::move(p.peer),
                             p.peer_pid, p.peer_start, c.layout, c.data_config);
}

}  // namespace

const Descriptor kShm{"shm",      "shared memory",     DS4TP_TRANSPORT_SHM, wire::kCapShm, false,
                      shm_available_entry, shm_setup, shm_make,
                      nullptr,  nullptr};

}  // namespace link
}  // namespace ds4tp
