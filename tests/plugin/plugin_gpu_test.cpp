// tests/plugin/plugin_gpu_test.cpp: the CUDA example plugin
// (examples/plugin/cuda_rmsnorm.cu) through the loader's device path: upload,
// poisoned outputs, fwd and bwd on a stream, download, the outside-view
// checks; its outputs pass the oracle's budgets in every form, repeat bit for
// bit, and T = 0 writes dw = 0. Skips without a CUDA build or device.
#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <string>

#include "normgate/harness/pipeline.h"
#include "normgate/kernels/device.h"
#include "normgate/plugin/loader.h"
#include "normgate/seeds/case_id.h"
#include "normgate/seeds/generate.h"

namespace normgate::plugin {
namespace {

class CudaPlugin : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string(NG_CUDA_PLUGIN).empty())
      GTEST_SKIP() << "built without CUDA: examples/plugin/libng_cuda_plugin.so is not built";
    if (!kernels::gpu_available()) GTEST_SKIP() << "no usable CUDA device in this process";
    impls_ = load_plugin(NG_CUDA_PLUGIN);
  }
  const validators::ExternalImpl& impl(const std::string& name) {
    for (const auto& e : impls_)
      if (e.name == name) return e;
    throw std::runtime_error("no impl " + name);
  }
  std::vector<validators::ExternalImpl> impls_;
};

TEST_F(CudaPlugin, StepPassesTheOracleInEveryForm) {
  const auto& bwd = impl("ex_cuda_bwd");
  EXPECT_EQ(bwd.ran_on.rfind("plugin on gpu", 0), 0u) << bwd.ran_on;
  for (const char* id : {"H=2048,T=700,w=bf16,form=plain,family=cancel,seed=0",
                         "H=1000,T=300,w=fp32,form=plain,family=llm,seed=1",
                         "H=4096,T=65,w=bf16,form=res,family=cancel,seed=2",
                         "H=256,T=33,w=fp32,form=heads24,family=cancel,seed=3",
                         "H=256,T=17,w=bf16,form=heads4,family=normal,seed=4"}) {
    const seeds::HostInputs in = seeds::generate_host(seeds::parse_case(id));
    Outputs a, b;
    bwd.run(in, a);
    bwd.run(in, b);
    EXPECT_EQ(a.y, b.y) << id;
    EXPECT_EQ(a.dx, b.dx) << id;
    EXPECT_EQ(0, std::memcmp(a.dw.data(), b.dw.data(), a.dw.size() * 4)) << id << ": dw not deterministic";
    validators::CaseOracle o(in, oracle::OracleMode::auto_, 0);
    const auto r = validators::validate_case(o.problem, a, o.ref, o.ideal, &o.baseline, 0, o.h_new_expected);
    EXPECT_TRUE(r.pass()) << id << ": y " << r.get(validators::Output::y).worst.ratio << ", dx "
                          << r.get(validators::Output::dx).worst.ratio << ", dw "
                          << r.get(validators::Output::dw).worst.ratio;
  }
}

TEST_F(CudaPlugin, ForwardVariantAndTZero) {
  const seeds::HostInputs in = seeds::generate_host(seeds::parse_case("H=512,T=9,w=bf16,form=res,family=llm,seed=0"));
  Outputs f;
  impl("ex_cuda_fwd").run(in, f);
  EXPECT_EQ(f.y.size(), 9u * 512u);
  EXPECT_EQ(f.h_new.size(), 9u * 512u);
  EXPECT_TRUE(f.dw.empty());  // not touched by a forward variant
  const seeds::HostInputs z = seeds::generate_host(seeds::parse_case("H=300,T=0,w=fp32,form=plain,family=normal,seed=0"));
  Outputs o;
  impl("ex_cuda_bwd").run(z, o);
  ASSERT_EQ(o.dw.size(), 300u);
  for (float v : o.dw) EXPECT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace normgate::plugin
