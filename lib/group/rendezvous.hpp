// The listening side of group bring-up, served through net::serve_intake
// so strangers cannot hold it up: rank 0's join desk (nonce, join, hello,
// each judged as it arrives) and every rank's data-link desk (the link
// message with the roster's token).
#pragma once

#include <string>
#include <vector>

#include "group/group.hpp"
#include "group/wire.hpp"

namespace ds4tp::group {

// HMAC(key, nonce || join fixed part with the mac field zeroed).
bool join_mac(const auth::Key &key, const wire::Nonce &nonce, const uint8_t *fixed,
              wire::Mac &out);

// What rank 0 learned of each rank (index = rank; [0] unused).
struct Joined {
  std::vector<Join> joins;
  std::vector<std::string> hosts;  // the address each rank joined from
  std::vector<net::Fd> ctl;        // its rendezvous connection
};

// Rank 0: serves joins on `lfd` until every rank joined or `deadline_ns`.
// A join refused (other size, key, identity, chunk, a rank taken) is told
// why on its connection and logged; the desk goes on waiting for the real
// rank. At the deadline the error names the missing ranks and the last
// refusal (its code, when there was one).
int serve_joins(const Options &o, int lfd, uint64_t deadline_ns, Joined &out, Error &err);

// Every rank: accepts the data links of the ranks `from` (the mesh's
// members above it; a tiered leader also its host's other ranks)
// on `lfd`; fds[r] becomes rank r's.
int serve_links(const Options &o, const LinkToken &token, const std::vector<int> &from, int lfd,
                uint64_t deadline_ns, std::vector<net::Fd> &fds, Error &err);

}  // namespace ds4tp::group
