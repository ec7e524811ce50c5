// tests/kernels/forms_test.cpp: the per-head and residual forms on the GPU:
// strided and contiguous head views give the plain rows' bits, writes outside
// the view are caught, heads never mix, an expanded dy (stride 0) equals the
// materialized model, and form res equals the CPU models bit for bit.
// Skipped without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "util/gpu_test_util.h"
#include "util/kernel_test_util.h"
#include "normgate/core/bf16.h"
#include "normgate/seeds/generate.h"
#include "normgate/kernels/models.h"
#include "normgate/harness/runner.h"

namespace normgate::kernels::test {
namespace {

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

// fwd_multirow takes every form on its direct-to-register path: its strided
// [T, 24, 256] and contiguous [T, 4, 256] views give the bits of the plain
// [T*heads, 256] rows (its plain kernel), of fwd_rowwise's ring kernel on the
// same views, and of the model; its fused residual form those of
// fwd_rowwise's fused path. (run_gpu checks the poisoned gaps every run.)
TEST(MultirowForms, EveryFormEqualsTheDefaultForward) {
  NG_REQUIRE_GPU();
  const Variant& m = variant("fwd_multirow");
  const std::vector<const Variant*> det = {&variant("bwd_det_chunked")};
  GpuRunOptions om;
  om.fwd = &m;
  for (const char* id : {"H=256,T=301,w=bf16,form=heads24,family=llm,seed=4",
                         "H=256,T=2049,w=fp32,form=heads4,family=cancel,seed=6",
                         "H=256,T=9,w=fp32,form=heads24,family=normal,seed=7",
                         "H=6144,T=515,w=bf16,form=res,family=cancel,seed=3",
                         "H=2048,T=1,w=fp32,form=res,family=llm,seed=5"}) {
    SCOPED_TRACE(id);
    const seeds::CaseId c = seeds::parse_case(id);
    const seeds::HostInputs in = seeds::generate_host(c);
    const Outputs a = run_gpu(det, in, kEps, om).front();
    const Outputs d = run_gpu(det, in, kEps).front();
    EXPECT_EQ(bit_diff(a.y, d.y).count, 0);
    EXPECT_EQ(bit_diff(a.rstd, d.rstd).count, 0);
    EXPECT_EQ(bit_diff(a.h_new, d.h_new).count, 0);
    EXPECT_EQ(bit_diff(a.dw, d.dw).count, 0);  // the carrier's dw reads msq
    if (c.heads() > 1) {
      seeds::HostInputs flat = in;  // the same bytes as plain rows
      flat.id.form = Form::plain;
      flat.id.T = c.rows();
      const Outputs b = run_gpu(det, flat, kEps, om).front();
      EXPECT_EQ(bit_diff(a.y, b.y).count, 0);
      EXPECT_EQ(bit_diff(a.rstd, b.rstd).count, 0);
      const FwdResult fm = model_fwd(m, in.x_view(), in.w_view(), kEps);
      EXPECT_EQ(bit_diff(a.y, fm.y).count, 0);
      EXPECT_EQ(bit_diff(a.rstd, fm.rstd).count, 0);
    } else {
      EXPECT_EQ(a.h_new.size(), in.x.size());
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

// --- device buffers set up by hand (need the CUDA runtime) ---------------------

#if defined(NORMGATE_KERNELS_HAVE_CUDA)

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

#endif  // NORMGATE_KERNELS_HAVE_CUDA

}  // namespace
}  // namespace normgate::kernels::test
