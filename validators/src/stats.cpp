// stats.cpp: log-binned err/tol histogram and the streaming per-tensor summary.
#include "normgate/validators/stats.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "normgate/core/bf16.h"

namespace normgate::validators {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kMax = std::numeric_limits<double>::max();
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

// Fast search: a ratio r in (e[0], e[kLogBins]] is a positive normal double;
// its binary exponent x and the top kSubBits bits of its significand name a
// slice [lo, hi) of the line with hi/lo <= 1 + 2^-kSubBits = 1.0625.
// sub[slice] is the smallest i with e[i] >= lo. Edges are 10^(1/kPerDecade)
// ~ 1.26 apart, more than a slice is wide, so at most one edge lies in a
// slice and the answer (smallest i with r <= e[i]) is sub, or sub + 1 when
// e[sub] < r (then e[sub] is in [lo, r) and e[sub + 1] >= 1.26 lo > r).
// The edge array is padded with +inf so e[sub] is always readable.
struct FastBins {
  static constexpr int kPad = 4;
  static constexpr int kSubBits = 4;
  int exp_min = 0, exp_max = 0;
  std::vector<int16_t> sub;  // [(x - exp_min) << kSubBits | top bits]
  std::array<double, H::kLogBins + 1 + kPad> e{};
  /// Smallest i in [1, kLogBins] with r <= e[i], for r in (e[0], e[kLogBins]].
  int index(double r) const {
    const uint64_t bits = std::bit_cast<uint64_t>(r);
    const int x = static_cast<int>(bits >> 52) - 1023;  // r is positive and normal
    const int slice = ((x - exp_min) << kSubBits) | static_cast<int>((bits >> (52 - kSubBits)) & ((1u << kSubBits) - 1));
    const int i = sub[static_cast<size_t>(slice)];
    return i + (e[static_cast<size_t>(i)] < r);
  }
};

const FastBins& fast_bins() {
  static const FastBins f = [] {
    static_assert(H::kPerDecade <= 10, "FastBins assumes at most one edge per slice (edges >= 1.0625 apart)");
    FastBins b;
    const auto& e = edges();
    std::copy(e.begin(), e.end(), b.e.begin());
    std::fill(b.e.begin() + e.size(), b.e.end(), kInf);
    b.exp_min = std::ilogb(e.front());
    b.exp_max = std::ilogb(e.back());
    for (int x = b.exp_min; x <= b.exp_max; ++x)
      for (int m = 0; m < (1 << FastBins::kSubBits); ++m) {
        const double lo = std::ldexp(1.0 + std::ldexp(static_cast<double>(m), -FastBins::kSubBits), x);  // exact
        b.sub.push_back(static_cast<int16_t>(std::lower_bound(e.begin(), e.end(), lo) - e.begin()));
      }
    return b;
  }();
  return f;
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
  if (ratio <= f.e[0]) return 1;
  if (ratio > f.e[kLogBins]) return kBins - 2;
  // Smallest i in [1, kLogBins] with ratio <= e[i]; log bin i+1 is (e[i-1], e[i]].
  return f.index(ratio) + 1;
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
  const double atol = budget_.atol, rtol = budget_.rtol;
  constexpr double up = 1 + 0x1p-50, dn = 1 - 0x1p-50;  // as certified() (budget.h)
  // Running state of the fast path, folded into the fields by flush().
  int64_t cnt = 0, over_n = 0, overc_n = 0;
  double best = -1;
  int64_t best_j = -1;
  auto flush = [&] {
    n += cnt;
    over += over_n;
    over_certified += overc_n;
    cnt = over_n = overc_n = 0;
    if (best_j >= 0 && beats(best, base + best_j, worst)) {
      const int64_t k = best_j;
      const double tk = atol + rtol * std::fabs(ref[k]);
      const double ferr = std::fabs(ideal[k] - ref[k]);
      worst = Worst{base + k, best, got[k], ref[k], std::fabs(got[k] - ref[k]), tk, bound[k],
                    ferr == 0.0 ? 0.0 : ferr / tk, ideal[k]};
    }
    best = -1;
    best_j = -1;
  };
  for (int64_t j = 0; j < len; ++j) {
    const double g = got[j], rf = ref[j], b = bound[j], id = ideal[j];
    const double tol = atol + rtol * std::fabs(rf);
    const double err = std::fabs(g - rf);
    const double r = err == 0.0 ? 0.0 : err / tol;
    const double ferr = std::fabs(id - rf);
    const double fr = ferr == 0.0 ? 0.0 : ferr / tol;
    const double ab = std::fabs(b);
    const double br = b == 0.0 ? 0.0 : ab / tol;
    // The fast path needs what add() computes without its special cases:
    // finite got, ref, ideal and bound, tol > 0, finite ratios. Else add().
    // Tested as sums, with fewer branches: a NaN or inf term makes a sum
    // NaN or inf; finite terms whose sum overflows only send the element
    // to add() as well, which is always exact (the test need only be
    // sufficient). Ratios of finite values over tol > 0 are >= 0, not NaN.
    if (!(std::fabs(g) + std::fabs(rf) + std::fabs(id) + ab <= kMax && tol > 0.0 && r + fr + br < kInf)) {
      flush();
      add(base + j, g, rf, b, id);
      continue;
    }
    max_forced = fr > max_forced ? fr : max_forced;
    max_bound_ratio = br > max_bound_ratio ? br : max_bound_ratio;
    ++cnt;
    // Histogram::bin for a finite r >= 0.
    int k;
    if (r <= 0.0) {
      k = 0;
    } else if (r <= f.e[0]) {
      k = 1;
    } else if (r > f.e[H::kLogBins]) {
      k = H::kBins - 2;
    } else {
      k = 1 + f.index(r);
    }
    ++hist.count[k];
    bool cert = true;  // certified() for finite got/ref/bound, exact == false
    if (b != 0.0) {
      const double m = (1 + rtol) * ab;
      cert = r <= 1.0 ? (err + m) * up <= tol * dn : err * dn > (tol + m) * up;
    }
    if (r > 1.0) {
      ++over_n;
      overc_n += cert ? 1 : 0;
    }
    if (r > best) {
      best = r;
      best_j = j;
    }
    if (!cert) {
      ++uncertified;
      const Worst w{base + j, r, g, rf, err, tol, b, fr, id};
      if (beats_uncertain(bound_over_tol(w), base + j, uncertain)) uncertain = w;
    }
  }
  flush();
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
