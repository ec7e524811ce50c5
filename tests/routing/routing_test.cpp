// tests/routing/routing_test.cpp: route-table loader, approvals file and dispatcher (routing.h).
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "normgate/kernels/registry.h"
#include "normgate/routing/policy.h"
#include "normgate/routing/rejections.h"
#include "normgate/routing/routing.h"

namespace {

using namespace normgate;
using namespace normgate::kernels;

const std::string kSrc = NORMGATE_SOURCE_DIR;

// A valid one-group table; tests splice a bad line in.
std::string table(const std::string& routes) {
  return "arch = \"sm90a\"\n"          // line 1
         "route = [\n"                 // line 2
         + routes + "]\n";             // routes from line 3
}

const std::string kDet1 =
    "  { op = \"bwd\", mode = \"det\", H = 2048, w = \"bf16\", form = \"plain\", T = [1, 100], variant = "
    "\"bwd_det_chunked\" },\n";

struct Reject {
  std::string text;
  std::string where;   // expected "t.toml:LINE:"
  std::string needle;  // expected in the message
};

TEST(RouteTable, RejectsWithFileLineAndEntry) {
  const Reject cases[] = {
      {table(kDet1 + "  { op = \"bwd\", mode = \"det\", H = 2048, w = \"bf16\", form = \"plain\", T = [101, 200], "
                     "variant = \"bwd_det_chunked\", colour = 1 },\n"),
       "t.toml:4:", "unknown key 'colour'"},
      {table("  { op = \"bwd\", mode = \"det\", H = 2048, w = \"bf16\", form = \"plain\", T = [1, 100], variant = "
             "\"bwd_magic\" },\n"),
       "t.toml:3:", "unknown kernel variant 'bwd_magic'"},
      // an implementation of the user's own: where it is known, said
      {table("  { op = \"bwd\", mode = \"det\", H = 2048, w = \"bf16\", form = \"plain\", T = [1, 100], variant = "
             "\"my_rmsnorm\" },\n"),
       "t.toml:3:", "a plugin's with --plugin LIB.so, a Python one in the process that called normgate.gate"},
      {table("  { op = \"bwd\", mode = \"det\", H = 2048, w = \"bf16\", form = \"plain\", T = [1, 100], variant = "
             "\"ctl_fp32_seq\" },\n"),
       "t.toml:3:", "NEGATIVE CONTROL"},
      {table("  { op = \"bwd\", mode = \"det\", H = 2048, w = \"bf16\", form = \"heads24\", T = [1, 100], variant = "
             "\"bwd_det_chunked\" },\n"),
       "t.toml:3:", "H must be 256, not 2048"},
      {table("  { op = \"bwd\", mode = \"det\", H = 20000, w = \"bf16\", form = \"plain\", T = [1, 100], variant = "
             "\"bwd_det_chunked\" },\n"),
       "t.toml:3:", "H 20000 out of range"},
      {table(kDet1 + "  { op = \"bwd\", mode = \"det\", H = 2048, w = \"bf16\", form = \"plain\", T = [100, 200], "
                     "variant = \"bwd_det_chunked\" },\n"),
       "t.toml:4:", "T=100..200 overlaps T=1..100 of the route at t.toml:3"},
      {table(kDet1 + "  { op = \"bwd\", mode = \"det\", H = 2048, w = \"bf16\", form = \"plain\", T = [150, 200], "
                     "variant = \"bwd_det_chunked\" },\n"),
       "t.toml:4:", "gap: T=101..149 is not routed"},
      {table("  { op = \"bwd\", mode = \"det\", H = 2048, w = \"bf16\", form = \"plain\", T = [300, 200], variant = "
             "\"bwd_det_chunked\" },\n"),
       "t.toml:3:", "T lo 300 > hi 200"},
      {table("  { op = \"bwd\", mode = \"det\", H = 2048, w = \"bf16\", form = \"plain\", T = [1, 100], variant = "
             "\"bwd_nondet_atomic\" },\n"),
       "t.toml:3:", "non-deterministic and cannot serve a det route"},
      {table("  { op = \"fwd\", mode = \"det\", H = 2048, w = \"bf16\", form = \"plain\", T = [1, 100], variant = "
             "\"fwd_rowwise\" },\n"),
       "t.toml:3:", "a fwd route must not have 'mode'"},
      {table("  { op = \"bwd\", mode = \"det\", H = 2048, w = \"bf16\", form = \"plain\", T = [1, 100], variant = "
             "\"fwd_rowwise\" },\n"),
       "t.toml:3:", "is a fwd variant but the route is bwd"},
      {table("  { op = \"bwd\", mode = \"det\", H = 2048, form = \"plain\", T = [1, 100], variant = "
             "\"bwd_det_chunked\" },\n"),
       "t.toml:3:", "missing key 'w'"},
      {table("  { op = \"bwd\", mode = \"det\", H = 2048, w = \"fp16\", form = \"plain\", T = [1, 100], variant = "
             "\"bwd_det_chunked\" },\n"),
       "t.toml:3:", "fp16"},
      {table("  { op = \"bwd\", mode = \"det\", H = 2048, w = \"bf16\", form = \"plain\", T = [1], variant = "
             "\"bwd_det_chunked\" },\n"),
       "t.toml:3:", "must be [lo, hi]"},
      {table("  { op = \"bwd\", mode = \"sometimes\", H = 2048, w = \"bf16\", form = \"plain\", T = [1, 9], variant "
             "= \"bwd_det_chunked\" },\n"),
       "t.toml:3:", "bad mode 'sometimes'"},
      {table("  { op = \"bwd\", mode = \"det\", H = \"2048\", w = \"bf16\", form = \"plain\", T = [1, 9], variant "
             "= \"bwd_det_chunked\" },\n"),
       "t.toml:3:", "key 'H' must be an integer"},
      {"arch = \"sm90a\"\nroute = [\n  { op = \"bwd\", mode = \"det\"\n]\n", "t.toml:3:", "TOML syntax error"},
      {"arch = \"sm90a\"\nroutes = []\n", "t.toml:2:", "unknown top-level key 'routes'"},
      {"arch = \"sm100a\"\nroute = [\n" + kDet1 + "]\n", "t.toml:1:", "arch must be \"sm90a\""},
      {"arch = \"sm90a\"\nroute = []\n", "t.toml:2:", "'route' is empty"},
  };
  for (const auto& c : cases) {
    try {
      (void)parse_route_table(c.text, "t.toml");
      ADD_FAILURE() << "accepted:\n" << c.text;
    } catch (const RouteTableError& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.rfind(c.where, 0), 0u) << "expected prefix " << c.where << " in: " << m;
      EXPECT_NE(m.find(c.needle), std::string::npos) << "expected '" << c.needle << "' in: " << m;
    }
  }
}

TEST(RouteTable, ErrorQuotesTheOffendingEntry) {
  try {
    (void)parse_route_table(table("  { op = \"bwd\", mode = \"det\", H = 64, w = \"bf16\", form = \"plain\", T = [1, "
                                  "9], variant = \"bwd_magic\" },\n"),
                            "t.toml");
    FAIL();
  } catch (const RouteTableError& e) {
    EXPECT_NE(std::string(e.what()).find("entry: { op = \"bwd\", mode = \"det\", H = 64"), std::string::npos)
        << e.what();
  }
}

// [[route]] sections are the same routes as inline tables; errors still name
// the line and quote the whole section.
TEST(RouteTable, SectionSyntaxEqualsInlineTables) {
  const std::string sections =
      "arch = \"sm90a\"\n"
      "[[route]]\nop = \"bwd\"\nmode = \"det\"\nH = 2048\nw = \"bf16\"\nform = \"plain\"\nT = [1, 100]\n"
      "variant = \"bwd_det_chunked\"\n";
  const RouteTable a = parse_route_table(sections, "s.toml");
  const RouteTable b = parse_route_table(table(kDet1), "t.toml");
  ASSERT_EQ(a.routes.size(), 1u);
  EXPECT_TRUE(a.routes[0].same_window(b.routes[0]));
  EXPECT_EQ(a.routes[0].variant, b.routes[0].variant);
  EXPECT_EQ(a.routes[0].line, 2);
  try {
    std::string bad = sections;
    bad.replace(bad.find("bwd_det_chunked"), 15, "bwd_det_chunke");
    (void)parse_route_table(bad, "s.toml");
    FAIL();
  } catch (const RouteTableError& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("s.toml:9:", 0), 0u) << m;
    EXPECT_NE(m.find("entry: [[route]] op = \"bwd\""), std::string::npos) << m;
  }
}

TEST(RouteTable, ControlTableRejectedUnlessOverridden) {
  const std::string path = kSrc + "/tests/data/routes/ctl_override.toml";
  try {
    (void)load_route_table(path);
    FAIL() << "a table routing a negative control loaded";
  } catch (const RouteTableError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("ctl_override.toml:8:"), std::string::npos) << m;
    EXPECT_NE(m.find("NEGATIVE CONTROL"), std::string::npos) << m;
  }
  const RouteTable t = load_route_table(path, {.allow_controls = true});
  ASSERT_EQ(t.routes.size(), 1u);
  EXPECT_TRUE(t.routes[0].variant->control);
  // The dispatcher never routes a control, even from a table loaded with the override.
  EXPECT_THROW(Dispatcher(t, {}, {.accept_cpu_model = true, .allow_unapproved = true}), RouteTableError);
}

TEST(RouteTable, MissingFileNamesThePath) {
  try {
    (void)load_route_table("/nonexistent/x.toml");
    FAIL();
  } catch (const RouteTableError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/x.toml"), std::string::npos);
  }
  // A folder opens as an empty stream: said as a folder, not as "missing key 'arch'".
  try {
    (void)load_route_table(kSrc + "/routes");
    FAIL();
  } catch (const RouteTableError& e) {
    EXPECT_NE(std::string(e.what()).find("/routes: cannot read route table: it is a directory"), std::string::npos)
        << e.what();
  }
  // A FIFO blocked the open (the CLI, load_routes and $NORMGATE_ROUTES hung)
  // and a device read without end: neither is opened.
  const std::string fifo = ::testing::TempDir() + "/ng_routes_fifo_" + std::to_string(::getpid()) + ".toml";
  std::filesystem::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << fifo;
  for (const std::string& p : {fifo, std::string("/dev/zero")}) {
    try {
      (void)load_route_table(p);
      ADD_FAILURE() << p << " was read";
    } catch (const RouteTableError& e) {
      EXPECT_NE(std::string(e.what()).find(p + ": cannot read route table: not a regular file"), std::string::npos)
          << e.what();
    }
  }
  std::filesystem::remove(fifo);
}

// The shipped table covers H in {1536, 2048, 4096, 5120, 6144}, T 1..131072,
// both modes and both weight dtypes, every route approved.
// The shipped tables: routes/sm90a.toml and every per-GPU table beside it
// (routing.h, "Per-GPU tables").
std::vector<std::string> shipped_tables() {
  std::vector<std::string> out{kSrc + "/routes/sm90a.toml"};
  for (const auto& e : std::filesystem::directory_iterator(kSrc + "/routes")) {
    const std::string p = e.path().string();
    if (!gpu_table_slug(p).empty() && table_file_stem(p) == kSrc + "/routes/sm90a") out.push_back(p);
  }
  return out;
}

void check_production_table(const std::string& path);

TEST(RouteTable, Sm90aCoversTheProductionShapes) {
  const std::vector<std::string> tables = shipped_tables();
  ASSERT_GE(tables.size(), 2u) << "routes/sm90a.toml and the H100's per-GPU table";
  for (const std::string& p : tables) {
    SCOPED_TRACE(p);
    check_production_table(p);
  }
  EXPECT_NO_THROW((void)load_route_table(kSrc + "/routes/sm90a-ci.toml"));
}

void check_production_table(const std::string& path) {
  const RouteTable t = load_route_table(path);
  // Per-head views: H = 256, T (tokens) 1..131072, both modes and dtypes.
  for (Form f : {Form::heads24, Form::heads4})
    for (WDtype w : {WDtype::bf16, WDtype::fp32})
      for (int64_t T : {int64_t{1}, int64_t{4097}, int64_t{131072}}) {
        const Route* d = t.find(Op::bwd, Mode::det, 256, w, f, T);
        ASSERT_NE(d, nullptr) << to_string(f) << " " << T;
        EXPECT_EQ(d->variant->mode, Mode::det) << d->describe();
        const Route* n = t.find(Op::bwd, Mode::nondet, 256, w, f, T);
        ASSERT_NE(n, nullptr) << to_string(f) << " " << T;
        EXPECT_EQ(n->variant->op, Op::bwd);
        ASSERT_NE(t.find(Op::fwd, Mode::det, 256, w, f, T), nullptr);
      }
  EXPECT_EQ(t.find(Op::bwd, Mode::det, 256, WDtype::bf16, Form::res, 100), nullptr);  // no res route at H=256
  for (WDtype w : {WDtype::bf16, WDtype::fp32}) {  // res at H = 6144
    ASSERT_NE(t.find(Op::bwd, Mode::det, 6144, w, Form::res, 131072), nullptr);
    ASSERT_NE(t.find(Op::bwd, Mode::nondet, 6144, w, Form::res, 1), nullptr);
    ASSERT_NE(t.find(Op::fwd, Mode::det, 6144, w, Form::res, 4097), nullptr);
  }
  EXPECT_EQ(t.arch, "sm90a");
  EXPECT_EQ(t.sha256.size(), 64u);
  // The table is derived (normgate derive): which variant serves a window is
  // a measurement, so the test holds what every derived table must: each
  // call is covered, by a variant of the right op that keeps the mode's
  // promise, and every route has a current GPU approval.
  const Approvals ap = load_approvals(approvals_path_for(path));
  EXPECT_EQ(ap.path, kSrc + "/routes/sm90a.approvals.json");  // one approvals file for every GPU's table
  for (int64_t H : {1536, 2048, 4096, 5120, 6144})
    for (WDtype w : {WDtype::bf16, WDtype::fp32})
      for (int64_t T : {int64_t{0}, int64_t{1}, int64_t{4097}, int64_t{65536}, int64_t{65537}, int64_t{131072}}) {
        const Route* f = t.find(Op::fwd, Mode::nondet, H, w, Form::plain, T);
        ASSERT_NE(f, nullptr) << H << " " << T;
        EXPECT_EQ(f->variant->op, Op::fwd);
        const Route* d = t.find(Op::bwd, Mode::det, H, w, Form::plain, T);
        ASSERT_NE(d, nullptr) << H << " " << T;
        EXPECT_EQ(d->variant->mode, Mode::det) << d->describe();
        const Route* n = t.find(Op::bwd, Mode::nondet, H, w, Form::plain, T);
        ASSERT_NE(n, nullptr) << H << " " << T;
        EXPECT_EQ(n->variant->op, Op::bwd);
        // Form res's backward at every production H (routes.md D18; until
        // then H = 1536-5120 ran the fallback).
        const Route* rd = t.find(Op::bwd, Mode::det, H, w, Form::res, T);
        ASSERT_NE(rd, nullptr) << "res " << H << " " << T;
        EXPECT_EQ(rd->variant->mode, Mode::det) << rd->describe();
        ASSERT_NE(t.find(Op::bwd, Mode::nondet, H, w, Form::res, T), nullptr) << "res " << H << " " << T;
      }
  for (const Route& r : t.routes) {
    EXPECT_FALSE(r.variant->control) << r.describe();
    EXPECT_EQ(approval_status(r, ap, false).state, ApprovalState::current) << r.describe();
  }
  EXPECT_EQ(t.find(Op::bwd, Mode::det, 2048, WDtype::bf16, Form::plain, 131073), nullptr);
  EXPECT_EQ(t.find(Op::bwd, Mode::det, 3072, WDtype::bf16, Form::plain, 100), nullptr);
  EXPECT_EQ(t.find(Op::bwd, Mode::det, 3072, WDtype::bf16, Form::res, 100), nullptr);
  // Each group's windows end at 131072; each route knows its line.
  const Route* d = t.find(Op::bwd, Mode::det, 2048, WDtype::bf16, Form::plain, 131072);
  EXPECT_EQ(d->t_hi, 131072);
  EXPECT_GT(d->line, 1);
}

TEST(Approvals, PerGpuTablesShareTheBaseTablesFiles) {
  EXPECT_EQ(gpu_slug("NVIDIA H100 80GB HBM3"), "nvidia-h100-80gb-hbm3");
  EXPECT_EQ(gpu_slug("NVIDIA H200"), "nvidia-h200");
  EXPECT_EQ(gpu_slug("  NVIDIA  H100 (PCIe)__ "), "nvidia-h100-pcie");  // runs of others: one '-', none at the ends
  EXPECT_EQ(gpu_slug("\xc3\xa9!"), "");  // no ASCII letter or digit
  EXPECT_EQ(gpu_slug(""), "");
  const std::string t = "routes/sm90a@nvidia-h100-80gb-hbm3.toml";
  EXPECT_EQ(gpu_table_slug(t), "nvidia-h100-80gb-hbm3");
  EXPECT_EQ(table_file_stem(t), "routes/sm90a");
  EXPECT_EQ(approvals_path_for(t), "routes/sm90a.approvals.json");
  EXPECT_EQ(policy_path_for(t), "routes/sm90a.policy.toml");
  EXPECT_EQ(rejections_path_for(t), "routes/sm90a.rejections.json");
  EXPECT_EQ(approvals_path_for("sm90a@nvidia-h200.toml"), "sm90a.approvals.json");  // no folder
  // Not per-GPU names: files of their own, as before.
  for (const std::string n : {"routes/sm90a.toml", "routes/sm90a@.toml", "routes/@nvidia-h200.toml",
                              "routes/sm90a@NVIDIA-H200.toml", "routes/sm90a@nvidia--h200.toml",
                              "routes/sm90a@nvidia-h200-.toml", "a@b/sm90a.toml", "routes/sm90a@x.tbl"}) {
    EXPECT_EQ(gpu_table_slug(n), "") << n;
    EXPECT_EQ(approvals_path_for(n), n.substr(0, n.size() - (n.ends_with(".toml") ? 5 : 0)) + ".approvals.json") << n;
  }
  EXPECT_EQ(table_file_stem("a@b/sm90a.toml"), "a@b/sm90a");
  // The one rule behind the three: any suffix, any name.
  EXPECT_EQ(table_sibling_path(t, ".lock"), "routes/sm90a.lock");
  EXPECT_EQ(table_sibling_path("routes/t.tbl", ".policy.toml"), "routes/t.tbl.policy.toml");
  EXPECT_EQ(table_sibling_path("routes/sm90a@NVIDIA.toml", ".rejections.json"), "routes/sm90a@NVIDIA.rejections.json");
  for (const std::string n : {t, std::string("t.toml"), std::string("d/x@nvidia-h200.toml"), std::string("d/x.tbl")}) {
    EXPECT_EQ(policy_path_for(n), table_sibling_path(n, ".policy.toml")) << n;
    EXPECT_EQ(rejections_path_for(n), table_sibling_path(n, ".rejections.json")) << n;
  }
  EXPECT_EQ(table_file_stem("x/t.tbl"), "");
  EXPECT_EQ(table_file_stem(".toml"), "");
}

TEST(Approvals, TableForGpuPicksThePerGpuTableWhenItExists) {
  const std::string dir = ::testing::TempDir() + "ng_table_for_gpu_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string base = dir + "/sm90a.toml";
  std::ofstream(base) << "x";
  EXPECT_EQ(table_for_gpu(base, "NVIDIA H100 80GB HBM3"), base);  // none beside it
  EXPECT_EQ(gpu_table_path(base, "NVIDIA H100 80GB HBM3"), dir + "/sm90a@nvidia-h100-80gb-hbm3.toml");  // its name
  EXPECT_EQ(gpu_table_path(dir + "/sm90a@nvidia-h200.toml", "NVIDIA H100"), "");  // not a base table
  EXPECT_EQ(gpu_table_path(base, "***"), "");                                   // no slug
  std::ofstream(dir + "/sm90a@nvidia-h100-80gb-hbm3.toml") << "x";
  EXPECT_EQ(table_for_gpu(base, "NVIDIA H100 80GB HBM3"), dir + "/sm90a@nvidia-h100-80gb-hbm3.toml");
  EXPECT_EQ(table_for_gpu(base, "NVIDIA H100 PCIe"), base);  // another model: the base table
  EXPECT_EQ(table_for_gpu(base, "NVIDIA H200"), base);
  EXPECT_EQ(table_for_gpu(base, ""), base);  // no device name
  std::filesystem::create_directories(dir + "/sm90a@nvidia-h200.toml");  // a folder is no table
  EXPECT_EQ(table_for_gpu(base, "NVIDIA H200"), base);
  // Only from a base table: a per-GPU one, or a name not *.toml, is returned as given.
  EXPECT_EQ(table_for_gpu(dir + "/sm90a@nvidia-h200.toml", "NVIDIA H100 80GB HBM3"), dir + "/sm90a@nvidia-h200.toml");
  EXPECT_EQ(table_for_gpu(dir + "/t.tbl", "NVIDIA H100 80GB HBM3"), dir + "/t.tbl");
  std::filesystem::remove_all(dir);
}

TEST(Approvals, PathNextToTheTable) {
  EXPECT_EQ(approvals_path_for("routes/sm90a.toml"), "routes/sm90a.approvals.json");
  EXPECT_EQ(approvals_path_for("x/t"), "x/t.approvals.json");
  // The inverse, for the names approvals_path_for gives *.toml tables.
  EXPECT_EQ(table_path_for_approvals("routes/sm90a.approvals.json"), "routes/sm90a.toml");
  EXPECT_EQ(table_path_for_approvals(approvals_path_for("a.b/c.d.toml")), "a.b/c.d.toml");
  EXPECT_EQ(table_path_for_approvals("x/t.json"), "");
  EXPECT_EQ(table_path_for_approvals(".approvals.json"), "");  // no stem
  EXPECT_EQ(table_path_for_approvals("x/t.approvals.json.bak"), "");
}

Approval approval_for(const Route& r, std::string backend, std::string hash) {
  Approval a;
  a.op = r.op;
  a.mode = r.mode;
  a.H = r.H;
  a.w = r.w;
  a.form = r.form;
  a.t_lo = r.t_lo;
  a.t_hi = r.t_hi;
  a.variant = std::string(r.variant->name);
  a.source_sha256 = std::move(hash);
  a.backend = std::move(backend);
  a.gpu = a.backend == "gpu" ? "NVIDIA H200" : "cpu-model";
  a.driver = a.backend == "gpu" ? "580.159.04" : "-";
  a.cuda = a.backend == "gpu" ? "13.0" : "-";
  a.seed_set = "3x120";
  a.t_points = {r.t_lo, r.t_hi};
  a.cases = 720;
  a.max_err_tol = {{"y", 0.31}, {"rstd", 0.02}};
  if (r.op == Op::bwd) a.max_err_tol.insert({{"dx", 0.38}, {"dw", 0.0}});
  a.worst_case = "H=" + std::to_string(r.H) + ",T=" + std::to_string(r.t_hi) + ",w=" + std::string(to_string(r.w)) +
                 ",form=" + std::string(to_string(r.form)) + ",family=cancel,seed=3";
  a.date = "2026-12-01T00:00:00Z";
  a.normgate_commit = "abc";
  a.normgate_version = "0.1.0";
  return a;
}

const std::string kTwoGroups = table(
    kDet1 +
    "  { op = \"bwd\", mode = \"nondet\", H = 2048, w = \"bf16\", form = \"plain\", T = [1, 100], variant = "
    "\"bwd_nondet_atomic\" },\n"
    "  { op = \"fwd\", H = 2048, w = \"bf16\", form = \"plain\", T = [1, 100], variant = \"fwd_rowwise\" },\n");

TEST(Dispatcher, RefusesRoutesWithoutCurrentApproval) {
  const RouteTable t = parse_route_table(kTwoGroups, "t.toml");
  const Route& det = t.routes[0];
  const CallKey k{Op::bwd, Mode::det, 2048, WDtype::bf16, Form::plain, 50};

  // Missing.
  Approvals none;
  none.path = "t.approvals.json";
  try {
    (void)Dispatcher(t, none).pick(k);
    FAIL();
  } catch (const UnapprovedRoute& e) {
    EXPECT_EQ(e.state, ApprovalState::missing);
    const std::string m = e.what();
    EXPECT_NE(m.find("t.toml:3"), std::string::npos) << m;
    EXPECT_NE(m.find("bwd_det_chunked"), std::string::npos) << m;
    EXPECT_NE(m.find("t.approvals.json"), std::string::npos) << m;
  }
  // Explicit override.
  const Decision o = Dispatcher(t, none, {.allow_unapproved = true}).pick(k);
  EXPECT_TRUE(o.overridden);
  EXPECT_EQ(o.variant->name, "bwd_det_chunked");

  // Current GPU approval.
  Approvals cur = none;
  cur.records.push_back(approval_for(det, "gpu", std::string(det.variant->source_sha256)));
  const Dispatcher disp(t, cur);
  const Decision d = disp.pick(k);
  EXPECT_EQ(d.approval.state, ApprovalState::current);
  EXPECT_FALSE(d.overridden);
  EXPECT_EQ(d.route, &disp.table().routes[0]);
  // T == 0 is served by the window holding T == 1.
  EXPECT_NO_THROW((void)Dispatcher(t, cur).pick({Op::bwd, Mode::det, 2048, WDtype::bf16, Form::plain, 0}));
  // The nondet route of the same window is still unapproved.
  EXPECT_THROW((void)Dispatcher(t, cur).pick({Op::bwd, Mode::nondet, 2048, WDtype::bf16, Form::plain, 50}),
               UnapprovedRoute);

  // Stale: the code changed since the gate; the message shows both hashes.
  Approvals stale = none;
  stale.records.push_back(approval_for(det, "gpu", std::string(64, 'a')));
  try {
    (void)Dispatcher(t, stale).pick(k);
    FAIL();
  } catch (const UnapprovedRoute& e) {
    EXPECT_EQ(e.state, ApprovalState::stale);
    const std::string m = e.what();
    EXPECT_NE(m.find("stale"), std::string::npos) << m;
    EXPECT_NE(m.find("aaaaaaaaaaaa"), std::string::npos) << m;
    EXPECT_NE(m.find(std::string(det.variant->source_sha256.substr(0, 12))), std::string::npos) << m;
  }

  // CPU-model approvals count only when the policy says so.
  Approvals cpu = none;
  cpu.records.push_back(approval_for(det, "cpu-model", std::string(det.variant->source_sha256)));
  try {
    (void)Dispatcher(t, cpu).pick(k);
    FAIL();
  } catch (const UnapprovedRoute& e) {
    EXPECT_EQ(e.state, ApprovalState::cpu_model_only);
    EXPECT_NE(std::string(e.what()).find("cpu-model"), std::string::npos) << e.what();
  }
  EXPECT_EQ(Dispatcher(t, cpu, {.accept_cpu_model = true}).pick(k).approval.state, ApprovalState::current);

  // An approval of another variant for the same window does not count.
  Approvals other = none;
  Approval x = approval_for(det, "gpu", std::string(variant("bwd_nondet_atomic").source_sha256));
  x.variant = "bwd_nondet_atomic";
  other.records.push_back(x);
  try {
    (void)Dispatcher(t, other).pick(k);
    FAIL();
  } catch (const UnapprovedRoute& e) {
    EXPECT_EQ(e.state, ApprovalState::missing);
    EXPECT_NE(std::string(e.what()).find("is for variant bwd_nondet_atomic"), std::string::npos) << e.what();
  }
  // An approval of another window does not count either.
  Approvals shifted = none;
  Approval y = approval_for(det, "gpu", std::string(det.variant->source_sha256));
  y.t_hi = 99;
  shifted.records.push_back(y);
  EXPECT_THROW((void)Dispatcher(t, shifted).pick(k), UnapprovedRoute);
}

TEST(Dispatcher, NoRouteIsAnInputError) {
  const RouteTable t = parse_route_table(kTwoGroups, "t.toml");
  const Dispatcher d(t, {}, {.allow_unapproved = true});
  EXPECT_THROW((void)d.pick({Op::bwd, Mode::det, 2048, WDtype::bf16, Form::plain, 101}), std::invalid_argument);
  EXPECT_THROW((void)d.pick({Op::bwd, Mode::det, 2048, WDtype::fp32, Form::plain, 5}), std::invalid_argument);
  EXPECT_THROW((void)d.pick({Op::bwd, Mode::det, 2048, WDtype::bf16, Form::plain, -1}), std::invalid_argument);
  // Forward routes serve both modes.
  EXPECT_EQ(d.pick({Op::fwd, Mode::nondet, 2048, WDtype::bf16, Form::plain, 7}).variant->name, "fwd_rowwise");
  EXPECT_EQ(d.inspect({Op::bwd, Mode::det, 2048, WDtype::bf16, Form::plain, 101}).route, nullptr);
}

TEST(Approvals, RoundTripThroughTheFile) {
  const RouteTable t = parse_route_table(kTwoGroups, "t.toml");
  const std::string dir = std::string(NORMGATE_BINARY_DIR) + "/routing_test_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  Approvals a;
  a.path = dir + "/t.approvals.json";
  EXPECT_TRUE(load_approvals(a.path).records.empty());  // no file: nothing approved
  a.records.push_back(approval_for(t.routes[0], "gpu", std::string(t.routes[0].variant->source_sha256)));
  a.records.push_back(approval_for(t.routes[2], "cpu-model", std::string(t.routes[2].variant->source_sha256)));
  save_approvals(a);
  const Approvals b = load_approvals(a.path);
  ASSERT_EQ(b.records.size(), 2u);
  EXPECT_EQ(approvals_to_json_text(b), approvals_to_json_text(a));
  EXPECT_EQ(invalid_count(b), 0u);
  EXPECT_EQ(b.records[0].max_err_tol.at("dw"), 0.0);
  EXPECT_EQ(b.records[0].record_sha256, approval_record_sha256(a.records[0]));
  EXPECT_EQ(b.records[1].op, Op::fwd);
  EXPECT_EQ(Dispatcher(t, b).pick({Op::bwd, Mode::det, 2048, WDtype::bf16, Form::plain, 1}).approval.state,
            ApprovalState::current);
  // No temporary file left behind.
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 1);

  // A malformed record is INVALID, naming the record and the field; it is
  // kept, and written back as it was read.
  {
    std::ofstream f(a.path);
    f << R"({"format": "normgate-approvals/1", "approvals": [{"window": {"op": "bwd", "mode": "det", "H": 64,
          "w": "bf16", "form": "plain", "T": [1, 2]}, "variant": "bwd_det_chunked"}]})";
  }
  {
    const Approvals m = load_approvals(a.path);
    ASSERT_EQ(m.records.size(), 1u);
    EXPECT_EQ(m.records[0].invalid, "record 0: field 'source_sha256' must be a string");
    EXPECT_NE(approvals_to_json_text(m).find("\"variant\": \"bwd_det_chunked\""), std::string::npos);
  }
  {
    std::ofstream f(a.path);
    f << "{not json";
  }
  EXPECT_THROW((void)load_approvals(a.path), RouteTableError);
  // A folder where the file should be: an input error naming the path.
  std::filesystem::remove(a.path);
  std::filesystem::create_directories(a.path);
  try {
    (void)load_approvals(a.path);
    FAIL();
  } catch (const RouteTableError& e) {
    EXPECT_NE(std::string(e.what()).find(a.path + ": cannot read approvals: is a directory"), std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace

namespace normgate::kernels {
namespace {

// A call outside every window: the error says what the table covers for
// that (op, mode, H, w, form), or that it covers nothing there.
TEST(Dispatcher, NoRouteSaysWhatTheTableCovers) {
  const RouteTable t = parse_route_table(kTwoGroups, "t.toml");
  Approvals none;
  none.path = "t.approvals.json";
  const Dispatcher d(t, none, {.allow_unapproved = true});
  auto message = [&](const CallKey& k) {
    try {
      (void)d.pick(k);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  const std::string past = message({Op::bwd, Mode::det, 2048, WDtype::bf16, Form::plain, 101});
  EXPECT_NE(past.find("no route for bwd det H=2048 w=bf16 form=plain T=101 in t.toml"), std::string::npos) << past;
  EXPECT_NE(past.find("cover T = 1..100"), std::string::npos) << past;
  const std::string other_h = message({Op::bwd, Mode::det, 4096, WDtype::bf16, Form::plain, 5});
  EXPECT_NE(other_h.find("the table has no route for this op, mode, H, w and form"), std::string::npos) << other_h;
  const std::string negative = message({Op::fwd, Mode::det, 2048, WDtype::bf16, Form::plain, -1});
  EXPECT_NE(negative.find("(T < 0)"), std::string::npos) << negative;
}

}  // namespace
}  // namespace normgate::kernels
