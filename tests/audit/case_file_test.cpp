// tests/audit/case_file_test.cpp: case_file.h: HDF5 case and maps files. Round trip (write, read back, same
// numbers), replay from the file gives the same verdict and worst elements as
// the generated case, and damaged files (flipped bytes, truncation, modified
// inputs) give errors naming the file, never a crash or silent garbage.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "normgate/kernels/registry.h"
#include "normgate/audit/case_file.h"
#include "normgate/audit/export.h"
#include "normgate/audit/repro.h"
#include "util/cpu_request.h"

namespace nv = normgate::validators;
namespace fs = std::filesystem;

namespace {

std::string temp_path(const std::string& name) {
  const fs::path d = fs::path(NORMGATE_BINARY_DIR) / ("test_case_file_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return (d / name).string();
}

nv::CheckRequest request(const char* id, const char* impl) { return nv::testing::cpu_request(id, impl); }

nv::ReproReport saved_repro(const nv::CheckRequest& req) {
  nv::ReproOptions o;
  o.k = 3;
  o.keep_case = true;
  o.tile = 64;
  o.normgate_version = "test";
  return nv::repro(req, o);
}

std::vector<char> slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}
void spit(const std::string& p, const std::vector<char>& b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(b.data(), static_cast<std::streamsize>(b.size()));
}

}  // namespace

TEST(CaseFile, RoundTripReplayAndNoHalfFiles) {
  const auto req = request("H=200,T=300,w=fp32,form=plain,family=cancel,seed=3", "ctl_fp32_seq");
  const auto r = saved_repro(req);
  ASSERT_TRUE(r.saved.has_value());
  const std::string path = temp_path("case.h5");
  nv::write_case_file(path, *r.saved);
  // No temporary left beside it.
  for (const auto& e : fs::directory_iterator(fs::path(path).parent_path()))
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();

  const nv::SavedCase back = nv::read_case_file(path);
  const nv::SavedCase& a = *r.saved;
  EXPECT_EQ(back.prov.case_id, "H=200,T=300,w=fp32,form=plain,family=cancel,seed=3");
  EXPECT_EQ(back.prov.impl, "ctl_fp32_seq");
  EXPECT_EQ(back.prov.verdict, "fail");
  EXPECT_EQ(back.prov.backend, "cpu-model");
  // The forward under audit for y and rstd, with the registry's hash.
  EXPECT_EQ(back.prov.fwd, "fwd_rowwise");
  EXPECT_EQ(back.prov.fwd_sha256, std::string(normgate::kernels::variant("fwd_rowwise").source_sha256));
  EXPECT_NE(back.prov.fwd_sha256, back.prov.impl_sha256);
  EXPECT_EQ(back.inputs_sha256, a.inputs_sha256);
  EXPECT_EQ(back.inputs.x, a.inputs.x);
  EXPECT_EQ(back.inputs.w_f32, a.inputs.w_f32);
  EXPECT_EQ(back.outputs.dx, a.outputs.dx);
  EXPECT_EQ(0, std::memcmp(back.outputs.dw.data(), a.outputs.dw.data(), a.outputs.dw.size() * 4));
  EXPECT_EQ(back.ref_dw, a.ref_dw);
  EXPECT_EQ(back.ref_rstd_bound, a.ref_rstd_bound);
  EXPECT_EQ(back.maps.dw_ratio, a.maps.dw_ratio);
  EXPECT_EQ(back.maps.dx_tiles, a.maps.dx_tiles);
  EXPECT_EQ(back.maps.hist[2], a.maps.hist[2]);
  EXPECT_EQ(back.maps.tile_rows, 5);  // ceil(300 / 64)
  EXPECT_EQ(back.maps.tile_cols, 4);  // ceil(200 / 64)
  // The maps agree with the validator: max dw err/tol is the report's.
  double mdw = 0;
  for (double v : back.maps.dw_ratio) mdw = std::max(mdw, v);
  EXPECT_EQ(mdw, r.check.impls[0].result.get(nv::Output::dw).worst.ratio);
  float mdx = 0;
  for (float v : back.maps.dx_tiles) mdx = std::max(mdx, v);
  EXPECT_EQ(mdx, static_cast<float>(r.check.impls[0].result.get(nv::Output::dx).worst.ratio));

  // Replay from the file's inputs: the same verdict and worst elements.
  nv::ReproOptions o;
  o.k = 3;
  o.inputs = &back.inputs;
  o.replay_file = path;
  const auto again = nv::repro(req, o);
  EXPECT_EQ(again.check.impls[0].result.verdict(), r.check.impls[0].result.verdict());
  for (size_t t = 0; t < 4; ++t) {
    ASSERT_EQ(again.worst[t].size(), r.worst[t].size());
    for (size_t i = 0; i < r.worst[t].size(); ++i) {
      EXPECT_EQ(again.worst[t][i].index, r.worst[t][i].index);
      EXPECT_EQ(again.worst[t][i].ratio, r.worst[t][i].ratio);
    }
  }
  EXPECT_NE(again.command.find("--file '" + path + "'"), std::string::npos) << again.command;
  EXPECT_NE(nv::inspect_file(path).find("verified"), std::string::npos);
  fs::remove_all(fs::path(path).parent_path());
}

// A case file written over an existing one keeps that file's permission
// bits (its temporary was created 0644 whatever they were: a 0600 case file
// of a private model came back world-readable); a new one is 0644 less the
// umask; setuid, setgid and sticky are not carried over.
TEST(CaseFile, ARewriteKeepsTheFilesMode) {
  const auto r = saved_repro(request("H=64,T=8,w=bf16,form=plain,family=normal,seed=1", "bwd_det_chunked"));
  ASSERT_TRUE(r.saved.has_value());
  const std::string path = temp_path("mode.h5"), fresh = temp_path("fresh.h5");
  std::ofstream(path) << "old\n";
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  nv::write_case_file(path, *r.saved);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(nv::read_case_file(path).prov.impl, "bwd_det_chunked");  // rewritten
  ASSERT_EQ(::chmod(path.c_str(), 02750), 0);
  nv::write_case_file(path, *r.saved);
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0750u);
  nv::write_case_file(fresh, *r.saved);
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ASSERT_EQ(::stat(fresh.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u & ~mask);
  fs::remove_all(fs::path(path).parent_path());
}

// Every form round-trips: res (u, dh_new, h_new stored) and a per-head view.
TEST(CaseFile, ResidualAndHeadFormsRoundTrip) {
  for (const char* id : {"H=64,T=90,w=bf16,form=res,family=llm,seed=1",
                         "H=256,T=7,w=fp32,form=heads24,family=cancel,seed=2"}) {
    SCOPED_TRACE(id);
    const auto r = saved_repro(request(id, "bwd_det_chunked"));
    const std::string path = temp_path("form.h5");
    nv::write_case_file(path, *r.saved);
    const nv::SavedCase back = nv::read_case_file(path);
    EXPECT_EQ(back.inputs.u, r.saved->inputs.u);
    EXPECT_EQ(back.inputs.dh_new, r.saved->inputs.dh_new);
    EXPECT_EQ(back.outputs.h_new, r.saved->outputs.h_new);
    EXPECT_EQ(back.outputs.dx, r.saved->outputs.dx);
    EXPECT_EQ(back.inputs_sha256, r.saved->inputs_sha256);
    // Replay gives the same verdict.
    nv::ReproOptions o;
    o.inputs = &back.inputs;
    const auto again = nv::repro(request(id, "bwd_det_chunked"), o);
    EXPECT_EQ(again.check.impls[0].result.verdict(), r.check.impls[0].result.verdict());
    EXPECT_EQ(again.worst[2].front().ratio, r.worst[2].front().ratio);
  }
  const auto res = saved_repro(request("H=64,T=90,w=bf16,form=res,family=llm,seed=1", "bwd_det_chunked"));
  EXPECT_EQ(res.saved->outputs.h_new.size(), 64u * 90u);
  fs::remove_all(fs::path(temp_path("x")).parent_path());
}

TEST(CaseFile, DamagedFilesGiveClearErrors) {
  const auto r = saved_repro(request("H=128,T=256,w=bf16,form=plain,family=normal,seed=1", "bwd_det_chunked"));
  const std::string path = temp_path("good.h5");
  nv::write_case_file(path, *r.saved);
  const std::vector<char> good = slurp(path);
  ASSERT_GT(good.size(), 20000u);

  auto expect_error = [&](const std::vector<char>& bytes, const char* what) {
    const std::string p = temp_path(std::string("bad_") + what + ".h5");
    spit(p, bytes);
    try {
      (void)nv::read_case_file(p);
      ADD_FAILURE() << what << ": no error";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << what << ": " << e.what();
    }
  };
  // Truncated: half the file, and only the first 100 bytes.
  expect_error(std::vector<char>(good.begin(), good.begin() + static_cast<long>(good.size() / 2)), "half");
  expect_error(std::vector<char>(good.begin(), good.begin() + 100), "head");
  expect_error({}, "empty");
  // Flipped bytes in the data region: every 997th byte of the second half.
  std::vector<char> flipped = good;
  for (size_t i = good.size() / 2; i < good.size(); i += 997) flipped[i] = static_cast<char>(flipped[i] ^ 0x5A);
  expect_error(flipped, "flipped");
  // Not a normgate file at all.
  expect_error(std::vector<char>(4096, 'x'), "text");

  // Modified inputs with the original digest: a digest mismatch naming both.
  nv::SavedCase mod = *r.saved;
  mod.inputs.x[17] ^= 0x0001;
  const std::string pm = temp_path("modified.h5");
  nv::write_case_file(pm, mod);
  try {
    (void)nv::read_case_file(pm);
    ADD_FAILURE() << "modified inputs: no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("SHA-256"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(mod.inputs_sha256), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)nv::read_case_file(temp_path("missing.h5")), std::runtime_error);
  fs::remove_all(fs::path(path).parent_path());
}

TEST(CaseFile, MapsFileRoundTrip) {
  const auto r = saved_repro(request("H=96,T=130,w=bf16,form=plain,family=llm,seed=2", "bwd_nondet_atomic"));
  std::vector<nv::MapsEntry> es(2);
  es[0].prov = r.saved->prov;
  es[0].prov.window = "bwd nondet H=96 w=bf16 form=plain T=1..200";
  es[0].maps = r.saved->maps;
  es[0].max_ratio = {0.25, 0.01, 0.3, 0.02};
  es[1] = es[0];
  es[1].prov.case_id = "H=96,T=130,w=bf16,form=plain,family=llm,seed=7";
  es[1].maps.dx_full.assign(static_cast<size_t>(130 * 96), 0.125f);
  const std::string path = temp_path("maps.h5");
  const std::string sha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
  nv::write_maps_file(path, "report.json", es, sha);
  std::string src, src_sha = "unset";
  const auto back = nv::read_maps_file(path, &src, &src_sha);
  EXPECT_EQ(src, "report.json");
  EXPECT_EQ(src_sha, sha);  // the report's digest, for plot to check the report against
  EXPECT_THROW(nv::write_maps_file(temp_path("bad_sha.h5"), "r.json", es, "ABC"), std::invalid_argument);
  EXPECT_FALSE(fs::exists(temp_path("bad_sha.h5")));
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].prov.window, es[0].prov.window);
  EXPECT_EQ(back[1].prov.case_id, "H=96,T=130,w=bf16,form=plain,family=llm,seed=7");
  EXPECT_EQ(back[0].maps.rstd_ratio, es[0].maps.rstd_ratio);
  EXPECT_TRUE(back[0].maps.dx_full.empty());
  EXPECT_EQ(back[1].maps.dx_full, es[1].maps.dx_full);
  EXPECT_EQ(back[0].max_ratio, es[0].max_ratio);
  EXPECT_NE(nv::inspect_file(path).find("2 entries"), std::string::npos);
  fs::remove_all(fs::path(path).parent_path());
}

// export: a gate report's windows give their distinct worst cases (largest
// err/tol first, at most keep), with the window's variant; the maps written
// equal what the report says of those cases.
TEST(Export, GateReportWorstCasesToMaps) {
  nlohmann::json rep;
  rep["seeds"] = "3x1";
  nlohmann::json w;
  w["window"] = "bwd det H=64 w=bf16 form=plain T=1..100";
  w["op"] = "bwd";
  w["variant"] = "ctl_fp32_seq";
  const char* worst_dw = "H=64,T=99,w=bf16,form=plain,family=cancel,seed=0";
  const char* worst_dx = "H=64,T=33,w=bf16,form=plain,family=llm,seed=0";
  w["outputs"]["y"] = {{"max_err_tol", 0.3}, {"worst_case", worst_dx}};
  w["outputs"]["rstd"] = {{"max_err_tol", 0.01}, {"worst_case", "H=64,T=1,w=bf16,form=plain,family=normal,seed=0"}};
  w["outputs"]["dx"] = {{"max_err_tol", 0.38}, {"worst_case", worst_dx}};
  w["outputs"]["dw"] = {{"max_err_tol", "inf"}, {"worst_case", worst_dw}};
  w["dw_vs_fp32"] = {{"worst_case", "H=64,T=65,w=bf16,form=plain,family=normal,seed=0"}};
  nlohmann::json f = w;
  f["window"] = "fwd H=64 w=bf16 form=plain T=1..100";
  f["op"] = "fwd";
  f["variant"] = "fwd_rowwise";
  f["outputs"].erase("dx");
  f["outputs"].erase("dw");
  rep["windows"] = {w, f};
  const auto plan = nv::export_plan(rep, 2);
  ASSERT_EQ(plan.size(), 4u);
  EXPECT_EQ(plan[0].case_id, worst_dw);  // "inf" ranks first
  EXPECT_EQ(plan[1].case_id, worst_dx);  // y and dx share it: once
  EXPECT_EQ(plan[0].impl, "ctl_fp32_seq");
  EXPECT_EQ(plan[0].seed_set, "3x1");
  EXPECT_EQ(plan[2].impl, "bwd_det_chunked");  // a forward window's case runs with a real backward variant
  EXPECT_EQ(nv::export_plan(rep, 1, true).size(), 4u + 3u);  // --all: every distinct case each window names
  EXPECT_THROW(nv::export_plan(nlohmann::json::object(), 3), std::invalid_argument);
  EXPECT_THROW(nv::export_plan(rep, 0), std::invalid_argument);

  // A check grid: per implementation, its `keep` worst cases (by the largest
  // max_ratio over the outputs), all of them with --all.
  nlohmann::json grid = nlohmann::json::array();
  const double r_det[3] = {0.2, 0.7, 0.4}, r_ctl[3] = {50.0, 3.0, 99.0};
  for (int k = 0; k < 3; ++k) {
    const std::string id = "H=64,T=" + std::to_string(10 + k) + ",w=bf16,form=plain,family=cancel,seed=0";
    grid.push_back({{"case", id},
                    {"impls", {{{"impl", "bwd_det_chunked"}, {"outputs", {{"y", {{"max_ratio", 0.1}}}, {"dw", {{"max_ratio", r_det[k]}}}}}},
                               {{"impl", "ctl_fp32_seq"}, {"outputs", {{"dw", {{"max_ratio", r_ctl[k]}}}}}}}}});
  }
  const auto g1 = nv::export_plan(grid, 1);
  ASSERT_EQ(g1.size(), 2u);
  EXPECT_EQ(g1[0].impl, "bwd_det_chunked");
  EXPECT_EQ(g1[0].case_id, "H=64,T=11,w=bf16,form=plain,family=cancel,seed=0");  // 0.7
  EXPECT_EQ(g1[1].impl, "ctl_fp32_seq");
  EXPECT_EQ(g1[1].case_id, "H=64,T=12,w=bf16,form=plain,family=cancel,seed=0");  // 99
  const auto g2 = nv::export_plan(grid, 2);
  ASSERT_EQ(g2.size(), 4u);
  EXPECT_EQ(g2[1].case_id, "H=64,T=12,w=bf16,form=plain,family=cancel,seed=0");  // det's second: 0.4
  EXPECT_EQ(nv::export_plan(grid, 1, true).size(), 6u);

  nv::ExportOptions o;
  o.backend = nv::Backend::cpu;
  o.threads = 2;
  o.tile = 32;
  o.full = true;
  const std::vector<nv::ExportItem> one(plan.begin(), plan.begin() + 1);
  const auto es = nv::export_maps(one, o);
  ASSERT_EQ(es.size(), 1u);
  EXPECT_EQ(es[0].prov.window, w["window"].get<std::string>());
  EXPECT_EQ(es[0].prov.verdict, "fail");  // the control fails cancel
  double mdw = 0;
  for (double v : es[0].maps.dw_ratio) mdw = std::max(mdw, v);
  EXPECT_EQ(mdw, es[0].max_ratio[3]);
  EXPECT_GT(mdw, 1.0);
  float mfull = 0, mtile = 0;
  for (float v : es[0].maps.dx_full) mfull = std::max(mfull, v);
  for (float v : es[0].maps.dx_tiles) mtile = std::max(mtile, v);
  EXPECT_EQ(mfull, mtile);
  EXPECT_EQ(es[0].maps.dx_full.size(), static_cast<size_t>(99 * 64));
  const std::string path = temp_path("export.h5");
  nv::write_maps_file(path, "rep.json", es);
  const auto back = nv::read_maps_file(path);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].maps.dx_full, es[0].maps.dx_full);
  EXPECT_EQ(back[0].maps.dw_ratio, es[0].maps.dw_ratio);
  fs::remove_all(fs::path(path).parent_path());
}

// datasets/SCHEMA.md documents every dataset and attribute the writers make:
// each name (the last path component; attributes without their object)
// appears in the schema as `name` or `@name`.
// export_plan refuses, before any case runs and naming the window, a gate
// report's worst case outside the window it is named in (export would label
// it with that window), strings with control bytes (a NUL ended an HDF5
// attribute for one reader and not another) and strings longer than the
// maps file's readers take.
TEST(Export, ReportStringsAndWorstCasesOutsideTheirWindowAreRefused) {
  nlohmann::json rep;
  rep["seeds"] = "3x1";
  nlohmann::json w;
  w["window"] = "bwd det H=64 w=bf16 form=plain T=1..100";
  w["op"] = "bwd";
  w["variant"] = "bwd_det_chunked";
  w["H"] = 64;
  w["w"] = "bf16";
  w["form"] = "plain";
  w["T"] = {1, 100};
  w["outputs"]["dx"] = {{"max_err_tol", 0.38}, {"worst_case", "H=64,T=100,w=bf16,form=plain,family=llm,seed=0"}};
  rep["windows"] = {w};
  ASSERT_EQ(nv::export_plan(rep, 3).size(), 1u);  // inside: T = 100 is the window's last
  auto refused = [&](const nlohmann::json& r, const std::string& what) {
    try {
      (void)nv::export_plan(r, 3);
      ADD_FAILURE() << "accepted: " << r.dump().substr(0, 300);
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  for (const auto& [id, why] : std::vector<std::pair<std::string, std::string>>{
           {"H=64,T=101,w=bf16,form=plain,family=llm,seed=0", "(T=101, outside the window's T=1..100)"},
           {"H=256,T=5,w=bf16,form=plain,family=llm,seed=0", "(H=256, the window's H is 64)"},
           {"H=64,T=5,w=fp32,form=plain,family=llm,seed=0", "(w=fp32, the window's w is bf16)"},
           {"H=64,T=5,w=bf16,form=res,family=llm,seed=0", "(form=res, the window's form is plain)"}}) {
    nlohmann::json r = rep;
    r["windows"][0]["outputs"]["dx"]["worst_case"] = id;
    refused(r, "the report's windows[0] ('bwd det H=64 w=bf16 form=plain T=1..100'): worst case '" + id +
                   "' is not in the window " + why);
  }
  nlohmann::json nul = rep;
  nul["windows"][0]["window"] = std::string("bwd det\0EVIL", 12);
  refused(nul, "the report's windows[0] window label 'bwd det\\x00EVIL' holds control bytes");
  nlohmann::json long_seeds = rep;
  long_seeds["seeds"] = std::string(4097, 'x');
  refused(long_seeds, "the report's seed set is 4097 bytes long (at most 4096)");
  nlohmann::json list = rep;
  list["windows"][0]["outputs"] = nlohmann::json::array({1, 2});
  refused(list, "windows[0].outputs is not an object");
  nlohmann::json check = {{"case", std::string("H=64,T=5,w=bf16,form=plain,family=cancel,seed=0\x1b[31m")},
                          {"impls", nlohmann::json::array({{{"impl", "bwd_det_chunked"}}})}};
  refused(check, "report's case 'H=64,T=5,w=bf16,form=plain,family=cancel,seed=0\\x1b[31m' holds control bytes");
}

TEST(CaseFile, SchemaDocumentsEveryNameWritten) {
  std::ifstream in(std::string(NORMGATE_SOURCE_DIR) + "/datasets/SCHEMA.md");
  ASSERT_TRUE(in) << "datasets/SCHEMA.md is missing";
  const std::string schema{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  auto documented = [&](const std::string& name) {
    return schema.find("`" + name + "`") != std::string::npos || schema.find("`@" + name + "`") != std::string::npos ||
           schema.find("/" + name + "`") != std::string::npos || schema.find("@" + name) != std::string::npos ||
           schema.find("`" + name + ",") != std::string::npos || schema.find(" " + name + "`") != std::string::npos;
  };
  const auto r = saved_repro(request("H=40,T=50,w=bf16,form=plain,family=normal,seed=0", "bwd_det_chunked"));
  const std::string pc = temp_path("schema_case.h5");
  nv::write_case_file(pc, *r.saved);
  std::vector<nv::MapsEntry> es(1);
  es[0].prov = r.saved->prov;
  es[0].maps = r.saved->maps;
  es[0].maps.dx_full.assign(40 * 50, 0.0f);
  const std::string pm = temp_path("schema_maps.h5");
  nv::write_maps_file(pm, "x.json", es, std::string(64, 'a'));
  size_t checked = 0;
  for (const std::string& p : {pc, pm})
    for (const std::string& item : nv::list_layout(p)) {
      const size_t at = item.find('@');
      std::string name = at == std::string::npos ? item : item.substr(at + 1);
      if (at == std::string::npos) name = name.substr(name.rfind('/') == std::string::npos ? 0 : name.rfind('/') + 1);
      EXPECT_TRUE(documented(name)) << item << " (in " << p << ") is not in datasets/SCHEMA.md";
      ++checked;
    }
  EXPECT_GT(checked, 40u);
  fs::remove_all(fs::path(pc).parent_path());
}

// changed_sources: a recorded hash that is this build's is not listed, one
// that is not is listed with both hashes; an unregistered name (the FP32
// baseline) and an empty hash are never listed.
TEST(CaseFile, ChangedSourcesNamesOnlyRecordedHashesThatDiffer) {
  const auto& det = normgate::kernels::variant("bwd_det_chunked");
  const auto& fwd = normgate::kernels::variant("fwd_rowwise");
  nv::Provenance p;
  p.impl = "bwd_det_chunked";
  p.impl_sha256 = std::string(det.source_sha256);
  p.fwd = "fwd_rowwise";
  p.fwd_sha256 = std::string(fwd.source_sha256);
  EXPECT_EQ(nv::changed_sources(p), "");
  p.impl_sha256 = std::string(64, '0');
  EXPECT_EQ(nv::changed_sources(p),
            "bwd_det_chunked recorded 000000000000, this build " + std::string(det.source_sha256).substr(0, 12));
  p.fwd_sha256 = std::string(64, 'f');
  EXPECT_NE(nv::changed_sources(p).find(", fwd_rowwise recorded ffffffffffff, this build "), std::string::npos);
  p.impl = "fp32-baseline";
  p.fwd = "fp32-baseline";
  EXPECT_EQ(nv::changed_sources(p), "");
  p.impl = "bwd_det_chunked";
  p.impl_sha256.clear();
  EXPECT_EQ(nv::changed_sources(p), "");
}
