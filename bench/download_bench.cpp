// bench/download_bench.cpp: where a GPU run's device-to-host download spends
// its time, on an idle host and beside a CPU load that streams memory as the
// oracle half does. One device buffer of --mib MiB is downloaded --reps times
// into host memory by each path:
//   pinned            cudaMemcpyAsync into cudaHostAlloc memory (the link's
//                     ceiling: no page work at all);
//   register-reused   harness/src/runner.cu download_rows_direct's path for a
//                     vector kept by the host pool (host_pool.h): its pages
//                     are mapped already; cudaHostRegister, the DMA copy,
//                     cudaHostUnregister, every repetition;
//   register-fresh    the same into a new allocation each repetition (huge
//                     pages advised first, as take_host_u16 does): the pages
//                     are faulted in by the registration;
//   kept-registered   a buffer registered once, outside the timing: the
//                     copy alone (what keeping the pool's vectors
//                     registered across cases would leave).
// Each row gives the median of the repetitions' register, copy and
// unregister milliseconds, the total and GB/s of the total. With
// --load-threads N > 0, N threads run a triad (a[i] = b[i] + s * c[i] over
// three arrays of --load-mib MiB in all) for the whole row, and the row says
// the GB/s they moved meanwhile. A benchmark, not a test: it asserts no speed.
// docs/perf/oracle-and-gate-throughput.md, Open leads ("The GPU half after
// the oracle half").
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "host_pool.h"

using normgate::bench_util::check;
using normgate::bench_util::median;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}


constexpr size_t kHuge = size_t{2} << 20;

// 2 MiB-aligned memory, huge pages advised (host_pool.h); pages untouched.
struct HostBlock {
  void* p = nullptr;
  size_t bytes = 0;
  explicit HostBlock(size_t n) : bytes((n + kHuge - 1) / kHuge * kHuge) {
    p = std::aligned_alloc(kHuge, bytes);
    if (p == nullptr) throw std::bad_alloc();
    normgate::kernels::detail::advise_huge_pages(p, bytes);  // as take_host_u16 does, before any page is touched
  }
  ~HostBlock() { std::free(p); }
  HostBlock(const HostBlock&) = delete;
  HostBlock& operator=(const HostBlock&) = delete;
};

// N threads streaming a triad until stopped; bytes moved are counted.
class Load {
 public:
  Load(int threads, size_t mib) {
    if (threads <= 0) return;
    const size_t n = (mib << 20) / (3 * sizeof(double)) / static_cast<size_t>(threads);
    for (int t = 0; t < threads; ++t)
      workers_.emplace_back([this, n] {
        std::vector<double> a(n, 0.0), b(n, 1.0), c(n, 2.0);
        uint64_t moved = 0;
        while (!stop_.load(std::memory_order_relaxed)) {
          for (size_t i = 0; i < n; ++i) a[i] = b[i] + 0.5 * c[i];
          moved += 3 * n * sizeof(double);
          std::swap(a, b);
        }
        bytes_.fetch_add(moved);
      });
    t0_ = now_s();
  }
  // Stops the threads; GB/s they moved (0 without threads).
  double stop() {
    if (workers_.empty()) return 0;
    stop_ = true;
    for (auto& w : workers_) w.join();
    workers_.clear();
    return static_cast<double>(bytes_.load()) / (now_s() - t0_) / 1e9;
  }
  ~Load() { (void)stop(); }

 private:
  std::vector<std::thread> workers_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> bytes_{0};
  double t0_ = 0;
};

struct Row {
  std::vector<double> reg, copy, unreg, total;
};

}  // namespace

int main(int argc, char** argv) try {
  CLI::App app{"download_bench: device-to-host download paths, idle and beside a CPU memory load"};
  int64_t mib = 1536;
  int reps = 5;
  std::vector<int> load_threads{0, 14};
  int64_t load_mib = 3072;
  std::vector<std::string> paths{"pinned", "register-reused", "register-fresh", "kept-registered"};
  app.add_option("--mib", mib, "bytes per download, MiB (a [131072, 6144] BF16 tensor: 1536)")
      ->check(CLI::Range(int64_t{4}, int64_t{65536}));
  app.add_option("--reps", reps, "downloads per path and load")->check(CLI::Range(1, 1000));
  app.add_option("--load-threads", load_threads, "CPU load threads per row set (0: idle host)")
      ->check(CLI::Range(0, 1024));
  app.add_option("--load-mib", load_mib, "the load's three arrays together, MiB")
      ->check(CLI::Range(int64_t{48}, int64_t{1} << 20));
  app.add_option("--paths", paths, "paths to time (default all)")
      ->check(CLI::IsMember({"pinned", "register-reused", "register-fresh", "kept-registered"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::fprintf(stderr, "download_bench: %s\n", e.what());
    return 2;  // a usage error, before any work
  }

  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::fprintf(stderr, "download_bench: no CUDA device\n");
    return 1;
  }
  const size_t bytes = static_cast<size_t>(mib) << 20;
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  void* dsrc = nullptr;
  check(cudaMalloc(&dsrc, bytes), "cudaMalloc");
  std::unique_ptr<void, void (*)(void*)> dfree(dsrc, [](void* p) { (void)cudaFree(p); });
  check(cudaMemset(dsrc, 0x5a, bytes), "cudaMemset");
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");

  std::printf("device: %s; %lld MiB per download, %d reps; medians in ms\n", prop.name, static_cast<long long>(mib),
              reps);
  std::printf("%-16s %5s %9s %9s %9s %9s %7s %9s\n", "path", "load", "register", "copy", "unreg", "total", "GB/s",
              "load_GB/s");
  auto timed_copy = [&](void* dst) {
    const double t = now_s();
    check(cudaMemcpyAsync(dst, dsrc, bytes, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync");
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    return now_s() - t;
  };
  auto verify = [&](const void* dst) {  // the bytes arrived (0x5a everywhere sampled)
    const auto* b = static_cast<const unsigned char*>(dst);
    for (size_t i = 0; i < bytes; i += 4093)
      if (b[i] != 0x5a) throw std::runtime_error("download_bench: byte " + std::to_string(i) + " did not arrive");
  };
  for (const int lt : load_threads) {
    for (const std::string& path : paths) {
      Row r;
      std::unique_ptr<HostBlock> kept;
      void* pinned = nullptr;
      if (path == "pinned") check(cudaHostAlloc(&pinned, bytes, cudaHostAllocDefault), "cudaHostAlloc");
      std::unique_ptr<void, void (*)(void*)> pfree(pinned, [](void* p) {
        if (p) (void)cudaFreeHost(p);
      });
      if (path == "register-reused" || path == "kept-registered") {
        kept = std::make_unique<HostBlock>(bytes);
        std::memset(kept->p, 0, kept->bytes);  // mapped, as a pooled vector is
      }
      if (path == "kept-registered") check(cudaHostRegister(kept->p, kept->bytes, cudaHostRegisterPortable), "cudaHostRegister");
      Load load(lt, static_cast<size_t>(load_mib));
      for (int k = 0; k < reps; ++k) {
        if (path == "pinned" || path == "kept-registered") {
          void* dst = path == "pinned" ? pinned : kept->p;
          std::memset(dst, 0, 64);
          const double c = timed_copy(dst);
          verify(dst);
          r.reg.push_back(0), r.copy.push_back(c), r.unreg.push_back(0), r.total.push_back(c);
          continue;
        }
        std::unique_ptr<HostBlock> fresh;
        HostBlock* hb = kept.get();
        if (path == "register-fresh") hb = (fresh = std::make_unique<HostBlock>(bytes)).get();
        const double t0 = now_s();
        check(cudaHostRegister(hb->p, hb->bytes, cudaHostRegisterPortable), "cudaHostRegister");
        const double t1 = now_s();
        const double c = timed_copy(hb->p);
        const double t2 = now_s();
        check(cudaHostUnregister(hb->p), "cudaHostUnregister");
        const double t3 = now_s();
        verify(hb->p);
        std::memset(hb->p, 0, 64);
        r.reg.push_back(t1 - t0), r.copy.push_back(c), r.unreg.push_back(t3 - t2), r.total.push_back(t3 - t0);
      }
      const double lgb = load.stop();
      if (path == "kept-registered") check(cudaHostUnregister(kept->p), "cudaHostUnregister");
      const double tot = median(r.total);
      std::printf("%-16s %5d %9.2f %9.2f %9.2f %9.2f %7.1f %9.1f\n", path.c_str(), lt, 1e3 * median(r.reg),
                  1e3 * median(r.copy), 1e3 * median(r.unreg), 1e3 * tot, tot > 0 ? static_cast<double>(bytes) / tot / 1e9 : 0.0,
                  lgb);
    }
  }
  check(cudaStreamDestroy(s), "cudaStreamDestroy");
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "download_bench: %s\n", e.what());
  return 1;
}
