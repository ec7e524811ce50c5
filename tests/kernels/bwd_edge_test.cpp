// tests/kernels/bwd_edge_test.cpp: the backward variants' special cases on
// the GPU, beside the generic checks of variant_driver.cpp: T = 0, controls
// only on request, nondet close to det, several variants in one run (outputs
// shared only where identical, inputs downloaded), and kept device and host
// buffers giving the same bits. Skipped without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "host_pool.h"
#include "util/gpu_test_util.h"
#include "util/kernel_test_util.h"
#include "normgate/seeds/generate.h"
#include "normgate/harness/runner.h"

namespace normgate::kernels::test {
namespace {

// --- edge cases ---------------------------------------------------------------

TEST(BwdEdge, ZeroRowsWriteOnlyDwZero) {
  NG_REQUIRE_GPU();
  for (const Variant& v : variants()) {
    if (v.op != Op::bwd || v.model_only) continue;  // model-only controls have no GPU kernel
    const int64_t H = v.supports_h(777) ? 777 : v.h_min;  // bwd_det_wide: H = 4097..6144
    seeds::CaseId c = make_case(H, 0, seeds::Family::normal, 1);
    if (!v.supports(Form::plain)) c.form = Form::heads4;  // bwd_det_heads: the per-head views only (H = 256)
    const Outputs o = run_gpu(v, c, kEps);
    EXPECT_TRUE(o.y.empty() && o.dx.empty() && o.rstd.empty()) << v.name;
    ASSERT_EQ(o.dw.size(), static_cast<size_t>(H));
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

// forward_outputs_only: the same y, rstd, h_new and inputs as a full run,
// no dx or dw copied back (the forward-only check's downloads), with a
// non-default forward (fwd_narrow on heads24) and form res; T = 0.
TEST(BwdEdge, ForwardOutputsOnlySkipsDxAndDw) {
  NG_REQUIRE_GPU();
  const std::vector<const Variant*> vs = {&variant("bwd_det_chunked"), &variant("bwd_nondet_atomic")};
  struct Row {
    const char* id;
    const char* fwd;
  };
  for (const Row& row : {Row{"H=1000,T=257,w=bf16,form=plain,family=cancel,seed=3", nullptr},
                         Row{"H=512,T=33,w=bf16,form=res,family=llm,seed=77", nullptr},
                         Row{"H=256,T=31,w=fp32,form=heads24,family=llm,seed=4", "fwd_narrow"},
                         Row{"H=64,T=0,w=bf16,form=plain,family=normal,seed=1", nullptr}}) {
    SCOPED_TRACE(row.id);
    const seeds::CaseId c = seeds::parse_case(row.id);
    GpuRunOptions full_opt;
    full_opt.download_inputs = true;
    if (row.fwd != nullptr) full_opt.fwd = &variant(row.fwd);
    GpuRunOptions fwd_opt = full_opt;
    fwd_opt.forward_outputs_only = true;
    const SharedGpuRun full = run_gpu_shared(vs, c, nullptr, kEps, full_opt);
    const SharedGpuRun fwd = run_gpu_shared(vs, c, nullptr, kEps, fwd_opt);
    ASSERT_EQ(fwd.outs.size(), vs.size());
    ASSERT_EQ(fwd.dx_source.size(), vs.size());
    EXPECT_EQ(seeds::digest(fwd.inputs).all, seeds::digest(full.inputs).all);
    EXPECT_EQ(fwd.outs[0].y, full.outs[0].y);
    EXPECT_EQ(fwd.outs[0].h_new, full.outs[0].h_new);
    if (c.T > 0) {
      EXPECT_EQ(c.form == Form::res, !fwd.outs[0].h_new.empty());
    }
    ASSERT_EQ(fwd.outs[0].rstd.size(), full.outs[0].rstd.size());
    EXPECT_EQ(0, std::memcmp(fwd.outs[0].rstd.data(), full.outs[0].rstd.data(), full.outs[0].rstd.size() * 4));
    if (c.T > 0) {
      EXPECT_FALSE(full.outs[0].y.empty());
      EXPECT_FALSE(full.outs[0].dx.empty());  // the full run did copy them: the option is what removes them
    }
    for (size_t k = 0; k < vs.size(); ++k) {
      EXPECT_TRUE(fwd.outs[k].dx.empty()) << vs[k]->name;
      EXPECT_TRUE(fwd.outs[k].dw.empty()) << vs[k]->name;
      EXPECT_EQ(fwd.dx_source[k], k) << vs[k]->name;
    }
  }
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
// staging chunks; the first pass by the direct path (NORMGATE_DOWNLOAD, host_pool.h),
// the second with the staged copies split over 3 threads,
// NORMGATE_COPY_THREADS, the third staged) and gives bitwise what fresh
// vectors filled through the staging buffers give; it never
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
  struct Env {  // NORMGATE_DOWNLOAD and NORMGATE_COPY_THREADS unset again on any exit
    ~Env() {
      unsetenv("NORMGATE_DOWNLOAD");
      unsetenv("NORMGATE_COPY_THREADS");
    }
  } restore;
  // The reference: fresh vectors filled through the staging buffers (the
  // passes below take the direct path, then stage again).
  setenv("NORMGATE_DOWNLOAD", "staged", 1);
  std::vector<SharedGpuRun> fresh;
  for (const auto& c : cs) fresh.push_back(run_gpu_shared(vs, c, nullptr, kEps, o));
  unsetenv("NORMGATE_DOWNLOAD");
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
  const detail::DirectDownloadStats before = detail::direct_download_stats();
  for (int pass = 0; pass < 3; ++pass) {
    if (pass == 1) setenv("NORMGATE_COPY_THREADS", "3", 1);
    if (pass == 2) {
      ASSERT_GT(detail::direct_download_stats().bytes, before.bytes) << "the direct path never ran";
      setenv("NORMGATE_DOWNLOAD", "staged", 1);
    }
    for (size_t i = 0; i < cs.size(); ++i) {
      SCOPED_TRACE(seeds::to_string(cs[i]) + (pass == 0   ? " (pass 1, direct)"
                                              : pass == 1 ? " (pass 2, direct, 3 copy threads)"
                                                          : " (pass 3, staged, 3 copy threads)"));
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
  const detail::DirectDownloadStats after = detail::direct_download_stats();
  EXPECT_EQ(after.live, 0) << "a direct download left its pages locked";
  EXPECT_EQ(after.refused, before.refused) << "the driver refused a registration";
}

}  // namespace
}  // namespace normgate::kernels::test
