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

}  // namespace
}  // namespace normgate::kernels::test
