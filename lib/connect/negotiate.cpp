#include "connect/negotiate.hpp"

#include "common/status.hpp"
#include "link/descriptor.hpp"

namespace ds4tp::connect {

namespace {

uint32_t cap_of(int id) {
  const link::Descriptor *d = link::find(id);
  return d != nullptr ? d->cap : 0;
}

const char *name(int t) { return ds4tp::transport_name(t); }

}  // namespace

int negotiate_transport(const wire::Hello &mine, const wire::Hello &peer, int &chosen,
                        Error &err) {
  // Judge from the leader's point of view so both ranks word errors alike.
  const wire::Hello &lead = mine.role == DS4TP_ROLE_LEADER ? mine : peer;
  const wire::Hello &work = mine.role == DS4TP_ROLE_LEADER ? peer : mine;
  int want_l = lead.transport_request, want_w = work.transport_request;
  if (want_l != DS4TP_TRANSPORT_AUTO && want_w != DS4TP_TRANSPORT_AUTO &&
      want_l != want_w)
    return err.set(DS4TP_EUNSUPPORTED,
                   "transport conflict: the leader asks for {} but the worker for {}",
                   name(want_l), name(want_w));
  int want = want_l != DS4TP_TRANSPORT_AUTO ? want_l : want_w;
  bool same_host = lead.host_id == work.host_id;
  auto both = [&](int t) {
    uint32_t c = cap_of(t);
    return (lead.caps & c) && (work.caps & c) && (t != DS4TP_TRANSPORT_SHM || same_host);
  };
  if (want != DS4TP_TRANSPORT_AUTO) {
    if (both(want)) {
      chosen = want;
      return DS4TP_OK;
    }
    uint32_t c = cap_of(want);
    const char *who = !(lead.caps & c) && !(work.caps & c) ? "neither rank offers it"
                      : !(lead.caps & c)                   ? "the leader does not offer it"
                      : !(work.caps & c)                   ? "the worker does not offer it"
                                                           : "the ranks are on different hosts";
    return err.set(DS4TP_EUNSUPPORTED, "transport {} was requested but {}", name(want),
                   who);
  }
  if (int t = auto_transport(lead.caps & work.caps, same_host); t != DS4TP_TRANSPORT_AUTO) {
    chosen = t;
    return DS4TP_OK;
  }
  return err.set(DS4TP_EUNSUPPORTED, "the ranks share no transport (leader offers 0x{:x}, "
                 "worker 0x{:x})", lead.caps, work.caps);
}

int auto_transport(uint32_t caps, bool same_host) {
  // Same host: shared memory beats looping through a NIC. Across hosts:
  // RDMA where both have it, else TCP.
  for (int t : {DS4TP_TRANSPORT_SHM, DS4TP_TRANSPORT_RDMA, DS4TP_TRANSPORT_TCP}) {
    if (t == DS4TP_TRANSPORT_SHM && !same_host) continue;
    if (caps & cap_of(t)) return t;
  }
  return DS4TP_TRANSPORT_AUTO;
}

int judge_hello(const wire::Hello &mine, const wire::Hello &peer,
                const std::string &rdma_absent, int &chosen, Error &err) {
  const char *me = mine.role == DS4TP_ROLE_LEADER ? "leader" : "worker";
  if (peer.role == mine.role) return err.set(DS4TP_EPROTO, "both ranks claim the {} role", me);
  int rc = wire::compare_identity(mine.id, peer.id, err);
  if (rc != DS4TP_OK) return rc;
  rc = negotiate_transport(mine, peer, chosen, err);
  // An rdma request this rank cannot serve: say why in this rank's words.
  const int l = mine.transport_request, p = peer.transport_request;
  const bool want_rdma = (l == DS4TP_TRANSPORT_RDMA || p == DS4TP_TRANSPORT_RDMA) &&
                         (l == p || l == DS4TP_TRANSPORT_AUTO || p == DS4TP_TRANSPORT_AUTO);
  if (rc == DS4TP_EUNSUPPORTED && want_rdma && !(mine.caps & wire::kCapRdma))
    err.set(rc, "transport rdma was requested but this rank ({}) has no RDMA device: {}", me,
            rdma_absent.empty() ? "it was not probed" : rdma_absent);
  return rc;
}

}  // namespace ds4tp::connect
