// Baseline for `ds4tp group`: Gloo's allreduce (sum, f32) over its TCP
// transport, ranks meeting through a FileStore; prints p50/p99 like
// mpi_ops.c. Bench-only (Debian 12: libgloo-dev), never built with
// the library:
//   g++ -O2 -std=c++17 -o /tmp/gloo_allreduce bench/group/gloo_allreduce.cpp -lgloo -lpthread
//   for r in 0 1 2 3; do /tmp/gloo_allreduce $r 4 /tmp/gloo-store 4096 2000 & done; wait
// The store directory must be empty (or fresh) for each run.
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

int main(int argc, char **argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s RANK SIZE STORE_DIR [COUNT] [ITERS]\n", argv[0]);
    return 2;
  }
  const int rank = std::atoi(argv[1]), size = std::atoi(argv[2]);
  const size_t count = argc > 4 ? size_t(std::atol(argv[4])) : 4096;
  const int iters = argc > 5 ? std::atoi(argv[5]) : 2000;
  gloo::transport::tcp::attr attr("127.0.0.1");
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(argv[3]);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
  ctx->connectFullMesh(store, dev);
  std::vector<float> buf(count);
  for (size_t i = 0; i < count; i++) buf[i] = float(rank + int(i % 7));
  std::vector<double> us;
  us.reserve(size_t(iters));
  for (int it = -20; it < iters; it++) {
    gloo::AllreduceOptions opts(ctx);
    opts.setOutput(buf.data(), count);  // in place: output only
    opts.setReduceFunction(static_cast<void (*)(void *, const void *, const void *, size_t)>(
        &gloo::sum<float>));
    opts.setTag(uint32_t(it + 20));
    auto t0 = std::chrono::steady_clock::now();
    gloo::allreduce(opts);
    auto t1 = std::chrono::steady_clock::now();
    if (it >= 0) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  std::sort(us.begin(), us.end());
  if (rank == 0)
    std::printf("gloo tcp: %d ranks, %zu bytes: p50 %.1f us p99 %.1f us (%d calls)\n", size,
                count * 4, us[us.size() / 2], us[us.size() * 99 / 100], iters);
  return 0;
}
