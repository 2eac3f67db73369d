// The public transport enum and everything that must follow it. The
// DS4TP_TRANSPORT_* values are read from include/ds4tp/ds4tp.h at test
// time (DS4TP_PUBLIC_HEADER), so a value added there without its
// descriptor (lib/link), its name, its negotiation, the hello's
// range check (lib/wire/hello) or the C options' range check
// (capi/convert) fails here, naming the value and what is missing.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "connect/negotiate.hpp"
#include "ds4tp/ds4tp.h"
#include "support/ranks.hpp"
#include "link/descriptor.hpp"
#include "wire/hello.hpp"

using namespace ds4tp;

namespace {

// DS4TP_TRANSPORT_<NAME> = value for every enumerator of ds4tp_transport
// in the header text; empty when the enum cannot be found.
std::map<std::string, int> header_transports() {
  std::ifstream f(DS4TP_PUBLIC_HEADER);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string text = ss.str();
  text = std::regex_replace(text, std::regex(R"(/\*[\s\S]*?\*/)"), " ");
  std::smatch body;
  std::map<std::string, int> out;
  const std::regex whole(
      R"(typedef\s+enum\s+ds4tp_transport\s*\{([^}]*)\}\s*ds4tp_transport\s*;)");
  if (!std::regex_search(text, body, whole)) return out;
  const std::string items = body[1].str();
  const std::regex item(R"(DS4TP_TRANSPORT_([A-Z0-9_]+)\s*=\s*([0-9]+))");
  for (auto it = std::sregex_iterator(items.begin(), items.end(), item);
       it != std::sregex_iterator(); ++it)
    out[(*it)[1].str()] = std::stoi((*it)[2].str());
  return out;
}

std::string lower(std::string s) {
  for (char &c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

wire::Hello hello_requesting(int transport) {
  wire::Hello h;
  h.role = DS4TP_ROLE_LEADER;
  h.transport_request = uint8_t(transport);
  h.id.n_layer = 4;
  h.id.n_embd = 256;
  return h;
}

int hello_round_trip(int transport, Error &err) {
  std::vector<uint8_t> bytes = wire::encode_hello(hello_requesting(transport));
  wire::Preamble p;
  if (int rc = wire::decode_preamble(bytes.data(), bytes.size(), wire::kHelloMaxBytes, p, err))
    return rc;
  wire::Hello back;
  return wire::decode_hello_body(bytes.data() + wire::kPreambleBytes,
                                 bytes.size() - wire::kPreambleBytes, back, err);
}

// ds4tp_new for a leader requesting `transport` (it binds an ephemeral
// loopback port, nothing more); the status, and the message in `why`.
int new_leader(int transport, std::string &why) {
  ds4tp_options o;
  ds4tp_options_init(&o);
  o.role = DS4TP_ROLE_LEADER;
  o.transport = transport;
  o.log_level = DS4TP_LOG_ERROR;
  ds4tp_identity id = test::small_identity();
  ds4tp_pair *p = nullptr;
  int rc = ds4tp_new(&p, &o, &id);
  why = ds4tp_last_error();
  if (rc == DS4TP_OK) ds4tp_free(p);
  return rc;
}

}  // namespace

TEST_CASE("the ds4tp_transport enum is read from the public header") {
  INFO("header: " << DS4TP_PUBLIC_HEADER);
  const auto values = header_transports();
  REQUIRE(values.size() >= 2);
  REQUIRE(values.count("AUTO") == 1);
  CHECK(values.at("AUTO") == DS4TP_TRANSPORT_AUTO);
  REQUIRE(values.count("TCP") == 1);
  CHECK(values.at("TCP") == DS4TP_TRANSPORT_TCP);
  std::map<int, std::string> by_value;
  for (const auto &[name, v] : values) {
    INFO("DS4TP_TRANSPORT_" << name << " = " << v);
    CHECK(by_value.emplace(v, name).second);  // no two names for one value
  }
}

TEST_CASE("every DS4TP_TRANSPORT_* value has a descriptor, a name, negotiation and range checks") {
  const auto values = header_transports();
  REQUIRE_FALSE(values.empty());
  int highest = 0;
  for (const auto &[name, v] : values) {
    if (v == DS4TP_TRANSPORT_AUTO) continue;
    highest = std::max(highest, v);
    INFO("DS4TP_TRANSPORT_" << name << " = " << v);

    // lib/link/descriptor.cpp: one entry in kAll, named as the enum.
    const link::Descriptor *d = link::find(v);
    CHECK(d != nullptr);
    CHECK(std::string(ds4tp_transport_name(v)) == lower(name));
    if (d == nullptr) continue;
    CHECK(std::string(d->name) == lower(name));
    CHECK(d->cap != 0);
    CHECK((d->cap & (d->cap - 1)) == 0);  // one capability bit
    // A group mesh is both entries or neither (shm groups share a segment).
    CHECK((d->mesh_setup == nullptr) == (d->mesh_make == nullptr));

    // Available or not, the answer comes with a reason.
    char why[512] = "";
    const int ok = ds4tp_transport_available(v, why, sizeof why);
    INFO("ds4tp_transport_available: " << ok << ", " << why);
    CHECK((ok == 0 || ok == 1));
    CHECK(std::string(why) != "");
    CHECK(std::string(why) != "unknown transport");

    // lib/connect/negotiate: an explicit request both ranks offer wins.
    wire::Hello lead = hello_requesting(v), work = hello_requesting(v);
    work.role = DS4TP_ROLE_WORKER;
    lead.caps = work.caps = d->cap | wire::kCapTcp;
    Error err;
    int chosen = -1;
    const int nrc = connect::negotiate_transport(lead, work, chosen, err);
    INFO("negotiation: " << err.message);
    CHECK(nrc == DS4TP_OK);
    CHECK(chosen == v);

    // lib/wire/hello: the peer's request passes the hello's range check.
    Error herr;
    const int hrc = hello_round_trip(v, herr);
    INFO("hello: " << herr.message);
    CHECK(hrc == DS4TP_OK);

    // capi/convert: the C options accept it.
    std::string msg;
    const int crc = new_leader(v, msg);
    INFO("ds4tp_new: " << msg);
    CHECK(crc == DS4TP_OK);
  }

  // One past the last value is refused everywhere that checks a range.
  const int beyond = highest + 1;
  INFO("one past the last value: " << beyond);
  CHECK(link::find(beyond) == nullptr);
  CHECK(std::string(ds4tp_transport_name(beyond)) == "?");
  Error herr;
  CHECK(hello_round_trip(beyond, herr) == DS4TP_EPROTO);
  std::string msg;
  CHECK(new_leader(beyond, msg) == DS4TP_EINVAL);
}

TEST_CASE("groups reach tcp's mesh through its descriptor, their fallback everywhere") {
  const link::Descriptor *tcp = link::find(DS4TP_TRANSPORT_TCP);
  REQUIRE(tcp != nullptr);
  CHECK(tcp->mesh_setup != nullptr);
  CHECK(tcp->mesh_make != nullptr);
}

TEST_CASE("every descriptor in lib/link is a value of the public enum") {
  const auto values = header_transports();
  REQUIRE_FALSE(values.empty());
  for (const link::Descriptor *d : link::all()) {
    INFO("descriptor " << d->name << " (id " << d->id << ")");
    auto it = values.find([&] {
      std::string up = d->name;
      for (char &c : up) c = char(std::toupper(static_cast<unsigned char>(c)));
      return up;
    }());
    CHECK(it != values.end());
    if (it != values.end()) CHECK(it->second == d->id);
  }
}
