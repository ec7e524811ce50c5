// dispatch_bench: what choosing a kernel costs a call (capi.h, "Which kernel
// runs"), next to what launching one costs.
//   cache       DispatchCache::pick over a route table (routing/dispatch_cache.h):
//               the lookup itself (4096 calls spread over the table's windows,
//               T uniform in each window, cycled);
//   ng_route_for  the same question through the C ABI (argument parsing, the
//               guard, the route info with the backward's workspace size);
//   launch      (CUDA builds with a device) ng_copy_vec16 of 16 bytes through
//               the C ABI: the host cost of enqueueing one kernel, averaged
//               over 20000 launches (asynchronous; synchronized once at the end).
// Prints ns per call (best of 5 rounds). Not a test: it asserts nothing.
// Usage: dispatch_bench [table=routes/sm90a.toml of the source tree] [calls=2000000]
// The table's own approvals and the dispatch policy allow-unapproved (so that
// every window is picked, whatever its approval state; the state is resolved
// when the cache is built, so the lookup costs the same).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "normgate/capi.h"
#include "normgate/routing/dispatch_cache.h"
#include "cli_args.h"

#ifdef NORMGATE_BENCH_CUDA
#include <cuda_runtime.h>
#endif

namespace nk = normgate::kernels;

namespace {

using Clock = std::chrono::steady_clock;

template <class F>
double best_ns_per_call(int64_t calls, F&& f) {
  double best = 1e300;
  for (int round = 0; round < 5; ++round) {
    const auto t0 = Clock::now();
    f(calls);
    const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
    best = std::min(best, ns / static_cast<double>(calls));
  }
  return best;
}

namespace cli = normgate::bench_cli;

constexpr const char* kUsage =
    "usage: dispatch_bench [table=routes/sm90a.toml of the source tree] [calls=2000000]\n"
    "  table: a route table file; calls >= 4 (per round of the cache; a quarter of that through ng_route_for)\n";

int bench(const cli::Args& a) {
  const std::string table = a.has(1) ? a.at(1) : std::string(NORMGATE_SOURCE_DIR) + "/routes/sm90a.toml";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(table, ec)) throw cli::UsageError("table: no such file '" + table + "'");
  const int64_t calls = cli::int_arg<int64_t>(a, 2, "calls", 2000000, 4);
  nk::DispatchCacheOptions opt;
  opt.notice = [](const std::string&) {};
  const nk::DispatchCache cache(nk::Dispatcher::from_files(table, {.allow_unapproved = true}), opt);
  std::printf("table %s: %zu windows in %zu (op, mode, H, w, form) groups\n", table.c_str(), cache.windows(),
              cache.groups());

  std::mt19937_64 rng(42);
  std::vector<nk::CallKey> keys;
  const auto& routes = cache.table().routes;
  for (int i = 0; i < 4096; ++i) {
    const nk::Route& r = routes[rng() % routes.size()];
    const int64_t T = r.t_lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(r.t_hi - r.t_lo + 1));
    keys.push_back({r.op, r.mode, r.H, r.w, r.form, T});
  }

  uintptr_t sink = 0;
  const double cache_ns = best_ns_per_call(calls, [&](int64_t n) {
    for (int64_t i = 0; i < n; ++i) sink += reinterpret_cast<uintptr_t>(cache.pick(keys[i & 4095], true).variant);
  });
  std::printf("cache        %8.1f ns per pick (DispatchCache::pick)\n", cache_ns);

  if (ng_routes_load(table.c_str()) != NG_OK) {
    std::printf("ng_route_for: cannot load %s: %s\n", table.c_str(), ng_last_error());
    return 1;
  }
  ng_route_info info{};
  const double abi_ns = best_ns_per_call(calls / 4, [&](int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      const nk::CallKey& k = keys[i & 4095];
      (void)ng_route_for(static_cast<int32_t>(k.op), static_cast<int32_t>(k.mode), k.H, k.T,
                         static_cast<int32_t>(k.w), static_cast<int32_t>(k.form), nullptr, &info);
      sink += static_cast<uintptr_t>(info.workspace_bytes);
    }
  });
  std::printf("ng_route_for %8.1f ns per call (C ABI; with the backward's workspace size)\n", abi_ns);

#ifdef NORMGATE_BENCH_CUDA
  int dev = 0;
  if (ng_device_available(&dev) == NG_OK && dev) {
    void *a = nullptr, *b = nullptr;
    cudaMalloc(&a, 16);
    cudaMalloc(&b, 16);
    (void)ng_copy_vec16(a, b, 16, nullptr);  // warm up
    cudaDeviceSynchronize();
    const double launch_ns = best_ns_per_call(20000, [&](int64_t n) {
      for (int64_t i = 0; i < n; ++i) (void)ng_copy_vec16(a, b, 16, nullptr);
      cudaDeviceSynchronize();
    });
    std::printf("launch       %8.1f ns per kernel launch (ng_copy_vec16 of 16 bytes, enqueue + 1/20000 of a sync)\n",
                launch_ns);
    std::printf("lookup / launch: %.4f (cache), %.4f (ng_route_for)\n", cache_ns / launch_ns, abi_ns / launch_ns);
    cudaFree(a);
    cudaFree(b);
  } else {
    std::printf("launch       (no CUDA device here: run on the H200 for the launch cost)\n");
  }
#else
  std::printf("launch       (built without CUDA: a kernel launch costs microseconds of host time; build with CUDA "
              "and run on the H200 to measure it here)\n");
#endif
  return sink == 1 ? 2 : 0;  // sink keeps the loops
}

}  // namespace

int main(int argc, char** argv) { return cli::run_main("dispatch_bench", kUsage, argc, argv, 2, bench); }
