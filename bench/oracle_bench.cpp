// bench/oracle_bench.cpp: throughput of the FP64 reference next to the
// machine's copy bandwidth, measured in the same run.
//
// Usage: oracle_bench [T=65536] [H=4096] [copy_MiB=1024]
// For 1, 2 and all cores: Reference::compute (fp64 mode), then the sweep a
// validator does (y(r,j) and dx(r,j) for every element, per-element API and
// row API), elements/s, input bytes/s (x, dy, w read once: what the oracle
// must at least read) and the ratio of that to a STREAM-like parallel copy
// (best of 5; bytes counted as read + write, STREAM convention) at the same
// thread count. Prints ratios only; asserts nothing about speed.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "normgate/core/bf16.h"
#include "normgate/oracle/reference.h"
#include "cli_args.h"

namespace {

using clk = std::chrono::steady_clock;
double secs(clk::time_point a, clk::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// Fast local generator (xorshift64*), one stream per row: roughly normal
// BF16 values (sum of 4 uniforms), not timed.
uint64_t next(uint64_t& s) {
  s ^= s >> 12;
  s ^= s << 25;
  s ^= s >> 27;
  return s * 0x2545F4914F6CDD1DULL;
}
float unif(uint64_t& s) { return float(next(s) >> 40) * 0x1p-24f; }
void fill(std::vector<uint16_t>& v, int64_t R, int64_t H, uint64_t seed) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; ++r) {
    uint64_t s = (seed + 0x9E3779B97F4A7C15ULL * uint64_t(r + 1)) | 1;
    for (int64_t j = 0; j < H; ++j) {
      float g = (unif(s) + unif(s) + unif(s) + unif(s) - 2.0f) * 1.7f;
      v[r * H + j] = normgate::bf16_from_float(g);
    }
  }
}

// STREAM-like copy: dst = src over `bytes`, static partition, best of 5.
double copy_bw(std::vector<char>& src, std::vector<char>& dst, int nt) {
  const int64_t n = static_cast<int64_t>(src.size());
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = clk::now();
#pragma omp parallel num_threads(nt)
    {
      int t = omp_get_thread_num(), k = omp_get_num_threads();
      int64_t a = n * t / k, b = n * (t + 1) / k;
      std::memcpy(dst.data() + a, src.data() + a, b - a);
    }
    best = std::min(best, secs(t0, clk::now()));
  }
  return 2.0 * n / best;  // read + write
}

namespace cli = normgate::bench_cli;

constexpr const char* kUsage =
    "usage: oracle_bench [T=65536] [H=4096] [copy_MiB=1024]\n"
    "  T >= 1; H >= 1; copy_MiB in 1..1073741824 (the size of each copy buffer)\n";

int bench(const cli::Args& a) {
  const int64_t T = cli::int_arg<int64_t>(a, 1, "T", 65536, 1);
  const int64_t H = cli::int_arg<int64_t>(a, 2, "H", 4096, 1);
  const int64_t copy_mib = cli::int_arg<int64_t>(a, 3, "copy_MiB", 1024, 1, int64_t{1} << 30);
  const int ncores = omp_get_num_procs();
  std::vector<int> threads = {1, 2, ncores};
  std::sort(threads.begin(), threads.end());
  threads.erase(std::unique(threads.begin(), threads.end()), threads.end());
  threads.erase(std::remove_if(threads.begin(), threads.end(), [&](int t) { return t > ncores; }),
                threads.end());

  std::vector<uint16_t> x(T * H), dy(T * H), w(H);
  fill(x, T, H, 1);
  fill(dy, T, H, 2);
  for (int64_t j = 0; j < H; ++j) w[j] = normgate::bf16_from_float(1.0f + 0.001f * float(j % 97));
  normgate::oracle::Problem p;
  p.x = normgate::RowView<uint16_t>::plain(x.data(), T, H);
  p.dy = normgate::RowView<uint16_t>::plain(dy.data(), T, H);
  p.w = {normgate::WDtype::bf16, w.data(), H};

  std::vector<char> src(copy_mib << 20), dst(copy_mib << 20);
  std::memset(src.data(), 1, src.size());
  std::memset(dst.data(), 2, dst.size());

  const double elems = double(T) * double(H);
  const double in_bytes = 2.0 * 2.0 * elems + 2.0 * H;  // x, dy, w once
  std::printf("oracle_bench: T=%lld H=%lld (%.3g elements, inputs %.1f MiB), %d cores, copy buffer %lld MiB\n",
              (long long)T, (long long)H, elems, in_bytes / (1 << 20), ncores, (long long)copy_mib);
  std::printf("%7s %9s %10s %10s %10s %10s %8s | %10s %10s %10s\n", "threads", "copy GB/s",
              "compute s", "elem/s", "in GB/s", "vs copy", "", "sweep s", "sweep/el s", "elem/s");
  for (int nt : threads) {
    double bw = copy_bw(src, dst, nt);
    auto t0 = clk::now();
    normgate::oracle::Reference ref = normgate::oracle::Reference::compute(p, {nt, normgate::oracle::RstdMode::fp64});
    double tc = secs(t0, clk::now());

    // Validator-style sweep, row API: y and dx of every element.
    double sum = 0;
    t0 = clk::now();
#pragma omp parallel num_threads(nt) reduction(+ : sum)
    {
      std::vector<normgate::oracle::VB> yb(H), db(H);
#pragma omp for schedule(static)
      for (int64_t r = 0; r < T; ++r) {
        ref.y_row(r, yb.data());
        ref.dx_row(r, db.data());
        sum += yb[r % H].bound + db[(r * 7) % H].bound;
      }
    }
    double ts_row = secs(t0, clk::now());
    // Same sweep through the per-element API.
    t0 = clk::now();
#pragma omp parallel for num_threads(nt) schedule(static) reduction(+ : sum)
    for (int64_t r = 0; r < T; ++r) {
      double s = 0;
      for (int64_t j = 0; j < H; ++j) {
        normgate::oracle::VB a = ref.y(r, j), b = ref.dx(r, j);
        s += a.bound + b.bound;
      }
      sum += s;
    }
    double ts_el = secs(t0, clk::now());
    std::printf("%7d %9.2f %10.3f %10.3g %10.2f %10.3f %8s | %10.3f %10.3f %10.3g   (checksum %.3g)\n",
                nt, bw / 1e9, tc, elems / tc, in_bytes / tc / 1e9, in_bytes / tc / bw, "", ts_row,
                ts_el, elems / ts_row, sum);
    std::fflush(stdout);
  }
  std::printf("compute: Reference::compute (rstd, c, dw with bounds); in GB/s = (x+dy+w bytes)/compute s;\n"
              "vs copy = in GB/s / copy GB/s at the same thread count; sweep s = y_row+dx_row over all\n"
              "elements, sweep/el s = the same through y(r,j)+dx(r,j); elem/s of the row sweep.\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return cli::run_main("oracle_bench", kUsage, argc, argv, 3, bench); }
