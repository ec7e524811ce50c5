// tests/util/oracle_test_util.h: local input generators (std::mt19937_64,
// independent of seeds/) and a 200-bit MPFR evaluation of the RMSNorm math.
#pragma once

#include <mpfr.h>

#include <boost/multiprecision/mpfr.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "normgate/core/bf16.h"
#include "normgate/oracle/reference.h"
#include "normgate/seeds/case_id.h"
#include "normgate/seeds/generate.h"

namespace ngt {

using normgate::oracle::Problem;
using normgate::RowView;
using normgate::WDtype;
using normgate::WeightView;
using normgate::oracle::Reference;
using normgate::oracle::RstdMode;
using normgate::oracle::VB;
namespace oracle = normgate::oracle;

using mp = boost::multiprecision::number<boost::multiprecision::mpfr_float_backend<200>,
                                         boost::multiprecision::et_off>;

/// A contiguous [R, H] view.
inline RowView<uint16_t> plain_view(const uint16_t* p, int64_t R, int64_t H) {
  return RowView<uint16_t>::plain(p, R, H);
}

inline uint16_t bf16(float f) { return normgate::bf16_from_float(f); }
inline double fbf(uint16_t b) { return static_cast<double>(normgate::bf16_to_float(b)); }

/// One plain problem with owned buffers.
struct Case {
  int64_t R = 0, H = 0;
  WDtype wd = WDtype::bf16;
  double eps = 1e-6;
  std::vector<uint16_t> x, dy, wb;
  std::vector<float> wf;

  Problem problem() const {
    Problem p;
    p.x = plain_view(x.data(), R, H);
    p.dy = plain_view(dy.data(), R, H);
    p.w = wd == WDtype::bf16 ? WeightView{WDtype::bf16, wb.data(), H}
                             : WeightView{WDtype::fp32, wf.data(), H};
    p.eps = eps;
    return p;
  }
  double w(int64_t j) const { return wd == WDtype::bf16 ? fbf(wb[j]) : static_cast<double>(wf[j]); }
  double xv(int64_t r, int64_t j) const { return fbf(x[r * H + j]); }
  double dyv(int64_t r, int64_t j) const { return fbf(dy[r * H + j]); }
};

/// A flat case's x and dy ([T*nh, C] rows) laid out as a per-head view [T,
/// nh, C] inside rows of row_len elements, head h at h*stride, NaN (0x7FC0)
/// everywhere else: what a strided slice of a wider buffer looks like.
struct HeadsLayout {
  std::vector<uint16_t> x, dy;
};
inline HeadsLayout strided_heads(const Case& flat, int64_t T, int64_t nh, int64_t C, int64_t row_len, int64_t stride) {
  HeadsLayout l{std::vector<uint16_t>(T * row_len, 0x7FC0), std::vector<uint16_t>(T * row_len, 0x7FC0)};
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < nh; ++h)
      for (int64_t j = 0; j < C; ++j) {
        l.x[t * row_len + h * stride + j] = flat.x[(t * nh + h) * C + j];
        l.dy[t * row_len + h * stride + j] = flat.dy[(t * nh + h) * C + j];
      }
  return l;
}

enum class Dist { normal, llm, wide, tiny, huge };

/// One BF16 sample of a distribution.
inline uint16_t sample(Dist d, std::mt19937_64& g, int64_t j = 0) {
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::uniform_int_distribution<uint32_t> bits(0, 0xFFFFu);
  switch (d) {
    case Dist::normal: return bf16(n01(g));
    case Dist::llm: {  // a few outlier columns, heavy-ish tails
      float v = n01(g) * ((j % 61 == 7) ? 60.0f : 1.0f);
      if (std::uniform_real_distribution<float>(0, 1)(g) < 0.01f) v *= 20.0f;
      return bf16(v);
    }
    case Dist::wide: {  // sign * 2^U(-60,60) * (1 + U[0,1))
      std::uniform_real_distribution<float> e(-60.0f, 60.0f), m(1.0f, 2.0f);
      float v = std::ldexp(m(g), static_cast<int>(e(g)));
      return bf16(bits(g) & 1 ? -v : v);
    }
    case Dist::tiny: {  // exponent field 0..6: subnormal BF16 and the smallest normals
      uint32_t b = bits(g);
      uint32_t exp = b % 7;
      return static_cast<uint16_t>((b & 0x8000u) | (exp << 7) | ((b >> 3) & 0x7Fu));
    }
    case Dist::huge: {  // exponent field 240..254: up to the largest finite BF16
      uint32_t b = bits(g);
      uint32_t exp = 240 + b % 15;
      return static_cast<uint16_t>((b & 0x8000u) | (exp << 7) | ((b >> 4) & 0x7Fu));
    }
  }
  return 0;
}

/// A random case. FP32 weights get full 24-bit significands (not BF16 values).
inline Case make_case(int64_t R, int64_t H, WDtype wd, uint64_t seed, Dist dx = Dist::normal,
                      Dist ddy = Dist::normal, double eps = 1e-6) {
  Case c;
  c.R = R;
  c.H = H;
  c.wd = wd;
  c.eps = eps;
  std::mt19937_64 g(seed);
  c.x.resize(R * H);
  c.dy.resize(R * H);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = 0; j < H; ++j) {
      c.x[r * H + j] = sample(dx, g, j);
      c.dy[r * H + j] = sample(ddy, g, j);
    }
  std::normal_distribution<float> wn(1.0f, 0.25f);
  std::uniform_real_distribution<float> wu(0.25f, 2.0f);
  if (wd == WDtype::bf16) {
    c.wb.resize(H);
    for (auto& v : c.wb) v = bf16(wn(g));
  } else {
    c.wf.resize(H);
    for (auto& v : c.wf) {
      float f = wu(g);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      u |= 1u;  // odd last bit: certainly not a BF16 value
      std::memcpy(&f, &u, 4);
      v = (g() & 1) ? -f : f;
    }
  }
  return c;
}

/// RN to binary32 of a 200-bit value (MPFR's correctly rounded conversion).
inline float rn32(const mp& v) { return mpfr_get_flt(v.backend().data(), MPFR_RNDN); }
inline double to_d(const mp& v) { return mpfr_get_d(v.backend().data(), MPFR_RNDN); }

/// The RMSNorm math in 200-bit MPFR. In fp32_rounded mode the backward's
/// rstd is `use32[r]` (an exact input). Errors of this evaluation are below
/// 2^-190 relative to the magnitudes involved (checked with a 2^-180 slack).
struct MpRef {
  const Case* c = nullptr;
  std::vector<mp> rs, use, cc, k, dw;
  std::vector<double> pd_abs;  // sum_j |dy x w| per row (for looseness checks)

  MpRef(const Case& cs, RstdMode mode, const std::vector<float>& use32) : c(&cs) {
    const int64_t R = cs.R, H = cs.H;
    rs.resize(R);
    use.resize(R);
    cc.resize(R);
    k.resize(R);
    pd_abs.assign(R, 0.0);
    mp Hm(static_cast<double>(H)), eps(cs.eps);
    for (int64_t r = 0; r < R; ++r) {
      mp S = 0, D = 0;
      for (int64_t j = 0; j < H; ++j) {
        mp xv(cs.xv(r, j));
        S += xv * xv;
        D += mp(cs.dyv(r, j) * cs.w(j)) * xv;  // dy*w exact in double
        pd_abs[r] += std::fabs(cs.dyv(r, j) * cs.w(j) * cs.xv(r, j));
      }
      rs[r] = 1 / sqrt(S / Hm + eps);
      use[r] = mode == RstdMode::fp64 ? rs[r] : mp(static_cast<double>(use32[r]));
      cc[r] = use[r] * D / Hm;
      k[r] = use[r] * cc[r];
    }
    dw.assign(H, mp(0));
    for (int64_t r = 0; r < R; ++r)
      for (int64_t j = 0; j < H; ++j) dw[j] += mp(cs.dyv(r, j) * cs.xv(r, j)) * use[r];
  }
  mp y(int64_t r, int64_t j) const { return mp(c->xv(r, j) * c->w(j)) * rs[r]; }
  mp dx(int64_t r, int64_t j) const {
    mp g(c->dyv(r, j) * c->w(j));
    return use[r] * (g - c->xv(r, j) * k[r]);
  }
};

/// |v - exact| <= bound (+ 2^-180 * scale for the MPFR evaluation's own error).
inline bool within(const VB& vb, const mp& exact, double scale, double* err = nullptr) {
  mp e = abs(mp(vb.v) - exact);
  if (err) *err = to_d(e);
  return e <= mp(vb.bound) + mp(std::ldexp(scale, -180));
}

/// The inputs of a generated case (seeds::generate_host) as a test Case.
inline Case from_seeds(const std::string& id) {
  normgate::seeds::HostInputs in = normgate::seeds::generate_host(normgate::seeds::parse_case(id));
  Case c;
  c.R = in.rows;
  c.H = in.cols;
  c.wd = in.id.w;
  c.eps = in.id.eps;
  c.x = in.x;
  c.dy = in.dy;
  c.wb = in.w_bf16;
  c.wf = in.w_f32;
  return c;
}

}  // namespace ngt
