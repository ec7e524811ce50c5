// tests/validators/block_scan_test.cpp: RatioStats::add_row's two block scans,
// the AVX-512 one (eight lanes, mask registers; validators/src/scan_avx512.cpp)
// and the four-lane clones, each against add() element by element, bit for
// bit, on rows built to hit every branch of the fast test: NaN, +-inf, +-0,
// subnormals and values near overflow in every operand, tol == 0 (rstd's
// atol is 0), ratios past 2^1020 and past DBL_MAX, lengths that are not a
// multiple of eight, and blocks in which the first pass (forced and bound
// divisions skipped) meets a lane that could raise a maximum at any position.
// Skipped where the build or the CPU has no AVX-512 scan.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "normgate/validators/stats.h"
#include "util/stats_eq.h"
#include "util/xorshift64.h"

namespace nv = normgate::validators;
using nv::BlockScanImpl;
using nv::Output;
using nv::RatioStats;
using nv::testing::expect_same;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kMax = std::numeric_limits<double>::max();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Row {
  std::vector<double> got, ref, bound, ideal;
  explicit Row(size_t n) : got(n), ref(n), bound(n), ideal(n) {}
  size_t size() const { return got.size(); }
};

// Restores the default scan when a test ends, failed or not.
struct ScanGuard {
  ~ScanGuard() { nv::set_block_scan(BlockScanImpl::best); }
};

// `seed` (when non-empty: got, ref, bound, ideal of index 0, added with add())
// then the row at index 1.. by add(), and by add_row in pieces of `piece`
// elements with each scan; every summary must equal add()'s bit for bit.
void expect_scans_equal_add(Output o, const Row& row, int64_t piece, const std::vector<double>& seed = {}) {
  const ScanGuard guard;
  const int64_t n = static_cast<int64_t>(row.size());
  RatioStats want(o);
  if (!seed.empty()) want.add(0, seed[0], seed[1], seed[2], seed[3]);
  for (int64_t j = 0; j < n; ++j) want.add(1 + j, row.got[j], row.ref[j], row.bound[j], row.ideal[j]);
  for (BlockScanImpl impl : {BlockScanImpl::best, BlockScanImpl::clones}) {
    SCOPED_TRACE(impl == BlockScanImpl::best ? "AVX-512 scan" : "four-lane clones");
    nv::set_block_scan(impl);
    RatioStats got(o);
    if (!seed.empty()) got.add(0, seed[0], seed[1], seed[2], seed[3]);
    for (int64_t j0 = 0; j0 < n; j0 += piece) {
      const int64_t m = std::min(piece, n - j0);
      got.add_row(1 + j0, row.got.data() + j0, row.ref.data() + j0, row.bound.data() + j0, row.ideal.data() + j0,
                  m);
    }
    expect_same(want, got);
  }
}

// Outputs with an inexact budget (add_row's fast path); rstd's atol is 0.
constexpr Output kOutputs[] = {Output::y, Output::rstd, Output::dx, Output::dw};

}  // namespace

TEST(BlockScan, Avx512IsTheDefaultWhereTheCpuHasIt) {
  if (!nv::block_scan_avx512()) GTEST_SKIP() << "no AVX-512 block scan here (needs GCC on x86-64 and AVX-512F/DQ/VL)";
  const ScanGuard guard;
  EXPECT_EQ(nv::set_block_scan(BlockScanImpl::clones), BlockScanImpl::best);
  EXPECT_EQ(nv::set_block_scan(BlockScanImpl::best), BlockScanImpl::clones);
}

// Rows mixing ordinary elements with every special operand, at lengths around
// multiples of eight and of the 256-element block, added whole and in odd
// pieces.
TEST(BlockScan, Avx512EqualsAddOnAdversarialRows) {
  if (!nv::block_scan_avx512()) GTEST_SKIP() << "no AVX-512 block scan here (needs GCC on x86-64 and AVX-512F/DQ/VL)";
  normgate::test::Xorshift64 next(33);
  auto uni = [&] { return next.uniform(); };
  const double special[] = {0.0,       -0.0,        kInf,      -kInf,  kNaN,      5e-324, -5e-324, 0x1p-1022,
                            2.5e-310,  -2.5e-310,   kMax,      -kMax,  0.6 * kMax, 1e300,  -1e300,  0x1p1020};
  constexpr int kSpecials = sizeof special / sizeof special[0];
  const int64_t lengths[] = {1, 2, 7, 8, 9, 15, 16, 17, 63, 255, 256, 257, 263, 511, 513, 777};
  for (Output o : kOutputs) {
    const nv::Budget bu = nv::budget(o);
    for (int rep = 0; rep < 48; ++rep) {
      const int64_t n = rep < 16 ? lengths[rep] : 1 + static_cast<int64_t>(next() % 900);
      Row row(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) {
        double& g = row.got[j];
        double& r = row.ref[j];
        double& b = row.bound[j];
        double& id = row.ideal[j];
        r = (uni() - 0.5) * std::ldexp(1.0, static_cast<int>(next() % 60) - 30);
        const double tol = bu.atol + bu.rtol * std::fabs(r);
        g = r + (uni() - 0.5) * 4 * tol;
        id = r + (uni() - 0.5) * tol;
        b = (next() % 4 == 0) ? 0.0 : uni() * 1e-12 * tol;
        const uint64_t kind = next() % 40;
        const double sp = special[next() % kSpecials];
        if (kind == 0) g = sp;
        if (kind == 1) r = sp;
        if (kind == 2) id = sp;
        if (kind == 3) b = sp;
        if (kind == 4) r = 0.0, g = (next() % 2) ? 0.0 : 1e-3;  // tol = atol: 0 for rstd
        if (kind == 5) g = r + tol;                              // ratio about 1
        if (kind == 6) b = uni() * 0.5 * tol;                    // uncertified near the budget
        if (kind == 7) g = 2e305, r = 0.0;                       // ratio past 2^1020, finite
        if (kind == 8) g = 1e307 * (uni() + 1), r = -g;          // |got - ref| overflows
        if (kind == 9) id = r + 1e304, b = 1e305;               // forced and bound ratios huge
        if (kind == 10) g = r + std::pow(10.0, -14 + 22 * uni()) * tol;  // every histogram bin
        if (kind == 11) g = r = 0x1p-1074 * static_cast<double>(next() % 4);  // subnormal, equal
        if (kind == 12) r = kMax, g = kMax, id = r, b = kMax;   // terms finite, their sum not
      }
      SCOPED_TRACE(std::string(nv::to_string(o)) + " rep " + std::to_string(rep) + " n " + std::to_string(n));
      expect_scans_equal_add(o, row, n);
      expect_scans_equal_add(o, row, 1 + static_cast<int64_t>(next() % 300));
    }
  }
}

// Long rows whose maxima settle, so most blocks' first pass skips the forced
// and bound divisions; then, at a chosen position inside a block (first lane,
// mid-vector, the tail), an element that raises max_forced or
// max_bound_ratio, sits exactly at the maximum or one ulp above, or has a
// ratio past 2^1020. The summaries start from maxima at the edges of that
// skip (0, subnormal, 2^-1000 and the double after it, huge, 2^1020).
TEST(BlockScan, Avx512EqualsAddWhenTheSkipSwitchesMidBlock) {
  if (!nv::block_scan_avx512()) GTEST_SKIP() << "no AVX-512 block scan here (needs GCC on x86-64 and AVX-512F/DQ/VL)";
  normgate::test::Xorshift64 next(1033);
  auto uni = [&] { return next.uniform(); };
  const double seed_ratio[] = {0.0, 5e-324, 0x1p-1000, 0x1.0000000000001p-1000, 1e-300, 0.3, 1e300, 0x1p1020};
  const int64_t at[] = {0, 3, 7, 8, 100, 250, 255};
  for (Output o : kOutputs) {
    const nv::Budget bu = nv::budget(o);
    for (int rep = 0; rep < 24; ++rep) {
      const int64_t n = 5 * 256 + 3 + static_cast<int64_t>(next() % 200);
      Row row(static_cast<size_t>(n));
      double top_f = 0.0, top_b = 0.0;  // the largest forced and bound ratios so far, as add() computes them
      for (int64_t j = 0; j < n; ++j) {
        row.ref[j] = (uni() + 0.5) * std::ldexp(1.0, static_cast<int>(next() % 20) - 10);
        const double tol = bu.atol + bu.rtol * std::fabs(row.ref[j]);
        row.got[j] = row.ref[j] + (uni() - 0.5) * 3 * tol;
        row.ideal[j] = row.ref[j] + uni() * 0.2 * tol;
        row.bound[j] = uni() * 1e-9 * tol;
        const int64_t pos = j % 256;  // events only in blocks 2 and later, at the chosen positions
        if (j >= 512 && pos == at[(j / 256 + rep) % 7]) {
          switch ((j / 256 + rep) % 6) {
            case 0: row.ideal[j] = row.ref[j] + (top_f + 0.01) * tol; break;   // a new forced maximum
            case 1: row.bound[j] = (top_b + 1e-10) * tol; break;              // a new bound maximum
            case 2: row.ideal[j] = row.ref[j] + top_f * tol; break;            // at the maximum
            case 3: row.ideal[j] = row.ref[j] + std::nextafter(top_f, kInf) * tol; break;
            case 4: row.got[j] = 2e305, row.ref[j] = 0.0, row.ideal[j] = 0.0; break;  // ratio past 2^1020
            case 5: row.bound[j] = top_b * tol; break;
          }
        }
        const double t = bu.atol + bu.rtol * std::fabs(row.ref[j]);
        const double f = std::fabs(row.ideal[j] - row.ref[j]);
        if (f != 0.0 && t > 0.0) top_f = std::max(top_f, f / t);
        if (row.bound[j] != 0.0 && t > 0.0) top_b = std::max(top_b, row.bound[j] / t);
      }
      const double s = seed_ratio[rep % 8];
      // Index 0 sets both maxima to about s (ref 0 where atol > 0; rstd's
      // atol is 0, so its first pass never skips and ref 1 will do).
      const double r0 = bu.atol > 0.0 ? 0.0 : 1.0, t0 = bu.atol + bu.rtol * r0;
      const std::vector<double> seed = {r0, r0, s * t0, r0 + s * t0};
      SCOPED_TRACE(std::string(nv::to_string(o)) + " rep " + std::to_string(rep) + " seed " + std::to_string(s));
      expect_scans_equal_add(o, row, 256, seed);
      expect_scans_equal_add(o, row, n, seed);
      expect_scans_equal_add(o, row, 256, {});
    }
  }
}

// add_row's histogram bins (FineBins: one table load, Histogram::bin for a
// slice that holds an edge) at every edge of the histogram: ratios a few
// ulps either side of each edge e (got = e * tol, ref 0: tol = atol), at the
// clamps (below 1e-8, above 1e4) and 0, on both scans. Runs without AVX-512
// too (both "scans" are then the clones).
TEST(BlockScan, HistogramBinsAtEveryEdgeEqualAdd) {
  for (Output o : {Output::y, Output::dx, Output::dw}) {
    const double atol = nv::budget(o).atol;
    std::vector<double> ratios = {0.0, 1e-300, 1e-20, 1e-9, 9.999999e-9, 1.0000001e4, 1e5, 1e300};
    for (int k = 1; k < nv::Histogram::kBins - 2; ++k) ratios.push_back(nv::Histogram::upper(k));
    std::vector<double> gots;
    for (double r : ratios) {
      double g = r * atol;
      for (int u = 0; u < 4; ++u) g = std::nextafter(g, 0.0);
      for (int u = 0; u < 9; ++u, g = std::nextafter(g, kInf)) gots.push_back(g);
    }
    Row row(gots.size());
    for (size_t j = 0; j < gots.size(); ++j) {
      row.got[j] = gots[j];
      row.ref[j] = 0.0;
      row.bound[j] = 0.0;
      row.ideal[j] = 0.0;
    }
    SCOPED_TRACE(std::string(nv::to_string(o)));
    expect_scans_equal_add(o, row, 256);
    expect_scans_equal_add(o, row, 37);
  }
}
