// tests/kernels/models/models_test.cpp: Tests of the CPU models (kernels/models/include/normgate/kernels/models.h) against
// the double reference of kernel_test_util.h (CPU; always run). Parameterized
// over the registry: registering a backward variant registers its cases.
#include "normgate/kernels/models.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>
#include <map>
#include <memory>
#include <mutex>

#include "util/kernel_test_util.h"
#include "normgate/seeds/case_id.h"
#include "normgate/kernels/plan.h"
#include "normgate/kernels/rstd.h"

namespace normgate::kernels::test {
namespace {

// Budgets of the issue "CUDA kernels v1" for real variants.
constexpr double kDxTol = 1e-2;                 // atol = rtol
constexpr double kDwAtol = 1e-4, kDwRtol = 1e-4;
constexpr double kYTol = 1e-2;
constexpr float kEps = 1e-6f;

std::vector<VariantCase> small_cases() {
  using seeds::Family;
  struct Shape {
    int64_t H, T;
  };
  // H: tiny, not a multiple of 8, one warp, a full 512-team, 2 slots (fwd; the
  // bwd's wide 640-thread team), 2-CTA team.
  const Shape shapes[] = {{1, 5}, {7, 300}, {64, 65}, {1000, 37}, {4096, 40}, {5120, 9}, {16384, 6}};
  const Family fams[] = {Family::normal, Family::llm, Family::cancel};
  std::vector<VariantCase> out;
  for (const Variant& v : variants()) {
    if (v.op != Op::bwd || v.model_only) continue;  // model-only controls: controls_test.cpp
    uint64_t seed = 1;
    for (const Shape& s : shapes)
      for (Family f : fams) {
        const WDtype w = seed % 2 ? WDtype::bf16 : WDtype::fp32;
        if (!v.supports_h(s.H)) {  // ctl_warp64_dw: H >= 33
          ++seed;
          continue;
        }
        out.push_back({&v, make_case(s.H, s.T, f, seed++, w)});
      }
  }
  return out;
}

std::string param_name(const ::testing::TestParamInfo<VariantCase>& i) { return case_name(*i.param.v, i.param.c); }

class ModelBwd : public ::testing::TestWithParam<VariantCase> {};

TEST_P(ModelBwd, WithinBudgetOrIsAControl) {
  const VariantCase& p = GetParam();
  const seeds::HostInputs in = seeds::generate_host(p.c);
  const Outputs o = run_model(*p.v, in.x_view(), in.dy_view(), in.w_view(), kEps);
  ASSERT_EQ(o.y.size(), static_cast<size_t>(p.c.T * p.c.H));
  ASSERT_EQ(o.dw.size(), static_cast<size_t>(p.c.H));
  const RefFwd rf = ref_fwd(in, kEps);
  const RefBwd rb = ref_bwd(in, o.rstd);
  const Budget y = budget_bf16(o.y, rf.y, kYTol, kYTol);
  EXPECT_EQ(y.bad, 0) << "y: " << y.str();
  const Budget rs = budget_f32(o.rstd, rf.rstd, 0.0, 1e-5);
  EXPECT_EQ(rs.bad, 0) << "rstd: " << rs.str();
  const Budget dx = budget_bf16(o.dx, rb.dx, kDxTol, kDxTol);
  EXPECT_EQ(dx.bad, 0) << "dx: " << dx.str();
  const Budget dw = budget_f32(o.dw, rb.dw, kDwAtol, kDwRtol);
  if (!p.v->control && !(lossy_dw(*p.v) && p.c.family == seeds::Family::cancel)) {
    EXPECT_EQ(dw.bad, 0) << "dw: " << dw.str();
  }
}

TEST_P(ModelBwd, IndependentOfThreadCount) {
  const VariantCase& p = GetParam();
  const seeds::HostInputs in = seeds::generate_host(p.c);
  const Outputs a = run_model(*p.v, in.x_view(), in.dy_view(), in.w_view(), kEps, 1);
  const Outputs b = run_model(*p.v, in.x_view(), in.dy_view(), in.w_view(), kEps, 4);
  EXPECT_EQ(bit_diff(a.y, b.y).count, 0);
  EXPECT_EQ(bit_diff(a.rstd, b.rstd).count, 0);
  EXPECT_EQ(bit_diff(a.dx, b.dx).count, 0);
  EXPECT_EQ(bit_diff(a.dw, b.dw).count, 0);
}

INSTANTIATE_TEST_SUITE_P(Variants, ModelBwd, ::testing::ValuesIn(small_cases()), param_name);

// --- the negative controls must fail where the real variants pass ----------

/// The cancel case of the controls, generated once and shared.
struct CancelCase {
  seeds::HostInputs in;
  std::vector<float> rstd;
  RefBwd ref;
};
const CancelCase& cancel_case() {
  static std::once_flag once;
  static std::unique_ptr<CancelCase> cc;
  std::call_once(once, [] {
    cc = std::make_unique<CancelCase>();
    cc->in = seeds::generate_host(make_case(64, 65537, seeds::Family::cancel, 17));
    cc->rstd = model_fwd(default_fwd(), cc->in.x_view(), cc->in.w_view(), kEps).rstd;
    cc->ref = ref_bwd(cc->in, cc->rstd);
  });
  return *cc;
}

std::vector<VariantCase> cancel_params() {
  std::vector<VariantCase> out;
  // One shared case at H = 64: variants without it (bwd_det_wide, whose
  // model is bwd_det_chunked's) are left to their own tests.
  for (const Variant& v : variants())
    if (v.op == Op::bwd && !v.model_only && v.supports_h(64))
      out.push_back({&v, make_case(64, 65537, seeds::Family::cancel, 17)});
  return out;
}

class ModelCancel : public ::testing::TestWithParam<VariantCase> {};

// Real variants keep dw within budget on a kappa = 1e8 cancellation case;
// controls must exceed it (otherwise the gate could not tell them apart), and
// so must the accuracy-for-speed variant (lossy_dw: FP32 partials lose the
// signal here, and the gate has to see it).
TEST_P(ModelCancel, DwBudgetSeparatesControls) {
  const VariantCase& p = GetParam();
  const CancelCase& cc = cancel_case();
  const BwdResult b = model_bwd(*p.v, cc.in.x_view(), cc.in.dy_view(), cc.in.w_view(), cc.rstd);
  const Budget dw = budget_f32(b.dw, cc.ref.dw, kDwAtol, kDwRtol);
  if (p.v->control || lossy_dw(*p.v)) {
    EXPECT_GT(dw.bad, 0) << p.v->name << " passed the dw budget: " << dw.str();
  } else {
    EXPECT_EQ(dw.bad, 0) << "dw: " << dw.str();
  }
  const Budget dx = budget_bf16(b.dx, cc.ref.dx, kDxTol, kDxTol);
  EXPECT_EQ(dx.bad, 0) << "dx: " << dx.str();
}

INSTANTIATE_TEST_SUITE_P(Variants, ModelCancel, ::testing::ValuesIn(cancel_params()), param_name);

// --- model structure --------------------------------------------------------

TEST(Models, DetAndNondetShareDxAndAgreeOnDw) {
  const seeds::HostInputs in = seeds::generate_host(make_case(512, 3000, seeds::Family::llm, 5));
  const Outputs d = run_model(variant("bwd_det_chunked"), in.x_view(), in.dy_view(), in.w_view(), kEps);
  const Outputs n = run_model(variant("bwd_nondet_atomic"), in.x_view(), in.dy_view(), in.w_view(), kEps);
  EXPECT_EQ(bit_diff(d.dx, n.dx).count, 0);
  for (size_t j = 0; j < d.dw.size(); ++j) EXPECT_NEAR(d.dw[j], n.dw[j], 2e-6 * std::fabs(d.dw[j]) + 1e-30) << j;
}

TEST(Models, ControlsShareTheRealDx) {
  const seeds::HostInputs in = seeds::generate_host(make_case(300, 100, seeds::Family::normal, 9));
  const Outputs d = run_model(variant("bwd_det_chunked"), in.x_view(), in.dy_view(), in.w_view(), kEps);
  for (const char* c : {"ctl_fp32_seq", "ctl_bf16_partials"}) {
    const Outputs o = run_model(variant(c), in.x_view(), in.dy_view(), in.w_view(), kEps);
    EXPECT_EQ(bit_diff(d.dx, o.dx).count, 0) << c;
  }
}

// forward_only (what a forward-only check runs on the CPU backend): the
// step's y, rstd and h_new bit for bit, no backward (dx, dw empty), for the
// default forward, fwd_narrow on heads24, form res and a control whose fault
// sits in the forward (it still runs its own forward).
TEST(Models, ForwardOnlyStepKeepsTheForwardBits) {
  struct Row {
    const char* id;
    const char* fwd;
    const char* bwd;
  };
  for (const Row& r : {Row{"H=1000,T=37,w=bf16,form=plain,family=cancel,seed=2", "fwd_rowwise", "bwd_det_chunked"},
                       Row{"H=256,T=9,w=fp32,form=heads24,family=llm,seed=3", "fwd_narrow", "bwd_nondet_atomic"},
                       Row{"H=96,T=20,w=bf16,form=res,family=llm,seed=1", "fwd_rowwise", "bwd_det_chunked"},
                       Row{"H=64,T=33,w=bf16,form=plain,family=epsnear,seed=4", "fwd_rowwise", "ctl_eps_dropped"}}) {
    SCOPED_TRACE(r.id);
    const seeds::CaseId c = seeds::parse_case(r.id);
    const seeds::HostInputs in = seeds::generate_host(c);
    const bool res = c.form == Form::res;
    const RowView<uint16_t> u = res ? RowView<uint16_t>::plain(in.u.data(), in.rows, in.cols) : RowView<uint16_t>{};
    const RowView<uint16_t> dh = res ? RowView<uint16_t>::plain(in.dh_new.data(), in.rows, in.cols) : RowView<uint16_t>{};
    const Outputs full = run_model(variant(r.fwd), variant(r.bwd), in.x_view(), in.dy_view(), in.w_view(), kEps, 2, u, dh,
                                   c.heads());
    const Outputs fwd = run_model(variant(r.fwd), variant(r.bwd), in.x_view(), in.dy_view(), in.w_view(), kEps, 2, u, dh,
                                  c.heads(), true);
    ASSERT_FALSE(full.dx.empty());
    ASSERT_FALSE(full.dw.empty());
    EXPECT_TRUE(fwd.dx.empty());
    EXPECT_TRUE(fwd.dw.empty());
    EXPECT_EQ(fwd.y, full.y);
    EXPECT_EQ(fwd.h_new, full.h_new);
    EXPECT_EQ(res, !fwd.h_new.empty());
    ASSERT_EQ(fwd.rstd.size(), full.rstd.size());
    EXPECT_EQ(0, std::memcmp(fwd.rstd.data(), full.rstd.data(), full.rstd.size() * sizeof(float)));
  }
}

TEST(Models, ZeroRowsGiveZeroDw) {
  const seeds::HostInputs in = seeds::generate_host(make_case(96, 0, seeds::Family::normal, 1));
  const Outputs o = run_model(variant("bwd_det_chunked"), in.x_view(), in.dy_view(), in.w_view(), kEps);
  EXPECT_TRUE(o.y.empty() && o.dx.empty() && o.rstd.empty());
  ASSERT_EQ(o.dw.size(), 96u);
  for (float v : o.dw) EXPECT_EQ(v, 0.0f);
}

// fwd_narrow's model sums a row of 256 in fwd_narrow.cu's order: lane t of
// 16 adds the squares of columns (16k + t)*8 .. +7, k = 0 then 1, one dfma
// at a time, then the half-warp butterfly; fwd_rowwise's lane t of 32 adds
// only columns 8t .. 8t+7 before its butterfly. Row 0 is built so the two
// orders round differently: x[0] = 1 and x[128..130] = 2^-27 (squares
// 2^-54, each under half an ulp of 1). fwd_narrow's lane 0 adds them to 1
// one at a time (each lost): ss = 1; fwd_rowwise's lane 16 first sums them
// to 1.5 * 2^-53, which then rounds 1 up: ss = 1 + 2^-52. msq = fma(ss,
// 1/256, eps) shows the difference; row 1 (nothing rounds) is equal.
// Row 0 of two rows of H: x[0] = 1 and x[tiny..tiny+2] = 2^-27 (squares
// 2^-54, each under half an ulp of 1), where the forward variant v adds the
// three to 1 one at a time (each lost: ss = 1) and fwd_rowwise first sums
// them in another thread (1.5 * 2^-53, which rounds 1 up: ss = 1 + 2^-52);
// row 1 (nothing rounds) is equal. Checks both models' msq against those
// values and that rstd and y agree.
void expect_own_sum_order(const char* v, int64_t H, int tiny) {
  std::vector<uint16_t> x(2 * H, 0);
  x[0] = bf16_from_float(1.0f);
  for (int j = tiny; j <= tiny + 2; ++j) x[static_cast<size_t>(j)] = bf16_from_float(std::ldexp(1.0f, -27));
  for (int64_t j = 0; j < H; ++j) x[static_cast<size_t>(H + j)] = bf16_from_float(static_cast<float>(j % 7) - 3.0f);
  std::vector<uint16_t> w(H, bf16_from_float(1.0f));
  const WeightView wv{WDtype::bf16, w.data(), H};
  const auto xv = RowView<uint16_t>::plain(x.data(), 2, H);
  const FwdResult n = model_fwd(variant(v), xv, wv, kEps, 1);
  const FwdResult r = model_fwd(default_fwd(), xv, wv, kEps, 1);
  const double inv_h = 1.0 / static_cast<double>(H), e = static_cast<double>(kEps);
  EXPECT_EQ(n.msq[0], std::fma(1.0, inv_h, e)) << v;
  EXPECT_EQ(r.msq[0], std::fma(1.0 + std::ldexp(1.0, -52), inv_h, e)) << v;
  EXPECT_NE(n.msq[0], r.msq[0]) << v;
  EXPECT_EQ(n.msq[1], r.msq[1]) << v;
  EXPECT_EQ(n.rstd[1], r.rstd[1]) << v;
  EXPECT_EQ(n.y, r.y) << v;  // the rstd of row 0 is the same FP32 value either way
}

TEST(Models, FwdNarrowSumsInItsOwnOrder) {
  const int64_t H = 256;
  expect_own_sum_order("fwd_narrow", H, 128);
  // H other than 256 is refused, naming the variant.
  std::vector<uint16_t> x(2 * H, 0);
  const auto wide = RowView<uint16_t>::plain(x.data(), 1, 2 * H);
  std::vector<uint16_t> w2(2 * H, bf16_from_float(1.0f));
  try {
    (void)model_fwd(variant("fwd_narrow"), wide, WeightView{WDtype::bf16, w2.data(), 2 * H}, kEps, 1);
    ADD_FAILURE() << "fwd_narrow's model took H = 512";
  } catch (const std::invalid_argument& ex) {
    EXPECT_NE(std::string(ex.what()).find("fwd_narrow"), std::string::npos) << ex.what();
  }
}

// fwd_wide's model sums a row in wide.h's geometry: at H = 2048 thread t of
// a team of 64 holds columns 8(64k + t) .. +7 for k = 0..3, where
// fwd_rowwise's thread t of 256 holds 8t .. 8t+7 alone. Row 0 has x[0] = 1
// and x[512..514] = 2^-27 (squares 2^-54): fwd_wide's thread 0 adds them to
// 1 one at a time (each lost): ss = 1; fwd_rowwise's thread 64 first sums
// them to 1.5 * 2^-53, which rounds 1 up in the team sum: ss = 1 + 2^-52.
// Row 1 (nothing rounds) is equal. The form res path of the model runs the
// same sum on h_new.
TEST(Models, FwdWideSumsInItsOwnOrder) { expect_own_sum_order("fwd_wide", 2048, 512); }

// fwd_staged's model sums a row in staged.h's geometry: at H = 2048 thread t
// of a team of 128 holds columns 8t .. 8t+7 and 8(128 + t) .. +7, so the
// 2^-27 values at x[1024..1026] meet 1 in thread 0 one at a time (ss = 1)
// where fwd_rowwise's thread 128 sums them first (ss = 1 + 2^-52). At
// H = 4096 (plan.h's geometry there) every bit is fwd_rowwise's, the rows
// of expect_own_sum_order's shape included.
TEST(Models, FwdStagedSumsInItsOwnOrder) {
  expect_own_sum_order("fwd_staged", 2048, 1024);
  const int64_t H = 4096;
  std::vector<uint16_t> x(3 * H);
  for (int64_t i = 0; i < 3 * H; ++i) x[static_cast<size_t>(i)] = bf16_from_float(std::ldexp(1.0f, -27));
  x[0] = bf16_from_float(1.0f);
  for (int64_t j = 0; j < H; ++j) x[static_cast<size_t>(2 * H + j)] = bf16_from_float(static_cast<float>(j % 11) - 5.0f);
  std::vector<uint16_t> w(H, bf16_from_float(0.75f));
  const WeightView wv{WDtype::bf16, w.data(), H};
  const auto xv = RowView<uint16_t>::plain(x.data(), 3, H);
  const FwdResult s = model_fwd(variant("fwd_staged"), xv, wv, kEps, 1);
  const FwdResult r = model_fwd(default_fwd(), xv, wv, kEps, 1);
  EXPECT_EQ(s.msq, r.msq);
  EXPECT_EQ(s.rstd, r.rstd);
  EXPECT_EQ(s.y, r.y);
}

// The forward's msq (binary64 m per row) handed to the backward removes the
// FP32 rstd's rounding from dw (rstd.h rstd_refined): against the exact dw
// (long double, rstd = 1/sqrt(mean x^2 + eps) of the exact row sums), the
// error relative to sum|terms| per column drops from the FP32 rstd's ~1e-8
// to ~1e-15 (binary64 accumulation); without msq it stays where it was.
TEST(Models, MsqTakesTheFp32RstdRoundingOutOfDw) {
  const seeds::CaseId c = make_case(64, 4096, seeds::Family::llm, 3);
  const seeds::HostInputs in = seeds::generate_host(c);
  const FwdResult f = model_fwd(default_fwd(), in.x_view(), in.w_view(), kEps);
  ASSERT_EQ(f.msq.size(), static_cast<size_t>(c.T));
  // msq is exactly the m whose 1/sqrt the FP32 rstd rounds (rstd.h).
  for (int64_t r = 0; r < c.T; ++r)
    ASSERT_EQ(rstd_nearest(f.msq[static_cast<size_t>(r)], f.rstd[static_cast<size_t>(r)]), f.rstd[static_cast<size_t>(r)])
        << "row " << r;
  const BwdResult plain = model_bwd(variant("bwd_det_chunked"), in.x_view(), in.dy_view(), in.w_view(), f.rstd);
  const BwdResult refined =
      model_bwd(variant("bwd_det_chunked"), in.x_view(), in.dy_view(), in.w_view(), f.rstd, 0, {}, &f.msq);
  const int64_t H = c.H;
  std::vector<long double> exact(static_cast<size_t>(H), 0.0L), mag(static_cast<size_t>(H), 0.0L);
  for (int64_t r = 0; r < c.T; ++r) {
    const uint16_t* xr = in.x_view().row(r);
    const uint16_t* dyr = in.dy_view().row(r);
    long double ss = 0.0L;
    for (int64_t j = 0; j < H; ++j) ss += static_cast<long double>(bf16_to_float(xr[j])) * bf16_to_float(xr[j]);
    const long double rs = 1.0L / std::sqrt(ss / H + static_cast<long double>(kEps));
    // The forward's m is this row's mean of squares + eps, rounded once or twice in binary64.
    EXPECT_NEAR(static_cast<double>(f.msq[static_cast<size_t>(r)]), static_cast<double>(ss / H + kEps),
                4e-16 * static_cast<double>(ss / H + kEps));
    for (int64_t j = 0; j < H; ++j) {
      const long double t = static_cast<long double>(bf16_to_float(dyr[j])) * bf16_to_float(xr[j]) * rs;
      exact[static_cast<size_t>(j)] += t;
      mag[static_cast<size_t>(j)] += std::fabs(t);
    }
  }
  double worst_plain = 0, worst_refined = 0;
  for (int64_t j = 0; j < H; ++j) {
    const auto jj = static_cast<size_t>(j);
    // dw is FP32: compare before its final rounding would hide the difference,
    // i.e. only where |dw| is well below sum|terms| (cancellation), or use the
    // error relative to sum|terms| with the FP32 output rounding subtracted out.
    const long double round_out = std::fabs(exact[jj]) * 0x1p-24L;
    worst_plain = std::max(worst_plain, static_cast<double>(
        std::max(0.0L, std::fabs(plain.dw[jj] - exact[jj]) - round_out) / mag[jj]));
    worst_refined = std::max(worst_refined, static_cast<double>(
        std::max(0.0L, std::fabs(refined.dw[jj] - exact[jj]) - round_out) / mag[jj]));
  }
  std::printf("[ info ] dw error beyond its FP32 rounding / sum|terms|: FP32 rstd %.3g, refined %.3g\n", worst_plain,
              worst_refined);
  EXPECT_GT(worst_plain, 1e-10) << "the FP32 rstd's rounding should show in some column";
  EXPECT_LT(worst_refined, worst_plain * 1e-2);
  // dx does not change: it uses the FP32 rstd either way.
  EXPECT_EQ(plain.dx, refined.dx);
}

// fwd_multirow's model is fwd_rowwise's (same rows, same arithmetic): the
// same bits at one- and two-slot H, the scalar H and FP32 weights, and a
// step run through it (run_model(fwd, bwd, ...)) equals the default step;
// a variant without a forward model is refused by name.
TEST(Models, MultirowForwardIsTheRowwiseModel) {
  const Variant& m = variant("fwd_multirow");
  for (const seeds::CaseId& c : {make_case(256, 77, seeds::Family::llm, 2), make_case(2056, 9, seeds::Family::cancel, 3),
                                 make_case(1001, 13, seeds::Family::normal, 4, WDtype::fp32)}) {
    SCOPED_TRACE(seeds::to_string(c));
    const seeds::HostInputs in = seeds::generate_host(c);
    const FwdResult a = model_fwd(default_fwd(), in.x_view(), in.w_view(), kEps);
    const FwdResult b = model_fwd(m, in.x_view(), in.w_view(), kEps);
    EXPECT_EQ(a.y, b.y);
    EXPECT_EQ(a.rstd, b.rstd);
    EXPECT_EQ(a.msq, b.msq);
    const Variant& det = variant("bwd_det_chunked");
    const Outputs s0 = run_model(det, in.x_view(), in.dy_view(), in.w_view(), kEps);
    const Outputs s1 = run_model(m, det, in.x_view(), in.dy_view(), in.w_view(), kEps);
    EXPECT_EQ(s0.y, s1.y);
    EXPECT_EQ(s0.dx, s1.dx);
    EXPECT_EQ(bit_diff(s0.dw, s1.dw).count, 0);
  }
  const seeds::HostInputs in = seeds::generate_host(make_case(16, 4, seeds::Family::normal, 1));
  try {
    (void)run_model(variant("bwd_det_chunked"), variant("bwd_det_chunked"), in.x_view(), in.dy_view(), in.w_view(), kEps);
    ADD_FAILURE() << "a backward variant accepted as the forward step";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("forward"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)run_model(m, m, in.x_view(), in.dy_view(), in.w_view(), kEps), std::invalid_argument);
}

TEST(Models, RejectBadArguments) {
  const seeds::HostInputs in = seeds::generate_host(make_case(16, 4, seeds::Family::normal, 1));
  EXPECT_THROW(model_bwd(default_fwd(), in.x_view(), in.dy_view(), in.w_view(), std::vector<float>(4)),
               std::invalid_argument);
  EXPECT_THROW(model_bwd(variant("bwd_det_chunked"), in.x_view(), in.dy_view(), in.w_view(), std::vector<float>(3)),
               std::invalid_argument);
  EXPECT_THROW(model_fwd(default_fwd(), in.x_view(), in.w_view(), -1.0f), std::invalid_argument);
  RowView<uint16_t> heads = in.x_view();
  heads.heads = 2;
  EXPECT_THROW(model_fwd(default_fwd(), heads, in.w_view(), kEps), std::invalid_argument);
}

}  // namespace
}  // namespace normgate::kernels::test
