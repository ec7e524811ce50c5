// stats.cpp: log-binned err/tol histogram and the streaming per-tensor summary.
#include "normgate/validators/stats.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "normgate/core/bf16.h"
#include "scan.h"

namespace normgate::validators {

namespace {

using scan::BinConsts;
using scan::BlockScan;
using scan::kBig;
using scan::kBlock;
using scan::kDn;
using scan::kInf;
using scan::kMax;
using scan::kTiny;
using scan::kUp;
using H = Histogram;

// Log-bin edges e[i] = 10^(kMinDecade + i/kPerDecade), i = 0..kLogBins. The
// exponent is formed as an integer over kPerDecade so decade edges are
// pow(10, integer) (1e-8, ..., 1, ..., 1e4 exactly as the literals round).
const std::array<double, H::kLogBins + 1>& edges() {
  static const std::array<double, H::kLogBins + 1> e = [] {
    std::array<double, H::kLogBins + 1> a{};
    for (int i = 0; i <= H::kLogBins; ++i) {
      const int num = H::kMinDecade * H::kPerDecade + i;
      a[i] = (num % H::kPerDecade == 0) ? std::pow(10.0, num / H::kPerDecade)
                                         : std::pow(10.0, static_cast<double>(num) / H::kPerDecade);
    }
    return a;
  }();
  return e;
}

// Bin search without a search: a ratio r in (e[0], e[kLogBins]] is a
// positive normal double; its binary exponent x and the top kSubBits bits of
// its significand name a slice [lo, hi) of the line with hi/lo <= 1 +
// 2^-kSubBits = 1.0625: slice = (bits(r) >> (52 - kSubBits)) - slice0.
// With i the smallest index with e[i] >= lo: edges are 10^(1/kPerDecade) ~
// 1.26 apart, more than a slice is wide, so at most one edge lies in a slice
// and the answer (smallest i with r <= e[i]) is i, or i + 1 when e[i] < r
// (then e[i] is in [lo, r) and e[i + 1] >= 1.26 lo > r). Per slice the table
// holds the bin of that answer, base = i + 1 (log bin i + 1 is (e[i-1], e[i]]),
// and edge = e[i] (+inf past the last edge): bin = base + (edge < r).
// Every finite r >= 0 gets its bin this way: r <= e[0] is looked up at e[0]'s
// slice (base 1, edge e[0]: bin 1) and r > e[kLogBins] at hi_clamp's (bin
// kBins-2), with the comparison made on r itself; r == 0 uses an extra entry
// zero_slice (base 0, edge +inf: bin 0).
struct FastBins {
  static constexpr int kSubBits = scan::kSubBits;
  int64_t slice0 = 0;      // bits >> (52 - kSubBits) of slice 0's lower end
  int64_t zero_slice = 0;  // the entry for r == 0 (after the last slice)
  double lo_clamp = 0;     // e[0]
  double hi_clamp = 0;     // the double after e[kLogBins]
  std::vector<int32_t> base;
  std::vector<double> edge;
  /// Table entry of a finite r >= 0.
  int64_t slice(double r) const {
    if (!(r > 0.0)) return zero_slice;
    const double c = std::min(std::max(r, lo_clamp), hi_clamp);
    return static_cast<int64_t>(std::bit_cast<uint64_t>(c) >> (52 - kSubBits)) - slice0;
  }
  /// Histogram::bin(r) for r finite >= 0, given s = slice(r).
  int bin(int64_t s, double r) const { return base[static_cast<size_t>(s)] + (edge[static_cast<size_t>(s)] < r); }
};

const FastBins& fast_bins() {
  static const FastBins f = [] {
    static_assert(H::kPerDecade <= 10, "FastBins assumes at most one edge per slice (edges >= 1.0625 apart)");
    FastBins b;
    const auto& e = edges();
    b.lo_clamp = e.front();
    b.hi_clamp = std::nextafter(e.back(), kInf);
    const int x0 = std::ilogb(b.lo_clamp), x1 = std::ilogb(b.hi_clamp);
    b.slice0 = static_cast<int64_t>(x0 + 1023) << FastBins::kSubBits;
    for (int x = x0; x <= x1; ++x)
      for (int m = 0; m < (1 << FastBins::kSubBits); ++m) {
        const double lo = std::ldexp(1.0 + std::ldexp(static_cast<double>(m), -FastBins::kSubBits), x);  // exact
        const size_t i = static_cast<size_t>(std::lower_bound(e.begin(), e.end(), lo) - e.begin());
        b.base.push_back(static_cast<int32_t>(i) + 1);
        b.edge.push_back(i < e.size() ? e[i] : kInf);
      }
    b.zero_slice = static_cast<int64_t>(b.base.size());
    b.base.push_back(0);
    b.edge.push_back(kInf);
    return b;
  }();
  return f;
}

// --- RatioStats::add_row's fast path -----------------------------------------
// An element is "fast" when everything add() computes for it is finite
// without add()'s special cases: finite got, ref, ideal and bound, tol > 0,
// finite ratios. Tested as sums, with fewer branches: a NaN or inf term makes
// a sum NaN or inf; finite terms whose sum overflows only send the element to
// add() as well, which is always exact (the test need only be sufficient).
// Ratios of finite values over tol > 0 are >= 0, not NaN. fast_element (one
// element) and scan_block (four or eight at a time) perform the same IEEE
// operations, so they agree on every element (scan_block's first pass skips
// fr and br only where their test provably passes, see quiet_factor).

struct FastElement {
  bool fast, cert;  // cert: certified() for a fast element (exact == false)
  double r, fr, err, tol;
};

inline FastElement fast_element(double g, double rf, double b, double id, double atol, double rtol) {
  FastElement e;
  e.tol = atol + rtol * std::fabs(rf);
  e.err = std::fabs(g - rf);
  e.r = e.err == 0.0 ? 0.0 : e.err / e.tol;
  const double ferr = std::fabs(id - rf);
  e.fr = ferr == 0.0 ? 0.0 : ferr / e.tol;
  const double ab = std::fabs(b);
  const double br = b == 0.0 ? 0.0 : ab / e.tol;
  e.fast = std::fabs(g) + std::fabs(rf) + std::fabs(id) + ab <= kMax && e.tol > 0.0 && e.r + e.fr + br < kInf;
  e.cert = true;
  if (b != 0.0) {
    const double m = (1 + rtol) * ab;
    e.cert = e.r <= 1.0 ? (e.err + m) * kUp <= e.tol * kDn : e.err * kDn > (e.tol + m) * kUp;
  }
  return e;
}

// scan_block_clones is compiled three times (AVX-512, AVX2 and the build's
// baseline) and picked at load time (GCC target_clones), as the oracle's hot
// loops (oracle/src/eft.h): every clone performs the same IEEE-754 operations,
// so the same bits (tests/validators/sweep_equiv_test.cpp: against add()).
// Where the CPU has AVX-512F/DQ/VL, scan_block calls scan_avx512.cpp's eight
// lanes instead (the same operations again; block_scan_test.cpp).
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(NORMGATE_NO_AVX512_CLONES)
#define NG_VAL_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#elif defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define NG_VAL_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))  // NORMGATE_HOST_AVX512=OFF
#else
#define NG_VAL_CLONES
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"  // vector helpers are internal (inlined), no ABI concern
#endif
typedef double v4d __attribute__((vector_size(32)));
typedef int64_t v4l __attribute__((vector_size(32)));
typedef uint64_t v4u __attribute__((vector_size(32)));

struct ScanAcc {
  v4l fast{}, over{}, overc{}, special{}, loud{};
  v4d mf{}, mb{}, mr{-1, -1, -1, -1};
};

// The forced and bound ratios fr = ferr/tol and br = |bound|/tol enter the
// summary only through their maxima and scan_block's fast test; two of its
// three divisions go once those maxima stop moving. With M = max_forced so far
// and q = fl(fl(M*kDn)*tol) >= 2^-1000 (normal, so each product is within a
// factor 1 + 2^-53 of exact), ferr <= q means ferr/tol <= M*(1 - 2^-50)*(1 +
// 2^-53)^2 < M exactly, so the rounded division gives fr <= M (monotone): fr
// cannot raise the maximum. tol >= atol in IEEE arithmetic too, so
// fl(fl(M*kDn)*atol) >= 2^-1000 makes every lane's q normal; otherwise the
// factor is 0 and only ferr == 0 (fr = 0) passes. Likewise br with
// max_bound_ratio. With r, M and its bound twin below 2^1020 as well, r + fr +
// br is finite, so the fast test holds without fr and br.
inline double quiet_factor(double m, double atol) {
  const double f = m * kDn;
  return m >= kTiny && m < kBig && f * atol >= kTiny ? f : 0.0;
}

inline v4d vabs(v4d a) { return reinterpret_cast<v4d>(reinterpret_cast<v4l>(a) & 0x7FFFFFFFFFFFFFFFll); }

// fast_element on four lanes; lanes where `valid` is 0 count nowhere. rb gets
// r for fast lanes, -1 for the others; sb FastBins::slice(r) for fast lanes,
// zero_slice for the others (bin 0 for rb = -1: add_row takes them out of
// bin 0 again, so its histogram loop needs no test). Without kRatios fr and br are not computed (see
// quiet_factor; qf, qb its factors): a lane that could be fast and might raise
// a maximum, or fail the fast test only through r + fr + br, marks a.loud, and
// the block is then scanned again with kRatios.
template <bool kRatios>
__attribute__((always_inline)) inline void scan4(v4d G, v4d R, v4d B, v4d I, v4l valid, double atol, double rtol,
                                                 double qf, double qb, const BinConsts& bc, double* rb, int64_t* sb,
                                                 ScanAcc& a) {
  const v4d zero = {0, 0, 0, 0};
  const v4d tol = atol + rtol * vabs(R);
  const v4d err = vabs(G - R);
  const v4d r = err == 0.0 ? zero : err / tol;
  const v4d ferr = vabs(I - R);
  const v4d ab = vabs(B);
  const v4l finite = valid & (vabs(G) + vabs(R) + vabs(I) + ab <= kMax) & (tol > 0.0);
  v4l fast;
  if constexpr (kRatios) {
    const v4d fr = ferr == 0.0 ? zero : ferr / tol;
    const v4d br = B == 0.0 ? zero : ab / tol;
    fast = finite & (r + fr + br < kInf);
    a.mf = (fast & (fr > a.mf)) != 0 ? fr : a.mf;
    a.mb = (fast & (br > a.mb)) != 0 ? br : a.mb;
  } else {
    fast = finite;
    a.loud |= finite & ~((r < kBig) & (ferr <= qf * tol) & (ab <= qb * tol));
  }
  const v4d m = (1 + rtol) * ab;
  const v4l cert_nz = r <= 1.0 ? ((err + m) * kUp <= tol * kDn) : (err * kDn > (tol + m) * kUp);
  const v4l cert = B != 0.0 ? cert_nz : ~v4l{};
  const v4l over = fast & (r > 1.0);
  a.fast -= fast;
  a.over -= over;
  a.overc -= over & cert;
  a.special |= (valid & ~fast) | (fast & ~cert);
  const v4d rr = fast != 0 ? r : v4d{-1, -1, -1, -1};
  a.mr = rr > a.mr ? rr : a.mr;
  std::memcpy(rb, &rr, sizeof rr);
  v4d c = r < bc.lo ? bc.lo : r;
  c = c > bc.hi ? bc.hi : c;
  v4l s = reinterpret_cast<v4l>(reinterpret_cast<v4u>(c) >> (52 - FastBins::kSubBits)) - bc.slice0;
  s = (fast & (r > 0.0)) != 0 ? s : bc.zero_slice;  // not fast: zero_slice too (add_row takes them out of bin 0)
  std::memcpy(sb, &s, sizeof s);
}

// scan4 over n <= kBlock elements, four at a time, into a.
template <bool kRatios>
__attribute__((always_inline)) inline void scan_pass(const double* g, const double* rf, const double* bd,
                                                     const double* id, int64_t n, double atol, double rtol, double qf,
                                                     double qb, const BinConsts& bc, double* rb, int64_t* sb,
                                                     ScanAcc& a) {
  const v4l all = ~v4l{};
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    v4d G, R, B, I;
    std::memcpy(&G, g + j, sizeof G);
    std::memcpy(&R, rf + j, sizeof R);
    std::memcpy(&B, bd + j, sizeof B);
    std::memcpy(&I, id + j, sizeof I);
    scan4<kRatios>(G, R, B, I, all, atol, rtol, qf, qb, bc, rb + j, sb + j, a);
  }
  if (j < n) {
    v4d G{}, R{}, B{}, I{};
    v4l valid{};
    double rt[4];
    int64_t st[4];
    for (int64_t l = 0; j + l < n; ++l) {
      G[l] = g[j + l];
      R[l] = rf[j + l];
      B[l] = bd[j + l];
      I[l] = id[j + l];
      valid[l] = -1;
    }
    scan4<kRatios>(G, R, B, I, valid, atol, rtol, qf, qb, bc, rt, st, a);
    for (int64_t l = 0; j + l < n; ++l) {
      rb[j + l] = rt[l];
      sb[j + l] = st[l];
    }
  }
}

// scan_block four lanes at a time (qf, qb: quiet_factor of the maxima).
NG_VAL_CLONES void scan_block_clones(const double* g, const double* rf, const double* bd, const double* id,
                                     int64_t n, double atol, double rtol, double qf, double qb, const BinConsts& bc,
                                     double* rb, int64_t* sb, BlockScan& out) {
  ScanAcc a;
  scan_pass<false>(g, rf, bd, id, n, atol, rtol, qf, qb, bc, rb, sb, a);
  bool loud = false;
  for (int l = 0; l < 4; ++l) loud = loud || a.loud[l] != 0;
  if (loud) {  // rare once the maxima settle: a new maximum, or a huge ratio
    a = ScanAcc{};
    scan_pass<true>(g, rf, bd, id, n, atol, rtol, 0, 0, bc, rb, sb, a);
  }
  out = BlockScan{};
  for (int l = 0; l < 4; ++l) {
    out.fast += a.fast[l];
    out.over += a.over[l];
    out.over_certified += a.overc[l];
    out.special = out.special || a.special[l] != 0;
    out.max_forced = a.mf[l] > out.max_forced ? a.mf[l] : out.max_forced;
    out.max_bound_ratio = a.mb[l] > out.max_bound_ratio ? a.mb[l] : out.max_bound_ratio;
    out.max_r = a.mr[l] > out.max_r ? a.mr[l] : out.max_r;
  }
}

// The AVX-512 scan (scan_avx512.cpp) where it is built in and the CPU runs
// it; set_block_scan(clones) turns it off for tests and benchmarks.
bool cpu_runs_avx512_scan() {
#ifdef NORMGATE_SCAN_AVX512
  static const bool ok = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("popcnt");
  }();
  return ok;
#else
  return false;
#endif
}

std::atomic<bool> g_force_clones{false};

// fast_element over n <= kBlock elements: counts and maxima of the fast ones
// into out; each element's r and slice into rb and sb (r = -1 and the slice
// zero_slice, bin 0, for an element that is not fast). max_forced and max_bound_ratio are the summary's so far: out's
// maxima are over the fast elements when the block can raise them, else 0.
// Eight lanes with AVX-512 where the CPU has it, else four (scan_block_clones):
// the same operations per element, so the same results.
void scan_block(const double* g, const double* rf, const double* bd, const double* id, int64_t n, double atol,
                double rtol, double max_forced, double max_bound_ratio, const BinConsts& bc, double* rb, int64_t* sb,
                BlockScan& out) {
  const double qf = quiet_factor(max_forced, atol), qb = quiet_factor(max_bound_ratio, atol);
#ifdef NORMGATE_SCAN_AVX512
  if (cpu_runs_avx512_scan() && !g_force_clones.load(std::memory_order_relaxed)) {
    scan::scan_block_avx512(g, rf, bd, id, n, atol, rtol, qf, qb, bc, rb, sb, out);
    return;
  }
#endif
  scan_block_clones(g, rf, bd, id, n, atol, rtol, qf, qb, bc, rb, sb, out);
}

void check_bin(int k) {
  if (k < 0 || k >= H::kBins)
    throw std::out_of_range("Histogram: bin " + std::to_string(k) + " outside [0, " +
                            std::to_string(H::kBins) + ")");
}

// True when (ratio, index) should replace the current worst w.
bool beats(double ratio, int64_t index, const Worst& w) {
  if (w.index < 0) return true;
  if (ratio > w.ratio) return true;
  return ratio == w.ratio && index < w.index;
}

// bound/tol of an uncertified comparison (inf when tol is 0 or bound is not finite).
double bound_over_tol(const Worst& w) {
  if (!(w.tol > 0.0) || !std::isfinite(w.bound)) return kInf;
  return w.bound / w.tol;
}

// True when uncertified element (br, index) should replace the current one u.
bool beats_uncertain(double br, int64_t index, const Worst& u) {
  if (u.index < 0) return true;
  const double ubr = bound_over_tol(u);
  if (br > ubr) return true;
  return br == ubr && index < u.index;
}

}  // namespace

BlockScanImpl set_block_scan(BlockScanImpl impl) {
  const bool was = g_force_clones.exchange(impl == BlockScanImpl::clones);
  return was ? BlockScanImpl::clones : BlockScanImpl::best;
}

bool block_scan_avx512() { return cpu_runs_avx512_scan(); }

std::string_view to_string(Verdict v) {
  switch (v) {
    case Verdict::pass: return "pass";
    case Verdict::fail: return "fail";
    case Verdict::inconclusive: return "inconclusive";
  }
  return "?";
}

Verdict combine(Verdict a, Verdict b) {
  if (a == Verdict::fail || b == Verdict::fail) return Verdict::fail;
  if (a == Verdict::inconclusive || b == Verdict::inconclusive) return Verdict::inconclusive;
  return Verdict::pass;
}

Verdict RatioStats::verdict() const {
  if (over_certified > 0) return Verdict::fail;
  if (uncertified > 0) return Verdict::inconclusive;
  return over > 0 ? Verdict::fail : Verdict::pass;  // over > 0 here only for hand-made summaries
}

int Histogram::bin(double ratio) {
  if (std::isnan(ratio)) return kBins - 1;
  if (ratio <= 0.0) return 0;
  if (std::isinf(ratio)) return kBins - 1;
  const FastBins& f = fast_bins();
  return f.bin(f.slice(ratio), ratio);
}

double Histogram::lower(int k) {
  check_bin(k);
  if (k <= 1) return 0.0;
  if (k == kBins - 1) return kInf;
  return edges()[k - 2];  // k == kBins-2 gives e[kLogBins] = 10^kMaxDecade
}

double Histogram::upper(int k) {
  check_bin(k);
  if (k == 0) return 0.0;
  if (k >= kBins - 2) return kInf;
  return edges()[k - 1];  // k == 1 gives e[0] = 10^kMinDecade
}

int64_t Histogram::total() const {
  int64_t t = 0;
  for (int64_t c : count) t += c;
  return t;
}

void Histogram::merge(const Histogram& other) {
  for (int k = 0; k < kBins; ++k) count[k] += other.count[k];
}

double Histogram::quantile_upper(double q) const {
  if (!(q >= 0.0 && q <= 1.0))
    throw std::invalid_argument("Histogram::quantile_upper: q = " + std::to_string(q) +
                                " outside [0, 1]");
  const int64_t n = total();
  if (n == 0) return 0.0;
  int64_t m = static_cast<int64_t>(std::ceil(q * static_cast<double>(n)));
  m = std::clamp<int64_t>(m, 1, n);
  int64_t cum = 0;
  for (int k = 0; k < kBins; ++k) {
    cum += count[k];
    if (cum >= m) return upper(k);
  }
  return kInf;  // unreachable: cum reaches n
}

double RatioStats::add(int64_t index, double got, double ref, double bound, double ideal) {
  const double r = ratio(budget_, got, ref);
  const double forced = ratio(budget_, ideal, ref);
  const double tol = tolerance(budget_, ref);
  ++n;
  if (r > 1.0) {
    ++over;
    if (nonfinite_failure(got, ref)) ++nonfinite_fail;
  }
  if (forced > max_forced) max_forced = forced;
  if (std::isfinite(ref)) {
    double br;
    if (std::isnan(bound)) br = kInf;
    else if (bound == 0.0) br = 0.0;
    else br = tol > 0.0 ? std::fabs(bound) / tol : kInf;
    if (br > max_bound_ratio) max_bound_ratio = br;
  }
  ++hist.count[Histogram::bin(r)];
  const bool cert = certified(budget_, got, ref, bound);
  if (cert && r > 1.0) ++over_certified;
  const bool worst_moves = beats(r, index, worst);
  if (!cert || worst_moves) {
    double err;
    if (std::isfinite(got) && std::isfinite(ref)) err = std::fabs(got - ref);
    else err = nonfinite_failure(got, ref) ? kInf : 0.0;
    const Worst w{index, r, got, ref, err, tol, bound, forced, ideal};
    if (worst_moves) worst = w;
    if (!cert) {
      ++uncertified;
      if (beats_uncertain(bound_over_tol(w), index, uncertain)) uncertain = w;
    }
  }
  return r;
}

void RatioStats::add_row(int64_t base, const double* got, const double* ref, const double* bound,
                         const double* ideal, int64_t len) {
  if (budget_.exact) {
    for (int64_t j = 0; j < len; ++j) add(base + j, got[j], ref[j], bound[j], ideal[j]);
    return;
  }
  const FastBins& f = fast_bins();
  const BinConsts bc{f.lo_clamp, f.hi_clamp, f.slice0, f.zero_slice};
  const double atol = budget_.atol, rtol = budget_.rtol;
  alignas(64) double rb[kBlock];  // whole cache lines for the eight-lane stores
  alignas(64) int64_t sb[kBlock];
  for (int64_t j0 = 0; j0 < len; j0 += kBlock) {
    const int64_t nb = std::min<int64_t>(kBlock, len - j0);
    const double* g = got + j0;
    const double* rf = ref + j0;
    const double* bd = bound + j0;
    const double* id = ideal + j0;
    // Counts and maxima of the fast elements, four or eight at a time; their
    // ratios and histogram slices in rb and sb (-1: not fast).
    BlockScan sc;
    scan_block(g, rf, bd, id, nb, atol, rtol, max_forced, max_bound_ratio, bc, rb, sb, sc);
    n += sc.fast;
    over += sc.over;
    over_certified += sc.over_certified;
    max_forced = sc.max_forced > max_forced ? sc.max_forced : max_forced;
    max_bound_ratio = sc.max_bound_ratio > max_bound_ratio ? sc.max_bound_ratio : max_bound_ratio;
    // Every lane's bin, without a test: a lane that is not fast has sb =
    // zero_slice and rb = -1, bin 0, so bin 0 then holds nb - sc.fast counts
    // too many (those elements are counted by add() below, in their bins).
    for (int64_t j = 0; j < nb; ++j) ++hist.count[static_cast<size_t>(f.bin(sb[j], rb[j]))];
    hist.count[0] -= nb - sc.fast;
    // The block's largest ratio, first index on ties (looked for only when it
    // can beat `worst`, even at the block's first index).
    if (sc.max_r >= 0 && beats(sc.max_r, base + j0, worst)) {
      int64_t k = 0;
      while (rb[k] != sc.max_r) ++k;
      if (beats(sc.max_r, base + j0 + k, worst)) {
        const double tk = atol + rtol * std::fabs(rf[k]);
        const double ferr = std::fabs(id[k] - rf[k]);
        worst = Worst{base + j0 + k, sc.max_r, g[k], rf[k], std::fabs(g[k] - rf[k]), tk, bd[k],
                      ferr == 0.0 ? 0.0 : ferr / tk, id[k]};
      }
    }
    if (!sc.special) continue;
    // Rare: elements off the fast path go through add(); fast elements whose
    // comparison is uncertified update `uncertified` and `uncertain`. The
    // same arithmetic as scan_block decides which is which. (Every field is a
    // count or a maximum with a lowest-index tie rule, so the order in which
    // elements reach them does not matter.)
    for (int64_t j = 0; j < nb; ++j) {
      const FastElement e = fast_element(g[j], rf[j], bd[j], id[j], atol, rtol);
      if (!e.fast) {
        add(base + j0 + j, g[j], rf[j], bd[j], id[j]);
      } else if (!e.cert) {
        ++uncertified;
        const Worst w{base + j0 + j, e.r, g[j], rf[j], e.err, e.tol, bd[j], e.fr, id[j]};
        if (beats_uncertain(bound_over_tol(w), base + j0 + j, uncertain)) uncertain = w;
      }
    }
  }
}

void RatioStats::add_bf16_exact_row(int64_t base, const uint16_t* got, const uint16_t* expected, int64_t len) {
  if (!budget_.exact)
    throw std::logic_error("RatioStats::add_bf16_exact_row: output " + std::string(to_string(out_)) +
                           " has no exact budget");
  // Equal bits mean equal values (NaN with NaN, and the same sign of zero),
  // so add() would find ratio 0, forced 0, bound 0 (certified): it would
  // count the element in n and in histogram bin 0 and change nothing else,
  // unless the element became `worst` (none yet, or a tie at ratio 0 with a
  // higher index there). Those few go through add().
  if (worst.index >= 0 && (worst.ratio > 0.0 || base >= worst.index)) {
    // Then an equal element never becomes `worst` (the test below holds for
    // every j): when all bits are equal, count them at once (a loop that
    // vectorizes); else element by element below.
    uint16_t diff = 0;
    for (int64_t j = 0; j < len; ++j) diff |= static_cast<uint16_t>(got[j] ^ expected[j]);
    if (diff == 0) {
      n += len;
      hist.count[0] += len;
      return;
    }
  }
  int64_t same = 0;
  for (int64_t j = 0; j < len; ++j) {
    if (got[j] == expected[j] && worst.index >= 0 && (worst.ratio > 0.0 || base + j >= worst.index)) {
      ++same;
      continue;
    }
    const double e = static_cast<double>(bf16_to_float(expected[j]));
    add(base + j, static_cast<double>(bf16_to_float(got[j])), e, 0.0, e);
  }
  n += same;
  hist.count[0] += same;
}

void RatioStats::merge(const RatioStats& other) {
  if (other.out_ != out_)
    throw std::invalid_argument("RatioStats::merge: cannot merge " + std::string(to_string(other.out_)) +
                                " into " + std::string(to_string(out_)));
  n += other.n;
  over += other.over;
  nonfinite_fail += other.nonfinite_fail;
  max_forced = std::max(max_forced, other.max_forced);
  max_bound_ratio = std::max(max_bound_ratio, other.max_bound_ratio);
  uncertified += other.uncertified;
  over_certified += other.over_certified;
  if (other.worst.index >= 0 && beats(other.worst.ratio, other.worst.index, worst)) worst = other.worst;
  if (other.uncertain.index >= 0 && beats_uncertain(bound_over_tol(other.uncertain), other.uncertain.index, uncertain))
    uncertain = other.uncertain;
  hist.merge(other.hist);
}

}  // namespace normgate::validators
