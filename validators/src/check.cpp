// check.cpp: validate one case's outputs against the FP64 oracle.
#include "normgate/validators/check.h"

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <cmath>
#include <exception>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>

#include "normgate/core/bf16.h"

namespace normgate::validators {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

void check_size(const char* what, size_t actual, int64_t expected, const std::string& shape) {
  if (static_cast<int64_t>(actual) != expected)
    throw std::invalid_argument(std::string("validate_case: ") + what + " has " + std::to_string(actual) +
                                " elements, expected " + std::to_string(expected) + " (" + shape + ")");
}

// |got - ref| under the non-finite rules: 0 where they pass, inf where they fail.
double rule_err(double got, double ref) {
  if (std::isfinite(got) && std::isfinite(ref)) return std::fabs(got - ref);
  return nonfinite_failure(got, ref) ? kInf : 0.0;
}

// a / b for non-negative errors with equal values (0/0, inf/inf) -> 1, x/0 -> inf.
double err_quotient(double a, double b) {
  if (a == b) return 1.0;
  if (b == 0.0) return kInf;
  return a / b;  // b > 0; a, b not both inf here
}

// The floor of column j's errors in the comparison with the FP32 baseline:
// kDwFp32Floor * sum_r |dy*xhat| / rows, the column's mean term (0 where that
// sum is not finite or there are no rows), and never above the column's dw
// tolerance (an error over the budget always counts), check.h.
double fp32_floor(const oracle::Reference& ref, int64_t j, int64_t rows, double tol) {
  const double a = ref.dw_abs(j);
  const double f = std::isfinite(a) && rows > 0 ? kDwFp32Floor * (a / static_cast<double>(rows)) : 0.0;
  return tol >= 0.0 && f > tol ? tol : f;  // a NaN tol (NaN ref) leaves f
}

// sum|dy*xhat| / |sum dy*xhat| for column j; 0/0 -> 1, x/0 -> inf, NaN -> inf.
double condition(const oracle::Reference& ref, int64_t j) {
  const double num = ref.dw_abs(j);
  const double den = std::fabs(ref.dw(j).v);
  if (den == 0.0) return num == 0.0 ? 1.0 : kInf;
  const double c = num / den;
  return std::isnan(c) ? kInf : c;
}

double median_of(std::vector<double>& v) {
  if (v.empty()) return kNaN;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  const double hi = v[mid];
  if (v.size() % 2 == 1) return hi;
  const double lo = *std::max_element(v.begin(), v.begin() + mid);
  if (lo == hi) return hi;   // also covers inf, inf
  return lo + (hi - lo) / 2;  // no overflow
}

// a == b bit for bit (same size, same bytes); compared in nt slices in parallel.
template <class V>
bool bitwise_equal(const V& a, const V& b, int nt) {
  if (a.size() != b.size()) return false;
  const size_t bytes = a.size() * sizeof(typename V::value_type);
  if (bytes == 0 || a.data() == b.data()) return true;
  const auto* pa = reinterpret_cast<const unsigned char*>(a.data());
  const auto* pb = reinterpret_cast<const unsigned char*>(b.data());
  const int64_t slices = std::max<int64_t>(1, std::min<int64_t>(nt, static_cast<int64_t>(bytes >> 20)));
  int differ = 0;
#pragma omp parallel for num_threads(static_cast<int>(slices)) reduction(| : differ) schedule(static)
  for (int64_t i = 0; i < slices; ++i) {
    const size_t lo = bytes * static_cast<size_t>(i) / static_cast<size_t>(slices);
    const size_t hi = bytes * static_cast<size_t>(i + 1) / static_cast<size_t>(slices);
    differ |= std::memcmp(pa + lo, pb + lo, hi - lo) != 0 ? 1 : 0;
  }
  return differ == 0;
}

// The sweep's per-row conversions, compiled three times (AVX-512, AVX2 and
// the build's baseline) and picked at load time (GCC target_clones), as the
// oracle's hot loops (oracle/src/eft.h); integer and IEEE operations only, so
// every clone gives the same bits.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(NORMGATE_NO_AVX512_CLONES)
#define NG_SWEEP_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#elif defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define NG_SWEEP_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))  // NORMGATE_HOST_AVX512=OFF
#else
#define NG_SWEEP_CLONES
#endif

// out[j] = BF16 value of bits in[j], as a double (exact), j < n.
NG_SWEEP_CLONES void widen_bf16_row(const uint16_t* __restrict in, int64_t n, double* __restrict out) {
  for (int64_t j = 0; j < n; ++j) out[j] = static_cast<double>(bf16_to_float(in[j]));
}

}  // namespace

// round_to_bf16's fast path (|v| in BF16's normal range) written without branches, so that
// it vectorizes; the rare other elements (zeros, subnormals, NaN, inf) are
// redone by round_to_bf16 itself. The fast path's result in bits: the
// rounded magnitude r, or +inf's bits when r > the largest finite BF16
// (round_to_bf16 returns +-inf there), with v's sign; as a double it equals
// round_to_bf16's float widened (a BF16 value, or +-inf).
NG_SWEEP_CLONES void round_to_bf16_row(const double* __restrict v, int64_t n, double* __restrict out) {
  constexpr uint64_t kSign = 0x8000000000000000ull;
  constexpr uint64_t kMinNormal = uint64_t{1023 - 126} << 52;  // 2^-126
  constexpr uint64_t kTwo128 = uint64_t{1023 + 128} << 52;     // 2^128
  constexpr uint64_t kMaxBf16 = 0x47EFE00000000000ull;         // bits of 0x1.fep+127
  constexpr uint64_t kInfBits = 0x7FF0000000000000ull;
  constexpr int kDrop = 52 - 7;
  uint64_t slow = 0;
  for (int64_t j = 0; j < n; ++j) {
    const uint64_t bits = std::bit_cast<uint64_t>(v[j]);
    const uint64_t mag = bits & ~kSign;
    const uint64_t lsb = (mag >> kDrop) & 1u;
    uint64_t r = (mag + ((uint64_t{1} << (kDrop - 1)) - 1) + lsb) & ~((uint64_t{1} << kDrop) - 1);
    r = r > kMaxBf16 ? kInfBits : r;
    out[j] = std::bit_cast<double>(r | (bits & kSign));
    slow |= static_cast<uint64_t>(mag < kMinNormal) | static_cast<uint64_t>(mag >= kTwo128);
  }
  if (slow == 0) return;
  for (int64_t j = 0; j < n; ++j) {
    const uint64_t mag = std::bit_cast<uint64_t>(v[j]) & ~kSign;
    if (mag < kMinNormal || mag >= kTwo128) out[j] = static_cast<double>(round_to_bf16(v[j]));
  }
}

// bf16_sum_rn (core/bf16.h) without branches, 8 lanes of binary32: TwoSum
// gives s = RN_fp32(a + b) and its exact error e; when s is a BF16 midpoint
// (low 16 bits 0x8000) and e != 0, the exact sum lies on e's side of it
// (round away from zero when e has s's sign, toward zero otherwise), else
// RN_bf16(s) (ties to even) is the sum rounded once. +-inf needs nothing more
// (its low bits are 0); a NaN sum is redone element by element, a NaN a[j]
// giving its own payload (quieted) also when b[j] is NaN. Equal bit for bit to
// bf16_from_float(round_to_bf16(double sum)) for all 2^32 pairs of BF16
// inputs (NaN + NaN aside, see check.h; checked exhaustively once, on a
// stride over them in tests/validators/test_check.cpp).
NG_SWEEP_CLONES void round_sum_to_bf16_row(const uint16_t* __restrict a, const uint16_t* __restrict b, int64_t n,
                                           uint16_t* __restrict out) {
  uint32_t nan = 0;
  for (int64_t j = 0; j < n; ++j) {
    const float fa = bf16_to_float(a[j]), fb = bf16_to_float(b[j]);
    const float s = fa + fb;
    const float bb = s - fa;
    const float e = (fa - (s - bb)) + (fb - bb);  // exact: (a + b) - s (no contraction: -ffp-contract=off)
    const uint32_t u = std::bit_cast<uint32_t>(s);
    const uint32_t eb = std::bit_cast<uint32_t>(e);
    // Masks and selects, no branches: the loop vectorizes.
    const uint32_t mid = static_cast<uint32_t>((u & 0xFFFFu) == 0x8000u) & static_cast<uint32_t>((eb & 0x7FFFFFFFu) != 0);
    const uint32_t away = static_cast<uint32_t>(((eb ^ u) >> 31) == 0);
    const uint32_t rn = u + 0x7FFFu + ((u >> 16) & 1u);
    const uint32_t off = away ? u + 0x8000u : u - 0x8000u;
    out[j] = static_cast<uint16_t>((mid ? off : rn) >> 16);
    nan |= static_cast<uint32_t>((u & 0x7FFFFFFFu) > 0x7F800000u);
  }
  if (nan == 0) return;
  for (int64_t j = 0; j < n; ++j) {
    const float fa = bf16_to_float(a[j]);
    const float s = fa + bf16_to_float(b[j]);
    // Both NaN: IEEE leaves the payload to either operand (the hardware takes
    // the first, a compiler may swap them); always a's, quieted.
    if (std::isnan(s)) out[j] = bf16_from_float(std::isnan(fa) ? fa : s);
  }
}

Verdict CaseResult::verdict() const {
  Verdict v = Verdict::pass;
  for (const RatioStats& s : tensors) v = combine(v, s.verdict());
  return v;
}

bool CaseResult::pass() const { return verdict() == Verdict::pass; }

int64_t CaseResult::uncertified() const {
  int64_t n = 0;
  for (const RatioStats& s : tensors) n += s.uncertified;
  return n;
}

oracle::Options oracle_options(oracle::RstdMode rstd, oracle::OracleMode mode, int threads) {
  oracle::Options o;
  o.threads = threads;
  o.rstd = rstd;
  o.oracle = mode;
  auto tol = [](Output out) {
    const Budget b = budget(out);
    return oracle::Tolerance{b.atol, b.rtol};
  };
  o.escalation.y = tol(Output::y);
  o.escalation.rstd = tol(Output::rstd);
  o.escalation.dx = tol(Output::dx);
  o.escalation.dw = tol(Output::dw);
  return o;
}

const RatioStats& CaseResult::get(Output o) const {
  for (const RatioStats& s : tensors)
    if (s.output() == o) return s;
  throw std::out_of_range("CaseResult::get: output " + std::string(to_string(o)) + " was not validated");
}

CaseResult validate_case(const oracle::Problem& p, const Outputs& got, const oracle::Reference& ref,
                         const oracle::Reference& ideal, const Outputs* baseline, int threads) {
  if (!got.h_new.empty())
    throw std::invalid_argument("validate_case: got.h_new has " + std::to_string(got.h_new.size()) +
                                " elements but no expected h_new was given (expected 0 elements, "
                                "or call the overload with h_new_expected)");
  return validate_case(p, got, ref, ideal, baseline, threads, {});
}

CaseResult validate_case(const oracle::Problem& p, const Outputs& got, const oracle::Reference& ref,
                         const oracle::Reference& ideal, const Outputs* baseline, int threads,
                         std::span<const uint16_t> h_new_expected) {
  return validate_cases(p, {&got}, ref, ideal, baseline, threads, h_new_expected).front();
}

std::vector<CaseResult> validate_cases(const oracle::Problem& p, const std::vector<const Outputs*>& gots,
                                       const oracle::Reference& ref, const oracle::Reference& ideal,
                                       const Outputs* baseline, int threads,
                                       std::span<const uint16_t> h_new_expected) {
  std::vector<OutputsRef> refs;
  for (const Outputs* g : gots) {
    if (!g) throw std::invalid_argument("validate_cases: null outputs");
    refs.push_back(OutputsRef::of(*g));
  }
  return validate_cases(p, refs, ref, ideal, baseline, threads, h_new_expected);
}

namespace {

// The one validation sweep behind validate_cases and validate_present. With
// allow_absent a null tensor pointer means "not produced": that output is
// skipped and left out of the result; otherwise a null pointer throws.
std::vector<CaseResult> sweep(const oracle::Problem& p, const std::vector<OutputsRef>& gots,
                              const oracle::Reference& ref, const oracle::Reference& ideal, const Outputs* baseline,
                              int threads, std::span<const uint16_t> h_new_expected, bool allow_absent) {
  const int64_t rows = p.x.rows();
  const int64_t cols = p.x.cols;
  const std::string rc = "rows*cols = " + std::to_string(rows) + "*" + std::to_string(cols);
  const std::string rs = "rows = " + std::to_string(rows);
  const std::string cs = "cols = " + std::to_string(cols);
  if (rows < 0 || cols < 0)
    throw std::invalid_argument("validate_case: problem has negative extent (" + rc + ")");
  if (ref.options().rstd != oracle::RstdMode::fp64)
    throw std::invalid_argument("validate_case: ref must be computed with RstdMode::fp64");
  if (ideal.options().rstd != oracle::RstdMode::fp32_rounded)
    throw std::invalid_argument("validate_case: ideal must be computed with RstdMode::fp32_rounded");
  check_size("ref rows", static_cast<size_t>(ref.rows()), rows, rs);
  check_size("ref cols", static_cast<size_t>(ref.cols()), cols, cs);
  check_size("ideal rows", static_cast<size_t>(ideal.rows()), rows, rs);
  check_size("ideal cols", static_cast<size_t>(ideal.cols()), cols, cs);
  const bool do_h = !h_new_expected.empty();
  if (do_h) check_size("h_new_expected", h_new_expected.size(), rows * cols, rc);
  for (const OutputsRef& got : gots) {
    if (!allow_absent && (!got.y || !got.rstd || !got.dx || !got.dw || !got.h_new))
      throw std::invalid_argument("validate_cases: null outputs");
    if (!got.y && !got.rstd && !got.dx && !got.dw && !got.h_new)
      throw std::invalid_argument("validate_present: no output given (every tensor pointer is null)");
    if (got.y) check_size("got.y", got.y.size(), rows * cols, rc);
    if (got.rstd) check_size("got.rstd", got.rstd.size(), rows, rs);
    if (got.dx) check_size("got.dx", got.dx.size(), rows * cols, rc);
    if (got.dw) check_size("got.dw", got.dw.size(), cols, cs);
    if (got.h_new && do_h) {
      check_size("got.h_new", got.h_new.size(), rows * cols, rc);
    } else if (got.h_new && !got.h_new.empty()) {
      check_size("got.h_new (no h_new_expected given)", got.h_new.size(), 0, "nothing to compare with");
    }
  }
  if (baseline) check_size("baseline->dw", baseline->dw.size(), cols, cs);
  const size_t ng = gots.size();
  const int nt = threads > 0 ? threads : std::max(1, omp_get_max_threads());

  // Implementations that share a kernel (every backward variant runs after the
  // same forward; dx is often computed by the same row code) hand in bitwise
  // identical tensors. Their element statistics are identical by construction,
  // so each distinct tensor is validated once: src[k] is the first
  // implementation whose tensor equals implementation k's, bit for bit.
  // Absent tensors (null) are their own source and never compared.
  auto sources = [&](auto member) {
    std::vector<size_t> src(ng);
    for (size_t k = 0; k < ng; ++k) {
      src[k] = k;
      if (!(gots[k].*member)) continue;
      for (size_t q = 0; q < k; ++q)
        if (src[q] == q && gots[q].*member && bitwise_equal(gots[q].*member, gots[k].*member, nt)) {
          src[k] = q;
          break;
        }
    }
    return src;
  };
  const std::vector<size_t> ysrc = sources(&OutputsRef::y), rsrc = sources(&OutputsRef::rstd),
                            dsrc = sources(&OutputsRef::dx), hsrc = sources(&OutputsRef::h_new);
  // The oracle's y and dx rows are evaluated only when some entry has them.
  bool any_y = false, any_dx = false;
  for (const OutputsRef& got : gots) {
    any_y = any_y || static_cast<bool>(got.y);
    any_dx = any_dx || static_cast<bool>(got.dx);
  }

  // --- y, rstd, dx (and h_new): OpenMP over rows, dynamic schedule (chunks
  // of about 8192 elements), so a thread that runs slower (an SMT sibling,
  // another process on its core) takes fewer rows instead of holding the
  // others at the end. Which thread summarizes which rows then varies from
  // run to run; the result does not: every RatioStats field is a count, a
  // sum of counts or a maximum with a lowest-index tie rule (stats.h), and a
  // row's elements reach add_row / add_bf16_exact_row in the same tiles
  // whatever thread takes it, so each element is summarized by the same
  // arithmetic and merging the partials (in thread order) gives the
  // sequential summary, bit for bit. The oracle's rows are evaluated once and
  // serve every implementation.
  //
  // Each row is swept in tiles of kTile columns, tile after tile: every
  // RatioStats still sees its elements in index order (add_row over two
  // consecutive pieces is add_row over their union, bit for bit), while the
  // eight per-thread row buffers below take 8 * kTile * 8 B = 16 KiB and stay
  // in L1 instead of 8 * H * 8 B = 256 KiB at H = 4096 (L2 traffic of ~100 B
  // per element, shared by SMT siblings).
  constexpr int64_t kTile = 256;
  // Each thread's summaries and tile buffers start on a cache line of their
  // own and fill whole lines (alignas(64)): written at every tile, they would
  // otherwise share the first or last line with another thread's when one
  // heap serves every thread (apps/main.cpp's M_ARENA_MAX = 1, D7) and
  // their chunks happen to lie next to each other.
  struct alignas(64) Four {
    RatioStats y{Output::y}, r{Output::rstd}, d{Output::dx}, h{Output::h_new};
  };
  struct alignas(64) Tile {
    double yv[kTile], ybd[kTile], yideal[kTile], dv[kTile], dbd[kTile], iv[kTile], dideal[kTile], g[kTile];
  };
  const int64_t chunk = std::max<int64_t>(1, 8192 / std::max<int64_t>(cols, 1));  // rows per scheduling chunk
  std::vector<std::vector<Four>> part(nt, std::vector<Four>(ng));
  std::vector<std::exception_ptr> errs(nt);
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num();
    std::vector<Four> st(ng);
    try {
      // The oracle's values in one tile as RatioStats::add_row reads them
      // (values and bounds in separate arrays); the ideal kernel's dx values
      // only.
      const std::unique_ptr<Tile> tile = std::make_unique<Tile>();
      double *yv = tile->yv, *ybd = tile->ybd, *yideal = tile->yideal, *dv = tile->dv, *dbd = tile->dbd,
             *iv = tile->iv, *dideal = tile->dideal, *g = tile->g;
#pragma omp for schedule(dynamic, chunk)
      for (int64_t r = 0; r < rows; ++r) {
        const oracle::VB rv = ref.rstd(r);
        // Ideal rstd: the exact rstd rounded once to FP32 (the oracle's RN).
        const double rideal = static_cast<double>(ref.rstd_f32(r));
        for (size_t k = 0; k < ng; ++k)
          if (rsrc[k] == k && gots[k].rstd)
            st[k].r.add(r, static_cast<double>(gots[k].rstd[r]), rv.v, rv.bound, rideal);
        for (int64_t j0 = 0; j0 < cols; j0 += kTile) {
          const int64_t n = std::min(kTile, cols - j0);
          if (any_y) {
            ref.y_row(r, j0, n, yv, ybd);
            round_to_bf16_row(yv, n, yideal);
          }
          if (any_dx) {
            ref.dx_row(r, j0, n, dv, dbd);
            ideal.dx_row_values(r, j0, n, iv);
            round_to_bf16_row(iv, n, dideal);
          }
          const int64_t base = r * cols + j0;
          for (size_t k = 0; k < ng; ++k) {
            const OutputsRef& got = gots[k];
            Four& s4 = st[k];
            if (ysrc[k] == k && got.y) {
              widen_bf16_row(got.y.data() + base, n, g);
              s4.y.add_row(base, g, yv, ybd, yideal, n);
            }
            if (dsrc[k] == k && got.dx) {
              widen_bf16_row(got.dx.data() + base, n, g);
              s4.d.add_row(base, g, dv, dbd, dideal, n);
            }
            if (do_h && hsrc[k] == k && got.h_new)
              s4.h.add_bf16_exact_row(base, got.h_new.data() + base, h_new_expected.data() + base, n);
          }
        }
      }
    } catch (...) {
      errs[t] = std::current_exception();
    }
    part[t] = std::move(st);
  }
  for (const auto& e : errs)
    if (e) std::rethrow_exception(e);

  std::vector<CaseResult> results;
  for (size_t k = 0; k < ng; ++k) {
    const OutputsRef& got = gots[k];
    Four m;
    for (int t = 0; t < nt; ++t) {
      m.y.merge(part[t][ysrc[k]].y);
      m.r.merge(part[t][rsrc[k]].r);
      m.d.merge(part[t][dsrc[k]].d);
      m.h.merge(part[t][hsrc[k]].h);
    }

    // --- dw: one value per column; sequential (cols is small next to rows*cols).
    RatioStats sw(Output::dw);
    const Budget dw_budget = budget(Output::dw);
    double eg_max = 0, eb_max = 0, cmax = 0;
    std::vector<double> quot;
    if (baseline) quot.reserve(static_cast<size_t>(cols));
    for (int64_t j = 0; got.dw && j < cols; ++j) {
      const oracle::VB wv = ref.dw(j);
      const double g = static_cast<double>(got.dw[j]);
      sw.add(j, g, wv.v, wv.bound, static_cast<double>(static_cast<float>(ideal.dw(j).v)));
      cmax = std::max(cmax, condition(ref, j));
      if (baseline) {
        // Both errors floored at the column's FP32 resolution (kDwFp32Floor).
        const double f = fp32_floor(ref, j, rows, tolerance(dw_budget, wv.v));
        const double eg = std::max(rule_err(g, wv.v), f);
        const double eb = std::max(rule_err(static_cast<double>(baseline->dw[j]), wv.v), f);
        eg_max = std::max(eg_max, eg);
        eb_max = std::max(eb_max, eb);
        if (eb > 0.0) quot.push_back(err_quotient(eg, eb));
      }
    }

    CaseResult res;
    if (got.y) res.tensors.push_back(m.y);
    if (got.rstd) res.tensors.push_back(m.r);
    if (got.dx) res.tensors.push_back(m.d);
    if (got.dw) res.tensors.push_back(sw);
    if (do_h && got.h_new) res.tensors.push_back(m.h);
    res.dw_vs_fp32_worst = baseline && got.dw ? err_quotient(eg_max, eb_max) : kNaN;
    res.dw_vs_fp32_median = baseline && got.dw ? median_of(quot) : kNaN;
    res.dw_worst_condition = sw.worst.index >= 0 ? condition(ref, sw.worst.index) : 0.0;
    res.dw_max_condition = cmax;
    results.push_back(std::move(res));
  }
  return results;
}

}  // namespace

std::vector<CaseResult> validate_cases(const oracle::Problem& p, const std::vector<OutputsRef>& gots,
                                       const oracle::Reference& ref, const oracle::Reference& ideal,
                                       const Outputs* baseline, int threads,
                                       std::span<const uint16_t> h_new_expected) {
  return sweep(p, gots, ref, ideal, baseline, threads, h_new_expected, false);
}

CaseResult validate_present(const oracle::Problem& p, const OutputsRef& got, const oracle::Reference& ref,
                            const oracle::Reference& ideal, const Outputs* baseline, int threads,
                            std::span<const uint16_t> h_new_expected) {
  return sweep(p, {got}, ref, ideal, baseline, threads, h_new_expected, true).front();
}

std::vector<CaseResult> validate_present(const oracle::Problem& p, const std::vector<OutputsRef>& gots,
                                         const oracle::Reference& ref, const oracle::Reference& ideal,
                                         const Outputs* baseline, int threads,
                                         std::span<const uint16_t> h_new_expected) {
  return sweep(p, gots, ref, ideal, baseline, threads, h_new_expected, true);
}

}  // namespace normgate::validators
