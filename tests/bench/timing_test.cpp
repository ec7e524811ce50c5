// tests/bench/timing_test.cpp: bench/timing on the GPU: copy_vec16 copies
// and time_graph times it; then, for information only (never asserting
// speed), the forward and each backward variant at 1 GiB per tensor. CUDA
// builds only; skipped without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "util/gpu_test_util.h"
#include "util/kernel_test_util.h"
#include "normgate/harness/runner.h"
#include "normgate/bench/candidates.h"
#include "normgate/bench/timing.h"

namespace normgate::kernels::test {
namespace {

TEST(Timing, CeilingKindsNameCopiesAndDirections) {
  const std::vector<std::string> k = ceiling_kinds();
  ASSERT_GE(k.size(), 4u);
  EXPECT_EQ(k.front(), "vec16_grid4");  // copy_vec16, the ceiling before the others
  int copies = 0;
  for (const auto& x : k) copies += ceiling_kind_is_copy(x);
  EXPECT_EQ(copies, static_cast<int>(k.size()) - 2);
  EXPECT_FALSE(ceiling_kind_is_copy("read_only"));
  EXPECT_FALSE(ceiling_kind_is_copy("write_only"));
  EXPECT_TRUE(ceiling_kind_is_copy("tma_bulk"));
  try {
    ceiling_kind_is_copy("vec16_tile3");
    ADD_FAILURE() << "an unknown kind was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'vec16_tile3'"), std::string::npos) << e.what();
  }
}

// Each round times every candidate once and the A/A repeat (slot n) once,
// rotated by the round, so the repeat is not always last (derive's A/A
// floor compares candidate 0 with it: a fixed position would fold the
// drift along a round into the floor).
TEST(Timing, RoundOrderRotatesTheAaRepeatWithTheCandidates) {
  EXPECT_EQ(round_order(3, 0), (std::vector<size_t>{0, 1, 2, 3}));
  EXPECT_EQ(round_order(3, 1), (std::vector<size_t>{1, 2, 3, 0}));
  EXPECT_EQ(round_order(3, 2), (std::vector<size_t>{2, 3, 0, 1}));
  EXPECT_EQ(round_order(3, 4), round_order(3, 0));
  EXPECT_EQ(round_order(1, 1), (std::vector<size_t>{1, 0}));  // the repeat first, then candidate 0
  for (size_t n : {size_t{1}, size_t{2}, size_t{5}}) {
    std::vector<int> last(n + 1, 0);
    for (int r = 0; r < static_cast<int>(n) + 1; ++r) {
      std::vector<size_t> o = round_order(n, r);
      ++last[o.back()];
      std::sort(o.begin(), o.end());
      for (size_t k = 0; k <= n; ++k) EXPECT_EQ(o[k], k) << "n " << n << " round " << r;
    }
    for (size_t k = 0; k <= n; ++k) EXPECT_EQ(last[k], 1) << "slot " << k << " of n " << n;
  }
  EXPECT_THROW(round_order(0, 0), std::invalid_argument);
  EXPECT_THROW(round_order(2, -1), std::invalid_argument);
}

#if defined(NORMGATE_KERNELS_HAVE_CUDA)

// Every ceiling copy reproduces its source exactly, at a size that leaves a
// partial tile and a partial TMA chunk (a fast wrong copy is no ceiling), and
// the one-direction streams touch only what they should.
TEST(Timing, CeilingCopiesCopyExactly) {
  NG_REQUIRE_GPU();
  const size_t n = (size_t{3} << 20) + 48;  // 3 MiB + 3 words
  DevMem a(n), b(n);
  std::vector<unsigned char> src(n), got(n);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<unsigned char>((i * 2654435761u) >> 13);
  ASSERT_EQ(cudaMemcpy(a.p, src.data(), n, cudaMemcpyHostToDevice), cudaSuccess);
  for (const auto& k : ceiling_kinds()) {
    ASSERT_EQ(cudaMemset(b.p, 0xA5, n), cudaSuccess);  // poison
    if (k == "read_only") {
      run_ceiling_kind(k, nullptr, a.p, n);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << k;
      continue;
    }
    run_ceiling_kind(k, b.p, k == "write_only" ? nullptr : a.p, n);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << k;
    ASSERT_EQ(cudaMemcpy(got.data(), b.p, n, cudaMemcpyDeviceToHost), cudaSuccess);
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i)
      bad += k == "write_only" ? (i % 2 == 0 ? got[i] != 0x80 : got[i] != 0x3F) : got[i] != src[i];
    EXPECT_EQ(bad, 0u) << k;
  }
  EXPECT_THROW(run_ceiling_kind("tma_bulk", b.p, a.p, 40), std::invalid_argument);  // not a multiple of 16
  EXPECT_THROW(run_ceiling_kind("vec16_tile1", a.as<char>() + 16, a.p, 64), std::invalid_argument);  // overlap
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
      if (v.op == Op::bwd && !v.model_only && v.supports_h(H)) ws_bytes = std::max(ws_bytes, bwd_workspace_bytes(v, T, H));
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
      if (v.model_only || !v.supports_h(H)) continue;  // no GPU kernel; bwd_det_wide: H = 4097..6144
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
