// scan.h (internal to validators/src): what RatioStats::add_row's block scan
// and its AVX-512 implementation (scan_avx512.cpp) share.
//
// scan_avx512.cpp is compiled with AVX-512 flags, so this header holds types
// and constants only: an inline function defined here and emitted out of line
// by both files could be linked in its AVX-512 form for every caller.
#pragma once

#include <cstdint>
#include <limits>

namespace normgate::validators::scan {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kMax = std::numeric_limits<double>::max();
constexpr double kUp = 1 + 0x1p-50, kDn = 1 - 0x1p-50;  // as certified() (budget.h)
constexpr int64_t kBlock = 256;                         // elements per scan_block call
constexpr int kSubBits = 4;                             // FastBins::kSubBits (stats.cpp)
// quiet_factor's range (stats.cpp): maxima in [kTiny, kBig) allow the skip.
constexpr double kTiny = 0x1p-1000, kBig = 0x1p1020;

struct BlockScan {
  int64_t fast = 0, over = 0, over_certified = 0;
  double max_forced = 0, max_bound_ratio = 0;  // over the fast elements (0 when none; see scan_block)
  double max_r = -1;                           // over the fast elements (-1 when none)
  bool special = false;  // some element is not fast, or fast and not certified
};

struct BinConsts {
  double lo, hi;
  int64_t slice0, zero_slice;
};

/// scan_block (stats.cpp) at eight lanes with AVX-512F/DQ/VL intrinsics:
/// the same IEEE operations per element, so the same rb, sb and out bit for
/// bit. qf and qb are quiet_factor(max_forced, atol) and
/// quiet_factor(max_bound_ratio, atol). Defined where NORMGATE_SCAN_AVX512
/// is; call only where the CPU has AVX-512F, DQ, VL and POPCNT.
void scan_block_avx512(const double* g, const double* rf, const double* bd, const double* id, int64_t n,
                       double atol, double rtol, double qf, double qb, const BinConsts& bc, double* rb, int64_t* sb,
                       BlockScan& out);

}  // namespace normgate::validators::scan
