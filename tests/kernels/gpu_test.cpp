// GPU tests of the kernels (skipped without a CUDA device: they run on the
// H200 through tools/h200.sh). Parameterized over the registry: registering
// a backward variant registers its cases.
#include <gtest/gtest.h>

#if defined(NORMGATE_KERNELS_HAVE_CUDA)
#include <cuda_runtime.h>
#endif

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "util/kernel_test_util.h"
#include "normgate/core/bf16.h"
#include "normgate/seeds/generate.h"
#include "normgate/kernels/models.h"
#include "normgate/kernels/pipeline.h"
#include "normgate/kernels/plan.h"
#include "normgate/harness/runner.h"
#include "normgate/bench/timing.h"

namespace normgate::kernels::test {
namespace {

#define NG_REQUIRE_GPU()                                                               \
  do {                                                                                 \
    if (!gpu_available()) GTEST_SKIP() << "no CUDA device: GPU test runs on the H200 (tools/h200.sh)"; \
  } while (0)

constexpr double kDxTol = 1e-2;
constexpr double kDwAtol = 1e-4, kDwRtol = 1e-4;
constexpr double kYTol = 1e-2;
constexpr float kEps = 1e-6f;

std::string param_name(const ::testing::TestParamInfo<VariantCase>& i) { return case_name(*i.param.v, i.param.c); }

// --- device inputs ------------------------------------------------------------

class DeviceInputs : public ::testing::TestWithParam<seeds::CaseId> {};

TEST_P(DeviceInputs, ByteIdenticalToHostGenerator) {
  NG_REQUIRE_GPU();
  const seeds::CaseId& c = GetParam();
  const seeds::HostInputs h = seeds::generate_host(c);
  const seeds::HostInputs d = generate_inputs_on_gpu(c);
  const seeds::InputDigests dh = seeds::digest(h), dd = seeds::digest(d);
  EXPECT_EQ(dd.x, dh.x);
  EXPECT_EQ(dd.dy, dh.dy);
  EXPECT_EQ(dd.w, dh.w);
  EXPECT_EQ(dd.u, dh.u);
  EXPECT_EQ(dd.dh_new, dh.dh_new);
  EXPECT_EQ(dd.all, dh.all);
}

std::vector<seeds::CaseId> input_cases() {
  using seeds::Family;
  std::vector<seeds::CaseId> out;
  uint64_t seed = 3;
  for (Family f : {Family::normal, Family::llm, Family::cancel, Family::zeros, Family::tiny, Family::huge,
                   Family::specials})
    for (WDtype w : {WDtype::bf16, WDtype::fp32}) out.push_back(make_case(f == Family::cancel ? 64 : 1000, 257, f, seed++, w));
  seeds::CaseId res = make_case(256, 33, Family::llm, 77);
  res.form = Form::res;
  out.push_back(res);
  out.push_back(make_case(7, 1, Family::normal, 5));
  return out;
}

INSTANTIATE_TEST_SUITE_P(Cases, DeviceInputs, ::testing::ValuesIn(input_cases()),
                         [](const ::testing::TestParamInfo<seeds::CaseId>& i) {
                           std::string s = std::string(seeds::to_string(i.param.family)) + "_H" +
                                           std::to_string(i.param.H) + "_T" + std::to_string(i.param.T) + "_w" +
                                           std::string(to_string(i.param.w)) + "_" +
                                           std::string(to_string(i.param.form)) + "_s" + std::to_string(i.param.seed);
                           return s;
                         });

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
  };
  std::vector<VariantCase> out;
  for (const Variant& v : variants()) {
    if (v.op != Op::bwd) continue;
    uint64_t seed = 11;
    for (const Shape& s : shapes) {
      const WDtype w = s.w == 0 ? WDtype::bf16 : s.w == 1 ? WDtype::fp32 : seed % 2 ? WDtype::bf16 : WDtype::fp32;
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

// --- controls fail on the GPU too -----------------------------------------------

std::vector<VariantCase> control_cases() {
  std::vector<VariantCase> out;
  for (const Variant& v : variants())
    if (v.op == Op::bwd) out.push_back({&v, make_case(4096, 65537, seeds::Family::cancel, 17)});
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
  if (p.v->control) {
    EXPECT_GT(dw.bad, 0) << "control passed: " << dw.str();
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

// --- edge cases ---------------------------------------------------------------

TEST(BwdEdge, ZeroRowsWriteOnlyDwZero) {
  NG_REQUIRE_GPU();
  for (const Variant& v : variants()) {
    if (v.op != Op::bwd) continue;
    const Outputs o = run_gpu(v, make_case(777, 0, seeds::Family::normal, 1), kEps);
    EXPECT_TRUE(o.y.empty() && o.dx.empty() && o.rstd.empty()) << v.name;
    ASSERT_EQ(o.dw.size(), 777u);
    for (float w : o.dw) ASSERT_EQ(w, 0.0f) << v.name;  // poison was NaN
  }
}

TEST(BwdEdge, ControlsNeedOptInThroughRunGpu) {
  NG_REQUIRE_GPU();
  GpuRunOptions o;
  o.controls = ControlUse::refuse;
  EXPECT_THROW(run_gpu(variant("ctl_fp32_seq"), make_case(64, 8, seeds::Family::normal, 1), kEps, o),
               std::invalid_argument);
}

TEST(BwdEdge, NondetStaysCloseToDet) {
  NG_REQUIRE_GPU();
  const seeds::CaseId c = make_case(2048, 50000, seeds::Family::llm, 23);
  const Outputs d = run_gpu(variant("bwd_det_chunked"), c, kEps);
  const Outputs n = run_gpu(variant("bwd_nondet_atomic"), c, kEps);
  EXPECT_EQ(bit_diff(d.dx, n.dx).count, 0);
  for (size_t j = 0; j < d.dw.size(); ++j) ASSERT_NEAR(d.dw[j], n.dw[j], 4e-6 * std::fabs(d.dw[j]) + 1e-35) << j;
}

TEST(BwdEdge, ListRunEqualsOneVariantRuns) {
  NG_REQUIRE_GPU();
  const seeds::CaseId c = make_case(1000, 3001, seeds::Family::cancel, 5);
  const std::vector<const Variant*> vs = {&variant("bwd_det_chunked"), &variant("ctl_bf16_partials"),
                                          &variant("bwd_nondet_atomic")};
  const std::vector<Outputs> many = run_gpu(vs, c, kEps);
  ASSERT_EQ(many.size(), vs.size());
  for (size_t k = 0; k < vs.size(); ++k) {
    const Outputs one = run_gpu(*vs[k], c, kEps);
    EXPECT_EQ(bit_diff(one.y, many[k].y).count, 0) << vs[k]->name;
    EXPECT_EQ(bit_diff(one.dx, many[k].dx).count, 0) << vs[k]->name;
    EXPECT_EQ(0, std::memcmp(one.rstd.data(), many[k].rstd.data(), one.rstd.size() * 4)) << vs[k]->name;
    if (vs[k]->mode == Mode::det) {
      EXPECT_EQ(0, std::memcmp(one.dw.data(), many[k].dw.data(), one.dw.size() * 4)) << vs[k]->name;
    }
  }
  // The list really ran different variants: the BF16-partials control's dw differs.
  EXPECT_NE(0, std::memcmp(many[0].dw.data(), many[1].dw.data(), many[0].dw.size() * 4));
  EXPECT_THROW(run_gpu(std::vector<const Variant*>{}, c, kEps), std::invalid_argument);
  EXPECT_THROW(run_gpu(std::vector<const Variant*>{&variant("fwd_rowwise")}, c, kEps), std::invalid_argument);
}

TEST(BwdEdge, SharedRunSkipsOnlyIdenticalTensors) {
  NG_REQUIRE_GPU();
  const seeds::CaseId c = make_case(777, 2049, seeds::Family::llm, 9);
  const std::vector<const Variant*> vs = {&variant("bwd_det_chunked"), &variant("ctl_bf16_partials"),
                                          &variant("bwd_nondet_atomic"), &variant("ctl_fp32_seq")};
  const std::vector<Outputs> full = run_gpu(vs, c, kEps);
  const SharedGpuRun sh = run_gpu_shared(vs, c, nullptr, kEps);
  ASSERT_EQ(sh.outs.size(), vs.size());
  ASSERT_EQ(sh.dx_source.size(), vs.size());
  EXPECT_EQ(bit_diff(sh.outs[0].y, full[0].y).count, 0);
  EXPECT_EQ(0, std::memcmp(sh.outs[0].rstd.data(), full[0].rstd.data(), full[0].rstd.size() * 4));
  for (size_t k = 0; k < vs.size(); ++k) {
    if (k > 0) {
      EXPECT_TRUE(sh.outs[k].y.empty()) << vs[k]->name;
      EXPECT_TRUE(sh.outs[k].rstd.empty()) << vs[k]->name;
    }
    const size_t src = sh.dx_source[k];
    ASSERT_LE(src, k);
    if (src == k) {
      EXPECT_EQ(bit_diff(sh.outs[k].dx, full[k].dx).count, 0) << vs[k]->name;
    } else {
      EXPECT_TRUE(sh.outs[k].dx.empty()) << vs[k]->name;
      EXPECT_EQ(bit_diff(full[src].dx, full[k].dx).count, 0) << vs[k]->name << " said equal to " << vs[src]->name;
    }
    if (vs[k]->mode == Mode::det) {
      EXPECT_EQ(0, std::memcmp(sh.outs[k].dw.data(), full[k].dw.data(), full[k].dw.size() * 4)) << vs[k]->name;
    }
  }
  // The nondet variant's dx is the det one's row code: shared, not copied.
  EXPECT_EQ(sh.dx_source[2], 0u);
  // And a dx that differs in one bit is not shared: copied, with that bit.
  GpuRunOptions o;
  o.test_flip_dx_of = 2;
  const SharedGpuRun flip = run_gpu_shared(vs, c, nullptr, kEps, o);
  EXPECT_EQ(flip.dx_source[1], 0u);
  ASSERT_EQ(flip.dx_source[2], 2u);
  EXPECT_EQ(flip.dx_source[3], 0u);  // the next variant is equal to the first again
  ASSERT_EQ(flip.outs[2].dx.size(), full[2].dx.size());
  EXPECT_EQ(flip.outs[2].dx[0], static_cast<uint16_t>(full[2].dx[0] ^ 1u));
  EXPECT_EQ(bit_diff(flip.outs[2].dx, full[2].dx).count, 1);
}

// run_gpu_shared with download_inputs: the inputs it generated in its own
// (padded, strided) buffers come back byte for byte as the host generator's
// and generate_inputs_on_gpu's, and the outputs equal a run without it (the
// pipeline's GPU half takes the inputs from there instead of generating
// twice). T = 0 and every layout (plain, res, heads24's packed rows, heads4).
TEST(BwdEdge, SharedRunDownloadsTheInputsItGenerated) {
  NG_REQUIRE_GPU();
  const std::vector<const Variant*> vs = {&variant("bwd_det_chunked"), &variant("bwd_nondet_atomic")};
  for (const char* id : {"H=1000,T=257,w=bf16,form=plain,family=cancel,seed=3",
                         "H=777,T=65,w=fp32,form=plain,family=specials,seed=2",
                         "H=512,T=33,w=bf16,form=res,family=llm,seed=77", "H=256,T=31,w=fp32,form=heads24,family=llm,seed=4",
                         "H=256,T=17,w=bf16,form=heads4,family=normal,seed=5",
                         "H=64,T=0,w=bf16,form=plain,family=normal,seed=1"}) {
    SCOPED_TRACE(id);
    const seeds::CaseId c = seeds::parse_case(id);
    GpuRunOptions o;
    o.download_inputs = true;
    const SharedGpuRun with = run_gpu_shared(vs, c, nullptr, kEps, o);
    const SharedGpuRun without = run_gpu_shared(vs, c, nullptr, kEps);
    EXPECT_TRUE(without.inputs.x.empty());
    EXPECT_EQ(without.seconds_inputs, 0.0);
    EXPECT_GT(with.seconds_inputs, 0.0);
    EXPECT_TRUE(with.inputs.id == c);
    EXPECT_EQ(with.inputs.rows, c.rows());
    EXPECT_EQ(with.inputs.cols, c.H);
    const seeds::InputDigests dh = seeds::digest(seeds::generate_host(c)), dd = seeds::digest(with.inputs),
                              dg = seeds::digest(generate_inputs_on_gpu(c));
    EXPECT_EQ(dd.all, dh.all);
    EXPECT_EQ(dd.all, dg.all);
    EXPECT_EQ(dd.x, dh.x);  // each tensor, not only the concatenation
    EXPECT_EQ(dd.dy, dh.dy);
    EXPECT_EQ(dd.w, dh.w);
    EXPECT_EQ(dd.u, dh.u);
    EXPECT_EQ(dd.dh_new, dh.dh_new);
    EXPECT_EQ(with.inputs.x.size(), static_cast<size_t>(c.rows() * c.H));
    EXPECT_EQ(with.inputs.u.size(), c.form == Form::res ? with.inputs.x.size() : 0u);
    ASSERT_EQ(with.outs.size(), without.outs.size());
    EXPECT_EQ(with.dx_source, without.dx_source);
    for (size_t k = 0; k < vs.size(); ++k) {
      EXPECT_EQ(with.outs[k].y, without.outs[k].y);
      EXPECT_EQ(with.outs[k].dx, without.outs[k].dx);
      EXPECT_EQ(with.outs[k].h_new, without.outs[k].h_new);
      EXPECT_EQ(0, std::memcmp(with.outs[k].rstd.data(), without.outs[k].rstd.data(), without.outs[k].rstd.size() * 4));
      ASSERT_EQ(with.outs[k].dw.size(), static_cast<size_t>(c.H));
      if (vs[k]->mode == Mode::det) {
        EXPECT_EQ(0, std::memcmp(with.outs[k].dw.data(), without.outs[k].dw.data(), without.outs[k].dw.size() * 4));
      }
    }
  }
  // Only run_gpu_shared on generated inputs takes the option.
  const seeds::CaseId c = seeds::parse_case("H=64,T=8,w=bf16,form=plain,family=normal,seed=1");
  GpuRunOptions o;
  o.download_inputs = true;
  EXPECT_THROW(run_gpu(vs, c, kEps, o), std::invalid_argument);
  const seeds::HostInputs h = seeds::generate_host(c);
  EXPECT_THROW(run_gpu(vs, h, kEps, o), std::invalid_argument);
  EXPECT_THROW(run_gpu_shared(vs, c, &h, kEps, o), std::invalid_argument);
}

// ReuseGpuBuffers: runs inside the scope reuse the kept buffers (larger,
// holding the previous run's data) and give bitwise what runs without it
// give, in every layout and in shrinking and growing order; the outside-view
// check still sees a write into the (kept, re-poisoned) padding.
TEST(BwdEdge, KeptDeviceBuffersGiveTheSameBits) {
  NG_REQUIRE_GPU();
  const std::vector<const Variant*> vs = {&variant("bwd_det_chunked"), &variant("ctl_bf16_partials")};
  const std::vector<seeds::CaseId> cs = {seeds::parse_case("H=1000,T=513,w=bf16,form=res,family=cancel,seed=3"),
                                         seeds::parse_case("H=256,T=31,w=fp32,form=heads24,family=llm,seed=4"),
                                         seeds::parse_case("H=777,T=65,w=bf16,form=plain,family=normal,seed=2"),
                                         seeds::parse_case("H=64,T=0,w=bf16,form=plain,family=normal,seed=1"),
                                         seeds::parse_case("H=2048,T=700,w=bf16,form=res,family=llm,seed=8")};
  std::vector<SharedGpuRun> fresh;
  for (const auto& c : cs) fresh.push_back(run_gpu_shared(vs, c, nullptr, kEps));
  const ReuseGpuBuffers keep;
  for (int pass = 0; pass < 2; ++pass)
    for (size_t i = 0; i < cs.size(); ++i) {
      SCOPED_TRACE(seeds::to_string(cs[i]));
      GpuRunOptions o;
      o.download_inputs = pass == 1;
      const SharedGpuRun kept = run_gpu_shared(vs, cs[i], nullptr, kEps, o);
      if (pass == 1) {  // the gate's path: inputs downloaded from kept (stale-holding) buffers
        const seeds::InputDigests dk = seeds::digest(kept.inputs), dh = seeds::digest(seeds::generate_host(cs[i]));
        EXPECT_EQ(dk.x, dh.x);
        EXPECT_EQ(dk.dy, dh.dy);
        EXPECT_EQ(dk.w, dh.w);
        EXPECT_EQ(dk.u, dh.u);
        EXPECT_EQ(dk.dh_new, dh.dh_new);
      }
      ASSERT_EQ(kept.outs.size(), fresh[i].outs.size());
      EXPECT_EQ(kept.dx_source, fresh[i].dx_source);
      for (size_t k = 0; k < vs.size(); ++k) {
        EXPECT_EQ(kept.outs[k].y, fresh[i].outs[k].y);
        EXPECT_EQ(kept.outs[k].dx, fresh[i].outs[k].dx);
        EXPECT_EQ(kept.outs[k].h_new, fresh[i].outs[k].h_new);
        ASSERT_EQ(kept.outs[k].rstd.size(), fresh[i].outs[k].rstd.size());
        EXPECT_EQ(0, std::memcmp(kept.outs[k].rstd.data(), fresh[i].outs[k].rstd.data(), kept.outs[k].rstd.size() * 4));
        ASSERT_EQ(kept.outs[k].dw.size(), fresh[i].outs[k].dw.size());
        EXPECT_EQ(0, std::memcmp(kept.outs[k].dw.data(), fresh[i].outs[k].dw.data(), kept.outs[k].dw.size() * 4));
      }
    }
  GpuRunOptions o;
  o.test_write_outside_view = true;
  EXPECT_THROW(run_gpu(variant("bwd_det_chunked"), seeds::parse_case("H=256,T=9,w=bf16,form=heads24,family=normal,seed=1"),
                       kEps, o),
               std::runtime_error);
}

// ReuseHostBuffers, as the gate's pipeline uses it: each run's host vectors
// are handed back (recycle_host_buffers) only after the next run, so a run
// takes vectors of the run before the previous one (sizes growing and
// shrinking, one under the pool's 1 MiB minimum, T = 0, a tensor of two
// staging chunks; the second pass with the copies split over 3 threads,
// NORMGATE_COPY_THREADS) and gives bitwise what fresh vectors give; it never
// writes into the previous run's vectors, which are still being read (they
// stay equal to the fresh results).
TEST(BwdEdge, KeptHostBuffersGiveTheSameBits) {
  NG_REQUIRE_GPU();
  const std::vector<const Variant*> vs = {&variant("bwd_det_chunked"), &variant("ctl_bf16_partials")};
  const std::vector<seeds::CaseId> cs = {
      seeds::parse_case("H=2048,T=700,w=bf16,form=res,family=llm,seed=8"),
      seeds::parse_case("H=4096,T=9000,w=fp32,form=plain,family=cancel,seed=3"),  // 73.7 MB: 2 staging chunks
      seeds::parse_case("H=1024,T=600,w=bf16,form=plain,family=normal,seed=2"),
      seeds::parse_case("H=256,T=2100,w=bf16,form=heads24,family=llm,seed=4"),
      seeds::parse_case("H=777,T=65,w=bf16,form=plain,family=normal,seed=2"),  // under the pool's minimum
      seeds::parse_case("H=64,T=0,w=bf16,form=plain,family=normal,seed=1"),
      seeds::parse_case("H=2048,T=900,w=bf16,form=res,family=cancel,seed=5")};
  GpuRunOptions o;
  o.download_inputs = true;
  std::vector<SharedGpuRun> fresh;
  for (const auto& c : cs) fresh.push_back(run_gpu_shared(vs, c, nullptr, kEps, o));
  // Every BF16 row tensor's storage (what the pool hands out).
  auto tensors = [](SharedGpuRun& r) {
    std::vector<std::vector<uint16_t>*> t = {&r.inputs.x, &r.inputs.dy, &r.inputs.u, &r.inputs.dh_new};
    for (auto& out : r.outs)
      for (std::vector<uint16_t>* v : {&out.y, &out.dx, &out.h_new}) t.push_back(v);
    return t;
  };
  auto expect_fresh_bits = [&](const SharedGpuRun& got, size_t i) {
    const SharedGpuRun& want = fresh[i];
    const seeds::InputDigests dg = seeds::digest(got.inputs), dw = seeds::digest(want.inputs);
    EXPECT_EQ(dg.all, dw.all);
    EXPECT_EQ(dg.x, dw.x);
    EXPECT_EQ(dg.dy, dw.dy);
    EXPECT_EQ(dg.u, dw.u);
    EXPECT_EQ(dg.dh_new, dw.dh_new);
    ASSERT_EQ(got.outs.size(), want.outs.size());
    EXPECT_EQ(got.dx_source, want.dx_source);
    for (size_t k = 0; k < got.outs.size(); ++k) {
      EXPECT_EQ(got.outs[k].y, want.outs[k].y);
      EXPECT_EQ(got.outs[k].dx, want.outs[k].dx);
      EXPECT_EQ(got.outs[k].h_new, want.outs[k].h_new);
      ASSERT_EQ(got.outs[k].rstd.size(), want.outs[k].rstd.size());
      EXPECT_EQ(0, std::memcmp(got.outs[k].rstd.data(), want.outs[k].rstd.data(), got.outs[k].rstd.size() * 4));
      ASSERT_EQ(got.outs[k].dw.size(), want.outs[k].dw.size());
      EXPECT_EQ(0, std::memcmp(got.outs[k].dw.data(), want.outs[k].dw.data(), got.outs[k].dw.size() * 4));
    }
  };
  const ReuseGpuBuffers keep_device;
  const ReuseHostBuffers keep_host;
  std::optional<SharedGpuRun> held;  // the previous run: its oracle half is still reading it
  size_t held_i = 0, reused = 0;
  std::vector<const uint16_t*> handed_back;
  struct CopyThreads {  // pass 2: NORMGATE_COPY_THREADS=3, unset again on any exit
    ~CopyThreads() { unsetenv("NORMGATE_COPY_THREADS"); }
  } restore;
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) setenv("NORMGATE_COPY_THREADS", "3", 1);
    for (size_t i = 0; i < cs.size(); ++i) {
      SCOPED_TRACE(seeds::to_string(cs[i]) + (pass == 0 ? " (pass 1)" : " (pass 2, 3 copy threads)"));
      SharedGpuRun run = run_gpu_shared(vs, cs[i], nullptr, kEps, o);
      expect_fresh_bits(run, i);
      for (std::vector<uint16_t>* a : tensors(run)) {
        if (a->empty()) continue;
        if (std::find(handed_back.begin(), handed_back.end(), a->data()) != handed_back.end()) ++reused;
        if (!held) continue;
        for (std::vector<uint16_t>* b : tensors(*held)) {
          if (b->empty()) continue;
          const bool disjoint = a->data() + a->size() <= b->data() || b->data() + b->size() <= a->data();
          EXPECT_TRUE(disjoint) << "a run wrote into the previous run's vectors";
        }
      }
      if (held) {
        {
          SCOPED_TRACE("previous run, after this one: " + seeds::to_string(cs[held_i]));
          expect_fresh_bits(*held, held_i);
        }
        // A sentinel NaN in every element handed back: a later run that left
        // any element of a reused vector unwritten shows it in its bits (even
        // when the vector comes back holding the same tensor).
        for (std::vector<uint16_t>* b : tensors(*held)) {
          if (b->empty()) continue;
          handed_back.push_back(b->data());
          std::fill(b->begin(), b->end(), uint16_t{0x7FC1});
        }
        recycle_host_buffers(held->inputs);
        for (auto& out : held->outs) recycle_host_buffers(out);
      }
      held = std::move(run);
      held_i = i;
    }
  }
  EXPECT_GT(reused, 0u) << "no run took a vector handed back by an earlier one";
}

// Per-head forms on the GPU: the strided [T, 24, 256] (q part of packed rows
// of 40*256) and contiguous [T, 4, 256] views give bitwise what the plain
// [T*heads, 256] rows of the same inputs give (every output of the det
// variant and of the control; y, rstd, dx of all), and the kernels write
// nothing outside the view (run_gpu checks the poisoned gaps every run).
TEST(HeadForms, StridedViewsEqualContiguousRows) {
  NG_REQUIRE_GPU();
  const std::vector<const Variant*> vs = {&variant("bwd_det_chunked"), &variant("bwd_nondet_atomic"),
                                          &variant("ctl_fp32_seq")};
  for (const char* id : {"H=256,T=301,w=bf16,form=heads24,family=llm,seed=4",
                         "H=256,T=2049,w=fp32,form=heads4,family=cancel,seed=6"}) {
    const seeds::CaseId c = seeds::parse_case(id);
    const seeds::HostInputs in = seeds::generate_host(c);
    seeds::HostInputs flat = in;  // the same bytes as plain rows
    flat.id.form = Form::plain;
    flat.id.T = c.rows();
    const std::vector<Outputs> a = run_gpu(vs, in, kEps), b = run_gpu(vs, flat, kEps);
    // The scalar (2-byte) path of the per-head kernels: misaligned views.
    GpuRunOptions mis;
    mis.misalign_elems = 1;
    GpuRunInfo info;
    const Outputs m = run_gpu(*vs[0], c, kEps, mis, &info);
    EXPECT_FALSE(info.fwd_vector || info.bwd_vector);
    EXPECT_EQ(bit_diff(m.dx, a[0].dx).count, 0);
    EXPECT_EQ(bit_diff(m.y, a[0].y).count, 0);
    EXPECT_EQ(bit_diff(m.dw, a[0].dw).count, 0);
    for (size_t k = 0; k < vs.size(); ++k) {
      SCOPED_TRACE(std::string(id) + " " + std::string(vs[k]->name));
      EXPECT_EQ(bit_diff(a[k].y, b[k].y).count, 0);
      EXPECT_EQ(bit_diff(a[k].dx, b[k].dx).count, 0);
      EXPECT_EQ(bit_diff(a[k].rstd, b[k].rstd).count, 0);
      if (vs[k]->mode == Mode::det) {
        EXPECT_EQ(bit_diff(a[k].dw, b[k].dw).count, 0);
      }
    }
  }
}

// The outside-view check really looks: one element written into the gap after
// y's first row (row padding; the k/v part of heads24) makes run_gpu throw.
TEST(HeadForms, OutsideViewWritesAreCaught) {
  NG_REQUIRE_GPU();
  GpuRunOptions o;
  o.test_write_outside_view = true;
  EXPECT_THROW(run_gpu(variant("bwd_det_chunked"), seeds::parse_case("H=256,T=9,w=bf16,form=heads24,family=normal,seed=1"),
                       kEps, o),
               std::runtime_error);
  o.row_pad = 8;
  EXPECT_THROW(run_gpu(variant("bwd_det_chunked"), make_case(64, 5, seeds::Family::normal, 1), kEps, o),
               std::runtime_error);
  o.test_write_outside_view = false;  // and without the write, the same runs pass the check
  EXPECT_NO_THROW(run_gpu(variant("bwd_det_chunked"), make_case(64, 5, seeds::Family::normal, 1), kEps, o));
}

// Heads never mix statistics: scaling one head's x by 1000 changes only that
// head's rows of y, rstd and dx.
TEST(HeadForms, HeadsDoNotMix) {
  NG_REQUIRE_GPU();
  const seeds::CaseId c = seeds::parse_case("H=256,T=64,w=bf16,form=heads24,family=normal,seed=2");
  seeds::HostInputs in = seeds::generate_host(c);
  const std::vector<const Variant*> vs = {&variant("bwd_det_chunked")};
  const Outputs before = run_gpu(vs, in, kEps).front();
  const int64_t t = 17, h = 5, r = t * 24 + h;  // the row changed
  for (int64_t j = 0; j < 256; ++j) {
    uint16_t& v = in.x[static_cast<size_t>(r * 256 + j)];
    v = bf16_from_float(bf16_to_float(v) * 1000.0f);
  }
  const Outputs after = run_gpu(vs, in, kEps).front();
  int64_t changed_rows = 0;
  for (int64_t q = 0; q < c.rows(); ++q) {
    const bool same = std::memcmp(&before.dx[static_cast<size_t>(q * 256)], &after.dx[static_cast<size_t>(q * 256)], 512) == 0 &&
                      std::memcmp(&before.y[static_cast<size_t>(q * 256)], &after.y[static_cast<size_t>(q * 256)], 512) == 0 &&
                      before.rstd[static_cast<size_t>(q)] == after.rstd[static_cast<size_t>(q)];
    if (q != r) {
      EXPECT_TRUE(same) << "row " << q << " (token " << q / 24 << ", head " << q % 24 << ") changed";
    }
    changed_rows += same ? 0 : 1;
  }
  EXPECT_EQ(changed_rows, 1);  // the scaled row itself changed (its rstd at least)
}

// Form res on the GPU: h_new, y, rstd, dh (dx) and dw of the deterministic
// variants equal their CPU models bit for bit (the models compute h_new and
// dh with bf16_sum_rn as the kernels do), at a vector and a scalar H.
TEST(ResidualForm, GpuEqualsTheModels) {
  NG_REQUIRE_GPU();
  // The backward stages dh_new through a shared-memory ring on the 16-byte
  // path (narrow and wide 1-slot kernels, 2-CTA cluster) and loads it
  // directly otherwise.
  for (const char* id : {"H=6144,T=515,w=bf16,form=res,family=cancel,seed=3",   // 16-byte path, wide team 768
                         "H=4096,T=2049,w=fp32,form=res,family=normal,seed=5",  // bwd: 1 slot, many rows per chunk
                         "H=16384,T=37,w=bf16,form=res,family=llm,seed=2",      // 2-CTA cluster
                         "H=2048,T=1,w=bf16,form=res,family=cancel,seed=6",     // one row
                         "H=1000,T=1001,w=fp32,form=res,family=llm,seed=11",    // unused columns, 1 slot
                         "H=4104,T=515,w=fp32,form=res,family=normal,seed=12",  // unused columns, wide team 544
                         "H=8200,T=37,w=bf16,form=res,family=cancel,seed=13",   // unused columns, cluster
                         "H=1001,T=77,w=fp32,form=res,family=llm,seed=8",       // H % 8 != 0: scalar path
                         "H=6141,T=77,w=fp32,form=res,family=normal,seed=14",   // scalar path, wide team 768
                         "H=8192,T=37,w=bf16,form=res,family=llm,seed=15"}) {   // team 1024 in one CTA, ring
    const seeds::CaseId c = seeds::parse_case(id);
    const seeds::HostInputs in = seeds::generate_host(c);
    const auto rows = [&](const std::vector<uint16_t>& v) { return RowView<uint16_t>::plain(v.data(), in.rows, in.cols); };
    for (const char* name : {"bwd_det_chunked", "bwd_nondet_atomic", "ctl_bf16_partials"}) {
      SCOPED_TRACE(std::string(id) + " " + name);
      const Variant& v = variant(name);
      const Outputs g = run_gpu(std::vector<const Variant*>{&v}, in, kEps).front();
      const Outputs m = run_model(v, rows(in.x), rows(in.dy), in.w_view(), kEps, 0, rows(in.u), rows(in.dh_new));
      EXPECT_EQ(bit_diff(g.h_new, m.h_new).count, 0);
      EXPECT_EQ(bit_diff(g.y, m.y).count, 0);
      EXPECT_EQ(bit_diff(g.rstd, m.rstd).count, 0);
      EXPECT_EQ(bit_diff(g.dx, m.dx).count, 0);
      if (v.mode == Mode::det) {  // nondet: atomics' order varies
        EXPECT_EQ(bit_diff(g.dw, m.dw).count, 0);
      }
      EXPECT_EQ(g.h_new.size(), in.x.size());
    }
  }
}

// --- input pipeline depth ------------------------------------------------------

// Runs deterministic variant v on the GPU at forward setting d and expects
// the CPU model's bits m in every output (y, rstd, h_new, dx, dw).
void expect_model_bits_at(const PipelineDepth& d, const Variant& v, const seeds::HostInputs& in, const Outputs& m) {
  set_pipeline_depth(d);
  const Outputs g = run_gpu(std::vector<const Variant*>{&v}, in, kEps).front();
  EXPECT_EQ(bit_diff(g.y, m.y).count, 0);
  EXPECT_EQ(bit_diff(g.rstd, m.rstd).count, 0);
  EXPECT_EQ(bit_diff(g.h_new, m.h_new).count, 0);
  EXPECT_EQ(bit_diff(g.dx, m.dx).count, 0);
  EXPECT_EQ(bit_diff(g.dw, m.dw).count, 0);
}

TEST(Pipeline, DepthNeverChangesTheBits) {
  NG_REQUIRE_GPU();
  DepthGuard guard;
  // Cases with many rows per team (at 132 SMs: ~8-11 at H=4096 T=4500 with
  // the 2-slot team of 256, ~24 at H=7 T=200000, ~19 for heads4 T=40000), so
  // ring slots are reused at every depth up to 8; a few rows (H=16384 T=9);
  // row counts that leave some teams of a CTA past the end while others
  // work; the 16-byte and scalar paths of the plain, residual (fused and not)
  // and per-head forms, both weight dtypes. (Pipeline.RingCrossRowSmall is
  // the small version that tools/h200.sh runs under racecheck.)
  for (const char* id : {"H=4096,T=4500,w=bf16,form=plain,family=llm,seed=2",
                         "H=7,T=200000,w=fp32,form=plain,family=cancel,seed=5",
                         "H=1001,T=3000,w=bf16,form=plain,family=normal,seed=6",
                         "H=6144,T=2100,w=fp32,form=res,family=normal,seed=3",
                         "H=1001,T=2999,w=bf16,form=res,family=cancel,seed=7",  // 2 teams/CTA, odd rows
                         "H=1024,T=3001,w=bf16,form=res,family=llm,seed=8",     // 1 slot, 16-byte path
                         "H=16384,T=40,w=fp32,form=res,family=normal,seed=9",   // 2 slots, deepest ring cut
                         "H=7,T=200001,w=bf16,form=plain,family=llm,seed=10",   // 8 teams/CTA, rows % 8 != 0
                         "H=256,T=40000,w=bf16,form=heads4,family=llm,seed=4",
                         "H=16384,T=9,w=bf16,form=plain,family=normal,seed=1",
                         // 16-byte path with unused columns (team wider than H/8) and teams past the end:
                         "H=1000,T=1001,w=fp32,form=res,family=llm,seed=11",    // team 128, 2 per CTA
                         "H=4104,T=515,w=fp32,form=res,family=normal,seed=12",  // 2 slots, team 288
                         "H=8200,T=37,w=bf16,form=res,family=cancel,seed=13",   // 2-CTA cluster, team 576
                         // the forward's 2-slot teams of 160, 192 and 224 threads (H = 2049..3584; plan.h)
                         "H=2056,T=1500,w=bf16,form=plain,family=cancel,seed=16",
                         "H=3072,T=1200,w=fp32,form=res,family=llm,seed=17",
                         "H=3584,T=1100,w=bf16,form=res,family=normal,seed=18",
                         "H=64,T=1003,w=bf16,form=plain,family=normal,seed=14"}) {  // team 32, 8 per CTA
    const seeds::CaseId c = seeds::parse_case(id);
    const seeds::HostInputs in = seeds::generate_host(c);
    const auto rows = [&](const std::vector<uint16_t>& v) { return RowView<uint16_t>::plain(v.data(), in.rows, in.cols); };
    const Variant& v = variant("bwd_det_chunked");
    const Outputs m = run_model(v, rows(in.x), rows(in.dy), in.w_view(), kEps, 0, rows(in.u), rows(in.dh_new));
    // The defaults (simple forward for plain and res rows), then the ring
    // (fwd_simple off): depth 1 (no row ahead), 2, an odd one and the
    // maximum; with and without the L2 prefetch; persistent and blocked grids
    // (1 row per team: every CTA's ring ends after one row; 7: blocks end mid-ring).
    for (const PipelineDepth d : {PipelineDepth{}, PipelineDepth{1, 0, 0, true, false}, PipelineDepth{2, 2, 0, true, false},
                                  PipelineDepth{5, 7, 0, true, false},
                                  PipelineDepth{kMaxPipelineDepth, kMaxPipelineDepth, 0, true, false},
                                  PipelineDepth{3, 0, 1, true, false}, PipelineDepth{4, 1, 7, true, false},
                                  PipelineDepth{kMaxPipelineDepth, 0, 64, true, false},
                                  // res fused through the ring (fwd_res_simple off; on is the default)
                                  PipelineDepth{3, 0, 0, true, false, false}, PipelineDepth{1, 0, 5, true, false, false},
                                  PipelineDepth{kMaxPipelineDepth, 2, 0, true, false, false},
                                  // res unfused (own residual-add kernel) through the ring, and through the simple kernel
                                  PipelineDepth{1, 0, 0, false, false}, PipelineDepth{3, 0, 0, false, false},
                                  PipelineDepth{kMaxPipelineDepth, 2, 7, false, false},
                                  // the simple forward (no ring, one row per team), res fused and not
                                  PipelineDepth{3, 0, 0, true, true}, PipelineDepth{3, 0, 0, false, true},
                                  // res fused through the simple kernel while plain rows take the ring
                                  PipelineDepth{3, 0, 0, true, false, true},
                                  // every warp collects and computes rstd (fwd_rstd_warp off; on is the default)
                                  PipelineDepth{3, 0, 0, true, false, true, false},
                                  PipelineDepth{3, 0, 0, true, true, true, false}}) {
      SCOPED_TRACE(std::string(id) + " depth " + std::to_string(d.fwd) + " l2 " + std::to_string(d.fwd_l2) +
                   " block " + std::to_string(d.fwd_block) + (d.fwd_res_fused ? " res fused" : "") +
                   (d.fwd_simple ? " simple" : "") + (d.fwd_res_simple ? " res simple" : "") +
                   (d.fwd_rstd_warp ? "" : " rstd in every warp"));
      expect_model_bits_at(d, v, in, m);
    }
  }
}

// The ring kernel with blocked grids (4 or 3 rows per team per CTA), so that
// every CTA works on several consecutive rows and reuses its shared `red` and
// `rs_sh` buffers and ring slots, at T small enough for compute-sanitizer
// (tools/h200.sh runs this test under racecheck and memcheck): 1-slot
// teams of 32 (8 per CTA, per-head views), 64 (4 per CTA) and 128 (2 per CTA),
// 2-slot teams of 160 and 256, fused res; rstd by the first warp and by every
// warp. Outputs must equal the CPU model's bits.
TEST(Pipeline, RingCrossRowSmall) {
  NG_REQUIRE_GPU();
  DepthGuard guard;
  for (const char* id : {"H=256,T=19,w=bf16,form=heads4,family=llm,seed=1",  // 76 rows, team 32
                         "H=512,T=41,w=fp32,form=plain,family=cancel,seed=2",  // team 64, 4 per CTA
                         "H=1024,T=23,w=bf16,form=res,family=normal,seed=3",   // team 128, 2 per CTA, fused res
                         "H=2056,T=13,w=bf16,form=plain,family=llm,seed=4",    // 2 slots, team 160
                         "H=4096,T=9,w=fp32,form=res,family=cancel,seed=5"}) {  // 2 slots, team 256, fused res
    const seeds::CaseId c = seeds::parse_case(id);
    const seeds::HostInputs in = seeds::generate_host(c);
    const auto rows = [&](const std::vector<uint16_t>& v) { return RowView<uint16_t>::plain(v.data(), in.rows, in.cols); };
    const Variant& v = variant("bwd_det_chunked");
    const Outputs m = run_model(v, rows(in.x), rows(in.dy), in.w_view(), kEps, 0, rows(in.u), rows(in.dh_new));
    for (const PipelineDepth d : {PipelineDepth{3, 0, 4, true, false, false, true},
                                  PipelineDepth{2, 0, 3, true, false, false, false}}) {
      SCOPED_TRACE(std::string(id) + " block " + std::to_string(d.fwd_block) +
                   (d.fwd_rstd_warp ? " rstd by the first warp" : " rstd in every warp"));
      expect_model_bits_at(d, v, in, m);
    }
  }
}

// --- timing helpers (need the CUDA runtime for device buffers) ------------------

#if defined(NORMGATE_KERNELS_HAVE_CUDA)

/// cudaMalloc'd bytes, freed on scope exit.
struct DevMem {
  void* p = nullptr;
  explicit DevMem(size_t n) {
    if (cudaMalloc(&p, n) != cudaSuccess) throw std::runtime_error("cudaMalloc failed");
  }
  ~DevMem() { cudaFree(p); }
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

// The forward's msq (binary64 m per row) equals the model's bit for bit on
// every path (vector and scalar rows, one and two slots, per-head rows, the
// first warp alone computing rstd or every warp), and the deterministic
// backward equals its model both with msq (dw from the refined rstd) and
// without it (dw from the FP32 rstd, as before msq existed). The runner
// always hands msq over, so the null path is tested here directly.
struct MsqShape {
  int64_t H, T;
  Form form;
};

void expect_msq_paths_equal_models(const MsqShape& sh) {
  {
    seeds::CaseId c = make_case(sh.H, sh.T, seeds::Family::llm, 5);
    c.form = sh.form;
    const seeds::HostInputs in = seeds::generate_host(c);
    const int64_t rows = c.rows(), n = rows * sh.H;
    DevMem x(static_cast<size_t>(n) * 2), dy(static_cast<size_t>(n) * 2), y(static_cast<size_t>(n) * 2),
        dx(static_cast<size_t>(n) * 2), w(static_cast<size_t>(sh.H) * 2), rstd(static_cast<size_t>(rows) * 4),
        msq(static_cast<size_t>(rows) * 8), dw(static_cast<size_t>(sh.H) * 4);
    ASSERT_EQ(cudaMemcpy(x.p, in.x.data(), static_cast<size_t>(n) * 2, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dy.p, in.dy.data(), static_cast<size_t>(n) * 2, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(w.p, in.w_bf16.data(), static_cast<size_t>(sh.H) * 2, cudaMemcpyHostToDevice), cudaSuccess);
    const WeightView wv{WDtype::bf16, w.p, sh.H};
    const FwdResult fm = model_fwd(default_fwd(), in.x_view(), in.w_view(), kEps);
    for (bool rstd_warp : {true, false}) {
      PipelineDepth d = pipeline_depth();
      d.fwd_rstd_warp = rstd_warp;
      set_pipeline_depth(d);
      ASSERT_EQ(cudaMemset(msq.p, 0xFF, static_cast<size_t>(rows) * 8), cudaSuccess);  // NaN: unwritten rows show
      FwdArgs fa{x.as<uint16_t>(), sh.H, wv, y.as<uint16_t>(), sh.H, rstd.as<float>(), sh.T, sh.H, kEps};
      fa.form = sh.form;
      fa.heads = c.heads();
      fa.x_stride = fa.y_stride = c.heads() * sh.H;
      fa.x_stride_h = fa.y_stride_h = c.heads() > 1 ? sh.H : 0;
      fa.msq = msq.as<double>();
      rmsnorm_fwd(default_fwd(), fa);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<double> got(static_cast<size_t>(rows));
      ASSERT_EQ(cudaMemcpy(got.data(), msq.p, got.size() * 8, cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_EQ(std::memcmp(got.data(), fm.msq.data(), got.size() * 8), 0)
          << case_name(default_fwd(), c) << " rstd_warp " << rstd_warp;
    }
    const Variant& det = variant("bwd_det_chunked");
    DevMem ws(std::max<size_t>(bwd_workspace_bytes(det, rows, sh.H), 16));
    for (bool with_msq : {true, false}) {
      BwdArgs ba;
      ba.dy = dy.as<uint16_t>();
      ba.x = x.as<uint16_t>();
      ba.dy_stride = ba.x_stride = ba.dx_stride = c.heads() * sh.H;
      ba.dy_stride_h = ba.x_stride_h = ba.dx_stride_h = c.heads() > 1 ? sh.H : 0;
      ba.form = sh.form;
      ba.heads = c.heads();
      ba.w = wv;
      ba.rstd = rstd.as<float>();
      ba.msq = with_msq ? msq.as<double>() : nullptr;
      ba.dx = dx.as<uint16_t>();
      ba.dw = dw.as<float>();
      ba.T = sh.T;
      ba.H = sh.H;
      ba.workspace = ws.p;
      ba.workspace_bytes = bwd_workspace_bytes(det, rows, sh.H);
      rmsnorm_bwd(det, ba);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<float> gdw(static_cast<size_t>(sh.H));
      ASSERT_EQ(cudaMemcpy(gdw.data(), dw.p, gdw.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      const BwdResult bm = model_bwd(det, in.x_view(), in.dy_view(), in.w_view(), fm.rstd, 0, {},
                                     with_msq ? &fm.msq : nullptr);
      EXPECT_EQ(bit_diff(gdw, bm.dw).count, 0) << case_name(det, c) << (with_msq ? " with msq" : " without msq");
    }
  }
}

TEST(MsqPath, ForwardMsqAndBothBackwardPathsEqualTheModels) {
  NG_REQUIRE_GPU();
  const DepthGuard restore;
  for (const MsqShape& sh : {MsqShape{4096, 67, Form::plain}, MsqShape{1000, 23, Form::plain},
                             MsqShape{6144, 9, Form::plain}, MsqShape{256, 9, Form::heads4}})
    expect_msq_paths_equal_models(sh);
}

// The backward's first warp computes the refined rstd of 32 rows at a time
// into shared memory (bwd_chunk_pass.cuh, two alternating batches), and each
// row reads its own at its top: chunks of more than 64 rows cross at least
// two batch boundaries, and of more than 96 rows overwrite a batch, so a
// wrong slot or row index changes dw's bits (a race would show only
// sometimes: the sanitizer's long-chunk cases, tools/h200.sh, look for
// those). Chunks hold ~16 rows below T = 16 * cap(H), so these shapes are
// large: one slot in a 512-thread team (113 rows a chunk) and in a
// 768-thread one-CTA team (the wide kernel, 76), two slots in a 2-CTA
// cluster (76) and per-head rows in one warp (512).
TEST(MsqPath, LongChunksCrossTheStagedBatchesOfM) {
  NG_REQUIRE_GPU();
  const DepthGuard restore;
  for (const MsqShape& sh : {MsqShape{4096, 90000, Form::plain}, MsqShape{6144, 40000, Form::plain},
                             MsqShape{16384, 20000, Form::plain}, MsqShape{256, 270000, Form::heads4}}) {
    const int64_t rows = sh.T * (sh.form == Form::heads4 ? 4 : 1);
    ASSERT_GT(rows / num_chunks(rows, sh.H), 64) << "H " << sh.H << " T " << sh.T;
    expect_msq_paths_equal_models(sh);
  }
}

// Per-head backward with an expanded dy (dy_stride = 0: one token's [heads,
// 256] of dy for every token, as torch's expand gives): dx and dw equal the
// CPU model run on the materialized dy (every token a copy), bit for bit.
// The backward walks rows across token boundaries with its own pointer
// arithmetic per view, so a stride of 0 must give the same addresses as
// Rows::row (token-major chunks start mid-token: T*heads / chunks).
TEST(HeadForms, ExpandedDyEqualsTheMaterializedModel) {
  NG_REQUIRE_GPU();
  for (const char* id : {"H=256,T=301,w=bf16,form=heads24,family=llm,seed=7",
                         "H=256,T=2049,w=bf16,form=heads4,family=normal,seed=8"}) {
    SCOPED_TRACE(id);
    const seeds::CaseId c = seeds::parse_case(id);
    seeds::HostInputs in = seeds::generate_host(c);
    const int64_t heads = c.heads(), rows = c.rows(), n = rows * 256, tok = heads * 256;
    for (int64_t t = 1; t < c.T; ++t)  // materialize the expansion: every token's dy is token 0's
      std::copy(in.dy.begin(), in.dy.begin() + tok, in.dy.begin() + t * tok);
    const FwdResult fm = model_fwd(default_fwd(), in.x_view(), in.w_view(), kEps);
    const Variant& det = variant("bwd_det_chunked");
    const BwdResult bm = model_bwd(det, in.x_view(), in.dy_view(), in.w_view(), fm.rstd, 0, {}, &fm.msq);
    DevMem x(static_cast<size_t>(n) * 2), dy1(static_cast<size_t>(tok) * 2), y(static_cast<size_t>(n) * 2),
        dx(static_cast<size_t>(n) * 2), w(512), rstd(static_cast<size_t>(rows) * 4), msq(static_cast<size_t>(rows) * 8),
        dw(1024), ws(std::max<size_t>(bwd_workspace_bytes(det, rows, 256), 16));
    ASSERT_EQ(cudaMemcpy(x.p, in.x.data(), static_cast<size_t>(n) * 2, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dy1.p, in.dy.data(), static_cast<size_t>(tok) * 2, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(w.p, in.w_bf16.data(), 512, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemset(dx.p, 0xFF, static_cast<size_t>(n) * 2), cudaSuccess);  // NaN poison
    const WeightView wv{WDtype::bf16, w.p, 256};
    FwdArgs fa{x.as<uint16_t>(), tok, wv, y.as<uint16_t>(), tok, rstd.as<float>(), c.T, 256, kEps};
    fa.form = c.form;
    fa.heads = heads;
    fa.x_stride_h = fa.y_stride_h = 256;
    fa.msq = msq.as<double>();
    rmsnorm_fwd(default_fwd(), fa);
    BwdArgs ba;
    ba.dy = dy1.as<uint16_t>();
    ba.dy_stride = 0;  // expanded over tokens
    ba.dy_stride_h = 256;
    ba.x = x.as<uint16_t>();
    ba.x_stride = ba.dx_stride = tok;
    ba.x_stride_h = ba.dx_stride_h = 256;
    ba.form = c.form;
    ba.heads = heads;
    ba.w = wv;
    ba.rstd = rstd.as<float>();
    ba.msq = msq.as<double>();
    ba.dx = dx.as<uint16_t>();
    ba.dw = dw.as<float>();
    ba.T = c.T;
    ba.H = 256;
    ba.workspace = ws.p;
    ba.workspace_bytes = bwd_workspace_bytes(det, rows, 256);
    rmsnorm_bwd(det, ba);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<uint16_t> gdx(static_cast<size_t>(n));
    std::vector<float> gdw(256);
    ASSERT_EQ(cudaMemcpy(gdx.data(), dx.p, gdx.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(gdw.data(), dw.p, 1024, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(bit_diff(gdx, bm.dx).count, 0);
    EXPECT_EQ(bit_diff(gdw, bm.dw).count, 0);
  }
}

TEST(Timing, CopyVec16CopiesAndIsTimed) {
  NG_REQUIRE_GPU();
  const size_t n = size_t{1} << 28;  // 256 MiB
  DevMem a(n), b(n);
  ASSERT_EQ(cudaMemset(a.p, 0x5A, n), cudaSuccess);
  ASSERT_EQ(cudaMemset(b.p, 0, n), cudaSuccess);
  copy_vec16(b.p, a.p, n);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<unsigned char> h(n);
  ASSERT_EQ(cudaMemcpy(h.data(), b.p, n, cudaMemcpyDeviceToHost), cudaSuccess);
  size_t bad = 0;
  for (unsigned char ch : h) bad += ch != 0x5A;
  EXPECT_EQ(bad, 0u);
  EXPECT_THROW(copy_vec16(b.p, a.as<char>() + 8, 64), std::invalid_argument);
  const TimingStats st = time_graph([&](Stream s) { copy_vec16(b.p, a.p, n, s); }, 50);
  EXPECT_EQ(st.reps, 50);
  EXPECT_GT(st.median_ms, 0.0);
  EXPECT_LE(st.min_ms, st.median_ms);
  EXPECT_LE(st.median_ms, st.max_ms);
  std::printf("[ info ] copy_vec16 256 MiB: median %.4f ms = %.0f GB/s (read+write)\n", st.median_ms,
              2.0 * static_cast<double>(n) / st.median_ms / 1e6);
}

// Informational (never asserts speed): forward and each backward at large T.
TEST(Timing, VariantsAtLargeT) {
  NG_REQUIRE_GPU();
  for (const int64_t H : {int64_t{512}, int64_t{2048}, int64_t{4096}, int64_t{5120}, int64_t{8192}, int64_t{16384}}) {
    const int64_t T = (int64_t{1} << 30) / (H * 2);  // 1 GiB per [T, H] tensor
    const seeds::CaseId c = make_case(H, T, seeds::Family::normal, 1);
    DevMem x(T * H * 2), dy(T * H * 2), y(T * H * 2), dx(T * H * 2), w(H * 2), rstd(T * 4), msq(T * 8), dw(H * 4);
    size_t ws_bytes = 0;
    for (const Variant& v : variants())
      if (v.op == Op::bwd) ws_bytes = std::max(ws_bytes, bwd_workspace_bytes(v, T, H));
    DevMem ws(ws_bytes);
    DeviceInputBuffers b;
    b.x = x.as<uint16_t>();
    b.x_stride = H;
    b.dy = dy.as<uint16_t>();
    b.dy_stride = H;
    b.w = w.p;
    generate_device_inputs(c, b);
    const WeightView wv{WDtype::bf16, w.p, H};
    FwdArgs fa{x.as<uint16_t>(), H, wv, y.as<uint16_t>(), H, rstd.as<float>(), T, H, kEps};
    fa.msq = msq.as<double>();  // as the runner: the forward hands m to the backward
    const TimingStats fs = time_graph([&](Stream s) { rmsnorm_fwd(default_fwd(), fa, s); }, 50);
    std::printf("[ info ] H=%5lld T=%7lld fwd_rowwise        %.4f ms  %.0f GB/s\n", static_cast<long long>(H),
                static_cast<long long>(T), fs.median_ms, 2.0 * static_cast<double>(T * H * 2) / fs.median_ms / 1e6);
    for (const Variant& v : variants()) {
      if (v.op != Op::bwd || v.id == VariantId::ctl_fp32_seq) continue;  // the FP32 column loop is slow by design
      BwdArgs ba;
      ba.dy = dy.as<uint16_t>();
      ba.dy_stride = H;
      ba.x = x.as<uint16_t>();
      ba.x_stride = H;
      ba.w = wv;
      ba.rstd = rstd.as<float>();
      ba.msq = fa.msq;
      ba.dx = dx.as<uint16_t>();
      ba.dx_stride = H;
      ba.dw = dw.as<float>();
      ba.T = T;
      ba.H = H;
      ba.workspace = ws.p;
      ba.workspace_bytes = ws_bytes;
      const TimingStats bs = time_graph([&](Stream s) { rmsnorm_bwd(v, ba, s, ControlUse::allow); }, 50);
      std::printf("[ info ] H=%5lld T=%7lld %-18s %.4f ms  %.0f GB/s\n", static_cast<long long>(H),
                  static_cast<long long>(T), std::string(v.name).c_str(), bs.median_ms,
                  3.0 * static_cast<double>(T * H * 2) / bs.median_ms / 1e6);
    }
  }
}

#endif  // NORMGATE_KERNELS_HAVE_CUDA

}  // namespace
}  // namespace normgate::kernels::test
