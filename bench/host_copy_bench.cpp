// host_copy_bench: what the host side of a GPU run's download costs, without
// a GPU. A 64 MiB buffer stands for one pinned staging buffer
// (kernels/src/host_download.h: kStageBytes); `gib` GiB are copied out of it
// chunk by chunk, as download_rows_into does, into
//   fresh-append  a new vector per repetition, reserve + insert per chunk
//                 (the path of every download before ReuseHostBuffers);
//   fresh-resize  a new vector, resize() (zeroes it) + memcpy per chunk (the
//                 path before wip/gpu-half, for reference);
//   reused-1      one vector kept across repetitions (ReuseHostBuffers'
//                 pool), overwritten chunk by chunk (copy_bytes, 1 thread);
//   reused-N      the same with N threads (detail::copy_bytes, as shipped).
// Prints the median and best wall time of `reps` repetitions, GB/s and
// minor page faults per repetition. Then the pattern of the gate command of
// docs/perf/oracle-and-gate-throughput.md#current-numbers ("The gate's two
// halves"; D7) (6 cases of four tensors, x, dy, y, dx, the first two half the
// size; the previous case held meanwhile): fresh vectors, and the pool of
// ReuseHostBuffers (harness/src/host_pool.cpp, as shipped) with 1..N copy
// threads. Usage:
//   host_copy_bench [gib=1] [reps=5] [threads=omp_get_num_procs()] [kept-heap=0]
// kept-heap=1 applies apps/main.cpp's mallopt settings (large blocks from
// one heap, freed memory kept) before measuring.
#include <malloc.h>
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "host_pool.h"
#include "normgate/harness/runner.h"
#include "cli_args.h"

namespace {

using normgate::kernels::detail::copy_bytes;

long minor_faults() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return r.ru_minflt;
}

struct Result {
  double median = 0, best = 0;
  long faults = 0;  // per repetition
};

Result measure(int reps, const std::function<void()>& body) {
  std::vector<double> t;
  long faults = 0;
  for (int r = 0; r < reps; ++r) {
    const long f0 = minor_faults();
    const auto t0 = std::chrono::steady_clock::now();
    body();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    faults += minor_faults() - f0;
  }
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t.front(), faults / reps};
}

namespace cli = normgate::bench_cli;

constexpr const char* kUsage =
    "usage: host_copy_bench [gib=1] [reps=5] [threads=omp_get_num_procs()] [kept-heap=0]\n"
    "  gib in 0.125..65536 (at least two 64 MiB chunks); reps >= 1; threads >= 1;\n"
    "  kept-heap 0 or 1 (1: apps/main.cpp's mallopt settings before measuring)\n";

int bench(const cli::Args& a) {
  const double gib = a.has(1) ? cli::parse_number("gib", a.at(1), 0.125, 65536) : 1.0;
  const int reps = cli::int_arg(a, 2, "reps", 5, 1);
  const int threads = cli::int_arg(a, 3, "threads", omp_get_num_procs(), 1);
  const bool kept_heap = cli::int_arg(a, 4, "kept-heap", 0, 0, 1) == 1;
  if (kept_heap) {
    mallopt(M_MMAP_THRESHOLD, INT_MAX);
    mallopt(M_TRIM_THRESHOLD, INT_MAX);
    mallopt(M_ARENA_MAX, 1);
  }
  constexpr size_t kStage = size_t{64} << 20;
  const size_t bytes = static_cast<size_t>(gib * double(size_t{1} << 30)) / kStage * kStage;
  const size_t n = bytes / 2;
  std::vector<uint16_t> stage(kStage / 2);
  for (size_t i = 0; i < stage.size(); ++i) stage[i] = static_cast<uint16_t>(i * 40503u);
  const size_t chunk_elems = kStage / 2, chunks = n / chunk_elems;

  auto fresh_append = [&] {
    std::vector<uint16_t> v;
    v.reserve(n);
    for (size_t c = 0; c < chunks; ++c) v.insert(v.end(), stage.begin(), stage.end());
    if (v[n - 1] != stage.back()) std::abort();
  };
  auto fresh_resize = [&] {
    std::vector<uint16_t> v(n);
    for (size_t c = 0; c < chunks; ++c) std::memcpy(v.data() + c * chunk_elems, stage.data(), kStage);
    if (v[n - 1] != stage.back()) std::abort();
  };
  std::vector<uint16_t> kept(n);  // mapped once, as a pooled vector is after its first case
  auto reused = [&](int nt) {
    return [&kept, &stage, nt, chunks, chunk_elems] {
      kept.resize(chunks * chunk_elems);  // no-op: already that size
      for (size_t c = 0; c < chunks; ++c) copy_bytes(kept.data() + c * chunk_elems, stage.data(), kStage, nt);
      if (kept.back() != stage.back()) std::abort();
    };
  };

  std::printf("host_copy_bench: %.2f GiB in %zu chunks of 64 MiB, %d reps, %d cores, heap %s\n",
              double(bytes) / double(size_t{1} << 30), chunks, reps, omp_get_num_procs(),
              kept_heap ? "kept (apps/main.cpp mallopt)" : "glibc defaults");
  std::printf("%-14s %10s %10s %9s %14s\n", "mode", "median s", "best s", "GB/s", "faults/rep");
  auto row = [&](const char* name, const Result& r) {
    std::printf("%-14s %10.4f %10.4f %9.2f %14ld\n", name, r.median, r.best, double(bytes) / r.median / 1e9, r.faults);
  };
  row("fresh-append", measure(reps, fresh_append));
  row("fresh-resize", measure(reps, fresh_resize));
  row("reused-1", measure(reps, reused(1)));
  for (int nt = 2; nt <= threads; nt *= 2) {
    const std::string name = "reused-" + std::to_string(nt);
    row(name.c_str(), measure(reps, reused(nt)));
  }
  kept = std::vector<uint16_t>();

  // The gate's pattern: per case four tensors (x, dy, y, dx of a plain
  // case), the sizes of that gate command at gib = 1 (T = 65537,
  // 65537, 131071, 131071, 131072, 131072 at H = 4096: half, half, then
  // full), downloaded while the previous case's four are still held (its
  // oracle half), which are then freed (fresh) or handed back to the pool
  // (ReuseHostBuffers), as download_rows_into does it.
  auto download = [&](std::vector<uint16_t>& dst, size_t elems, int nt) {
    const size_t nc = elems / chunk_elems;
    if (nt > 1 && !dst.empty() && dst.capacity() >= elems) {
      dst.resize(elems);
      for (size_t c = 0; c < nc; ++c) copy_bytes(dst.data() + c * chunk_elems, stage.data(), kStage, nt);
    } else {
      dst.clear();
      dst.reserve(elems);
      for (size_t c = 0; c < nc; ++c) dst.insert(dst.end(), stage.begin(), stage.end());
    }
    if (dst[elems - 1] != stage.back()) std::abort();
  };
  const size_t half = chunks / 2 * chunk_elems;
  const std::vector<size_t> sizes = {half, half, n, n, n, n};
  std::printf("\ngate pattern: 6 cases of 4 tensors, %.2f GiB each in cases 0-1, %.2f GiB in 2-5 (previous case held):\n",
              double(half) * 2 / double(size_t{1} << 30), double(n) * 2 / double(size_t{1} << 30));
  std::printf("%-10s %36s %8s %8s %12s\n", "mode", "case 0..5 s", "sum s", "GB/s", "faults 2..5");
  auto gate = [&](const char* name, bool pool, int nt) {
    std::optional<normgate::kernels::ReuseHostBuffers> scope;
    if (pool) scope.emplace();
    std::vector<std::vector<uint16_t>> prev;
    double sum = 0, gb = 0;
    long faults = 0;
    std::string line;
    for (size_t k = 0; k < sizes.size(); ++k) {
      const long f0 = minor_faults();
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<std::vector<uint16_t>> cur(4);
      for (auto& v : cur) {
        v = normgate::kernels::detail::take_host_u16(sizes[k]);  // empty outside the scope
        download(v, sizes[k], nt);
      }
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      sum += t;
      gb += 4.0 * double(sizes[k]) * 2 / 1e9;
      if (k >= 2) faults += minor_faults() - f0;
      for (auto& v : prev) normgate::kernels::detail::give_host_u16(v);  // freed outside the scope
      prev = std::move(cur);
      char buf[16];
      std::snprintf(buf, sizeof buf, "%.2f ", t);
      line += buf;
    }
    std::printf("%-10s %36s %8.2f %8.2f %12ld\n", name, line.c_str(), sum, gb / sum, faults);
  };
  gate("fresh", false, 1);
  gate("pool-1", true, 1);
  for (int nt = 2; nt <= threads; nt *= 2) gate(("pool-" + std::to_string(nt)).c_str(), true, nt);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return cli::run_main("host_copy_bench", kUsage, argc, argv, 4, bench); }
