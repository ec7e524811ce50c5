// tests/kernels/bwd_own_kernel_test.cpp: the backward variants that run
// bwd_det_chunked's chunk pass and combine in a kernel of their own
// (bwd_det_wide, bwd_det_heads, bwd_det_wreg; registry.h), checked from one
// table; and bwd_det_lean, which serves every H and form and runs a kernel
// of its own only where bwd_det_lean.h says (checked here on the CPU), else
// bwd_det_chunked's. Each serves exactly the H where plan.h gives the kernel it was
// built for, and only its forms; it takes bwd_det_chunked's workspace; the
// workspace query and the launch API refuse other H and forms, naming them.
// CPU, always run. On the GPU (skipped without a CUDA device), suites named
// after each variant: its dx and dw are bwd_det_chunked's bit for bit on
// both paths, both weight dtypes, its forms, one row to many chunks, and
// form res layouts (misaligned, padded) give the same bits.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "bwd_det_lean.h"
#include "normgate/harness/runner.h"
#include "normgate/kernels/chunk_plan.h"
#include "normgate/kernels/plan.h"
#include "normgate/kernels/rmsnorm.h"
#include "util/gpu_test_util.h"
#include "util/kernel_test_util.h"

namespace normgate::kernels::test {
namespace {

struct Spec {
  const char* name;
  int64_t h_min, h_max;
  bool per_head;                                    // the per-head views only (else plain and res)
  bool (*kernel_applies)(const RowGeometry&, int64_t H);  // where the variant's kernel is the one plan.h picks
  std::vector<int64_t> outside;                     // H it must refuse
};

const std::vector<Spec>& specs() {
  static const std::vector<Spec> s = {
      // one CTA of 544..768 threads: bwd_det_wide's 768-thread bound
      {"bwd_det_wide", 4097, 6144, false,
       [](const RowGeometry& g, int64_t) { return g.slots == 1 && g.team > kMaxCtaTeam && g.team <= 768; },
       {4096, 6145, 256}},
      // one CTA of at most 512 threads: the narrow kernel's bound
      {"bwd_det_wreg", 1, 4096, false,
       [](const RowGeometry& g, int64_t) { return g.slots == 1 && g.team <= kMaxCtaTeam; }, {4097, 6144, 16384}},
      // the per-head views: rows of 256, one 32-thread team
      {"bwd_det_heads", 256, 256, true, [](const RowGeometry&, int64_t H) { return H == 256; }, {255, 257, 512}},
  };
  return s;
}

std::string range(const Spec& s) { return std::to_string(s.h_min) + ".." + std::to_string(s.h_max); }

TEST(BwdOwnKernel, ServesExactlyWhereItsKernelApplies) {
  for (const Spec& s : specs()) {
    const Variant& v = variant(s.name);
    EXPECT_EQ(v.op, Op::bwd) << s.name;
    EXPECT_EQ(v.mode, Mode::det) << s.name;
    EXPECT_FALSE(v.control) << s.name;
    int64_t covered = 0;
    for (int64_t H = 1; H <= kMaxH; ++H) {
      const RowGeometry g = bwd_row_geometry(H);
      const bool applies = s.kernel_applies(g, H);
      ASSERT_EQ(v.supports_h(H), applies) << s.name << ", H = " << H << ": team " << g.team << ", slots " << g.slots;
      covered += applies;
    }
    EXPECT_EQ(covered, s.h_max - s.h_min + 1) << s.name;
    EXPECT_EQ(v.h_min, s.h_min) << s.name;
    EXPECT_EQ(v.h_max, s.h_max) << s.name;
    EXPECT_EQ(v.supports(Form::plain), !s.per_head) << s.name;
    EXPECT_EQ(v.supports(Form::res), !s.per_head) << s.name;
    EXPECT_EQ(v.supports(Form::heads24), s.per_head) << s.name;
    EXPECT_EQ(v.supports(Form::heads4), s.per_head) << s.name;
    EXPECT_TRUE(v.supports(WDtype::bf16)) << s.name;
    EXPECT_TRUE(v.supports(WDtype::fp32)) << s.name;
  }
  // The teams the kernels are bounded for (plan.h).
  EXPECT_EQ(bwd_row_geometry(4096).team, 512);
  EXPECT_EQ(bwd_row_geometry(4097).team, 544);
  EXPECT_EQ(bwd_row_geometry(6144).team, 768);
  EXPECT_EQ(bwd_row_geometry(256).team, 32);
  EXPECT_EQ(bwd_row_geometry(256).slots, 1);
}

TEST(BwdOwnKernel, TakesBwdDetChunkedsWorkspace) {
  for (const Spec& s : specs())
    for (const int64_t rows : {int64_t{0}, int64_t{1}, int64_t{77}, int64_t{65537}, int64_t{24 * 131072}})
      for (const int64_t H : {s.h_min, s.h_max})
        EXPECT_EQ(bwd_workspace_bytes(variant(s.name), rows, H),
                  bwd_workspace_bytes(variant("bwd_det_chunked"), rows, H))
            << s.name << ": " << rows << " x " << H;
}

TEST(BwdOwnKernel, WorkspaceQueryRefusesOtherHNamingIt) {
  for (const Spec& s : specs())
    for (const int64_t H : s.outside) {
      try {
        (void)bwd_workspace_bytes(variant(s.name), 100, H);
        ADD_FAILURE() << s.name << ": H = " << H << " accepted";
      } catch (const std::invalid_argument& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("H = " + std::to_string(H) + " is out of range " + range(s)), std::string::npos) << m;
      }
    }
}

// The launch API's own checks (validate_bwd, before any launch): host memory
// stands in for device memory, which validation never dereferences.
TEST(BwdOwnKernel, LaunchApiRefusesOtherHAndFormsNamingThem) {
  const int64_t T = 8;
  std::vector<double> arena(size_t{1} << 21);  // 16 MiB: one call's buffers (at most about 3 MiB) fit
  auto* base = reinterpret_cast<unsigned char*>(arena.data());
  size_t used = 0;
  auto take = [&](size_t n) {
    if (used + n > arena.size() * sizeof(double)) throw std::runtime_error("test arena too small");
    void* p = base + used;
    used += (n + 255) / 256 * 256;
    return p;
  };
  auto args = [&](int64_t H, Form form) {
    used = 0;
    const int64_t heads = form == Form::heads4 ? 4 : 1, rows = T * heads;
    BwdArgs b;
    b.form = form;
    b.heads = heads;
    b.dy = static_cast<uint16_t*>(take(rows * H * 2));
    b.x = static_cast<uint16_t*>(take(rows * H * 2));
    b.dx = static_cast<uint16_t*>(take(rows * H * 2));
    b.dy_stride = b.x_stride = b.dx_stride = heads * H;
    b.dy_stride_h = b.x_stride_h = b.dx_stride_h = heads > 1 ? H : 0;
    b.w = WeightView{WDtype::fp32, take(H * 4), H};
    b.rstd = static_cast<float*>(take(rows * 4));
    b.dw = static_cast<float*>(take(H * 4));
    b.T = T;
    b.H = H;
    if (form == Form::res) {
      b.dh_new = static_cast<uint16_t*>(take(rows * H * 2));
      b.dh_new_stride = H;
    }
    b.workspace_bytes = bwd_workspace_bytes(variant("bwd_det_chunked"), rows, H);
    b.workspace = take(b.workspace_bytes);
    return b;
  };
  for (const Spec& s : specs()) {
    const Variant& v = variant(s.name);
    const std::vector<Form> served = s.per_head ? std::vector<Form>{Form::heads4}
                                                : std::vector<Form>{Form::plain, Form::res};
    const std::vector<Form> refused = s.per_head ? std::vector<Form>{Form::plain, Form::res}
                                                 : std::vector<Form>{Form::heads4};
    for (const Form f : served)
      for (const int64_t H : {s.h_min, s.h_max}) EXPECT_NO_THROW(validate_bwd(v, args(H, f))) << s.name << " H = " << H;
    for (const int64_t H : s.outside) {
      try {
        validate_bwd(v, args(H, served[0]));
        ADD_FAILURE() << s.name << ": H = " << H << " accepted";
      } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("H = " + std::to_string(H)), std::string::npos) << e.what();
      }
    }
    for (const Form f : refused) {
      try {
        validate_bwd(v, args(s.per_head ? 256 : s.h_min, f));
        ADD_FAILURE() << s.name << ": form " << to_string(f) << " accepted";
      } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find(std::string(to_string(f))), std::string::npos) << e.what();
      }
    }
  }
}

// --- on the GPU ----------------------------------------------------------------

struct GpuShape {
  int64_t H, T;  // T: tokens (per-head forms: T*heads rows)
  Form form;
  WDtype w;
  int64_t misalign = 0;  // GpuRunOptions::misalign_elems (1: the scalar path)
};

// Each shape's dx and dw from `v` equal bwd_det_chunked's bit for bit (with
// check_path, on the path the layout asks for: the vector path unless
// misaligned); not equal on poison or zeros: every output written (the
// poison is NaN, which bit_diff counts as equal to NaN) and dw mostly nonzero.
void expect_bits_of_chunked(const Variant& v, const std::vector<GpuShape>& shapes, uint64_t seed, bool check_path) {
  const std::vector<const Variant*> vs = {&variant("bwd_det_chunked"), &v};
  for (const GpuShape& s : shapes) {
    seeds::CaseId c = make_case(s.H, s.T, seeds::Family::cancel, seed++, s.w);
    c.form = s.form;
    GpuRunOptions opt;
    opt.misalign_elems = s.misalign;
    GpuRunInfo info;
    const std::vector<Outputs> o = run_gpu(vs, c, kEps, opt, &info);
    if (check_path) {
      EXPECT_EQ(info.bwd_vector, s.misalign == 0) << v.name << " " << seeds::to_string(c);
    }
    ASSERT_EQ(o.size(), 2u);
    const int64_t rows = s.T * heads_of(s.form);
    ASSERT_EQ(o[0].dx.size(), static_cast<size_t>(rows * s.H)) << seeds::to_string(c);
    EXPECT_EQ(bit_diff(o[0].dx, o[1].dx).count, 0) << v.name << " " << seeds::to_string(c);
    ASSERT_EQ(o[1].dw.size(), static_cast<size_t>(s.H));
    EXPECT_EQ(bit_diff(o[0].dw, o[1].dw).count, 0)
        << v.name << " " << seeds::to_string(c) << ": " << bit_diff(o[0].dw, o[1].dw).str();
    EXPECT_EQ(count_nan(o[1].dx), 0) << v.name << " " << seeds::to_string(c);
    EXPECT_EQ(count_nan(o[1].dw), 0) << v.name << " " << seeds::to_string(c);
    int64_t nonzero = 0;
    for (float d : o[1].dw) nonzero += std::isfinite(d) && d != 0.0f;
    EXPECT_GT(nonzero, s.H / 2) << v.name << " " << seeds::to_string(c);
  }
}

// Form res (the dh_new ring) and FP32 w off the vector path and with padded
// rows: the same bits as the contiguous run (variant_driver's layout test
// covers plain rows only for these variants).
void expect_res_layouts_keep_the_bits(const Variant& v, int64_t H) {
  for (const WDtype w : {WDtype::fp32, WDtype::bf16}) {
    seeds::CaseId c = make_case(H, 97, seeds::Family::llm, 41, w);
    c.form = Form::res;
    GpuRunInfo base_info;
    const Outputs base = run_gpu(v, c, kEps, {}, &base_info);
    EXPECT_TRUE(base_info.bwd_vector);
    GpuRunOptions mis;
    mis.misalign_elems = 1;
    GpuRunInfo mis_info;
    const Outputs m = run_gpu(v, c, kEps, mis, &mis_info);
    EXPECT_FALSE(mis_info.bwd_vector);
    GpuRunOptions pad;
    pad.row_pad = 24;
    const Outputs q = run_gpu(v, c, kEps, pad);
    EXPECT_EQ(count_nan(base.dx), 0);
    for (const Outputs* o : {&m, &q}) {
      EXPECT_EQ(bit_diff(base.dx, o->dx).count, 0) << v.name << " " << seeds::to_string(c);
      EXPECT_EQ(bit_diff(base.dw, o->dw).count, 0) << v.name << " " << seeds::to_string(c);
    }
  }
}

TEST(BwdDetWide, EqualsDetChunkedBitForBit) {
  NG_REQUIRE_GPU();
  expect_bits_of_chunked(variant("bwd_det_wide"),
                         {
                             {4097, 300, Form::plain, WDtype::fp32},     // scalar path, team 544, a last group of one column
                             {4104, 77, Form::plain, WDtype::bf16},      // vector path, team 544 (513 groups)
                             {5120, 1, Form::plain, WDtype::fp32},       // one row, one chunk
                             {5120, 700, Form::res, WDtype::bf16},       // dh_new ring, team 640
                             {6144, 3000, Form::plain, WDtype::fp32},    // team 768, more chunks than the combine's 32 lanes
                             {6144, 50, Form::res, WDtype::fp32},        // res with FP32 w in registers
                             {6143, 41, Form::res, WDtype::bf16},        // res on the scalar path
                         },
                         23, false);
}

TEST(BwdDetWide, ResLayoutsDoNotChangeTheBits) {
  NG_REQUIRE_GPU();
  expect_res_layouts_keep_the_bits(variant("bwd_det_wide"), 6144);
}

TEST(BwdDetWreg, EqualsDetChunkedBitForBit) {
  NG_REQUIRE_GPU();
  expect_bits_of_chunked(variant("bwd_det_wreg"),
                         {
                             {4095, 300, Form::plain, WDtype::fp32},     // scalar path, team 512, a last group of seven columns
                             {4096, 77, Form::plain, WDtype::bf16},      // vector path, team 512
                             {1536, 1, Form::plain, WDtype::fp32},       // one row, one chunk, team 192
                             {2048, 700, Form::res, WDtype::fp32},       // dh_new ring with FP32 w in registers, team 256
                             {1536, 3000, Form::plain, WDtype::fp32},    // more chunks than the combine's 32 lanes
                             {4096, 50, Form::res, WDtype::bf16},        // res, team 512
                             {1001, 41, Form::res, WDtype::fp32},        // res on the scalar path
                             {3, 5, Form::plain, WDtype::fp32},          // a team of one warp, one partial group
                         },
                         23, false);
}

TEST(BwdDetWreg, ResLayoutsDoNotChangeTheBits) {
  NG_REQUIRE_GPU();
  expect_res_layouts_keep_the_bits(variant("bwd_det_wreg"), 2048);
}

TEST(BwdDetHeads, EqualsDetChunkedBitForBit) {
  NG_REQUIRE_GPU();
  expect_bits_of_chunked(variant("bwd_det_heads"),
                         {
                             {256, 1, Form::heads24, WDtype::fp32},        // one token: 24 rows, one chunk
                             {256, 1, Form::heads4, WDtype::bf16},         // 4 rows
                             {256, 77, Form::heads24, WDtype::fp32},       // 1848 rows
                             {256, 3000, Form::heads4, WDtype::fp32},      // 12000 rows: more chunks than the combine's 32 lanes
                             {256, 3000, Form::heads24, WDtype::bf16},     // 72000 rows
                             {256, 513, Form::heads4, WDtype::fp32, 1},    // scalar path (misaligned views), FP32 w
                             {256, 41, Form::heads24, WDtype::bf16, 1},    // scalar path, BF16 w
                         },
                         31, true);
}

// --- bwd_det_lean -------------------------------------------------------------

// Where bwd_det_lean runs its own kernel (the host-side choice; CPU): the
// vector path, a one-slot team owning full groups (team * 8 == H), plain
// rows, form res, or dense per-head views. Pointers are never dereferenced.
TEST(BwdDetLean, OwnKernelExactlyWhereTheTeamOwnsFullGroupsOnTheVectorPath) {
  auto plain = [](int64_t H, int64_t stride) {
    BwdArgs a;
    a.H = H;
    a.T = 10;
    a.x_stride = a.dy_stride = a.dx_stride = stride;
    return a;
  };
  int64_t own = 0;
  for (int64_t H = 1; H <= kMaxH; ++H) {
    const RowGeometry g = bwd_row_geometry(H);
    const bool want = g.slots == 1 && int64_t{g.team} * 8 == H;
    ASSERT_EQ(detail::lean_kernel_applies(plain(H, H), true), want) << "H = " << H;
    ASSERT_FALSE(detail::lean_kernel_applies(plain(H, H), false)) << "H = " << H << " off the vector path";
    own += want;
  }
  EXPECT_EQ(own, 32);  // H = 256, 512, ..., 8192
  for (const int64_t H : {int64_t{256}, int64_t{1536}, int64_t{4096}, int64_t{6144}, int64_t{8192}})
    EXPECT_TRUE(detail::lean_kernel_applies(plain(H, H + 64), true)) << "padded rows, H = " << H;
  for (const int64_t H : {int64_t{4095}, int64_t{4104}, int64_t{8448}, int64_t{12288}, int64_t{16384}})
    EXPECT_FALSE(detail::lean_kernel_applies(plain(H, H), true)) << "H = " << H;
  // Form res rides along (dh_new on the ring); per-head views only dense.
  BwdArgs res = plain(2048, 2048);
  res.form = Form::res;
  uint16_t dummy = 0;
  res.dh_new = &dummy;
  res.dh_new_stride = 2048;
  EXPECT_TRUE(detail::lean_kernel_applies(res, true));
  auto heads = [&](int64_t n, int64_t stride, int64_t stride_h) {
    BwdArgs a = plain(256, stride);
    a.form = n == 4 ? Form::heads4 : Form::heads24;
    a.heads = n;
    a.x_stride_h = a.dy_stride_h = a.dx_stride_h = stride_h;
    return a;
  };
  EXPECT_TRUE(detail::lean_kernel_applies(heads(4, 4 * 256, 256), true));     // contiguous [T, 4, 256]
  EXPECT_TRUE(detail::lean_kernel_applies(heads(24, 24 * 256, 256), true));   // contiguous [T, 24, 256]
  EXPECT_FALSE(detail::lean_kernel_applies(heads(24, 40 * 256, 256), true));  // the q part of a qkv row
  EXPECT_FALSE(detail::lean_kernel_applies(heads(4, 4 * 256 + 8, 256), true));  // padded tokens
  BwdArgs shared_dy = heads(4, 4 * 256, 256);
  shared_dy.dy_stride_h = 0;  // one dy for every head
  EXPECT_FALSE(detail::lean_kernel_applies(shared_dy, true));
  BwdArgs one_dx_off = heads(4, 4 * 256, 256);
  one_dx_off.dx_stride = 4 * 256 + 256;
  EXPECT_FALSE(detail::lean_kernel_applies(one_dx_off, true));
}

// The GPU test's long shapes (below) give chunks of more than 64 rows, so
// the refined-rstd batches fill both shared slots and reuse the first.
TEST(BwdDetLean, LongGpuShapesReachTheThirdRstdBatch) {
  for (const auto& [rows, H] : {std::pair<int64_t, int64_t>{36000 * 4, 256}, {36000, 2048}, {140000, 256}})
    EXPECT_GT(rows / num_chunks(rows, H), 64) << rows << " x " << H << ": " << num_chunks(rows, H) << " chunks";
}

TEST(BwdDetLean, TakesBwdDetChunkedsWorkspace) {
  for (const int64_t rows : {int64_t{0}, int64_t{1}, int64_t{77}, int64_t{65537}})
    for (const int64_t H : {int64_t{1}, int64_t{256}, int64_t{4096}, int64_t{6144}, int64_t{16384}})
      EXPECT_EQ(bwd_workspace_bytes(variant("bwd_det_lean"), rows, H),
                bwd_workspace_bytes(variant("bwd_det_chunked"), rows, H))
          << rows << " x " << H;
}

// Its own kernel (narrow and wide, plain, res and dense heads4, both weight
// dtypes, one row to many chunks, odd row counts, and chunks of more than 64
// rows, where the refined-rstd batches of 32 rows fill both shared slots and
// reuse the first), on the vector path (asserted); and the fallback to
// bwd_det_chunked's kernels (H not a multiple of 256, the scalar path,
// heads24's strided views, two-slot H): bwd_det_chunked's bits everywhere.
TEST(BwdDetLean, EqualsDetChunkedBitForBit) {
  NG_REQUIRE_GPU();
  expect_bits_of_chunked(variant("bwd_det_lean"),
                         {
                             {4096, 77, Form::plain, WDtype::bf16},      // team 512
                             {1536, 3000, Form::plain, WDtype::fp32},    // team 192, more chunks than 32 lanes
                             {6144, 301, Form::plain, WDtype::fp32},     // the wide kernel, team 768
                             {8192, 5, Form::plain, WDtype::bf16},       // team 1024
                             {256, 1, Form::plain, WDtype::fp32},        // one row, one warp
                             {1536, 700, Form::res, WDtype::bf16},       // dh_new ring
                             {6144, 50, Form::res, WDtype::fp32},        // res in the wide kernel
                             {2048, 1, Form::res, WDtype::bf16},         // res, one row
                             {256, 3001, Form::heads4, WDtype::bf16},    // dense heads as rows of 256
                             {256, 1, Form::heads4, WDtype::fp32},       // four rows
                             {256, 36000, Form::heads4, WDtype::fp32},   // 68 rows a chunk: rstd batches 0, 1, 2
                             {2048, 36000, Form::res, WDtype::bf16},     // 68 rows a chunk, res
                             {256, 140000, Form::plain, WDtype::bf16},   // 66 rows a chunk
                         },
                         47, true);
  expect_bits_of_chunked(variant("bwd_det_lean"),
                         {
                             {256, 77, Form::heads24, WDtype::fp32},     // strided heads
                             {4095, 300, Form::plain, WDtype::fp32},     // the scalar path
                             {4104, 40, Form::res, WDtype::bf16},        // a partial last group
                             {12288, 20, Form::plain, WDtype::bf16},     // the two-slot cluster
                             {4096, 33, Form::plain, WDtype::bf16, 1},   // misaligned
                         },
                         61, false);
}

TEST(BwdDetLean, ResLayoutsDoNotChangeTheBits) {
  NG_REQUIRE_GPU();
  expect_res_layouts_keep_the_bits(variant("bwd_det_lean"), 2048);
}

}  // namespace
}  // namespace normgate::kernels::test
