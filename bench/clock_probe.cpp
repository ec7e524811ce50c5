// clock_probe: the core clock each of K busy threads gets, by load kind.
//
// Why: the oracle half's CPU ns per element grow 1.5-2.7x from 1 to 16
// threads on the H200 host (docs/perf/oracle-and-gate-throughput.md, "The
// host's cores" and Open leads), and "what 16 busy cores cost each" was never
// split into the all-core clock and the memory system. This measures the
// first alone: every thread runs a chain of dependent 64-bit integer adds (one
// cycle each on every x86-64 core), so chain length x iterations over the
// thread's CPU seconds (CLOCK_THREAD_CPUTIME_ID) is the clock it ran at
// while on a CPU; its CPU seconds over the wall seconds, the on-CPU
// fraction, say how much it shared its core (spinners beside it, more
// threads than cores), which the clock alone would hide. Beside the chain,
// each iteration issues independent vector FMAs of the chosen kind, which do
// not lengthen it but put the core in the frequency state of that code:
//   scalar   the chain alone
//   avx2     plus four 256-bit FMAs per 16 adds (the oracle's AVX2 clones)
//   avx512   plus four 512-bit FMAs per 16 adds (its AVX-512 clones, D13,
//            and the validators' eight-lane scan, D18)
// All K threads start together and each runs `seconds`; the table gives the
// median and the lowest per-thread GHz for each (K, kind), and the on-CPU
// fraction.
//
//   clock_probe [threads=1,N] [seconds=1] [kinds=scalar,avx2,avx512]
//
// x86-64 only (the chain is inline assembly); a kind the CPU lacks is listed
// as skipped. Arguments as every host benchmark (bench/cli_args.h): exit 2
// for a bad one, before any measurement.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "cli_args.h"

namespace {

enum class Kind { scalar, avx2, avx512 };

const char* name(Kind k) {
  switch (k) {
    case Kind::scalar: return "scalar";
    case Kind::avx2: return "avx2";
    case Kind::avx512: return "avx512";
  }
  return "?";
}

constexpr int kChain = 16;              // dependent adds per iteration
constexpr uint64_t kIters = 1u << 18;  // iterations between clock reads (~4M cycles)

#if defined(__x86_64__)
// Register-register adds: an add of an immediate can be folded at rename on
// recent cores (Golden Cove), which would count rename bandwidth, not cycles.
#define NG_ADD4 "add %[b], %[a]\n\tadd %[b], %[a]\n\tadd %[b], %[a]\n\tadd %[b], %[a]\n\t"
#define NG_ADD16 NG_ADD4 NG_ADD4 NG_ADD4 NG_ADD4

// The chain with four independent FMAs an iteration on registers R1..R6
// ("ymm" or "zmm"), zeroed first (a VEX vpxor of the xmm half clears the
// whole register): FMAs of zeros, no subnormals.
#define NG_FMA4(R)                                                                        \
  "vfmadd231pd %%" R "1, %%" R "2, %%" R "3\n\tvfmadd231pd %%" R "1, %%" R "2, %%" R "4\n\t" \
  "vfmadd231pd %%" R "1, %%" R "2, %%" R "5\n\tvfmadd231pd %%" R "1, %%" R "2, %%" R "6\n\t"
#define NG_FMA_LOOP(R)                                                                       \
  asm volatile("vpxor %%xmm1, %%xmm1, %%xmm1\n\tvpxor %%xmm2, %%xmm2, %%xmm2\n\t"             \
               "vpxor %%xmm3, %%xmm3, %%xmm3\n\tvpxor %%xmm4, %%xmm4, %%xmm4\n\t"             \
               "vpxor %%xmm5, %%xmm5, %%xmm5\n\tvpxor %%xmm6, %%xmm6, %%xmm6\n\t"             \
               "1:\n\t" NG_ADD16 NG_FMA4(R) "dec %[n]\n\tjnz 1b\n\tvzeroupper\n\t"            \
               : [a] "+r"(a), [n] "+r"(n)                                                  \
               : [b] "r"(b)                                                                \
               /* vzeroupper clears the upper halves of every vector register */        \
               : "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", \
                 "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15")

// kIters iterations of the chain; returns its final value (kept live).
uint64_t run_chunk(Kind k, uint64_t a) {
  uint64_t n = kIters;
  const uint64_t b = 1;
  switch (k) {
    case Kind::scalar:
      asm volatile("1:\n\t" NG_ADD16 "dec %[n]\n\tjnz 1b\n\t" : [a] "+r"(a), [n] "+r"(n) : [b] "r"(b) : "cc");
      break;
    case Kind::avx2:
      NG_FMA_LOOP("ymm");
      break;
    case Kind::avx512:
      NG_FMA_LOOP("zmm");
      break;
  }
  return a;
}

bool cpu_has(Kind k) {
  __builtin_cpu_init();
  switch (k) {
    case Kind::scalar: return true;
    case Kind::avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Kind::avx512: return __builtin_cpu_supports("avx512f");
  }
  return false;
}
#else
uint64_t run_chunk(Kind, uint64_t a) { return a; }
bool cpu_has(Kind) { return false; }
#endif

double thread_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// One thread's result: the clock while it ran (cycles over its CPU time) and
// the fraction of the wall time it was on a CPU (1 unless it shared a core).
struct ThreadClock {
  double ghz = 0, on_cpu = 0;
};

// K threads, started together, each for `seconds` of wall time.
std::vector<ThreadClock> measure(Kind k, int threads, double seconds) {
  std::vector<ThreadClock> out(static_cast<size_t>(threads));
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::atomic<uint64_t> sink{0};
  std::vector<std::thread> pool;
  // Threads that cannot be made (a process or memory limit): the ones made
  // are released and joined, and the error is reported (exit 1).
  struct Release {
    std::atomic<bool>& go;
    std::vector<std::thread>& pool;
    ~Release() {
      go.store(true, std::memory_order_release);
      for (auto& th : pool)
        if (th.joinable()) th.join();
    }
  } release{go, pool};
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) {
      }
      using clk = std::chrono::steady_clock;
      uint64_t a = static_cast<uint64_t>(t), chunks = 0;
      a = run_chunk(k, a);  // warm-up chunk, not counted
      const auto t0 = clk::now();
      const double c0 = thread_cpu_seconds();
      double el = 0;
      do {
        a = run_chunk(k, a);
        ++chunks;
        el = std::chrono::duration<double>(clk::now() - t0).count();
      } while (el < seconds);
      const double cpu = thread_cpu_seconds() - c0;
      ThreadClock& r = out[static_cast<size_t>(t)];
      r.ghz = cpu > 0 ? static_cast<double>(chunks * kIters * kChain) / cpu * 1e-9 : 0;
      r.on_cpu = cpu / el;
      sink.fetch_add(a, std::memory_order_relaxed);
    });
  while (ready.load() < threads) std::this_thread::yield();
  go.store(true, std::memory_order_release);
  for (auto& th : pool) th.join();
  if (sink.load() == 1) std::puts("");  // keeps the chains' results live
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  namespace bc = normgate::bench_cli;
  static const char* kUsage =
      "usage: clock_probe [threads=1,N] [seconds=1] [kinds=scalar,avx2,avx512]\n"
      "  threads  thread counts, comma-separated, each in 1..9999 (default 1 and every core)\n"
      "  seconds  how long each thread runs per measurement, 0.05..60\n"
      "  kinds    loads beside the chain of dependent adds, comma-separated: scalar, avx2, avx512\n"
      "Prints the median and lowest GHz per thread for each (threads, kind).\n";
  return bc::run_main("clock_probe", kUsage, argc, argv, 3, [](const bc::Args& a) {
    const std::string all = std::to_string(std::max(1u, std::thread::hardware_concurrency()));
    const std::string threads_arg = a.has(1) ? a.at(1) : (all == "1" ? "1" : "1," + all);
    const double seconds = a.has(2) ? bc::parse_number("seconds", a.at(2), 0.05, 60) : 1.0;
    const std::string kinds_arg = a.has(3) ? a.at(3) : "scalar,avx2,avx512";
    // Comma-separated items, none empty.
    auto items = [](const std::string& list, const char* what) {
      std::vector<std::string> v;
      size_t p = 0;
      while (true) {
        const size_t q = list.find(',', p);
        const std::string w = list.substr(p, q == std::string::npos ? std::string::npos : q - p);
        if (w.empty()) throw bc::UsageError(std::string(what) + " '" + list + "' has an empty item");
        v.push_back(w);
        if (q == std::string::npos) break;
        p = q + 1;
      }
      return v;
    };
    std::vector<int> threads;
    for (const auto& w : items(threads_arg, "threads")) threads.push_back(bc::parse_int<int>("threads", w, 1, 9999));
    std::vector<Kind> kinds;
    for (const auto& w : items(kinds_arg, "kinds")) {
      if (w == "scalar") kinds.push_back(Kind::scalar);
      else if (w == "avx2") kinds.push_back(Kind::avx2);
      else if (w == "avx512") kinds.push_back(Kind::avx512);
      else throw bc::UsageError("kinds: '" + w + "' is not scalar, avx2 or avx512");
    }
    std::printf("| threads | load | median GHz | lowest GHz | on-CPU fraction (median, lowest) |\n"
                "| --- | --- | --- | --- | --- |\n");
    for (int t : threads)
      for (Kind k : kinds) {
        if (!cpu_has(k)) {
          std::printf("| %d | %s | skipped: not on this CPU | | |\n", t, name(k));
          continue;
        }
        const std::vector<ThreadClock> r = measure(k, t, seconds);
        std::vector<double> g, f;
        for (const auto& x : r) {
          g.push_back(x.ghz);
          f.push_back(x.on_cpu);
        }
        std::sort(g.begin(), g.end());
        std::sort(f.begin(), f.end());
        std::printf("| %d | %s | %.3f | %.3f | %.2f, %.2f |\n", t, name(k), g[g.size() / 2], g.front(),
                    f[f.size() / 2], f.front());
        std::fflush(stdout);
      }
    return 0;
  });
}
