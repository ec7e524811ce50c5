// tests/kernels/pipeline_knobs_test.cpp: the forward's speed knobs
// (pipeline.h: ring depth, L2 prefetch, blocked grids, fused or simple res,
// rstd by one warp or all) never change the bits, and the forward's msq and
// both backward paths (with and without msq) equal the CPU models. Skipped
// without a CUDA device; tools/h200.sh runs Pipeline.RingCrossRowSmall under
// compute-sanitizer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "util/gpu_test_util.h"
#include "util/kernel_test_util.h"
#include "normgate/seeds/generate.h"
#include "normgate/kernels/models.h"
#include "normgate/kernels/chunk_plan.h"
#include "normgate/kernels/pipeline.h"
#include "normgate/kernels/plan.h"
#include "normgate/harness/runner.h"

namespace normgate::kernels::test {
namespace {

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

// --- device buffers set up by hand (need the CUDA runtime) ---------------------

#if defined(NORMGATE_KERNELS_HAVE_CUDA)

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

// The forward's arguments over a case's rows (per-head rows contiguous),
// with msq.
FwdArgs msq_fwd_args(const MsqShape& sh, const seeds::CaseId& c, DevMem& x, DevMem& y, DevMem& rstd, DevMem& msq,
                     const WeightView& wv) {
  FwdArgs fa{x.as<uint16_t>(), sh.H, wv, y.as<uint16_t>(), sh.H, rstd.as<float>(), sh.T, sh.H, kEps};
  fa.form = sh.form;
  fa.heads = c.heads();
  fa.x_stride = fa.y_stride = c.heads() * sh.H;
  fa.x_stride_h = fa.y_stride_h = c.heads() > 1 ? sh.H : 0;
  fa.msq = msq.as<double>();
  return fa;
}

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
      const FwdArgs fa = msq_fwd_args(sh, c, x, y, rstd, msq, wv);
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

// Every built-in forward variant's msq and rstd equal its own model's bit
// for bit on every row, at H = 256 (fwd_narrow's rows: each lane holds two
// rows, each row half a warp) and at H = 1000, plain and per-head, with a
// row count that leaves the last CTA partly empty. msq reaches no output the
// forward's gate validates, and the test above reads only the default
// forward's directly.
TEST(MsqPath, EveryForwardVariantsMsqAndRstdEqualItsModel) {
  NG_REQUIRE_GPU();
  for (const MsqShape& sh : {MsqShape{256, 33, Form::plain}, MsqShape{256, 9, Form::heads4},
                             MsqShape{256, 7, Form::heads24}, MsqShape{1000, 37, Form::plain}}) {
    seeds::CaseId c = make_case(sh.H, sh.T, seeds::Family::llm, 7);
    c.form = sh.form;
    const seeds::HostInputs in = seeds::generate_host(c);
    const int64_t rows = c.rows(), n = rows * sh.H;
    DevMem x(static_cast<size_t>(n) * 2), y(static_cast<size_t>(n) * 2), w(static_cast<size_t>(sh.H) * 2),
        rstd(static_cast<size_t>(rows) * 4), msq(static_cast<size_t>(rows) * 8);
    ASSERT_EQ(cudaMemcpy(x.p, in.x.data(), static_cast<size_t>(n) * 2, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(w.p, in.w_bf16.data(), static_cast<size_t>(sh.H) * 2, cudaMemcpyHostToDevice), cudaSuccess);
    const WeightView wv{WDtype::bf16, w.p, sh.H};
    int tried = 0;
    bool narrow = false;
    for (const Variant& v : variants()) {
      if (v.op != Op::fwd || v.control || v.external || v.model_only || !v.supports_h(sh.H) || !v.supports(sh.form) ||
          !v.supports(WDtype::bf16))
        continue;
      ++tried;
      narrow = narrow || std::string(v.name) == "fwd_narrow";
      const FwdResult fm = model_fwd(v, in.x_view(), in.w_view(), kEps);
      ASSERT_EQ(cudaMemset(msq.p, 0xFF, static_cast<size_t>(rows) * 8), cudaSuccess);  // NaN: unwritten rows show
      ASSERT_EQ(cudaMemset(rstd.p, 0xFF, static_cast<size_t>(rows) * 4), cudaSuccess);
      const FwdArgs fa = msq_fwd_args(sh, c, x, y, rstd, msq, wv);
      rmsnorm_fwd(v, fa);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<double> got(static_cast<size_t>(rows));
      std::vector<float> got_rstd(static_cast<size_t>(rows));
      ASSERT_EQ(cudaMemcpy(got.data(), msq.p, got.size() * 8, cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(got_rstd.data(), rstd.p, got_rstd.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(fm.msq.size(), got.size()) << case_name(v, c);
      ASSERT_EQ(fm.rstd.size(), got_rstd.size()) << case_name(v, c);
      EXPECT_EQ(std::memcmp(got.data(), fm.msq.data(), got.size() * 8), 0) << case_name(v, c) << ": msq";
      EXPECT_EQ(std::memcmp(got_rstd.data(), fm.rstd.data(), got_rstd.size() * 4), 0)
          << case_name(v, c) << ": rstd, " << bit_diff(got_rstd, fm.rstd).str();
    }
    EXPECT_GT(tried, 0) << "H " << sh.H;
    if (sh.H == 256) {
      EXPECT_TRUE(narrow) << "fwd_narrow not among the forward variants at H = 256";
    }
  }
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

#endif  // NORMGATE_KERNELS_HAVE_CUDA

}  // namespace
}  // namespace normgate::kernels::test
