// normgate/oracle/reference.h: FP64 reference for RMSNorm training, with a
// rigorous per-element bound on the oracle's own error.
//
// Math (plain form; x, dy BF16 [R, H] rows; w BF16 or FP32 [H]; eps > 0):
//   rstd_r = 1 / sqrt(mean_j x_rj^2 + eps)
//   y_rj   = x_rj * rstd_r * w_j
//   xhat   = x * rstd;  g = dy * w;  c_r = mean_j(g_rj * xhat_rj)
//   dx_rj  = rstd_r * (g_rj - xhat_rj * c_r)
//   dw_j   = sum_r dy_rj * xhat_rj
// (RMSNorm: Zhang & Sennrich 2019; gradient by the chain rule, as in every
// framework's reference implementation.)
//
// Sums (sum of squares, c_r, dw_j) use compensated FP64 summation (Ogita,
// Rump & Oishi 2005, Sum2/Dot2 with TwoSum/TwoProduct); rstd is carried as an
// unevaluated sum hi + lo (one Newton correction) so that dw's compensated sum
// is not spoiled by rstd's own rounding. Each returned value v comes with
// `bound` such that |v - exact| <= bound, where "exact" is the real-number
// result on the given BF16/FP32 inputs and the given double eps (the bounds
// follow Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed.,
// ch. 2-4, and ORO 2005 Sec. 4-5; the derivation is in src/reference.cpp).
// Typical sizes: rstd, y: ~1-2 ulp; dx, c: a few ulp of the terms (so more
// than an ulp of the result where g - xhat*c cancels); dw: ~u |dw| +
// ((R u)^2 + 2 R u^2 + (H/8 u)^2 + ~50 u^2) * dw_abs(j) (fp64 mode; (R u)^2
// alone in fp32_rounded mode), u = 2^-53. Every finite FP64 bound is at least
// 2^-1060 (~8e-320, an absolute floor from the rounding of the bound itself);
// values from MPFR (below) carry their own bounds, as small as 0 for exact results.
// eps is the given double (a kernel using float(eps) differs by that much:
// the reference is the problem as stated, and the kernel's rounding of eps is
// part of its error, charged against its budget).
//
// Non-finite inputs (NaN/Inf in x, dy or w): every output whose plain formula
// involves a non-finite value gets the IEEE-754 propagated value of the plain
// formula (NaN, +-Inf, or e.g. rstd = 0 for an Inf row) and bound = +inf,
// meaning "no real-number result; compare by IEEE class". A non-finite x row
// makes every dw bound +inf (its rstd enters every column).
//
// Threads: OpenMP over rows, and over column blocks for dw. Each column's sum
// visits rows in order r = 0..R-1 whatever the thread count, so results are
// bitwise identical for any number of threads.
//
// MPFR escalation (Options::oracle, default OracleMode::auto_): every FP64
// value whose bound exceeds EscalationPolicy::fraction (1e-3) times its
// tolerance tol = atol + rtol |v| (the validators' budgets, copied into
// EscalationPolicy) is recomputed with MPFR at 128 bits and more, with a
// rigorous bound again (derivation in src/mpfr_eval.h): a whole row (rstd, c,
// y, dx) when a y or dx element triggers, the row's rstd alone when rstd
// triggers (or when its FP32 rounding is not proven), a dw column when dw
// triggers. The escalated values replace the FP64 ones behind the same
// accessors; escalations() counts them. After escalation every finite bound
// is <= fraction * tol, except in units counted in Escalations::unmet
// (precision cap) or Escalations::skipped (EscalationPolicy::max_elements).
// OracleMode::mpfr computes in MPFR every row whose x, dy and w are finite,
// every rstd of a finite x row, and every dw column when all rows are finite
// (small cases; the tests' referee);
// OracleMode::fp64 never escalates. Values that are the IEEE propagation of
// non-finite inputs (bound +inf) are never escalated: there is no real-number
// result to compute. Escalation keeps results bitwise independent of threads.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "normgate/core/types.h"

namespace normgate::oracle {

/// A reference value and a rigorous bound on its absolute error.
/// bound == +inf: the value is the IEEE propagation of a non-finite input.
struct VB {
  double v = 0;
  double bound = 0;
};

/// Which rstd the backward part uses.
///  fp64:         the exact rstd (the oracle carries it to ~2^-80 relative and
///                bounds the rest): the reference.
///  fp32_rounded: the exact rstd rounded to the nearest FP32 (rstd_f32(r)), as
///                the forward hands it to the backward: the "ideal kernel" used
///                for admissibility and to split an error into the part the
///                interface forces. That float is then an exact input of the
///                backward (bounds do not include its distance to rstd).
enum class RstdMode { fp64, fp32_rounded };

/// Which oracle computes the reference (`normgate check --oracle`).
///  fp64:  the FP64 oracle alone (compensated sums, rigorous bounds, no MPFR).
///  auto_: FP64, and every value whose bound exceeds fraction * tol recomputed
///         in MPFR (EscalationPolicy): the default everywhere.
///  mpfr:  every value with finite inputs computed in MPFR (rows*cols <=
///         EscalationPolicy::mpfr_max_elements): slow, the referee of the tests.
enum class OracleMode : uint8_t { fp64 = 0, auto_ = 1, mpfr = 2 };

/// "fp64", "auto", "mpfr" ("?" outside the enum). Never throws.
std::string_view to_string(OracleMode m);
/// Parse "fp64" | "auto" | "mpfr". Throws std::invalid_argument naming the bad value.
OracleMode parse_oracle_mode(std::string_view s);

/// An element's tolerance, tol = atol + rtol * |v|, in the tensor's units.
struct Tolerance {
  double atol = 0;
  double rtol = 0;
};

/// When the oracle escalates a value to MPFR, and when MPFR stops.
/// The default tolerances are the validators' budget table (budget.h; a test
/// pins that they agree); validators::oracle_options() fills them from it.
struct EscalationPolicy {
  /// Escalate a value when its FP64 bound > fraction * tol(v) (or is not finite
  /// while its inputs are). 0 escalates every value with a non-zero bound.
  double fraction = 1e-3;
  /// MPFR stop rule per unit (a row, a dw column): every value of the unit is
  /// proven correctly rounded to binary64, or has bound <= target * tol(v).
  double target = 0x1p-20;
  int bits = 128;       ///< first MPFR precision (bits, >= 64); doubled until the stop rule holds
  int max_bits = 4096;  ///< precision cap (the bound stays rigorous if the rule is not met there)
  Tolerance y{1e-2, 1e-2}, rstd{0, 1e-5}, dx{1e-2, 1e-2}, dw{1e-4, 1e-4};
  /// OracleMode::mpfr refuses rows*cols above this (it stores y and dx: 32 bytes per element).
  int64_t mpfr_max_elements = int64_t{1} << 22;
  /// OracleMode::auto_ recomputes at most this many elements in MPFR (cols per
  /// escalated row, rows per escalated dw column; rows first, then columns, in
  /// index order): about 1 GiB and a few minutes on 2 cores at the default.
  /// Values beyond it keep their FP64 value and bound (Escalations::skipped),
  /// so the validators report those comparisons uncertified, never passed.
  int64_t max_elements = int64_t{1} << 25;
};

/// What escalation did for one Reference (counts are deterministic; seconds is not).
struct Escalations {
  OracleMode mode = OracleMode::auto_;
  int64_t rstd = 0;    ///< rows whose rstd (and FP32 rstd) came from MPFR
  int64_t y = 0;       ///< rows where a y bound exceeded fraction * tol (recomputed unless skipped)
  int64_t dx = 0;      ///< rows where a dx bound exceeded fraction * tol (recomputed unless skipped)
  int64_t rows = 0;    ///< rows whose c, y and dx all come from MPFR (union of y, dx; all in mpfr mode)
  int64_t dw = 0;      ///< dw columns from MPFR
  int64_t unmet = 0;   ///< units that reached max_bits without meeting the stop rule (bounds still rigorous)
  int64_t skipped = 0; ///< units (rows, dw columns) that triggered but exceeded max_elements: FP64 kept
  int max_bits = 0;    ///< highest MPFR precision used (0: none)
  double seconds = 0;  ///< wall time of the MPFR work (approximate: the in-row rstd part is per-thread time / threads)
  /// Any value at all came from MPFR.
  bool any() const { return rstd + rows + dw > 0; }
};

struct Options {
  int threads = 0;  ///< OpenMP threads; <= 0 means the OpenMP default
  RstdMode rstd = RstdMode::fp64;
  OracleMode oracle = OracleMode::auto_;  ///< see OracleMode
  EscalationPolicy escalation{};          ///< thresholds and precisions of the escalation
  /// Forward outputs only (a check whose dx and dw nobody reads: a gate case
  /// that only forward windows need). The row pass runs as always (row sums,
  /// rstd and rstd_f32, c, k, the y and dx row filter and the MPFR rows it
  /// triggers: a row escalated for its dx takes its y from MPFR too, so y and
  /// rstd are the same bits as without the flag, escalation counts included);
  /// the dw column pass (5), its finalization and the MPFR dw columns are
  /// skipped. The Reference then serves rstd, rstd_f32, y and c; dx, dx_row,
  /// dx_row_values, dw and dw_abs throw std::logic_error.
  bool forward_only = false;
};

/// The inputs of one plain-form problem (views; nothing is copied).
/// Requirements (else std::invalid_argument naming the bad field):
/// x and dy have equal rows() and cols >= 1; w.cols == x.cols; eps finite > 0;
/// non-null pointers when rows*cols > 0.
struct Problem {
  RowView<uint16_t> x;
  RowView<uint16_t> dy;
  WeightView w;
  double eps = 1e-6;
  /// Optional addend of dx (form res: dh_new, BF16 [rows, cols]; p == nullptr:
  /// none). The backward output is then dh = dx + dx_add: Reference::dx and
  /// dx_row return fl64(dx + a) with bound(dx) + 2^-52 |fl64(dx + a)| (the one
  /// FP64 rounding, Higham, Accuracy and Stability, 2nd ed., eq. 2.4);
  /// fp32_baseline rounds RN_fp32(dx + a) to BF16, as FP32 eager does.
  RowView<uint16_t> dx_add{};
};

/// Check a Problem's requirements; throws std::invalid_argument whose message
/// names the bad field ("x.cols", "dy.rows", "w.cols", "w.p", "eps", ...).
void validate(const Problem& p);

struct ReferencePair;

/// FP64 reference for one problem. compute() does the O(R*H) work once
/// (rstd, c per row, dw per column); y(r,j) and dx(r,j) are then O(1) each,
/// computed on demand from the inputs so a [131072, 6144] case needs no
/// [R,H] FP64 arrays. The Problem's buffers must outlive the Reference.
class Reference {
 public:
  /// Compute the reference. Throws std::invalid_argument on a bad Problem, on
  /// a bad EscalationPolicy (fraction or target negative or NaN, bits < 64,
  /// max_bits < bits, a tolerance negative, max_elements < 0) and, in OracleMode::mpfr, when
  /// rows*cols > escalation.mpfr_max_elements (the message says to use auto).
  static Reference compute(const Problem& p, const Options& o = {});
  /// Both references of one problem from one pass over its inputs: .ref in
  /// RstdMode::fp64 and .ideal in RstdMode::fp32_rounded (o.rstd is ignored;
  /// each result's options() holds its own mode). Every accessor of .ref
  /// (.ideal) returns bitwise what compute(p, o) with o.rstd = fp64
  /// (fp32_rounded) returns, escalation decisions and counts included; only
  /// Escalations::seconds differs: the in-row rstd MPFR work, done once for
  /// both (the rstd and its escalation do not depend on the mode), is counted
  /// in each. Shared: the row sums, rstd, rstd_f32 and the y part of the
  /// escalation filter, and one read of x and dy per element for both dw
  /// sums; per mode: c, k, the dx filter, dw, the MPFR rows and columns.
  /// About two thirds of the time of two compute() calls (5.3 vs 7.9 ns per
  /// element on one core of the 2-core dev box, H = 4096). Throws as compute().
  ///
  /// baseline (optional, may be null): receives bitwise what
  /// oracle::fp32_baseline(p, o.threads, false) returns (rstd [rows] and dw
  /// [cols] in binary32; y, dx and h_new empty), computed in the same pass:
  /// its dw terms from the x and dy the pair's column pass has just loaded,
  /// its sums of squares from rows still in cache (docs/perf/
  /// oracle-and-gate-throughput.md, D22). Its bits depend on neither
  /// o.threads nor the block shape. Throws std::invalid_argument when given
  /// with o.forward_only (there is no column pass to share); after any throw
  /// *baseline is unspecified.
  static ReferencePair compute_pair(const Problem& p, const Options& o = {}, Outputs* baseline = nullptr);

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  const Options& options() const { return o_; }

  /// rstd of row r with bound (the FP64 rstd even in fp32_rounded mode).
  VB rstd(int64_t r) const;
  /// The exact rstd of row r rounded to nearest binary32 (ties to even): the
  /// rstd the backward uses in fp32_rounded mode.
  float rstd_f32(int64_t r) const { return rs32_[r]; }
  /// True when rstd_f32(r) is proven to be RN(exact rstd): the oracle's
  /// enclosure of rstd does not contain an FP32 rounding boundary. False only
  /// for non-finite rows, FP32 overflow of rstd (eps < ~1e-77), or an enclosure
  /// straddling a midpoint (probability ~2^-55 per row; ~2^-28 when eps < 2^-900
  /// disables the hi+lo refinement); rstd_f32 is then the rounding of the
  /// oracle's best estimate hi + lo, still an exact input of the backward.
  bool rstd_f32_certain(int64_t r) const { return rs32_ok_[r] != 0; }
  /// y(r, j) (uses the FP64 rstd in both modes: the forward has no FP32 rstd input).
  VB y(int64_t r, int64_t j) const;
  /// dx(r, j) (uses the mode's rstd).
  VB dx(int64_t r, int64_t j) const;
  /// y(r, j) for j = 0..cols-1 into out[0..cols) (same values as y(r, j), faster).
  void y_row(int64_t r, VB* out) const;
  /// dx(r, j) for j = 0..cols-1 into out[0..cols) (same values as dx(r, j), faster).
  void dx_row(int64_t r, VB* out) const;
  /// Split accessors for columns j0..j0+n-1 of row r (0 <= j0, n >= 0, j0 + n
  /// <= cols; n = cols for the whole row), the layout the validators read:
  /// y_row / dx_row put y(r, j0+i).v (dx) into v[i] and its bound into
  /// bound[i]; dx_row_values puts dx(r, j0+i).v alone (no bounds computed:
  /// the ideal kernel's rows need none). Same bits as the VB accessors
  /// (every element is computed alone). The validators sweep a row in column
  /// tiles so their per-thread row buffers stay in L1.
  void y_row(int64_t r, int64_t j0, int64_t n, double* v, double* bound) const;
  void dx_row(int64_t r, int64_t j0, int64_t n, double* v, double* bound) const;
  void dx_row_values(int64_t r, int64_t j0, int64_t n, double* v) const;
  /// dw(j) (uses the mode's rstd). Throws std::logic_error when computed
  /// with Options::forward_only (so do dw_abs and the dx accessors).
  VB dw(int64_t j) const {
    if (o_.forward_only) not_computed("dw");
    return {dw_[j], dw_b_[j]};
  }
  /// c_r = mean_j(g*xhat) with bound (uses the mode's rstd).
  VB c(int64_t r) const { return {c_[r], c_b_[r]}; }
  /// Sum over rows of |dy_rj * xhat_rj| for column j (conditioning numerator;
  /// mode's rstd; an FP64 sum, relative error <= R u, not a bound).
  double dw_abs(int64_t j) const {
    if (o_.forward_only) not_computed("dw_abs");
    return dw_abs_[j];
  }
  /// True when computed with Options::forward_only (no dx, dw).
  bool forward_only() const { return o_.forward_only; }

  /// What escalation did (counts per tensor, precision, time).
  const Escalations& escalations() const { return esc_; }
  /// True when row r's c, y and dx come from MPFR.
  bool row_escalated(int64_t r) const { return row_slot_[r] >= 0; }
  /// True when row r's rstd (and rstd_f32) come from MPFR.
  bool rstd_escalated(int64_t r) const { return rs_mp_[r] != 0; }
  /// True when dw(j) comes from MPFR.
  bool dw_escalated(int64_t j) const { return dw_mp_[j] != 0; }

 private:
  Problem p_{};
  Options o_{};
  int64_t rows_ = 0, cols_ = 0;
  std::vector<double> w_;                     // w as binary64 [cols]
  std::vector<double> rs_hi_, rs_lo_, rs_e_;  // |hi + lo - rstd| <= e  [rows]
  std::vector<double> y_b_;                   // per-row factor of y's bound
  std::vector<float> rs32_;                   // RN_fp32(rstd)
  std::vector<uint8_t> rs32_ok_;              // rs32_ proven
  std::vector<double> use_, use_b_;           // rstd fed to the backward, |use - exact| bound
  std::vector<double> c_, c_b_;               // c_r
  std::vector<double> k_, k_b_;               // k_r = rstd_use * c_r (dx = rstd (g - x k))
  std::vector<double> dw_, dw_b_, dw_abs_;    // [cols]
  // MPFR escalation: rows with slot s >= 0 keep y and dx in esc_y_/esc_dx_[s*cols + j].
  std::vector<int32_t> row_slot_;             // [rows]
  std::vector<VB> esc_y_, esc_dx_;            // [slots * cols]
  std::vector<uint8_t> rs_mp_, dw_mp_;        // [rows], [cols]
  Escalations esc_{};
  // Throws std::logic_error: `what` is not computed in forward_only mode.
  [[noreturn]] static void not_computed(const char* what);
  friend class ReferenceBuilder;
};

/// The two references of Reference::compute_pair.
struct ReferencePair {
  Reference ref;    ///< RstdMode::fp64: the reference
  Reference ideal;  ///< RstdMode::fp32_rounded: the ideal kernel
};

/// FP32 baseline ("FP32 eager"): the same formulas in plain binary32, every
/// operation rounded to nearest (no FMA), each sum sequential over its index
/// in order. Exactly, with eps32 = RN_fp32(eps), Hf = float(H), x/dy/w as floats:
///   ss    = (((0 + x_0*x_0) + x_1*x_1) + ...)              j = 0..H-1
///   rstd  = 1.0f / sqrtf(ss / Hf + eps32)
///   xhat  = x * rstd;  y = bf16(xhat * w)                  (bf16: RN ties-even)
///   g     = dy * w;    cs = ((0 + g_0*xhat_0) + g_1*xhat_1) + ...;  c = cs / Hf
///   dx    = bf16(rstd * (g - xhat * c))
///   dw_j  = ((0 + dy_0j*xhat_0j) + dy_1j*xhat_1j) + ...    r = 0..R-1
/// It is the yardstick for "the kernel's dw error is not worse than FP32 eager
/// on the same inputs". Outputs are contiguous over rows (h_new empty).
/// Parallel over rows (and column blocks for dw); bitwise independent of threads.
/// rows_outputs == false: only rstd and dw (what "dw vs FP32" needs), the same
/// bits; y and dx stay empty, so neither their 2*R*H bytes nor their passes
/// are spent. A NaN rstd or dw is the default quiet NaN (+NaN, 0x7FC00000),
/// whatever NaN produced it: which operand's NaN a sum passes on is not
/// specified, and differs between vectorized loops. Throws
/// std::invalid_argument on a bad Problem.
Outputs fp32_baseline(const Problem& p, int threads = 0, bool rows_outputs = true);

}  // namespace normgate::oracle
