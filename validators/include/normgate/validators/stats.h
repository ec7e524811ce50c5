// normgate/validators/stats.h: streaming summary of err/tol over one tensor.
//
// Fed one element at a time (or merged from per-thread partials in a fixed
// order), so tensors of 10^9 elements are summarized without storing them.
// Every field is a count or a maximum (ties broken by lowest index), so the
// summary does not depend on the order elements are added or partials merged.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "normgate/validators/budget.h"

namespace normgate::validators {

/// Log-binned histogram of err/tol ratios. Bins are closed above, (lower, upper]:
///   bin 0                ratio == 0
///   bin 1                (0, 1e-8]                           (underflow)
///   bins 2 .. kBins-3    (10^(kMinDecade + (k-2)/kPerDecade),
///                         10^(kMinDecade + (k-1)/kPerDecade)]  (120 log bins)
///   bin kBins-2          (1e4, inf)                          (finite overflow)
///   bin kBins-1          +inf (and NaN ratios, which ratio() never returns)
/// Closed-above bins put ratio == 1 (the largest passing ratio) in the bin
/// whose upper edge is exactly 1, so quantile_upper(1) <= 1 iff every element passes.
struct Histogram {
  static constexpr int kMinDecade = -8;
  static constexpr int kMaxDecade = 4;
  static constexpr int kPerDecade = 10;
  static constexpr int kLogBins = (kMaxDecade - kMinDecade) * kPerDecade;
  static constexpr int kBins = 4 + kLogBins;
  std::array<int64_t, kBins> count{};
  /// Bin index of a ratio (any double; negative ratios, which cannot occur,
  /// go to bin 0). Never throws.
  static int bin(double ratio);
  /// Lower edge of bin k (exclusive; 0 for bins 0 and 1, 1e4 for bin kBins-2,
  /// inf for the last bin). Throws std::out_of_range for k outside [0, kBins).
  static double lower(int k);
  /// Upper edge of bin k (inclusive; 0 for bin 0, 1e-8 for bin 1, inf for the
  /// last two bins). upper(k) == lower(k+1) for k in [1, kBins-2).
  /// Throws std::out_of_range for k outside [0, kBins).
  static double upper(int k);
  /// Upper edge of the bin holding the q-quantile, q in [0,1] (the
  /// max(1, ceil(q*n))-th smallest ratio): an upper bound on it, resolution
  /// 10^(1/kPerDecade). 0 when empty. Throws std::invalid_argument for q
  /// outside [0,1] or NaN.
  double quantile_upper(double q) const;
  /// Total number of ratios counted.
  int64_t total() const;
  /// Add other's counts bin by bin.
  void merge(const Histogram& other);
};

/// The verdict of a tensor, a case or a campaign. pass and fail are certified:
/// they hold for every exact reference value within the oracle's bounds
/// (certified() in budget.h). inconclusive: no certain failure, but at least
/// one comparison could go either way within the oracle's bound; never a pass.
enum class Verdict : uint8_t { pass = 0, fail = 1, inconclusive = 2 };

/// "pass", "fail", "inconclusive" ("?" outside the enum). Never throws.
std::string_view to_string(Verdict v);

/// Combine verdicts: fail if any fails, else inconclusive if any is, else pass.
Verdict combine(Verdict a, Verdict b);

/// Everything reported about the worst element.
struct Worst {
  int64_t index = -1;   ///< flat element index (row-major over [rows, cols]); -1 when empty
  double ratio = 0;
  double got = 0, ref = 0;
  double err = 0;        ///< |got - ref|; 0 / inf when the non-finite rules pass / fail
  double tol = 0;        ///< tolerance(budget, ref)
  double bound = 0;      ///< oracle's error bound at this element
  double forced = 0;     ///< ratio(budget, ideal, ref): the part the interface forces
  double ideal = 0;      ///< the ideal kernel's value at this element (added)
};

/// Streaming per-tensor accumulator. add() in any order per thread; merge()
/// partials in a fixed order for thread-count-independent results (ties on the
/// max ratio keep the lowest index). Because every field is a count or a max
/// with a lowest-index tie rule, merging in index order gives exactly the
/// summary of one sequential pass (and so does any other merge order).
class RatioStats {
 public:
  /// Empty accumulator for output o with budget(o).
  explicit RatioStats(Output o) : out_(o), budget_(budget(o)) {}
  /// Add element `index` (>= 0): got, reference, oracle bound (|ref - exact|
  /// <= bound) and the ideal kernel's value (pass ref when there is no ideal).
  /// Computes ratio = ratio(budget, got, ref) and forced = ratio(budget, ideal,
  /// ref) and updates every field. bound/tol enters max_bound_ratio only for a
  /// finite ref (inf when tol == 0 < bound or bound is NaN). The comparison is
  /// certified or not by certified(budget, got, ref, bound). Returns the ratio.
  double add(int64_t index, double got, double ref, double bound, double ideal);
  /// add(base + j, got[j], ref[j], bound[j], ideal[j]) for j = 0..len-1, in
  /// that order, with the same result bit for bit; faster (the common case of
  /// finite values and a finite bound is done four or eight elements at a time,
  /// anything else goes through add()).
  void add_row(int64_t base, const double* got, const double* ref, const double* bound, const double* ideal,
               int64_t len);
  /// For an exact budget (h_new), on BF16 bit patterns: add(base + j, g, e,
  /// 0, e) for j = 0..len-1 in that order, g and e the values of got[j] and
  /// expected[j], with the same result bit for bit; faster (an element whose
  /// bits equal the expected bits, the common case, is counted without
  /// add()). Throws std::logic_error when the budget is not exact.
  void add_bf16_exact_row(int64_t base, const uint16_t* got, const uint16_t* expected, int64_t len);
  /// Fold another partial of the same output into this one. Throws
  /// std::invalid_argument when other.output() differs.
  void merge(const RatioStats& other);

  /// The output this summary is for.
  Output output() const { return out_; }
  /// The budget every ratio was computed with (budget(output())).
  const Budget& budget_used() const { return budget_; }
  int64_t n = 0;            ///< elements seen
  int64_t over = 0;         ///< elements with ratio > 1
  int64_t nonfinite_fail = 0;  ///< elements failing by the non-finite rules
  double max_forced = 0;    ///< max over elements of the forced ratio
  double max_bound_ratio = 0;  ///< max over elements of bound/tol (certification margin)
  int64_t uncertified = 0;     ///< comparisons whose verdict could flip within the oracle's bound
  int64_t over_certified = 0;  ///< elements over budget for every value within the bound (certain failures)
  Worst worst;
  /// The uncertified comparison with the largest bound/tol (ties: lowest
  /// index); index -1 when every comparison is certified.
  Worst uncertain;
  Histogram hist;
  /// fail when an element certainly fails, else inconclusive when a comparison
  /// is uncertified, else pass (an empty tensor passes).
  Verdict verdict() const;
  /// verdict() == pass: no element over budget and every comparison certified.
  bool pass() const { return verdict() == Verdict::pass; }
  /// verdict() == inconclusive.
  bool inconclusive() const { return verdict() == Verdict::inconclusive; }

 private:
  Output out_;
  Budget budget_;
};

/// Which implementation of RatioStats::add_row's block scan runs; both give
/// the same results bit for bit. `best` (the default) is eight lanes with
/// AVX-512 mask registers (validators/src/scan_avx512.cpp) where the build has
/// it (GCC on x86-64) and the CPU has AVX-512F, DQ and VL, else `clones`: four
/// lanes, compiled for AVX-512, AVX2 and the baseline, picked at load time.
enum class BlockScanImpl : uint8_t { best, clones };
/// For tests and benchmarks that compare the two: the implementation of
/// add_row calls made after it returns, process-wide; returns the previous
/// setting.
BlockScanImpl set_block_scan(BlockScanImpl impl);
/// True when `best` is the AVX-512 scan in this build on this CPU.
bool block_scan_avx512();

}  // namespace normgate::validators
