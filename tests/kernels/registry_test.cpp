// Tests of kernels/include/normgate/kernels/registry.h (CPU; always run).
#include "normgate/kernels/registry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "normgate/kernels/multirow.h"
#include "normgate/kernels/plan.h"
#include "normgate/kernels/staged.h"
#include "normgate/kernels/wide.h"
#include "normgate/seeds/generate.h"

namespace normgate::kernels {
namespace {

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char ch : s) {
    if (ch == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(Registry, HasTheVariantsInIdOrder) {
  const auto vs = variants();
  // (name, VariantId): ids are never reused.
  const std::vector<std::pair<std::string, int>> want = {
      {"fwd_rowwise", 0},       {"bwd_det_chunked", 1}, {"bwd_nondet_atomic", 2}, {"ctl_fp32_seq", 3},
      {"ctl_bf16_partials", 4}, {"bwd_det_onepass", 5}, {"bwd_fp32_blocked", 6},  {"fwd_multirow", 7},
      {"ctl_rstd_bf16", 8},     {"ctl_eps_outside_sqrt", 9}, {"ctl_eps_dropped", 10}, {"ctl_eps_bf16", 11},
      {"ctl_sumsq_bf16", 12},   {"ctl_res_grad_early", 13},  {"ctl_padded_lanes", 14}, {"ctl_warp64_dw", 15},
      {"ctl_heads_shared_stats", 16}, {"ctl_heads_dw_mixed", 17}, {"fwd_narrow", 18}, {"fwd_wide", 19},
      {"bwd_det_wide", 20}, {"bwd_det_heads", 21}, {"bwd_det_wreg", 22}, {"fwd_staged", 23}, {"bwd_det_lean", 24}};
  ASSERT_EQ(vs.size(), want.size());
  for (size_t i = 0; i < vs.size(); ++i) {
    EXPECT_EQ(vs[i].name, want[i].first);
    EXPECT_EQ(static_cast<int>(vs[i].id), want[i].second);
    if (i > 0) {
      EXPECT_LT(static_cast<int>(vs[i - 1].id), static_cast<int>(vs[i].id));
    }
    EXPECT_EQ(&variant(vs[i].name), &vs[i]);
    EXPECT_EQ(&variant(vs[i].id), &vs[i]);
  }
  EXPECT_EQ(default_fwd().name, "fwd_rowwise");
}

// fwd_multirow: a second deterministic forward variant (not the default),
// and its rows per team R(H) (multirow.h): 8 up to H = 512, 4 up to 2048,
// 2 beyond (two slots); teams per CTA as fwd_rowwise's.
TEST(Registry, MultirowForwardAndItsRowsPerTeam) {
  const Variant& m = variant("fwd_multirow");
  EXPECT_EQ(m.op, Op::fwd);
  EXPECT_EQ(m.mode, Mode::det);
  EXPECT_FALSE(m.control);
  EXPECT_NE(&m, &default_fwd());
  EXPECT_NE(m.source_sha256, default_fwd().source_sha256);
  EXPECT_NE(std::string(m.sources).find("src/fwd_multirow.cu"), std::string::npos);
  EXPECT_NE(std::string(m.sources).find("include/normgate/kernels/multirow.h"), std::string::npos);
  // fwd_rowwise's hashed files do not include the new ones (its approvals stay current).
  EXPECT_EQ(std::string(default_fwd().sources).find("multirow"), std::string::npos);
  struct Want {
    int64_t H;
    int rows, teams;
  };
  for (const Want& w : {Want{1, 8, 8}, Want{64, 8, 8}, Want{256, 8, 8}, Want{257, 8, 4}, Want{512, 8, 4},
                        Want{513, 4, 2}, Want{1024, 4, 2}, Want{2048, 4, 1}, Want{2049, 2, 1}, Want{4096, 2, 1},
                        Want{6144, 2, 1}, Want{8192, 2, 1}, Want{8193, 2, 1}, Want{16384, 2, 1}}) {
    EXPECT_EQ(fwd_multirow_rows(w.H), w.rows) << "H = " << w.H;
    EXPECT_EQ(fwd_multirow_teams(w.H), w.teams) << "H = " << w.H;
    // At most 8 16-byte loads of x per thread, and at least 4 KiB of x per team (rows of >= 256 columns).
    EXPECT_LE(fwd_multirow_rows(w.H) * row_geometry(w.H).slots, 8) << "H = " << w.H;
    if (w.H >= 256) {
      EXPECT_GE(fwd_multirow_rows(w.H) * w.H * 2, 4096) << "H = " << w.H;
    }
  }
}

TEST(Registry, OpsModesAndControls) {
  EXPECT_EQ(variant("fwd_rowwise").op, Op::fwd);
  EXPECT_EQ(variant("bwd_det_chunked").mode, Mode::det);
  EXPECT_EQ(variant("bwd_nondet_atomic").mode, Mode::nondet);
  // The two competing deterministic backwards are routable (not controls).
  for (const char* n :
       {"bwd_det_onepass", "bwd_fp32_blocked", "bwd_det_wide", "bwd_det_heads", "bwd_det_wreg", "bwd_det_lean"}) {
    EXPECT_EQ(variant(n).op, Op::bwd) << n;
    EXPECT_EQ(variant(n).mode, Mode::det) << n;
    EXPECT_FALSE(variant(n).control) << n;
  }
  std::set<std::string> controls;
  for (const Variant& v : variants()) {
    if (v.control) controls.insert(std::string(v.name));
    // Controls are named so and are backward variants; real ones are not named ctl_.
    EXPECT_EQ(v.control, v.name.substr(0, 4) == "ctl_") << v.name;
    if (v.control) {
      EXPECT_EQ(v.op, Op::bwd) << v.name;
      EXPECT_NE(v.description.find("NEGATIVE CONTROL"), std::string_view::npos) << v.name;
    }
  }
  EXPECT_EQ(controls, (std::set<std::string>{"ctl_fp32_seq", "ctl_bf16_partials", "ctl_rstd_bf16",
                                             "ctl_eps_outside_sqrt", "ctl_eps_dropped", "ctl_eps_bf16",
                                             "ctl_sumsq_bf16", "ctl_res_grad_early", "ctl_padded_lanes",
                                             "ctl_warp64_dw", "ctl_heads_shared_stats", "ctl_heads_dw_mixed"}));
  // Every control but the sequential FP32 sum names the public report of its bug class;
  // the model-only ones are exactly the new ones, hashed on their model file.
  for (const Variant& v : variants()) {
    if (!v.control) continue;
    EXPECT_EQ(v.source_of_class.empty(), v.name == "ctl_fp32_seq") << v.name;
    EXPECT_EQ(v.model_only, v.name != "ctl_fp32_seq" && v.name != "ctl_bf16_partials" && v.name != "ctl_warp64_dw")
        << v.name;
    if (v.model_only) {
      EXPECT_EQ(v.sources, "models/src/model_controls.cpp") << v.name;
    }
  }
}

TEST(Registry, EveryVariantSupportsEveryFormOverTheFullRangeAndBothWeights) {
  for (const Variant& v : variants()) {
    // The new controls apply where their bug class does (ctl_warp64_dw: H >= 33; the model-only ones: their
    // forms); fwd_narrow is a forward for rows of 256, fwd_wide one for plain rows and form res (their own
    // tests below), bwd_det_wide a backward for H = 4097..6144, bwd_det_heads one for the per-head views,
    // bwd_det_wreg one for H = 1..4096, plain and res (tests/kernels/bwd_own_kernel_test.cpp), fwd_staged
    // a forward for plain rows (its own test below).
    if (v.model_only || v.id == VariantId::ctl_warp64_dw || v.id == VariantId::fwd_narrow ||
        v.id == VariantId::fwd_wide || v.id == VariantId::bwd_det_wide || v.id == VariantId::bwd_det_heads ||
        v.id == VariantId::bwd_det_wreg || v.id == VariantId::fwd_staged)
      continue;
    EXPECT_EQ(v.h_min, kMinH) << v.name;
    EXPECT_EQ(v.h_max, kMaxH) << v.name;
    EXPECT_TRUE(v.supports_h(1) && v.supports_h(16384) && !v.supports_h(0) && !v.supports_h(16385)) << v.name;
    EXPECT_TRUE(v.supports(WDtype::bf16) && v.supports(WDtype::fp32)) << v.name;
    EXPECT_TRUE(v.supports(Form::plain) && v.supports(Form::heads24) && v.supports(Form::heads4)) << v.name;
    EXPECT_TRUE(v.supports(Form::res)) << v.name;
    EXPECT_FALSE(v.description.empty()) << v.name;
    EXPECT_EQ(v.description.find('\n'), std::string_view::npos) << v.name << ": one line";
  }
}

// fwd_narrow: a deterministic forward for rows of exactly 256, plain and
// per-head, both weight dtypes, not the fused residual form, not the default.
TEST(Registry, FwdNarrowTakesRowsOf256) {
  const Variant& n = variant("fwd_narrow");
  EXPECT_EQ(n.op, Op::fwd);
  EXPECT_EQ(n.mode, Mode::det);
  EXPECT_FALSE(n.control);
  EXPECT_TRUE(n.supports_h(256) && !n.supports_h(255) && !n.supports_h(257) && !n.supports_h(512));
  EXPECT_TRUE(n.supports(WDtype::bf16) && n.supports(WDtype::fp32));
  EXPECT_TRUE(n.supports(Form::plain) && n.supports(Form::heads24) && n.supports(Form::heads4));
  EXPECT_FALSE(n.supports(Form::res));
  EXPECT_NE(&default_fwd(), &n);
  EXPECT_NE(std::string(n.sources).find("src/fwd_narrow.cu"), std::string::npos);
}

// fwd_wide: a deterministic forward for plain rows and form res over the
// full H range, both weight dtypes, not the per-head views, not the default;
// its geometry (wide.h): teams of roundup(ceil(H/32), 32), up to four groups
// of 8 a thread, every column covered once, no thread's last group empty
// but where the rounding of the team leaves it so (H = 264: 33 groups on 32
// threads of two slots).
TEST(Registry, FwdWideAndItsGeometry) {
  const Variant& v = variant("fwd_wide");
  EXPECT_EQ(v.op, Op::fwd);
  EXPECT_EQ(v.mode, Mode::det);
  EXPECT_FALSE(v.control);
  EXPECT_TRUE(v.supports_h(1) && v.supports_h(16384) && !v.supports_h(0) && !v.supports_h(16385));
  EXPECT_TRUE(v.supports(WDtype::bf16) && v.supports(WDtype::fp32));
  EXPECT_TRUE(v.supports(Form::plain) && v.supports(Form::res));
  EXPECT_FALSE(v.supports(Form::heads24) || v.supports(Form::heads4));
  EXPECT_NE(&default_fwd(), &v);
  EXPECT_NE(std::string(v.sources).find("src/fwd_wide.cu"), std::string::npos);
  EXPECT_NE(std::string(v.sources).find("include/normgate/kernels/wide.h"), std::string::npos);
  // fwd_rowwise's hashed files do not include the new ones (its approvals stay current).
  EXPECT_EQ(std::string(default_fwd().sources).find("wide"), std::string::npos);
  struct Want {
    int64_t H;
    int team, slots, teams;
  };
  for (const Want& w : {Want{1, 32, 1, 8}, Want{8, 32, 1, 8}, Want{256, 32, 1, 8}, Want{264, 32, 2, 8},
                        Want{1024, 32, 4, 8}, Want{1032, 64, 3, 4}, Want{1536, 64, 3, 4}, Want{2048, 64, 4, 4},
                        Want{4096, 128, 4, 2}, Want{5120, 160, 4, 1}, Want{6144, 192, 4, 1},
                        Want{8192, 256, 4, 1}, Want{16384, 512, 4, 1}, Want{16383, 512, 4, 1}}) {
    const RowGeometry g = fwd_wide_geometry(w.H);
    EXPECT_EQ(g.team, w.team) << "H = " << w.H;
    EXPECT_EQ(g.slots, w.slots) << "H = " << w.H;
    EXPECT_EQ(fwd_wide_teams(w.H), w.teams) << "H = " << w.H;
    const int64_t nvec = (w.H + 7) / 8;
    EXPECT_GE(static_cast<int64_t>(g.team) * g.slots, nvec) << "H = " << w.H;        // every group has a thread
    EXPECT_LT(static_cast<int64_t>(g.team) * (g.slots - 1), nvec) << "H = " << w.H;  // the last slot is used
    EXPECT_LE(g.slots, kWideMaxSlots) << "H = " << w.H;
  }
}

// fwd_staged: a deterministic forward for plain rows and form res (not the
// per-head views) over the full H range, both weight dtypes, not the default, its own hashed files (not
// fwd_rowwise's or fwd_wide's: their approvals stay current); its geometry
// (staged.h): two groups of 8 a thread while the team fits 512 threads,
// every column covered once, the last slot used; plan.h's geometry (hence
// fwd_rowwise's order of the sum) exactly for H <= 256 and 2048 < H <= 8192.
TEST(Registry, FwdStagedAndItsGeometry) {
  const Variant& v = variant("fwd_staged");
  EXPECT_EQ(v.op, Op::fwd);
  EXPECT_EQ(v.mode, Mode::det);
  EXPECT_FALSE(v.control || v.model_only);
  EXPECT_TRUE(v.supports_h(1) && v.supports_h(16384) && !v.supports_h(0) && !v.supports_h(16385));
  EXPECT_TRUE(v.supports(WDtype::bf16) && v.supports(WDtype::fp32));
  EXPECT_TRUE(v.supports(Form::plain) && v.supports(Form::res));
  EXPECT_FALSE(v.supports(Form::heads24) || v.supports(Form::heads4));
  EXPECT_NE(&default_fwd(), &v);
  EXPECT_NE(std::string(v.sources).find("src/fwd_staged.cu"), std::string::npos);
  EXPECT_NE(std::string(v.sources).find("include/normgate/kernels/staged.h"), std::string::npos);
  EXPECT_EQ(std::string(default_fwd().sources).find("staged"), std::string::npos);
  EXPECT_EQ(std::string(variant("fwd_wide").sources).find("staged"), std::string::npos);
  struct Want {
    int64_t H;
    int team, slots, teams;
  };
  for (const Want& w : {Want{1, 32, 1, 8}, Want{256, 32, 1, 8}, Want{264, 32, 2, 8}, Want{512, 32, 2, 8},
                        Want{520, 64, 2, 4}, Want{1536, 96, 2, 2}, Want{2048, 128, 2, 2}, Want{4096, 256, 2, 1},
                        Want{6144, 384, 2, 1}, Want{8192, 512, 2, 1}, Want{8200, 512, 3, 1},
                        Want{16384, 512, 4, 1}, Want{16383, 512, 4, 1}}) {
    const RowGeometry g = fwd_staged_geometry(w.H);
    EXPECT_EQ(g.team, w.team) << "H = " << w.H;
    EXPECT_EQ(g.slots, w.slots) << "H = " << w.H;
    EXPECT_EQ(fwd_staged_teams(w.H), w.teams) << "H = " << w.H;
  }
  for (int64_t H = 1; H <= kMaxH; ++H) {
    const RowGeometry g = fwd_staged_geometry(H);
    const int64_t nvec = (H + 7) / 8;
    ASSERT_GE(static_cast<int64_t>(g.team) * g.slots, nvec) << "H = " << H;        // every group has a thread
    ASSERT_LT(static_cast<int64_t>(g.team) * (g.slots - 1), nvec) << "H = " << H;  // the last slot is used
    ASSERT_TRUE(g.team % 32 == 0 && g.team <= kStagedMaxTeam && g.slots <= kStagedMaxSlots) << "H = " << H;
    const RowGeometry p = row_geometry(H);
    const bool same = p.team == g.team && p.slots == g.slots;
    ASSERT_EQ(same, H <= 256 || (H > 2048 && H <= 8192)) << "H = " << H;
  }
}

TEST(Registry, UnknownNameThrowsNamingIt) {
  try {
    variant("bwd_fast");
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'bwd_fast'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bwd_det_chunked"), std::string::npos) << e.what();
  }
}

// find_variant: the same variant as variant(name), or nullptr without throwing.
TEST(Registry, FindVariantIsNullForUnknownNames) {
  for (const Variant& v : variants()) EXPECT_EQ(find_variant(v.name), &variant(v.name)) << v.name;
  EXPECT_EQ(find_variant("bwd_fast"), nullptr);
  EXPECT_EQ(find_variant("fp32-baseline"), nullptr);
  EXPECT_EQ(find_variant(""), nullptr);
}

TEST(Registry, DescribeNamesTheEssentials) {
  const std::string d = describe(variant("ctl_bf16_partials"));
  EXPECT_NE(d.find("ctl_bf16_partials"), std::string::npos) << d;
  EXPECT_NE(d.find("CONTROL"), std::string::npos) << d;
  EXPECT_NE(d.find("w=bf16|fp32"), std::string::npos) << d;
  EXPECT_NE(d.find("H=1..16384"), std::string::npos) << d;
}

// serve_gap: the first failed test, in the documented order (op, control,
// mode, H, w, form); the shape only when given; controls_ok skips one test.
TEST(Registry, ServeGapNamesTheFirstFailedTest) {
  const CallShape plain{4096, WDtype::fp32, Form::plain};
  EXPECT_EQ(serve_gap(variant("bwd_det_chunked"), Op::bwd, Mode::det, &plain), ServeGap::none);
  EXPECT_EQ(serve_gap(variant("bwd_det_chunked"), Op::fwd, Mode::det, &plain), ServeGap::op);
  // A control of the other op reports the op first.
  EXPECT_EQ(serve_gap(variant("ctl_fp32_seq"), Op::fwd, Mode::det, &plain), ServeGap::op);
  EXPECT_EQ(serve_gap(variant("ctl_fp32_seq"), Op::bwd, Mode::det, &plain), ServeGap::control);
  EXPECT_EQ(serve_gap(variant("ctl_fp32_seq"), Op::bwd, Mode::det, &plain, true), ServeGap::none);
  // Mode counts for the backward only: a nondet variant serves nondet calls.
  EXPECT_EQ(serve_gap(variant("bwd_nondet_atomic"), Op::bwd, Mode::det, &plain), ServeGap::nondet);
  EXPECT_EQ(serve_gap(variant("bwd_nondet_atomic"), Op::bwd, Mode::nondet, &plain), ServeGap::none);
  EXPECT_EQ(serve_gap(variant("fwd_rowwise"), Op::fwd, Mode::nondet, &plain), ServeGap::none);
  // bwd_det_wreg: FP32 w, plain and res, H <= 4096 (registry.cpp).
  const Variant& wreg = variant("bwd_det_wreg");
  const CallShape wide{6144, WDtype::fp32, Form::plain}, heads{256, WDtype::fp32, Form::heads24};
  EXPECT_EQ(serve_gap(wreg, Op::bwd, Mode::det, &wide), ServeGap::h);
  EXPECT_EQ(serve_gap(wreg, Op::bwd, Mode::det, &heads), ServeGap::form);
  // Without a shape, H, w and form are not tested.
  EXPECT_EQ(serve_gap(wreg, Op::bwd, Mode::det), ServeGap::none);
  // bwd_det_heads: per-head forms only, both weight dtypes.
  const CallShape h_plain{256, WDtype::bf16, Form::plain};
  EXPECT_EQ(serve_gap(variant("bwd_det_heads"), Op::bwd, Mode::det, &h_plain), ServeGap::form);
  // Every built-in takes both weight dtypes: a copy that takes BF16 only.
  Variant bf16_only = variant("bwd_det_chunked");
  bf16_only.wdtypes = 1u << static_cast<int>(WDtype::bf16);
  EXPECT_EQ(serve_gap(bf16_only, Op::bwd, Mode::det, &plain), ServeGap::w);
  const CallShape bf16_plain{4096, WDtype::bf16, Form::plain};
  EXPECT_EQ(serve_gap(bf16_only, Op::bwd, Mode::det, &bf16_plain), ServeGap::none);
  // A forward needs a deterministic variant in either mode (one forward
  // serves both), and add_external_variant refuses a nondet forward.
  Variant fwd_nd = variant("fwd_rowwise");
  fwd_nd.mode = Mode::nondet;
  EXPECT_EQ(serve_gap(fwd_nd, Op::fwd, Mode::nondet, &plain), ServeGap::nondet);
  EXPECT_EQ(serve_gap(variant("fwd_rowwise"), Op::fwd, Mode::nondet, &plain), ServeGap::none);
  ExternalVariantSpec spec;
  spec.name = "registry_test_fwd_nondet";
  spec.op = Op::fwd;
  spec.mode = Mode::nondet;
  spec.origin = "registry_test";
  spec.source_sha256 = std::string(64, 'b');
  try {
    (void)add_external_variant(spec);
    FAIL() << "a nondet forward was registered";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'registry_test_fwd_nondet': mode nondet for a forward variant"),
              std::string::npos) << e.what();
  }
  EXPECT_EQ(find_variant("registry_test_fwd_nondet"), nullptr);
  // H is tested before w and form.
  const CallShape all_wrong{6144, WDtype::fp32, Form::heads4};
  EXPECT_EQ(serve_gap(wreg, Op::bwd, Mode::det, &all_wrong), ServeGap::h);
}

// The hash in the registry must be the SHA-256 of the manifest of the files
// as they are now: a stale configure (or a hand-edited hash) fails here.
TEST(Registry, SourceHashMatchesTheFilesOnDisk) {
  for (const Variant& v : variants()) {
    ASSERT_EQ(v.source_sha256.size(), 64u) << v.name;
    for (char ch : v.source_sha256) EXPECT_TRUE((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f')) << v.name;
    const auto files = split(v.sources, ';');
    ASSERT_FALSE(files.empty()) << v.name;
    std::string manifest;
    for (const std::string& f : files) {
      const std::string bytes = read_file(std::string(NORMGATE_SOURCE_DIR) + "/kernels/" + f);
      ASSERT_FALSE(bytes.empty()) << v.name << ": cannot read kernels/" << f;
      manifest += seeds::sha256_hex(bytes.data(), bytes.size()) + "  " + f + "\n";
    }
    EXPECT_EQ(seeds::sha256_hex(manifest.data(), manifest.size()), v.source_sha256)
        << v.name << ": re-run CMake (the hash is computed at configure time)";
  }
  // Variants built from different code have different hashes.
  EXPECT_NE(variant("bwd_det_chunked").source_sha256, variant("bwd_nondet_atomic").source_sha256);
  EXPECT_NE(variant("bwd_det_chunked").source_sha256, variant("fwd_rowwise").source_sha256);
  std::set<std::string_view> hashes;
  int64_t model_only = 0;
  for (const Variant& v : variants()) {
    hashes.insert(v.source_sha256);
    model_only += v.model_only;
  }
  // The two GPU controls share one file list, and the model-only controls one model file.
  EXPECT_EQ(hashes.size(), variants().size() - 1 - (model_only - 1)) << "only the controls share file lists";
}

// The new backwards hash the code they run: their own files first, then the
// shared chunk pass (bwd_det_onepass runs bwd_chunk_pass.cuh itself;
// bwd_fp32_blocked includes it for the row loads) and the device blocks.
TEST(Registry, NewBackwardsHashTheirOwnFilesAndTheSharedPass) {
  const auto onepass = split(variant("bwd_det_onepass").sources, ';');
  const auto fp32 = split(variant("bwd_fp32_blocked").sources, ';');
  ASSERT_GE(onepass.size(), 4u);
  ASSERT_GE(fp32.size(), 4u);
  EXPECT_EQ(onepass[0], "src/bwd_det_onepass.cu");
  EXPECT_EQ(fp32[0], "src/bwd_fp32_blocked.cu");
  for (const auto* files : {&onepass, &fp32}) {
    for (const char* f : {"src/bwd_chunk_launch.cuh", "src/bwd_chunk_pass.cuh", "src/device_blocks.cuh",
                          "include/normgate/kernels/plan.h"})
      EXPECT_NE(std::find(files->begin(), files->end(), f), files->end()) << f;
    // Not bwd_det_chunked's launcher: a change there must not re-key them.
    EXPECT_EQ(std::find(files->begin(), files->end(), "src/bwd_det_chunked.cu"), files->end());
  }
  EXPECT_NE(std::find(fp32.begin(), fp32.end(), "src/bwd_chunk_pass_f32.cuh"), fp32.end());
  EXPECT_NE(std::find(onepass.begin(), onepass.end(), "src/bwd_det_onepass.h"), onepass.end());
}

// bwd_det_wide runs the shared chunk pass in a kernel of its own and
// bwd_det_chunked's combine: a change to either, or to the launch geometry
// it dispatches through, must re-key its approvals.
TEST(Registry, BwdDetWideHashesThePassAndTheCombineItRuns) {
  const auto files = split(variant("bwd_det_wide").sources, ';');
  ASSERT_FALSE(files.empty());
  EXPECT_EQ(files[0], "src/bwd_det_wide.cu");
  for (const char* f : {"src/bwd_det_chunked.cu", "src/bwd_det_chunked.h", "src/bwd_chunk_launch.cuh",
                        "src/bwd_chunk_pass.cuh", "src/device_blocks.cuh", "include/normgate/kernels/plan.h"})
    EXPECT_NE(std::find(files.begin(), files.end(), f), files.end()) << f;
  EXPECT_NE(variant("bwd_det_wide").source_sha256, variant("bwd_det_chunked").source_sha256);
}

// bwd_det_heads and bwd_det_wreg likewise (each its own kernel over the
// shared pass and combine).
TEST(Registry, BwdDetHeadsAndWregHashThePassAndTheCombineTheyRun) {
  for (const char* name : {"bwd_det_heads", "bwd_det_wreg"}) {
    const auto files = split(variant(name).sources, ';');
    ASSERT_FALSE(files.empty()) << name;
    EXPECT_EQ(files[0], "src/" + std::string(name) + ".cu");
    for (const char* f : {"src/bwd_det_chunked.cu", "src/bwd_det_chunked.h", "src/bwd_chunk_launch.cuh",
                          "src/bwd_chunk_pass.cuh", "src/device_blocks.cuh", "include/normgate/kernels/plan.h"})
      EXPECT_NE(std::find(files.begin(), files.end(), f), files.end()) << name << ": " << f;
    EXPECT_NE(variant(name).source_sha256, variant("bwd_det_chunked").source_sha256) << name;
    EXPECT_NE(variant(name).source_sha256, variant("bwd_det_wide").source_sha256) << name;
  }
  EXPECT_NE(variant("bwd_det_heads").source_sha256, variant("bwd_det_wreg").source_sha256);
}

// bwd_det_lean hashes its own kernel, the test of where it runs, and the
// pass and combine of bwd_det_chunked, which it runs where its kernel does
// not apply; it serves every form over the full range, both weights.
TEST(Registry, BwdDetLeanHashesItsKernelAndTheChunkedFallback) {
  const Variant& v = variant("bwd_det_lean");
  const auto files = split(v.sources, ';');
  ASSERT_FALSE(files.empty());
  EXPECT_EQ(files[0], "src/bwd_det_lean.cu");
  for (const char* f : {"src/bwd_det_lean.h", "src/sum_group_lean.cuh", "src/bwd_det_chunked.cu",
                        "src/bwd_det_chunked.h", "src/bwd_chunk_pass.cuh", "src/device_blocks.cuh",
                        "include/normgate/kernels/plan.h", "../core/include/normgate/core/bf16.h"})
    EXPECT_NE(std::find(files.begin(), files.end(), f), files.end()) << f;
  for (const char* other : {"bwd_det_chunked", "bwd_det_wreg", "bwd_det_wide", "bwd_det_heads"})
    EXPECT_NE(v.source_sha256, variant(other).source_sha256) << other;
  EXPECT_EQ(v.op, Op::bwd);
  EXPECT_EQ(v.mode, Mode::det);
  EXPECT_FALSE(v.control);
  EXPECT_EQ(v.h_min, kMinH);
  EXPECT_EQ(v.h_max, kMaxH);
  for (const Form f : {Form::plain, Form::res, Form::heads24, Form::heads4}) EXPECT_TRUE(v.supports(f));
}

}  // namespace
}  // namespace normgate::kernels
