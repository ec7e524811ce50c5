// tests/harness/device_inputs_test.cpp: inputs generated on the GPU
// (harness/runner.h generate_inputs_on_gpu) are byte for byte the host
// generator's, for every family, both weight dtypes, form res and one row.
// Skipped without a CUDA device.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "util/gpu_test_util.h"
#include "util/kernel_test_util.h"
#include "normgate/seeds/generate.h"
#include "normgate/harness/runner.h"

namespace normgate::kernels::test {
namespace {

// --- device inputs ------------------------------------------------------------

class DeviceInputs : public ::testing::TestWithParam<seeds::CaseId> {};

TEST_P(DeviceInputs, ByteIdenticalToHostGenerator) {
  NG_REQUIRE_GPU();
  const seeds::CaseId& c = GetParam();
  const seeds::HostInputs h = seeds::generate_host(c);
  const seeds::HostInputs d = generate_inputs_on_gpu(c);
  const seeds::InputDigests dh = seeds::digest(h), dd = seeds::digest(d);
  EXPECT_EQ(dd.x, dh.x);
  EXPECT_EQ(dd.dy, dh.dy);
  EXPECT_EQ(dd.w, dh.w);
  EXPECT_EQ(dd.u, dh.u);
  EXPECT_EQ(dd.dh_new, dh.dh_new);
  EXPECT_EQ(dd.all, dh.all);
}

std::vector<seeds::CaseId> input_cases() {
  using seeds::Family;
  std::vector<seeds::CaseId> out;
  uint64_t seed = 3;
  for (Family f : {Family::normal, Family::llm, Family::cancel, Family::zeros, Family::tiny, Family::huge,
                   Family::specials, Family::epsnear})
    for (WDtype w : {WDtype::bf16, WDtype::fp32}) out.push_back(make_case(f == Family::cancel ? 64 : 1000, 257, f, seed++, w));
  seeds::CaseId res = make_case(256, 33, Family::llm, 77);
  res.form = Form::res;
  out.push_back(res);
  out.push_back(make_case(7, 1, Family::normal, 5));
  return out;
}

INSTANTIATE_TEST_SUITE_P(Cases, DeviceInputs, ::testing::ValuesIn(input_cases()),
                         [](const ::testing::TestParamInfo<seeds::CaseId>& i) {
                           std::string s = std::string(seeds::to_string(i.param.family)) + "_H" +
                                           std::to_string(i.param.H) + "_T" + std::to_string(i.param.T) + "_w" +
                                           std::string(to_string(i.param.w)) + "_" +
                                           std::string(to_string(i.param.form)) + "_s" + std::to_string(i.param.seed);
                           return s;
                         });

#if defined(NORMGATE_KERNELS_HAVE_CUDA)
// The runner's layouts: per-head rows inside packed qkv rows (stride 40 x 256,
// head stride 256), rows 16-byte aligned (one vector store per 8 values) and
// misaligned by one element (the scalar kernel). Every row equals the host
// generator's; the gaps between rows keep their fill; a null dy is skipped.
TEST(DeviceInputs, StridedHeadsAndMisalignedRowsMatchTheHost) {
  NG_REQUIRE_GPU();
  seeds::CaseId c = make_case(256, 5, seeds::Family::llm, 9);
  c.form = Form::heads24;
  const seeds::HostInputs h = seeds::generate_host(c);
  const int64_t heads = 24, stride = 40 * 256, T = c.T, H = c.H;
  const size_t elems = static_cast<size_t>(T * stride + 16);
  for (int64_t mis : {0, 1}) {
    for (bool with_dy : {true, false}) {
      SCOPED_TRACE("misaligned by " + std::to_string(mis) + (with_dy ? ", dy" : ", no dy"));
      const DevMem bx(elems * 2), bdy(elems * 2), bw(static_cast<size_t>(H) * 2);
      ASSERT_EQ(cudaMemset(bx.p, 0xFF, elems * 2), cudaSuccess);
      ASSERT_EQ(cudaMemset(bdy.p, 0xFF, elems * 2), cudaSuccess);
      DeviceInputBuffers b;
      b.x = bx.as<uint16_t>() + mis;
      b.x_stride = stride;
      b.dy = with_dy ? bdy.as<uint16_t>() + mis : nullptr;
      b.dy_stride = stride;
      b.w = bw.p;
      b.heads = heads;
      b.stride_h = H;
      generate_device_inputs(c, b);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<uint16_t> x(elems), dy(elems);
      ASSERT_EQ(cudaMemcpy(x.data(), bx.p, elems * 2, cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(dy.data(), bdy.p, elems * 2, cudaMemcpyDeviceToHost), cudaSuccess);
      std::vector<char> data(elems, 0);
      int64_t bad_x = 0, bad_dy = 0;
      for (int64_t r = 0; r < T * heads; ++r)
        for (int64_t j = 0; j < H; ++j) {
          const size_t at = static_cast<size_t>(mis + (r / heads) * stride + (r % heads) * H + j);
          data[at] = 1;
          bad_x += x[at] != h.x[static_cast<size_t>(r * H + j)];
          bad_dy += with_dy ? dy[at] != h.dy[static_cast<size_t>(r * H + j)] : dy[at] != 0xFFFF;
        }
      EXPECT_EQ(bad_x, 0);
      EXPECT_EQ(bad_dy, 0);
      int64_t touched = 0;
      for (size_t k = 0; k < elems; ++k) touched += !data[k] && (x[k] != 0xFFFF || dy[k] != 0xFFFF);
      EXPECT_EQ(touched, 0);  // the k and v parts, the misalignment's first element, the tail
    }
  }
}
#endif  // NORMGATE_KERNELS_HAVE_CUDA

}  // namespace
}  // namespace normgate::kernels::test
