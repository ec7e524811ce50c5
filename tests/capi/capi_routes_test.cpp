// tests/capi/capi_routes_test.cpp: which kernel the C ABI runs (capi.h,
// "Which kernel runs"): the table search, ng_route_for at a window edge,
// refusals of missing and stale approvals (NG_EROUTE naming the window),
// overrides, the fallback's one-time warning and strict mode, without a GPU;
// on a GPU, that a routed call runs the routed variant (ng_last_route) with
// the bits of that variant's CPU model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "normgate/capi.h"
#include "normgate/kernels/device.h"
#include "normgate/kernels/models.h"
#include "normgate/kernels/registry.h"
#include "normgate/kernels/rmsnorm.h"
#include "normgate/seeds/case_id.h"
#include "normgate/seeds/generate.h"
#include "util/dispatch_fixture.h"

#ifdef NORMGATE_KERNELS_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace nk = normgate::kernels;
namespace ns = normgate::seeds;

namespace {

std::string last_error() { return ng_last_error(); }

// ng_route_for of a [T, 64] bf16 plain call unless told otherwise.
struct Q {
  int32_t op = NG_OP_BWD, mode = NG_MODE_DET;
  int64_t H = 64, T = 1;
  int32_t w = NG_W_BF16, form = NG_FORM_PLAIN;
  const char* variant = nullptr;
  ng_route_info info{};
  int run() { return ng_route_for(op, mode, H, T, w, form, variant, &info); }
};

Q bwd(int32_t mode, int64_t T, int32_t w = NG_W_BF16, int64_t H = 64) {
  Q q;
  q.mode = mode;
  q.T = T;
  q.w = w;
  q.H = H;
  return q;
}

// Loads the fixture's table for the test and the default search afterwards.
struct Loaded {
  normgate::test::DispatchFixture fx;
  explicit Loaded(const std::string& tag, const char* dispatch_env = nullptr) : fx(tag) {
    if (dispatch_env)
      ::setenv("NORMGATE_DISPATCH", dispatch_env, 1);
    else
      ::unsetenv("NORMGATE_DISPATCH");
    EXPECT_EQ(ng_routes_load(fx.table.c_str()), NG_OK) << last_error();
    ng_set_strict_routes(0);
  }
  ~Loaded() {
    ::unsetenv("NORMGATE_DISPATCH");
    ng_set_strict_routes(0);
    ng_set_route_warnings(1);
    EXPECT_EQ(ng_routes_load(nullptr), NG_OK) << last_error();
  }
};

TEST(CApiRoutes, StructLayoutsArePinned) {
  EXPECT_EQ(sizeof(ng_route_info), 72u);
  EXPECT_EQ(offsetof(ng_route_info, message), 16u);
  EXPECT_EQ(offsetof(ng_route_info, how), 24u);
  EXPECT_EQ(offsetof(ng_route_info, t_lo), 32u);
  EXPECT_EQ(offsetof(ng_route_info, op), 48u);
  EXPECT_EQ(offsetof(ng_route_info, warned), 56u);
  EXPECT_EQ(offsetof(ng_route_info, workspace_bytes), 64u);
  EXPECT_EQ(sizeof(ng_variant_desc), 32u);
  EXPECT_EQ(offsetof(ng_variant_desc, op), 16u);
  EXPECT_EQ(offsetof(ng_variant_desc, control), 24u);
}

// Without NORMGATE_ROUTES, a library in its build tree uses the source
// tree's routes/sm90a.toml; NORMGATE_ROUTES names another table.
TEST(CApiRoutes, DefaultTableAndNormgateRoutes) {
  ::unsetenv("NORMGATE_ROUTES");
  ASSERT_EQ(ng_routes_load(nullptr), NG_OK) << last_error();
  Q q = bwd(NG_MODE_NONDET, 70000, NG_W_BF16, 2048);
  ASSERT_EQ(q.run(), NG_OK) << last_error();
  // routes/sm90a.toml, or the per-GPU table of device 0 beside it (capi.h;
  // routing.h, "Per-GPU tables").
  const normgate::kernels::DeviceInfo dev = normgate::kernels::device_info();
  const std::string base = std::string(NORMGATE_SOURCE_DIR) + "/routes/sm90a.toml";
  EXPECT_EQ(std::string(q.info.table), dev.present ? normgate::kernels::table_for_gpu(base, dev.name) : base);
  EXPECT_LE(q.info.t_lo, 70000);  // the window holding the call (the table is derived)
  EXPECT_GE(q.info.t_hi, 70000);
  const normgate::test::DispatchFixture fx("env");
  ::setenv("NORMGATE_ROUTES", fx.table.c_str(), 1);
  ASSERT_EQ(ng_routes_load(nullptr), NG_OK) << last_error();
  ASSERT_EQ(q.run(), NG_OK) << last_error();
  EXPECT_EQ(std::string(q.info.table), fx.table);
  EXPECT_EQ(q.info.how, NG_ROUTE_FALLBACK);  // H = 2048 is not in the fixture's table
  // A table that does not load: NG_EROUTE naming it; the table in use stays.
  ::setenv("NORMGATE_ROUTES", "/nonexistent/t.toml", 1);
  EXPECT_EQ(ng_routes_load(nullptr), NG_EROUTE);
  EXPECT_NE(last_error().find("/nonexistent/t.toml"), std::string::npos) << last_error();
  ASSERT_EQ(q.run(), NG_OK) << last_error();
  EXPECT_EQ(std::string(q.info.table), fx.table);
  ::unsetenv("NORMGATE_ROUTES");
  // An unknown NORMGATE_DISPATCH token is refused at load.
  ::setenv("NORMGATE_DISPATCH", "allow-everything", 1);
  EXPECT_EQ(ng_routes_load(fx.table.c_str()), NG_EROUTE);
  EXPECT_NE(last_error().find("unknown token 'allow-everything'"), std::string::npos) << last_error();
  ::unsetenv("NORMGATE_DISPATCH");
  ASSERT_EQ(ng_routes_load(nullptr), NG_OK) << last_error();
}

TEST(CApiRoutes, RouteForChangesAtTheWindowEdge) {
  Loaded l("edge");
  Q lo = bwd(NG_MODE_NONDET, 100);
  ASSERT_EQ(lo.run(), NG_OK) << last_error();
  EXPECT_STREQ(lo.info.variant, "bwd_det_chunked");
  EXPECT_EQ(lo.info.how, NG_ROUTE_ROUTED);
  EXPECT_EQ(lo.info.approval, NG_APPROVAL_CURRENT);
  EXPECT_EQ(lo.info.t_lo, 1);
  EXPECT_EQ(lo.info.t_hi, 100);
  EXPECT_EQ(lo.info.op, NG_OP_BWD);
  EXPECT_EQ(lo.info.mode, NG_MODE_NONDET);
  EXPECT_EQ(lo.info.workspace_bytes, nk::bwd_workspace_bytes(nk::variant("bwd_det_chunked"), 100, 64));
  EXPECT_STREQ(lo.info.message, "");
  EXPECT_EQ(std::string(lo.info.table), l.fx.table);
  Q hi = bwd(NG_MODE_NONDET, 101);
  ASSERT_EQ(hi.run(), NG_OK) << last_error();
  EXPECT_STREQ(hi.info.variant, "bwd_nondet_atomic");
  EXPECT_EQ(hi.info.t_lo, 101);
  EXPECT_EQ(hi.info.workspace_bytes, nk::bwd_workspace_bytes(nk::variant("bwd_nondet_atomic"), 101, 64));
  // T = 0: the window of T = 1, no workspace.
  Q zero = bwd(NG_MODE_NONDET, 0);
  ASSERT_EQ(zero.run(), NG_OK) << last_error();
  EXPECT_STREQ(zero.info.variant, "bwd_det_chunked");
  EXPECT_EQ(zero.info.t_hi, 100);
  EXPECT_EQ(zero.info.workspace_bytes, 0u);
  // The forward: both modes, no workspace.
  Q f;
  f.op = NG_OP_FWD;
  f.mode = 7;  // ignored for the forward
  f.T = 650;
  ASSERT_EQ(f.run(), NG_OK) << last_error();
  EXPECT_STREQ(f.info.variant, "fwd_rowwise");
  EXPECT_EQ(f.info.t_hi, 700);
  EXPECT_EQ(f.info.workspace_bytes, 0u);
  // Bad arguments are NG_EINVAL.
  Q bad = bwd(5, 10);
  EXPECT_EQ(bad.run(), NG_EINVAL);
  EXPECT_NE(last_error().find("mode = 5"), std::string::npos) << last_error();
  bad = bwd(NG_MODE_DET, -1);
  EXPECT_EQ(bad.run(), NG_EINVAL);
  bad = bwd(NG_MODE_DET, 1, NG_W_BF16, 0);
  EXPECT_EQ(bad.run(), NG_EINVAL);
  EXPECT_EQ(ng_route_for(NG_OP_BWD, NG_MODE_DET, 64, 1, NG_W_BF16, NG_FORM_PLAIN, nullptr, nullptr), NG_EINVAL);
  // The call's own limits, in tokens: T*heads rows up to 2^32, heads of 256.
  // A fallback pick past them would only fail at the launch; the workspace
  // of a backward one named the rows T.
  Q heads = bwd(NG_MODE_DET, 178956971, NG_W_BF16, 256);
  heads.form = NG_FORM_HEADS24;
  EXPECT_EQ(heads.run(), NG_EINVAL);
  EXPECT_NE(last_error().find("T = 178956971 is out of range 0..178956970 (T*heads <= 4294967296)"),
            std::string::npos) << last_error();
  heads.T = 178956970;  // the last T that fits: routed or a fallback, not a usage error
  EXPECT_NE(heads.run(), NG_EINVAL) << last_error();
  Q plain = bwd(NG_MODE_DET, (int64_t{1} << 32) + 1);
  EXPECT_EQ(plain.run(), NG_EINVAL);
  EXPECT_NE(last_error().find("T = 4294967297 is out of range 0..4294967296"), std::string::npos) << last_error();
  Q narrow = bwd(NG_MODE_DET, 5, NG_W_BF16, 128);
  narrow.form = NG_FORM_HEADS4;
  EXPECT_EQ(narrow.run(), NG_EINVAL);
  EXPECT_NE(last_error().find("H = 128: form 'heads4' normalizes heads of 256"), std::string::npos) << last_error();
}

TEST(CApiRoutes, MissingAndStaleApprovalsAreRefusedNamingTheWindow) {
  Loaded l("refuse");
  Q stale = bwd(NG_MODE_DET, 5, NG_W_FP32);
  EXPECT_EQ(stale.run(), NG_EROUTE);
  EXPECT_EQ(stale.info.how, NG_ROUTE_REFUSED);
  EXPECT_EQ(stale.info.approval, NG_APPROVAL_STALE);
  EXPECT_STREQ(stale.info.variant, "bwd_det_chunked");
  EXPECT_EQ(stale.info.workspace_bytes, 0u);
  const std::string m = stale.info.message;
  EXPECT_NE(m.find("window bwd det H=64 w=fp32 form=plain T=1..700"), std::string::npos) << m;
  EXPECT_NE(m.find(": stale: approved source eeeeeeeeeeee"), std::string::npos) << m;
  EXPECT_NE(m.find(l.fx.dir + "/dispatch.approvals.json"), std::string::npos) << m;
  EXPECT_NE(m.find("ng_fwd_args.variant or ng_bwd"), std::string::npos) << m;
  EXPECT_NE(last_error().find("ng_route_for: bwd det H=64 w=fp32"), std::string::npos) << last_error();
  Q missing = bwd(NG_MODE_NONDET, 700, NG_W_FP32);
  EXPECT_EQ(missing.run(), NG_EROUTE);
  EXPECT_EQ(missing.info.approval, NG_APPROVAL_MISSING);
  EXPECT_NE(std::string(missing.info.message).find(": missing: no approval"), std::string::npos)
      << missing.info.message;

  // A kernel call is refused the same way, before its arguments are looked at.
  ng_bwd_args b{};
  b.w_dtype = NG_W_FP32;
  b.form = NG_FORM_PLAIN;
  b.T = 5;
  b.H = 64;
  b.heads = 1;
  EXPECT_EQ(ng_bwd_routed(NG_MODE_DET, &b, nullptr), NG_EROUTE);
  EXPECT_EQ(last_error().rfind("ng_bwd_routed: bwd det H=64 w=fp32 form=plain T=5: window bwd det H=64 w=fp32 "
                               "form=plain T=1..700", 0),
            0u)
      << last_error();
  EXPECT_EQ(ng_bwd_routed(9, &b, nullptr), NG_EINVAL);
  std::thread([] {  // a thread on which nothing ran
    ng_route_info last{};
    EXPECT_EQ(ng_last_route(&last), NG_EINVAL);
    EXPECT_NE(last_error().find("no kernel call"), std::string::npos) << last_error();
  }).join();
}

TEST(CApiRoutes, OverridesExplicitAndByPolicy) {
  {
    Loaded l("override");
    Q q = bwd(NG_MODE_DET, 5, NG_W_FP32);
    q.variant = "bwd_det_chunked";
    ASSERT_EQ(q.run(), NG_OK) << last_error();
    EXPECT_EQ(q.info.how, NG_ROUTE_EXPLICIT);
    EXPECT_EQ(q.info.approval, NG_APPROVAL_STALE);  // the window's state, for information
    EXPECT_EQ(q.info.workspace_bytes, nk::bwd_workspace_bytes(nk::variant("bwd_det_chunked"), 5, 64));
    q.variant = "bwd_nondet_atomic";  // not for a det call
    EXPECT_EQ(q.run(), NG_EINVAL);
    EXPECT_NE(last_error().find("non-deterministic"), std::string::npos) << last_error();
    q.variant = "ctl_fp32_seq";
    EXPECT_EQ(q.run(), NG_EINVAL);
    q.variant = "fwd_rowwise";
    EXPECT_EQ(q.run(), NG_EINVAL);
  }
  {
    Loaded l("policy", "allow-unapproved");
    Q q = bwd(NG_MODE_DET, 5, NG_W_FP32);
    ASSERT_EQ(q.run(), NG_OK) << last_error();
    EXPECT_EQ(q.info.how, NG_ROUTE_UNAPPROVED);
    EXPECT_STREQ(q.info.variant, "bwd_det_chunked");
    EXPECT_EQ(q.info.approval, NG_APPROVAL_STALE);
  }
}

TEST(CApiRoutes, FallbackWarnsOnceOnStderrAndStrictModeRefuses) {
  Loaded l("fallback");
  Q q = bwd(NG_MODE_DET, 5, NG_W_BF16, 128);
  ASSERT_EQ(q.run(), NG_OK) << last_error();
  EXPECT_EQ(q.info.how, NG_ROUTE_FALLBACK);
  EXPECT_STREQ(q.info.variant, "bwd_det_chunked");
  EXPECT_EQ(q.info.approval, NG_APPROVAL_NONE);
  EXPECT_EQ(q.info.t_lo, 0);
  EXPECT_EQ(q.info.warned, 0);  // a query does not warn
  // A kernel call warns, once per (op, mode, H, w, form), on stderr; it then
  // fails here for want of a GPU or of buffers, which does not matter.
  ng_bwd_args b{};
  b.w_dtype = NG_W_BF16;
  b.form = NG_FORM_PLAIN;
  b.T = 5;
  b.H = 128;
  b.heads = 1;
  testing::internal::CaptureStderr();
  (void)ng_bwd_routed(NG_MODE_DET, &b, nullptr);
  (void)ng_bwd_routed(NG_MODE_DET, &b, nullptr);
  b.T = 9000;
  (void)ng_bwd_routed(NG_MODE_DET, &b, nullptr);
  const std::string err = testing::internal::GetCapturedStderr();
  const std::string needle = "normgate: warning: bwd det H=128 w=bf16 form=plain (T=5) is outside every window of " +
                             l.fx.table;
  EXPECT_NE(err.find(needle), std::string::npos) << err;
  EXPECT_EQ(err.find(needle, err.find(needle) + 1), std::string::npos) << err;  // once
  EXPECT_EQ(err.find("(T=9000)"), std::string::npos) << err;
  EXPECT_NE(err.find("running the table's fallback bwd_det_chunked"), std::string::npos) << err;
  // Warnings off: nothing on stderr (another group, warned for the first time).
  ng_set_route_warnings(0);
  testing::internal::CaptureStderr();
  b.H = 96;
  (void)ng_bwd_routed(NG_MODE_DET, &b, nullptr);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  // Strict: refused, by query and by call.
  ng_set_strict_routes(1);
  EXPECT_EQ(q.run(), NG_EROUTE);
  EXPECT_EQ(q.info.how, NG_ROUTE_REFUSED);
  EXPECT_NE(std::string(q.info.message).find("strict routes are on"), std::string::npos) << q.info.message;
  EXPECT_EQ(ng_bwd_routed(NG_MODE_DET, &b, nullptr), NG_EROUTE);
  EXPECT_NE(last_error().find("ng_set_strict_routes(1)"), std::string::npos) << last_error();
  // An explicit variant still runs outside the windows in strict mode.
  q.variant = "bwd_det_chunked";
  EXPECT_EQ(q.run(), NG_OK) << last_error();
  ng_set_strict_routes(0);
  EXPECT_NE(ng_bwd_routed(NG_MODE_DET, &b, nullptr), NG_EROUTE) << last_error();  // falls back (then fails: no buffers)
}

TEST(CApiRoutes, VariantInfo) {
  ng_variant_desc d{};
  ASSERT_EQ(ng_variant_info("bwd_nondet_atomic", &d), NG_OK) << last_error();
  EXPECT_STREQ(d.name, "bwd_nondet_atomic");
  EXPECT_EQ(std::string(d.source_sha256), std::string(nk::variant("bwd_nondet_atomic").source_sha256));
  EXPECT_EQ(d.op, NG_OP_BWD);
  EXPECT_EQ(d.mode, NG_MODE_NONDET);
  EXPECT_EQ(d.control, 0);
  ASSERT_EQ(ng_variant_info("ctl_fp32_seq", &d), NG_OK);
  EXPECT_EQ(d.control, 1);
  ASSERT_EQ(ng_variant_info("fwd_rowwise", &d), NG_OK);
  EXPECT_EQ(d.op, NG_OP_FWD);
  EXPECT_EQ(ng_variant_info("nope", &d), NG_EINVAL);
  EXPECT_NE(last_error().find("nope"), std::string::npos);
  EXPECT_EQ(ng_variant_info(nullptr, &d), NG_EINVAL);
  ASSERT_EQ(ng_set_route_warnings(1), NG_OK);  // a success clears the message
  EXPECT_EQ(last_error(), "");
}

#ifdef NORMGATE_KERNELS_HAVE_CUDA
bool device() {
  int d = 0;
  return ng_device_available(&d) == NG_OK && d != 0;
}

template <class T>
T* dev_copy(const std::vector<T>& h, size_t n = 0) {
  T* p = nullptr;
  const size_t count = std::max<size_t>({h.size(), n, 1});
  if (cudaMalloc(&p, count * sizeof(T)) != cudaSuccess) return nullptr;
  if (!h.empty()) cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
  return p;
}
template <class T>
std::vector<T> host_copy(const T* p, size_t n) {
  std::vector<T> h(n);
  cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost);
  return h;
}

// Forward and backward of a [T, 64] bf16 plain case through the routed entry
// points; returns what ng_last_route said each ran, and checks the outputs
// against the CPU model of the backward variant reported.
void routed_case(int64_t T, int32_t mode, std::string& fwd_ran, std::string& bwd_ran, int& bwd_how) {
  const std::string id = "H=64,T=" + std::to_string(T) + ",w=bf16,form=plain,family=cancel,seed=4";
  const ns::HostInputs in = ns::generate_host(ns::parse_case(id));
  const size_t n = static_cast<size_t>(T * 64);
  uint16_t *x = dev_copy(in.x), *dy = dev_copy(in.dy), *w = dev_copy(in.w_bf16);
  uint16_t *y = dev_copy(std::vector<uint16_t>{}, n), *dx = dev_copy(std::vector<uint16_t>{}, n);
  float *rstd = dev_copy(std::vector<float>{}, static_cast<size_t>(T)), *dw = dev_copy(std::vector<float>{}, 64);
  // The forward's msq handed to the backward, as the CPU model's step does
  // (without it dw uses the FP32 rstd alone and differs from the model).
  double* msq = dev_copy(std::vector<double>{}, static_cast<size_t>(T));
  ng_fwd_args f{};
  f.x = x;
  f.x_stride = 64;
  f.w = w;
  f.w_dtype = NG_W_BF16;
  f.form = NG_FORM_PLAIN;
  f.y = y;
  f.y_stride = 64;
  f.rstd = rstd;
  f.T = T;
  f.H = 64;
  f.heads = 1;
  f.eps = static_cast<float>(in.id.eps);
  f.msq = msq;
  ASSERT_EQ(ng_fwd(&f, nullptr), NG_OK) << last_error();
  ng_route_info r{};
  ASSERT_EQ(ng_last_route(&r), NG_OK);
  fwd_ran = r.variant;
  Q q = bwd(mode, T);
  ASSERT_EQ(q.run(), NG_OK) << last_error();
  unsigned char* ws = dev_copy(std::vector<unsigned char>{}, q.info.workspace_bytes);
  ng_bwd_args b{};
  b.dy = dy;
  b.dy_stride = 64;
  b.x = x;
  b.x_stride = 64;
  b.w = w;
  b.w_dtype = NG_W_BF16;
  b.form = NG_FORM_PLAIN;
  b.rstd = rstd;
  b.dx = dx;
  b.dx_stride = 64;
  b.dw = dw;
  b.T = T;
  b.H = 64;
  b.heads = 1;
  b.workspace = ws;
  b.workspace_bytes = q.info.workspace_bytes;
  b.msq = msq;
  ASSERT_EQ(ng_bwd_routed(mode, &b, nullptr), NG_OK) << last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(ng_last_route(&r), NG_OK);
  bwd_ran = r.variant;
  bwd_how = r.how;
  EXPECT_EQ(bwd_ran, std::string(q.info.variant));
  using RV = normgate::RowView<uint16_t>;
  const normgate::Outputs m = nk::run_model(nk::variant(bwd_ran), in.x_view(), in.dy_view(), in.w_view(),
                                            static_cast<float>(in.id.eps), 0, RV{}, RV{});
  EXPECT_EQ(host_copy(y, n), m.y) << id;
  EXPECT_EQ(host_copy(dx, n), m.dx) << id;
  if (nk::variant(bwd_ran).mode == nk::Mode::det) {
    EXPECT_EQ(host_copy(dw, 64), m.dw) << id << " " << bwd_ran;
  }
  for (void* p : {static_cast<void*>(x), static_cast<void*>(dy), static_cast<void*>(w), static_cast<void*>(y),
                  static_cast<void*>(dx), static_cast<void*>(rstd), static_cast<void*>(dw), static_cast<void*>(ws),
                  static_cast<void*>(msq)})
    cudaFree(p);
}

TEST(CApiRoutesGpu, RoutedCallsRunTheRoutedVariant) {
  if (!device()) GTEST_SKIP() << "no CUDA device: GPU test runs on the H200 (tools/h200.sh)";
  Loaded l("gpu");
  std::string f, b;
  int how = -1;
  routed_case(100, NG_MODE_NONDET, f, b, how);
  EXPECT_EQ(f, "fwd_rowwise");
  EXPECT_EQ(b, "bwd_det_chunked");
  EXPECT_EQ(how, NG_ROUTE_ROUTED);
  routed_case(101, NG_MODE_NONDET, f, b, how);
  EXPECT_EQ(b, "bwd_nondet_atomic");
  EXPECT_EQ(how, NG_ROUTE_ROUTED);
  routed_case(101, NG_MODE_DET, f, b, how);
  EXPECT_EQ(b, "bwd_det_chunked");
  routed_case(701, NG_MODE_NONDET, f, b, how);  // past the windows: the fallback
  EXPECT_EQ(b, "bwd_nondet_atomic");
  EXPECT_EQ(how, NG_ROUTE_FALLBACK);
}
#else
TEST(CApiRoutesGpu, RoutedCallsRunTheRoutedVariant) {
  GTEST_SKIP() << "built without CUDA: ng_fwd/ng_bwd_routed return NG_EFAIL after the routing decision";
}
#endif

}  // namespace
