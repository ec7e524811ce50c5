// Tests of the argument validation of kernels/include/normgate/kernels/rmsnorm.h
// (CPU; always run). Pointers point into a host arena: validation never
// dereferences them, and every invalid call must throw before launching.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "util/kernel_test_util.h"
#include "normgate/kernels/chunk_plan.h"
#include "normgate/kernels/pipeline.h"
#include "normgate/kernels/plan.h"
#include "normgate/kernels/registry.h"
#include "normgate/kernels/rmsnorm.h"

namespace normgate::kernels {
namespace {

constexpr int64_t kT = 100, kH = 256;

/// Disjoint, 256-byte aligned regions of a host arena standing in for device memory.
struct Arena {
  std::vector<unsigned char> bytes = std::vector<unsigned char>(64 << 20);
  size_t used = 0;
  void* take(size_t n) {
    uintptr_t base = reinterpret_cast<uintptr_t>(bytes.data());
    uintptr_t p = (base + used + 255) / 256 * 256;
    used = p - base + n + 256;  // slack: tests shift pointers by a few elements
    if (used > bytes.size()) throw std::runtime_error("test arena too small");
    return reinterpret_cast<void*>(p);
  }
};

struct Fixture {
  Arena a;
  FwdArgs f;
  BwdArgs b;
  Fixture() {
    const Variant& det = variant("bwd_det_chunked");
    f.x = static_cast<uint16_t*>(a.take(kT * kH * 2));
    f.x_stride = kH;
    f.w = WeightView{WDtype::bf16, a.take(kH * 2), kH};
    f.y = static_cast<uint16_t*>(a.take(kT * kH * 2));
    f.y_stride = kH;
    f.rstd = static_cast<float*>(a.take(kT * 4));
    f.T = kT;
    f.H = kH;
    b.dy = static_cast<uint16_t*>(a.take(kT * kH * 2));
    b.dy_stride = kH;
    b.x = f.x;
    b.x_stride = kH;
    b.w = f.w;
    b.rstd = f.rstd;
    b.dx = static_cast<uint16_t*>(a.take(kT * kH * 2));
    b.dx_stride = kH;
    b.dw = static_cast<float*>(a.take(kH * 4));
    b.T = kT;
    b.H = kH;
    b.workspace_bytes = bwd_workspace_bytes(det, kT, kH);
    b.workspace = a.take(b.workspace_bytes);
  }
};

/// Expect std::invalid_argument whose message contains `needle`.
template <class F>
void expect_invalid(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one mentioning '" << needle << "'";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

const Variant& det() { return variant("bwd_det_chunked"); }
const Variant& fwd() { return default_fwd(); }

TEST(Validation, BaselineArgumentsAreValid) {
  Fixture x;
  EXPECT_NO_THROW(validate_fwd(fwd(), x.f));
  EXPECT_NO_THROW(validate_fwd(variant("fwd_multirow"), x.f));  // every forward variant takes the same arguments
  for (const Variant& v : variants()) {
    if (v.op != Op::bwd || v.model_only) continue;  // model-only controls: refused (ModelOnlyControlsAreRefused)
    if (!v.supports_h(kH)) continue;                // bwd_det_wide: H = 4097..6144 (its own tests)
    if (!v.supports(x.b.form)) continue;            // bwd_det_heads: the per-head views (its own tests)
    x.b.workspace_bytes = bwd_workspace_bytes(v, kT, kH);
    EXPECT_NO_THROW(validate_bwd(v, x.b, ControlUse::allow)) << v.name;
  }
}

TEST(Validation, WorkspaceSizes) {
  EXPECT_EQ(bwd_workspace_bytes(det(), 0, 4096), 0u);
  EXPECT_EQ(bwd_workspace_bytes(det(), 65537, 4096), static_cast<size_t>(num_chunks(65537, 4096)) * 4096 * 8);
  // nondet: 8 FP64 replicas where chunks are long, the det partials where short (nondet_replicas.h)
  EXPECT_EQ(bwd_workspace_bytes(variant("bwd_nondet_atomic"), 131072, 4096), 8u * 4096u * 8);  // 165 rows per chunk
  EXPECT_EQ(bwd_workspace_bytes(variant("bwd_nondet_atomic"), 65537, 4096),
            static_cast<size_t>(num_chunks(65537, 4096)) * 4096 * 8);  // 83 rows per chunk
  EXPECT_EQ(bwd_workspace_bytes(variant("bwd_nondet_atomic"), 1, 4096), 4096u * 8);  // one chunk of one row
  EXPECT_EQ(bwd_workspace_bytes(variant("ctl_bf16_partials"), 1000, 7), static_cast<size_t>(num_chunks(1000, 7)) * 7 * 8);
  // onepass: the FP64 partials rounded up to 16 bytes, then 16 for the ticket
  // counter: 63 chunks x 7 columns x 8 = 3528 -> 3536 + 16.
  ASSERT_EQ(num_chunks(1000, 7), 63);
  EXPECT_EQ(bwd_workspace_bytes(variant("bwd_det_onepass"), 1000, 7), 3536u + 16u);
  EXPECT_EQ(bwd_workspace_bytes(variant("bwd_det_onepass"), 65537, 4096),
            static_cast<size_t>(num_chunks(65537, 4096)) * 4096 * 8 + 16);
  EXPECT_EQ(bwd_workspace_bytes(variant("bwd_det_onepass"), 0, 4096), 0u);
  // fp32_blocked: FP32 partials (half the det bytes), rounded up to 16: 63 x 7 x 4 = 1764 -> 1776.
  EXPECT_EQ(bwd_workspace_bytes(variant("bwd_fp32_blocked"), 1000, 7), 1776u);
  EXPECT_EQ(bwd_workspace_bytes(variant("bwd_fp32_blocked"), 65537, 4096),
            static_cast<size_t>(num_chunks(65537, 4096)) * 4096 * 4);
  EXPECT_EQ(bwd_workspace_bytes(variant("bwd_fp32_blocked"), 0, 4096), 0u);
  expect_invalid([] { bwd_workspace_bytes(fwd(), 10, 10); }, "not a backward variant");
  expect_invalid([] { bwd_workspace_bytes(det(), 10, 16385); }, "H = 16385");
  expect_invalid([] { bwd_workspace_bytes(det(), -1, 10); }, "T = -1");
}

TEST(Validation, ShapeErrorsNameTheValue) {
  Fixture x;
  for (int64_t H : {int64_t{0}, int64_t{-3}, int64_t{16385}}) {
    BwdArgs b = x.b;
    b.H = H;
    expect_invalid([&] { rmsnorm_bwd(det(), b); }, "H = " + std::to_string(H));
    FwdArgs f = x.f;
    f.H = H;
    expect_invalid([&] { rmsnorm_fwd(fwd(), f); }, "H = " + std::to_string(H));
  }
  BwdArgs b = x.b;
  b.T = -1;
  expect_invalid([&] { rmsnorm_bwd(det(), b); }, "T = -1");
  b.T = kMaxT + 1;
  expect_invalid([&] { rmsnorm_bwd(det(), b); }, "T = " + std::to_string(kMaxT + 1));
  b = x.b;
  b.x_stride = kH - 1;
  expect_invalid([&] { rmsnorm_bwd(det(), b); }, "x_stride = 255");
  b = x.b;
  b.w.cols = kH + 1;
  expect_invalid([&] { rmsnorm_bwd(det(), b); }, "w.cols = 257");
  b = x.b;
  b.form = Form::heads4;
  expect_invalid([&] { rmsnorm_bwd(det(), b); }, "form 'heads4'");
  FwdArgs f = x.f;
  f.form = Form::res;  // without its u and h_new buffers
  expect_invalid([&] { rmsnorm_fwd(fwd(), f); }, "form res needs u and h_new");
  f = x.f;
  f.u = f.x;  // res buffers on a plain call
  expect_invalid([&] { rmsnorm_fwd(fwd(), f); }, "only res uses them");
  b = x.b;
  b.dh_new = b.dy;
  b.dh_new_stride = kH;
  expect_invalid([&] { rmsnorm_bwd(det(), b); }, "only res uses it");
}

TEST(Validation, NullAndMisalignedPointers) {
  Fixture x;
  {
    BwdArgs b = x.b;
    b.dy = nullptr;
    expect_invalid([&] { rmsnorm_bwd(det(), b); }, "dy is null");
  }
  {
    BwdArgs b = x.b;
    b.rstd = nullptr;
    expect_invalid([&] { rmsnorm_bwd(det(), b); }, "rstd is null");
  }
  {
    BwdArgs b = x.b;
    b.w.p = nullptr;
    expect_invalid([&] { rmsnorm_bwd(det(), b); }, "w is null");
  }
  {
    FwdArgs f = x.f;
    f.y = nullptr;
    expect_invalid([&] { rmsnorm_fwd(fwd(), f); }, "y is null");
  }
  {
    BwdArgs b = x.b;
    b.dx = reinterpret_cast<uint16_t*>(reinterpret_cast<char*>(b.dx) + 1);
    expect_invalid([&] { rmsnorm_bwd(det(), b); }, "not 2-byte aligned");
  }
  {
    BwdArgs b = x.b;
    b.dw = reinterpret_cast<float*>(reinterpret_cast<char*>(b.dw) + 2);
    expect_invalid([&] { rmsnorm_bwd(det(), b); }, "dw");
  }
  {
    BwdArgs b = x.b;
    b.w = WeightView{WDtype::fp32, reinterpret_cast<char*>(const_cast<void*>(b.w.p)) + 2, kH};
    expect_invalid([&] { rmsnorm_bwd(det(), b); }, "4-byte aligned");
  }
}

TEST(Validation, WorkspaceErrors) {
  Fixture x;
  BwdArgs b = x.b;
  b.workspace = nullptr;
  expect_invalid([&] { rmsnorm_bwd(det(), b); }, "workspace is null");
  b = x.b;
  b.workspace_bytes -= 8;
  expect_invalid([&] { rmsnorm_bwd(det(), b); }, "workspace_bytes = " + std::to_string(b.workspace_bytes));
  b = x.b;
  b.workspace = static_cast<char*>(b.workspace) + 8;
  expect_invalid([&] { rmsnorm_bwd(det(), b); }, "not 16-byte aligned");
}

TEST(Validation, ControlsNeedExplicitOptIn) {
  Fixture x;
  for (const char* name : {"ctl_fp32_seq", "ctl_bf16_partials"}) {
    BwdArgs b = x.b;
    b.workspace_bytes = bwd_workspace_bytes(variant(name), kT, kH);
    expect_invalid([&] { rmsnorm_bwd(variant(name), b); }, "negative control");
    EXPECT_NO_THROW(validate_bwd(variant(name), b, ControlUse::allow)) << name;
  }
}

TEST(Validation, WrongOpIsRefused) {
  Fixture x;
  expect_invalid([&] { rmsnorm_bwd(fwd(), x.b); }, "not a backward variant");
  expect_invalid([&] { rmsnorm_fwd(det(), x.f); }, "not a forward variant");
  expect_invalid([&] { rmsnorm_bwd(variant("fwd_multirow"), x.b); }, "rmsnorm_bwd(fwd_multirow): not a backward variant");
  expect_invalid([] { bwd_workspace_bytes(variant("fwd_multirow"), 10, 10); }, "not a backward variant");
  FwdArgs f = x.f;
  f.H = 16385;  // fwd_multirow validates as fwd_rowwise, naming itself
  expect_invalid([&] { rmsnorm_fwd(variant("fwd_multirow"), f); }, "rmsnorm_fwd(fwd_multirow): H = 16385");
}

TEST(Validation, EpsMustBeFiniteAndNonNegative) {
  Fixture x;
  for (float eps : {-1e-6f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    FwdArgs f = x.f;
    f.eps = eps;
    expect_invalid([&] { rmsnorm_fwd(fwd(), f); }, "eps");
  }
  FwdArgs f = x.f;
  f.eps = 0.0f;
  EXPECT_NO_THROW(validate_fwd(fwd(), f));
}

TEST(Validation, OverlappingOutputsAreRefused) {
  Fixture x;
  BwdArgs b = x.b;
  b.dx = const_cast<uint16_t*>(b.dy) + 8;
  expect_invalid([&] { rmsnorm_bwd(det(), b); }, "dx overlaps dy");
  b = x.b;
  b.dw = static_cast<float*>(b.workspace);
  expect_invalid([&] { rmsnorm_bwd(det(), b); }, "dw overlaps workspace");
  FwdArgs f = x.f;
  f.y = const_cast<uint16_t*>(f.x);
  expect_invalid([&] { rmsnorm_fwd(fwd(), f); }, "y overlaps x");
}

TEST(Validation, ZeroRowsNeedOnlyDw) {
  BwdArgs b;
  std::vector<float> dw(kH);
  b.dw = dw.data();
  b.H = kH;
  b.w = WeightView{WDtype::fp32, reinterpret_cast<void*>(uintptr_t{4096}), kH};  // never read
  b.T = 0;  // x, dy, dx, rstd, workspace may all be null
  EXPECT_NO_THROW(validate_bwd(det(), b));
  b.dw = nullptr;
  expect_invalid([&] { rmsnorm_bwd(det(), b); }, "dw is null");
  FwdArgs f;
  f.H = kH;
  f.w = WeightView{WDtype::bf16, reinterpret_cast<void*>(uintptr_t{4096}), kH};
  EXPECT_NO_THROW(validate_fwd(fwd(), f));
}

TEST(Validation, VectorPathNeedsAlignmentAndH8) {
  Fixture x;
  EXPECT_TRUE(bwd_vector_path(x.b));
  EXPECT_TRUE(fwd_vector_path(x.f));
  BwdArgs b = x.b;
  b.dx = b.dx + 1;  // one element off: still valid, scalar path
  EXPECT_NO_THROW(validate_bwd(det(), b));
  EXPECT_FALSE(bwd_vector_path(b));
  b = x.b;
  b.x_stride = kH + 4;
  EXPECT_FALSE(bwd_vector_path(b));
  b = x.b;
  b.H = 255;
  b.w.cols = 255;
  b.workspace_bytes = bwd_workspace_bytes(det(), kT, 255);
  EXPECT_NO_THROW(validate_bwd(det(), b));
  EXPECT_FALSE(bwd_vector_path(b));
  FwdArgs f = x.f;
  f.w.p = static_cast<const char*>(f.w.p) + 2;
  EXPECT_FALSE(fwd_vector_path(f));
}

#if !defined(NORMGATE_KERNELS_HAVE_CUDA)
TEST(Validation, ValidCallsInACpuBuildThrowRuntimeError) {
  Fixture x;
  EXPECT_THROW(rmsnorm_bwd(det(), x.b), std::runtime_error);
  EXPECT_THROW(rmsnorm_fwd(fwd(), x.f), std::runtime_error);
  try {
    rmsnorm_fwd(variant("fwd_multirow"), x.f);
    ADD_FAILURE() << "fwd_multirow ran without CUDA";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("fwd_multirow"), std::string::npos) << e.what();
  }
}
#endif

}  // namespace
}  // namespace normgate::kernels

namespace normgate::kernels {
namespace {

// Per-head views: [T, 24, 256] as the q part of packed rows of 40*256, and
// contiguous [T, 4, 256]. Shapes, strides and overlap rules are checked;
// expanded (stride 0) dy is accepted; rstd and the workspace count T*heads rows.
TEST(Validation, HeadViews) {
  Arena a;
  constexpr int64_t T = 50, packed = 40 * 256;
  BwdArgs b;
  b.form = Form::heads24;
  b.heads = 24;
  b.T = T;
  b.H = 256;
  b.x = static_cast<uint16_t*>(a.take(T * packed * 2));
  b.x_stride = packed;
  b.x_stride_h = 256;
  b.dy = static_cast<uint16_t*>(a.take(T * packed * 2));
  b.dy_stride = packed;
  b.dy_stride_h = 256;
  b.dx = static_cast<uint16_t*>(a.take(T * packed * 2));
  b.dx_stride = packed;
  b.dx_stride_h = 256;
  b.w = WeightView{WDtype::fp32, a.take(256 * 4), 256};
  b.rstd = static_cast<float*>(a.take(T * 24 * 4));
  b.dw = static_cast<float*>(a.take(256 * 4));
  b.workspace_bytes = bwd_workspace_bytes(det(), T * 24, 256);
  b.workspace = a.take(b.workspace_bytes);
  EXPECT_NO_THROW(validate_bwd(det(), b));
  EXPECT_TRUE(bwd_vector_path(b));
  EXPECT_GT(b.workspace_bytes, bwd_workspace_bytes(det(), T, 256));  // T*24 rows, not T

  BwdArgs e = b;
  e.dy_stride = 0;  // one dy for every token (an expanded tensor): read-only, accepted
  EXPECT_NO_THROW(validate_bwd(det(), e));
  e = b;
  e.dx_stride_h = 128;  // output heads overlap
  expect_invalid([&] { validate_bwd(det(), e); }, "dx_stride_h = 128");
  e = b;
  e.dx_stride = 23 * 256 + 255;  // output tokens overlap
  expect_invalid([&] { validate_bwd(det(), e); }, "dx_stride = 6143");
  e = b;
  e.heads = 4;  // does not match heads24
  expect_invalid([&] { validate_bwd(det(), e); }, "heads = 4");
  e = b;
  e.H = 128;
  expect_invalid([&] { validate_bwd(det(), e); }, "H = 128");
  e = b;
  e.workspace_bytes = bwd_workspace_bytes(det(), T, 256);  // sized for T rows instead of T*24
  expect_invalid([&] { validate_bwd(det(), e); }, "workspace_bytes");
  e = b;
  e.dx_stride_h = 260;  // legal layout, but not a multiple of 8 elements: scalar path
  e.dx_stride = 24 * 260;
  EXPECT_NO_THROW(validate_bwd(det(), e));
  EXPECT_FALSE(bwd_vector_path(e));

  FwdArgs f;
  f.form = Form::heads4;
  f.heads = 4;
  f.T = T;
  f.H = 256;
  f.x = b.x;
  f.x_stride = 1024;
  f.x_stride_h = 256;
  f.y = b.dx;
  f.y_stride = 1024;
  f.y_stride_h = 256;
  f.w = b.w;
  f.rstd = static_cast<float*>(a.take(T * 4 * 4));
  EXPECT_NO_THROW(validate_fwd(fwd(), f));
  f.T = kMaxT / 4 + 1;
  expect_invalid([&] { validate_fwd(fwd(), f); }, "T*heads");
  f.T = T;
  f.form = Form::plain;  // heads = 4 with the plain form
  expect_invalid([&] { validate_fwd(fwd(), f); }, "heads = 4");
}

}  // namespace
}  // namespace normgate::kernels

namespace normgate::kernels {
namespace {

// The fixture's forward as form res, with its own u and h_new.
FwdArgs res_args(Fixture& x) {
  FwdArgs f = x.f;
  f.form = Form::res;
  f.u = static_cast<uint16_t*>(x.a.take(kT * kH * 2));
  f.u_stride = kH;
  f.h_new = static_cast<uint16_t*>(x.a.take(kT * kH * 2));
  f.h_new_stride = kH;
  return f;
}

// msq (optional): the forward's output and the backward's input, binary64
// [T*heads], 8-byte aligned; the forward's must overlap none of its buffers
// (u and h_new too, for res), the backward's none of its outputs (it may
// share memory with the inputs). Null is valid on both.
TEST(Validation, MsqAlignmentAndOverlaps) {
  Fixture x;
  double* m = static_cast<double*>(x.a.take(kT * 8));
  FwdArgs f = x.f;
  f.msq = m;
  EXPECT_NO_THROW(validate_fwd(fwd(), f));
  FwdArgs g = f;
  g.msq = reinterpret_cast<double*>(reinterpret_cast<uintptr_t>(m) + 4);
  expect_invalid([&] { validate_fwd(fwd(), g); }, "msq");
  g = f;
  g.msq = reinterpret_cast<double*>(const_cast<uint16_t*>(f.x));  // over x
  expect_invalid([&] { validate_fwd(fwd(), g); }, "msq overlaps x");
  g = f;
  g.msq = reinterpret_cast<double*>(f.rstd);  // over rstd
  expect_invalid([&] { validate_fwd(fwd(), g); }, "msq overlaps");
  g = res_args(x);  // form res: not over u either (the ring reads u rows ahead)
  g.msq = m;
  EXPECT_NO_THROW(validate_fwd(fwd(), g));
  g.msq = reinterpret_cast<double*>(const_cast<uint16_t*>(g.u));
  expect_invalid([&] { validate_fwd(fwd(), g); }, "msq overlaps u");
  g.msq = reinterpret_cast<double*>(g.h_new);
  expect_invalid([&] { validate_fwd(fwd(), g); }, "msq overlaps h_new");

  BwdArgs b = x.b;
  b.msq = m;
  EXPECT_NO_THROW(validate_bwd(det(), b));
  b.msq = reinterpret_cast<const double*>(b.dy);  // an input may share memory with msq
  EXPECT_NO_THROW(validate_bwd(det(), b));
  b.msq = reinterpret_cast<const double*>(b.dw);
  expect_invalid([&] { validate_bwd(det(), b); }, "msq overlaps dw");
  b.msq = reinterpret_cast<const double*>(reinterpret_cast<uintptr_t>(m) + 4);
  expect_invalid([&] { validate_bwd(det(), b); }, "8-byte aligned");
}

// Form res: u and h_new are required by the forward and must not overlap;
// dh_new is optional in the backward; the vector path needs them aligned.
TEST(Validation, ResidualForm) {
  Fixture x;
  FwdArgs f = res_args(x);
  EXPECT_NO_THROW(validate_fwd(fwd(), f));
  EXPECT_TRUE(fwd_vector_path(f));
  FwdArgs g = f;
  g.h_new = f.y;  // h_new on top of y
  expect_invalid([&] { validate_fwd(fwd(), g); }, "h_new overlaps y");
  g = f;
  g.rstd = reinterpret_cast<float*>(const_cast<uint16_t*>(f.u)) + 1;  // rstd inside u: written while u is read
  expect_invalid([&] { validate_fwd(fwd(), g); }, "rstd overlaps u");
  g = f;
  g.h_new_stride = kH - 1;
  expect_invalid([&] { validate_fwd(fwd(), g); }, "h_new_stride = 255");
  g = f;
  g.u = reinterpret_cast<const uint16_t*>(reinterpret_cast<uintptr_t>(f.u) + 2);  // 2-byte aligned: scalar path
  EXPECT_NO_THROW(validate_fwd(fwd(), g));
  EXPECT_FALSE(fwd_vector_path(g));

  BwdArgs b = x.b;
  b.form = Form::res;
  EXPECT_NO_THROW(validate_bwd(det(), b));  // dh_new absent: dh = dx
  b.dh_new = static_cast<uint16_t*>(x.a.take(kT * kH * 2));
  b.dh_new_stride = kH;
  EXPECT_NO_THROW(validate_bwd(det(), b));
  BwdArgs c = b;
  c.dx = const_cast<uint16_t*>(b.dh_new);  // dx on top of dh_new
  expect_invalid([&] { validate_bwd(det(), c); }, "dx overlaps dh_new");
}

}  // namespace
}  // namespace normgate::kernels

namespace normgate::kernels {
namespace {

TEST(Validation, PipelineDepthRange) {
  const test::DepthGuard restore;
  const PipelineDepth saved = restore.saved;
  EXPECT_EQ(saved.fwd, PipelineDepth{}.fwd);  // the defaults routes are gated with
  EXPECT_EQ(saved.fwd_l2, PipelineDepth{}.fwd_l2);
  EXPECT_EQ(saved.fwd_block, PipelineDepth{}.fwd_block);
  EXPECT_EQ(saved.fwd_res_fused, PipelineDepth{}.fwd_res_fused);
  EXPECT_EQ(saved.fwd_simple, PipelineDepth{}.fwd_simple);
  EXPECT_EQ(saved.fwd_res_simple, PipelineDepth{}.fwd_res_simple);
  EXPECT_EQ(saved.fwd_rstd_warp, PipelineDepth{}.fwd_rstd_warp);
  const auto rejects = [](PipelineDepth d, const std::string& named) {
    try {
      set_pipeline_depth(d);
      ADD_FAILURE() << "accepted; expected an error naming '" << named << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
    }
  };
  rejects({0, 0, 0}, "fwd = 0");
  rejects({kMaxPipelineDepth + 1, 0, 0}, "fwd = 9");
  rejects({4, kMaxPipelineDepth + 1, 0}, "fwd_l2 = 9");
  rejects({4, -1, 0}, "fwd_l2 = -1");
  rejects({4, 0, -3}, "fwd_block = -3");
  rejects({4, 0, kMaxFwdBlockRows + 1}, "fwd_block = " + std::to_string(kMaxFwdBlockRows + 1));
  EXPECT_EQ(pipeline_depth().fwd, saved.fwd);  // a rejected value changes nothing
  // Every field round-trips through the packed word, at its limits too.
  for (const PipelineDepth d : {PipelineDepth{2, kMaxPipelineDepth, 0, false}, PipelineDepth{kMaxPipelineDepth, 0, 1, false},
                                PipelineDepth{1, 3, kMaxFwdBlockRows, false}}) {
    set_pipeline_depth(d);
    EXPECT_EQ(pipeline_depth().fwd, d.fwd);
    EXPECT_EQ(pipeline_depth().fwd_l2, d.fwd_l2);
    EXPECT_EQ(pipeline_depth().fwd_block, d.fwd_block);
    EXPECT_FALSE(pipeline_depth().fwd_res_fused);
  }
  set_pipeline_depth({2, 1, kMaxFwdBlockRows, true, false});
  EXPECT_TRUE(pipeline_depth().fwd_res_fused);
  EXPECT_FALSE(pipeline_depth().fwd_simple);
  set_pipeline_depth({3, 0, 5, false, true});
  EXPECT_TRUE(pipeline_depth().fwd_simple);
  EXPECT_FALSE(pipeline_depth().fwd_res_fused);  // neighbouring bit intact
  set_pipeline_depth({3, 0, 5, true, false, false});
  EXPECT_FALSE(pipeline_depth().fwd_res_simple);
  EXPECT_FALSE(pipeline_depth().fwd_simple);  // neighbouring bits intact
  EXPECT_TRUE(pipeline_depth().fwd_res_fused);
  set_pipeline_depth({3, 0, 5, false, false, true});
  EXPECT_TRUE(pipeline_depth().fwd_res_simple);
  EXPECT_FALSE(pipeline_depth().fwd_simple);
  EXPECT_EQ(pipeline_depth().fwd_block, 5);
  EXPECT_TRUE(pipeline_depth().fwd_rstd_warp);  // the default
  set_pipeline_depth({3, 0, 5, false, false, true, false});
  EXPECT_FALSE(pipeline_depth().fwd_rstd_warp);
  EXPECT_TRUE(pipeline_depth().fwd_res_simple);  // neighbouring bit intact
  set_pipeline_depth({2, 1, kMaxFwdBlockRows, true});
  EXPECT_EQ(pipeline_depth().fwd_block, kMaxFwdBlockRows);  // neighbouring fields intact
  EXPECT_EQ(pipeline_depth().fwd_l2, 1);
}

}  // namespace
}  // namespace normgate::kernels
