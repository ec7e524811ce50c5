// Human-readable descriptions of the input families (normgate/seeds/family_docs.h).
// Keep in sync with families.h's file comment and docs/families.md.
#include "normgate/seeds/family_docs.h"

namespace normgate::seeds {

std::string_view family_summary(Family f) {
  switch (f) {
    case Family::normal: return "N(0,1) activations and gradients: the typical case, the round-off floor";
    case Family::llm: return "LLM-like: 0.5% massive channels, 1/512 scaled rows, Student-t(3) gradients";
    case Family::cancel: return "exact cancellation in dw: defeats plain FP32 column sums (condition ~kappa)";
    case Family::zeros: return "1/4 of rows all zero: rstd = 1/sqrt(eps)";
    case Family::tiny: return "magnitudes 2^-133..2^-120: x^2 underflows, subnormal inputs";
    case Family::huge: return "1/8 of rows with magnitudes 1e19..3e38: sum of x^2 overflows FP32";
    case Family::specials: return "NaN and +-Inf in x and dy (2^-12 of elements each)";
    case Family::epsnear: return "rows whose mean square is near eps (eps/16..16 eps): how eps enters rstd";
  }
  return "unknown family";
}

std::string_view family_details(Family f) {
  switch (f) {
    case Family::normal:
      return "x, dy  ~ N(0,1), rounded to BF16\n"
             "w      ~ BF16(1 + 0.1 N(0,1)) (an FP32 weight holds the same BF16 values)\n"
             "res    u, dh_new ~ N(0,1)\n"
             "purpose: the typical case; errors here are the round-off floor every implementation must reach";
    case Family::llm:
      return "x      ~ N(0,1), except\n"
             "         massive channels: 0.5% of columns (chosen per column), magnitude M_j log-uniform in\n"
             "         [50, 2000] with a fixed sign per column; element = sign_j * M_j * (1 + 0.05 N)\n"
             "         scaled rows: 1/512 of rows (chosen per row), whole row times a factor log-uniform in [10, 100]\n"
             "dy     ~ Student-t(3) at unit scale, BF16\n"
             "w      log-uniform in [0.05, 3]; an FP32 weight keeps full FP32 values, BF16 rounds them\n"
             "res    u ~ N(0,1) (no massive channels or scaled rows), dh_new ~ t(3)\n"
             "purpose: outlier channels dominate sum(x^2); heavy-tailed gradients; wide weight range";
    case Family::cancel:
      return "x      = +-1 everywhere, so every row has the same rstd = 1/sqrt(1 + eps)\n"
             "rows   r % 8 == 7: signal rows; the rest are big rows k = (r/8)*7 + r%8, K of them (odd K: the\n"
             "       last big row is a signal row). Big row k < K/2 pairs with k + K/2: x negated, same dy,\n"
             "       so their dy*x*rstd cancel exactly in any arithmetic\n"
             "dy     big rows: +-2^y, y uniform in [b-12, b] (12 octaves, b <= 16) chosen so that\n"
             "       sum|dy*xhat| / |sum dy*xhat| ~ kappa per column (kappa: case id key, default 1e8)\n"
             "       signal rows: dy = s_j * x * 2^e, e = -10 - round(log2 Nsig): exact dw_j = s_j Nsig 2^e rstd\n"
             "       ~ 2^-10; s_j = 0 in 1/8 of columns (exact dw_j = 0), else +-1\n"
             "w      ~ BF16(1 + 0.1 N(0,1))\n"
             "res    u = h (h_new = 2h keeps the cancellation), dh_new ~ N(0,1)\n"
             "purpose: a plain FP32 running column sum loses the signal (65536 + 2^-10 - 65536); at\n"
             "         T=65537, H=2048 it misses the dw budget by more than 10x in ~48% of columns\n"
             "         (by more than 1x in ~95%), a Kahan FP32 sum in none";
    case Family::zeros:
      return "x      1/4 of rows (chosen per row) all zero, other rows ~ N(0,1)\n"
             "dy     ~ N(0,1); w ~ BF16(1 + 0.1 N(0,1))\n"
             "res    u = 0 on the zero rows, N(0,1) elsewhere; dh_new ~ N(0,1)\n"
             "purpose: rows with rstd = 1/sqrt(eps); not gated by default";
    case Family::tiny:
      return "x, dy  +-2^y, y uniform in [-133, -120], BF16 (about 7/13 subnormal); res: u, dh_new likewise\n"
             "w      ~ BF16(1 + 0.1 N(0,1))\n"
             "purpose: x^2 underflows to 0; subnormal inputs catch flush-to-zero; not gated by default";
    case Family::huge:
      return "x      1/8 of rows (chosen per row) +- log-uniform in [1e19, 3e38] (BF16 max 3.39e38),\n"
             "       other rows ~ N(0,1)\n"
             "dy     ~ N(0,1); w ~ BF16(1 + 0.1 N(0,1)); res: u, dh_new ~ N(0,1)\n"
             "purpose: the FP32 sum of x^2 overflows; not gated by default";
    case Family::specials:
      return "x, dy  NaN with probability 2^-12, +-Inf with probability 2^-12, otherwise ~ N(0,1)\n"
             "w      ~ BF16(1 + 0.1 N(0,1)); res: u, dh_new ~ N(0,1) (no specials)\n"
             "purpose: NaN/Inf propagation; not gated by default";
    case Family::epsnear:
      return "x      row r scaled by s_r = 2^((log2(eps) + u_r)/2), u_r uniform in [-4, 4] (per row):\n"
             "       x = BF16(s_r * N(0,1)), mean square about eps * 2^u_r (eps/16 .. 16 eps)\n"
             "dy     ~ N(0,1); w ~ BF16(1 + 0.1 N(0,1)); res: u likewise (same row scale), dh_new ~ N(0,1)\n"
             "eps    the case id's eps (default 1e-6); the gate runs 1e-6, 1e-5 and 2^-23 (seed set 5xN)\n"
             "purpose: eps outside the square root, eps dropped or rounded to BF16 change rstd by under\n"
             "       1e-6 relative on rows of mean square ~1 (every other gate family); here by percents";
  }
  return "unknown family";
}

}  // namespace normgate::seeds
