// tests/gate/external_test.cpp: implementations from outside the registry
// (harness/external.h) through check and the gate: registration, poisoned
// outputs, verdicts, approvals going stale when the declared identity changes.
// The externals wrap CPU models (a correct backward, the FP32 sequential dw
// control) so that the verdicts are known; windows are small (H = 64).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <set>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "normgate/gate/gate.h"
#include "normgate/harness/external.h"
#include "normgate/kernels/models.h"
#include "normgate/kernels/registry.h"
#include "normgate/routing/routing.h"
#include "gate/gate_test_util.h"

namespace {

using namespace normgate;
using namespace normgate::validators;

std::string temp_dir(const std::string& name) { return test::fresh_dir("test_external", name); }

const std::string kShaA(64, 'a');
const std::string kShaB(64, 'b');

// An external whose step is the CPU model of forward `fwd` then backward `bwd`.
ExternalImpl model_impl(const std::string& name, const char* fwd, const char* bwd, kernels::Op op = kernels::Op::bwd) {
  ExternalImpl x;
  x.name = name;
  x.op = op;
  x.mode = kernels::Mode::det;
  x.h_min = 1;
  x.h_max = 4096;
  x.source_sha256 = kShaA;
  x.origin = "test";
  x.description = "CPU model of " + std::string(fwd) + " + " + bwd;
  x.ran_on = "test callback on cpu";
  const kernels::Variant* f = &kernels::variant(fwd);
  const kernels::Variant* b = &kernels::variant(bwd);
  x.run = [f, b](const seeds::HostInputs& in, Outputs& out) {
    const bool res = in.id.form == Form::res;
    const RowView<uint16_t> u = res ? RowView<uint16_t>::plain(in.u.data(), in.rows, in.cols) : RowView<uint16_t>{};
    const RowView<uint16_t> dh =
        res ? RowView<uint16_t>::plain(in.dh_new.data(), in.rows, in.cols) : RowView<uint16_t>{};
    Outputs o = kernels::run_model(*f, *b, in.x_view(), in.dy_view(), in.w_view(), static_cast<float>(in.id.eps), 1, u, dh);
    // Write into the (poisoned, sized) buffers, as a kernel writes its outputs.
    std::copy(o.y.begin(), o.y.end(), out.y.begin());
    std::copy(o.rstd.begin(), o.rstd.end(), out.rstd.begin());
    std::copy(o.dx.begin(), o.dx.end(), out.dx.begin());
    std::copy(o.dw.begin(), o.dw.end(), out.dw.begin());
    std::copy(o.h_new.begin(), o.h_new.end(), out.h_new.begin());
  };
  return x;
}

// A table with one bwd det window H=64 bf16 plain T=1..600 routed to `variant`.
std::string write_table(const std::string& dir, const std::string& variant, const char* op = "bwd") {
  const std::string path = dir + "/ext.toml";
  std::ofstream f(path);
  f << "arch = \"sm90a\"\ndescription = \"external test\"\nroute = [\n  { op = \"" << op << "\""
    << (std::string(op) == "bwd" ? ", mode = \"det\"" : "") << ", H = 64, w = \"bf16\", form = \"plain\", T = [1, 600], variant = \""
    << variant << "\" },\n]\n";
  return path;
}

// A table at `path` of two H = 64 BF16-w plain backward windows: det T =
// 1..det_hi on det_variant, nondet T = 1..nondet_hi on nondet_variant.
std::string write_det_nondet(const std::string& path, const std::string& det_variant, int det_hi,
                             const std::string& nondet_variant, int nondet_hi) {
  std::ofstream(path) << "arch = \"sm90a\"\ndescription = \"det and nondet\"\nroute = [\n"
                      << "  { op = \"bwd\", mode = \"det\", H = 64, w = \"bf16\", form = \"plain\", T = [1, " << det_hi
                      << "], variant = \"" << det_variant << "\" },\n"
                      << "  { op = \"bwd\", mode = \"nondet\", H = 64, w = \"bf16\", form = \"plain\", T = [1, "
                      << nondet_hi << "], variant = \"" << nondet_variant << "\" },\n]\n";
  return path;
}

GateOptions small_opts(const std::string& table) {
  GateOptions o;
  o.table_path = table;
  o.seeds = "3x1";
  o.t_per_window = 3;
  o.dense_points = 1;
  o.fresh_factor = 1;
  o.backend = Backend::cpu;
  o.threads = 1;
  return o;
}

// The one reader of an external's error prefix (harness/external.h): the
// kind and NAME at fixed places only; a quoted message changes neither.
TEST(External, ParseExternalErrorReadsTheKindAndNameAtFixedPlacesOnly) {
  using K = ExternalError::Kind;
  struct Row {
    std::string text;
    K kind;
    std::string impl;
  };
  const std::vector<Row> rows = {
      {"external implementation my_k (plugin /x/libk.so) failed on H=64,T=5: out of memory", K::failed, "my_k"},
      {"nondeterministic: external implementation my_k (python) is declared deterministic but two runs on H=64,T=5 "
       "gave different bits: rstd element 3 0x3f800000 vs 0x3f800001",
       K::nondeterministic, "my_k"},
      // Untagged: a failed run whatever its wording, which ORIGIN (a plugin's path) may supply.
      {"external implementation my_k (python) is declared deterministic but two runs on H=64,T=5 gave different bits",
       K::failed, "my_k"},
      {"external implementation my_k (plugin /x) is declared deterministic but two runs on y/libk.so) failed on "
       "H=64,T=5: out of memory",
       K::failed, "my_k"},
      {"contract broken: external implementation my_k (plugin /x/libk.so) on H=64,T=5: wrote outside the view of y",
       K::contract_broken, "my_k"},
      // A failed run quoting the wording or a tag in its own message stays a failed run of my_k.
      {"external implementation my_k (plugin /x/libk.so) failed on H=64,T=5: external implementation other (y) is "
       "declared deterministic but two runs on it",
       K::failed, "my_k"},
      {"external implementation my_k (plugin /x/libk.so) failed on H=64,T=5: nondeterministic: external "
       "implementation other (z)",
       K::failed, "my_k"},
      // Not an external's error at all.
      {"CUDA error: out of memory; contract broken: external implementation my_k (q)", K::none, ""},
      {"nondeterministic: dw differs", K::none, ""},
      {"contract broken: ", K::none, ""},
      {"external implementation  (x) failed", K::none, ""},
      {"external implementation my_k failed", K::none, ""},
      {"", K::none, ""},
  };
  for (const Row& r : rows) {
    const ExternalError e = parse_external_error(r.text);
    EXPECT_EQ(e.kind, r.kind) << r.text;
    EXPECT_EQ(e.impl, r.impl) << r.text;
    EXPECT_EQ(e.finding(), r.kind == K::nondeterministic || r.kind == K::contract_broken) << r.text;
  }
}

// A default-forward window beside a backward window of the same shape
// routed to an external (which runs its own forward): the backward
// window's refinement cases fall inside the forward window, which counts
// them, so they need a run with the default forward too. They had none:
// the forward window was ERROR ("no result") on a table that passes.
TEST(External, AForwardWindowBesideAnExternalBackwardGetsItsOwnRuns) {
  register_external(model_impl("ext_beside_fwd", "fwd_rowwise", "bwd_det_chunked"));
  const std::string dir = temp_dir("beside_fwd");
  const std::string table = dir + "/t.toml";
  std::ofstream(table) << "arch = \"sm90a\"\ndescription = \"beside\"\nroute = [\n"
                       << "  { op = \"fwd\", H = 64, w = \"bf16\", form = \"plain\", T = [9, 32], variant = "
                          "\"fwd_rowwise\" },\n"
                       << "  { op = \"bwd\", mode = \"det\", H = 64, w = \"bf16\", form = \"plain\", T = [9, 32], "
                          "variant = \"ext_beside_fwd\" },\n]\n";
  const GateResult r = run_gate(small_opts(table));
  ASSERT_EQ(r.windows.size(), 2u);
  for (const auto& w : r.windows) {
    EXPECT_EQ(w.errors, 0) << w.route.describe() << ": " << (w.error_samples.empty() ? "" : w.error_samples.front());
    EXPECT_TRUE(w.pass) << w.route.describe();
    EXPECT_GT(w.fresh.cases, 0) << w.route.describe();
  }
}

// A case shared by a built-in variant's window and an external's whose run
// fails: the error is the external's alone, and the case runs again for
// the built-in, whose window keeps its verdict. It was ERROR, on the
// external's message, with a rerun hint naming the built-in variant.
TEST(External, AFailingExternalDoesNotTakeABuiltInsResultsWithIt) {
  for (const bool contract : {false, true}) {
    const std::string name = contract ? "ext_shared_contract" : "ext_shared_boom";
    ExternalImpl x = model_impl(name, "fwd_rowwise", "bwd_det_chunked");
    x.run = [contract](const seeds::HostInputs&, Outputs&) {
      if (contract) throw ContractBroken("wrote outside the view of y (test)");
      throw std::runtime_error("boom (test)");
    };
    register_external(x);
    const std::string dir = temp_dir("shared_" + name);
    const std::string table = write_det_nondet(dir + "/t.toml", "bwd_det_chunked", 16, name, 16);
    GateOptions o = small_opts(table);
    o.journal_path = dir + "/j.jsonl";
    // The grid phase is reported done once every case has its records: the
    // external's error and the built-in's rerun (two runs a case).
    int64_t grid_total = 0, grid_runs_at_done = -1;
    o.progress = [&](const GateProgress& p) {
      if (p.phase == "grid" && p.done == p.total && grid_runs_at_done < 0) {
        grid_total = p.total;
        grid_runs_at_done = p.run_now;
      }
    };
    const GateResult r = run_gate(o);
    EXPECT_GT(grid_total, 0) << name;
    EXPECT_EQ(grid_runs_at_done, 2 * grid_total) << name;
    o.progress = nullptr;
    ASSERT_EQ(r.windows.size(), 2u);
    const WindowResult& builtin = r.windows[0];
    const WindowResult& ext = r.windows[1];
    EXPECT_TRUE(builtin.pass) << name;
    EXPECT_EQ(builtin.errors, 0) << name << ": " << (builtin.error_samples.empty() ? "" : builtin.error_samples[0]);
    EXPECT_FALSE(ext.pass) << name;
    EXPECT_EQ(ext.errors, ext.cases) << name;
    EXPECT_EQ(ext.contract_broken, contract ? ext.cases : 0) << name;
    EXPECT_EQ(ext.errored(), !contract) << name;
    // The journal resumes to the same verdicts without running anything.
    const GateResult again = run_gate(o);
    EXPECT_EQ(again.cases_run_now, 0) << name;
    EXPECT_TRUE(again.windows[0].pass) << name;
    EXPECT_EQ(again.windows[1].errors, ext.errors) << name;
  }
}

TEST(External, RegistersIntoTheRegistry) {
  const kernels::Variant& v = register_external(model_impl("ext_reg", "fwd_rowwise", "bwd_det_chunked"));
  EXPECT_TRUE(v.external);
  EXPECT_GE(static_cast<int>(v.id), kernels::kFirstExternalId);
  EXPECT_EQ(kernels::find_variant("ext_reg"), &v);
  EXPECT_EQ(v.source_sha256, kShaA);
  EXPECT_EQ(v.sources, "test");
  ASSERT_NE(find_external(v), nullptr);
  EXPECT_EQ(find_external(v)->ran_on, "test callback on cpu");
  // Re-registration (same origin) replaces the definition in place: same object.
  ExternalImpl again = model_impl("ext_reg", "fwd_rowwise", "bwd_det_chunked");
  again.source_sha256 = std::string(64, 'C');  // upper case hex is folded
  const kernels::Variant& w = register_external(again);
  EXPECT_EQ(&w, &v);
  EXPECT_EQ(v.source_sha256, std::string(64, 'c'));
  // The list of known names in an error includes it.
  try {
    kernels::variant("no_such_variant");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("ext_reg"), std::string::npos) << e.what();
  }
  EXPECT_NE(kernels::describe(v).find("EXTERNAL(test)"), std::string::npos);
}

TEST(External, BadFieldsAndClashesThrowNamingThem) {
  auto expect_throw = [](ExternalImpl x, const std::string& needle) {
    try {
      register_external(std::move(x));
      FAIL() << "no throw; expected " << needle;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_throw(model_impl("bwd_det_chunked", "fwd_rowwise", "bwd_det_chunked"), "built-in");
  ExternalImpl x = model_impl("ext_bad", "fwd_rowwise", "bwd_det_chunked");
  x.source_sha256 = "abc";
  expect_throw(x, "source_sha256 'abc'");
  x = model_impl("ext_bad", "fwd_rowwise", "bwd_det_chunked");
  x.h_max = 20000;
  expect_throw(x, "H range 1..20000");
  x = model_impl("ext bad", "fwd_rowwise", "bwd_det_chunked");
  expect_throw(x, "bad name");
  x = model_impl("ext_bad", "fwd_rowwise", "bwd_det_chunked");
  x.run = nullptr;
  expect_throw(x, "no run function");
  x = model_impl("ext_bad", "fwd_rowwise", "bwd_det_chunked");
  x.forms = 0;
  expect_throw(x, "forms 0");
  // Another origin under a registered external's name.
  register_external(model_impl("ext_taken", "fwd_rowwise", "bwd_det_chunked"));
  x = model_impl("ext_taken", "fwd_rowwise", "bwd_det_chunked");
  x.origin = "plugin /tmp/libother.so";
  expect_throw(x, "another origin");
  EXPECT_EQ(kernels::find_variant("ext_bad"), nullptr);  // nothing half-registered
  // Names the CLI reads otherwise.
  expect_throw(model_impl("all", "fwd_rowwise", "bwd_det_chunked"), "the name 'all' is reserved");
  expect_throw(model_impl("-x", "fwd_rowwise", "bwd_det_chunked"), "may not start with '-'");
  expect_throw(model_impl("ctl_mine", "fwd_rowwise", "bwd_det_chunked"), "'ctl_' are the negative controls'");
}

// A registration while a gate runs (from its progress callback here; another
// thread alike) is refused: it would swap the code the gate runs under the
// name and source hash its journal and approvals hold. Before, the gate
// approved a source hash that never ran. After the gate, it registers again.
TEST(External, NoRegistrationWhileAGateRuns) {
  ExternalImpl x = model_impl("ext_held", "fwd_rowwise", "bwd_det_chunked");
  register_external(x);
  const std::string d = temp_dir("held");
  GateOptions o = small_opts(write_table(d, "ext_held"));
  int tries = 0;
  std::string why;
  o.progress = [&](const GateProgress&) {
    if (tries++ > 0) return;
    ExternalImpl y = x;
    y.source_sha256 = std::string(64, 'c');
    try {
      register_external(y);
    } catch (const std::invalid_argument& e) {
      why = e.what();
    }
  };
  const GateResult r = run_gate(o);
  EXPECT_GT(tries, 0);
  EXPECT_NE(why.find("external variant 'ext_held': not registered: a gate runs"), std::string::npos) << why;
  ASSERT_EQ(r.windows.size(), 1u);
  EXPECT_EQ(std::string(kernels::variant("ext_held").source_sha256), x.source_sha256);
  ExternalImpl y = x;
  y.source_sha256 = std::string(64, 'c');
  EXPECT_NO_THROW(register_external(y));  // the gate is over
  EXPECT_EQ(std::string(kernels::variant("ext_held").source_sha256), std::string(64, 'c'));
}

TEST(External, RunPoisonsAndReportsWhatWasNotProduced) {
  ExternalImpl x = model_impl("ext_partial", "fwd_rowwise", "bwd_det_chunked");
  x.run = [](const seeds::HostInputs&, Outputs& out) {
    std::fill(out.y.begin(), out.y.end(), uint16_t{0x3F80});  // 1.0: wrong, but written
    out.rstd[0] = 1.0f;                                       // one element written: produced
  };
  register_external(x);
  const seeds::HostInputs in = seeds::generate_host(seeds::parse_case("H=64,T=5,w=bf16,form=plain,family=normal,seed=0"));
  const ExternalRun r = run_external(*find_external(*kernels::find_variant("ext_partial")), in);
  EXPECT_EQ(r.not_produced, (std::vector<std::string>{"dx", "dw"}));
  EXPECT_EQ(r.out.dx.size(), 5u * 64u);
  EXPECT_EQ(r.out.dx[7], kPoisonBf16);
  // In a check, owed outputs it left poisoned fail.
  CheckRequest req;
  req.id = in.id;
  req.impls = {"ext_partial"};
  req.backend = Backend::cpu;
  req.threads = 1;
  const CheckReport rep = run_check(req);
  ASSERT_EQ(rep.impls.size(), 1u);
  EXPECT_EQ(rep.impls[0].ran_on, "test callback on cpu");
  EXPECT_EQ(rep.impls[0].not_produced, (std::vector<std::string>{"dx", "dw"}));
  EXPECT_FALSE(rep.impls[0].result.get(Output::dw).pass());
  EXPECT_FALSE(rep.pass());
  EXPECT_NE(format_report(rep).find("not produced (left poisoned): dx dw"), std::string::npos);
}

TEST(External, ResizingAnOutputOrThrowingIsTheCasesError) {
  ExternalImpl x = model_impl("ext_throws", "fwd_rowwise", "bwd_det_chunked");
  x.run = [](const seeds::HostInputs&, Outputs&) { throw std::runtime_error("kernel exploded"); };
  register_external(x);
  ExternalImpl y = model_impl("ext_resizes", "fwd_rowwise", "bwd_det_chunked");
  y.run = [](const seeds::HostInputs&, Outputs& out) { out.dw.resize(3); };
  register_external(y);
  CheckRequest req;
  req.id = seeds::parse_case("H=64,T=5,w=bf16,form=plain,family=normal,seed=0");
  req.backend = Backend::cpu;
  req.impls = {"ext_throws"};
  try {
    run_check(req);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("kernel exploded"), std::string::npos) << e.what();
  }
  req.impls = {"ext_resizes"};
  try {
    run_check(req);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("resized output dw to 3"), std::string::npos) << e.what();
  }
}

// A det (or forward) implementation runs twice per case and must give the
// same bits; a nondet one runs once. The flaky one below changes one dw bit
// on every other call.
TEST(External, DeclaredDeterministicButNotIsTheCasesError) {
  auto flaky = [](const std::string& name, kernels::Mode mode, std::shared_ptr<int> calls) {
    ExternalImpl x = model_impl(name, "fwd_rowwise", "bwd_det_chunked");
    x.mode = mode;
    const auto good = x.run;
    x.run = [good, calls](const seeds::HostInputs& in, Outputs& out) {
      good(in, out);
      if ((*calls)++ % 2 == 1) {
        uint32_t b;
        std::memcpy(&b, &out.dw[5], sizeof b);
        b ^= 1u;
        std::memcpy(&out.dw[5], &b, sizeof b);
      }
    };
    return x;
  };
  const seeds::HostInputs in = seeds::generate_host(seeds::parse_case("H=64,T=5,w=bf16,form=plain,family=normal,seed=0"));
  auto det_calls = std::make_shared<int>(0);
  register_external(flaky("ext_flaky_det", kernels::Mode::det, det_calls));
  try {
    run_external(*find_external(*kernels::find_variant("ext_flaky_det")), in);
    FAIL() << "no throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("is declared deterministic but two runs on H=64,T=5"), std::string::npos)
        << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("nondeterministic: external implementation ext_flaky_det", 0), 0u)
        << e.what();
    // dw (and rstd) are kept whole between the runs: the element and both
    // bit patterns are named (was the block, "elements 0..63").
    uint32_t b5;
    const Outputs o = kernels::run_model(kernels::variant("fwd_rowwise"), kernels::variant("bwd_det_chunked"),
                                         in.x_view(), in.dy_view(), in.w_view(), static_cast<float>(in.id.eps), 1);
    std::memcpy(&b5, &o.dw[5], 4);
    char want[64];
    std::snprintf(want, sizeof want, "output dw element 5 (0x%08x then 0x%08x)", b5, b5 ^ 1u);
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what() << "\nwant: " << want;
  }
  EXPECT_EQ(*det_calls, 2);
  // A difference past the first block of 4096 elements is placed in its
  // block: dx element 5000 of 100 x 64 flips on the second run.
  {
    ExternalImpl x = model_impl("ext_flaky_dx", "fwd_rowwise", "bwd_det_chunked");
    const auto good = x.run;
    auto calls = std::make_shared<int>(0);
    x.run = [good, calls](const seeds::HostInputs& in, Outputs& out) {
      good(in, out);
      if ((*calls)++ == 1) out.dx[5000] ^= 1u;
    };
    register_external(x);
    const seeds::HostInputs big =
        seeds::generate_host(seeds::parse_case("H=64,T=100,w=bf16,form=plain,family=normal,seed=0"));
    try {
      run_external(*find_external(*kernels::find_variant("ext_flaky_dx")), big);
      FAIL() << "no throw";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("output dx, elements 4096..6399"), std::string::npos) << e.what();
    }
  }
  // The same code declared nondet runs once and is not refused.
  auto nondet_calls = std::make_shared<int>(0);
  register_external(flaky("ext_flaky_nondet", kernels::Mode::nondet, nondet_calls));
  const ExternalRun r = run_external(*find_external(*kernels::find_variant("ext_flaky_nondet")), in);
  EXPECT_EQ(*nondet_calls, 1);
  EXPECT_TRUE(r.not_produced.empty());
  // A reproducible det implementation runs twice and passes.
  auto good_calls = std::make_shared<int>(0);
  ExternalImpl g = model_impl("ext_counted_det", "fwd_rowwise", "bwd_det_chunked");
  const auto good = g.run;
  g.run = [good, good_calls](const seeds::HostInputs& i, Outputs& o) {
    ++*good_calls;
    good(i, o);
  };
  register_external(g);
  EXPECT_NO_THROW(run_external(*find_external(*kernels::find_variant("ext_counted_det")), in));
  EXPECT_EQ(*good_calls, 2);
}

// An error this run made is not retried within it, even with retry_errors
// (which retries journalled errors only), when a later phase needs its case
// again: the nondet window's dense grid steps onto T = 8, a grid T of the
// det window (T = 1..8) but not of its own (T = 1..16), where the det
// window's grid ran the case and it threw. Journalled once, never re-run.
TEST(External, AnErrorOfThisRunIsNotRunAgainByALaterPhase) {
  auto at8 = std::make_shared<int>(0);
  ExternalImpl x = model_impl("ext_t8_det", "fwd_rowwise", "bwd_det_chunked");
  const auto good = x.run;
  x.run = [good, at8](const seeds::HostInputs& in, Outputs& out) {
    if (in.id.T == 8) {
      ++*at8;
      throw std::runtime_error("injected: fails at T = 8");
    }
    good(in, out);
  };
  register_external(x);
  const std::string d = temp_dir("again");
  GateOptions o = small_opts(write_det_nondet(d + "/t.toml", "ext_t8_det", 8, "ext_t8_det", 16));
  o.t_per_window = 2;
  o.dense_points = 16;
  o.dense_step = 1;
  o.fresh_factor = 0;
  o.journal_path = d + "/j.jsonl";
  o.retry_errors = true;
  const GateResult r = run_gate(o);
  ASSERT_EQ(r.windows.size(), 2u);
  const WindowResult& det = r.windows[0].route.mode == kernels::Mode::det ? r.windows[0] : r.windows[1];
  const WindowResult& nondet = &det == &r.windows[0] ? r.windows[1] : r.windows[0];
  // The scenario: T = 8 a det grid T, a nondet dense T.
  ASSERT_EQ(std::count(det.t_points.begin(), det.t_points.end(), 8), 1);
  ASSERT_EQ(std::count(nondet.t_points.begin(), nondet.t_points.end(), 8), 0);
  ASSERT_EQ(std::count(nondet.dense.t.begin(), nondet.dense.t.end(), 8), 1) << format_gate_markdown(r);
  EXPECT_TRUE(det.errored());
  EXPECT_TRUE(nondet.errored());
  EXPECT_EQ(r.cases_retried, 0);
  // The report lists the external apart from the forward variants: it runs
  // its own forward step.
  const std::string md = format_gate_markdown(r);
  EXPECT_NE(md.find("Backward implementations that run their own forward step (their y and rstd are theirs): "
                    "ext_t8_det."),
            std::string::npos)
      << md;
  EXPECT_EQ(md.find("Forward variants run here"), std::string::npos) << md;
  // Every case journalled once; the callback ran once for each T = 8 case
  // the det grid had (its three families), not again for the dense one.
  std::ifstream j(o.journal_path);
  std::string line;
  std::getline(j, line);  // the header
  std::set<std::string> ids;
  int records = 0, t8 = 0;
  while (std::getline(j, line)) {
    const auto rec = nlohmann::json::parse(line);
    const std::string id = rec.at("case").get<std::string>();
    EXPECT_TRUE(ids.insert(id).second) << id << " journalled twice";
    ++records;
    if (id.find(",T=8,") != std::string::npos) ++t8;
  }
  EXPECT_EQ(t8, 3);
  EXPECT_EQ(*at8, 3);
  EXPECT_GT(records, 3);
  std::filesystem::remove_all(d);
}

// In the gate a determinism violation is a finding, not a failure to run:
// the window is FAIL (not ERROR, which says no verdict was reached), and a
// resume with retry_errors, the kernel now reproducible (the race did not
// show), keeps the finding: it passed and approved before.
TEST(External, NondeterminismFailsTheWindowAndNoRetryReplacesIt) {
  auto flaky_now = std::make_shared<bool>(true);
  auto calls = std::make_shared<int>(0);
  ExternalImpl x = model_impl("ext_race_det", "fwd_rowwise", "bwd_det_chunked");
  const auto good = x.run;
  x.run = [good, flaky_now, calls](const seeds::HostInputs& in, Outputs& out) {
    good(in, out);
    if (*flaky_now && (*calls)++ % 2 == 1) out.dw[0] = out.dw[0] * 2 + 1;  // the second run of each case differs
  };
  register_external(x);
  const std::string d = temp_dir("race");
  GateOptions o = small_opts(write_table(d, "ext_race_det"));
  o.journal_path = d + "/j.jsonl";
  for (int round = 0; round < 2; ++round) {
    if (round == 1) {
      *flaky_now = false;
      o.retry_errors = true;
    }
    const GateResult r = run_gate(o);
    ASSERT_EQ(r.windows.size(), 1u);
    const WindowResult& w = r.windows[0];
    EXPECT_FALSE(w.pass) << "round " << round << "\n" << format_gate_markdown(r);
    EXPECT_EQ(w.verdict, Verdict::fail) << round;
    EXPECT_FALSE(w.errored()) << round;  // FAIL, not ERROR
    EXPECT_GT(w.nondeterministic, 0) << round;
    EXPECT_EQ(w.nondeterministic, w.errors) << round;
    EXPECT_STREQ(r.verdict(), "FAIL") << round;
    if (round == 1) {
      EXPECT_EQ(r.cases_retried, 0);  // nothing was run again
    }
  }
  std::filesystem::remove_all(d);
}

// The violation is held against the implementation it names only: the
// case's error record lists that implementation alone, and the case runs
// again for the others (here a built-in nondet variant beside the racy
// external), whose window passes in the same run (before, their share of
// the error record made it ERROR until a retry). And a violation found when a forward-only
// result is run again in full (a backward window over the case) replaces
// that result: the forward window fails as a fresh journal would.
TEST(External, NondeterminismIsTheNamedImplementationsAndOutranksAResult) {
  auto flaky_now = std::make_shared<bool>(true);
  auto calls = std::make_shared<int>(0);
  auto racy = [flaky_now, calls](ExternalImpl x) {
    const auto good = x.run;
    x.run = [good, flaky_now, calls](const seeds::HostInputs& in, Outputs& out) {
      good(in, out);
      if (*flaky_now && (*calls)++ % 2 == 1) out.y[0] ^= 1;  // the second run of each case differs
    };
    return x;
  };
  register_external(racy(model_impl("ext_race_bwd2", "fwd_rowwise", "bwd_det_chunked")));
  const std::string d = temp_dir("race2");
  {
    GateOptions o = small_opts(write_det_nondet(d + "/two.toml", "ext_race_bwd2", 40, "bwd_nondet_atomic", 40));
    o.journal_path = d + "/two.jsonl";
    for (int round = 0; round < 2; ++round) {
      if (round == 1) {
        *flaky_now = false;
        o.retry_errors = true;
      }
      const GateResult r = run_gate(o);
      ASSERT_EQ(r.windows.size(), 2u);
      const WindowResult& ext =
          std::string(r.windows[0].route.variant->name) == "ext_race_bwd2" ? r.windows[0] : r.windows[1];
      const WindowResult& builtin = &ext == &r.windows[0] ? r.windows[1] : r.windows[0];
      EXPECT_FALSE(ext.pass) << round;
      EXPECT_GT(ext.nondeterministic, 0) << round;
      EXPECT_EQ(builtin.nondeterministic, 0) << round;  // not the built-in's finding
      EXPECT_TRUE(builtin.pass) << round << "\n" << format_gate_markdown(r);
      EXPECT_EQ(builtin.errors, 0) << round;
    }
  }
  {
    *flaky_now = false;
    ExternalImpl f = racy(model_impl("ext_race_fwd", "fwd_rowwise", "bwd_det_chunked", kernels::Op::fwd));
    register_external(f);
    const std::string path = d + "/fwd.toml";
    std::ofstream(path) << "arch = \"sm90a\"\ndescription = \"fwd\"\nroute = [\n"
                        << "  { op = \"fwd\", H = 64, w = \"bf16\", form = \"plain\", T = [1, 40], variant = \"ext_race_fwd\" },\n"
                        << "  { op = \"bwd\", mode = \"det\", H = 64, w = \"bf16\", form = \"plain\", T = [1, 40], "
                           "variant = \"bwd_det_chunked\" },\n]\n";
    GateOptions o = small_opts(path);
    o.journal_path = d + "/fwd.jsonl";
    o.windows = "op=fwd";  // forward-only records, reproducible
    const GateResult first = run_gate(o);
    ASSERT_EQ(first.windows.size(), 1u);
    EXPECT_TRUE(first.windows[0].pass) << format_gate_markdown(first);
    *flaky_now = true;  // the backward window's full runs now differ
    o.windows = "";
    const GateResult r = run_gate(o);
    for (const auto& w : r.windows)
      if (std::string(w.route.variant->name) == "ext_race_fwd") {
        EXPECT_FALSE(w.pass) << format_gate_markdown(r);
        EXPECT_GT(w.nondeterministic, 0);
      }
  }
  std::filesystem::remove_all(d);
}

TEST(External, CorrectOnePassesAWindowWrongOneFailsCancel) {
  register_external(model_impl("ext_good", "fwd_rowwise", "bwd_det_chunked"));
  register_external(model_impl("ext_fp32seq", "fwd_rowwise", "ctl_fp32_seq"));
  const std::string d = temp_dir("verdicts");
  {
    const GateResult r = run_gate(small_opts(write_table(d, "ext_good")));
    ASSERT_EQ(r.windows.size(), 1u);
    EXPECT_TRUE(r.windows[0].pass) << format_gate_markdown(r);
    EXPECT_GT(r.windows[0].out[3].max_ratio, 0.0);  // dw was checked, not skipped
    ASSERT_EQ(r.externals.size(), 1u);
    EXPECT_EQ(r.externals[0].origin, "test");
    const std::string md = format_gate_markdown(r);
    EXPECT_NE(md.find("external implementation `ext_good`"), std::string::npos) << md;
    EXPECT_NE(md.find("test callback on cpu"), std::string::npos);
  }
  {
    const GateResult r = run_gate(small_opts(write_table(d, "ext_fp32seq")));
    ASSERT_EQ(r.windows.size(), 1u);
    EXPECT_FALSE(r.windows[0].pass);
    EXPECT_GT(r.windows[0].out[3].max_ratio, 1.0);  // dw over budget
    EXPECT_NE(r.windows[0].out[3].worst_case.find("family=cancel"), std::string::npos)
        << r.windows[0].out[3].worst_case;
    for (const auto& f : r.windows[0].families) {
      if (f.family == "cancel") {
        EXPECT_GT(f.failed, 0);
      }
    }
  }
  std::filesystem::remove_all(d);
}

// Form res: h_new is gated bitwise in every res window (fwd and bwd). One
// flipped bit of one element fails the window, and the verdict survives the
// journal (a resume reads h_new back); the correct implementation passes.
// The gate journalled y, rstd, dx, dw only, so an h_new of zeros passed.
TEST(External, ResWindowsGateHNewBitwise) {
  ExternalImpl good = model_impl("ext_res_good", "fwd_rowwise", "bwd_det_chunked");
  good.forms = static_cast<uint8_t>(1u << static_cast<int>(Form::res));
  register_external(good);
  ExternalImpl bad = model_impl("ext_res_hnew_bit", "fwd_rowwise", "bwd_det_chunked");
  bad.forms = good.forms;
  auto full = bad.run;
  bad.run = [full](const seeds::HostInputs& in, Outputs& out) {
    full(in, out);
    if (!out.h_new.empty()) out.h_new[out.h_new.size() / 2] ^= 1;  // one ulp of one element
  };
  register_external(bad);
  const std::string d = temp_dir("res_hnew");
  auto table = [&](const std::string& variant) {
    const std::string path = d + "/" + variant + ".toml";
    std::ofstream f(path);
    f << "arch = \"sm90a\"\ndescription = \"h_new test\"\nroute = [\n"
      << "  { op = \"bwd\", mode = \"det\", H = 64, w = \"bf16\", form = \"res\", T = [1, 40], variant = \""
      << variant << "\" },\n]\n";
    return path;
  };
  {
    const GateResult r = run_gate(small_opts(table("ext_res_good")));
    ASSERT_EQ(r.windows.size(), 1u);
    EXPECT_TRUE(r.windows[0].pass) << format_gate_markdown(r);
    EXPECT_EQ(r.windows[0].h_new.cases_over, 0);
    EXPECT_EQ(r.windows[0].h_new_unchecked, 0);
    EXPECT_FALSE(r.windows[0].h_new.worst_case.empty());  // checked, not skipped
    EXPECT_NE(format_gate_markdown(r).find("equal in every case of the 1 res window"), std::string::npos);
  }
  for (int resume = 0; resume < 2; ++resume) {
    GateOptions o = small_opts(table("ext_res_hnew_bit"));
    o.journal_path = d + "/bad.jsonl";
    const GateResult r = run_gate(o);
    ASSERT_EQ(r.windows.size(), 1u);
    const WindowResult& w = r.windows[0];
    EXPECT_FALSE(w.pass) << "resume " << resume << "\n" << format_gate_markdown(r);
    EXPECT_EQ(w.h_new.cases_over, w.cases) << "resume " << resume;  // every case (T >= 1) has the flipped bit
    EXPECT_GT(w.h_new.max_ratio, 1.0);
    for (int k = 0; k < 4; ++k) EXPECT_LE(w.out[k].max_ratio, 1.0) << k;  // the other outputs pass
    const std::string md = format_gate_markdown(r);
    EXPECT_NE(md.find(std::to_string(w.cases) + " of " + std::to_string(w.cases) + " cases differ"), std::string::npos)
        << md;
  }
  std::filesystem::remove_all(d);
}

TEST(External, ForwardExternalGatesAForwardWindowOnItsOwnRuns) {
  // Forward only: y, rstd (fwd_rowwise's model); dx, dw never written.
  ExternalImpl x = model_impl("ext_fwd", "fwd_rowwise", "bwd_det_chunked", kernels::Op::fwd);
  auto full = x.run;
  x.run = [full](const seeds::HostInputs& in, Outputs& out) {
    Outputs tmp = out;
    full(in, tmp);
    out.y = tmp.y;
    out.rstd = tmp.rstd;
  };
  register_external(x);
  const std::string d = temp_dir("fwd");
  const GateResult r = run_gate(small_opts(write_table(d, "ext_fwd", "fwd")));
  ASSERT_EQ(r.windows.size(), 1u);
  EXPECT_TRUE(r.windows[0].pass) << format_gate_markdown(r);
  EXPECT_EQ(r.windows[0].fwd, "ext_fwd");
  std::filesystem::remove_all(d);
}

TEST(External, ApprovalGoesStaleWhenTheDeclaredIdentityChanges) {
  register_external(model_impl("ext_appr", "fwd_rowwise", "bwd_det_chunked"));
  const std::string d = temp_dir("approve");
  const std::string table = write_table(d, "ext_appr");
  const GateResult r = run_gate(small_opts(table));
  ASSERT_TRUE(r.pass());
  const kernels::RouteTable t = kernels::load_route_table(table);
  kernels::Approvals a;
  a.path = kernels::approvals_path_for(table);
  update_approvals(a, r, t.routes);
  ASSERT_EQ(a.records.size(), 1u);
  EXPECT_EQ(a.records[0].variant, "ext_appr");
  EXPECT_EQ(a.records[0].source_sha256, kShaA);
  EXPECT_EQ(kernels::approval_status(t.routes[0], a, true).state, kernels::ApprovalState::current);
  // The same code registered under a new identity: the approval is stale.
  ExternalImpl changed = model_impl("ext_appr", "fwd_rowwise", "bwd_det_chunked");
  changed.source_sha256 = kShaB;
  register_external(changed);
  const kernels::ApprovalStatus s = kernels::approval_status(t.routes[0], a, true);
  EXPECT_EQ(s.state, kernels::ApprovalState::stale) << s.detail;
  std::filesystem::remove_all(d);
}

TEST(External, CancelledIsNotJournalledAndResumeMatches) {
  // The external cancels on its third case (as Ctrl-C in a Python callable
  // does): the gate stops, that case is not journalled, and the resumed
  // campaign ends equal to an uninterrupted run. Declared det, it runs
  // twice a case (run_external), so the third case's first call is the
  // fifth.
  ExternalImpl x = model_impl("ext_cancel", "fwd_rowwise", "bwd_det_chunked");
  auto step = x.run;
  auto calls = std::make_shared<int>(0);
  auto cancel_at = std::make_shared<int>(5);
  x.run = [step, calls, cancel_at](const seeds::HostInputs& in, Outputs& out) {
    if (++*calls == *cancel_at) throw Cancelled("cancelled by the test");
    step(in, out);
  };
  register_external(x);
  const std::string d = temp_dir("cancel");
  const std::string table = write_table(d, "ext_cancel");
  GateOptions o = small_opts(table);
  o.journal_path = d + "/j.jsonl";
  EXPECT_THROW(run_gate(o), Cancelled);
  *cancel_at = -1;
  const GateResult resumed = run_gate(o);
  EXPECT_EQ(resumed.cases_resumed, 2);
  EXPECT_GT(resumed.cases_run_now, 0);
  const GateResult whole = run_gate(small_opts(table));
  EXPECT_EQ(gate_to_json(resumed)["windows"], gate_to_json(whole)["windows"]);
  EXPECT_EQ(resumed.windows[0].errors, 0);
  std::filesystem::remove_all(d);
}

}  // namespace

namespace {

TEST(External, GpuBackendRunsBesideGpuVariants) {
  if (!kernels::gpu_available()) GTEST_SKIP() << "needs a CUDA device (a build with CUDA and a usable GPU)";
  // The external and a GPU variant on one case: both validated, the external
  // on the inputs the GPU generator made (the same bits as the host's).
  register_external(model_impl("ext_gpu_mix", "fwd_rowwise", "bwd_det_chunked"));
  CheckRequest req;
  req.id = seeds::parse_case("H=64,T=300,w=bf16,form=plain,family=cancel,seed=0");
  req.impls = {"bwd_det_chunked", "ext_gpu_mix"};
  req.backend = Backend::gpu;
  const CheckReport rep = run_check(req);
  ASSERT_EQ(rep.impls.size(), 2u);
  EXPECT_EQ(rep.impls[0].ran_on, "gpu");
  EXPECT_EQ(rep.impls[1].ran_on, "test callback on cpu");
  EXPECT_TRUE(rep.pass()) << format_report(rep);
  // The external is the model of the GPU variant: the same dw bits give the same statistics.
  EXPECT_EQ(rep.impls[0].result.get(Output::dw).worst.ratio, rep.impls[1].result.get(Output::dw).worst.ratio);
}

}  // namespace
