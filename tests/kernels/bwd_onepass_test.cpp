// tests/kernels/bwd_onepass_test.cpp: bwd_det_onepass and bwd_fp32_blocked
// on the GPU beyond the generic checks of variant_driver.cpp: onepass gives
// bwd_det_chunked's dx and dw bit for bit in every kernel of the chunk pass
// (narrow, wide, 2-CTA cluster, per-head, res); its ticket counter starts
// from garbage and works again on the next call and on every replay of a
// CUDA graph; bwd_fp32_blocked shares the det dx and, in a graph too, equals
// its model. Skipped without a CUDA device.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "normgate/harness/runner.h"
#include "normgate/kernels/models.h"
#include "normgate/kernels/rmsnorm.h"
#include "normgate/seeds/generate.h"
#include "util/gpu_test_util.h"
#include "util/kernel_test_util.h"

namespace normgate::kernels::test {
namespace {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// One shape per chunk-pass kernel and form (bwd_chunk_launch.cuh), both
// weight dtypes, and more than 32 chunks (the combine's lanes).
TEST(BwdOnepass, EqualsDetChunkedInEveryKernel) {
  NG_REQUIRE_GPU();
  struct S {
    int64_t H, T;
    Form form;
    WDtype w;
  };
  const S shapes[] = {
      {1024, 3000, Form::plain, WDtype::bf16},  // narrow, 188 chunks
      {6144, 100, Form::plain, WDtype::fp32},   // wide one-CTA team (768 threads)
      {12288, 50, Form::plain, WDtype::bf16},   // 2-CTA cluster
      {1001, 70, Form::plain, WDtype::fp32},    // scalar path
      {256, 40, Form::heads24, WDtype::bf16},   // per-head rows
      {256, 300, Form::heads4, WDtype::fp32},
      {2048, 77, Form::res, WDtype::bf16},      // dh_new ring
      {16384, 9, Form::res, WDtype::fp32},      // res on the cluster
  };
  const std::vector<const Variant*> vs = {&variant("bwd_det_chunked"), &variant("bwd_det_onepass"),
                                          &variant("bwd_fp32_blocked")};
  uint64_t seed = 5;
  for (const S& s : shapes) {
    seeds::CaseId c = make_case(s.H, s.T, seeds::Family::cancel, seed++, s.w);
    c.form = s.form;
    const std::vector<Outputs> o = run_gpu(vs, c, kEps);
    ASSERT_EQ(o.size(), 3u);
    EXPECT_EQ(bit_diff(o[0].dx, o[1].dx).count, 0) << seeds::to_string(c);
    EXPECT_TRUE(same_bits(o[0].dw, o[1].dw)) << seeds::to_string(c) << ": " << bit_diff(o[0].dw, o[1].dw).str();
    EXPECT_EQ(bit_diff(o[0].dx, o[2].dx).count, 0) << seeds::to_string(c) << " (fp32_blocked's dx)";
  }
}

#if defined(NORMGATE_KERNELS_HAVE_CUDA)

/// A backward on uploaded host inputs (plain form): the model's rstd and msq
/// as the forward's, every buffer allocated here.
struct BwdOnDevice {
  seeds::HostInputs in;
  FwdResult fwd;
  DevMem x, dy, w, rstd, msq, dx, dw, ws;
  size_t ws_bytes;
  BwdArgs a;
  BwdOnDevice(const Variant& v, const seeds::CaseId& c)
      : in(seeds::generate_host(c)),
        fwd(model_fwd(default_fwd(), in.x_view(), in.w_view(), kEps)),
        x(in.x.size() * 2),
        dy(in.dy.size() * 2),
        w(static_cast<size_t>(c.H) * 4),
        rstd(fwd.rstd.size() * 4),
        msq(fwd.msq.size() * 8),
        dx(in.x.size() * 2),
        dw(static_cast<size_t>(c.H) * 4),
        ws(bwd_workspace_bytes(v, c.T, c.H)),
        ws_bytes(bwd_workspace_bytes(v, c.T, c.H)) {
    const void* wp = in.w_view().p;
    const size_t wb = static_cast<size_t>(c.H) * (c.w == WDtype::bf16 ? 2 : 4);
    if (cudaMemcpy(x.p, in.x.data(), in.x.size() * 2, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(dy.p, in.dy.data(), in.dy.size() * 2, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(w.p, wp, wb, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(rstd.p, fwd.rstd.data(), fwd.rstd.size() * 4, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(msq.p, fwd.msq.data(), fwd.msq.size() * 8, cudaMemcpyHostToDevice) != cudaSuccess)
      throw std::runtime_error("upload failed");
    a.dy = dy.as<uint16_t>();
    a.dy_stride = c.H;
    a.x = x.as<uint16_t>();
    a.x_stride = c.H;
    a.w = WeightView{c.w, w.p, c.H};
    a.rstd = rstd.as<float>();
    a.msq = msq.as<double>();
    a.dx = dx.as<uint16_t>();
    a.dx_stride = c.H;
    a.dw = dw.as<float>();
    a.T = c.T;
    a.H = c.H;
    a.workspace = ws.p;
    a.workspace_bytes = ws_bytes;
  }
  /// dw after poisoning it (NaN) and filling the workspace with `garbage` bytes.
  std::vector<float> run(const Variant& v, int garbage, cudaStream_t s) {
    EXPECT_EQ(cudaMemsetAsync(dw.p, 0xFF, static_cast<size_t>(a.H) * 4, s), cudaSuccess);
    EXPECT_EQ(cudaMemsetAsync(ws.p, garbage, ws_bytes, s), cudaSuccess);
    rmsnorm_bwd(v, a, s);
    return download(s);
  }
  std::vector<float> download(cudaStream_t s) {
    std::vector<float> out(static_cast<size_t>(a.H));
    EXPECT_EQ(cudaMemcpyAsync(out.data(), dw.p, out.size() * 4, cudaMemcpyDeviceToHost, s), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    return out;
  }
};

// The ticket counter: garbage on entry (0xFF.. = 2^32 - 1, 0xA5..), back-to-back
// calls without touching the workspace, then a CUDA graph replayed three times.
TEST(BwdOnepass, TicketCounterSurvivesGarbageCallsAndGraphReplays) {
  NG_REQUIRE_GPU();
  for (const auto& [H, T] : {std::pair{int64_t{512}, int64_t{4000}}, std::pair{int64_t{12288}, int64_t{33}}}) {
    const Variant& v = variant("bwd_det_onepass");
    const seeds::CaseId c = make_case(H, T, seeds::Family::llm, 7);
    BwdOnDevice b(v, c);
    const BwdResult m = model_bwd(v, b.in.x_view(), b.in.dy_view(), b.in.w_view(), b.fwd.rstd, 0, {}, &b.fwd.msq);
    cudaStream_t s;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    for (int garbage : {0xFF, 0xA5, 0x00}) EXPECT_TRUE(same_bits(b.run(v, garbage, s), m.dw)) << H << " " << garbage;
    for (int k = 0; k < 3; ++k) {  // again, the workspace as the last call left it
      rmsnorm_bwd(v, b.a, s);
      EXPECT_TRUE(same_bits(b.download(s), m.dw)) << H << " call " << k;
    }
    ASSERT_EQ(cudaMemsetAsync(b.ws.p, 0xFF, b.ws_bytes, s), cudaSuccess);
    cudaGraph_t g;
    cudaGraphExec_t ge;
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    rmsnorm_bwd(v, b.a, s);
    ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
    ASSERT_EQ(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
    for (int k = 0; k < 3; ++k) {
      ASSERT_EQ(cudaMemsetAsync(b.dw.p, 0xFF, static_cast<size_t>(H) * 4, s), cudaSuccess);
      ASSERT_EQ(cudaGraphLaunch(ge, s), cudaSuccess);
      EXPECT_TRUE(same_bits(b.download(s), m.dw)) << H << " replay " << k;
    }
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    cudaStreamDestroy(s);
  }
}

// bwd_fp32_blocked in a graph (two kernels, no memset): equal to its model
// on every replay, whatever the workspace held.
TEST(BwdFp32Blocked, GraphReplaysEqualTheModel) {
  NG_REQUIRE_GPU();
  const Variant& v = variant("bwd_fp32_blocked");
  const seeds::CaseId c = make_case(3000, 2000, seeds::Family::normal, 8, WDtype::fp32);
  BwdOnDevice b(v, c);
  const BwdResult m = model_bwd(v, b.in.x_view(), b.in.dy_view(), b.in.w_view(), b.fwd.rstd);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  EXPECT_TRUE(same_bits(b.run(v, 0x7F, s), m.dw));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  rmsnorm_bwd(v, b.a, s);
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
  for (int k = 0; k < 2; ++k) {
    ASSERT_EQ(cudaMemsetAsync(b.ws.p, 0x5A + k, b.ws_bytes, s), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(ge, s), cudaSuccess);
    EXPECT_TRUE(same_bits(b.download(s), m.dw)) << "replay " << k;
  }
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
}

#endif  // NORMGATE_KERNELS_HAVE_CUDA

}  // namespace
}  // namespace normgate::kernels::test
