// normgate/validators/stats.h: streaming summary of err/tol over one tensor.
//
// Fed one element at a time (or merged from per-thread partials in a fixed
// order), so tensors of 10^9 elements are summarized without storing them.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "normgate/validators/budget.h"

namespace normgate::validators {

/// Log-binned histogram of err/tol: bin 0 holds ratio == 0; bins 1..kBins-2
/// cover [10^(k/kPerDecade + kMinDecade)...) decades from 1e-8 to 1e4; the last
/// bin holds inf (and NaN ratios, which cannot occur by construction).
struct Histogram {
  static constexpr int kMinDecade = -8;
  static constexpr int kMaxDecade = 4;
  static constexpr int kPerDecade = 10;
  static constexpr int kBins = 2 + (kMaxDecade - kMinDecade) * kPerDecade + 1;
  std::array<int64_t, kBins> count{};
  /// Bin index of a ratio.
  static int bin(double ratio);
  /// Lower edge of bin k (0 for bin 0, inf for the last bin).
  static double lower(int k);
  /// Upper edge of bin k.
  static double upper(int k);
  /// Upper edge of the bin holding quantile q in [0,1] (a bound on the
  /// q-quantile, resolution 10^(1/kPerDecade)). 0 when empty.
  double quantile_upper(double q) const;
};

/// Everything reported about the worst element.
struct Worst {
  int64_t index = -1;   ///< flat element index (row-major over [rows, cols])
  double ratio = 0;
  double got = 0, ref = 0, err = 0, tol = 0;
  double bound = 0;      ///< oracle's error bound at this element
  double forced = 0;     ///< |ideal - ref| / tol: the part the interface forces
};

/// Streaming per-tensor accumulator. add() in any order per thread; merge()
/// partials in a fixed order for thread-count-independent results (ties on the
/// max ratio keep the lowest index).
class RatioStats {
 public:
  explicit RatioStats(Output o) : out_(o), budget_(budget(o)) {}
  /// Add element `index`: got, reference, oracle bound, and the ideal kernel's
  /// value (pass ref when there is no ideal). Returns the ratio.
  double add(int64_t index, double got, double ref, double bound, double ideal);
  void merge(const RatioStats& other);

  Output output() const { return out_; }
  const Budget& budget_used() const { return budget_; }
  int64_t n = 0;            ///< elements seen
  int64_t over = 0;         ///< elements with ratio > 1
  int64_t nonfinite_fail = 0;  ///< elements failing by the non-finite rules
  double max_forced = 0;    ///< max over elements of the forced ratio
  double max_bound_ratio = 0;  ///< max over elements of bound/tol
  Worst worst;
  Histogram hist;
  bool pass() const { return over == 0; }

 private:
  Output out_;
  Budget budget_;
};

}  // namespace normgate::validators
