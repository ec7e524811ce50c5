// tests/harness/digest_test.cpp: the output digest (core/output_digest.h),
// digest_case on the CPU models, and (with a device) run_gpu_digests against
// the host digest of run_gpu's copied-back outputs.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "util/gpu_test_util.h"
#include "normgate/core/output_digest.h"
#include "normgate/harness/digest.h"
#include "normgate/harness/runner.h"
#include "normgate/kernels/models.h"
#include "normgate/kernels/registry.h"
#include "normgate/seeds/case_id.h"
#include "normgate/seeds/generate.h"

namespace nv = normgate::validators;
namespace nk = normgate::kernels;
using normgate::core::digest_term;
using normgate::core::digest_u16;
using normgate::core::digest_u32;
using normgate::core::mix64;

namespace {

TEST(OutputDigest, Mix64IsSplitMix64sFinalizer) {
  // SplitMix64 from state 0: its first two outputs are mix64(K) and
  // mix64(2K), K = 0x9E3779B97F4A7C15 (Vigna's splitmix64.c).
  EXPECT_EQ(mix64(0x9E3779B97F4A7C15ull), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(mix64(2 * 0x9E3779B97F4A7C15ull), 0x6E789E6AA1B965F4ull);
  EXPECT_EQ(digest_term(0, 0), mix64(0xE220A8397B1DCDAFull));
}

TEST(OutputDigest, AnyOneBitAnywhereAndAnySwapChangeIt) {
  std::vector<uint16_t> a(1000);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint16_t>(0x3F80 + (i * 37) % 251);
  const uint64_t d = digest_u16(a.data(), a.size());
  EXPECT_EQ(d, digest_u16(a.data(), a.size()));
  for (size_t i : {size_t{0}, size_t{1}, size_t{499}, size_t{999}})
    for (int bit = 0; bit < 16; ++bit) {
      auto b = a;
      b[i] ^= static_cast<uint16_t>(1u << bit);
      EXPECT_NE(digest_u16(b.data(), b.size()), d) << i << " " << bit;
    }
  auto s = a;
  std::swap(s[3], s[700]);
  ASSERT_NE(s[3], a[3]);
  EXPECT_NE(digest_u16(s.data(), s.size()), d);
  // The length and the element width enter: a prefix of zeros, or the same
  // bits read as FP32 words, differ.
  std::vector<uint16_t> z1(4, 0), z2(5, 0);
  EXPECT_NE(digest_u16(z1.data(), 4), digest_u16(z2.data(), 5));
  std::vector<uint32_t> w(4, 0);
  EXPECT_NE(digest_u16(z1.data(), 4), digest_u32(w.data(), 4));
}

TEST(DigestCase, CpuModelsDigestWhatTheyCompute) {
  for (const char* id : {"H=64,T=33,w=bf16,form=plain,family=cancel,seed=0", "H=96,T=20,w=fp32,form=res,family=llm,seed=1",
                         "H=256,T=5,w=bf16,form=heads4,family=normal,seed=2"}) {
    SCOPED_TRACE(id);
    const auto c = normgate::seeds::parse_case(id);
    const nk::OutputDigests d = nv::digest_case("bwd_det_chunked", c, nv::Backend::cpu, false, 2);
    const auto in = normgate::seeds::generate_host(c, 2);
    const bool res = c.form == normgate::Form::res;
    const auto u = res ? normgate::RowView<uint16_t>::plain(in.u.data(), in.rows, in.cols) : normgate::RowView<uint16_t>{};
    const auto dn = res ? normgate::RowView<uint16_t>::plain(in.dh_new.data(), in.rows, in.cols)
                        : normgate::RowView<uint16_t>{};
    const auto o = nk::run_model(nk::default_fwd(), nk::variant("bwd_det_chunked"), in.x_view(), in.dy_view(),
                                 in.w_view(), static_cast<float>(c.eps), 1, u, dn, c.heads());
    ASSERT_FALSE(o.dx.empty());
    EXPECT_EQ(d.y, digest_u16(o.y.data(), o.y.size()));
    EXPECT_EQ(d.dx, digest_u16(o.dx.data(), o.dx.size()));
    EXPECT_EQ(d.dw, digest_u32(reinterpret_cast<const uint32_t*>(o.dw.data()), o.dw.size()));
    EXPECT_EQ(d.rstd, digest_u32(reinterpret_cast<const uint32_t*>(o.rstd.data()), o.rstd.size()));
    EXPECT_EQ(d.has_h_new, res);
    if (res) {
      EXPECT_EQ(d.h_new, digest_u16(o.h_new.data(), o.h_new.size()));
    }
    // Forward only: the same forward digests, no dx, dw.
    const nk::OutputDigests f = nv::digest_case("bwd_det_chunked", c, nv::Backend::cpu, true, 1);
    EXPECT_FALSE(f.has_bwd);
    EXPECT_EQ(f.y, d.y);
    EXPECT_EQ(f.rstd, d.rstd);
    EXPECT_EQ(nv::to_string(f).find(" dx="), std::string::npos);
    EXPECT_NE(nv::to_string(d).find(" dw="), std::string::npos);
    EXPECT_FALSE(d.has_msq);  // the models' Outputs hold no msq
    EXPECT_EQ(nv::to_string(d).find(" msq="), std::string::npos);
  }
  EXPECT_THROW(nv::digest_case("no_such", normgate::seeds::parse_case("H=64,T=3,w=bf16,form=plain,family=normal,seed=0"),
                               nv::Backend::cpu, false),
               std::invalid_argument);
}

// The device digests equal the host's over the copied-back outputs, in every
// layout (pitched heads24 rows, res, FP32 w), for a forward and a backward
// variant; and differ between variants whose dw bits differ.
TEST(DigestCase, GpuDigestsEqualTheHostsOverTheDownloads) {
  using namespace normgate::kernels;
  NG_REQUIRE_GPU();
  for (const char* id : {"H=2048,T=333,w=bf16,form=plain,family=cancel,seed=0",
                         "H=1536,T=77,w=fp32,form=res,family=llm,seed=1",
                         "H=256,T=65,w=bf16,form=heads24,family=normal,seed=2", "H=4096,T=0,w=bf16,form=plain,family=normal,seed=3"}) {
    SCOPED_TRACE(id);
    const auto c = normgate::seeds::parse_case(id);
    for (const char* impl : {"bwd_det_chunked", "fwd_rowwise"}) {
      SCOPED_TRACE(impl);
      const auto iv = nv::impl_variants(impl, c);
      GpuRunOptions opt;
      opt.fwd = iv.fwd;
      const normgate::Outputs o = run_gpu(*iv.bwd, c, static_cast<float>(c.eps), opt);
      const OutputDigests d = nv::digest_case(impl, c, nv::Backend::gpu, false);
      EXPECT_EQ(d.y, digest_u16(o.y.data(), o.y.size()));
      EXPECT_EQ(d.rstd, digest_u32(reinterpret_cast<const uint32_t*>(o.rstd.data()), o.rstd.size()));
      EXPECT_EQ(d.dx, digest_u16(o.dx.data(), o.dx.size()));
      EXPECT_EQ(d.dw, digest_u32(reinterpret_cast<const uint32_t*>(o.dw.data()), o.dw.size()));
      if (c.form == normgate::Form::res) {
        EXPECT_EQ(d.h_new, digest_u16(o.h_new.data(), o.h_new.size()));
      }
      // msq: digested, and not the poison the runner leaves in rows the
      // forward missed (binary64 NaN 0xFFFF...); a forward-only run (no dy,
      // no backward) gives the same forward digests.
      ASSERT_TRUE(d.has_msq);
      const std::vector<uint64_t> poison(static_cast<size_t>(c.rows()), ~uint64_t{0});
      if (c.T > 0) {
        EXPECT_NE(d.msq, normgate::core::digest_u64(poison.data(), poison.size()));
      }
      const OutputDigests f = nv::digest_case(impl, c, nv::Backend::gpu, true);
      EXPECT_FALSE(f.has_bwd);
      EXPECT_TRUE(f.has_msq);
      EXPECT_EQ(f.y, d.y);
      EXPECT_EQ(f.rstd, d.rstd);
      EXPECT_EQ(f.msq, d.msq);
      EXPECT_EQ(f.has_h_new, d.has_h_new);
      EXPECT_EQ(f.h_new, d.h_new);
    }
  }
}

}  // namespace
