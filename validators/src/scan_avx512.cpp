// scan_avx512.cpp: RatioStats::add_row's block scan eight elements at a time,
// AVX-512 intrinsics with the lane tests in mask registers. The only file
// built with AVX-512 flags (validators/CMakeLists.txt); stats.cpp calls it
// where the CPU has AVX-512F, DQ and VL, else its own four-lane clones.
//
// Why intrinsics: GCC's vector extensions at 512 bits turn every `&` of
// comparison results into scalar code (docs/perf/oracle-and-gate-throughput.md,
// "Tried and rejected"); here a comparison is one instruction into a __mmask8,
// combined by the next comparison's write mask, and counted with popcount.
//
// Every lane performs stats.cpp's fast_element/scan4 operations on its
// element, in the same order and without contraction (-ffp-contract=off holds
// for this file too): tol = atol + rtol*|ref|, err = |got - ref|, the
// divisions err/tol, ferr/tol, |bound|/tol where those are nonzero (a
// zero-masked division gives the +0 of the scalar code), the fast test's sums
// ((|g| + |ref|) + |ideal|) + |bound| and (r + fr) + br. Only this file's
// includes may be compiled for AVX-512 (no inline functions shared with other
// files, see scan.h).
#include <immintrin.h>

#include <cstdint>

#include "scan.h"

// GCC 12 warns at every unmasked intrinsic whose result starts as
// _mm512_undefined_*(), a self-initialized variable by design.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace normgate::validators::scan {

namespace {

// Broadcast operands, built once per pass.
struct Consts {
  __m512d atol, rtol, rtol1, zero, one, minus1, max, inf, big, qf, qb, up, dn, lo, hi;
  __m512i slice0, zero_slice;
};

struct Acc {
  int64_t fast = 0, over = 0, overc = 0;
  __mmask8 uncert = 0;  // lanes where some fast element was uncertified
  __m512d mf, mb, mr;
};

inline __m512d vabs(__m512d a) { return _mm512_abs_pd(a); }

// scan4 of stats.cpp on eight lanes; lanes outside `valid` count nowhere and
// are neither loaded nor stored. Without kRatios fr and br are not computed
// (stats.cpp's quiet_factor): when a lane could be fast and might raise a
// maximum, or fail the fast test only through r + fr + br, it returns true
// at once (the block is then scanned again with kRatios, as scan_block does
// after a first pass that marked such a lane).
template <bool kRatios>
__attribute__((always_inline)) inline bool scan8(const double* g, const double* rf, const double* bd,
                                                 const double* id, __mmask8 valid, const Consts& c, double* rb,
                                                 int64_t* sb, Acc& a) {
  const __m512d G = _mm512_maskz_loadu_pd(valid, g), R = _mm512_maskz_loadu_pd(valid, rf);
  const __m512d B = _mm512_maskz_loadu_pd(valid, bd), I = _mm512_maskz_loadu_pd(valid, id);
  const __m512d aR = vabs(R);
  const __m512d tol = _mm512_add_pd(c.atol, _mm512_mul_pd(c.rtol, aR));
  const __m512d err = vabs(_mm512_sub_pd(G, R));
  // err == 0.0 ? 0 : err/tol; NaN != 0 (unordered), so NaN divides as in scan4.
  const __m512d r = _mm512_maskz_div_pd(_mm512_cmp_pd_mask(err, c.zero, _CMP_NEQ_UQ), err, tol);
  const __m512d ferr = vabs(_mm512_sub_pd(I, R));
  const __m512d ab = vabs(B);
  const __m512d sum = _mm512_add_pd(_mm512_add_pd(_mm512_add_pd(vabs(G), aR), vabs(I)), ab);
  __mmask8 fast = _mm512_mask_cmp_pd_mask(valid, sum, c.max, _CMP_LE_OQ);
  fast = _mm512_mask_cmp_pd_mask(fast, tol, c.zero, _CMP_GT_OQ);  // the finite lanes
  if constexpr (kRatios) {
    const __m512d fr = _mm512_maskz_div_pd(_mm512_cmp_pd_mask(ferr, c.zero, _CMP_NEQ_UQ), ferr, tol);
    const __m512d br = _mm512_maskz_div_pd(_mm512_cmp_pd_mask(B, c.zero, _CMP_NEQ_UQ), ab, tol);
    fast = _mm512_mask_cmp_pd_mask(fast, _mm512_add_pd(_mm512_add_pd(r, fr), br), c.inf, _CMP_LT_OQ);
    // max_pd(x, m) is x > m ? x : m, scan4's update; fast lanes hold no NaN.
    a.mf = _mm512_mask_max_pd(a.mf, fast, fr, a.mf);
    a.mb = _mm512_mask_max_pd(a.mb, fast, br, a.mb);
  } else {
    __mmask8 quiet = _mm512_mask_cmp_pd_mask(fast, r, c.big, _CMP_LT_OQ);
    quiet = _mm512_mask_cmp_pd_mask(quiet, ferr, _mm512_mul_pd(c.qf, tol), _CMP_LE_OQ);
    quiet = _mm512_mask_cmp_pd_mask(quiet, ab, _mm512_mul_pd(c.qb, tol), _CMP_LE_OQ);
    if (!_kortestc_mask8_u8(quiet, _knot_mask8(fast))) return true;  // quiet | ~fast not all ones
  }
  // certified(): true where bound == 0 (NaN != 0 here too, but NaN is never
  // fast); else by r <= 1. A fast lane's r is not NaN (finite err and tol >
  // 0), so "not r <= 1" is r > 1, the lanes over budget.
  const __mmask8 nz = _mm512_mask_cmp_pd_mask(fast, B, c.zero, _CMP_NEQ_UQ);
  const __mmask8 over = _mm512_mask_cmp_pd_mask(fast, r, c.one, _CMP_GT_OQ);
  const __m512d m = _mm512_mul_pd(c.rtol1, ab);
  const __mmask8 cert_le = _mm512_mask_cmp_pd_mask(_kandn_mask8(over, nz), _mm512_mul_pd(_mm512_add_pd(err, m), c.up),
                                                   _mm512_mul_pd(tol, c.dn), _CMP_LE_OQ);
  const __mmask8 cert_gt = _mm512_mask_cmp_pd_mask(_kand_mask8(nz, over), _mm512_mul_pd(err, c.dn),
                                                   _mm512_mul_pd(_mm512_add_pd(tol, m), c.up), _CMP_GT_OQ);
  const __mmask8 uncert = _kandn_mask8(_kor_mask8(cert_le, cert_gt), nz);  // fast and not certified
  a.fast += __builtin_popcount(_cvtmask8_u32(fast));
  a.over += __builtin_popcount(_cvtmask8_u32(over));
  a.overc += __builtin_popcount(_cvtmask8_u32(_kandn_mask8(uncert, over)));
  a.uncert = _kor_mask8(a.uncert, uncert);
  // rb: r for fast lanes, -1 for the others; sb: FastBins::slice(r) for
  // fast lanes, zero_slice for the others (add_row takes them out of bin 0).
  a.mr = _mm512_mask_max_pd(a.mr, fast, r, a.mr);
  _mm512_mask_storeu_pd(rb, valid, _mm512_mask_mov_pd(c.minus1, fast, r));
  // The clamp as max/min: they differ from scan4's selects only for NaN r,
  // which no fast lane has.
  const __m512d cl = _mm512_min_pd(_mm512_max_pd(r, c.lo), c.hi);
  const __m512i s = _mm512_srli_epi64(_mm512_castpd_si512(cl), 52 - kSubBits);
  const __m512i sl = _mm512_mask_sub_epi64(c.zero_slice, _mm512_mask_cmp_pd_mask(fast, r, c.zero, _CMP_GT_OQ), s, c.slice0);
  _mm512_mask_storeu_epi64(sb, valid, sl);
  return false;
}

// scan8 over n <= kBlock elements; true when the pass without kRatios stopped
// at a loud lane (its counts are then partial).
template <bool kRatios>
bool scan_pass(const double* g, const double* rf, const double* bd, const double* id, int64_t n, const Consts& c,
               double* rb, int64_t* sb, Acc& a) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    if (scan8<kRatios>(g + j, rf + j, bd + j, id + j, 0xFF, c, rb + j, sb + j, a)) return true;
  if (j < n)
    return scan8<kRatios>(g + j, rf + j, bd + j, id + j, static_cast<__mmask8>((1u << (n - j)) - 1), c, rb + j,
                          sb + j, a);
  return false;
}

}  // namespace

void scan_block_avx512(const double* g, const double* rf, const double* bd, const double* id, int64_t n,
                       double atol, double rtol, double qf, double qb, const BinConsts& bc, double* rb, int64_t* sb,
                       BlockScan& out) {
  const Consts c{_mm512_set1_pd(atol),  _mm512_set1_pd(rtol), _mm512_set1_pd(1 + rtol), _mm512_setzero_pd(),
                 _mm512_set1_pd(1.0),   _mm512_set1_pd(-1.0), _mm512_set1_pd(kMax),     _mm512_set1_pd(kInf),
                 _mm512_set1_pd(kBig),  _mm512_set1_pd(qf),   _mm512_set1_pd(qb),       _mm512_set1_pd(kUp),
                 _mm512_set1_pd(kDn),   _mm512_set1_pd(bc.lo), _mm512_set1_pd(bc.hi),   _mm512_set1_epi64(bc.slice0),
                 _mm512_set1_epi64(bc.zero_slice)};
  Acc a;
  a.mf = a.mb = _mm512_setzero_pd();
  a.mr = c.minus1;
  if (scan_pass<false>(g, rf, bd, id, n, c, rb, sb, a)) {  // rare once the maxima settle
    a = Acc{};
    a.mf = a.mb = _mm512_setzero_pd();
    a.mr = c.minus1;
    scan_pass<true>(g, rf, bd, id, n, c, rb, sb, a);
  }
  // The lanes' maxima as scan_block folds its four (all >= 0, or -1 for r).
  alignas(64) double mf[8], mb[8], mr[8];
  _mm512_store_pd(mf, a.mf);
  _mm512_store_pd(mb, a.mb);
  _mm512_store_pd(mr, a.mr);
  out.fast = a.fast;
  out.over = a.over;
  out.over_certified = a.overc;
  // Some element is not fast, or fast and uncertified.
  out.special = a.fast != n || a.uncert != 0;
  out.max_forced = 0;
  out.max_bound_ratio = 0;
  out.max_r = -1;
  for (int l = 0; l < 8; ++l) {
    out.max_forced = mf[l] > out.max_forced ? mf[l] : out.max_forced;
    out.max_bound_ratio = mb[l] > out.max_bound_ratio ? mb[l] : out.max_bound_ratio;
    out.max_r = mr[l] > out.max_r ? mr[l] : out.max_r;
  }
}

}  // namespace normgate::validators::scan
