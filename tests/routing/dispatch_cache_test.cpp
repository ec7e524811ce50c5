// tests/routing/dispatch_cache_test.cpp: the table's `fallback` key and the
// runtime's cached dispatch (dispatch_cache.h) over tests/data/routes/dispatch.toml
// with approvals written beside a copy of it (tests/util/dispatch_fixture.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "normgate/kernels/registry.h"
#include "normgate/routing/dispatch_cache.h"
#include "normgate/routing/rejections.h"
#include "normgate/routing/routing.h"
#include "util/dispatch_fixture.h"
#include "util/rejection_fixture.h"

namespace {

using namespace normgate;
using namespace normgate::kernels;

const std::string kSrc = NORMGATE_SOURCE_DIR;

std::string with_fallback(const std::string& fallback) {
  return "arch = \"sm90a\"\n"  // line 1
         + fallback + "\n"     // line 2
         "route = [\n"
         "  { op = \"bwd\", mode = \"det\", H = 64, w = \"bf16\", form = \"plain\", T = [1, 9], variant = "
         "\"bwd_det_chunked\" },\n"
         "]\n";
}

// Warnings go to a vector instead of stderr.
struct Sink {
  std::mutex mu;
  std::vector<std::string> lines;
  DispatchCacheOptions options() {
    DispatchCacheOptions o;
    o.warn = [this](const std::string& m) {
      std::lock_guard<std::mutex> lock(mu);
      lines.push_back(m);
    };
    o.notice = o.warn;
    o.override_hint = "OVERRIDE-HINT";
    o.strict_hint = "STRICT-HINT";
    return o;
  }
};

CallKey call(Op op, Mode mode, int64_t H, WDtype w, int64_t T, Form form = Form::plain) {
  return CallKey{op, mode, H, w, form, T};
}

TEST(RouteTableFallback, ParsedAndValidated) {
  const RouteTable t = parse_route_table(
      with_fallback("fallback = { fwd = \"fwd_rowwise\", bwd_det = \"bwd_det_chunked\", bwd_nondet = "
                    "\"bwd_det_chunked\" }"),
      "t.toml");
  ASSERT_NE(t.fallback.fwd, nullptr);
  EXPECT_EQ(t.fallback.fwd->name, "fwd_rowwise");
  EXPECT_EQ(t.fallback.for_call(Op::bwd, Mode::nondet)->name, "bwd_det_chunked");  // det may serve nondet
  EXPECT_EQ(t.fallback.for_call(Op::fwd, Mode::nondet)->name, "fwd_rowwise");
  EXPECT_EQ(t.fallback.line, 2);
  // Absent: all null. One key only: the others null.
  EXPECT_EQ(parse_route_table(with_fallback(""), "t.toml").fallback.for_call(Op::fwd, Mode::det), nullptr);
  const RouteTable one = parse_route_table(with_fallback("fallback = { bwd_det = \"bwd_det_chunked\" }"), "t.toml");
  EXPECT_EQ(one.fallback.fwd, nullptr);
  EXPECT_EQ(one.fallback.bwd_nondet, nullptr);
  EXPECT_EQ(one.fallback.bwd_det->name, "bwd_det_chunked");

  const std::pair<std::string, std::string> bad[] = {
      {"fallback = { fwd = \"fwd_rowwise\", bwd = \"bwd_det_chunked\" }", "unknown fallback key 'bwd'"},
      {"fallback = { fwd = \"bwd_det_chunked\" }", "fallback.fwd: variant bwd_det_chunked is a bwd variant"},
      {"fallback = { bwd_nondet = \"fwd_rowwise\" }", "is a fwd variant"},
      {"fallback = { bwd_det = \"bwd_nondet_atomic\" }", "non-deterministic and cannot serve det calls"},
      {"fallback = { bwd_det = \"ctl_fp32_seq\" }", "NEGATIVE CONTROL"},
      // a fallback serves every call outside the windows: a variant of some H or forms only cannot
      {"fallback = { bwd_det = \"bwd_det_heads\" }",
       "fallback.bwd_det: variant bwd_det_heads cannot serve every call outside the windows (bwd_det_heads op=bwd "
       "mode=det H=256..256 w=bf16|fp32 form=heads24|heads4"},
      {"fallback = { bwd_nondet = \"bwd_det_wreg\" }", "variant bwd_det_wreg cannot serve every call"},
      {"fallback = { fwd = \"fwd_wide\" }", "variant fwd_wide cannot serve every call"},
      {"fallback = { bwd_det = \"bwd_magic\" }", "unknown kernel variant 'bwd_magic'"},
      {"fallback = { bwd_det = 3 }", "fallback.bwd_det must be a string"},
      {"fallback = {}", "fallback is empty"},
      {"fallback = \"fwd_rowwise\"", "fallback must be a table"},
  };
  for (const auto& [text, needle] : bad) {
    try {
      (void)parse_route_table(with_fallback(text), "t.toml", {.allow_controls = true});
      ADD_FAILURE() << "accepted: " << text;
    } catch (const RouteTableError& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.rfind("t.toml:2:", 0), 0u) << m;
      EXPECT_NE(m.find(needle), std::string::npos) << "expected '" << needle << "' in: " << m;
    }
  }
}

// The shipped tables name a fallback for every op and mode.
TEST(RouteTableFallback, ShippedTablesNameOne) {
  for (const char* name : {"/routes/sm90a.toml", "/routes/sm90a-ci.toml"}) {
    const RouteTable t = load_route_table(kSrc + name);
    ASSERT_NE(t.fallback.fwd, nullptr) << name;
    ASSERT_NE(t.fallback.bwd_det, nullptr) << name;
    ASSERT_NE(t.fallback.bwd_nondet, nullptr) << name;
    EXPECT_EQ(t.fallback.bwd_det->mode, Mode::det) << name;
  }
}

TEST(DispatchCache, PicksTheRoutedVariantAndChangesAtTheWindowEdge) {
  const test::DispatchFixture fx("edge");
  Sink sink;
  const DispatchCache c(Dispatcher::from_files(fx.table), sink.options());
  EXPECT_EQ(c.groups(), 5u);
  EXPECT_EQ(c.windows(), 6u);
  auto at = [&](Op op, Mode mode, int64_t T) { return c.pick(call(op, mode, 64, WDtype::bf16, T), true); };
  const Pick lo = at(Op::bwd, Mode::nondet, 100);
  EXPECT_EQ(lo.variant->name, "bwd_det_chunked");
  EXPECT_EQ(lo.kind, PickKind::routed);
  EXPECT_EQ(lo.state, ApprovalState::current);
  EXPECT_EQ(lo.route->t_hi, 100);
  const Pick hi = at(Op::bwd, Mode::nondet, 101);
  EXPECT_EQ(hi.variant->name, "bwd_nondet_atomic");
  EXPECT_EQ(hi.route->t_lo, 101);
  EXPECT_EQ(at(Op::bwd, Mode::nondet, 1).variant->name, "bwd_det_chunked");
  EXPECT_EQ(at(Op::bwd, Mode::nondet, 700).variant->name, "bwd_nondet_atomic");
  EXPECT_EQ(at(Op::bwd, Mode::det, 101).variant->name, "bwd_det_chunked");
  // T = 0 (no rows) is served by the window holding T = 1.
  const Pick zero = at(Op::bwd, Mode::nondet, 0);
  EXPECT_EQ(zero.variant->name, "bwd_det_chunked");
  EXPECT_EQ(zero.route->t_lo, 1);
  // The forward serves both modes.
  EXPECT_EQ(at(Op::fwd, Mode::nondet, 300).variant->name, "fwd_rowwise");
  EXPECT_EQ(at(Op::fwd, Mode::det, 300).route, at(Op::fwd, Mode::nondet, 300).route);
  EXPECT_TRUE(sink.lines.empty());  // nothing to warn about
  // A bad call is an input error, not a routing one.
  EXPECT_THROW((void)at(Op::bwd, Mode::det, -1), std::invalid_argument);
  EXPECT_THROW((void)c.pick(call(Op::bwd, Mode::det, 0, WDtype::bf16, 5), false), std::invalid_argument);
  EXPECT_THROW((void)c.pick(call(Op::bwd, Mode::det, 16385, WDtype::bf16, 5), false), std::invalid_argument);
}

TEST(DispatchCache, MissingAndStaleApprovalsRefuseNamingTheWindow) {
  const test::DispatchFixture fx("refuse");
  Sink sink;
  const DispatchCache c(Dispatcher::from_files(fx.table), sink.options());
  // Stale: approved code e...e, the variant's code now differs.
  try {
    (void)c.pick(call(Op::bwd, Mode::det, 64, WDtype::fp32, 5), false);
    FAIL();
  } catch (const UnapprovedRoute& e) {
    EXPECT_EQ(e.state, ApprovalState::stale);
    const std::string m = e.what();
    EXPECT_NE(m.find("bwd det H=64 w=fp32 form=plain T=5: window bwd det H=64 w=fp32 form=plain T=1..700"),
              std::string::npos) << m;
    EXPECT_NE(m.find(fx.table + ":18"), std::string::npos) << m;  // the route's line
    EXPECT_NE(m.find(approvals_path_for(fx.table)), std::string::npos) << m;
    EXPECT_NE(m.find(": stale: approved source eeeeeeeeeeee"), std::string::npos) << m;
    EXPECT_NE(m.find(std::string(variant("bwd_det_chunked").source_sha256.substr(0, 12))), std::string::npos) << m;
    EXPECT_NE(m.find("--windows 'op=bwd,mode=det,H=64,w=fp32,form=plain,T=1..700'"), std::string::npos) << m;
    EXPECT_NE(m.find("OVERRIDE-HINT"), std::string::npos) << m;
  }
  // Missing.
  try {
    (void)c.pick(call(Op::bwd, Mode::nondet, 64, WDtype::fp32, 700), false);
    FAIL();
  } catch (const UnapprovedRoute& e) {
    EXPECT_EQ(e.state, ApprovalState::missing);
    const std::string m = e.what();
    EXPECT_NE(m.find("window bwd nondet H=64 w=fp32 form=plain T=1..700"), std::string::npos) << m;
    EXPECT_NE(m.find(": missing: no approval for this window and variant"), std::string::npos) << m;
  }
  // inspect reports the same refusal without throwing.
  const Pick q = c.inspect(call(Op::bwd, Mode::det, 64, WDtype::fp32, 5), false);
  EXPECT_EQ(q.kind, PickKind::refused);
  EXPECT_EQ(q.variant, nullptr);
  EXPECT_EQ(q.state, ApprovalState::stale);
  ASSERT_NE(q.route, nullptr);
  EXPECT_EQ(q.route->variant->name, "bwd_det_chunked");
  EXPECT_NE(q.reason.find("stale"), std::string::npos);
  // The approved windows of the same table still run.
  EXPECT_EQ(c.pick(call(Op::bwd, Mode::det, 64, WDtype::bf16, 5), false).kind, PickKind::routed);
}

// A failure remembered beside the table (rejections.h) refutes the records
// of its variant, source and backend whose windows it meets: the runtime
// counts them for nothing, as `normgate routes` does (routes.md D28).
TEST(DispatchCache, ARememberedFailureRefutesItsRecordsAtRunTime) {
  const test::DispatchFixture fx("refuted");
  Sink sink;
  {
    const DispatchCache before(Dispatcher::from_files(fx.table), sink.options());
    EXPECT_EQ(before.pick(call(Op::bwd, Mode::det, 64, WDtype::bf16, 5), false).kind, PickKind::routed);
  }
  Rejection q = test::valid_rejection();
  q.variant = "bwd_det_chunked";
  q.source_sha256 = std::string(variant("bwd_det_chunked").source_sha256);
  q.backend = "gpu";
  q.gpu = "NVIDIA H200";
  q.t_lo = 40;
  q.t_hi = 60;
  q.gated_lo = 1;
  q.gated_hi = 700;
  q.worst_case = "H=64,T=50,w=bf16,form=plain,family=cancel,seed=3";
  q.worst_err_tol = 1.25;
  q.worst_output = "dx";
  Rejection cpu = q;  // the same failure on the CPU models refutes no gpu record
  cpu.backend = "cpu-model";
  cpu.gpu = "cpu-model";
  Rejection other_h = q;  // nor does one of another H
  other_h.H = 128;
  other_h.worst_case = "H=128,T=50,w=bf16,form=plain,family=cancel,seed=3";
  const std::string rej = rejections_path_for(fx.table);
  ASSERT_EQ(record_rejections(rej, approvals_path_for(fx.table), {cpu, other_h}), 2u);
  EXPECT_TRUE(Dispatcher::from_files(fx.table).refuted().empty());
  ASSERT_EQ(record_rejections(rej, approvals_path_for(fx.table), {q}), 1u);
  const Dispatcher d = Dispatcher::from_files(fx.table);
  // A det variant's bits do not depend on the mode: its det record (T =
  // 1..700) and its nondet one (T = 1..100) both fall.
  ASSERT_EQ(d.refuted().size(), 2u);
  EXPECT_EQ(d.refuted()[0].first.window(), "bwd det H=64 w=bf16 form=plain T=1..700");
  EXPECT_EQ(d.refuted()[1].first.window(), "bwd nondet H=64 w=bf16 form=plain T=1..100");
  EXPECT_EQ(d.approvals().records.size(), 3u);  // of the fixture's 5
  const DispatchCache c(Dispatcher::from_files(fx.table), sink.options());
  for (const auto& [mode, T] : {std::pair{Mode::det, int64_t{5}}, std::pair{Mode::nondet, int64_t{100}}}) {
    try {
      (void)c.pick(call(Op::bwd, mode, 64, WDtype::bf16, T), false);
      ADD_FAILURE() << "a refuted record approved T=" << T;
    } catch (const UnapprovedRoute& e) {
      EXPECT_EQ(e.state, ApprovalState::missing);
      const std::string m = e.what();
      const std::string src = std::string(variant("bwd_det_chunked").source_sha256.substr(0, 12));
      EXPECT_NE(m.find("does not count: the gate failed this variant's source " + src +
                       " (this build's) there (bwd det H=64 w=bf16 form=plain T=40..60 remembered in " + rej +
                       ": case H=64,T=50,w=bf16,form=plain,family=cancel,seed=3, dx err/tol 1.25, "),
                std::string::npos)
          << m;
      // This source failed inside the window: a gate would be refused, so
      // the advice is another variant, not a gate.
      EXPECT_NE(m.find("No gate of this source approves the window: it failed a gpu gate at bwd det H=64 w=bf16 "
                       "form=plain T=40..60 (case H=64,T=50,w=bf16,form=plain,family=cancel,seed=3, dx err/tol "
                       "1.25, remembered in " + rej + "); route another variant there"),
                std::string::npos)
          << m;
      EXPECT_EQ(m.find("Gate it"), std::string::npos) << m;
    }
  }
  // Records of other variants stand; T = 101 of the nondet group runs bwd_nondet_atomic.
  EXPECT_EQ(c.pick(call(Op::bwd, Mode::nondet, 64, WDtype::bf16, 101), false).variant->name, "bwd_nondet_atomic");
  EXPECT_EQ(c.pick(call(Op::fwd, Mode::det, 64, WDtype::bf16, 300), false).kind, PickKind::routed);
  // Approvals in parts (T = 1..40 and 41..700 cover the route together;
  // the failure at T = 40..60 refutes both): a refuted part is named too,
  // though neither contains the route's window.
  {
    const RouteTable t = load_route_table(fx.table);
    Approvals a = load_approvals(approvals_path_for(fx.table));
    for (const Route& r : t.routes)
      if (r.op == Op::bwd && r.mode == Mode::det && r.w == WDtype::bf16) {
        a.records.erase(std::remove_if(a.records.begin(), a.records.end(),
                                       [&](const Approval& x) { return x.window() == r.window(); }),
                        a.records.end());
        for (const auto& [lo, hi] : {std::pair{int64_t{1}, int64_t{40}}, std::pair{int64_t{41}, int64_t{700}}}) {
          Route part = r;
          part.t_lo = lo;
          part.t_hi = hi;
          a.records.push_back(test::valid_approval(part, "", "gpu"));
        }
      }
    save_approvals(a);
    const DispatchCache parts(Dispatcher::from_files(fx.table), sink.options());
    try {
      (void)parts.pick(call(Op::bwd, Mode::det, 64, WDtype::bf16, 5), false);
      ADD_FAILURE() << "a window covered in part by a refuted record was approved";
    } catch (const UnapprovedRoute& e) {
      EXPECT_NE(std::string(e.what()).find("the gpu approval of bwd det H=64 w=bf16 form=plain T=1..40 does not "
                                           "count: the gate failed"),
                std::string::npos)
          << e.what();
    }
  }
  // A rejections file that cannot be read stops the load, naming it; a
  // link to a missing one too (no file meant to be there is read as none).
  const std::string moved = rej + ".moved";
  std::filesystem::rename(rej, moved);
  std::filesystem::create_symlink(fx.dir + "/gone.json", rej);
  try {
    (void)Dispatcher::from_files(fx.table);
    ADD_FAILURE() << "a dangling link to the rejections file was read as none";
  } catch (const RouteTableError& e) {
    EXPECT_NE(std::string(e.what()).find(rej + ": cannot read rejections: a symbolic link to a missing file"),
              std::string::npos)
        << e.what();
  }
  std::filesystem::remove(rej);
  std::filesystem::rename(moved, rej);
  { std::ofstream(rej, std::ios::app) << "x"; }
  try {
    (void)Dispatcher::from_files(fx.table);
    ADD_FAILURE() << "a damaged rejections file was read";
  } catch (const RouteTableError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(rej, 0), 0u) << e.what();
  }
}

TEST(DispatchCache, CpuModelApprovalsCountOnlyWhenThePolicySaysSo) {
  const test::DispatchFixture fx("cpu", "cpu-model");
  Sink sink;
  const DispatchCache c(Dispatcher::from_files(fx.table), sink.options());
  try {
    (void)c.pick(call(Op::bwd, Mode::nondet, 64, WDtype::bf16, 101), false);
    FAIL();
  } catch (const UnapprovedRoute& e) {
    EXPECT_EQ(e.state, ApprovalState::cpu_model_only);
  }
  EXPECT_TRUE(sink.lines.empty());
  Sink announced;
  const DispatchCache ok(Dispatcher::from_files(fx.table, {.accept_cpu_model = true}), announced.options());
  EXPECT_EQ(ok.pick(call(Op::bwd, Mode::nondet, 64, WDtype::bf16, 101), false).kind, PickKind::routed);
  ASSERT_EQ(announced.lines.size(), 1u);
  EXPECT_NE(announced.lines[0].find("accept-cpu-model"), std::string::npos) << announced.lines[0];
}

TEST(DispatchCache, ExplicitOverridesAndThePolicyOverride) {
  const test::DispatchFixture fx("override");
  Sink sink;
  const DispatchCache c(Dispatcher::from_files(fx.table), sink.options());
  const CallKey stale = call(Op::bwd, Mode::det, 64, WDtype::fp32, 5);
  // A named variant runs without an approval; the window is reported.
  const Pick p = c.pick_variant(stale, "bwd_det_chunked");
  EXPECT_EQ(p.kind, PickKind::explicit_variant);
  EXPECT_EQ(p.variant->name, "bwd_det_chunked");
  EXPECT_EQ(p.state, ApprovalState::stale);
  ASSERT_NE(p.route, nullptr);
  // ... also against the route: the nondet window at T = 50 routes bwd_det_chunked.
  EXPECT_EQ(c.pick_variant(call(Op::bwd, Mode::nondet, 64, WDtype::bf16, 50), "bwd_nondet_atomic").variant->name,
            "bwd_nondet_atomic");
  // ... and outside every window, without a warning.
  EXPECT_EQ(c.pick_variant(call(Op::bwd, Mode::det, 128, WDtype::bf16, 5), "bwd_det_chunked").route, nullptr);
  EXPECT_TRUE(sink.lines.empty());
  const std::pair<const char*, const char*> bad[] = {
      {"fwd_rowwise", "is a fwd variant, the call is bwd"},
      {"ctl_fp32_seq", "negative control"},
      {"bwd_nondet_atomic", "non-deterministic; the call asks for a deterministic backward"},
      {"bwd_magic", "bwd_magic"},
  };
  for (const auto& [name, needle] : bad) {
    try {
      (void)c.pick_variant(stale, name);
      ADD_FAILURE() << name;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
  // The experiments' policy: refused windows run, announced once at load.
  Sink policy;
  const DispatchCache allow(Dispatcher::from_files(fx.table, {.allow_unapproved = true}), policy.options());
  ASSERT_EQ(policy.lines.size(), 1u);
  EXPECT_NE(policy.lines[0].find("allow-unapproved"), std::string::npos) << policy.lines[0];
  const Pick u = allow.pick(stale, true);
  EXPECT_EQ(u.kind, PickKind::unapproved);
  EXPECT_EQ(u.variant->name, "bwd_det_chunked");
  EXPECT_EQ(u.state, ApprovalState::stale);
  EXPECT_EQ(allow.pick(call(Op::bwd, Mode::nondet, 64, WDtype::fp32, 1), true).kind, PickKind::unapproved);
  EXPECT_EQ(policy.lines.size(), 1u);  // no warning per call
}

TEST(DispatchCache, FallbackWarnsOncePerGroupAndStrictModeRefuses) {
  const test::DispatchFixture fx("fallback");
  Sink sink;
  const DispatchCache c(Dispatcher::from_files(fx.table), sink.options());
  const CallKey h128 = call(Op::bwd, Mode::nondet, 128, WDtype::bf16, 5);
  // A query neither warns nor uses up the warning.
  const Pick q = c.inspect(h128, false);
  EXPECT_EQ(q.kind, PickKind::fallback);
  EXPECT_FALSE(q.warned);
  EXPECT_TRUE(sink.lines.empty());
  const Pick a = c.pick(h128, false);
  EXPECT_EQ(a.kind, PickKind::fallback);
  EXPECT_EQ(a.variant->name, "bwd_nondet_atomic");
  EXPECT_EQ(a.route, nullptr);
  EXPECT_TRUE(a.warned);
  ASSERT_EQ(sink.lines.size(), 1u);
  const std::string w = sink.lines[0];
  EXPECT_NE(w.find("bwd nondet H=128 w=bf16 form=plain (T=5) is outside every window of " + fx.table),
            std::string::npos) << w;
  EXPECT_NE(w.find("the table has no window for this op, mode, H, w and form"), std::string::npos) << w;
  EXPECT_NE(w.find("fallback bwd_nondet_atomic"), std::string::npos) << w;
  EXPECT_NE(w.find("STRICT-HINT"), std::string::npos) << w;
  // Once per (op, mode, H, w, form): another T of the group is silent ...
  EXPECT_FALSE(c.pick(call(Op::bwd, Mode::nondet, 128, WDtype::bf16, 9000), false).warned);
  EXPECT_EQ(sink.lines.size(), 1u);
  // ... another group warns again (det, form res, T past a routed group's windows).
  EXPECT_EQ(c.pick(call(Op::bwd, Mode::det, 128, WDtype::bf16, 5), false).variant->name, "bwd_det_chunked");
  EXPECT_EQ(c.pick(call(Op::fwd, Mode::det, 64, WDtype::bf16, 5, Form::res), false).variant->name, "fwd_rowwise");
  const Pick past = c.pick(call(Op::bwd, Mode::det, 64, WDtype::bf16, 701), false);
  EXPECT_EQ(past.kind, PickKind::fallback);
  ASSERT_EQ(sink.lines.size(), 4u);
  EXPECT_NE(sink.lines[3].find("cover T = 1..700"), std::string::npos) << sink.lines[3];
  // Strict: the same calls are refused, naming the call and the table.
  try {
    (void)c.pick(h128, true);
    FAIL();
  } catch (const NoRoute& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("bwd nondet H=128 w=bf16 form=plain T=5 is outside every window of " + fx.table),
              std::string::npos) << m;
    EXPECT_NE(m.find("strict routes are on, so its fallback variant bwd_nondet_atomic does not run (STRICT-HINT)"),
              std::string::npos) << m;
  }
  EXPECT_EQ(c.inspect(h128, true).kind, PickKind::refused);
  EXPECT_EQ(sink.lines.size(), 4u);
}

TEST(DispatchCache, NoFallbackNamedRefusesOutsideTheWindows) {
  Sink sink;
  const RouteTable t = parse_route_table(with_fallback("fallback = { bwd_det = \"bwd_det_chunked\" }"), "t.toml");
  const DispatchCache c(Dispatcher(t, {}, {.allow_unapproved = true}), sink.options());
  sink.lines.clear();  // the policy notice
  EXPECT_EQ(c.pick(call(Op::bwd, Mode::det, 64, WDtype::bf16, 10), false).kind, PickKind::fallback);
  try {
    (void)c.pick(call(Op::bwd, Mode::nondet, 64, WDtype::bf16, 3), false);
    FAIL();
  } catch (const NoRoute& e) {
    EXPECT_NE(std::string(e.what()).find("the table names no fallback for bwd nondet"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)c.pick(call(Op::fwd, Mode::det, 64, WDtype::bf16, 3), false), NoRoute);
}

// An external variant re-registered after the table was loaded, with
// another mode, op or masks: the cached dispatcher refuses the calls it no
// longer serves, routed or as the fallback, naming it (the loader checked it
// as it was). Same name and origin, so add_external_variant replaces it.
TEST(DispatchCache, ReRegisteredExternalIsCheckedAtEachPick) {
  ExternalVariantSpec spec;
  spec.name = "dc_test_rereg";
  spec.op = Op::bwd;
  spec.mode = Mode::det;
  spec.forms = 0b1111;  // a fallback serves every form
  spec.description = "dispatch_cache_test";
  spec.origin = "dispatch_cache_test";
  spec.source_sha256 = std::string(64, 'a');
  (void)add_external_variant(spec);
  const std::string table =
      "arch = \"sm90a\"\n"
      "fallback = { bwd_det = \"dc_test_rereg\" }\n"
      "route = [\n"
      "  { op = \"bwd\", mode = \"det\", H = 64, w = \"bf16\", form = \"plain\", T = [1, 9], variant = "
      "\"dc_test_rereg\" },\n"
      "]\n";
  Sink sink;
  const RouteTable t = parse_route_table(table, "t.toml");
  const DispatchCache c(Dispatcher(t, {}, {.allow_unapproved = true}), sink.options());
  const CallKey routed = call(Op::bwd, Mode::det, 64, WDtype::bf16, 5), outside = call(Op::bwd, Mode::det, 128, WDtype::bf16, 5);
  EXPECT_EQ(c.pick(routed, false).kind, PickKind::unapproved);
  EXPECT_EQ(c.pick(outside, false).kind, PickKind::fallback);
  auto refused = [&](const CallKey& k, const std::string& want) {
    const Pick p = c.inspect(k, false);
    EXPECT_EQ(p.kind, PickKind::refused) << p.reason;
    EXPECT_NE(p.reason.find(want), std::string::npos) << p.reason;
    EXPECT_NE(p.reason.find("dc_test_rereg"), std::string::npos) << p.reason;
    EXPECT_ANY_THROW((void)c.pick(k, false));
  };
  spec.mode = Mode::nondet;  // now non-deterministic: no det call may run it
  (void)add_external_variant(spec);
  refused(routed, "the variant no longer serves this call");
  refused(outside, "its fallback variant dc_test_rereg does not serve it");
  spec.mode = Mode::det;
  spec.wdtypes = 1u << static_cast<int>(WDtype::fp32);  // BF16 w no longer
  (void)add_external_variant(spec);
  refused(routed, "re-registered after the table was loaded?");
  EXPECT_EQ(c.pick(call(Op::bwd, Mode::det, 128, WDtype::fp32, 5), false).kind, PickKind::fallback);
  spec.wdtypes = 0b11;  // as loaded: served again
  (void)add_external_variant(spec);
  EXPECT_EQ(c.pick(routed, false).kind, PickKind::unapproved);
}

// Dispatcher::pick (the uncached dispatcher) says a call outside every
// window is served by the fallback at run time.
TEST(DispatchCache, DispatcherNoRouteNamesTheFallback) {
  const RouteTable t = parse_route_table(with_fallback("fallback = { bwd_det = \"bwd_det_chunked\" }"), "t.toml");
  const Dispatcher d(t, {});
  try {
    (void)d.pick(call(Op::bwd, Mode::det, 128, WDtype::bf16, 5));
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("at run time the table's fallback bwd_det_chunked serves it"),
              std::string::npos) << e.what();
  }
  try {
    (void)d.pick(call(Op::bwd, Mode::nondet, 128, WDtype::bf16, 5));  // no nondet fallback named
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).find("fallback"), std::string::npos) << e.what();
  }
}

// Many threads hitting one fallback group: exactly one warning, every pick a fallback.
TEST(DispatchCache, ConcurrentPicksWarnOnce) {
  const test::DispatchFixture fx("threads");
  Sink sink;
  const DispatchCache c(Dispatcher::from_files(fx.table), sink.options());
  std::vector<std::thread> ts;
  std::vector<int> fallbacks(8, 0), routed(8, 0);
  for (int i = 0; i < 8; ++i)
    ts.emplace_back([&, i] {
      for (int k = 0; k < 2000; ++k) {
        fallbacks[i] += c.pick(call(Op::bwd, Mode::det, 256, WDtype::bf16, k), false).kind == PickKind::fallback;
        routed[i] += c.pick(call(Op::bwd, Mode::nondet, 64, WDtype::bf16, 1 + k % 700), false).variant->name ==
                     (1 + k % 700 <= 100 ? "bwd_det_chunked" : "bwd_nondet_atomic");
      }
    });
  for (auto& t : ts) t.join();
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(fallbacks[i], 2000);
    EXPECT_EQ(routed[i], 2000);
  }
  EXPECT_EQ(sink.lines.size(), 1u);
}

}  // namespace
