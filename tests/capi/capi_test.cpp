// The C ABI (capi/include/normgate/capi.h), exercised as a C caller would:
// error codes and messages, case info, the host generator (equal to
// seeds::generate_host), and the oracle handle validating the CPU models'
// outputs (pass), a perturbed dx (fail at the right index) and partial
// outputs (absent ones reported absent). GPU tests skip without a device.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "normgate/capi.h"
#include "normgate/core/bf16.h"
#include "normgate/core/host_memory.h"
#include "normgate/harness/devices.h"
#include "normgate/kernels/models.h"
#include "normgate/kernels/registry.h"
#include "normgate/kernels/rmsnorm.h"
#include "normgate/seeds/seed_set.h"
#include "normgate/seeds/case_id.h"
#include "normgate/seeds/generate.h"

#ifdef NORMGATE_KERNELS_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace nk = normgate::kernels;
namespace ns = normgate::seeds;
using nlohmann::json;

namespace {

std::string last_error() { return ng_last_error(); }

bool device() {
  int d = 0;
  EXPECT_EQ(ng_device_available(&d), NG_OK);
  return d != 0;
}

// Host buffers for one case, filled by ng_generate_host.
struct Inputs {
  ng_case_info_t info{};
  std::vector<uint16_t> x, dy, u, dh_new, w16;
  std::vector<float> w32;
  ng_host_inputs bufs() {
    ng_host_inputs b{};
    b.x = x.data();
    b.x_elems = x.size();
    b.dy = dy.data();
    b.dy_elems = dy.size();
    if (info.w_dtype == NG_W_BF16) {
      b.w = w16.data();
      b.w_elems = w16.size();
    } else {
      b.w = w32.data();
      b.w_elems = w32.size();
    }
    if (info.form == NG_FORM_RES) {
      b.u = u.data();
      b.u_elems = u.size();
      b.dh_new = dh_new.data();
      b.dh_new_elems = dh_new.size();
    }
    return b;
  }
};

Inputs generate(const char* id) {
  Inputs in;
  EXPECT_EQ(ng_case_info(id, &in.info), NG_OK) << last_error();
  const size_t n = static_cast<size_t>(in.info.rows * in.info.H);
  in.x.assign(n, 0xFFFF);
  in.dy.assign(n, 0xFFFF);
  if (in.info.w_dtype == NG_W_BF16)
    in.w16.assign(static_cast<size_t>(in.info.H), 0xFFFF);
  else
    in.w32.assign(static_cast<size_t>(in.info.H), -1.0f);
  if (in.info.form == NG_FORM_RES) {
    in.u.assign(n, 0xFFFF);
    in.dh_new.assign(n, 0xFFFF);
  }
  const ng_host_inputs b = in.bufs();
  EXPECT_EQ(ng_generate_host(id, &b), NG_OK) << last_error();
  return in;
}

json validate(ng_oracle* o, const ng_outputs& outs, int* rc = nullptr) {
  std::vector<char> buf(NG_REPORT_BYTES);
  size_t needed = 0;
  const int r = ng_oracle_validate(o, &outs, buf.data(), buf.size(), &needed);
  if (rc) *rc = r;
  if (r != NG_OK) return json();
  EXPECT_EQ(std::strlen(buf.data()) + 1, needed);
  return json::parse(buf.data());
}

ng_outputs all_of(const normgate::Outputs& o) {
  ng_outputs g{};
  g.y = o.y.data();
  g.y_elems = o.y.size();
  g.rstd = o.rstd.data();
  g.rstd_elems = o.rstd.size();
  g.dx = o.dx.data();
  g.dx_elems = o.dx.size();
  g.dw = o.dw.data();
  g.dw_elems = o.dw.size();
  if (!o.h_new.empty()) {
    g.h_new = o.h_new.data();
    g.h_new_elems = o.h_new.size();
  }
  return g;
}

// What the pipeline's CPU backend runs for a backward variant: the models.
normgate::Outputs model_outputs(const ns::HostInputs& in, const char* bwd) {
  const bool res = in.id.form == normgate::Form::res;
  using RV = normgate::RowView<uint16_t>;
  return nk::run_model(nk::variant(bwd), in.x_view(), in.dy_view(), in.w_view(), static_cast<float>(in.id.eps), 0,
                       res ? RV::plain(in.u.data(), in.rows, in.cols) : RV{},
                       res ? RV::plain(in.dh_new.data(), in.rows, in.cols) : RV{});
}

}  // namespace

TEST(CApi, VersionNamesTheLibrary) {
  const std::string v = ng_version();
  EXPECT_NE(v.find("normgate "), std::string::npos) << v;
  EXPECT_EQ(last_error(), "");
}

// The struct layouts are part of the ABI: python/normgate/_lib.py mirrors
// them and python/tests/test_abi.py pins the same offsets.
TEST(CApi, StructLayoutsArePinned) {
#define NG_AT(S, f, off) EXPECT_EQ(offsetof(S, f), static_cast<size_t>(off)) << #S "." #f
  EXPECT_EQ(sizeof(ng_fwd_args), 152u);
  NG_AT(ng_fwd_args, variant, 0);
  NG_AT(ng_fwd_args, x, 8);
  NG_AT(ng_fwd_args, x_stride_h, 24);
  NG_AT(ng_fwd_args, w_dtype, 40);
  NG_AT(ng_fwd_args, form, 44);
  NG_AT(ng_fwd_args, y, 48);
  NG_AT(ng_fwd_args, rstd, 72);
  NG_AT(ng_fwd_args, T, 80);
  NG_AT(ng_fwd_args, heads, 96);
  NG_AT(ng_fwd_args, eps, 104);
  NG_AT(ng_fwd_args, u, 112);
  NG_AT(ng_fwd_args, h_new_stride, 136);
  NG_AT(ng_fwd_args, msq, 144);
  EXPECT_EQ(sizeof(ng_bwd_args), 168u);
  NG_AT(ng_bwd_args, dy, 0);
  NG_AT(ng_bwd_args, x, 24);
  NG_AT(ng_bwd_args, w_dtype, 56);
  NG_AT(ng_bwd_args, form, 60);
  NG_AT(ng_bwd_args, rstd, 64);
  NG_AT(ng_bwd_args, dw, 96);
  NG_AT(ng_bwd_args, T, 104);
  NG_AT(ng_bwd_args, workspace, 128);
  NG_AT(ng_bwd_args, workspace_bytes, 136);
  NG_AT(ng_bwd_args, dh_new_stride, 152);
  NG_AT(ng_bwd_args, msq, 160);
  EXPECT_EQ(sizeof(ng_case_info_t), 336u);
  NG_AT(ng_case_info_t, form, 32);
  NG_AT(ng_case_info_t, eps, 40);
  NG_AT(ng_case_info_t, seed, 56);
  NG_AT(ng_case_info_t, family, 64);
  NG_AT(ng_case_info_t, canonical, 80);
  EXPECT_EQ(sizeof(ng_host_inputs), 80u);
  NG_AT(ng_host_inputs, dh_new_elems, 72);
  EXPECT_EQ(sizeof(ng_outputs), 80u);
  NG_AT(ng_outputs, h_new_elems, 72);
  EXPECT_EQ(sizeof(ng_graph_span), 24u);
  NG_AT(ng_graph_span, correlation_id, 4);
  NG_AT(ng_graph_span, start_ns, 8);
  NG_AT(ng_graph_span, end_ns, 16);
  EXPECT_EQ(sizeof(ng_export_options), 80u);  // python/normgate/gate.py _ExportOptions (test_gate.py pins it)
  NG_AT(ng_export_options, report, 8);
  NG_AT(ng_export_options, out, 16);
  NG_AT(ng_export_options, keep, 24);
  NG_AT(ng_export_options, full, 32);
  NG_AT(ng_export_options, tile, 40);
  NG_AT(ng_export_options, oracle, 56);
  NG_AT(ng_export_options, threads, 64);
  NG_AT(ng_export_options, cancel, 72);
  EXPECT_EQ(sizeof(ng_external_desc), 96u);  // python/normgate/gate.py _ExternalDesc (test_gate.py pins it)
  NG_AT(ng_external_desc, device, 20);
  NG_AT(ng_external_desc, h_min, 24);
  NG_AT(ng_external_desc, run, 80);
#undef NG_AT
}

// ng_external_desc.device (the former `reserved`, 0 for the host): 1 + N
// names CUDA device N for the case files; a negative value is refused by name.
TEST(CApi, AnExternalsDeviceIsCheckedWhenRegistered) {
  ng_external_desc d{};
  d.struct_size = sizeof d;
  d.op = NG_OP_FWD;
  d.mode = NG_MODE_DET;
  d.h_min = 1;
  d.h_max = 64;
  d.name = "capi_ext_dev";
  d.source_sha256 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
  d.origin = "capi test";
  d.ran_on = "test callback on cuda:0";
  d.run = [](void*, const ng_external_io*) { return 0; };
  d.device = -1;
  EXPECT_EQ(ng_register_external(&d), NG_EINVAL);
  EXPECT_NE(last_error().find("device = -1 (0 for the host, 1 + N for CUDA device N)"), std::string::npos)
      << last_error();
  // One past the devices this process sees (none on a machine without a GPU).
  const int n = normgate::kernels::device_count();
  d.device = 1 + n;
  EXPECT_EQ(ng_register_external(&d), NG_EINVAL);
  EXPECT_NE(last_error().find("device = " + std::to_string(1 + n) + " names CUDA device " + std::to_string(n) +
                              ", but this process sees " + std::to_string(n)),
            std::string::npos)
      << last_error();
  d.device = 0;
  EXPECT_EQ(ng_register_external(&d), NG_OK) << last_error();
}

TEST(CApi, ErrorsAreCodesWithMessagesNamingTheBadValue) {
  ng_case_info_t info{};
  EXPECT_EQ(ng_case_info(nullptr, &info), NG_EINVAL);
  EXPECT_NE(last_error().find("case_id is NULL"), std::string::npos) << last_error();
  EXPECT_EQ(ng_case_info("H=64,T=10,w=bf17,form=plain,family=normal,seed=0", &info), NG_EINVAL);
  EXPECT_NE(last_error().find("bf17"), std::string::npos) << last_error();
  EXPECT_NE(last_error().find("ng_case_info"), std::string::npos) << last_error();
  EXPECT_EQ(ng_case_info("H=64,T=10,w=bf16,form=plain,family=normal,seed=0", nullptr), NG_EINVAL);
  // A success clears the message.
  EXPECT_EQ(ng_case_info("H=64,T=10,w=bf16,form=plain,family=normal,seed=0", &info), NG_OK);
  EXPECT_EQ(last_error(), "");

  uint64_t ws = 0;
  EXPECT_EQ(ng_bwd_workspace_bytes("bwd_bogus", 100, 64, &ws), NG_EINVAL);
  EXPECT_NE(last_error().find("bwd_bogus"), std::string::npos) << last_error();
  EXPECT_EQ(ng_bwd_workspace_bytes("ctl_fp32_seq", 100, 64, &ws), NG_EINVAL);
  EXPECT_NE(last_error().find("negative control"), std::string::npos) << last_error();
  EXPECT_EQ(ng_bwd_workspace_bytes("fwd_rowwise", 100, 64, &ws), NG_EINVAL);
  EXPECT_NE(last_error().find("forward variant"), std::string::npos) << last_error();
  // The backward variants it could have named: every routable one, no control.
  for (const char* b : {"bwd_det_chunked", "bwd_nondet_atomic", "bwd_det_wide", "bwd_det_heads", "bwd_det_wreg"})
    EXPECT_NE(last_error().find(b), std::string::npos) << b << ": " << last_error();
  EXPECT_EQ(last_error().find("ctl_"), std::string::npos) << last_error();
  EXPECT_EQ(ng_bwd_workspace_bytes("bwd_det_chunked", 100, 0, &ws), NG_EINVAL);
  EXPECT_NE(last_error().find("H = 0"), std::string::npos) << last_error();
  EXPECT_EQ(ng_bwd_workspace_bytes(nullptr, 100, 64, &ws), NG_EINVAL);
  for (const char* v : {"bwd_det_chunked", "bwd_nondet_atomic"}) {
    ASSERT_EQ(ng_bwd_workspace_bytes(v, 4097 * 24, 256, &ws), NG_OK) << last_error();
    EXPECT_EQ(ws, nk::bwd_workspace_bytes(nk::variant(v), 4097 * 24, 256)) << v;
  }

  ng_bwd_args b{};
  EXPECT_EQ(ng_bwd("nope", &b, nullptr), NG_EINVAL);
  EXPECT_NE(last_error().find("nope"), std::string::npos) << last_error();
  EXPECT_EQ(ng_bwd("ctl_bf16_partials", &b, nullptr), NG_EINVAL);
  EXPECT_NE(last_error().find("negative control"), std::string::npos) << last_error();
  EXPECT_EQ(ng_bwd("bwd_det_chunked", nullptr, nullptr), NG_EINVAL);
  EXPECT_NE(last_error().find("args is NULL"), std::string::npos) << last_error();

  EXPECT_EQ(ng_fwd(nullptr, nullptr), NG_EINVAL);
  ng_fwd_args f{};
  f.T = 4;
  f.H = 64;
  f.heads = 1;
  f.x_stride = f.y_stride = 64;
  f.w_dtype = 7;
  EXPECT_EQ(ng_fwd(&f, nullptr), NG_EINVAL);
  EXPECT_NE(last_error().find("w_dtype = 7"), std::string::npos) << last_error();
  f.w_dtype = NG_W_BF16;
  f.form = 9;
  EXPECT_EQ(ng_fwd(&f, nullptr), NG_EINVAL);
  EXPECT_NE(last_error().find("form = 9"), std::string::npos) << last_error();
  f.form = NG_FORM_PLAIN;
  f.variant = "bwd_det_chunked";
  EXPECT_EQ(ng_fwd(&f, nullptr), NG_EINVAL);
  EXPECT_NE(last_error().find("variant bwd_det_chunked is a bwd variant, the call is fwd"), std::string::npos)
      << last_error();
  std::vector<uint16_t> wbuf(64);
  f.w = wbuf.data();
  f.variant = nullptr;  // the routed forward (H = 64: the fallback); x is null with T = 4
  EXPECT_EQ(ng_fwd(&f, nullptr), NG_EINVAL);
  EXPECT_NE(last_error().find("x is null"), std::string::npos) << last_error();

  int d = 0;
  EXPECT_EQ(ng_device_available(nullptr), NG_EINVAL);
  EXPECT_EQ(ng_device_available(&d), NG_OK);
  ng_oracle* o = nullptr;
  EXPECT_EQ(ng_oracle_open("H=64,T=10,w=bf16,form=plain,family=nope,seed=0", 0, &o), NG_EINVAL);
  EXPECT_NE(last_error().find("nope"), std::string::npos) << last_error();
  EXPECT_EQ(o, nullptr);
  // A thread count OpenMP could not start is refused before any parallel
  // region (100000 threads killed the process through Python; found in
  // review, commit 430db66).
  EXPECT_EQ(ng_oracle_open("H=64,T=10,w=bf16,form=plain,family=normal,seed=0", NG_MAX_THREADS + 1, &o), NG_EINVAL);
  EXPECT_NE(last_error().find("threads = " + std::to_string(NG_MAX_THREADS + 1)), std::string::npos) << last_error();
  EXPECT_EQ(o, nullptr);
  ng_oracle_close(nullptr);  // a no-op
}

// CUPTI graph spans: argument errors are NG_EINVAL; a stop that was never
// started fails with code 1 and says why, whichever the machine (no CUDA, no
// CUPTI, or simply "not recording").
TEST(CApi, GraphSpansArgumentsAndStopWithoutStart) {
  uint64_t n = 7;
  EXPECT_EQ(ng_graph_spans_stop(nullptr, 0, nullptr), NG_EINVAL);
  EXPECT_NE(last_error().find("n is NULL"), std::string::npos) << last_error();
  EXPECT_EQ(ng_graph_spans_stop(nullptr, 4, &n), NG_EINVAL);
  EXPECT_NE(last_error().find("out is NULL"), std::string::npos) << last_error();
  EXPECT_EQ(ng_graph_spans_stop(nullptr, 0, &n), NG_EFAIL);
  EXPECT_EQ(n, 0u);
  const std::string e = last_error();
  EXPECT_TRUE(e.find("not recording") != std::string::npos || e.find("CUPTI") != std::string::npos ||
              e.find("without CUDA") != std::string::npos)
      << e;
}

// Without a GPU a kernel call gets past validation and then fails with code 1:
// "built without CUDA" in a CPU-only build, a CUDA error otherwise.
TEST(CApi, KernelCallWithoutGpuFailsWithCodeOne) {
  if (device()) GTEST_SKIP() << "a CUDA device is present: the kernel would run (see the GPU tests)";
  std::vector<uint16_t> x(4 * 64), y(4 * 64), w(64);
  std::vector<float> rstd(4);
  ng_fwd_args f{};
  f.x = x.data();
  f.x_stride = 64;
  f.w = w.data();
  f.w_dtype = NG_W_BF16;
  f.form = NG_FORM_PLAIN;
  f.y = y.data();
  f.y_stride = 64;
  f.rstd = rstd.data();
  f.T = 4;
  f.H = 64;
  f.heads = 1;
  f.eps = 1e-6f;
  EXPECT_EQ(ng_fwd(&f, nullptr), NG_EFAIL);
  EXPECT_NE(last_error().find("ng_fwd: "), std::string::npos) << last_error();
#ifndef NORMGATE_KERNELS_HAVE_CUDA
  EXPECT_NE(last_error().find("built without CUDA"), std::string::npos) << last_error();
#endif
}

// eps must be a normal float32 at the C ABI too (seeds/case_id.h kMinEps):
// ng_fwd refuses a subnormal (1e-45f) or zero (1e-50 as float) eps with
// NG_EINVAL naming it, before anything is enqueued; FLT_MIN and the default
// pass validation (then, without a GPU, fail with code 1 as any kernel call).
// Case ids with such an eps are NG_EINVAL for the generator and the oracle.
TEST(CApi, EpsMustBeANormalFloat32) {
  std::vector<uint16_t> x(4 * 64), y(4 * 64), w(64);
  std::vector<float> rstd(4);
  ng_fwd_args f{};
  f.variant = "fwd_rowwise";
  f.x = x.data();
  f.x_stride = 64;
  f.w = w.data();
  f.w_dtype = NG_W_BF16;
  f.form = NG_FORM_PLAIN;
  f.y = y.data();
  f.y_stride = 64;
  f.rstd = rstd.data();
  f.T = 4;
  f.H = 64;
  f.heads = 1;
  f.eps = 1e-45f;
  EXPECT_EQ(ng_fwd(&f, nullptr), NG_EINVAL);
  EXPECT_NE(last_error().find("ng_fwd: eps=1.401298464324817e-45 is below the smallest normal float32"),
            std::string::npos)
      << last_error();
  f.eps = static_cast<float>(1e-50);  // 0 in float32
  EXPECT_EQ(ng_fwd(&f, nullptr), NG_EINVAL);
  EXPECT_NE(last_error().find("ng_fwd: eps=0 must be finite and > 0"), std::string::npos) << last_error();
  if (!device()) {  // with a GPU these host buffers would reach a kernel
    for (float eps : {std::numeric_limits<float>::min(), 1e-6f}) {
      f.eps = eps;
      EXPECT_EQ(ng_fwd(&f, nullptr), NG_EFAIL) << eps;
      EXPECT_EQ(last_error().find("eps"), std::string::npos) << last_error();
    }
  }
  const std::string base = "H=64,T=3,w=bf16,form=plain,family=epsnear,seed=0";
  ng_case_info_t info{};
  for (const char* eps : {"1e-50", "1e-45"}) {
    EXPECT_EQ(ng_case_info((base + ",eps=" + eps).c_str(), &info), NG_EINVAL) << eps;
    EXPECT_NE(last_error().find(std::string("eps=") + eps + " is below the smallest normal float32"), std::string::npos)
        << last_error();
    ng_oracle* o = nullptr;
    EXPECT_EQ(ng_oracle_open((base + ",eps=" + eps).c_str(), 1, &o), NG_EINVAL) << eps;
    EXPECT_EQ(o, nullptr);
  }
  ASSERT_EQ(ng_case_info((base + ",eps=1.1754943508222875e-38").c_str(), &info), NG_OK) << last_error();
  EXPECT_EQ(info.eps, static_cast<double>(std::numeric_limits<float>::min()));
  ASSERT_EQ(ng_case_info(base.c_str(), &info), NG_OK) << last_error();
  EXPECT_EQ(info.eps, 1e-6);
}

TEST(CApi, CaseInfo) {
  ng_case_info_t info{};
  const char* id = "seed=5,family=cancel,form=heads24,w=fp32,T=33,H=256,kappa=1e6";
  ASSERT_EQ(ng_case_info(id, &info), NG_OK) << last_error();
  const ns::CaseId c = ns::parse_case(id);
  EXPECT_EQ(info.T, 33);
  EXPECT_EQ(info.H, 256);
  EXPECT_EQ(info.heads, 24);
  EXPECT_EQ(info.rows, 33 * 24);
  EXPECT_EQ(info.form, NG_FORM_HEADS24);
  EXPECT_EQ(info.w_dtype, NG_W_FP32);
  EXPECT_EQ(info.eps, 1e-6);
  EXPECT_EQ(info.kappa, 1e6);
  EXPECT_EQ(info.seed, 5u);
  EXPECT_STREQ(info.family, "cancel");
  EXPECT_EQ(std::string(info.canonical), ns::to_string(c));
  // The enum values are the C++ ones.
  EXPECT_EQ(NG_FORM_RES, static_cast<int>(normgate::Form::res));
  EXPECT_EQ(NG_FORM_HEADS4, static_cast<int>(normgate::Form::heads4));
  EXPECT_EQ(NG_W_FP32, static_cast<int>(normgate::WDtype::fp32));
}

// ng_seed_set_size: the (family point, seed) pairs of a seed set, or
// NG_EINVAL quoting a bad one.
TEST(CApi, SeedSetSize) {
  uint64_t n = 0;
  ASSERT_EQ(ng_seed_set_size("3x16", &n), NG_OK) << last_error();
  EXPECT_EQ(n, 48u);
  ASSERT_EQ(ng_seed_set_size("cancel:3..9", &n), NG_OK) << last_error();
  EXPECT_EQ(n, 7u);
  EXPECT_EQ(n, ns::parse_seed_set("cancel:3..9").size());
  n = 99;
  EXPECT_EQ(ng_seed_set_size("1x1", &n), NG_EINVAL);
  EXPECT_NE(last_error().find("seed set '1x1'"), std::string::npos) << last_error();
  EXPECT_EQ(n, 99u);  // untouched on an error
  EXPECT_EQ(ng_seed_set_size(nullptr, &n), NG_EINVAL);
  EXPECT_EQ(ng_seed_set_size("3x1", nullptr), NG_EINVAL);
}

// ng_require_host_memory: `normgate check`'s host-memory refusal for
// callers that allocate a case themselves (normgate.check, generate).
TEST(CApi, RequireHostMemoryRefusesACaseThatCannotFit) {
  EXPECT_EQ(ng_require_host_memory("H=64,T=5,w=bf16,form=plain,family=normal,seed=0", 1, 0, 1), NG_OK) << last_error();
  EXPECT_EQ(ng_require_host_memory("H=16384,T=2000000000,w=bf16,form=plain,family=cancel,seed=0", 0, 0, 1), NG_EINVAL);
  EXPECT_NE(last_error().find("of host memory"), std::string::npos) << last_error();
  EXPECT_NE(last_error().find("(its inputs)"), std::string::npos) << last_error();
  // One implementation's outputs counted too: twice a forward-only check's
  // inputs and outputs is more than the inputs alone (the message names the count).
  EXPECT_EQ(ng_require_host_memory("H=16384,T=2000000000,w=bf16,form=plain,family=cancel,seed=0", 1, 1, 1), NG_EINVAL);
  EXPECT_NE(last_error().find("the outputs of 1 implementation"), std::string::npos) << last_error();
  EXPECT_EQ(ng_require_host_memory("H=64,T=5,w=bf16,form=plain,family=normal,seed=0", -1, 0, 1), NG_EINVAL);
  EXPECT_NE(last_error().find("n_impls = -1 is outside 0..1024"), std::string::npos) << last_error();
  EXPECT_EQ(ng_require_host_memory("H=64,T=5,w=bf16,form=plain,family=normal,seed=0", 1, 2, 1), NG_EINVAL);
  EXPECT_EQ(ng_require_host_memory(nullptr, 1, 0, 1), NG_EINVAL);
  EXPECT_EQ(ng_require_host_memory("H=64,T=5,w=bf16,form=plain,family=normal,seed=0", 1, 0, 0), NG_EINVAL);
  EXPECT_NE(last_error().find("copies = 0 is outside 1..64"), std::string::npos) << last_error();
  // Copies held at once count: a case of half this host's bound (8 bytes an
  // element: plain, one implementation's backward) fits once, not 3 times.
  const uint64_t usable = normgate::core::host_memory().usable();
  if (usable > (uint64_t{1} << 30)) {
    const uint64_t t = usable / 2 / 8 / 4096;
    const std::string half = "H=4096,T=" + std::to_string(t) + ",w=bf16,form=plain,family=cancel,seed=0";
    EXPECT_EQ(ng_require_host_memory(half.c_str(), 1, 0, 1), NG_OK) << last_error();
    EXPECT_EQ(ng_require_host_memory(half.c_str(), 1, 0, 3), NG_EINVAL);
    EXPECT_NE(last_error().find("3 copies of the case's tensors held by the caller"), std::string::npos)
        << last_error();
  }
}

// ng_gate refuses a report or journal path that is a folder before any case
// runs (it used to fail at the rename, after the whole campaign).
TEST(CApi, GateRefusesAFolderAsAnOutput) {
  const std::string d = ::testing::TempDir() + "capi_gate_folder_" + std::to_string(::getpid());
  std::filesystem::create_directories(d + "/report.json");
  const std::string table = std::string(NORMGATE_SOURCE_DIR) + "/routes/sm90a-ci.toml";
  ng_gate_options o;
  ng_gate_options_init(&o);
  o.table = table.c_str();
  o.seeds = "3x1";
  o.backend = "cpu";
  const std::string rj = d + "/report.json";
  o.report_json = rj.c_str();
  char* out = nullptr;
  EXPECT_EQ(ng_gate(&o, &out), NG_EINVAL);
  EXPECT_NE(last_error().find("cannot write report_json '" + rj + "': it is a folder"), std::string::npos) << last_error();
  EXPECT_EQ(out, nullptr);
  o.report_json = nullptr;
  o.journal = rj.c_str();
  EXPECT_EQ(ng_gate(&o, &out), NG_EINVAL);
  EXPECT_NE(last_error().find("cannot write journal '" + rj + "': it is a folder"), std::string::npos) << last_error();
  // Not a regular file (a FIFO here; a device the same), two outputs on one
  // file, an output over the table, an empty path: refused, nothing written.
  const std::string fifo = d + "/fifo.md", md = d + "/r.md", j = d + "/j.jsonl", ghost = d + "/ghost.json";
  const std::string lock = std::string(NORMGATE_SOURCE_DIR) + "/routes/sm90a-ci.approvals.json.lock";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ng_gate_options_init(&o);
  o.table = table.c_str();
  o.seeds = "3x1";
  o.backend = "cpu";
  struct Bad {
    const char *md, *json, *journal;
    std::string needle;
  };
  const Bad cases[] = {
      {fifo.c_str(), nullptr, nullptr, "cannot write report_md '" + fifo + "': it exists and is not a regular file"},
      {md.c_str(), nullptr, md.c_str(), "report_md '" + md + "' and journal '" + md + "' name one file"},
      {md.c_str(), md.c_str(), nullptr, "name one file"},
      {nullptr, table.c_str(), nullptr, "is the table: writing it would destroy what the gate reads"},
      {nullptr, lock.c_str(), nullptr, "is the table's approvals lock file: writing it would destroy"},
      {"", nullptr, nullptr, "report_md is empty"},
      {nullptr, nullptr, "", "journal is empty"},
  };
  for (const auto& b : cases) {
    o.report_md = b.md;
    o.report_json = b.json;
    o.journal = b.journal;
    EXPECT_EQ(ng_gate(&o, &out), NG_EINVAL) << b.needle;
    EXPECT_NE(last_error().find(b.needle), std::string::npos) << last_error();
  }
  EXPECT_FALSE(std::filesystem::exists(md));
  // A link is written through, never replaced (here to a file not made yet).
  std::filesystem::create_symlink(ghost, d + "/link.json");
  const std::string link = d + "/link.json";
  o.report_md = nullptr;
  o.journal = nullptr;
  o.report_json = link.c_str();
  o.windows = "op=fwd,w=bf16";
  o.t_per_window = 2;
  o.dense_points = 0;
  o.fresh_factor = 0;
  ASSERT_EQ(ng_gate(&o, &out), NG_OK) << last_error();
  ng_free_string(out);
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_TRUE(std::filesystem::is_regular_file(ghost));
  std::filesystem::remove_all(d);
}

// ng_gate_options grew `externals`: a caller built before it (struct_size
// 120) still runs, as if it were NULL; below that is refused. Given, it
// names the only externals the gate runs: one it lists that no gated window
// routes is NG_EINVAL before any work.
TEST(CApi, GateOptionsExternalsAndTheOlderStructSize) {
  const std::string table = std::string(NORMGATE_SOURCE_DIR) + "/routes/sm90a-ci.toml";
  ng_gate_options o;
  ng_gate_options_init(&o);
  EXPECT_EQ(o.struct_size, 128u);
  EXPECT_EQ(o.externals, nullptr);
  o.table = table.c_str();
  o.seeds = "3x1";
  o.backend = "cpu";
  o.windows = "op=fwd,w=bf16";
  o.t_per_window = 2;
  o.dense_points = 0;
  o.fresh_factor = 0;
  char* out = nullptr;
  o.struct_size = static_cast<uint32_t>(offsetof(ng_gate_options, externals));
  o.externals = "not_read";  // past the caller's struct: never read
  ASSERT_EQ(ng_gate(&o, &out), NG_OK) << last_error();
  ng_free_string(out);
  o.struct_size = 116;
  EXPECT_EQ(ng_gate(&o, &out), NG_EINVAL);
  EXPECT_NE(last_error().find("struct_size = 116 is below"), std::string::npos) << last_error();
  o.struct_size = sizeof(ng_gate_options);
  EXPECT_EQ(ng_gate(&o, &out), NG_EINVAL);
  EXPECT_NE(last_error().find("the table routes no window to external implementation 'not_read'"), std::string::npos)
      << last_error();
  EXPECT_EQ(out, nullptr);
  for (const char* bad_list : {"a,,b", ",a", "a,"}) {
    o.externals = bad_list;
    EXPECT_EQ(ng_gate(&o, &out), NG_EINVAL) << bad_list;
    EXPECT_NE(last_error().find("has an empty name"), std::string::npos) << last_error();
  }
  o.externals = "a, b";
  EXPECT_EQ(ng_gate(&o, &out), NG_EINVAL);
  EXPECT_NE(last_error().find("name ' b' holds a blank"), std::string::npos) << last_error();
  o.externals = "fwd_rowwise";  // a built-in variant is no external
  EXPECT_EQ(ng_gate(&o, &out), NG_EINVAL);
  EXPECT_NE(last_error().find("'fwd_rowwise' is a built-in variant, not an external implementation"),
            std::string::npos)
      << last_error();
  o.externals = "";  // none: a table of built-in variants runs as without the field
  ASSERT_EQ(ng_gate(&o, &out), NG_OK) << last_error();
  ng_free_string(out);
}

// ng_table_file: the library's rule for a table's shared files (routing.h
// table_sibling_path), for callers that must not restate it (Python's gate).
TEST(CApi, TableFileNamesTheSharedFiles) {
  auto file = [](const char* table, const char* suffix) {
    char* out = nullptr;
    EXPECT_EQ(ng_table_file(table, suffix, &out), NG_OK) << last_error();
    const std::string s = out ? out : "(null)";
    ng_free_string(out);
    return s;
  };
  EXPECT_EQ(file("r/sm90a@nvidia-h100-80gb-hbm3.toml", ".policy.toml"), "r/sm90a.policy.toml");
  EXPECT_EQ(file("r/sm90a@nvidia-h100-80gb-hbm3.toml", ".approvals.json"), "r/sm90a.approvals.json");
  EXPECT_EQ(file("r/sm90a.toml", ".rejections.json"), "r/sm90a.rejections.json");
  EXPECT_EQ(file("r/sm90a@H100.toml", ".policy.toml"), "r/sm90a@H100.policy.toml");  // not a per-GPU name
  EXPECT_EQ(file("r/t.tbl", ".policy.toml"), "r/t.tbl.policy.toml");
  char* out = reinterpret_cast<char*>(1);
  EXPECT_EQ(ng_table_file(nullptr, ".policy.toml", &out), NG_EINVAL);
  EXPECT_EQ(out, nullptr);
  out = reinterpret_cast<char*>(1);
  EXPECT_EQ(ng_table_file("t.toml", nullptr, &out), NG_EINVAL);
  EXPECT_EQ(out, nullptr);
  EXPECT_EQ(ng_table_file("t.toml", ".policy.toml", nullptr), NG_EINVAL);
  out = reinterpret_cast<char*>(1);
  EXPECT_EQ(ng_table_file("", ".policy.toml", &out), NG_EINVAL);
  EXPECT_EQ(out, nullptr);  // nothing to free after a refusal
  EXPECT_NE(last_error().find("table is empty"), std::string::npos) << last_error();
  EXPECT_EQ(ng_table_file("t.toml", "", &out), NG_EINVAL);
  EXPECT_NE(last_error().find("suffix is empty"), std::string::npos) << last_error();
}

TEST(CApi, GenerateHostEqualsSeedsGeneratorAndIsDeterministic) {
  for (const char* id : {"H=100,T=37,w=bf16,form=plain,family=cancel,seed=3",
                         "H=256,T=9,w=fp32,form=heads4,family=llm,seed=1",
                         "H=48,T=21,w=bf16,form=res,family=normal,seed=8"}) {
    const Inputs a = generate(id), b = generate(id);
    const ns::HostInputs ref = ns::generate_host(ns::parse_case(id));
    EXPECT_EQ(a.x, ref.x) << id;
    EXPECT_EQ(a.dy, ref.dy) << id;
    EXPECT_EQ(a.w16, ref.w_bf16) << id;
    EXPECT_EQ(a.w32, ref.w_f32) << id;
    EXPECT_EQ(a.u, ref.u) << id;
    EXPECT_EQ(a.dh_new, ref.dh_new) << id;
    EXPECT_EQ(a.x, b.x) << id;
    EXPECT_EQ(a.dy, b.dy) << id;
  }
  const Inputs s0 = generate("H=100,T=37,w=bf16,form=plain,family=normal,seed=0");
  const Inputs s1 = generate("H=100,T=37,w=bf16,form=plain,family=normal,seed=1");
  EXPECT_NE(s0.x, s1.x);
  EXPECT_NE(s0.dy, s1.dy);
}

TEST(CApi, GenerateHostChecksBuffers) {
  Inputs in = generate("H=64,T=5,w=bf16,form=plain,family=normal,seed=0");
  ng_host_inputs b = in.bufs();
  b.x_elems -= 1;
  EXPECT_EQ(ng_generate_host(in.info.canonical, &b), NG_EINVAL);
  EXPECT_NE(last_error().find("x has 319 elements, the case needs 320"), std::string::npos) << last_error();
  b = in.bufs();
  b.w = nullptr;
  EXPECT_EQ(ng_generate_host(in.info.canonical, &b), NG_EINVAL);
  EXPECT_NE(last_error().find("w is NULL"), std::string::npos) << last_error();
  b = in.bufs();
  std::vector<uint16_t> extra(320);
  b.u = extra.data();
  b.u_elems = extra.size();
  EXPECT_EQ(ng_generate_host(in.info.canonical, &b), NG_EINVAL);
  EXPECT_NE(last_error().find("form plain has no u"), std::string::npos) << last_error();
  b = in.bufs();
  EXPECT_EQ(ng_generate_host(in.info.canonical, nullptr), NG_EINVAL);
  // A res case needs dh_new.
  Inputs r = generate("H=64,T=5,w=fp32,form=res,family=normal,seed=0");
  b = r.bufs();
  b.dh_new = nullptr;
  b.dh_new_elems = 0;
  EXPECT_EQ(ng_generate_host(r.info.canonical, &b), NG_EINVAL);
  EXPECT_NE(last_error().find("dh_new is NULL"), std::string::npos) << last_error();
}

// T = 0: the row tensors have no elements, so their buffers may be NULL in
// ng_host_inputs (an empty tensor's address); outputs of 0 elements are given
// with any non-NULL pointer and pass (dw must be all zeros: no rows).
TEST(CApi, EmptyCaseTakesNullRowBuffers) {
  for (const char* id : {"H=64,T=0,w=bf16,form=plain,family=normal,seed=0",
                         "H=32,T=0,w=fp32,form=res,family=cancel,seed=2"}) {
    ng_case_info_t info{};
    ASSERT_EQ(ng_case_info(id, &info), NG_OK) << last_error();
    const bool res = info.form == NG_FORM_RES;
    std::vector<float> w(static_cast<size_t>(info.H), -1.0f);  // fp32 or bf16 bits: room for both
    ng_host_inputs b{};
    b.w = w.data();
    b.w_elems = static_cast<uint64_t>(info.H);
    ASSERT_EQ(ng_generate_host(id, &b), NG_OK) << id << ": " << last_error();
    EXPECT_NE(w[0], -1.0f) << "w was not written";
    ng_oracle* o = nullptr;
    ASSERT_EQ(ng_oracle_open_inputs(id, &b, 1, &o), NG_OK) << id << ": " << last_error();
    const uint64_t one = 0;
    std::vector<float> dw(static_cast<size_t>(info.H), 0.0f);
    ng_outputs g{};
    g.y = g.rstd = g.dx = &one;
    g.dw = dw.data();
    g.dw_elems = dw.size();
    if (res) g.h_new = &one;
    json r = validate(o, g);
    ASSERT_TRUE(r.is_object()) << id << ": " << last_error();
    EXPECT_EQ(r["pass"], true) << r.dump(1);
    EXPECT_TRUE(r["absent"].empty()) << r.dump(1);
    EXPECT_EQ(r["outputs"]["dx"]["present"], true);
    dw[3] = 1.0f;  // no rows: any nonzero dw is wrong
    r = validate(o, g);
    EXPECT_EQ(r["outputs"]["dw"]["pass"], false) << r.dump(1);
    ng_oracle_close(o);
  }
}

// The oracle handle: the models' outputs pass; one dx element far off fails
// at that index; outputs not given are reported absent.
TEST(CApi, OracleValidatesModelOutputs) {
  const char* id = "H=96,T=300,w=bf16,form=plain,family=cancel,seed=1";
  const ns::HostInputs in = ns::generate_host(ns::parse_case(id));
  ng_oracle* o = nullptr;
  ASSERT_EQ(ng_oracle_open(id, 2, &o), NG_OK) << last_error();
  ASSERT_NE(o, nullptr);
  for (const char* bwd : {"bwd_det_chunked", "bwd_nondet_atomic"}) {
    normgate::Outputs m = model_outputs(in, bwd);
    json r = validate(o, all_of(m));
    ASSERT_TRUE(r.is_object()) << last_error();
    EXPECT_EQ(r["case"], ns::to_string(in.id));
    EXPECT_EQ(r["pass"], true) << r.dump(1);
    EXPECT_EQ(r["verdict"], "pass");
    EXPECT_TRUE(r["absent"].empty());
    for (const char* t : {"y", "rstd", "dx", "dw"}) {
      EXPECT_EQ(r["outputs"][t]["present"], true) << t;
      EXPECT_EQ(r["outputs"][t]["pass"], true) << t;
      EXPECT_LE(r["outputs"][t]["err_tol"].get<double>(), 1.0) << t;
    }
    EXPECT_FALSE(r["outputs"].contains("h_new"));  // not an output of form plain
    EXPECT_TRUE(r["dw_vs_fp32"]["worst"].is_number());

    // One dx element far off: the check fails there.
    const size_t k = 5 * 96 + 17;
    m.dx[k] = normgate::bf16_from_float(normgate::bf16_to_float(m.dx[k]) + 64.0f);
    r = validate(o, all_of(m));
    EXPECT_EQ(r["pass"], false);
    EXPECT_EQ(r["verdict"], "fail");
    EXPECT_EQ(r["outputs"]["dx"]["pass"], false);
    EXPECT_EQ(r["outputs"]["dx"]["worst"], static_cast<int64_t>(k));
    EXPECT_GT(r["outputs"]["dx"]["err_tol"].get<double>(), 100.0);
    EXPECT_EQ(r["outputs"]["y"]["pass"], true);
  }

  // Forward only: dx and dw absent.
  const normgate::Outputs m = model_outputs(in, "bwd_det_chunked");
  ng_outputs g{};
  g.y = m.y.data();
  g.y_elems = m.y.size();
  g.rstd = m.rstd.data();
  g.rstd_elems = m.rstd.size();
  json r = validate(o, g);
  ASSERT_TRUE(r.is_object()) << last_error();
  EXPECT_EQ(r["pass"], true);
  EXPECT_EQ(r["absent"], json::array({"dx", "dw"}));
  EXPECT_EQ(r["outputs"]["dx"], json({{"present", false}}));
  EXPECT_EQ(r["outputs"]["dw"]["present"], false);
  EXPECT_EQ(r["outputs"]["y"]["present"], true);
  EXPECT_FALSE(r.contains("dw_vs_fp32"));
  // The same y statistics as in the full report.
  const json full = validate(o, all_of(m));
  EXPECT_EQ(r["outputs"]["y"], full["outputs"]["y"]);
  EXPECT_EQ(r["outputs"]["rstd"], full["outputs"]["rstd"]);

  // Buffers validated in place, or copied first when not aligned for their
  // element type: the same report either way, and the caller's bytes as they
  // are now (a change after an earlier call counts).
  {
    std::vector<unsigned char> raw(m.dx.size() * 2 + m.dw.size() * 4 + 8);
    unsigned char* dx1 = raw.data() + 1;  // odd address: not aligned for uint16_t
    unsigned char* dw1 = raw.data() + 1 + m.dx.size() * 2 + 2;  // not aligned for float
    std::memcpy(dx1, m.dx.data(), m.dx.size() * 2);
    std::memcpy(dw1, m.dw.data(), m.dw.size() * 4);
    ng_outputs mis = all_of(m);
    mis.dx = dx1;
    mis.dw = dw1;
    EXPECT_EQ(validate(o, mis), full);
    normgate::Outputs m2 = m;
    const size_t k = 3 * 96 + 5;
    m2.dx[k] = normgate::bf16_from_float(normgate::bf16_to_float(m2.dx[k]) + 64.0f);
    const json in_place = validate(o, all_of(m2));
    std::memcpy(dx1, m2.dx.data(), m2.dx.size() * 2);
    const json copied = validate(o, mis);
    EXPECT_EQ(in_place["outputs"]["dx"]["worst"], static_cast<int64_t>(k));
    EXPECT_EQ(in_place, copied);
  }

  // Errors: nothing given, a wrong size, h_new for form plain, a small buffer.
  int rc = 0;
  validate(o, ng_outputs{}, &rc);
  EXPECT_EQ(rc, NG_EINVAL);
  EXPECT_NE(last_error().find("no output given"), std::string::npos) << last_error();
  ng_outputs bad = all_of(m);
  bad.dw_elems = 95;
  validate(o, bad, &rc);
  EXPECT_EQ(rc, NG_EINVAL);
  EXPECT_NE(last_error().find("dw has 95 elements, the case needs 96"), std::string::npos) << last_error();
  bad = all_of(m);
  bad.h_new = m.y.data();
  bad.h_new_elems = m.y.size();
  validate(o, bad, &rc);
  EXPECT_EQ(rc, NG_EINVAL);
  EXPECT_NE(last_error().find("form plain has no h_new"), std::string::npos) << last_error();
  char small[16];
  size_t needed = 0;
  const ng_outputs all = all_of(m);
  EXPECT_EQ(ng_oracle_validate(o, &all, small, sizeof small, &needed), NG_EINVAL);
  EXPECT_NE(last_error().find("too small"), std::string::npos) << last_error();
  EXPECT_GT(needed, sizeof small);
  EXPECT_LT(needed, static_cast<size_t>(NG_REPORT_BYTES));
  std::vector<char> exact(needed);
  EXPECT_EQ(ng_oracle_validate(o, &all, exact.data(), exact.size(), &needed), NG_OK) << last_error();
  EXPECT_EQ(json::parse(exact.data()), full);
  ng_oracle_close(o);
}

// ng_oracle_open_inputs: the caller's copy of the inputs gives the same
// reports as the oracle's own generation; inputs of another case, one wrong
// element in a sampled row, or a wrong size are NG_EINVAL naming them.
TEST(CApi, OracleOverGivenInputsMatchesItsOwnGeneration) {
  for (const char* id : {"H=96,T=300,w=bf16,form=plain,family=cancel,seed=1",
                         "H=64,T=50,w=fp32,form=res,family=llm,seed=2",
                         "H=256,T=9,w=bf16,form=heads4,family=normal,seed=4"}) {
    const ns::HostInputs in = ns::generate_host(ns::parse_case(id));
    Inputs given = generate(id);
    const ng_host_inputs b = given.bufs();
    ng_oracle *own = nullptr, *over = nullptr;
    ASSERT_EQ(ng_oracle_open(id, 2, &own), NG_OK) << last_error();
    ASSERT_EQ(ng_oracle_open_inputs(id, &b, 2, &over), NG_OK) << id << ": " << last_error();
    // The handle copied the inputs: overwriting the caller's buffers changes nothing.
    std::fill(given.x.begin(), given.x.end(), uint16_t{0x7FC0});
    normgate::Outputs m = model_outputs(in, "bwd_det_chunked");
    const size_t k = static_cast<size_t>(in.cols) + 3;  // one element off: a report with a failure in it
    m.dx[k] = normgate::bf16_from_float(normgate::bf16_to_float(m.dx[k]) + 8.0f);
    const json a = validate(own, all_of(m)), c = validate(over, all_of(m));
    ASSERT_TRUE(a.is_object() && c.is_object()) << last_error();
    EXPECT_EQ(a, c) << id;
    EXPECT_EQ(c["outputs"]["dx"]["pass"], false) << id;
    EXPECT_EQ(c["outputs"]["y"]["pass"], true) << id;
    ng_oracle_close(own);
    ng_oracle_close(over);
  }

  const char* id = "H=64,T=300,w=bf16,form=plain,family=normal,seed=0";
  ng_oracle* o = nullptr;
  // Another seed's inputs: the first sampled element differs (x[0, 0]).
  Inputs other = generate("H=64,T=300,w=bf16,form=plain,family=normal,seed=1");
  ng_host_inputs b = other.bufs();
  EXPECT_EQ(ng_oracle_open_inputs(id, &b, 0, &o), NG_EINVAL);
  EXPECT_EQ(o, nullptr);
  EXPECT_NE(last_error().find("w[0] is 0x"), std::string::npos) << last_error();  // w comes first, seeded too
  // The right w, x and dy from another seed: named at x[0, 0].
  Inputs right = generate(id);
  other.w16 = right.w16;
  b = other.bufs();
  EXPECT_EQ(ng_oracle_open_inputs(id, &b, 0, &o), NG_EINVAL);
  EXPECT_NE(last_error().find("x[0, 0] is 0x"), std::string::npos) << last_error();
  // One element in a sampled row (the last row, column 17, of dy): named.
  right.dy[299 * 64 + 17] ^= 0x0001;
  b = right.bufs();
  EXPECT_EQ(ng_oracle_open_inputs(id, &b, 0, &o), NG_EINVAL);
  EXPECT_NE(last_error().find("dy[299, 17] is 0x"), std::string::npos) << last_error();
  right.dy[299 * 64 + 17] ^= 0x0001;
  b = right.bufs();
  b.dy_elems -= 1;
  EXPECT_EQ(ng_oracle_open_inputs(id, &b, 0, &o), NG_EINVAL);
  EXPECT_NE(last_error().find("dy has 19199 elements, the case needs 19200"), std::string::npos) << last_error();
  EXPECT_EQ(ng_oracle_open_inputs(id, nullptr, 0, &o), NG_EINVAL);
  EXPECT_NE(last_error().find("inputs is NULL"), std::string::npos) << last_error();
  b = right.bufs();
  ASSERT_EQ(ng_oracle_open_inputs(id, &b, 0, &o), NG_OK) << last_error();
  ng_oracle_close(o);
}

// Form res (h_new checked bitwise; dx holds dh) and a head form.
TEST(CApi, OracleResAndHeads) {
  {
    const char* id = "H=64,T=50,w=fp32,form=res,family=llm,seed=2";
    const ns::HostInputs in = ns::generate_host(ns::parse_case(id));
    ng_oracle* o = nullptr;
    ASSERT_EQ(ng_oracle_open(id, 0, &o), NG_OK) << last_error();
    normgate::Outputs m = model_outputs(in, "bwd_det_chunked");
    ASSERT_EQ(m.h_new.size(), in.x.size());
    json r = validate(o, all_of(m));
    EXPECT_EQ(r["pass"], true) << r.dump(1);
    EXPECT_EQ(r["outputs"]["h_new"]["pass"], true);
    m.h_new[7] ^= 1;  // one ulp: h_new must be exact
    r = validate(o, all_of(m));
    EXPECT_EQ(r["pass"], false);
    EXPECT_EQ(r["outputs"]["h_new"]["worst"], 7);
    ng_outputs g = all_of(m);
    g.h_new = nullptr;
    r = validate(o, g);
    EXPECT_EQ(r["pass"], true);
    EXPECT_EQ(r["absent"], json::array({"h_new"}));
    ng_oracle_close(o);
  }
  {
    const char* id = "H=256,T=40,w=bf16,form=heads24,family=cancel,seed=0";
    const ns::HostInputs in = ns::generate_host(ns::parse_case(id));
    ng_oracle* o = nullptr;
    ASSERT_EQ(ng_oracle_open(id, 0, &o), NG_OK) << last_error();
    const normgate::Outputs m = model_outputs(in, "bwd_det_chunked");
    EXPECT_EQ(m.rstd.size(), 40u * 24u);
    const json r = validate(o, all_of(m));
    EXPECT_EQ(r["pass"], true) << r.dump(1);
    ng_oracle_close(o);
  }
}

// ---- GPU: the kernels through the C ABI, on device buffers ----------------

#ifdef NORMGATE_KERNELS_HAVE_CUDA
namespace {

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

template <class T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  explicit Dev(size_t count) : n(count) {
    if (cudaMalloc(&p, (n ? n : 1) * sizeof(T)) != cudaSuccess) p = nullptr;
  }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
};

template <class T>
void up(Dev<T>& d, const std::vector<T>& h) {
  ASSERT_EQ(cudaMemcpy(d.p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
}
template <class T>
std::vector<T> down(const T* p, size_t n) {
  std::vector<T> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

// Forward and backward of case `id` through ng_fwd / ng_bwd; per-head forms
// read x from a wider [T, 40, 256] buffer (the q part of a packed qkv row).
void run_case(const char* id, const char* bwd) {
  const ns::HostInputs in = ns::generate_host(ns::parse_case(id));
  const ns::CaseId& c = in.id;
  const int64_t heads = c.heads(), H = c.H, rows = c.rows(), n = rows * H;
  const bool per_head = heads > 1, res = c.form == normgate::Form::res;
  const int64_t packed = per_head ? 40 * 256 : H;  // row pitch of x in elements

  std::vector<uint16_t> xh(static_cast<size_t>(c.T * packed), 0);
  for (int64_t t = 0; t < c.T; ++t)
    std::memcpy(&xh[static_cast<size_t>(t * packed)], &in.x[static_cast<size_t>(t * heads * H)],
                static_cast<size_t>(heads * H) * 2);
  Dev<uint16_t> x(xh.size()), dy(in.dy.size()), y(n), dx(n), u(res ? n : 0), h_new(res ? n : 0),
      dh_new(res ? n : 0);
  Dev<float> rstd(rows), dw(H);
  Dev<double> msq(rows);  // the forward's m per row, handed to the backward (as the library's own runs)
  Dev<uint16_t> w16(H);
  Dev<float> w32(H);
  up(x, xh);
  up(dy, in.dy);
  const bool bf = c.w == normgate::WDtype::bf16;
  if (bf) {
    up(w16, in.w_bf16);
  } else {
    up(w32, in.w_f32);
  }
  if (res) {
    up(u, in.u);
    up(dh_new, in.dh_new);
  }

  ng_fwd_args f{};
  f.x = x.p;
  f.x_stride = packed;
  f.x_stride_h = per_head ? H : 0;
  f.w = bf ? static_cast<const void*>(w16.p) : static_cast<const void*>(w32.p);
  f.w_dtype = bf ? NG_W_BF16 : NG_W_FP32;
  f.form = static_cast<int32_t>(c.form);
  f.y = y.p;
  f.y_stride = heads * H;
  f.y_stride_h = per_head ? H : 0;
  f.rstd = rstd.p;
  f.T = c.T;
  f.H = H;
  f.heads = heads;
  f.eps = static_cast<float>(c.eps);
  f.msq = msq.p;
  if (res) {
    f.u = u.p;
    f.u_stride = H;
    f.h_new = h_new.p;
    f.h_new_stride = H;
  }
  ASSERT_EQ(ng_fwd(&f, nullptr), NG_OK) << last_error();

  uint64_t ws_bytes = 0;
  ASSERT_EQ(ng_bwd_workspace_bytes(bwd, rows, H, &ws_bytes), NG_OK) << last_error();
  Dev<unsigned char> ws(ws_bytes);
  ng_bwd_args b{};
  b.dy = dy.p;
  b.dy_stride = heads * H;
  b.dy_stride_h = per_head ? H : 0;
  b.x = res ? static_cast<const void*>(h_new.p) : static_cast<const void*>(x.p);
  b.x_stride = res ? H : packed;
  b.x_stride_h = per_head ? H : 0;
  b.w = f.w;
  b.w_dtype = f.w_dtype;
  b.form = f.form;
  b.rstd = rstd.p;
  b.dx = dx.p;
  b.dx_stride = heads * H;
  b.dx_stride_h = per_head ? H : 0;
  b.dw = dw.p;
  b.T = c.T;
  b.H = H;
  b.heads = heads;
  b.workspace = ws.p;
  b.workspace_bytes = ws_bytes;
  b.msq = msq.p;
  if (res) {
    b.dh_new = dh_new.p;
    b.dh_new_stride = H;
  }
  ASSERT_EQ(ng_bwd(bwd, &b, nullptr), NG_OK) << last_error();
  CUDA_OK(cudaDeviceSynchronize());

  normgate::Outputs got;
  got.y = down(y.p, static_cast<size_t>(n));
  got.rstd = down(rstd.p, static_cast<size_t>(rows));
  got.dx = down(dx.p, static_cast<size_t>(n));
  got.dw = down(dw.p, static_cast<size_t>(H));
  if (res) got.h_new = down(h_new.p, static_cast<size_t>(n));

  // Bitwise equal to the CPU models (dw too for the deterministic variant).
  const normgate::Outputs m = model_outputs(in, bwd);
  EXPECT_EQ(got.y, m.y) << id;
  EXPECT_EQ(got.rstd, m.rstd) << id;
  EXPECT_EQ(got.dx, m.dx) << id;
  EXPECT_EQ(got.h_new, m.h_new) << id;
  if (nk::variant(bwd).mode == nk::Mode::det) {
    EXPECT_EQ(got.dw, m.dw) << id;
  }

  ng_oracle* o = nullptr;
  ASSERT_EQ(ng_oracle_open(id, 0, &o), NG_OK) << last_error();
  const json r = validate(o, all_of(got));
  EXPECT_EQ(r["pass"], true) << id << " " << bwd << ": " << r.dump(1);
  ng_oracle_close(o);
}

}  // namespace

TEST(CApiGpu, GenerateDeviceEqualsGenerateHost) {
  if (!device()) GTEST_SKIP() << "no CUDA device: GPU test runs on the H200 (tools/h200.sh)";
  for (const char* id : {"H=100,T=37,w=bf16,form=plain,family=cancel,seed=3",
                         "H=256,T=9,w=fp32,form=heads4,family=llm,seed=1",
                         "H=48,T=21,w=bf16,form=res,family=normal,seed=8",
                         "H=2048,T=4097,w=fp32,form=plain,family=llm,seed=5"}) {
    const Inputs h = generate(id);
    const size_t n = h.x.size();
    const bool res = h.info.form == NG_FORM_RES, bf = h.info.w_dtype == NG_W_BF16;
    Dev<uint16_t> x(n), dy(n), u(res ? n : 0), dh(res ? n : 0), w16(h.info.H);
    Dev<float> w32(h.info.H);
    CUDA_OK(cudaMemset(x.p, 0xFF, n * 2));  // poison
    CUDA_OK(cudaMemset(dy.p, 0xFF, n * 2));
    if (res) {
      CUDA_OK(cudaMemset(u.p, 0xFF, n * 2));
      CUDA_OK(cudaMemset(dh.p, 0xFF, n * 2));
    }
    ng_host_inputs b{};
    b.x = x.p;
    b.x_elems = n;
    b.dy = dy.p;
    b.dy_elems = n;
    b.w = bf ? static_cast<void*>(w16.p) : static_cast<void*>(w32.p);
    b.w_elems = static_cast<uint64_t>(h.info.H);
    if (res) {
      b.u = u.p;
      b.u_elems = n;
      b.dh_new = dh.p;
      b.dh_new_elems = n;
    }
    ASSERT_EQ(ng_generate_device(id, &b, nullptr), NG_OK) << id << ": " << last_error();
    CUDA_OK(cudaDeviceSynchronize());
    EXPECT_EQ(down(x.p, n), h.x) << id;
    EXPECT_EQ(down(dy.p, n), h.dy) << id;
    if (bf) {
      EXPECT_EQ(down(w16.p, h.w16.size()), h.w16) << id;
    } else {
      EXPECT_EQ(down(w32.p, h.w32.size()), h.w32) << id;
    }
    if (res) {
      EXPECT_EQ(down(u.p, n), h.u) << id;
      EXPECT_EQ(down(dh.p, n), h.dh_new) << id;
    }
    b.dy_elems -= 1;
    EXPECT_EQ(ng_generate_device(id, &b, nullptr), NG_EINVAL) << id;
    EXPECT_NE(last_error().find("dy has"), std::string::npos) << last_error();
  }
}

TEST(CApiGpu, KernelsThroughTheCAbiPassTheOracle) {
  if (!device()) GTEST_SKIP() << "no CUDA device: GPU test runs on the H200 (tools/h200.sh)";
  for (const char* bwd : {"bwd_det_chunked", "bwd_nondet_atomic"}) {
    run_case("H=2048,T=515,w=bf16,form=plain,family=cancel,seed=0", bwd);
    run_case("H=256,T=300,w=fp32,form=heads24,family=llm,seed=1", bwd);
    run_case("H=256,T=77,w=bf16,form=heads4,family=normal,seed=2", bwd);
    run_case("H=6144,T=64,w=bf16,form=res,family=cancel,seed=3", bwd);
  }
}
#else
TEST(CApiGpu, GenerateDeviceEqualsGenerateHost) {
  GTEST_SKIP() << "built without CUDA: ng_generate_device returns NG_EFAIL";
}
TEST(CApiGpu, KernelsThroughTheCAbiPassTheOracle) {
  GTEST_SKIP() << "built without CUDA: ng_fwd/ng_bwd return NG_EFAIL (KernelCallWithoutGpuFailsWithCodeOne)";
}
#endif
