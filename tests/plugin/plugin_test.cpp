// tests/plugin/plugin_test.cpp: the plugin loader (plugin/loader.h) on the
// example host reference (examples/plugin/host_reference.cpp) and on the small
// test plugins of tests/plugin/libs/test_plugin.cpp: every refusal names the
// library and the field; the reference's runs pass the oracle's budgets in
// every form; writes outside a view and failing entries are caught.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "normgate/core/host_memory.h"
#include "normgate/harness/pipeline.h"
#include "normgate/kernels/device.h"
#include "normgate/kernels/registry.h"
#include "normgate/plugin/loader.h"
#include "normgate/seeds/case_id.h"
#include "normgate/seeds/generate.h"

namespace normgate::plugin {
namespace {

std::string tp(const std::string& name) { return std::string(NG_TEST_PLUGIN_DIR) + "/libtp_" + name + ".so"; }

// The message of the std::invalid_argument load_plugin(path) throws ("" if none).
std::string load_error(const std::string& path) {
  try {
    load_plugin(path);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

const validators::ExternalImpl& find(const std::vector<validators::ExternalImpl>& v, const std::string& name) {
  for (const auto& e : v)
    if (e.name == name) return e;
  throw std::runtime_error("no impl " + name);
}

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

TEST(PluginLoad, HostReferenceDescribesItsTwoVariants) {
  const auto impls = load_plugin(NG_REF_PLUGIN);
  ASSERT_EQ(impls.size(), 2u);
  const auto& f = find(impls, "ex_ref_fwd");
  const auto& b = find(impls, "ex_ref_bwd");
  EXPECT_EQ(f.op, kernels::Op::fwd);
  EXPECT_EQ(b.op, kernels::Op::bwd);
  EXPECT_EQ(b.mode, kernels::Mode::det);
  EXPECT_EQ(b.h_min, 1);
  EXPECT_EQ(b.h_max, 16384);
  EXPECT_EQ(b.wdtypes, 0b11);
  EXPECT_EQ(b.forms, 0b1111);
  EXPECT_EQ(b.ran_on, "plugin on host (cpu)");
  EXPECT_TRUE(has(b.origin, "plugin /")) << b.origin;  // an absolute path
  EXPECT_TRUE(has(b.origin, "ng_ref_plugin")) << b.origin;
  EXPECT_TRUE(has(b.description, "compensated")) << b.description;
}

// The hash the plugin states is cmake/NormgatePlugin.cmake's manifest over its
// sources: `sha256sum host_reference.cpp rmsnorm_math.h | sha256sum`.
TEST(PluginLoad, SourceHashIsTheManifestOfItsFiles) {
  std::string manifest;
  for (const char* f : {"host_reference.cpp", "rmsnorm_math.h"}) {
    const std::string bytes = file_bytes(std::string(NORMGATE_SOURCE_DIR) + "/examples/plugin/" + f);
    ASSERT_FALSE(bytes.empty()) << f;
    manifest += seeds::sha256_hex(bytes.data(), bytes.size()) + "  " + f + "\n";
  }
  const std::string want = seeds::sha256_hex(manifest.data(), manifest.size());
  for (const auto& e : load_plugin(NG_REF_PLUGIN)) EXPECT_EQ(e.source_sha256, want) << e.name;
}

TEST(PluginLoad, RefusesWhatIsNotAPlugin) {
  EXPECT_TRUE(has(load_error("/nonexistent/libx.so"), "plugin '/nonexistent/libx.so': no such file"));
  const std::string text = std::string(NORMGATE_SOURCE_DIR) + "/examples/plugin/routes.toml";
  const std::string e = load_error(text);
  EXPECT_TRUE(has(e, "cannot load it")) << e;
  EXPECT_TRUE(has(e, "routes.toml")) << e;
  const std::string noentry = load_error(tp("noentry"));
  EXPECT_TRUE(has(noentry, "libtp_noentry.so': no symbol 'ng_plugin_v1'")) << noentry;
  const std::string null = load_error(tp("null"));
  EXPECT_TRUE(has(null, "ng_plugin_v1() returned NULL")) << null;
}

TEST(PluginLoad, RefusesAnotherAbiVersion) {
  const std::string e = load_error(tp("version"));
  EXPECT_TRUE(has(e, "libtp_version.so': abi_version is 2, this normgate reads ABI version 1")) << e;
}

TEST(PluginLoad, RefusesBadFieldsNamingVariantAndField) {
  const std::string sha = load_error(tp("badsha"));
  EXPECT_TRUE(has(sha, "libtp_badsha.so': variant 0 ('tp_badsha'): source_sha256 'abc' is not 64 lowercase hex"))
      << sha;
  const std::string form = load_error(tp("badform"));
  EXPECT_TRUE(has(form, "variant 0 ('tp_badform'): forms is 0x10")) << form;
  const std::string fb = load_error(tp("fwdbwd"));
  EXPECT_TRUE(has(fb, "variant 0 ('tp_fwdbwd'): bwd is set on a forward variant")) << fb;
}

TEST(PluginLoad, RefusesDuplicateAndRegisteredNames) {
  const std::string dup = load_error(tp("dup"));
  EXPECT_TRUE(has(dup, "variant 1: name 'tp_dup' is also variant 0's")) << dup;
  const std::string clash = load_error(tp("clash"));
  EXPECT_TRUE(has(clash, "name 'bwd_det_chunked' is a registered variant")) << clash;
}

TEST(PluginLoad, DeviceVariantNeedsAGpu) {
  if (kernels::gpu_available()) {
    const auto impls = load_plugin(tp("device"));
    ASSERT_EQ(impls.size(), 1u);
    EXPECT_TRUE(has(impls[0].ran_on, "plugin on gpu")) << impls[0].ran_on;
    return;
  }
  const std::string e = load_error(tp("device"));
  EXPECT_TRUE(has(e, "variant 0 ('tp_device'): a device-memory variant, but this")) << e;
}

// One step of `impl` on case `id`, validated by the oracle (what check and
// the gate do with its outputs).
validators::CaseResult run_and_validate(const validators::ExternalImpl& impl, const std::string& id) {
  const seeds::HostInputs in = seeds::generate_host(seeds::parse_case(id));
  Outputs out;
  impl.run(in, out);
  validators::CaseOracle o(in, oracle::OracleMode::auto_, 2);
  if (impl.op == kernels::Op::fwd) {
    const validators::OutputsRef got{&out.y, &out.rstd, nullptr, nullptr, out.h_new.empty() ? nullptr : &out.h_new};
    return validators::validate_present(o.problem, got, o.ref, o.ideal, &o.baseline, 2, o.h_new_expected);
  }
  return validators::validate_case(o.problem, out, o.ref, o.ideal, &o.baseline, 2, o.h_new_expected);
}

TEST(PluginRun, HostReferencePassesEveryForm) {
  const auto impls = load_plugin(NG_REF_PLUGIN);
  const auto& bwd = find(impls, "ex_ref_bwd");
  for (const char* id : {"H=200,T=37,w=bf16,form=plain,family=cancel,seed=0",
                         "H=64,T=300,w=fp32,form=plain,family=cancel,seed=3",
                         "H=96,T=20,w=bf16,form=res,family=llm,seed=1",
                         "H=256,T=5,w=fp32,form=heads24,family=cancel,seed=2",
                         "H=256,T=9,w=bf16,form=heads4,family=normal,seed=4"}) {
    const auto r = run_and_validate(bwd, id);
    EXPECT_TRUE(r.pass()) << id << ": y " << r.get(validators::Output::y).worst.ratio << ", dx "
                          << r.get(validators::Output::dx).worst.ratio << ", dw "
                          << r.get(validators::Output::dw).worst.ratio;
    // cancel: the compensated binary64 dw is far inside its budget (an FP32 sum is not)
    if (has(id, "cancel")) {
      EXPECT_LT(r.get(validators::Output::dw).worst.ratio, 0.05) << id;
    }
  }
}

TEST(PluginRun, ForwardVariantWritesOnlyTheForward) {
  const auto impls = load_plugin(NG_REF_PLUGIN);
  const auto& fwd = find(impls, "ex_ref_fwd");
  const seeds::HostInputs in = seeds::generate_host(seeds::parse_case("H=32,T=3,w=bf16,form=res,family=normal,seed=0"));
  Outputs out;  // as the harness hands it over: every output sized and poisoned
  out.dx.assign(96, 0x7FC0);
  out.dw.assign(32, 1.5f);
  fwd.run(in, out);
  EXPECT_EQ(out.y.size(), 96u);
  EXPECT_EQ(out.rstd.size(), 3u);
  EXPECT_EQ(out.h_new.size(), 96u);
  EXPECT_EQ(out.dx, std::vector<uint16_t>(96, 0x7FC0));  // a forward variant leaves dx, dw alone
  EXPECT_EQ(out.dw, std::vector<float>(32, 1.5f));
  EXPECT_TRUE(run_and_validate(fwd, "H=256,T=7,w=fp32,form=heads24,family=llm,seed=5").pass());
}

TEST(PluginRun, TZeroWritesZeroDw) {
  const auto impls = load_plugin(NG_REF_PLUGIN);
  const seeds::HostInputs in = seeds::generate_host(seeds::parse_case("H=48,T=0,w=bf16,form=plain,family=normal,seed=0"));
  Outputs out;
  find(impls, "ex_ref_bwd").run(in, out);
  EXPECT_TRUE(out.y.empty());
  ASSERT_EQ(out.dw.size(), 48u);
  for (float v : out.dw) EXPECT_EQ(v, 0.0f);
}

// A plugin that ignores the row stride writes into the gaps between rows.
TEST(PluginRun, WriteOutsideTheViewFailsTheRun) {
  const auto impls = load_plugin(tp("stride"));
  const seeds::HostInputs in = seeds::generate_host(seeds::parse_case("H=16,T=4,w=bf16,form=plain,family=normal,seed=0"));
  Outputs out;
  try {
    impls[0].run(in, out);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(has(e.what(), "variant 'tp_stride': wrote outside the view of y")) << e.what();
  }
  // The same library honouring strides (tp_ok) runs clean on the same layout.
  Outputs ok;
  load_plugin(tp("ok"))[0].run(in, ok);
  EXPECT_EQ(ok.y, in.x);
}

// The std::runtime_error text of the first variant of test plugin `name`
// run on [2, 16] (normal, seed 0); "no error" when it runs clean.
std::string run_error(const std::string& name) {
  const auto impls = load_plugin(tp(name));
  const seeds::HostInputs in = seeds::generate_host(seeds::parse_case("H=16,T=2,w=bf16,form=plain,family=normal,seed=0"));
  Outputs out;
  try {
    impls[0].run(in, out);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "no error";
}

TEST(PluginRun, FailingEntryNamesItsMessage) {
  // The byte that is not UTF-8 as \xff text, the valid U+00E9 kept: the
  // same valid UTF-8 on stdout, in the reports and in the journal.
  const std::string e = run_error("einval");
  EXPECT_TRUE(has(e, "variant 'tp_einval': fwd returned 2 (invalid arguments): tp_einval: refuses H=16 \\xff\xc3\xa9"))
      << e;
}

// A host workspace is filled before the call, so every page is touched: one
// past what the process may use is refused by name, not left to the OOM
// killer (the allocation itself succeeds under overcommit).
TEST(PluginRun, HostWorkspacePastTheHostsMemoryIsRefused) {
  const normgate::core::HostMemory hm = normgate::core::host_memory();
  if (hm.usable() == 0 || hm.usable() >= (uint64_t{1} << 40)) GTEST_SKIP() << "no memory bound below 1 TiB known";
  const std::string e = run_error("bigws");
  EXPECT_TRUE(has(e, "variant 'tp_bigws': bwd_workspace_bytes asks for a host workspace of 1024.0 GiB "
                     "(1099511627776 bytes) for T=2, H=16, more than "))
      << e;
}

// What a run holds beside its case's tensors, for the check before any
// work: a host variant's workspace (asked for the case's shape) on top of the
// staging copies, which follow the views' strides: a heads24 row of T is a
// packed qkv row of 40 x 256, so its four BF16 buffers (x, dy, y, dx) take
// 4 x 2 x 10240 bytes a T, not the case's 4 x 2 x 6144.
TEST(PluginRun, HostBytesCountTheWorkspaceAndTheStridedStaging) {
  const auto big = load_plugin(tp("bigws"));
  ASSERT_TRUE(static_cast<bool>(big[0].host_bytes));
  const auto c = seeds::parse_case("H=256,T=2,w=bf16,form=heads24,family=normal,seed=0");
  const uint64_t b = big[0].host_bytes(c);
  EXPECT_GE(b, (uint64_t{1} << 40) + 4 * 2 * 2 * 10240) << b;
  EXPECT_LT(b, (uint64_t{1} << 40) + (1u << 20)) << b;
  // The example's backward: no workspace; res stages seven buffers, plain four.
  const auto ref = load_plugin(NG_REF_PLUGIN);
  const auto& rb = find(ref, "ex_ref_bwd");
  const uint64_t plain = rb.host_bytes(seeds::parse_case("H=1024,T=64,w=bf16,form=plain,family=normal,seed=0"));
  const uint64_t res = rb.host_bytes(seeds::parse_case("H=1024,T=64,w=bf16,form=res,family=normal,seed=0"));
  EXPECT_GE(plain, uint64_t{4} * 2 * 64 * 1032) << plain;
  EXPECT_GE(res, uint64_t{7} * 2 * 64 * 1032) << res;
  EXPECT_LT(res, uint64_t{9} * 2 * 64 * 1032) << res;
}

TEST(PluginRegister, TwoPluginsSharingANameRegisterNothing) {
  try {
    register_plugins({NG_REF_PLUGIN, tp("same")});
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_TRUE(has(e.what(), "variant 'ex_ref_bwd' is also a variant of plugin")) << e.what();
  }
  EXPECT_EQ(kernels::find_variant("ex_ref_fwd"), nullptr);  // checked before the first registration
  const auto regs = register_plugins({NG_REF_PLUGIN});
  ASSERT_EQ(regs.size(), 2u);
  EXPECT_EQ(kernels::find_variant("ex_ref_bwd"), regs[1]);
  EXPECT_EQ(regs[1]->op, kernels::Op::bwd);
  // The same library may be loaded again (it re-registers the same variants);
  // another library using a registered name may not.
  EXPECT_EQ(register_plugins({NG_REF_PLUGIN}), regs);
  const std::string e = load_error(tp("same"));
  EXPECT_TRUE(has(e, "variant 0 ('ex_ref_bwd'): name 'ex_ref_bwd' is already registered by plugin /")) << e;
}

}  // namespace
}  // namespace normgate::plugin
