// Device building blocks against their host definitions, bit for bit
// (built only with CUDA; skips without a GPU).
//
// sum_group, sum_group_fast (kernels/src/device_blocks.cuh) and
// lean_sum_group (sum_group_lean.cuh, bwd_det_lean's) form BF16(a + b) for
// the res forms (h + u, dx + dh_new); the fast ones take an FP32 add
// and the hardware's RNE conversion, and bf16_sum_rn's TwoSum path only for
// groups holding a non-finite sum or an FP32 sum on a BF16 midpoint. Both
// must equal core/bf16.h bf16_sum_rn on inputs built to reach every path: inexact midpoints (where
// the double rounding RN_bf16(RN_fp32(a + b)) is wrong), exact ties, Inf,
// NaN (NaN out; its payload is the adder's), overflow, subnormals, and random words.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "device_blocks.cuh"
#include "sum_group_lean.cuh"
#include "normgate/core/bf16.h"
#include "normgate/kernels/models.h"
#include "normgate/kernels/rstd.h"

namespace normgate::kernels::dev {
namespace {

#define NG_CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr << ": " << cudaGetErrorString(cudaGetLastError())

// which: 0 sum_group, 1 sum_group_fast, 2 lean_sum_group (bwd_det_lean's).
__global__ void sum_groups_kernel(const float* a, const uint4* b, uint4* out, int n, int which) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;
  float av[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) av[e] = a[8 * i + e];
  Group8 bg;
  bg.u = b[i];
  out[i] = which == 2 ? lean_sum_group(av, bg).u : which == 1 ? sum_group_fast(av, bg).u : sum_group(av, bg).u;
}

bool has_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

float f_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t u_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(SumGroup, EqualsBf16SumRnOnMidpointsSpecialsAndRandomWords) {
  std::vector<float> a;
  std::vector<uint16_t> b;
  auto add = [&](float x, uint16_t y) {
    a.push_back(x);
    b.push_back(y);
  };
  // 1. Inexact midpoints: b = +-(1 + m/128) (BF16), a = +-(2^-8 +- 2^-31): the
  //    exact sum is 2^-31 off a BF16 midpoint, RN_fp32 lands on the midpoint.
  //    Each such element sits in a group with 7 ordinary ones (the slow path
  //    must not disturb its neighbours), at every position 0..7 in turn
  //    (lean_sum_group tests two sums a word: low and high halves).
  std::mt19937 rng(12345);
  int midpoints = 0;
  int at_position[8] = {};
  int crafted = 0;
  for (int m = 0; m < 128; ++m)
    for (int sb : {1, -1})
      for (int sd : {1, -1})
        for (int sa : {1, -1}) {
          const uint16_t y = bf16_from_float(static_cast<float>(sb) * (1.0f + static_cast<float>(m) / 128.0f));
          const float x = static_cast<float>(sa) * (std::ldexp(1.0f, -8) + static_cast<float>(sd) * std::ldexp(1.0f, -31));
          const float s = x + bf16_to_float(y);
          const int pos = crafted++ % 8;
          if ((u_of(s) & 0xFFFFu) == 0x8000u && static_cast<double>(s) != static_cast<double>(x) + bf16_to_float(y)) {
            ++midpoints;
            ++at_position[pos];
          }
          for (int k = 0; k < pos; ++k) add(std::ldexp(static_cast<float>(rng() % 1000) - 500.0f, -9), bf16_from_float(1.5f));
          add(x, y);
          for (int k = pos + 1; k < 8; ++k) add(std::ldexp(static_cast<float>(rng() % 1000) - 500.0f, -9), bf16_from_float(1.5f));
        }
  // 2. Exact ties (sum exactly on a midpoint: RNE), zeros of both signs.
  for (int m = 0; m < 64; ++m) add(std::ldexp(1.0f, -8), bf16_from_float(1.0f + static_cast<float>(m) / 128.0f));
  add(0.0f, 0x8000u);
  add(-0.0f, 0x8000u);
  add(-0.0f, 0x0000u);
  // 3. Specials: Inf, NaN with payloads (a and b), overflow to Inf, Inf - Inf.
  const float inf = std::numeric_limits<float>::infinity();
  add(inf, bf16_from_float(1.0f));
  add(-inf, bf16_from_float(inf));
  add(inf, bf16_from_float(-inf));
  add(f_of(0x7FC01234u), bf16_from_float(1.0f));
  add(f_of(0xFF801234u), bf16_from_float(1.0f));  // signalling NaN payload
  add(1.0f, 0x7F81u);                             // BF16 signalling NaN
  add(3.3e38f, bf16_from_float(3.3e38f));         // overflows FP32
  add(3.38e38f, bf16_from_float(1e35f));          // near the largest BF16, finite
  // Sums that are FP32 values already (b = +0), so the conversion alone decides:
  add(f_of(0x7F7FC000u), 0x0000u);  // rounds past the largest BF16 to +Inf (fast path)
  add(f_of(0xFF7FA000u), 0x0000u);  // to -Inf (fast path)
  add(f_of(0x7F7F8000u), 0x0000u);  // a midpoint: RNE to +Inf (slow path)
  add(f_of(0x007FC000u), 0x0000u);  // the largest subnormal rounds up into 0x0080 (fast path)
  add(f_of(0x00012345u), 0x0000u);  // a subnormal rounding down
  add(f_of(0x0001C000u), 0x0000u);  // a subnormal rounding up
  // 4. Subnormals.
  add(f_of(0x00000001u), 0x0001u);
  add(f_of(0x80400000u), 0x0040u);
  add(f_of(0x00008000u), 0x0000u);  // a subnormal on a BF16 midpoint, exact
  // 5. Random words (all classes), and random near-equal magnitudes.
  for (int i = 0; i < (1 << 20); ++i) add(f_of(static_cast<uint32_t>(rng())), static_cast<uint16_t>(rng()));
  std::normal_distribution<float> nd;
  for (int i = 0; i < (1 << 20); ++i) add(nd(rng) * 1e-3f, bf16_from_float(nd(rng)));
  while (a.size() % 8 != 0) add(1.0f, 0);
  ASSERT_GE(midpoints, 500) << "the crafted inputs must reach inexact midpoints";
  for (int p = 0; p < 8; ++p) ASSERT_GE(at_position[p], 50) << "inexact midpoints at group position " << p;
  // The inputs separate one rounding from two (else the test could not fail on it).
  int64_t double_rounding_differs = 0;
  for (size_t i = 0; i < a.size(); ++i)
    double_rounding_differs +=
        bf16_from_float(a[i] + bf16_to_float(b[i])) != bf16_sum_rn(a[i], bf16_to_float(b[i])) ? 1 : 0;
  ASSERT_GE(double_rounding_differs, 250);
  // The explicit conversion cases give what their comments say (host reference).
  EXPECT_EQ(bf16_sum_rn(f_of(0x7F7FC000u), 0.0f), 0x7F80u);
  EXPECT_EQ(bf16_sum_rn(f_of(0xFF7FA000u), 0.0f), 0xFF80u);
  EXPECT_EQ(bf16_sum_rn(f_of(0x7F7F8000u), 0.0f), 0x7F80u);
  EXPECT_EQ(bf16_sum_rn(f_of(0x007FC000u), 0.0f), 0x0080u);
  EXPECT_EQ(bf16_sum_rn(f_of(0x00012345u), 0.0f), 0x0001u);
  EXPECT_EQ(bf16_sum_rn(f_of(0x0001C000u), 0.0f), 0x0002u);
  if (!has_gpu()) GTEST_SKIP() << "no CUDA device: sum_group runs on the GPU only (host checks of the inputs passed)";

  const int n = static_cast<int>(a.size() / 8);
  float* da = nullptr;
  uint4 *db = nullptr, *dout = nullptr;
  NG_CUDA_OK(cudaMalloc(&da, a.size() * sizeof(float)));
  NG_CUDA_OK(cudaMalloc(&db, n * sizeof(uint4)));
  NG_CUDA_OK(cudaMalloc(&dout, n * sizeof(uint4)));
  NG_CUDA_OK(cudaMemcpy(da, a.data(), a.size() * sizeof(float), cudaMemcpyHostToDevice));
  NG_CUDA_OK(cudaMemcpy(db, b.data(), b.size() * sizeof(uint16_t), cudaMemcpyHostToDevice));
  for (const int which : {0, 1, 2}) {
    SCOPED_TRACE(which == 2 ? "lean_sum_group" : which == 1 ? "sum_group_fast" : "sum_group");
    NG_CUDA_OK(cudaMemset(dout, 0xFF, n * sizeof(uint4)));  // poison
    sum_groups_kernel<<<(n + 255) / 256, 256>>>(da, db, dout, n, which);
    NG_CUDA_OK(cudaGetLastError());
    std::vector<uint16_t> got(a.size());
    NG_CUDA_OK(cudaMemcpy(got.data(), dout, got.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost));
    int64_t bad = 0, nans = 0;
    auto is_nan = [](uint16_t h) { return (h & 0x7F80u) == 0x7F80u && (h & 0x007Fu) != 0u; };
    for (size_t i = 0; i < a.size(); ++i) {
      const uint16_t want = bf16_sum_rn(a[i], bf16_to_float(b[i]));
      // A NaN sum is NaN on both sides, but its payload is the adder's: the
      // GPU's FP32 add returns the canonical NaN, the host's keeps an operand's.
      if (is_nan(want) && is_nan(got[i])) {
        ++nans;
        continue;
      }
      if (got[i] != want && ++bad <= 10)
        ADD_FAILURE() << "element " << i << ": a bits 0x" << std::hex << u_of(a[i]) << ", b 0x" << b[i] << ": got 0x"
                      << got[i] << ", bf16_sum_rn 0x" << want << std::dec;
    }
    EXPECT_EQ(bad, 0);
    EXPECT_GT(nans, 0);  // NaN inputs were there, and came out NaN
  }
  cudaFree(da);
  cudaFree(db);
  cudaFree(dout);
}

// team_sum<double> (the forward's binary64 sum of squares:
// docs/perf/numerics.md, D1) on the device against the host's
// model_team_sum, raw doubles bit for bit, for every team size 32..1024 in
// one CTA: partials where the order matters (2^53 absorbs a lone 1 but not
// two 1s added first) in chosen lanes and warps, and random doubles. An
// order difference would move the FP32 rstd in only ~1 row in 10^7, so the
// end-to-end tests could not see it.
__global__ void team_sum_double_kernel(const double* p, double* out, int team) {
  __shared__ double red[32];
  const double v = team_sum(p[threadIdx.x], red, team, 0);
  out[threadIdx.x] = v;
}

TEST(TeamSumDouble, EqualsTheHostModelForEveryTeamSize) {
  if (!has_gpu()) GTEST_SKIP() << "no CUDA device: team_sum runs on the GPU only";
  double *dp = nullptr, *dout = nullptr;
  NG_CUDA_OK(cudaMalloc(&dp, 1024 * sizeof(double)));
  NG_CUDA_OK(cudaMalloc(&dout, 1024 * sizeof(double)));
  std::mt19937_64 g(99);
  std::normal_distribution<double> nd(0.0, 1.0);
  int checked = 0;
  for (int team = 32; team <= 1024; team += 32) {
    for (int pattern = 0; pattern < 4; ++pattern) {
      std::vector<double> p(static_cast<size_t>(team), 0.0);
      if (pattern == 0) {  // 2^53 in lane 0, 1s in lane 1 and in the last warp's lanes 0 and 1
        p[0] = 0x1p53;
        p[1] = 1.0;
        p[static_cast<size_t>(team - 32)] += 1.0;
        p[static_cast<size_t>(team - 31)] += 1.0;
      } else if (pattern == 1) {  // 1s everywhere but a 2^53 in the middle warp
        for (auto& v : p) v = 1.0;
        p[static_cast<size_t>(team / 64 * 32 + 7)] = 0x1p53;
      } else {  // squares of random values over many magnitudes
        for (auto& v : p) {
          const double x = std::ldexp(nd(g), static_cast<int>(g() % 40) - 20);
          v = x * x;
        }
      }
      NG_CUDA_OK(cudaMemcpy(dp, p.data(), p.size() * sizeof(double), cudaMemcpyHostToDevice));
      team_sum_double_kernel<<<1, team>>>(dp, dout, team);
      NG_CUDA_OK(cudaGetLastError());
      std::vector<double> got(static_cast<size_t>(team));
      NG_CUDA_OK(cudaMemcpy(got.data(), dout, got.size() * sizeof(double), cudaMemcpyDeviceToHost));
      const double want = model_team_sum(p.data(), team);
      for (int t = 0; t < team; ++t)
        ASSERT_EQ(std::memcmp(&got[static_cast<size_t>(t)], &want, sizeof(double)), 0)
            << "team " << team << ", pattern " << pattern << ", thread " << t << ": got " << got[static_cast<size_t>(t)]
            << ", model " << want;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 32 * 4);
  cudaFree(dp);
  cudaFree(dout);
}

// row_rstd_fp64 on the device (rsqrtf start for 2^-120 < m < 2^120, the
// binary64 start elsewhere, the stepping loop below 2^-250, the FLT_MAX /
// +inf boundary, m = 0, Inf, NaN: paths eps > 0 cases never reach) against
// the host's, bit for bit.
__global__ void row_rstd_kernel(const double* ss, float* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = row_rstd_fp64(ss[i], 1.0, 0.0);
}

TEST(RowRstd, DeviceEqualsHostOnEveryPath) {
  if (!has_gpu()) GTEST_SKIP() << "no CUDA device: row_rstd_fp64's device start runs on the GPU only";
  std::vector<double> m = {0.0, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN(),
                           0x1p-266, 0x1.000001000000dp-256, 0x1p-256, 0x1p-250, 0x1p-121, 0x1p-120, 1.0, 0x1p120,
                           0x1p121, 0x1p270, 7.0e76};
  std::mt19937_64 g(5);
  std::uniform_real_distribution<double> ex(-266.0, 271.0), mant(1.0, 2.0);
  for (int i = 0; i < 200000; ++i) m.push_back(std::ldexp(mant(g), static_cast<int>(std::floor(ex(g)))));
  const int n = static_cast<int>(m.size());
  double* dm = nullptr;
  float* dout = nullptr;
  NG_CUDA_OK(cudaMalloc(&dm, m.size() * sizeof(double)));
  NG_CUDA_OK(cudaMalloc(&dout, m.size() * sizeof(float)));
  NG_CUDA_OK(cudaMemcpy(dm, m.data(), m.size() * sizeof(double), cudaMemcpyHostToDevice));
  row_rstd_kernel<<<(n + 255) / 256, 256>>>(dm, dout, n);
  NG_CUDA_OK(cudaGetLastError());
  std::vector<float> got(m.size());
  NG_CUDA_OK(cudaMemcpy(got.data(), dout, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int i = 0; i < n; ++i) {
    const float want = row_rstd_fp64(m[static_cast<size_t>(i)], 1.0, 0.0);
    if (std::isnan(want) && std::isnan(got[static_cast<size_t>(i)])) continue;
    if (u_of(want) != u_of(got[static_cast<size_t>(i)]) && ++bad <= 10)
      ADD_FAILURE() << "m = " << m[static_cast<size_t>(i)] << ": device " << got[static_cast<size_t>(i)] << ", host "
                    << want;
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(got[4], std::numeric_limits<float>::max());  // the boundary case: FLT_MAX, not +inf
  EXPECT_EQ(got[3], std::numeric_limits<float>::infinity());
  cudaFree(dm);
  cudaFree(dout);
}

}  // namespace
}  // namespace normgate::kernels::dev

// --- CUDA error messages (cuda_check.h; host code, runs without a GPU) -------

#include "cuda_check.h"

namespace normgate::kernels::detail {
namespace {

// A failed NG_CUDA(call) names the call: short calls whole, a long one (a
// callee taking a lambda) by the callee alone, not hundreds of characters of
// source.
TEST(CudaCheck, MessagesNameTheCallNotItsSource) {
  EXPECT_EQ(cuda_call_text("cudaMemsetAsync(p, 0, n, s)"), "cudaMemsetAsync(p, 0, n, s)");
  const std::string lambda =
      "dev::dispatch_chunk_pass(a, vec, [&](auto kind, auto res_tag, const auto& r, const dev::ChunkLaunch& cfg) "
      "{ constexpr bool kRes = decltype(res_tag)::value; if constexpr (decltype(kind)::value == "
      "dev::ChunkKernel::narrow) { launched = true; } })";
  EXPECT_EQ(cuda_call_text(lambda.c_str()), "dev::dispatch_chunk_pass(...)");
  const std::string no_paren(100, 'x');
  EXPECT_EQ(cuda_call_text(no_paren.c_str()), std::string(72, 'x') + "(...)");
  try {
    throw_cuda(cudaErrorInsufficientDriver, lambda.c_str(), "bwd_det_heads.cu", 84);
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.find("[&]"), std::string::npos) << m;
    EXPECT_NE(m.find("CUDA error: dev::dispatch_chunk_pass(...) at bwd_det_heads.cu:84: cudaErrorInsufficientDriver"),
              std::string::npos)
        << m;
  }
}

}  // namespace
}  // namespace normgate::kernels::detail
