// tests/kernels/variant_driver.cpp: the generic GPU checks of every backward
// variant and of every forward variant but the default (suite Fwd, below),
// parameterized over the registry (kernels::variants()), as MPFR's
// tests/tgeneric.c is one driver for all its functions: registering a variant
// registers these cases, and a special case goes to the topic file beside
// this one (bwd_edge_test.cpp, forms_test.cpp, pipeline_knobs_test.cpp). Each
// case runs once on the GPU (poisoned outputs, the forward, then the
// variant's backward) and must have every output element written, equal the
// CPU models bit for bit (forward and backward), give the same bits whatever
// the workspace held and in every layout, and stay within budget of the
// double reference; at T = 65537 on the cancel family the dw budget fails the
// negative controls and the accuracy-for-speed variant (lossy_dw:
// bwd_fp32_blocked) and only them (BwdCancel); lossy_dw variants are held to
// the dw budget on every family but cancel (WithinBudget). The test name is the repro:
// Variants/Bwd.WithinBudget/bwd_det_chunked_H4096_T4099_cancel_s11. Skipped
// without a CUDA device (they run on the H200 through tools/h200.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "util/gpu_test_util.h"
#include "util/kernel_test_util.h"
#include "normgate/seeds/generate.h"
#include "normgate/kernels/models.h"
#include "normgate/harness/runner.h"

namespace normgate::kernels::test {
namespace {

// --- per-variant pipeline tests -----------------------------------------------

/// The GPU run of a case, its inputs and models, computed once per case.
struct PipelineRun {
  seeds::HostInputs in;
  Outputs gpu;
  GpuRunInfo info;
  FwdResult fwd_model;
  BwdResult bwd_model;  ///< given the GPU's rstd
};
const PipelineRun& run_once(const Variant& v, const seeds::CaseId& c) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<PipelineRun>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[case_name(v, c)];
  if (!slot) {
    auto r = std::make_unique<PipelineRun>();
    r->in = seeds::generate_host(c);
    r->gpu = run_gpu(v, c, kEps, {}, &r->info);
    r->fwd_model = model_fwd(default_fwd(), r->in.x_view(), r->in.w_view(), kEps);
    r->bwd_model = model_bwd(v, r->in.x_view(), r->in.dy_view(), r->in.w_view(), r->gpu.rstd, 0, {},
                             &r->fwd_model.msq);  // the run hands the forward's msq to the backward
    slot = std::move(r);
  }
  return *slot;
}

std::vector<VariantCase> pipeline_cases() {
  using seeds::Family;
  struct Shape {
    int64_t H, T;
    Family f;
    int w = -1;  // 0 bf16, 1 fp32, -1: by the seed's parity
  };
  // (Appended shapes go last: the seeds of the earlier ones stay.)
  const Shape shapes[] = {
      {4096, 4099, Family::cancel},  // bwd: full 512-thread team (fwd: 2 slots, 256), vector path
      {7, 1000, Family::normal},     // scalar path (H % 8 != 0)
      {1, 1, Family::normal},        // smallest
      {1, 513, Family::llm},
      {5120, 700, Family::llm},      // fwd: 2 slots; bwd: one slot, wide 640-thread team
      {8200, 96, Family::normal},    // 2 slots, team 576: 2-CTA cluster, scalar-free H % 8 == 0
      {16384, 300, Family::cancel},  // largest H: 2-CTA cluster
      {64, 65537, Family::cancel},   // many chunks (cap 2112)
      {8192, 40, Family::cancel, 0},  // bwd: team 1024 in one CTA (32 warps in the team sum)
      {8191, 64, Family::normal, 1},  // bwd: team 1024, scalar path, partial last group, FP32 w
      {6144, 300, Family::llm, 1},    // bwd: wide 768-thread team, FP32 w (re-read per row)
      {2056, 301, Family::cancel},    // fwd: 2 slots, team 160 (plan.h: two slots from H > 2048)
      {3072, 299, Family::llm},       // fwd: 2 slots, team 192
      {1536, 12001, Family::llm},     // bwd: team 192, 5 CTAs an SM: chunk_plan.h's one-wave cap (660 chunks) binds
      {2048, 9001, Family::cancel, 0},  // bwd: team 256, 4 CTAs an SM: the one-wave cap (528 chunks) binds
      {1600, 9001, Family::llm, 1},     // bwd: team 224, 4 CTAs an SM, FP32 w: 528 chunks (2112 before)
  };
  std::vector<VariantCase> out;
  for (const Variant& v : variants()) {
    if (v.op != Op::bwd || v.model_only) continue;  // model-only controls: no GPU kernel to compare
    uint64_t seed = 11;
    for (const Shape& s : shapes) {
      const WDtype w = s.w == 0 ? WDtype::bf16 : s.w == 1 ? WDtype::fp32 : seed % 2 ? WDtype::bf16 : WDtype::fp32;
      if (!v.supports_h(s.H)) {  // ctl_warp64_dw: H >= 33 (the seed still advances: later shapes keep theirs)
        ++seed;
        continue;
      }
      out.push_back({&v, make_case(s.H, s.T, s.f, seed++, w)});
    }
  }
  return out;
}

class Bwd : public ::testing::TestWithParam<VariantCase> {};

TEST_P(Bwd, EveryOutputElementWritten) {
  NG_REQUIRE_GPU();
  const PipelineRun& r = run_once(*GetParam().v, GetParam().c);
  // The families here are finite, so any NaN is poison left behind.
  EXPECT_EQ(count_nan(r.gpu.y), 0);
  EXPECT_EQ(count_nan(r.gpu.rstd), 0);
  EXPECT_EQ(count_nan(r.gpu.dx), 0);
  EXPECT_EQ(count_nan(r.gpu.dw), 0);
}

TEST_P(Bwd, ForwardMatchesModelBitwise) {
  NG_REQUIRE_GPU();
  const PipelineRun& r = run_once(*GetParam().v, GetParam().c);
  EXPECT_EQ(bit_diff(r.gpu.rstd, r.fwd_model.rstd).count, 0) << bit_diff(r.gpu.rstd, r.fwd_model.rstd).str();
  EXPECT_EQ(bit_diff(r.gpu.y, r.fwd_model.y).count, 0) << bit_diff(r.gpu.y, r.fwd_model.y).str();
}

TEST_P(Bwd, MatchesModel) {
  NG_REQUIRE_GPU();
  const VariantCase& p = GetParam();
  const PipelineRun& r = run_once(*p.v, p.c);
  const BitDiff dx = bit_diff(r.gpu.dx, r.bwd_model.dx);
  EXPECT_EQ(dx.count, 0) << "dx: " << dx.str();
  if (p.v->mode == Mode::det) {
    const BitDiff dw = bit_diff(r.gpu.dw, r.bwd_model.dw);
    EXPECT_EQ(dw.count, 0) << "dw: " << dw.str();
  } else {  // atomics in another order: FP64 reassociation, one FP32 rounding
    for (size_t j = 0; j < r.gpu.dw.size(); ++j)
      ASSERT_NEAR(r.gpu.dw[j], r.bwd_model.dw[j], 2e-6 * std::fabs(r.bwd_model.dw[j]) + 1e-35) << "column " << j;
  }
}

TEST_P(Bwd, DeterministicWhateverTheWorkspaceHeld) {
  NG_REQUIRE_GPU();
  const VariantCase& p = GetParam();
  if (p.v->mode != Mode::det) GTEST_SKIP() << p.v->name << " is non-deterministic by design";
  const PipelineRun& r = run_once(*p.v, p.c);
  GpuRunOptions o;
  o.poison_seed = 0xBADC0DE;
  const Outputs again = run_gpu(*p.v, p.c, kEps, o);
  EXPECT_EQ(bit_diff(r.gpu.dx, again.dx).count, 0);
  EXPECT_EQ(bit_diff(r.gpu.dw, again.dw).count, 0);
  EXPECT_EQ(bit_diff(r.gpu.y, again.y).count, 0);
  EXPECT_EQ(bit_diff(r.gpu.rstd, again.rstd).count, 0);
}

TEST_P(Bwd, WithinBudget) {
  NG_REQUIRE_GPU();
  const VariantCase& p = GetParam();
  if (p.v->control) GTEST_SKIP() << p.v->name << " is a negative control";
  const PipelineRun& r = run_once(*p.v, p.c);
  const RefFwd rf = ref_fwd(r.in, kEps);
  const RefBwd rb = ref_bwd(r.in, r.gpu.rstd);
  const Budget y = budget_bf16(r.gpu.y, rf.y, kYTol, kYTol);
  EXPECT_EQ(y.bad, 0) << "y: " << y.str();
  const Budget dx = budget_bf16(r.gpu.dx, rb.dx, kDxTol, kDxTol);
  EXPECT_EQ(dx.bad, 0) << "dx: " << dx.str();
  const Budget dw = budget_f32(r.gpu.dw, rb.dw, kDwAtol, kDwRtol);
  if (lossy_dw(*p.v) && p.c.family == seeds::Family::cancel) {  // the gate decides (MatchesModel holds the bits)
    std::printf("[ info ] %s: dw worst |err|/tol = %.3g on cancel (not asserted)\n", std::string(p.v->name).c_str(),
                dw.worst_ratio);
    return;
  }
  EXPECT_EQ(dw.bad, 0) << "dw: " << dw.str();
}

// The same bits whether the data is aligned (vector path), one element off
// (scalar path) or in padded rows.
TEST_P(Bwd, LayoutDoesNotChangeTheBits) {
  NG_REQUIRE_GPU();
  const VariantCase& p = GetParam();
  if (p.v->mode != Mode::det || p.c.T * p.c.H > (int64_t{1} << 24)) GTEST_SKIP() << "det variants, small cases";
  const PipelineRun& r = run_once(*p.v, p.c);
  GpuRunOptions mis;
  mis.misalign_elems = 1;
  GpuRunInfo info;
  const Outputs m = run_gpu(*p.v, p.c, kEps, mis, &info);
  EXPECT_FALSE(info.bwd_vector);
  EXPECT_FALSE(info.fwd_vector);
  EXPECT_EQ(r.info.bwd_vector, p.c.H % 8 == 0);
  GpuRunOptions pad;
  pad.row_pad = 24;
  const Outputs q = run_gpu(*p.v, p.c, kEps, pad);
  for (const Outputs* o : {&m, &q}) {
    EXPECT_EQ(bit_diff(r.gpu.y, o->y).count, 0);
    EXPECT_EQ(bit_diff(r.gpu.rstd, o->rstd).count, 0);
    EXPECT_EQ(bit_diff(r.gpu.dx, o->dx).count, 0);
    EXPECT_EQ(bit_diff(r.gpu.dw, o->dw).count, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, Bwd, ::testing::ValuesIn(pipeline_cases()), param_name);

// --- per-variant forward tests ---------------------------------------------------

// Every forward variant other than the default (whose outputs every case
// above checks) runs as a check runs it (harness pipeline.h impl_variants):
// its forward (GpuRunOptions::fwd), then the carrier backward bwd_det_chunked
// on its rstd and msq. Each case must have every output written, y and rstd
// (h_new) equal its CPU model bit for bit (models.h: fwd_multirow's model is
// fwd_rowwise's) and equal the default forward's GPU run bit for bit, with
// dx and dw of the carrier equal too (so msq was the same), in every layout,
// and deterministic. Shapes: one and two slots, R(H) = 8, 4 and 2
// (multirow.h), T around one CTA's rows (teams * R) and not a multiple of
// it, the scalar path, and every form; each variant gets the shapes its H
// range and forms take (fwd_narrow: H = 256, no form res, T around its 32
// rows a CTA; fwd_wide and fwd_staged: no per-head view).
// fwd_narrow, fwd_wide and fwd_staged sum in their own order, so they equal
// the default forward only where no row's sum rounds differently (their
// models are exact).
struct FwdRun {
  seeds::HostInputs in;
  Outputs gpu, def;  ///< the variant's run; the default forward's run of the same case
  GpuRunInfo info;
  Outputs model;     ///< run_model(variant, carrier)
};
const Variant& carrier() { return variant("bwd_det_chunked"); }
const FwdRun& fwd_run_once(const Variant& v, const seeds::CaseId& c) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<FwdRun>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[case_name(v, c)];
  if (!slot) {
    auto r = std::make_unique<FwdRun>();
    r->in = seeds::generate_host(c);
    GpuRunOptions o;
    o.fwd = &v;
    r->gpu = run_gpu(std::vector<const Variant*>{&carrier()}, r->in, kEps, o).front();
    r->def = run_gpu(std::vector<const Variant*>{&carrier()}, r->in, kEps).front();
    (void)run_gpu(carrier(), c, kEps, o, &r->info);
    const auto rows = [&](const std::vector<uint16_t>& x) {
      return x.empty() ? RowView<uint16_t>{} : RowView<uint16_t>::plain(x.data(), r->in.rows, r->in.cols);
    };
    r->model = run_model(v, carrier(), r->in.x_view(), r->in.dy_view(), r->in.w_view(), kEps, 0, rows(r->in.u),
                         rows(r->in.dh_new));
    slot = std::move(r);
  }
  return *slot;
}

std::vector<VariantCase> forward_cases() {
  using seeds::Family;
  struct Shape {
    int64_t H, T;
    Family f;
    int w = -1;           // 0 bf16, 1 fp32, -1: by the seed's parity
    Form form = Form::plain;
  };
  const Shape shapes[] = {
      {64, 64, Family::cancel},              // 8 teams of 32 x R = 8: exactly one CTA
      {64, 65, Family::normal},              // one row into a second CTA
      {256, 1000, Family::llm},              // 1 slot, one warp per team
      {256, 32, Family::cancel, 1},          // fwd_narrow: exactly one CTA
      {256, 33, Family::normal, 0},          // fwd_narrow: one row into a second CTA (a warp with one live row)
      {256, 1, Family::llm},                 // one row
      {1024, 37, Family::cancel},            // 2 teams of 4 warps: rows finished by warps 0..3 of each
      {1536, 9, Family::normal},             // fwd_wide: teams of 64, 3 slots, a last CTA with 1 live row of 4;
                                             // fwd_staged: teams of 96 (3 warps), 2 a CTA, 1 live row in the last
      {2048, 17, Family::llm, 1},            // 1 slot, 8 warps, FP32 w
      {2056, 301, Family::cancel},           // 2 slots, team 160, R = 4
      {4096, 4099, Family::normal},          // 2 slots, team 256, R = 4
      {8192, 9, Family::llm, 0},             // team 512, R = 4: warps 4..15 finish no row
      {8200, 7, Family::normal, 1},          // team 576, R = 2, w re-read per row
      {16384, 5, Family::cancel},            // team 1024, R = 2
      {7, 1000, Family::normal},             // scalar path (H % 8 != 0)
      {1, 3, Family::normal},                // smallest
      {6141, 33, Family::llm, 1},            // scalar path, 2 slots
      {256, 301, Family::llm, 0, Form::heads24},   // strided per-head views
      {256, 2049, Family::cancel, 1, Form::heads4},
      {4096, 515, Family::cancel, 0, Form::res},   // fused residual, R = 4
      {1001, 77, Family::llm, 1, Form::res},       // fused residual, scalar path
      {16384, 3, Family::llm, 0, Form::res},       // fused residual, R = 2; fwd_staged: 64 KiB of slots
      {1536, 9, Family::cancel, 1, Form::res},     // fused residual; fwd_staged: 2 teams a CTA, 1 live row in the last
      {200, 33, Family::normal, 0, Form::res},     // fused residual, one slot; fwd_staged: 8 teams of 32 a CTA
      {12288, 3, Family::cancel, 1, Form::res},    // fused residual; fwd_staged: 3 slots, 48 KiB of slots + static
  };
  std::vector<VariantCase> out;
  for (const Variant& v : variants()) {
    if (v.op != Op::fwd || &v == &default_fwd()) continue;
    uint64_t seed = 31;
    for (const Shape& s : shapes) {
      if (!v.supports_h(s.H) || !v.supports(s.form)) continue;
      const WDtype w = s.w == 0 ? WDtype::bf16 : s.w == 1 ? WDtype::fp32 : seed % 2 ? WDtype::bf16 : WDtype::fp32;
      seeds::CaseId c = make_case(s.H, s.T, s.f, seed++, w);
      c.form = s.form;
      out.push_back({&v, c});
    }
  }
  return out;
}

class Fwd : public ::testing::TestWithParam<VariantCase> {};

TEST_P(Fwd, EveryOutputElementWritten) {
  NG_REQUIRE_GPU();
  const FwdRun& r = fwd_run_once(*GetParam().v, GetParam().c);
  EXPECT_EQ(count_nan(r.gpu.y), 0);
  EXPECT_EQ(count_nan(r.gpu.rstd), 0);
  EXPECT_EQ(count_nan(r.gpu.dx), 0);
  EXPECT_EQ(count_nan(r.gpu.dw), 0);
  if (GetParam().c.form == Form::res) {
    EXPECT_EQ(r.gpu.h_new.size(), r.in.x.size());
    EXPECT_EQ(count_nan(r.gpu.h_new), 0);
  }
}

TEST_P(Fwd, MatchesModelBitwise) {
  NG_REQUIRE_GPU();
  const FwdRun& r = fwd_run_once(*GetParam().v, GetParam().c);
  EXPECT_EQ(bit_diff(r.gpu.y, r.model.y).count, 0) << "y: " << bit_diff(r.gpu.y, r.model.y).str();
  EXPECT_EQ(bit_diff(r.gpu.rstd, r.model.rstd).count, 0) << "rstd: " << bit_diff(r.gpu.rstd, r.model.rstd).str();
  EXPECT_EQ(bit_diff(r.gpu.h_new, r.model.h_new).count, 0);
  EXPECT_EQ(bit_diff(r.gpu.dx, r.model.dx).count, 0) << "dx: " << bit_diff(r.gpu.dx, r.model.dx).str();
  EXPECT_EQ(bit_diff(r.gpu.dw, r.model.dw).count, 0) << "dw: " << bit_diff(r.gpu.dw, r.model.dw).str();
}

// The same bits as the default forward's GPU run: y, rstd, h_new, and the
// carrier's dx and dw (dw reads msq: the same msq too).
TEST_P(Fwd, EqualsTheDefaultForwardBitwise) {
  NG_REQUIRE_GPU();
  if (GetParam().v->id == VariantId::fwd_narrow || GetParam().v->id == VariantId::fwd_wide ||
      GetParam().v->id == VariantId::fwd_staged)
    GTEST_SKIP() << GetParam().v->name << " sums in its own order (MatchesModelBitwise checks its bits)";
  const FwdRun& r = fwd_run_once(*GetParam().v, GetParam().c);
  EXPECT_EQ(bit_diff(r.gpu.y, r.def.y).count, 0) << "y: " << bit_diff(r.gpu.y, r.def.y).str();
  EXPECT_EQ(bit_diff(r.gpu.rstd, r.def.rstd).count, 0);
  EXPECT_EQ(bit_diff(r.gpu.h_new, r.def.h_new).count, 0);
  EXPECT_EQ(bit_diff(r.gpu.dx, r.def.dx).count, 0);
  EXPECT_EQ(bit_diff(r.gpu.dw, r.def.dw).count, 0);
}

TEST_P(Fwd, DeterministicAndLayoutDoesNotChangeTheBits) {
  NG_REQUIRE_GPU();
  const VariantCase& p = GetParam();
  const FwdRun& r = fwd_run_once(*p.v, p.c);
  EXPECT_EQ(r.info.fwd_vector, p.c.H % 8 == 0);
  GpuRunOptions again;
  again.fwd = p.v;
  again.poison_seed = 0xBADC0DE;
  std::vector<Outputs> runs{run_gpu(carrier(), p.c, kEps, again)};
  if (p.c.rows() * p.c.H <= (int64_t{1} << 24)) {
    GpuRunOptions mis = again;
    mis.misalign_elems = 1;
    GpuRunInfo info;
    runs.push_back(run_gpu(carrier(), p.c, kEps, mis, &info));
    EXPECT_FALSE(info.fwd_vector);
    if (p.c.heads() == 1) {  // the per-head layouts are fixed
      GpuRunOptions pad = again;
      pad.row_pad = 24;
      runs.push_back(run_gpu(carrier(), p.c, kEps, pad));
    }
  }
  for (const Outputs& o : runs) {
    EXPECT_EQ(bit_diff(r.gpu.y, o.y).count, 0);
    EXPECT_EQ(bit_diff(r.gpu.rstd, o.rstd).count, 0);
    EXPECT_EQ(bit_diff(r.gpu.h_new, o.h_new).count, 0);
    EXPECT_EQ(bit_diff(r.gpu.dx, o.dx).count, 0);
    EXPECT_EQ(bit_diff(r.gpu.dw, o.dw).count, 0);
  }
}

TEST_P(Fwd, WithinBudget) {
  NG_REQUIRE_GPU();
  const VariantCase& p = GetParam();
  if (p.c.form == Form::res) GTEST_SKIP() << "form res: the reference normalizes h_new (checked in MatchesModelBitwise)";
  const FwdRun& r = fwd_run_once(*p.v, p.c);
  const RefFwd rf = ref_fwd(r.in, kEps);
  const Budget y = budget_bf16(r.gpu.y, rf.y, kYTol, kYTol);
  EXPECT_EQ(y.bad, 0) << "y: " << y.str();
}

INSTANTIATE_TEST_SUITE_P(Variants, Fwd, ::testing::ValuesIn(forward_cases()), param_name);

// --- controls fail on the GPU too -----------------------------------------------

std::vector<VariantCase> control_cases() {
  std::vector<VariantCase> out;
  // One shared case (BwdCancel generates its inputs once): variants without
  // H = 4096 (bwd_det_wide) are left to their own tests.
  for (const Variant& v : variants())
    if (v.op == Op::bwd && !v.model_only && v.supports_h(4096))
      out.push_back({&v, make_case(4096, 65537, seeds::Family::cancel, 17)});
  return out;
}

class BwdCancel : public ::testing::TestWithParam<VariantCase> {};

TEST_P(BwdCancel, DwBudgetSeparatesControls) {
  NG_REQUIRE_GPU();
  const VariantCase& p = GetParam();
  static std::mutex mu;
  static std::unique_ptr<seeds::HostInputs> in;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!in) in = std::make_unique<seeds::HostInputs>(seeds::generate_host(p.c));
  }
  const Outputs o = run_gpu(*p.v, p.c, kEps);
  const RefBwd rb = ref_bwd(*in, o.rstd);
  const Budget dw = budget_f32(o.dw, rb.dw, kDwAtol, kDwRtol);
  if (p.v->control || lossy_dw(*p.v)) {
    EXPECT_GT(dw.bad, 0) << p.v->name << " passed: " << dw.str();
  } else {
    EXPECT_EQ(dw.bad, 0) << "dw: " << dw.str();
  }
  const Budget dx = budget_bf16(o.dx, rb.dx, kDxTol, kDxTol);
  EXPECT_EQ(dx.bad, 0) << "dx: " << dx.str();
  std::printf("[ info ] %s: dw worst |err|/tol = %.3g (%lld of %lld columns over), dx worst = %.3g\n",
              std::string(p.v->name).c_str(), dw.worst_ratio, static_cast<long long>(dw.bad),
              static_cast<long long>(p.c.H), dx.worst_ratio);
}

INSTANTIATE_TEST_SUITE_P(Variants, BwdCancel, ::testing::ValuesIn(control_cases()), param_name);

}  // namespace
}  // namespace normgate::kernels::test
