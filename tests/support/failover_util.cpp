#include "support/failover_util.hpp"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

namespace ds4tp::test {
namespace {

std::mutex g_mu;
std::vector<std::string> g_log;

}  // namespace

void capture(void *, int, const char *msg) {
  std::lock_guard<std::mutex> l(g_mu);
  g_log.emplace_back(msg);
}
std::string logged(const char *what) {
  std::lock_guard<std::mutex> l(g_mu);
  for (auto &s : g_log)
    if (s.find(what) != std::string::npos) return s;
  return "";
}

RankSetup failover_setup(int transport) {
  RankSetup s;
  s.transport = transport;
  s.leader_id = s.worker_id = small_identity(4, 4096);
  s.log_level = DS4TP_LOG_INFO;
  s.gate_timeout_ms = 1000;
  auto tweak = [](ds4tp_options &o) {
    o.log_fn = capture;
    o.log_user_data = nullptr;
  };
  s.leader_tweak = s.worker_tweak = tweak;
  std::lock_guard<std::mutex> l(g_mu);
  g_log.clear();
  return s;
}

int rows(ds4tp_pair *tp, int n, Seqs &q) {
  const int rank = ds4tp_rank(tp);
  auto *slab = static_cast<uint8_t *>(ds4tp_slab_base(tp));
  const ds4tp_slab_layout l = layout_of(tp);
  const uint64_t floats = l.vec_bytes / 4;
  for (int k = 0; k < n; k++) {
    const uint64_t seq = ++q.row;
    const uint32_t g = uint32_t((seq - 1) % l.slots);
    auto *out = reinterpret_cast<float *>(slab + ds4tp_slab_out_offset(tp, g / 2, g % 2));
    auto *in = reinterpret_cast<float *>(slab + ds4tp_slab_in_offset(tp, g / 2, g % 2));
    for (uint64_t i = 0; i < floats; i++) out[i] = pattern(rank, seq, i);
    CHILD_EXPECT_OK(ds4tp_gate_exchange(tp, g / 2, g % 2, seq), tp, "row seq %llu",
                    (unsigned long long)seq);
    for (uint64_t i = 0; i < floats; i++) {
      const float want = pattern(1 - rank, seq, i);
      CHILD_EXPECT(std::memcmp(&in[i], &want, 4) == 0, tp, "row seq %llu float %llu",
                   (unsigned long long)seq, (unsigned long long)i);
    }
  }
  return 0;
}

int batches(ds4tp_pair *tp, int n, Seqs &q) {
  const int rank = ds4tp_rank(tp);
  auto *slab = static_cast<uint8_t *>(ds4tp_slab_base(tp));
  const ds4tp_slab_layout l = layout_of(tp);
  for (int k = 0; k < n; k++) {
    const uint64_t seq = ++q.batch;
    const uint32_t index = uint32_t(k) % l.batch_gates, nrows = uint32_t(k % 8) + 1;
    auto *out = reinterpret_cast<float *>(slab + ds4tp_slab_batch_out_offset(tp, index));
    auto *in = reinterpret_cast<float *>(slab + ds4tp_slab_batch_in_offset(tp, index));
    const uint64_t words = (uint64_t(nrows - 1) * l.vec_stride + l.vec_bytes) / 4;
    for (uint64_t i = 0; i < words; i++) out[i] = pattern(rank, 1000000 + seq, i);
    CHILD_EXPECT_OK(ds4tp_batch_gate_exchange(tp, index, nrows, seq), tp, "batch seq %llu",
                    (unsigned long long)seq);
    for (uint64_t i = 0; i < words; i++) {
      const float want = pattern(1 - rank, 1000000 + seq, i);
      CHILD_EXPECT(std::memcmp(&in[i], &want, 4) == 0, tp, "batch seq %llu word %llu",
                   (unsigned long long)seq, (unsigned long long)i);
    }
  }
  return 0;
}

int bigs(ds4tp_pair *tp, int n, Seqs &q) {
  const int rank = ds4tp_rank(tp);
  std::vector<uint32_t> out(kBigBytes / 4), in(kBigBytes / 4);
  for (int k = 0; k < n; k++) {
    const uint64_t seq = ++q.big;
    for (size_t i = 0; i < out.size(); i++) out[i] = uint32_t(i * 2654435761u + seq) ^ uint32_t(rank);
    std::fill(in.begin(), in.end(), 0u);
    CHILD_EXPECT_OK(ds4tp_big_gate_exchange(tp, 3, seq, out.data(), in.data(), kBigBytes), tp,
                    "big seq %llu", (unsigned long long)seq);
    for (size_t i = 0; i < in.size(); i++)
      CHILD_EXPECT(in[i] == (uint32_t(i * 2654435761u + seq) ^ uint32_t(1 - rank)), tp,
                   "big seq %llu word %zu", (unsigned long long)seq, i);
  }
  return 0;
}

int rows_until_failure(ds4tp_pair *tp, int n, Seqs &q) {
  const int rank = ds4tp_rank(tp);
  auto *slab = static_cast<uint8_t *>(ds4tp_slab_base(tp));
  const ds4tp_slab_layout l = layout_of(tp);
  for (int k = 0; k < n; k++) {
    const uint64_t seq = ++q.row;
    const uint32_t g = uint32_t((seq - 1) % l.slots);
    auto *out = reinterpret_cast<float *>(slab + ds4tp_slab_out_offset(tp, g / 2, g % 2));
    for (uint64_t i = 0; i < l.vec_bytes / 4; i++) out[i] = pattern(rank, seq, i);
    if (int rc = ds4tp_gate_exchange(tp, g / 2, g % 2, seq)) return rc;
  }
  return DS4TP_OK;
}

int traffic(ds4tp_pair *tp, Seqs &q) {
  if (int rc = rows(tp, kRows, q)) return rc;
  if (int rc = batches(tp, kBatches, q)) return rc;
  if (int rc = bigs(tp, kBigs, q)) return rc;
  return rows(tp, kTailRows, q);
}

uint64_t failovers(ds4tp_pair *tp) {
  ds4tp_stats st{};
  st.size = sizeof st;
  return ds4tp_stats_read(tp, &st) == DS4TP_OK ? st.failovers : ~0ull;
}

Body survives(int transport, const char *said, bool rails) {
  return [=](ds4tp_pair *tp, Ctx &) -> int {
    CHILD_EXPECT_OK(connect_attach(tp), tp);
    CHILD_EXPECT(ds4tp_transport_active(tp) == transport, tp);
    CHILD_EXPECT(!logged("failover on: a standby tcp link is open").empty(), tp);
    const int n = rails ? 3 : 2;
    ds4tp_link_info li[4];
    CHILD_EXPECT(ds4tp_links(tp, li, 4, sizeof li[0]) == n, tp);
    CHILD_EXPECT(li[0].transport == transport && li[0].role == DS4TP_LINK_DATA &&
                     li[0].state == 1 && li[0].row == !rails,
                 tp);
    CHILD_EXPECT(!rails || (li[1].role == DS4TP_LINK_RAIL && li[1].state == 1 && li[1].row == 1),
                 tp);
    CHILD_EXPECT(li[n - 1].transport == DS4TP_TRANSPORT_TCP &&
                     li[n - 1].role == DS4TP_LINK_STANDBY && li[n - 1].state == 0 &&
                     li[n - 1].row == 0,
                 tp);
    Seqs q;
    if (int rc = traffic(tp, q)) return rc;
    CHILD_EXPECT(ds4tp_transport_active(tp) == DS4TP_TRANSPORT_TCP, tp);
    CHILD_EXPECT(failovers(tp) == 1, tp, "failovers %llu", (unsigned long long)failovers(tp));
    CHILD_EXPECT(ds4tp_links(tp, li, 4, sizeof li[0]) == n && li[0].state == -1 &&
                     li[n - 2].state == -1 && li[n - 1].state == 1 && li[n - 1].row == 1,
                 tp);
    const std::string line = logged("resuming over the standby tcp link");
    CHILD_EXPECT(!line.empty() && line.find(said) != std::string::npos, tp, "log: %s",
                 line.c_str());
    return final_barrier(tp);
  };
}

Body with_fault(const char *fault, int who, Body body) {
  return [=](ds4tp_pair *tp, Ctx &c) -> int {
    ScopedEnv f("DS4TP_VERBS_PROVIDER_FAULT", who < 0 || c.rank == who ? fault : nullptr);
    return body(tp, c);
  };
}

}  // namespace ds4tp::test
