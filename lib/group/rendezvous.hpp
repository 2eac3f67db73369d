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

// A job's token: the first 16 bytes of HMAC-SHA256("ds4tp job", name);
// all zero for no name.
std::array<uint8_t, 16> job_token(const std::string &name);

// What rank 0 learned of each rank (index = rank; [0] unused).
struct Joined {
  std::vector<Join> joins;
  std::vector<std::string> hosts;  // the address each rank joined from
  std::vector<net::Fd> ctl;        // its rendezvous connection
};

// Rank 0: serves joins on `lfd` until every rank joined or `deadline_ns`.
// A join of another job (its job token differs) is told why on its
// connection and logged, and the desk goes on waiting for the real rank.
// Any other refusal (size, key, identity, chunk, a rank taken) ends the
// desk at once with that cause: the rank it refused belongs to this job
// and will not come back right. Every o.report_ns it logs who joined and
// who it waits for. At the deadline the error names the missing ranks.
int serve_joins(const Options &o, int lfd, uint64_t deadline_ns, Joined &out, Error &err);

// Every rank: accepts the data links of the ranks `from` (the mesh's
// members above it; a tiered leader also its host's other ranks)
// on `lfd`; fds[r] becomes rank r's.
int serve_links(const Options &o, const LinkToken &token, const std::vector<int> &from, int lfd,
                uint64_t deadline_ns, std::vector<net::Fd> &fds, Error &err);

}  // namespace ds4tp::group
