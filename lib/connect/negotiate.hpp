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

// Role, identity and transport checks on a peer's decoded hello whose
// preamble version already matched. On success `chosen` is the transport.
// `rdma_absent` is why this rank offers no RDMA (empty: it was not probed):
// an rdma request this rank cannot serve is refused in its own words.
int judge_hello(const wire::Hello &mine, const wire::Hello &peer,
                const std::string &rdma_absent, int &chosen, Error &err);

}  // namespace ds4tp::connect
