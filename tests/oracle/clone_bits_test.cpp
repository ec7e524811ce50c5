// tests/oracle/clone_bits_test.cpp: the oracle's hot loops are compiled
// several times (AVX-512, AVX2, the build's baseline; GCC target_clones,
// oracle/src/eft.h) and one clone is picked at load time by the CPU. Every
// clone must give the same bits. The digests below were taken with the
// baseline and AVX2 clones only (before the AVX-512 clone existed, on a
// machine that picked AVX2); whichever clone this machine picks must
// reproduce them: a change in any value or bound bit of any output, in any
// clone, changes a digest.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "normgate/oracle/reference.h"
#include "normgate/seeds/case_id.h"
#include "normgate/seeds/generate.h"

namespace no = normgate::oracle;
namespace ns = normgate::seeds;

namespace {

struct Bytes {
  std::vector<unsigned char> b;
  template <class T>
  void put(const T& v) {
    const auto* p = reinterpret_cast<const unsigned char*>(&v);
    b.insert(b.end(), p, p + sizeof v);
  }
};

// Every value and bound of one Reference, in a fixed order, plus its escalation counts.
void put_reference(Bytes& out, const no::Reference& r) {
  const int64_t rows = r.rows(), cols = r.cols();
  std::vector<double> v(static_cast<size_t>(cols)), bd(v.size());
  for (int64_t i = 0; i < rows; ++i) {
    const no::VB rs = r.rstd(i), c = r.c(i);
    out.put(rs.v);
    out.put(rs.bound);
    out.put(r.rstd_f32(i));
    out.put(c.v);
    out.put(c.bound);
    r.y_row(i, 0, cols, v.data(), bd.data());
    for (int64_t j = 0; j < cols; ++j) {
      out.put(v[j]);
      out.put(bd[j]);
    }
    r.dx_row(i, 0, cols, v.data(), bd.data());
    for (int64_t j = 0; j < cols; ++j) {
      out.put(v[j]);
      out.put(bd[j]);
    }
    r.dx_row_values(i, 0, cols, v.data());
    for (int64_t j = 0; j < cols; ++j) out.put(v[j]);
  }
  for (int64_t j = 0; j < cols; ++j) {
    const no::VB w = r.dw(j);
    out.put(w.v);
    out.put(w.bound);
    out.put(r.dw_abs(j));
  }
  const no::Escalations& e = r.escalations();
  out.put(e.rstd);
  out.put(e.rows);
  out.put(e.dw);
}

// The digest of both references of one case (compute_pair) and its FP32
// baseline (rstd, dw, y, dx), with non-finite elements put into some rows.
std::string digest(const std::string& id) {
  ns::HostInputs in = ns::generate_host(ns::parse_case(id), 1);
  const int64_t rows = in.rows, cols = in.cols;
  in.x[static_cast<size_t>(1 * cols + 7)] = 0x7FC0;                     // NaN
  in.dy[static_cast<size_t>((rows - 1) * cols + cols / 2)] = 0xFF80;  // -inf
  const no::Problem p{in.x_view(), in.dy_view(), in.w_view(), in.id.eps, {}};
  no::Options o;
  o.threads = 2;
  const no::ReferencePair pair = no::Reference::compute_pair(p, o);
  Bytes out;
  put_reference(out, pair.ref);
  put_reference(out, pair.ideal);
  const normgate::Outputs b = no::fp32_baseline(p, 2, true);
  // The pair's pass computes the baseline's rstd and dw too (D22): in every
  // clone, the same bits as the baseline's own pass.
  normgate::Outputs fused;
  (void)no::Reference::compute_pair(p, o, &fused);
  EXPECT_TRUE(fused.rstd.size() == b.rstd.size() && fused.dw.size() == b.dw.size()) << id;
  if (fused.rstd.size() == b.rstd.size() && fused.dw.size() == b.dw.size()) {  // NaN rows: compare bits
    EXPECT_EQ(0, std::memcmp(fused.rstd.data(), b.rstd.data(), b.rstd.size() * sizeof(float))) << id;
    EXPECT_EQ(0, std::memcmp(fused.dw.data(), b.dw.data(), b.dw.size() * sizeof(float))) << id;
  }
  for (float f : b.rstd) out.put(f);
  for (float f : b.dw) out.put(f);
  for (uint16_t u : b.y) out.put(u);
  for (uint16_t u : b.dx) out.put(u);
  return ns::sha256_hex(out.b.data(), out.b.size());
}

}  // namespace

TEST(OracleClones, PinnedDigests) {
  EXPECT_EQ(digest("H=1000,T=24,w=bf16,form=plain,family=llm,seed=4"), "647f6f891c71e92ea0e42f621dd1e7fb01c1bce6065da89e3b875a504c73b16c");
  EXPECT_EQ(digest("H=1000,T=24,w=bf16,form=plain,family=cancel,seed=5"), "0770e71566b6847209139a312853fef2d812de043cf9e824830e772fb0eaccb1");
  EXPECT_EQ(digest("H=520,T=40,w=fp32,form=plain,family=epsnear,seed=6"), "d3ea7fe9d70cfb06f05b2d26262f3544b281c85e64d592e62a06eee26b133ea3");
  EXPECT_EQ(digest("H=6144,T=6,w=bf16,form=plain,family=normal,seed=3"), "f7d903a94a3f4192570142552a47f9e0aca98e823a0d2e49b4ad11e50ad610f3");
}
