// C ABI argument validation, status table and versions.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>

#include "ds4tp/ds4tp.h"
#include "support/ranks.hpp"

TEST_CASE("status table: names and messages for every code") {
#define CHECK_CODE(name, value, msg)                                   \
  REQUIRE(std::string(ds4tp_err_name(value)) == "DS4TP_" #name);       \
  REQUIRE(std::string(ds4tp_strerror(value)) == msg);
  DS4TP_STATUS_MAP(CHECK_CODE)
#undef CHECK_CODE
  REQUIRE(std::string(ds4tp_err_name(-999)) == "DS4TP_UNKNOWN");
  REQUIRE(std::string(ds4tp_strerror(12345)) == "unknown status");
}

TEST_CASE("the version calls match the version macros, and transports have names") {
  REQUIRE(ds4tp_version() == DS4TP_VERSION_HEX);
  REQUIRE(std::string(ds4tp_version_string()) == "0.1.0");
  REQUIRE(ds4tp_protocol_version() == DS4TP_PROTOCOL_VERSION);
  REQUIRE(std::string(ds4tp_transport_name(DS4TP_TRANSPORT_SHM)) == "shm");
  REQUIRE(std::string(ds4tp_transport_name(42)) == "?");
}

// What `ds4tp probe` prints as auto's choice: the library's rule applied
// to what this host offers (ds4tp_transport_available).
TEST_CASE("ds4tp_transport_auto follows what this host offers") {
  auto ok = [](int t) { return ds4tp_transport_available(t, nullptr, 0) == 1; };
  const int rdma_or_tcp = ok(DS4TP_TRANSPORT_RDMA) ? DS4TP_TRANSPORT_RDMA : DS4TP_TRANSPORT_TCP;
  const int same = ok(DS4TP_TRANSPORT_SHM) ? DS4TP_TRANSPORT_SHM : rdma_or_tcp;
  CHECK(std::string(ds4tp_transport_name(ds4tp_transport_auto(1))) == ds4tp_transport_name(same));
  CHECK(std::string(ds4tp_transport_name(ds4tp_transport_auto(0))) ==
        ds4tp_transport_name(rdma_or_tcp));
  CHECK(ds4tp_transport_auto(7) == ds4tp_transport_auto(1));  // any nonzero is "same host"
}

namespace {
int try_new(const ds4tp_options &o, const ds4tp_identity &id) {
  ds4tp_pair *p = reinterpret_cast<ds4tp_pair *>(0x1);
  int rc = ds4tp_new(&p, &o, &id);
  if (rc == DS4TP_OK) ds4tp_free(p);
  else REQUIRE(p == nullptr);
  return rc;
}
}  // namespace

TEST_CASE("ds4tp_new validates options and identity with a message") {
  ds4tp_options o;
  ds4tp_options_init(&o);
  o.role = DS4TP_ROLE_LEADER;
  o.log_level = DS4TP_LOG_ERROR;
  ds4tp_identity id = ds4tp::test::small_identity();
  REQUIRE(try_new(o, id) == DS4TP_OK);

  struct Case {
    const char *expect;
    std::function<void(ds4tp_options &, ds4tp_identity &)> change;
  } cases[] = {
      {"role", [](ds4tp_options &x, ds4tp_identity &) { x.role = 0; }},
      {"transport", [](ds4tp_options &x, ds4tp_identity &) { x.transport = 7; }},
      {"listen_port", [](ds4tp_options &x, ds4tp_identity &) { x.listen_port = 70000; }},
      {"gate_timeout_ms", [](ds4tp_options &x, ds4tp_identity &) { x.gate_timeout_ms = 0; }},
      {"connect_timeout_ms", [](ds4tp_options &x, ds4tp_identity &) { x.connect_timeout_ms = -5; }},
      {"spin_us", [](ds4tp_options &x, ds4tp_identity &) { x.spin_us = -4; }},
      {"spin_us", [](ds4tp_options &x, ds4tp_identity &) { x.spin_us = 10000001; }},
      {"size", [](ds4tp_options &x, ds4tp_identity &) { x.size = 0; }},
      {"leader_port", [](ds4tp_options &x, ds4tp_identity &) { x.role = DS4TP_ROLE_WORKER; }},
      {"options.failover 2 must be 0 or 1", [](ds4tp_options &x, ds4tp_identity &) { x.failover = 2; }},
      {"options.rails: '10.0.0' is not an IPv4 address",
       [](ds4tp_options &x, ds4tp_identity &) { x.rails = "10.0.0.1,10.0.0"; }},
      {"options.rails: 10.0.0.1 is listed twice",
       [](ds4tp_options &x, ds4tp_identity &) { x.rails = "10.0.0.1,10.0.0.1"; }},
      {"options.rails lists 8 addresses: at most 7", [](ds4tp_options &x, ds4tp_identity &) {
         x.rails = "10.0.0.1,10.0.0.2,10.0.0.3,10.0.0.4,10.0.0.5,10.0.0.6,10.0.0.7,10.0.0.8";
       }},
      {"options.rdma_rails: 'fv1:0' is not device[:port[:gid_index]]",
       [](ds4tp_options &x, ds4tp_identity &) { x.rdma_rails = "mlx5_1,fv1:0"; }},
      {"options.rdma_rails: fv1 is listed twice",
       [](ds4tp_options &x, ds4tp_identity &) { x.rdma_rails = "fv1,fv1"; }},
      {"options.rdma_rails lists 8 ports: at most 7",
       [](ds4tp_options &x, ds4tp_identity &) { x.rdma_rails = "a,b,c,d,e,f,g,h"; }},
      {"n_layer", [](ds4tp_options &, ds4tp_identity &i) { i.n_layer = 0; }},
      {"engine_blob", [](ds4tp_options &, ds4tp_identity &i) { i.engine_blob_bytes = 4; }},
      {"gates_per_token", [](ds4tp_options &, ds4tp_identity &i) {
         i.gate_slot_mask[0] = 3;
         i.gates_per_token = 1;
       }},
  };
  for (auto &c : cases) {
    ds4tp_options o2 = o;
    ds4tp_identity id2 = id;
    c.change(o2, id2);
    INFO(c.expect);
    REQUIRE(try_new(o2, id2) == DS4TP_EINVAL);
    REQUIRE_THAT(std::string(ds4tp_last_error()), Catch::Contains(c.expect));
  }
  REQUIRE(ds4tp_new(nullptr, &o, &id) == DS4TP_EINVAL);
  ds4tp_pair *p = nullptr;
  REQUIRE(ds4tp_new(&p, nullptr, &id) == DS4TP_EINVAL);
  REQUIRE(ds4tp_new(&p, &o, nullptr) == DS4TP_EINVAL);
}

TEST_CASE("an older smaller options struct is accepted with defaults") {
  ds4tp_options o;
  ds4tp_options_init(&o);
  o.role = DS4TP_ROLE_LEADER;
  o.size = offsetof(ds4tp_options, connect_timeout_ms);  // knows nothing past the ports
  o.gate_timeout_ms = -1;  // beyond its size: must be ignored, default used
  o.log_level = 99;        // likewise
  ds4tp_identity id = ds4tp::test::small_identity();
  REQUIRE(try_new(o, id) == DS4TP_OK);
}

TEST_CASE("calls on NULL or unconnected handles fail cleanly") {
  REQUIRE(ds4tp_connect(nullptr) == DS4TP_EINVAL);
  REQUIRE(ds4tp_gate_exchange(nullptr, 0, 0, 1) == DS4TP_EINVAL);
  REQUIRE(ds4tp_failed(nullptr) == 1);
  REQUIRE(ds4tp_rank(nullptr) == -1);
  REQUIRE(ds4tp_slab_bytes(nullptr) == 0);
  ds4tp_free(nullptr);
  ds4tp_detach_slab(nullptr);
  ds4tp_mark_failed(nullptr, "x");

  ds4tp_options o;
  ds4tp_options_init(&o);
  o.role = DS4TP_ROLE_LEADER;
  o.log_level = DS4TP_LOG_ERROR;
  ds4tp_identity id = ds4tp::test::small_identity(4, 256);
  ds4tp_pair *p = nullptr;
  REQUIRE(ds4tp_new(&p, &o, &id) == DS4TP_OK);
  REQUIRE(ds4tp_listen_port(p) > 0);
  REQUIRE(ds4tp_rank(p) == 0);
  REQUIRE(ds4tp_transport_active(p) == DS4TP_TRANSPORT_AUTO);
  REQUIRE(ds4tp_slab_bytes(p) > 0);
  REQUIRE(ds4tp_slab_out_offset(p, 4, 0) == UINT64_MAX);
  REQUIRE(ds4tp_slab_out_offset(p, 3, 2) == UINT64_MAX);
  REQUIRE(ds4tp_slab_in_offset(p, 3, 1) != UINT64_MAX);
  REQUIRE(ds4tp_slab_batch_in_offset(p, 8) == UINT64_MAX);
  REQUIRE(ds4tp_attach_slab(p, nullptr, 0) == DS4TP_ESTATE);
  REQUIRE_THAT(std::string(ds4tp_errmsg(p)), Catch::Contains("after ds4tp_connect"));
  REQUIRE(ds4tp_gate_exchange(p, 0, 0, 1) == DS4TP_ESTATE);
  REQUIRE(ds4tp_failed(p) == 0);  // argument/state errors do not latch
  ds4tp_mark_failed(p, "gpu fault");
  REQUIRE(ds4tp_failed(p) == 1);
  REQUIRE(ds4tp_gate_exchange(p, 0, 0, 1) == DS4TP_EFAILED);
  REQUIRE_THAT(std::string(ds4tp_last_error()), Catch::Contains("gpu fault"));
  ds4tp_free(p);
}

TEST_CASE("a listen address that cannot be bound is an I/O error naming it") {
  ds4tp_options o;
  ds4tp_options_init(&o);
  o.role = DS4TP_ROLE_LEADER;
  o.log_level = DS4TP_LOG_ERROR;
  ds4tp_identity id = ds4tp::test::small_identity();
  ds4tp_pair *a = nullptr, *b = nullptr;
  REQUIRE(ds4tp_new(&a, &o, &id) == DS4TP_OK);
  o.listen_port = ds4tp_listen_port(a);
  REQUIRE(ds4tp_new(&b, &o, &id) == DS4TP_EIO);
  REQUIRE_THAT(std::string(ds4tp_last_error()), Catch::Contains(std::to_string(o.listen_port)));
  ds4tp_free(a);
}
