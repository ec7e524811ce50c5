// normgate/seeds/families.h: the input families, one element at a time.
//
// CONTRACT (implemented in this header so it runs on host and device):
//   NG_HD float family_value(const FamilyParams& p, Tensor which, int64_t r, int64_t j)
// returns element (r, j) of tensor `which` for the case described by p, where
// r is the normalized row (t*heads + h) and j the column (r is ignored for w).
// The result depends only on (family, seed, shape, kappa, eps, which, r, j): no
// state, no order. Values of x, dy, u, dh_new are exactly representable in
// BF16; w is BF16-representable when p.w == bf16.
// All arithmetic uses normgate/core/hd.h's explicitly rounded operations and
// seeds/transforms.h, so host and device results are bitwise identical.
// Requirement on device code: none beyond hd.h's (no -ftz dependence: values
// in the subnormal range are built on bit patterns).
//
// RANDOM STREAMS. Every random draw is one Philox4x32-10 block (philox.h):
//   key     = (seed mod 2^32, seed >> 32)
//   counter = (r mod 2^32, j mod 2^32,
//              (r >> 32) & 0xFF | tensor << 8 | family << 16 | domain << 24,
//              stream)
// `domain` says what the draw is for (one element, one column, one row, one
// cancel pair, one cancel signal element; see detail::Domain), `stream` is 0.
// The family sits in the counter rather than the key so that the map
// (seed, family, tensor, domain, r, j) -> counter block is injective: a 64-bit
// key cannot hold a 64-bit seed and a family. Row indices up to 2^40 and
// column indices up to 2^32 are distinct; normgate's cases stay far below.
//
// THE FAMILIES (docs/families.md has the same text plus the rationale).
// N(0,1) below is box_muller(v0, v1).z0 of the element's block; every x, dy,
// u, dh_new value is rounded once to BF16 (round to nearest even) at the end.
// "w ~ 1 + 0.1 N" means BF16(fma(0.1, N, 1)); when p.w == fp32 the FP32 weight
// holds these same BF16 values (except llm, see there).
//
//   normal   x, dy ~ N(0,1); w ~ 1 + 0.1 N; res: u, dh_new ~ N(0,1).
//            Purpose: the typical case; errors here are the round-off floor.
//   llm      Residual-stream-like activations. x ~ N(0,1), except
//            * massive channels: a column j is massive with probability
//              21474837 / 2^32 (0.5%), chosen from a per-column draw (j only).
//              Its magnitude M_j is log-uniform in [50, 2000] and its sign
//              fixed per column; the element is sign_j * M_j * (1 + 0.05 N).
//            * scaled rows: a row r is scaled with probability 2^-9 (1/512),
//              per-row draw (r only); the whole row (massive channels too) is
//              multiplied by a factor log-uniform in [10, 100].
//            dy ~ Student-t(3) at unit scale (student_t3 of four normals).
//            w log-uniform in [0.05, 3]; the FP32 weight keeps the full FP32
//            value, the BF16 weight is its BF16 rounding.
//            res: u ~ N(0,1) (no massive channels or scaled rows), dh_new ~ t(3).
//            Purpose: outlier channels dominate sum(x^2), heavy-tailed
//            gradients, a wide weight range; the realistic hard case.
//   cancel   Exact cancellation in dw = sum_r dy*x*rstd. x = +-1 everywhere, so
//            every row has the same rstd = 1/sqrt(1 + eps), bitwise identical in
//            any FP32 evaluation. Rows r % 8 == 7 are signal rows; the others
//            are big rows numbered k = (r/8)*7 + r%8, K of them (cancel_layout);
//            if K is odd the last big row is a signal row too. Big row
//            k < K/2 is paired with k + K/2: the partner has x negated
//            elementwise and the same dy, so dy*x*rstd of the two cancel
//            exactly in any arithmetic. Big dy = +-2^y, y uniform in [b-12, b]
//            (log-uniform over 12 octaves, random sign), BF16; b (capped at 16)
//            makes sum_r |dy*xhat| / |sum_r dy*xhat| about kappa per column.
//            Signal rows: x = +-1, dy = s_j * x * 2^e with
//            e = -10 - round(log2(Nsig)), so the exact dw_j is
//            s_j * Nsig * 2^e * rstd, about 2^-10; s_j = 0 with probability 1/8
//            (dw_j exactly 0), otherwise +-1 (per-column draw). Far-apart
//            pairs make an FP32 running column sum large, so it loses the
//            small signal terms (65536 + 2^-10 - 65536).
//            w ~ 1 + 0.1 N. res: u = h (the same +-1), so h_new = 2h keeps
//            identical rstd and exact pair cancellation; dh_new ~ N(0,1).
//            Purpose: the dw reduction's accuracy, which normal data hides.
//   zeros    A row is all-zero with probability 1/4 (per-row draw); other rows
//            x ~ N(0,1). dy ~ N(0,1) everywhere; w ~ 1 + 0.1 N.
//            res: u = 0 on the zero rows (so h_new keeps them), N(0,1) elsewhere;
//            dh_new ~ N(0,1). Purpose: rstd = 1/sqrt(eps) rows. Not gated.
//   tiny     x, dy (and res u, dh_new) = +-2^y, y uniform in [-133, -120], BF16
//            (about 7/13 of values are subnormal; BF16's smallest subnormal is
//            2^-133, smallest normal 2^-126). w ~ 1 + 0.1 N.
//            Purpose: x^2 underflows, subnormal inputs (flush-to-zero bugs).
//            Not gated.
//   huge     A row is huge with probability 1/8 (per-row draw): its elements
//            are +-log-uniform in [1e19, 3e38] (BF16 max is 3.39e38), so x^2
//            overflows FP32; other rows x ~ N(0,1). dy ~ N(0,1); w ~ 1 + 0.1 N.
//            res: u, dh_new ~ N(0,1) (unit scale). Purpose: overflow of
//            sum(x^2) (kernels must rescale or report Inf/0 consistently).
//            Not gated.
//   specials In x and dy, an element is NaN with probability 2^-12 and +-Inf
//            (random sign) with probability 2^-12; the rest ~ N(0,1).
//            w ~ 1 + 0.1 N. res: u, dh_new ~ N(0,1) (no specials).
//            Purpose: NaN/Inf propagation. Not gated.
//   epsnear  Rows whose mean square is near the case's eps: row r has the
//            scale s_r = exp2((log2(eps) + u_r) / 2), u_r uniform in [-4, 4]
//            (per-row draw), and x = s_r * N(0,1), so its mean square is
//            about eps * 2^u_r (eps/16 .. 16 eps). dy ~ N(0,1); w ~ 1 + 0.1 N.
//            res: u likewise (its own normals, the same row scale), so h_new
//            stays near eps too; dh_new ~ N(0,1).
//            Purpose: how eps enters rstd (eps added outside the square
//            root, dropped, rounded to BF16), which rows of mean square ~1
//            hide (eps changes their rstd by under 1e-6 relative). Gated,
//            over several eps values (seed_set.h's 5xN).
// Forms: `res` as above (x holds h); head forms have rows = T*heads, cols = 256
// and nothing else special.
#pragma once

#include <cstdint>

#include "normgate/core/bf16.h"
#include "normgate/core/hd.h"
#include "normgate/core/types.h"
#include "normgate/seeds/case_id.h"
#include "normgate/seeds/philox.h"
#include "normgate/seeds/transforms.h"

namespace normgate::seeds {

/// Which input tensor an element belongs to. (x holds h for form res.)
enum class Tensor : uint8_t { x = 0, dy = 1, w = 2, u = 3, dh_new = 4 };

/// Plain-old-data description of a case for family_value (device-copyable:
/// pass it by value as a kernel argument). Build it with family_params(c) so
/// every field matches the case id.
struct FamilyParams {
  Family family;  ///< input family
  uint64_t seed;  ///< Philox key (all 64 bits used)
  int64_t rows;   ///< normalized rows (T * heads); only cancel depends on it
  int64_t cols;   ///< normalized length (H); no family depends on it today
  WDtype w;       ///< weight dtype; only llm's weight depends on it
  float kappa;    ///< cancel only: target condition number (binary32 of CaseId::kappa)
  float eps;      ///< epsnear only: the case's eps (binary32 of CaseId::eps), which its rows' mean square is near
};

/// FamilyParams of a case id (host only; does not validate c).
inline FamilyParams family_params(const CaseId& c) {
  return FamilyParams{c.family, c.seed, c.rows(), c.H, c.w, static_cast<float>(c.kappa), static_cast<float>(c.eps)};
}

namespace detail {

/// What a Philox draw is for (the top byte of counter word 2).
enum class Domain : uint32_t { element = 0, column = 1, row = 2, pair = 3, signal = 4 };

/// The Philox4x32-10 block for (p.seed, p.family, tensor t, domain d, r, j,
/// stream): see the file comment for the counter layout. r in [0, 2^40),
/// j in [0, 2^32) give distinct counters.
NG_HD Philox4 draw(const FamilyParams& p, Domain d, Tensor t, int64_t r, int64_t j, uint32_t stream = 0) {
  const uint64_t ur = static_cast<uint64_t>(r);
  const uint64_t uj = static_cast<uint64_t>(j);
  const Philox4 ctr{{static_cast<uint32_t>(ur), static_cast<uint32_t>(uj),
                     (static_cast<uint32_t>(ur >> 32) & 0xFFu) | (static_cast<uint32_t>(t) << 8) |
                         (static_cast<uint32_t>(p.family) << 16) | (static_cast<uint32_t>(d) << 24),
                     stream}};
  const Key2 key{{static_cast<uint32_t>(p.seed), static_cast<uint32_t>(p.seed >> 32)}};
  return philox4x32_10(ctr, key);
}

/// Standard normal (binary32, not rounded to BF16) of element (r, j) of
/// tensor t: box_muller(v0, v1).z0 of the element's block.
NG_HD float normal_elem(const FamilyParams& p, Tensor t, int64_t r, int64_t j) {
  const Philox4 d = draw(p, Domain::element, t, r, j);
  return box_muller_z0(d.v[0], d.v[1]);
}

/// Student-t(3) at unit scale of element (r, j) of tensor t: student_t3 of the
/// four normals box_muller(v0, v1) and box_muller(v2, v3).
NG_HD float t3_elem(const FamilyParams& p, Tensor t, int64_t r, int64_t j) {
  const Philox4 d = draw(p, Domain::element, t, r, j);
  const Normal2 a = box_muller(d.v[0], d.v[1]);
  const Normal2 b = box_muller(d.v[2], d.v[3]);
  return student_t3(a.z0, a.z1, b.z0, b.z1);
}

/// The "1 + 0.1 N" weight of column j, BF16-exact: BF16(fma(0.1, N, 1)).
NG_HD float weight_1p01n(const FamilyParams& p, int64_t j) {
  return round_bf16(fma_rn(0.1f, normal_elem(p, Tensor::w, 0, j), 1.0f));
}

/// round(log2(n)) for n >= 1 (0 for n <= 1), exactly, with integer ops:
/// floor(log2 n) + 1 iff n >= 2^floor(log2 n) * sqrt(2) (never equal).
NG_HD int round_log2_i64(int64_t n) {
  if (n <= 1) return 0;
  const uint64_t u = static_cast<uint64_t>(n);
  int fl = 0;
  while (fl < 63 && (u >> (fl + 1)) != 0u) ++fl;
  if (fl >= 62) return fl + 1;  // unreachable for normgate shapes
  const uint64_t m = u << (62 - fl);          // MSB at bit 62
  return m > 0x5A827999FCEF3242ull ? fl + 1 : fl;  // floor(2^62.5)
}

}  // namespace detail

/// Row structure of the cancel family for a given number of rows (see the
/// file comment): all derived from `rows` and kappa, identical on host and
/// device.
struct CancelLayout {
  int64_t big;    ///< K: rows with r % 8 != 7 (before the odd-K adjustment)
  int64_t half;   ///< K/2: number of cancelling pairs (big rows used = 2*half)
  int64_t nsig;   ///< signal rows = rows - 2*half (>= 1 when rows >= 1)
  int sig_exp;    ///< e: signal |dy| = 2^e, e = -10 - round(log2(nsig))
  float b;        ///< big |dy| in [2^(b-12), 2^b]; b <= 16 (units: octaves)
};

/// The cancel layout for `rows` normalized rows and target condition number
/// kappa (> 0). b solves E[sum_r |dy x|] / |exact| = kappa with
/// E|dy| = 2^b (1 - 2^-12) / (12 ln 2) (log-uniform over 12 octaves) and
/// |exact| = nsig 2^e, over the 2*half big rows:
///   b = log2(kappa * nsig / (2*half)) + e + log2(12 ln2 / (1 - 2^-12)),
/// evaluated in binary32 (one div_rn, one log2_approx), then clamped to
/// [-100, 16]. kappa should be a positive normal binary32 (case ids hold
/// 1e2..1e12); a NaN ratio gives b = 16. rows < 0 is treated as 0. Measured at
/// T=65537, kappa=1e8: per-column condition numbers 0.96e8..1.03e8.
NG_HD CancelLayout cancel_layout(int64_t rows, float kappa) {
  if (rows < 0) rows = 0;
  CancelLayout L{};
  L.big = (rows / 8) * 7 + rows % 8;
  L.half = L.big / 2;
  L.nsig = rows - 2 * L.half;
  L.sig_exp = -10 - detail::round_log2_i64(L.nsig);
  if (L.half == 0) {
    L.b = 0.0f;
    return L;
  }
  const float q = div_rn(mul_rn(kappa, static_cast<float>(L.nsig)), static_cast<float>(2 * L.half));
  // log2(12 ln 2 / (1 - 2^-12)) = 3.0565483912...
  float b = add_rn(log2_approx(q), add_rn(static_cast<float>(L.sig_exp), 3.05654839f));
  if (!(b <= 16.0f)) b = 16.0f;
  if (b < -100.0f) b = -100.0f;
  L.b = b;
  return L;
}

/// Role of row r in the cancel family: a signal row, or big row number
/// `pair` (< half) of a cancelling pair, `negated` for the partner
/// (k >= half) whose x is the elementwise negation.
struct CancelRow {
  bool signal;
  bool negated;
  int64_t pair;
};

/// Classify row r (0 <= r < rows) under layout L.
NG_HD CancelRow cancel_row(const CancelLayout& L, int64_t r) {
  const int64_t m = r % 8;
  if (m == 7) return CancelRow{true, false, 0};
  const int64_t k = (r / 8) * 7 + m;
  if (k >= 2 * L.half) return CancelRow{true, false, 0};
  return k < L.half ? CancelRow{false, false, k} : CancelRow{false, true, k - L.half};
}

/// Cancel family: the signal sign s_j in {-1, 0, +1} of column j (0 with
/// probability 1/8). The exact dw_j is s_j * nsig * 2^sig_exp * rstd.
NG_HD int cancel_signal_sign(const FamilyParams& p, int64_t j) {
  const uint32_t v = detail::draw(p, detail::Domain::column, Tensor::dy, 0, j).v[0];
  if ((v & 7u) == 0u) return 0;
  return (v & 8u) != 0u ? -1 : 1;
}

/// llm family: magnitude of column j if it is a massive channel (signed:
/// sign_j * M_j, M_j log-uniform in [50, 2000]), or 0 for an ordinary column.
NG_HD float llm_massive_column(const FamilyParams& p, int64_t j) {
  const Philox4 d = detail::draw(p, detail::Domain::column, Tensor::x, 0, j);
  if (d.v[0] >= 21474837u) return 0.0f;  // 0.5% of 2^32
  return with_sign(log_uniform(u01_open(d.v[1]), 50.0f, 2000.0f), (d.v[2] & 1u) != 0u);
}

/// llm family: the scale of row r: a factor log-uniform in [10, 100] for the
/// 1/512 of rows that are scaled, else exactly 1.
NG_HD float llm_row_scale(const FamilyParams& p, int64_t r) {
  const Philox4 d = detail::draw(p, detail::Domain::row, Tensor::x, r, 0);
  if (d.v[0] >= (1u << 23)) return 1.0f;  // 2^-9 of 2^32
  return log_uniform(u01_open(d.v[1]), 10.0f, 100.0f);
}

/// zeros family: true if row r of x (and of u for res) is all zero (p = 1/4).
NG_HD bool zeros_row_is_zero(const FamilyParams& p, int64_t r) {
  return detail::draw(p, detail::Domain::row, Tensor::x, r, 0).v[0] < (1u << 30);
}

/// huge family: true if row r of x holds huge values (p = 1/8).
NG_HD bool huge_row(const FamilyParams& p, int64_t r) {
  return detail::draw(p, detail::Domain::row, Tensor::x, r, 0).v[0] < (1u << 29);
}

/// epsnear family: the scale s_r of row r, exp2_approx((log2_approx(eps) +
/// u) / 2) with u = fma(8, U(0,1), -4) from a per-row draw, so s_r^2 lies
/// in about [eps/16, 16 eps].
NG_HD float epsnear_row_scale(const FamilyParams& p, int64_t r) {
  const float u = fma_rn(8.0f, u01_open(detail::draw(p, detail::Domain::row, Tensor::x, r, 0).v[0]), -4.0f);
  return exp2_approx(mul_rn(0.5f, add_rn(log2_approx(p.eps), u)));
}

namespace detail {

NG_HD float normal_family(const FamilyParams& p, Tensor which, int64_t r, int64_t j) {
  if (which == Tensor::w) return weight_1p01n(p, j);
  return round_bf16(normal_elem(p, which, r, j));
}

NG_HD float llm_family(const FamilyParams& p, Tensor which, int64_t r, int64_t j) {
  switch (which) {
    case Tensor::x: {
      float v = normal_elem(p, Tensor::x, r, j);
      const float m = llm_massive_column(p, j);
      if (m != 0.0f) v = mul_rn(m, fma_rn(0.05f, v, 1.0f));
      const float s = llm_row_scale(p, r);
      if (s != 1.0f) v = mul_rn(v, s);
      return round_bf16(v);
    }
    case Tensor::dy:
    case Tensor::dh_new:
      return round_bf16(t3_elem(p, which, r, j));
    case Tensor::u:
      return round_bf16(normal_elem(p, which, r, j));
    case Tensor::w: {
      const float v = log_uniform(u01_open(draw(p, Domain::element, Tensor::w, 0, j).v[0]), 0.05f, 3.0f);
      return p.w == WDtype::bf16 ? round_bf16(v) : v;
    }
  }
  return 0.0f;
}

NG_HD float cancel_x(const FamilyParams& p, const CancelRow& cr, int64_t r, int64_t j) {
  if (cr.signal) return (draw(p, Domain::signal, Tensor::x, r, j).v[0] & 1u) != 0u ? -1.0f : 1.0f;
  const bool neg = ((draw(p, Domain::pair, Tensor::x, cr.pair, j).v[0] & 1u) != 0u) != cr.negated;
  return neg ? -1.0f : 1.0f;
}

NG_HD float cancel_family(const FamilyParams& p, Tensor which, int64_t r, int64_t j) {
  switch (which) {
    case Tensor::x:
    case Tensor::u: {  // res: u = h, so h_new = 2h
      const CancelLayout L = cancel_layout(p.rows, p.kappa);
      return cancel_x(p, cancel_row(L, r), r, j);
    }
    case Tensor::dy: {
      const CancelLayout L = cancel_layout(p.rows, p.kappa);
      const CancelRow cr = cancel_row(L, r);
      if (cr.signal) {
        const int s = cancel_signal_sign(p, j);
        if (s == 0) return 0.0f;
        const bool neg = (s < 0) != (cancel_x(p, cr, r, j) < 0.0f);
        return with_sign(pow2_int(L.sig_exp), neg);
      }
      const Philox4 d = draw(p, Domain::pair, Tensor::dy, cr.pair, j);
      const float y = fma_rn(12.0f, u01_open(d.v[0]), sub_rn(L.b, 12.0f));
      return round_bf16(with_sign(exp2_approx(y), (d.v[1] >> 31) != 0u));
    }
    case Tensor::dh_new:
      return round_bf16(normal_elem(p, which, r, j));
    case Tensor::w:
      return weight_1p01n(p, j);
  }
  return 0.0f;
}

NG_HD float zeros_family(const FamilyParams& p, Tensor which, int64_t r, int64_t j) {
  switch (which) {
    case Tensor::x:
    case Tensor::u:
      if (zeros_row_is_zero(p, r)) return 0.0f;
      return round_bf16(normal_elem(p, which, r, j));
    case Tensor::dy:
    case Tensor::dh_new:
      return round_bf16(normal_elem(p, which, r, j));
    case Tensor::w:
      return weight_1p01n(p, j);
  }
  return 0.0f;
}

NG_HD float tiny_family(const FamilyParams& p, Tensor which, int64_t r, int64_t j) {
  if (which == Tensor::w) return weight_1p01n(p, j);
  const Philox4 d = draw(p, Domain::element, which, r, j);
  const float m = exp2_approx(fma_rn(13.0f, u01_open(d.v[0]), -133.0f));
  return round_bf16(with_sign(m, (d.v[1] & 1u) != 0u));
}

NG_HD float huge_family(const FamilyParams& p, Tensor which, int64_t r, int64_t j) {
  if (which == Tensor::w) return weight_1p01n(p, j);
  if (which == Tensor::x && huge_row(p, r)) {
    const Philox4 d = draw(p, Domain::element, which, r, j);
    const float m = log_uniform(u01_open(d.v[0]), 1e19f, 3e38f);
    return round_bf16(with_sign(m, (d.v[1] & 1u) != 0u));
  }
  return round_bf16(normal_elem(p, which, r, j));
}

NG_HD float epsnear_family(const FamilyParams& p, Tensor which, int64_t r, int64_t j) {
  switch (which) {
    case Tensor::x:
    case Tensor::u:
      return round_bf16(mul_rn(epsnear_row_scale(p, r), normal_elem(p, which, r, j)));
    case Tensor::dy:
    case Tensor::dh_new:
      return round_bf16(normal_elem(p, which, r, j));
    case Tensor::w:
      return weight_1p01n(p, j);
  }
  return 0.0f;
}

NG_HD float specials_family(const FamilyParams& p, Tensor which, int64_t r, int64_t j) {
  if (which == Tensor::w) return weight_1p01n(p, j);
  const Philox4 d = draw(p, Domain::element, which, r, j);
  if (which == Tensor::x || which == Tensor::dy) {
    const uint32_t t = d.v[3] >> 20;
    if (t == 0u) return bits_float(0x7FC00000u);                             // NaN, p = 2^-12
    if (t == 1u) return bits_float(0x7F800000u | ((d.v[3] & 1u) << 31));     // +-Inf, p = 2^-12
  }
  return round_bf16(box_muller_z0(d.v[0], d.v[1]));
}

}  // namespace detail

/// Element (r, j) of input tensor `which` of the case p (binary32 value).
/// r: normalized row in [0, p.rows) (ignored for Tensor::w); j: column in
/// [0, p.cols). x, dy, u, dh_new values are BF16-exact (NaN as 0x7FC00000);
/// w is BF16-exact unless p.family == llm and p.w == fp32. Pure function of
/// (p.family, p.seed, p.rows, p.kappa, p.eps, p.w, which, r, j); bitwise identical
/// on host and device. Distributions: file comment and docs/families.md.
/// Unknown family values return NaN. Never throws.
NG_HD float family_value(const FamilyParams& p, Tensor which, int64_t r, int64_t j) {
  switch (p.family) {
    case Family::normal: return detail::normal_family(p, which, r, j);
    case Family::llm: return detail::llm_family(p, which, r, j);
    case Family::cancel: return detail::cancel_family(p, which, r, j);
    case Family::zeros: return detail::zeros_family(p, which, r, j);
    case Family::tiny: return detail::tiny_family(p, which, r, j);
    case Family::huge: return detail::huge_family(p, which, r, j);
    case Family::specials: return detail::specials_family(p, which, r, j);
    case Family::epsnear: return detail::epsnear_family(p, which, r, j);
  }
  return bits_float(0x7FC00000u);
}

}  // namespace normgate::seeds
