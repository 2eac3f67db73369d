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

// ds4tp_transport_auto answers from auto_transport; bring-up must pick
// the same for every pair of offers, or `ds4tp probe` would mislead.
TEST_CASE("auto_transport is auto's choice in negotiation for every pair of offers") {
  for (uint32_t lead = 0; lead <= kAll; lead++)
    for (uint32_t work = 0; work <= kAll; work++)
      for (uint8_t host : {uint8_t(1), uint8_t(2)}) {
        INFO("leader caps 0x" << std::hex << lead << ", worker caps 0x" << work << std::dec
                              << (host == 1 ? ", same host" : ", two hosts"));
        Error err;
        int chosen = -1;
        int rc = connect::negotiate_transport(rank(1, lead, 0, 1), rank(2, work, 0, host), chosen,
                                              err);
        const int want = connect::auto_transport(lead & work, host == 1);
        INFO(err.message);
        if (want == DS4TP_TRANSPORT_AUTO) {
          CHECK(rc == DS4TP_EUNSUPPORTED);
        } else {
          CHECK(rc == DS4TP_OK);
          CHECK(chosen == want);
        }
      }
  CHECK(connect::auto_transport(kAll, true) == DS4TP_TRANSPORT_SHM);
  CHECK(connect::auto_transport(kAll, false) == DS4TP_TRANSPORT_RDMA);
  CHECK(connect::auto_transport(kCapTcp | kCapShm, false) == DS4TP_TRANSPORT_TCP);
  CHECK(connect::auto_transport(0, true) == DS4TP_TRANSPORT_AUTO);
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
