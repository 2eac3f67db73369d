// ds4tp_bench_sum: the group all-reduce's rank-order sum (group/reduce.hpp)
// per kernel this CPU can run, f32 / f16 / bf16, 2 to 8 ranks, in place
// like the all-reduce (the output is rank 0's input). Prints p50 per call
// in us and each kernel's speed-up over the portable one, measured in the
// same run; checks that every kernel gives the portable kernel's bits.
//   ds4tp_bench_sum [elements ...]   (default 2560 4096 16384)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "group/reduce.hpp"

using namespace ds4tp::group;

namespace {

constexpr int kCalls = 2000;

struct Inputs {
  std::vector<std::vector<uint8_t>> rank;  // rank r's vector
  std::vector<uint8_t> out;
};

// Values of mixed signs and magnitudes, so rounding happens in every dtype.
Inputs make(Dtype t, int n, size_t count) {
  Inputs in;
  const size_t esz = dtype_bytes(t);
  in.rank.assign(size_t(n), std::vector<uint8_t>(count * esz));
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < count; i++) {
      const float v = float(int((i * 7 + size_t(r) * 13) % 201) - 100) / 37.0f;
      uint8_t *p = in.rank[size_t(r)].data() + i * esz;
      if (t == Dtype::F32) {
        std::memcpy(p, &v, 4);
      } else {
        const uint16_t h = t == Dtype::F16 ? float_to_half(v) : float_to_bf16(v);
        std::memcpy(p, &h, 2);
      }
    }
  return in;
}

// p50 in us of kCalls in-place sums; `out` gets one sum of fresh inputs.
double time_sum(Kernel k, Dtype t, int n, size_t count, std::vector<uint8_t> &out) {
  Inputs in = make(t, n, count);
  const void *src[16];
  for (int r = 0; r < n; r++) src[r] = in.rank[size_t(r)].data();
  const std::vector<uint8_t> first = in.rank[0];
  std::vector<double> us;
  us.reserve(kCalls);
  for (int c = 0; c < kCalls; c++) {
    std::memcpy(in.rank[0].data(), first.data(), first.size());  // fresh input, like a new layer
    const auto t0 = std::chrono::steady_clock::now();
    reduce_sum_with(k, t, src, n, in.rank[0].data(), count);
    const auto t1 = std::chrono::steady_clock::now();
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  out = in.rank[0];
  std::nth_element(us.begin(), us.begin() + kCalls / 2, us.end());
  return us[kCalls / 2];
}

}  // namespace

int main(int argc, char **argv) {
  std::vector<size_t> counts;
  for (int i = 1; i < argc; i++) counts.push_back(size_t(std::strtoull(argv[i], nullptr, 10)));
  if (counts.empty()) counts = {2560, 4096, 16384};
  const std::vector<Kernel> kernels = usable_kernels();
  std::printf("ds4tp_bench_sum: in-place rank-order sum, p50 of %d calls (us); active kernel: %s\n",
              kCalls, kernel_name(active_kernel()));
  std::printf("%-6s %5s %8s", "dtype", "ranks", "elements");
  for (Kernel k : kernels) std::printf(" %12s", kernel_name(k));
  if (kernels.size() > 1) std::printf(" %9s", "speed-up");
  std::printf("\n");
  int mismatches = 0;
  for (Dtype t : {Dtype::F32, Dtype::F16, Dtype::BF16})
    for (int n : {2, 4, 8})
      for (size_t count : counts) {
        std::printf("%-6s %5d %8zu", dtype_name(t), n, count);
        std::vector<uint8_t> ref, got;
        double base = 0, last = 0;
        for (Kernel k : kernels) {
          last = time_sum(k, t, n, count, k == Kernel::Portable ? ref : got);
          if (k == Kernel::Portable) base = last;
          else if (got != ref) mismatches++;
          std::printf(" %12.2f", last);
        }
        if (kernels.size() > 1) std::printf(" %8.1fx", base / last);
        std::printf("\n");
      }
  if (mismatches != 0) {
    std::fprintf(stderr, "ds4tp_bench_sum: %d cases where a kernel's bits differ from the portable one\n",
                 mismatches);
    return 1;
  }
  std::printf("every kernel gave the portable kernel's bits\n");
  return 0;
}
