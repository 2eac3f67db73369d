// Transport negotiation: a pure function both ranks evaluate alike.
#include <catch2/catch.hpp>

#include "connect/negotiate.hpp"

using namespace ds4tp;
using namespace ds4tp::wire;

namespace {
Hello rank(int role, uint32_t caps, int request, uint8_t host) {
  Hello h;
  h.role = uint8_t(role);
  h.caps = caps;
  h.transport_request = uint8_t(request);
  h.host_id.fill(host);
  return h;
}
int pick(const Hello &a, const Hello &b, Error &err) {
  int x = -1, y = -1;
  Error e2;
  int rc1 = connect::negotiate_transport(a, b, x, err);
  int rc2 = connect::negotiate_transport(b, a, y, e2);
  REQUIRE(rc1 == rc2);  // both ranks reach the same verdict...
  REQUIRE(err.message == e2.message);  // ...worded the same way
  if (rc1) return rc1;
  REQUIRE(x == y);
  return x;
}
const uint32_t kAll = kCapTcp | kCapShm | kCapRdma;
}  // namespace

TEST_CASE("auto prefers shm on one host, rdma across hosts, then tcp") {
  Error err;
  REQUIRE(pick(rank(1, kAll, 0, 1), rank(2, kAll, 0, 1), err) == DS4TP_TRANSPORT_SHM);
  REQUIRE(pick(rank(1, kAll, 0, 1), rank(2, kAll, 0, 2), err) == DS4TP_TRANSPORT_RDMA);
  REQUIRE(pick(rank(1, kCapTcp | kCapShm, 0, 1), rank(2, kAll, 0, 2), err) == DS4TP_TRANSPORT_TCP);
  REQUIRE(pick(rank(1, kCapTcp | kCapRdma, 0, 1), rank(2, kAll, 0, 1), err) == DS4TP_TRANSPORT_RDMA);
}

TEST_CASE("an explicit request wins over auto and conflicts are named") {
  Error err;
  REQUIRE(pick(rank(1, kAll, DS4TP_TRANSPORT_TCP, 1), rank(2, kAll, 0, 1), err) == DS4TP_TRANSPORT_TCP);
  REQUIRE(pick(rank(1, kAll, 0, 1), rank(2, kAll, DS4TP_TRANSPORT_RDMA, 1), err) == DS4TP_TRANSPORT_RDMA);
  REQUIRE(pick(rank(1, kAll, DS4TP_TRANSPORT_TCP, 1), rank(2, kAll, DS4TP_TRANSPORT_SHM, 1), err) ==
          DS4TP_EUNSUPPORTED);
  REQUIRE_THAT(err.message, Catch::Contains("leader asks for tcp but the worker for shm"));
}

TEST_CASE("an impossible explicit request says which rank lacks it") {
  Error err;
  REQUIRE(pick(rank(1, kCapTcp, DS4TP_TRANSPORT_RDMA, 1), rank(2, kAll, 0, 2), err) ==
          DS4TP_EUNSUPPORTED);
  REQUIRE_THAT(err.message, Catch::Contains("the leader does not offer it"));
  REQUIRE(pick(rank(1, kAll, DS4TP_TRANSPORT_SHM, 1), rank(2, kAll, 0, 2), err) ==
          DS4TP_EUNSUPPORTED);
  REQUIRE_THAT(err.message, Catch::Contains("different hosts"));
  REQUIRE(pick(rank(1, kAll, 0, 1), rank(2, kCapTcp, DS4TP_TRANSPORT_RDMA, 1), err) ==
          DS4TP_EUNSUPPORTED);
  REQUIRE_THAT(err.message, Catch::Contains("the worker does not offer it"));
}

TEST_CASE("the hello judgement: a role clash, and rdma refused in this rank's words") {
  Error err;
  int chosen = -1;
  REQUIRE(connect::judge_hello(rank(1, kAll, 0, 1), rank(1, kAll, 0, 1), "", chosen, err) ==
          DS4TP_EPROTO);
  REQUIRE_THAT(err.message, Catch::Contains("both ranks claim the leader role"));
  REQUIRE(connect::judge_hello(rank(2, kCapTcp, 0, 1), rank(1, kAll, DS4TP_TRANSPORT_RDMA, 2),
                               "no port", chosen, err) == DS4TP_EUNSUPPORTED);
  REQUIRE_THAT(err.message,
               Catch::Contains("this rank (worker) has no RDMA device: no port"));
  REQUIRE(connect::judge_hello(rank(1, kAll, 0, 1), rank(2, kAll, 0, 2), "", chosen, err) ==
          DS4TP_OK);
  REQUIRE(chosen == DS4TP_TRANSPORT_RDMA);
}
