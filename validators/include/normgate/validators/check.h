// normgate/validators/check.h: validate one implementation's outputs for one
// case against the oracle, element by element.
//
// Per tensor (budgets in budget.h; flat indices row-major over [rows, cols]):
//   y     BF16 [rows, cols]  vs ref.y(r,j);   ideal = BF16(ref.y)      (rounded once)
//   rstd  FP32 [rows]        vs ref.rstd(r);  ideal = ref.rstd_f32(r) = FP32(exact rstd)
//   dx    BF16 [rows, cols]  vs ref.dx(r,j);  ideal = BF16(ideal.dx)   (fp32_rounded rstd)
//   dw    FP32 [cols]        vs ref.dw(j);    ideal = FP32(ideal.dw)   (fp32_rounded rstd)
//   h_new BF16 [rows, cols]  exact vs a caller-provided BF16(h+u) (form res only)
// "ideal" is what a kernel that computes exactly and rounds once to the output
// dtype would return; its ratio is the part of the error the interface forces.
//
// Certification: every comparison is checked against the reference's error
// bound (certified() in budget.h). A tensor or case with an uncertified
// comparison and no certain failure is inconclusive, never a pass
// (RatioStats::verdict()). The oracle's MPFR escalation (oracle_options())
// keeps every bound below 1e-3 tol, so only comparisons within about
// 1e-3 (1 + rtol) of err/tol = 1 can stay uncertified.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "normgate/core/types.h"
#include "normgate/oracle/reference.h"
#include "normgate/validators/stats.h"

namespace normgate::validators {

/// The floor of a dw column's error in the comparison with FP32 eager
/// (CaseResult::dw_vs_fp32_worst): 2^-23, one FP32 ulp at 1.0, times the
/// column's mean term |dy*xhat| (oracle::Reference::dw_abs(j) / rows): about
/// the rounding of one product. An FP32 dot product that rounds every
/// product cancels an exactly negated pair exactly; one that fuses products
/// into FMAs keeps one product's rounding error there. Neither is more
/// accurate than the other by less than this, so an error below it counts
/// as this much for both; the floor is capped at the column's dw tolerance
/// (atol + rtol*|ref|), so an error over the budget always counts in full
/// (docs/perf/numerics.md, D6).
inline constexpr double kDwFp32Floor = 0x1p-23;

/// Result of validating one case.
struct CaseResult {
  std::vector<RatioStats> tensors;  ///< y, rstd, dx, dw (and h_new for res), in that order
  /// dw error relative to the FP32 baseline on the same inputs:
  /// max_j e(dw_got, j) / max_j e(dw_fp32, j) with each column's error floored
  /// at one FP32 ulp of its mean term, e(v, j) = max(|v - ref_j|, f_j), f_j =
  /// min(kDwFp32Floor * ref.dw_abs(j) / rows, tol_j) (0 where dw_abs(j) is
  /// not finite or rows == 0; tol_j the dw tolerance at ref_j) (NaN when no
  /// baseline given, 0/0 -> 1, x/0 -> inf for x > 0). A value <= 1 means "not worse than FP32 eager". Errors follow
  /// the non-finite rules: 0 where got matches a non-finite ref, inf where the
  /// rules fail. Why the floor: docs/perf/numerics.md, D6.
  double dw_vs_fp32_worst = 0;
  /// Median over columns of e(dw_got, j) / e(dw_fp32, j) (columns where the
  /// floored baseline error is 0, i.e. no baseline error and f_j = 0, are
  /// skipped; mean of the two middle values for an even count). NaN when no
  /// baseline is given or every column is skipped. Not bounded by the worst's
  /// guarantees: a column skipped before the floor enters at >= 1.
  double dw_vs_fp32_median = 0;
  /// Conditioning sum_r|dy*xhat| / |sum_r dy*xhat| = ref.dw_abs(j)/|ref.dw(j).v|
  /// of the worst dw column (the one at get(Output::dw).worst.index).
  /// 0/0 -> 1, x/0 -> inf. 0 when cols == 0.
  double dw_worst_condition = 0;
  /// Max over columns of the same conditioning (added). 0 when cols == 0.
  double dw_max_condition = 0;
  /// Combined verdict of the tensors (combine() over RatioStats::verdict()):
  /// fail when an element certainly fails, else inconclusive when a comparison
  /// is uncertified, else pass.
  Verdict verdict() const;
  /// verdict() == pass: no element over budget and every comparison certified.
  bool pass() const;
  /// verdict() == inconclusive.
  bool inconclusive() const { return verdict() == Verdict::inconclusive; }
  /// Uncertified comparisons over all tensors.
  int64_t uncertified() const;
  /// The stats of output o. Throws std::out_of_range when o was not validated
  /// (h_new outside form res).
  const RatioStats& get(Output o) const;
};

/// The oracle options a check uses: RstdMode `rstd`, OracleMode `mode`,
/// `threads` (<= 0: OpenMP default), and EscalationPolicy tolerances taken from
/// the budget table (budget()), so the oracle's "bound > 1e-3 tol" uses the
/// same tol as the verdict. Never throws.
oracle::Options oracle_options(oracle::RstdMode rstd, oracle::OracleMode mode = oracle::OracleMode::auto_,
                               int threads = 0);

/// Round a double to the nearest BF16 value (ties to even) in ONE rounding,
/// returned as binary32 (exact). Unlike round_bf16(float(v)) there is no
/// double rounding. BF16 subnormals (down to 2^-133) are produced; |v| at or
/// beyond (2 - 2^-8)*2^127 rounds to +-inf; NaN stays NaN; signs of 0 and inf
/// are kept. Never throws.
inline float round_to_bf16(double v);

/// out[j] = static_cast<double>(round_to_bf16(v[j])) for j = 0..n-1, bit for
/// bit (NaN payloads included); faster (vectorized; the validation sweep
/// rounds the oracle's rows with it). v and out must not overlap. Never throws.
void round_to_bf16_row(const double* v, int64_t n, double* out);

/// Form res's h_new in one rounding: out[j] = the BF16 bits of
/// round_to_bf16(BF16 a[j] + BF16 b[j]) (the sum exact in double), i.e.
/// bf16_from_float(round_to_bf16(static_cast<double>(bf16_to_float(a[j])) +
/// static_cast<double>(bf16_to_float(b[j])))), bit for bit, except that when
/// both are NaN the result is always a[j]'s NaN, quieted (IEEE lets the sum
/// take either payload; which one the expression gives depends on the
/// compiler's operand order). Computed as bf16_sum_rn (TwoSum in binary32)
/// without branches, vectorized. out must not overlap a or b. Never throws.
void round_sum_to_bf16_row(const uint16_t* a, const uint16_t* b, int64_t n, uint16_t* out);

/// Validate `got` for problem p. `ref` is the FP64 reference (RstdMode::fp64);
/// `ideal` the same problem in RstdMode::fp32_rounded (used for the forced
/// part of dx/dw errors; y/rstd forced parts come from rounding ref once).
/// `baseline` is the FP32 baseline's outputs (may be null; only its dw is read).
/// `threads` <= 0 means the OpenMP default; the result is bitwise identical for
/// every thread count.
/// Sizes (rows = p.x.rows(), cols = p.x.cols): got.y, got.dx rows*cols;
/// got.rstd rows; got.dw cols; baseline->dw cols; ref and ideal rows x cols.
/// Throws std::invalid_argument if any output has the wrong size (the message
/// names the tensor, the expected and the actual size), if got.h_new is
/// non-empty (use the overload below with the expected h_new), or if ref /
/// ideal were not computed with RstdMode::fp64 / RstdMode::fp32_rounded.
CaseResult validate_case(const oracle::Problem& p, const Outputs& got, const oracle::Reference& ref,
                         const oracle::Reference& ideal, const Outputs* baseline, int threads = 0);

/// As above, and additionally (added) checks got.h_new bitwise against
/// `h_new_expected` (BF16 bits [rows, cols], the oracle's BF16(h+u)) when
/// h_new_expected is non-empty; the result then has a fifth tensor, h_new.
/// Throws std::invalid_argument when h_new_expected is non-empty and either it
/// or got.h_new is not rows*cols elements, or when h_new_expected is empty but
/// got.h_new is not.
CaseResult validate_case(const oracle::Problem& p, const Outputs& got, const oracle::Reference& ref,
                         const oracle::Reference& ideal, const Outputs* baseline, int threads,
                         std::span<const uint16_t> h_new_expected);

/// Validate several implementations' outputs of the same problem in one sweep:
/// the oracle's rows are evaluated once and serve every entry of `gots`, and a
/// tensor that is bitwise identical to an earlier entry's (same y from one
/// forward, dx from the same row code) is validated once and its statistics
/// copied (identical inputs give identical statistics). Returns one CaseResult per entry, each equal to what validate_case would
/// return for it. Throws as validate_case (and for a null entry).
std::vector<CaseResult> validate_cases(const oracle::Problem& p, const std::vector<const Outputs*>& gots,
                                       const oracle::Reference& ref, const oracle::Reference& ideal,
                                       const Outputs* baseline, int threads = 0,
                                       std::span<const uint16_t> h_new_expected = {});

/// One output tensor by reference: a view of elements the caller owns (a
/// vector, or a buffer handed in through the C API, validated in place), or
/// "not given". Given-but-empty (T = 0) differs from not given.
template <class T>
class TensorRef {
 public:
  TensorRef() = default;
  /// A vector's elements; nullptr: not given.
  TensorRef(const std::vector<T>* v) : s_(v ? std::span<const T>(*v) : std::span<const T>()), given_(v != nullptr) {}
  /// n elements at p (p may be null only when n == 0).
  TensorRef(const T* p, size_t n) : s_(p, n), given_(true) {}
  explicit operator bool() const { return given_; }
  const T* data() const { return s_.data(); }
  size_t size() const { return s_.size(); }
  bool empty() const { return s_.empty(); }
  const T& operator[](size_t i) const { return s_[i]; }
  using value_type = T;

 private:
  std::span<const T> s_;
  bool given_ = false;
};

/// The tensors of one implementation's outputs, by reference: several
/// implementations may point at the same elements (a tensor they share, e.g.
/// the y of one forward), which are then validated once without comparing.
/// A tensor not given is refused by validate_cases and means "not produced"
/// to validate_present.
struct OutputsRef {
  TensorRef<uint16_t> y;
  TensorRef<float> rstd;
  TensorRef<uint16_t> dx;
  TensorRef<float> dw;
  TensorRef<uint16_t> h_new;
  static OutputsRef of(const Outputs& o) { return {&o.y, &o.rstd, &o.dx, &o.dw, &o.h_new}; }
};

/// validate_cases over references (as above; a null pointer in any entry
/// throws std::invalid_argument).
std::vector<CaseResult> validate_cases(const oracle::Problem& p, const std::vector<OutputsRef>& gots,
                                       const oracle::Reference& ref, const oracle::Reference& ideal,
                                       const Outputs* baseline, int threads = 0,
                                       std::span<const uint16_t> h_new_expected = {});

/// One implementation that produced only some of the outputs (a forward
/// alone, a kernel under test from outside normgate: the C API's
/// ng_oracle_validate). As validate_cases for one entry, except that a null
/// pointer in `got` means "not produced": that output is skipped and left out
/// of CaseResult::tensors (the others keep their order), and the oracle's y
/// or dx rows are not evaluated when y or dx is absent. Without dw,
/// dw_vs_fp32_worst/median are NaN and dw_worst/max_condition 0. h_new is
/// validated when got.h_new is non-null and h_new_expected non-empty.
/// Throws std::invalid_argument as validate_cases (the size of every given
/// tensor), and when every pointer of `got` is null.
CaseResult validate_present(const oracle::Problem& p, const OutputsRef& got, const oracle::Reference& ref,
                            const oracle::Reference& ideal, const Outputs* baseline, int threads = 0,
                            std::span<const uint16_t> h_new_expected = {});
/// validate_present for several implementations of one problem in one sweep,
/// sharing the oracle's rows and bitwise-identical tensors as validate_cases
/// does; each result equals validate_present's for that entry alone. The
/// dx and dw of a Reference computed with oracle::Options::forward_only
/// throw std::logic_error: leave them absent in every entry. Throws as
/// validate_present (for any entry).
std::vector<CaseResult> validate_present(const oracle::Problem& p, const std::vector<OutputsRef>& gots,
                                         const oracle::Reference& ref, const oracle::Reference& ideal,
                                         const Outputs* baseline, int threads = 0,
                                         std::span<const uint16_t> h_new_expected = {});

// Definition (inline: called per element; the validation sweep rounds whole rows with round_to_bf16_row).
inline float round_to_bf16(double v) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  constexpr double kMaxBf16 = 0x1.fep+127;  // largest finite BF16, 0x7F7F = (2 - 2^-7) * 2^127
  // Fast path, |v| in BF16's normal range [2^-126, 2^128): round the binary64
  // significand (52 fraction bits) to BF16's 7 in the bits, ties to even; a
  // carry into the exponent is the correct round-up to the next binade.
  const uint64_t bits = std::bit_cast<uint64_t>(v);
  const uint64_t mag = bits & 0x7FFFFFFFFFFFFFFFull;
  constexpr uint64_t kMinNormal = uint64_t{1023 - 126} << 52;  // 2^-126
  constexpr uint64_t kTwo128 = uint64_t{1023 + 128} << 52;     // 2^128
  if (mag >= kMinNormal && mag < kTwo128) {
    constexpr int kDrop = 52 - 7;
    const uint64_t lsb = (mag >> kDrop) & 1u;
    const uint64_t r = (mag + ((uint64_t{1} << (kDrop - 1)) - 1) + lsb) & ~((uint64_t{1} << kDrop) - 1);
    const double out = std::bit_cast<double>(r | (bits & 0x8000000000000000ull));
    if (std::fabs(out) > kMaxBf16) return static_cast<float>(std::copysign(kInf, v));
    return static_cast<float>(out);  // exact: a BF16 value
  }
  if (!std::isfinite(v) || v == 0.0) return static_cast<float>(v);  // NaN (quiet, sign kept), +-inf, +-0
  // BF16 has 8 significant bits; its quantum at binade e is 2^(e-7), with
  // e clamped at the smallest normal exponent -126 (subnormals, quantum 2^-133).
  int e = std::ilogb(v);
  if (e < -126) e = -126;
  const double scaled = std::ldexp(v, 7 - e);     // exact: scaling by a power of two
  const double n = std::nearbyint(scaled);        // the one rounding (ties to even)
  const double r = std::ldexp(n, e - 7);          // exact
  if (std::fabs(r) > kMaxBf16) return static_cast<float>(std::copysign(kInf, v));
  return static_cast<float>(r);                   // exact: r is a BF16 value
}

}  // namespace normgate::validators
