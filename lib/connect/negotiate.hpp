// Transport negotiation and hello judgement. Pure: both ranks run the same
// functions on the same two hellos and reach the same verdict.
#pragma once

#include <string>

#include "common/error.hpp"
#include "wire/hello.hpp"

namespace ds4tp::connect {

// Chooses the transport both ranks will use, or fails with EUNSUPPORTED
// naming which rank lacks what. An explicit request on either side wins
// over AUTO; two different explicit requests fail. AUTO prefers shm (same
// host only), then rdma, then tcp.
int negotiate_transport(const wire::Hello &mine, const wire::Hello &peer,
                        int &chosen, Error &err);

// AUTO's choice when both ranks offer the capability bits `caps`
// (wire::kCap*) and run on one host or not: shm (same host only), then
// rdma, then tcp; DS4TP_TRANSPORT_AUTO when `caps` holds none of them.
// The one preference order: negotiate_transport and ds4tp_transport_auto
// both ask it.
int auto_transport(uint32_t caps, bool same_host);

// Role, identity and transport checks on a peer's decoded hello whose
// preamble version already matched. On success `chosen` is the transport.
// `rdma_absent` is why this rank offers no RDMA (empty: it was not probed):
// an rdma request this rank cannot serve is refused in its own words.
int judge_hello(const wire::Hello &mine, const wire::Hello &peer,
                const std::string &rdma_absent, int &chosen, Error &err);

}  // namespace ds4tp::connect
