// tests/kernels/bwd_own_kernel_test.cpp: the backward variants that run
// bwd_det_chunked's chunk pass and combine in a kernel of their own
// (bwd_det_wide, bwd_det_heads, bwd_det_wreg; registry.h), checked from one
// table. Each serves exactly the H where plan.h gives the kernel it was
// built for, and only its forms; it takes bwd_det_chunked's workspace; the
// workspace query and the launch API refuse other H and forms, naming them.
// CPU only, always run. Their GPU bits (equal to bwd_det_chunked's) are
// checked in bwd_det_wide_test.cpp, bwd_det_heads_test.cpp and
// bwd_det_wreg_test.cpp.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "normgate/kernels/plan.h"
#include "normgate/kernels/rmsnorm.h"
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

}  // namespace
}  // namespace normgate::kernels::test
