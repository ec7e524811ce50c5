// bench/ceiling_bench.cpp: what the HBM gives a stream kernel on this GPU,
// by several copy mechanisms and by each direction alone (timing.h,
// ceiling_kinds), timed the project's way: CUDA-graph replay, L2 flushed
// (read) before every replay, rounds interleaved with the order rotated and
// reversed, medians. Prints one row per (kind, size): median us, GB/s moved
// (copies count read + write), fraction of the best copy of that size and of
// the HBM peak given by --peak-gbps. Not a test: it never asserts a speed.
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_util.h"
#include "normgate/bench/timing.h"

namespace nk = normgate::kernels;

using normgate::bench_util::check;
using normgate::bench_util::median;

int main(int argc, char** argv) {
  CLI::App app{"ceiling_bench: copy and one-direction stream bandwidth (the ceiling for memory-bound kernels)"};
  std::vector<int64_t> mib{256, 1024, 2048};
  int reps = 30, rounds = 3;
  double peak = 4800;
  std::vector<std::string> kinds = nk::ceiling_kinds();
  app.add_option("--mib", mib, "buffer sizes in MiB (each copy reads and writes this much)")
      ->check(CLI::Range(int64_t{1}, int64_t{16384}));
  app.add_option("--reps", reps, "graph replays per kind, size and round")->check(CLI::Range(1, 10000));
  app.add_option("--rounds", rounds, "interleaved rounds (order rotated, odd rounds reversed)")->check(CLI::Range(1, 100));
  app.add_option("--peak-gbps", peak, "HBM peak in GB/s for the last column (H200 HBM3e: 4800)")
      ->check(CLI::PositiveNumber);
  app.add_option("--kinds", kinds, "streams to time (default all)")->check(CLI::IsMember(nk::ceiling_kinds()));
  CLI11_PARSE(app, argc, argv);

  int dev = 0;
  cudaDeviceProp prop{};
  check(cudaGetDevice(&dev), "cudaGetDevice");
  check(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
  std::printf("device: %s, %d SMs, L2 %d MiB; %d rounds x %d replays, L2 flushed before each\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20, rounds, reps);
  std::printf("%-13s %8s %10s %9s %8s %8s\n", "kind", "MiB", "median_us", "GB/s", "of_copy", "of_peak");
  for (const int64_t m : mib) {
    const size_t bytes = static_cast<size_t>(m) << 20;
    void *src = nullptr, *dst = nullptr;
    check(cudaMalloc(&src, bytes), "cudaMalloc src");
    check(cudaMalloc(&dst, bytes), "cudaMalloc dst");
    check(cudaMemset(src, 0x3F, bytes), "cudaMemset src");
    check(cudaMemset(dst, 0xFF, bytes), "cudaMemset dst");
    // Correctness first: each copy must reproduce src exactly (a fast wrong
    // copy is no ceiling). Compare the first and last MiB and a middle one.
    std::vector<unsigned char> a(1 << 20), b(1 << 20);
    for (const auto& k : kinds) {
      if (!nk::ceiling_kind_is_copy(k)) continue;
      check(cudaMemset(dst, 0xFF, bytes), "cudaMemset dst");
      nk::run_ceiling_kind(k, dst, src, bytes);
      check(cudaDeviceSynchronize(), k.c_str());
      for (const size_t off : {size_t{0}, bytes / 2 / 16 * 16, bytes - (size_t{1} << 20)}) {
        const size_t len = std::min<size_t>(size_t{1} << 20, bytes - off);
        check(cudaMemcpy(a.data(), static_cast<char*>(src) + off, len, cudaMemcpyDeviceToHost), "download src");
        check(cudaMemcpy(b.data(), static_cast<char*>(dst) + off, len, cudaMemcpyDeviceToHost), "download dst");
        if (!std::equal(a.begin(), a.begin() + static_cast<long>(len), b.begin()))
          throw std::runtime_error(k + ": copy of " + std::to_string(m) + " MiB differs from its source at offset " +
                                   std::to_string(off));
      }
    }
    std::map<std::string, std::vector<double>> us;
    for (int r = 0; r < rounds; ++r) {
      std::vector<std::string> order = kinds;
      std::rotate(order.begin(), order.begin() + static_cast<long>((r * order.size() / rounds) % order.size()),
                  order.end());
      if (r % 2) std::reverse(order.begin(), order.end());
      for (const auto& k : order) {
        const auto st = nk::time_graph([&](nk::Stream s) { nk::run_ceiling_kind(k, dst, src, bytes, s); }, reps, 3);
        us[k].push_back(st.median_ms * 1e3);
      }
    }
    double best_copy = 0;
    std::map<std::string, double> gbps;
    for (const auto& k : kinds) {
      const double moved = (nk::ceiling_kind_is_copy(k) ? 2.0 : 1.0) * static_cast<double>(bytes);
      gbps[k] = moved / (median(us[k]) * 1e-6) / 1e9;
      if (nk::ceiling_kind_is_copy(k)) best_copy = std::max(best_copy, gbps[k]);
    }
    for (const auto& k : kinds)
      std::printf("%-13s %8lld %10.1f %9.0f %8.3f %8.3f\n", k.c_str(), static_cast<long long>(m), median(us[k]),
                  gbps[k], best_copy > 0 ? gbps[k] / best_copy : 0.0, gbps[k] / peak);
    check(cudaFree(src), "cudaFree");
    check(cudaFree(dst), "cudaFree");
  }
  return 0;
}
