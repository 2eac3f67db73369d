// Groups: element conversions and wire codecs (pure), collectives over
// threads (in-process) and processes (shm, tcp), bring-up refusals and a
// rank killed mid-call.
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <thread>
#include <vector>

#include <unistd.h>

#include <catch2/catch.hpp>

#include "common/clock.hpp"
#include "talk/group_beat.hpp"
#include "talk/silence.hpp"
#include "group/reduce.hpp"
#include "group/wire.hpp"
#include "support/group_util.hpp"
#include "os/os.hpp"
#include "support/procs.hpp"

using namespace ds4tp;
using namespace ds4tp::test;

namespace {

const std::vector<uint64_t> kCounts = {1, 7, 2560, 40001};  // 40001 f32 > one 64 KiB chunk

ds4tp_group_options local_options() {
  ds4tp_group_options o;
  ds4tp_group_options_init(&o);
  o.chunk_bytes = 64 * 1024;
  o.op_timeout_ms = 5000;
  return o;
}

void run_local(int n) {
  std::vector<ds4tp_group *> gs(static_cast<size_t>(n));
  ds4tp_group_options o = local_options();
  REQUIRE(ds4tp_group_new_local(gs.data(), n, &o, nullptr) == 0);
  GroupRun run = run_group_threads(gs, kCounts);
  for (int r = 0; r < n; r++) {
    INFO("rank " << r << ": " << run.msgs[size_t(r)]);
    CHECK(run.rcs[size_t(r)] == 0);
    CHECK(run.digests[size_t(r)] == run.digests[0]);
    CHECK(ds4tp_group_rank(gs[size_t(r)]) == r);
    CHECK(ds4tp_group_size(gs[size_t(r)]) == n);
  }
  for (auto *g : gs) ds4tp_group_free(g);
}

int checks_body(ds4tp_group *g, int, uint64_t &digest, std::string &why) {
  return group_checks(g, kCounts, why, digest);
}

void run_procs(int n, int transport) {
  GroupRun run = run_group_procs(n, transport, checks_body);
  INFO(run.why);
  REQUIRE(run.rc == 0);
  for (int r = 1; r < n; r++) CHECK(run.digests[size_t(r)] == run.digests[0]);
}

}  // namespace

TEST_CASE("group: f16 and bf16 conversions round to nearest even", "[group]") {
  CHECK(group::float_to_half(1.0f) == 0x3c00);
  CHECK(group::half_to_float(0x3c00) == 1.0f);
  CHECK(group::float_to_half(65504.0f) == 0x7bff);
  CHECK(group::float_to_half(70000.0f) == 0x7c00);
  CHECK(group::half_to_float(0x0001) == 5.9604644775390625e-8f);
  CHECK(group::float_to_half(1.0f + 1.0f / 2048) == 0x3c00);  // tie -> even
  CHECK(group::float_to_bf16(1.0f) == 0x3f80);
  CHECK(group::float_to_bf16(1.0f + 1.0f / 256) == 0x3f80);  // tie -> even
  CHECK((group::float_to_bf16(std::nanf("")) & 0x7fc0) == 0x7fc0);
  for (uint32_t h = 0; h < 0x7c00; h++)
    REQUIRE(group::float_to_half(group::half_to_float(uint16_t(h))) == h);
}

TEST_CASE("group: wire codecs round-trip and refuse bad input", "[group]") {
  group::Join j;
  j.rank = 3;
  j.size = 4;
  j.data_port = 5000;
  j.chunk = 65536;
  j.hello_bytes = 100;
  j.pid = 4242;
  uint8_t b[group::kJoinFixedBytes];
  group::encode_join(j, b);
  group::Join k;
  Error err;
  REQUIRE(group::decode_join(b, sizeof b, k, err) == 0);
  CHECK(k.rank == 3);
  CHECK(k.data_port == 5000);
  CHECK(k.pid == 4242);
  b[8] = 9;  // rank 9 of 4
  CHECK(group::decode_join(b, sizeof b, k, err) == DS4TP_EPROTO);
  group::Roster ro;
  ro.transport = DS4TP_TRANSPORT_SHM;
  ro.size = 3;
  ro.shm_name = "/ds4tp-g1-abc";
  ro.peers = {{"", 1}, {"127.0.0.1", 2}, {"10.0.0.3", 3}};
  ro.token[3] = 0x77;
  uint8_t rb[group::kRosterBytes];
  group::encode_roster(ro, rb);
  group::Roster r2;
  REQUIRE(group::decode_roster(rb, sizeof rb, r2, err) == 0);
  CHECK(r2.shm_name == ro.shm_name);
  CHECK(r2.peers[2].host == "10.0.0.3");
  CHECK(r2.token == ro.token);
  uint8_t lb[group::kLinkBytes];
  group::encode_link(2, ro.token, lb);
  uint32_t lr = 0;
  group::LinkToken lt{};
  REQUIRE(group::decode_link(lb, sizeof lb, 3, lr, lt, err) == 0);
  CHECK(lr == 2);
  CHECK(lt == ro.token);
  CHECK(group::decode_link(lb, sizeof lb, 2, lr, lt, err) == DS4TP_EPROTO);  // rank 2 of 2
  uint8_t h[group::kStepHeaderBytes];
  const uint32_t f16 = group::call_word(group::Kind::AllReduce, int(group::Dtype::F16));
  const uint32_t bf16 = group::call_word(group::Kind::AllReduce, int(group::Dtype::BF16));
  group::encode_step_header(5, 100, f16, 0, h);
  CHECK(group::check_step_header(h, 5, 100, f16, 1, err) == 0);
  CHECK(group::check_step_header(h, 6, 100, f16, 1, err) == DS4TP_EDESYNC);
  // The same step and bytes in another call: both calls named.
  CHECK(group::check_step_header(h, 5, 100, bf16, 1, err) == DS4TP_EDESYNC);
  CHECK_THAT(err.message, Catch::Contains("all_reduce f16 sum") &&
                              Catch::Contains("all_reduce bf16 sum"));
}

TEST_CASE("heartbeats: one silence rule for the pair's one peer and a group's ranks", "[group]") {
  const uint64_t ms = 1'000'000, limit = 1000 * ms;
  CHECK(talk::beat_period(100 * ms, limit) == 100 * ms);
  CHECK(talk::beat_period(100 * ms, 200 * ms) == 50 * ms);  // four beats inside the limit
  talk::SilenceJudge j(limit, 3, 0);
  uint64_t t = 0;
  for (; t <= 900 * ms; t += 100 * ms) {  // beats on time; rank index 1 keeps talking
    j.heard(1, t);
    REQUIRE(j.beat(t) == -1);
  }
  j.heard(1, t);
  CHECK(j.beat(t) == 0);  // index 0 quiet for the limit: the first silent peer
  CHECK(j.quiet_for(0, t) == limit);
  CHECK(j.beat(t, [](int p) { return p != 0; }) == 2);  // a closed link is not judged
  // A beat thread that itself ran over half the limit late (stopped or
  // starved) forgives every peer: it did not see their silence.
  talk::SilenceJudge late(limit, 1, 0);
  CHECK(late.beat(100 * ms) == -1);
  CHECK(late.beat(1700 * ms) == -1);  // 1.6 s late, not 1.7 s silent
  CHECK(late.quiet_for(0, 1700 * ms) == 0);
  CHECK(late.beat(2100 * ms) == -1);
  CHECK(late.beat(2200 * ms) == -1);
  CHECK(late.beat(2700 * ms) == 0);  // on time since: silent for the limit
}

namespace {
// Heartbeat messages as group_beat.hpp lays them out.
void put_le(std::vector<uint8_t> &v, uint64_t x, int bytes) {
  for (int i = 0; i < bytes; i++) v.push_back(uint8_t(x >> (8 * i)));
}
// Rank 0's beat: counts, then the echo (t0, t1) and its send time t2.
std::vector<uint8_t> hub_beat(const std::vector<uint32_t> &counts, uint64_t t0, uint64_t t1,
                              uint64_t t2) {
  std::vector<uint8_t> v = {talk::kBeats, uint8_t(counts.size())};
  for (uint32_t c : counts) put_le(v, c, 4);
  put_le(v, t0, 8);
  put_le(v, t1, 8);
  put_le(v, t2, 8);
  return v;
}
std::vector<uint8_t> rank_beat(uint32_t count, uint64_t sent) {
  std::vector<uint8_t> v = {talk::kBeat};
  put_le(v, count, 4);
  put_le(v, sent, 8);
  return v;
}
}  // namespace

TEST_CASE("group: the heartbeat stream reads beats with their counts and clocks, a notice split across reads, and refuses other bytes", "[group]") {
  using talk::BeatReader;
  // Rank 0's beat carries every rank's count of calls entered (3 ranks)
  // and the clock round of this rank's last beat.
  std::vector<uint8_t> stream = hub_beat({5, 4, 10000}, 111, 222, 333);
  const size_t first = stream.size();
  stream.insert(stream.end(), {talk::kNotice, 2, uint8_t(-DS4TP_ETIMEDOUT)});
  const std::vector<uint8_t> second = hub_beat({6}, 0, 0, 444);
  stream.insert(stream.end(), second.begin(), second.end());
  BeatReader r(true);
  size_t used = 0;
  CHECK(r.feed(stream.data(), 9, used) == BeatReader::kNone);  // the beat is not whole yet
  CHECK(r.count_n() == 0);
  CHECK(r.feed(stream.data() + 9, first + 2 - 9, used) == BeatReader::kNone);  // the notice's last byte is to come
  CHECK(used == first + 2 - 9);
  REQUIRE(r.count_n() == 3);
  CHECK(r.counts()[0] == 5);
  CHECK(r.counts()[1] == 4);
  CHECK(r.counts()[2] == 10000);
  CHECK(r.round().t0 == 111);
  CHECK(r.round().t1 == 222);
  CHECK(r.round().t2 == 333);
  CHECK(r.feed(stream.data() + first + 2, stream.size() - first - 2, used) == BeatReader::kNoticed);
  CHECK(used == 1);
  CHECK(r.notice_rank() == 2);
  CHECK(r.notice_code() == DS4TP_ETIMEDOUT);
  CHECK(r.feed(stream.data() + first + 3, second.size(), used) == BeatReader::kNone);
  CHECK(r.count_n() == 1);
  CHECK(r.counts()[0] == 6);
  CHECK(r.round().t0 == 0);  // no beat of this rank heard yet
  // Another rank's beat carries its own count and clock; it sends no notices.
  std::vector<uint8_t> peer = rank_beat(7, 0x123456789ull);
  peer.push_back(talk::kNotice);
  BeatReader from_peer(false);
  CHECK(from_peer.feed(peer.data(), peer.size(), used) == BeatReader::kBadByte);
  CHECK(used == peer.size());
  CHECK(from_peer.bad_byte() == talk::kNotice);
  CHECK(from_peer.count_n() == 1);
  CHECK(from_peer.counts()[0] == 7);
  CHECK(from_peer.sent() == 0x123456789ull);
  // A verdict comes either way (rank 0 passes a rank's on), its reason
  // (the finder's message) with it.
  std::vector<uint8_t> verdict = {talk::kVerdict, 3, uint8_t(-DS4TP_EPEERCLOSED), 1, 3, 'c', 'u', 't'};
  const std::vector<uint8_t> after = rank_beat(1, 1);
  verdict.insert(verdict.end(), after.begin(), after.end());
  BeatReader v(false);
  CHECK(v.feed(verdict.data(), 2, used) == BeatReader::kNone);
  CHECK(v.feed(verdict.data() + 2, 5, used) == BeatReader::kNone);  // the reason's last byte is to come
  CHECK(v.feed(verdict.data() + 7, verdict.size() - 7, used) == BeatReader::kNoticed);
  CHECK(used == 1);
  CHECK(v.notice_rank() == 3);
  CHECK(v.notice_code() == DS4TP_EPEERCLOSED);
  CHECK(v.notice_finder() == 1);
  CHECK(v.notice_reason() == "cut");
  CHECK(r.notice_finder() == -1);  // rank 0's silence notice names no finder
  CHECK(r.notice_reason().empty());
  // A reason longer than a verdict may carry is refused.
  const uint8_t long_reason[] = {talk::kVerdict, 1, 1, 0, uint8_t(talk::kMaxReason + 1)};
  BeatReader r1(false);
  CHECK(r1.feed(long_reason, sizeof long_reason, used) == BeatReader::kBadByte);
  // A beat from rank 0 naming no ranks, or more than a group has: refused.
  const uint8_t junk[] = {talk::kBeats, 0};
  BeatReader r2(true);
  CHECK(r2.feed(junk, sizeof junk, used) == BeatReader::kBadByte);
  const uint8_t wrong_side[] = {talk::kBeat};  // a rank's beat does not come from rank 0
  BeatReader r3(true);
  CHECK(r3.feed(wrong_side, 1, used) == BeatReader::kBadByte);
}

TEST_CASE("group: threads N=2,3,4,8 get identical bits", "[group]") {
  for (int n : {2, 3, 4, 8}) {
    INFO("n=" << n);
    run_local(n);
  }
}

TEST_CASE("group: option values out of range are refused, naming the option", "[group]") {
  struct Bad {
    const char *name;
    void (*edit)(ds4tp_group_options &);
  };
  const Bad bad[] = {
      {"peer_silence_ms", [](ds4tp_group_options &o) { o.peer_silence_ms = 100; }},
      {"peer_silence_ms", [](ds4tp_group_options &o) { o.peer_silence_ms = 600001; }},
      {"peer_arrival_timeout_ms", [](ds4tp_group_options &o) { o.peer_arrival_timeout_ms = 0; }},
      {"peer_arrival_timeout_ms", [](ds4tp_group_options &o) { o.peer_arrival_timeout_ms = -2; }},
      {"spin_us", [](ds4tp_group_options &o) { o.spin_us = -4; }},
      {"chunk_bytes", [](ds4tp_group_options &o) { o.chunk_bytes = 1000; }},
  };
  for (const Bad &b : bad) {
    ds4tp_group_options o = local_options();
    b.edit(o);
    ds4tp_group *gs[2] = {nullptr, nullptr};
    INFO(b.name);
    CHECK(ds4tp_group_new_local(gs, 2, &o, nullptr) == DS4TP_EINVAL);
    const std::string why = ds4tp_last_error();
    INFO(why);
    CHECK(why.find(b.name) != std::string::npos);
    CHECK(gs[0] == nullptr);
  }
}

TEST_CASE("group: ranks that call different counts over shm fail with EDESYNC naming both", "[group]") {
  for (const bool bcast : {false, true}) {
    INFO((bcast ? "broadcast" : "all-reduce"));
    std::vector<ds4tp_group *> gs(3);
    ds4tp_group_options o = local_options();
    REQUIRE(ds4tp_group_new_local(gs.data(), 3, &o, nullptr) == 0);
    std::vector<int> rcs(3);
    std::vector<std::thread> ts;
    for (int r = 0; r < 3; r++)
      ts.emplace_back([&, r] {
        std::vector<float> v(256, float(r));
        const uint64_t count = r == 2 ? 200 : 100;  // rank 2 calls another count
        rcs[size_t(r)] = bcast ? ds4tp_group_broadcast(gs[size_t(r)], v.data(), count * 4, 0)
                               : ds4tp_group_all_reduce(gs[size_t(r)], v.data(), count,
                                                        DS4TP_DTYPE_F32, DS4TP_OP_SUM);
      });
    for (auto &t : ts) t.join();
    bool named = false;
    for (int r = 0; r < 3; r++) {
      const std::string m = ds4tp_group_errmsg(gs[size_t(r)]);
      INFO("rank " << r << ": " << rcs[size_t(r)] << " " << m);
      CHECK(rcs[size_t(r)] == DS4TP_EDESYNC);
      named = named || (m.find("with 800 bytes") != std::string::npos &&
                        m.find("with 400") != std::string::npos &&
                        m.find("(collectives or counts differ)") != std::string::npos);
    }
    CHECK(named);
    for (auto *g : gs) ds4tp_group_free(g);
  }
}

TEST_CASE("group: mark_failed releases the other threads", "[group]") {
  std::vector<ds4tp_group *> gs(3);
  ds4tp_group_options o = local_options();
  REQUIRE(ds4tp_group_new_local(gs.data(), 3, &o, nullptr) == 0);
  std::vector<int> rcs(2);
  std::vector<std::thread> ts;
  for (int r = 0; r < 2; r++)
    ts.emplace_back([&, r] {
      float v[16] = {};
      rcs[size_t(r)] = ds4tp_group_all_reduce(gs[size_t(r)], v, 16, DS4TP_DTYPE_F32, DS4TP_OP_SUM);
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ds4tp_group_mark_failed(gs[2]);
  for (auto &t : ts) t.join();
  CHECK(rcs[0] == DS4TP_EFAILED);
  CHECK(rcs[1] == DS4TP_EFAILED);
  CHECK(std::string(ds4tp_group_errmsg(gs[0])).find("rank 2") != std::string::npos);
  CHECK(ds4tp_group_barrier(gs[2]) == DS4TP_EFAILED);
  for (auto *g : gs) ds4tp_group_free(g);
}

TEST_CASE("group: processes over shm, N=2,3,4", "[group]") {
  for (int n : {2, 3, 4}) {
    INFO("n=" << n);
    run_procs(n, DS4TP_TRANSPORT_SHM);
  }
}

TEST_CASE("group: processes over tcp, N=2,3,4", "[group]") {
  for (int n : {2, 3, 4}) {
    INFO("n=" << n);
    run_procs(n, DS4TP_TRANSPORT_TCP);
  }
}

TEST_CASE("group: 8 processes, auto picks shm on one host", "[group]") {
  GroupRun run = run_group_procs(8, DS4TP_TRANSPORT_AUTO,
                                 [](ds4tp_group *g, int, uint64_t &d, std::string &why) {
                                   if (ds4tp_group_transport(g) != DS4TP_TRANSPORT_SHM) {
                                     why = "transport is not shm";
                                     return int(DS4TP_EIO);
                                   }
                                   return group_checks(g, {1, 2560}, why, d);
                                 });
  INFO(run.why);
  CHECK(run.rc == 0);
}

TEST_CASE("group: bring-up refusals name the rank", "[group]") {
  SECTION("identity mismatch: every rank hears it at once, not at the deadline") {
    const uint64_t t0 = now_ns();
    GroupRun run = run_group_procs(3, DS4TP_TRANSPORT_AUTO, checks_body,
                                   [](int r, ds4tp_group_options &o, ds4tp_identity &id) {
                                     o.connect_timeout_ms = 60000;
                                     if (r == 2) id.n_embd = 4096;
                                   });
    for (int r = 0; r < 3; r++) {
      INFO("rank " << r << ": " << run.msgs[size_t(r)]);
      CHECK(run.rcs[size_t(r)] == DS4TP_EIDENTITY);
      CHECK(run.msgs[size_t(r)].find("rank 2") != std::string::npos);
      CHECK(run.msgs[size_t(r)].find("n_embd") != std::string::npos);
    }
    CHECK(double(now_ns() - t0) / 1e9 < 30.0);
  }
  SECTION("another job at the port: refused, and the group waits for its own rank") {
    GroupRun run = run_group_procs(2, DS4TP_TRANSPORT_AUTO, checks_body,
                                   [](int r, ds4tp_group_options &o, ds4tp_identity &) {
                                     o.connect_timeout_ms = 1500;
                                     o.job_id = r == 0 ? "job-a" : "job-b";
                                   });
    INFO(run.msgs[0]);
    INFO(run.msgs[1]);
    CHECK(run.rcs[0] == DS4TP_EPROTO);  // at the deadline, naming the refusal
    CHECK(run.msgs[0].find("rank 1 did not join") != std::string::npos);
    CHECK(run.msgs[0].find("another job") != std::string::npos);
    CHECK(run.rcs[1] == DS4TP_EPROTO);
    CHECK(run.msgs[1].find("belongs to another job") != std::string::npos);
    CHECK(run.msgs[1].find("job_id=job-a") != std::string::npos);
  }
  SECTION("duplicate rank") {
    GroupRun run = run_group_procs(3, DS4TP_TRANSPORT_AUTO, checks_body,
                                   [](int r, ds4tp_group_options &o, ds4tp_identity &) {
                                     o.connect_timeout_ms = 2500;
                                     if (r == 2) o.rank = 1;
                                   });
    INFO(run.msgs[0]);
    CHECK(run.rcs[0] == DS4TP_EPROTO);
    CHECK(run.msgs[0].find("rank 1 joined twice") != std::string::npos);
  }
  SECTION("missing rank at the deadline") {
    GroupRun run = run_group_procs(3, DS4TP_TRANSPORT_AUTO, checks_body,
                                   [](int r, ds4tp_group_options &o, ds4tp_identity &) {
                                     o.connect_timeout_ms = 1500;
                                     if (r == 2) o.rendezvous_port = 1;
                                   });
    INFO(run.msgs[0]);
    CHECK(run.rcs[0] == DS4TP_ETIMEDOUT);
    CHECK(run.msgs[0].find("rank 2 did not join") != std::string::npos);
    CHECK(run.rcs[1] == DS4TP_ETIMEDOUT);
  }
  SECTION("wrong key") {
    static const char k0[] = "0123456789abcdef-key-zero";
    static const char k1[] = "0123456789abcdef-key-one!";
    GroupRun run = run_group_procs(2, DS4TP_TRANSPORT_AUTO, checks_body,
                                   [](int r, ds4tp_group_options &o, ds4tp_identity &) {
                                     o.connect_timeout_ms = 2500;
                                     o.psk = r == 0 ? k0 : k1;
                                     o.psk_bytes = sizeof k0 - 1;
                                   });
    INFO(run.msgs[0]);
    CHECK(run.rcs[0] == DS4TP_EAUTH);
    CHECK(run.rcs[1] == DS4TP_EAUTH);
  }
  SECTION("matching key") {
    static const char k[] = "0123456789abcdef-key-same";
    GroupRun run = run_group_procs(2, DS4TP_TRANSPORT_TCP, checks_body,
                                   [](int, ds4tp_group_options &o, ds4tp_identity &) {
                                     o.psk = k;
                                     o.psk_bytes = sizeof k - 1;
                                   });
    INFO(run.why);
    CHECK(run.rc == 0);
  }
}

TEST_CASE("group: a rank SIGKILLed mid-call releases the others", "[group][fault]") {
  for (int transport : {DS4TP_TRANSPORT_SHM, DS4TP_TRANSPORT_TCP}) {
    INFO("transport " << ds4tp_transport_name(transport));
    uint64_t t0 = mono_ns();
    GroupRun run = run_group_procs(
        4, transport,
        [](ds4tp_group *g, int rank, uint64_t &, std::string &why) {
          std::vector<float> v(2560, 1.0f);
          for (int i = 0;; i++) {
            if (rank == 3 && i == 200) raise(SIGKILL);
            int rc = ds4tp_group_all_reduce(g, v.data(), v.size(), DS4TP_DTYPE_F32, DS4TP_OP_SUM);
            if (rc != 0) {
              why = ds4tp_group_errmsg(g);
              return rc;
            }
          }
        },
        {}, 20000);
    double secs = double(mono_ns() - t0) / 1e9;
    // Released by the death, not by the op deadline (5 s): shm ranks watch
    // the rendezvous sockets too, which close even while the killed rank
    // is an unreaped zombie (the portable-POSIX build has no /proc).
    for (int r = 0; r < 3; r++) {
      INFO("rank " << r << ": " << run.msgs[size_t(r)]);
      CHECK((run.rcs[size_t(r)] == DS4TP_EPEERCLOSED || run.rcs[size_t(r)] == DS4TP_EFAILED));
    }
    CHECK(secs < 4.0);
  }
}

// Two-shot (reduce-scatter + all-gather) runs from 64 KiB on shm and tcp
// (group.hpp kTwoShot*Bytes); these counts sit on either side of the
// threshold for 4- and 2-byte elements (and of 4x it), some not divisible
// by N, and the 64 KiB chunks of local_options split the larger ones
// into several steps.
const std::vector<uint64_t> kAroundTwoShot = {16383, 16384, 16385, 32767, 32768, 32769,
                                              65535, 65536, 65537, 131071, 131072, 131073};

TEST_CASE("group: two-shot sizes around each threshold, threads N=2,3,4", "[group]") {
  for (int n : {2, 3, 4}) {
    INFO("n=" << n);
    std::vector<ds4tp_group *> gs(static_cast<size_t>(n));
    ds4tp_group_options o = local_options();
    REQUIRE(ds4tp_group_new_local(gs.data(), n, &o, nullptr) == 0);
    GroupRun run = run_group_threads(gs, kAroundTwoShot);
    for (int r = 0; r < n; r++) {
      INFO("rank " << r << ": " << run.msgs[size_t(r)]);
      CHECK(run.rcs[size_t(r)] == 0);
      CHECK(run.digests[size_t(r)] == run.digests[0]);
    }
    for (auto *g : gs) ds4tp_group_free(g);
  }
}

TEST_CASE("group: two-shot sizes around each threshold, processes N=2,3,4", "[group]") {
  for (int transport : {DS4TP_TRANSPORT_SHM, DS4TP_TRANSPORT_TCP})
    for (int n : {2, 3, 4}) {
      INFO("transport " << ds4tp_transport_name(transport) << " n=" << n);
      GroupRun run = run_group_procs(n, transport,
                                     [](ds4tp_group *g, int, uint64_t &d, std::string &why) {
                                       return group_checks(g, kAroundTwoShot, why, d);
                                     });
      INFO(run.why);
      REQUIRE(run.rc == 0);
      for (int r = 1; r < n; r++) CHECK(run.digests[size_t(r)] == run.digests[0]);
    }
}

// Busy is not silent: a rank that computes for 2.5 s between calls (past
// the 1 s peer_silence_ms and the 1 s op_timeout_ms) is alive (tcp: it
// beats from its heartbeat thread; shm: its process runs), so the others
// wait for it up to peer_arrival_timeout_ms and nobody fails.
TEST_CASE("group: a live rank late by more than op_timeout_ms is waited for", "[group][fault]") {
  for (int transport : {DS4TP_TRANSPORT_TCP, DS4TP_TRANSPORT_SHM}) {
  // Over shm the wait tells a busy rank from a stopped one only where the
  // platform shows stopped processes; portable POSIX keeps op_timeout_ms
  // (docs/GROUPS.md, "Failure and liveness").
  if (transport == DS4TP_TRANSPORT_SHM && !os::sees_stopped_processes()) continue;
  INFO("transport " << ds4tp_transport_name(transport));
  GroupRun run = run_group_procs(
      3, transport,
      [](ds4tp_group *g, int rank, uint64_t &d, std::string &why) {
        std::vector<float> v(1024, float(rank + 1));
        for (int i = 0; i < 3; i++) {
          if (rank == 1 && i == 1) usleep(2'500'000);
          if (int rc = ds4tp_group_all_reduce(g, v.data(), v.size(), DS4TP_DTYPE_F32, DS4TP_OP_SUM)) {
            why = ds4tp_group_errmsg(g);
            return rc;
          }
        }
        d = uint64_t(v[0]);  // 6, then 18, then 54
        if (ds4tp_group_failed(g)) {
          why = "failed after the calls: " + std::string(ds4tp_group_errmsg(g));
          return int(DS4TP_EFAILED);
        }
        return 0;
      },
      [](int, ds4tp_group_options &o, ds4tp_identity &) { o.op_timeout_ms = 1000; }, 20000);
  INFO(run.why);
  REQUIRE(run.rc == 0);
  for (int r = 0; r < 3; r++) CHECK(run.digests[size_t(r)] == 54);
  }
}

// ... but not for ever: a tcp rank that beats yet does not enter the call
// within peer_arrival_timeout_ms (1 s here) fails the others' step with
// ETIMEDOUT naming it, after about that long (the step's clock starts
// when it first waits). The late rank finds rank 0's vector already sent:
// its call may still complete, and then with the right sum, or fail; it
// must not hang.
TEST_CASE("group: a tcp step waits peer_arrival_timeout_ms for a live rank, then names it",
          "[group][fault]") {
  GroupRun run = run_group_procs(
      2, DS4TP_TRANSPORT_TCP,
      [](ds4tp_group *g, int rank, uint64_t &ms, std::string &why) {
        std::vector<float> v(4096, 1.0f);
        if (rank == 1) usleep(3'000'000);
        const uint64_t t0 = mono_ns();
        int rc = ds4tp_group_all_reduce(g, v.data(), v.size(), DS4TP_DTYPE_F32, DS4TP_OP_SUM);
        ms = rank == 0 ? (mono_ns() - t0) / 1'000'000 : uint64_t(v[0] == 2.0f && v[4095] == 2.0f);
        why = rc ? ds4tp_group_errmsg(g) : "";
        return rc;
      },
      [](int, ds4tp_group_options &o, ds4tp_identity &) {
        o.op_timeout_ms = 500;
        o.peer_arrival_timeout_ms = 1000;
      },
      20000);
  INFO("rank 0: " << run.msgs[0] << " after " << run.digests[0] << " ms");
  CHECK(run.rcs[0] == DS4TP_ETIMEDOUT);
  CHECK(run.msgs[0].find("rank 1 did not reach it within 1000 ms") != std::string::npos);
  CHECK(run.digests[0] >= 900);
  CHECK(run.digests[0] < 2500);
  INFO("rank 1: status " << run.rcs[1] << " " << run.msgs[1]);
  CHECK(run.rcs[1] != -999);  // -999: rank 1 reported nothing (hung)
  CHECK((run.rcs[1] != 0 || run.digests[1] == 1));
}

// A stopped rank is alive. shm ranks read the awaited rank's run state and
// fail after it has been stopped for 1 s (Linux, macOS; where the platform
// cannot tell, portable POSIX, op_timeout_ms releases them: 5 s here). tcp
// ranks hear each other's heartbeat: a rank not heard for peer_silence_ms
// (1 s) fails the group on every rank, named by all of them, long before
// the 30 s op_timeout_ms. Rank 0 is the one that judges and tells the
// others, so it is stopped too.
TEST_CASE("group: a SIGSTOPped rank releases the others", "[group][fault]") {
  const bool posix = std::strcmp(ds4tp::os::platform_name(), "linux-posix") == 0 ||
                     std::strcmp(ds4tp::os::platform_name(), "posix") == 0;
  struct Case {
    int transport, stopped;
  };
  for (Case c : {Case{DS4TP_TRANSPORT_SHM, 3}, Case{DS4TP_TRANSPORT_TCP, 3},
                 Case{DS4TP_TRANSPORT_TCP, 0}}) {
    INFO("transport " << ds4tp_transport_name(c.transport) << ", rank " << c.stopped
                      << " stopped");
    const bool shm = c.transport == DS4TP_TRANSPORT_SHM;
    const uint64_t bound_ms = shm && posix ? 6500 : 2500;
    const int stopped = c.stopped;
    GroupRun run = run_group_procs(
        4, c.transport,
        [stopped](ds4tp_group *g, int rank, uint64_t &ms, std::string &why) {
          std::vector<float> v(2560, 1.0f);
          for (int i = 0;; i++) {
            if (rank == stopped && i == 200) {
              const pid_t me = getpid();
              if (fork() == 0) {  // ends the stopped rank later, so it can be reaped at once
                usleep(7'000'000);
                kill(me, SIGKILL);
                _exit(0);
              }
              raise(SIGSTOP);
            }
            uint64_t t0 = mono_ns();
            int rc = ds4tp_group_all_reduce(g, v.data(), v.size(), DS4TP_DTYPE_F32, DS4TP_OP_SUM);
            if (rc != 0) {
              ms = (mono_ns() - t0) / 1'000'000;  // how long the failing call waited
              why = ds4tp_group_errmsg(g);
              return rc;
            }
          }
        },
        [shm](int, ds4tp_group_options &o, ds4tp_identity &) {
          o.op_timeout_ms = shm ? 5000 : 30000;
        },
        9000);
    const std::string culprit = "rank " + std::to_string(stopped);
    bool named = false;
    for (int r = 0; r < 4; r++) {
      if (r == stopped) continue;
      INFO("rank " << r << ": " << run.msgs[size_t(r)] << " after " << run.digests[size_t(r)]
                   << " ms");
      CHECK(run.digests[size_t(r)] < bound_ms);
      if (shm) {
        CHECK((run.rcs[size_t(r)] == DS4TP_ETIMEDOUT || run.rcs[size_t(r)] == DS4TP_EFAILED ||
               run.rcs[size_t(r)] == DS4TP_EPEERCLOSED));
        named = named || run.msgs[size_t(r)].find(culprit) != std::string::npos;
      } else {  // every rank gets the heartbeat's verdict
        CHECK(run.rcs[size_t(r)] == DS4TP_ETIMEDOUT);
        CHECK(run.msgs[size_t(r)].find(culprit + " has not been heard") != std::string::npos);
        named = true;
      }
    }
    CHECK(named);
  }
}
