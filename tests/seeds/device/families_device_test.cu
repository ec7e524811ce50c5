// Device half of the seeds tests (built only when CUDA is available; see
// seeds/CMakeLists.txt): a CUDA kernel calling family_value must produce the
// bytes generate_host produces, and the transforms must agree bitwise with
// their host evaluation. Skips when no CUDA device is present.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "normgate/core/bf16.h"
#include "normgate/seeds/families.h"
#include "normgate/seeds/generate.h"

namespace normgate::seeds {
namespace {

#define NG_CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr << ": " << cudaGetErrorString(cudaGetLastError())

__global__ void gen_bf16(FamilyParams p, Tensor t, int64_t rows, int64_t cols, uint16_t* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < rows * cols) out[i] = bf16_from_float(family_value(p, t, i / cols, i % cols));
}

__global__ void gen_w(FamilyParams p, int64_t cols, float* out) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j < cols) out[j] = family_value(p, Tensor::w, 0, j);
}

// Inputs for the transforms sweep: two scrambled words per index.
NG_HD uint32_t word_a(uint32_t i) { return i * 2654435761u; }
NG_HD uint32_t word_b(uint32_t i) { return i * 40503u + 12345u; }

NG_HD void transforms_at(uint32_t i, uint32_t* o) {
  const uint32_t a = word_a(i), b = word_b(i);
  const Normal2 z = box_muller(a, b);
  const Normal2 y = box_muller(b, a);
  const SinCos sc = sincos_2pi(u01_open(b));
  o[0] = float_bits(z.z0);
  o[1] = float_bits(z.z1);
  o[2] = float_bits(exp2_approx(fma_rn(300.0f, u01_open(a), -160.0f)));
  o[3] = float_bits(student_t3(z.z0, z.z1, y.z0, y.z1));
  o[4] = float_bits(log_approx(u01_open(a)));
  o[5] = float_bits(sc.s);
  o[6] = float_bits(log_uniform(u01_open(a), 1e19f, 3e38f));
  o[7] = philox4x32_10(Philox4{{a, b, i, 0u}}, Key2{{b, a}}).v[i & 3u];
}
constexpr int kTransformOutputs = 8;

__global__ void transforms_kernel(uint32_t n, uint32_t* out) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) transforms_at(i, out + static_cast<size_t>(kTransformOutputs) * i);
}

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// GPU version of generate_host's tensors.
void device_generate(const CaseId& c, HostInputs& out) {
  const FamilyParams p = family_params(c);
  out.id = c;
  out.rows = c.rows();
  out.cols = c.H;
  const int64_t n = out.rows * out.cols;
  uint16_t* d = nullptr;
  NG_CUDA_OK(cudaMalloc(&d, 2 * static_cast<size_t>(n > 0 ? n : 1)));
  const Tensor ts[] = {Tensor::x, Tensor::dy, Tensor::u, Tensor::dh_new};
  std::vector<uint16_t>* dst[] = {&out.x, &out.dy, &out.u, &out.dh_new};
  for (int k = 0; k < 4; ++k) {
    if (k >= 2 && c.form != Form::res) continue;
    if (n > 0) gen_bf16<<<static_cast<unsigned>((n + 255) / 256), 256>>>(p, ts[k], out.rows, out.cols, d);
    NG_CUDA_OK(cudaGetLastError());
    dst[k]->resize(static_cast<size_t>(n));
    NG_CUDA_OK(cudaMemcpy(dst[k]->data(), d, 2 * static_cast<size_t>(n), cudaMemcpyDeviceToHost));
  }
  NG_CUDA_OK(cudaFree(d));
  float* dw = nullptr;
  NG_CUDA_OK(cudaMalloc(&dw, 4 * static_cast<size_t>(c.H)));
  gen_w<<<static_cast<unsigned>((c.H + 255) / 256), 256>>>(p, c.H, dw);
  NG_CUDA_OK(cudaGetLastError());
  std::vector<float> w(static_cast<size_t>(c.H));
  NG_CUDA_OK(cudaMemcpy(w.data(), dw, 4 * static_cast<size_t>(c.H), cudaMemcpyDeviceToHost));
  NG_CUDA_OK(cudaFree(dw));
  if (c.w == WDtype::bf16) {
    for (float v : w) out.w_bf16.push_back(bf16_from_float(v));
  } else {
    out.w_f32 = w;
  }
}

TEST(SeedsDevice, KernelGeneratesTheHostBytes) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const char* ids[] = {
      "H=1024,T=257,w=bf16,form=plain,family=normal,seed=42",
      "H=1024,T=257,w=fp32,form=res,family=llm,seed=43",
      "H=1024,T=257,w=fp32,form=plain,family=llm,seed=18446744073709551615",
      "H=256,T=65537,w=bf16,form=res,family=cancel,seed=44",
      "H=2048,T=33,w=bf16,form=plain,family=cancel,seed=45,kappa=1e+12",
      "H=256,T=40,w=bf16,form=heads24,family=zeros,seed=46",
      "H=512,T=257,w=fp32,form=res,family=tiny,seed=47",
      "H=512,T=257,w=bf16,form=plain,family=huge,seed=48",
      "H=256,T=300,w=fp32,form=heads4,family=specials,seed=49",
      "H=1000,T=257,w=bf16,form=plain,family=epsnear,seed=50",
      "H=256,T=100,w=fp32,form=res,family=epsnear,seed=51,eps=1e-05",
      "H=256,T=40,w=bf16,form=heads24,family=epsnear,seed=52,eps=1.1920928955078125e-07",
      // The pinned cases of generate_test.cpp (same digests expected).
      "H=64,T=33,w=bf16,form=plain,family=llm,seed=42",
      "H=64,T=33,w=bf16,form=res,family=llm,seed=42",
  };
  for (const char* id : ids) {
    SCOPED_TRACE(id);
    const CaseId c = parse_case(id);
    const HostInputs host = generate_host(c);
    HostInputs dev;
    device_generate(c, dev);
    EXPECT_TRUE(host.x == dev.x);
    EXPECT_TRUE(host.dy == dev.dy);
    EXPECT_TRUE(host.u == dev.u);
    EXPECT_TRUE(host.dh_new == dev.dh_new);
    EXPECT_TRUE(host.w_bf16 == dev.w_bf16);
    EXPECT_EQ(host.w_f32.size(), dev.w_f32.size());
    for (size_t j = 0; j < host.w_f32.size() && j < dev.w_f32.size(); ++j)
      ASSERT_EQ(float_bits(host.w_f32[j]), float_bits(dev.w_f32[j])) << j;
    EXPECT_EQ(digest(host).all, digest(dev).all);
  }
}

TEST(SeedsDevice, TransformsMatchHostBitwise) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const uint32_t n = 1u << 22;
  uint32_t* d = nullptr;
  const size_t bytes = sizeof(uint32_t) * kTransformOutputs * n;
  NG_CUDA_OK(cudaMalloc(&d, bytes));
  transforms_kernel<<<(n + 255) / 256, 256>>>(n, d);
  NG_CUDA_OK(cudaGetLastError());
  std::vector<uint32_t> dev(static_cast<size_t>(kTransformOutputs) * n);
  NG_CUDA_OK(cudaMemcpy(dev.data(), d, bytes, cudaMemcpyDeviceToHost));
  NG_CUDA_OK(cudaFree(d));
  int64_t bad = 0;
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t h[kTransformOutputs];
    transforms_at(i, h);
    for (int k = 0; k < kTransformOutputs; ++k) {
      const uint32_t g = dev[static_cast<size_t>(kTransformOutputs) * i + k];
      if (h[k] != g && ++bad <= 8) ADD_FAILURE() << "i=" << i << " output " << k << " host " << h[k] << " device " << g;
    }
  }
  EXPECT_EQ(bad, 0);
}

}  // namespace
}  // namespace normgate::seeds
