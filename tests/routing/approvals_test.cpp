// tests/routing/approvals_test.cpp: approval records validated field by
// field and sealed by record_sha256 (routing.h, "Validation"): every rule
// on its own, every single-bit flip of a written file (an error naming the
// file, or an invalid record: never a changed current record), invalid
// records kept as read on rewrite, never current, refused by the dispatcher
// and the runtime cache.
#include <gtest/gtest.h>
#include "normgate/seeds/generate.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "normgate/kernels/registry.h"
#include "normgate/routing/dispatch_cache.h"
#include "normgate/routing/routing.h"

namespace normgate::kernels {
namespace {

const char* kTable = R"(arch = "sm90a"
route = [
  { op = "bwd", mode = "det", H = 64, w = "bf16", form = "plain", T = [1, 700], variant = "bwd_det_chunked" },
  { op = "fwd", H = 64, w = "bf16", form = "plain", T = [1, 700], variant = "fwd_rowwise" },
]
)";

// A valid record of route r, as `gate --approve` writes one.
Approval good(const Route& r) {
  Approval a;
  a.op = r.op;
  a.mode = r.mode;
  a.H = r.H;
  a.w = r.w;
  a.form = r.form;
  a.t_lo = r.t_lo;
  a.t_hi = r.t_hi;
  a.variant = std::string(r.variant->name);
  a.source_sha256 = std::string(r.variant->source_sha256);
  a.backend = "gpu";
  a.gpu = "NVIDIA H200";
  a.driver = "580.159.04";
  a.cuda = "13.0";
  a.seed_set = "3x16";
  a.t_points = {1, 63, 65, 700};
  a.cases = 400;
  a.max_err_tol = {{"y", 0.38}, {"rstd", 0.006}};
  if (r.op == Op::bwd) a.max_err_tol.insert({{"dx", 0.41}, {"dw", 2.3e-07}});
  a.worst_case = "H=64,T=600,w=bf16,form=plain,family=cancel,seed=1";
  a.date = "2026-12-01T03:03:23Z";
  a.normgate_commit = "7f3941123e32";
  a.normgate_version = "0.2.0";
  a.has_strength = true;
  a.t_per_window = 8;
  a.dense_points = 16;
  a.dense_step = 64;
  a.fresh_factor = 2;
  a.fresh_seeds = "cancel:16..47";
  a.oracle = "auto";
  a.dw_vs_fp32_worst = r.op == Op::bwd ? 0.61 : std::numeric_limits<double>::quiet_NaN();
  return a;
}

// A file of one valid record of route r, named `path`.
Approvals one_record(const Route& r, const std::string& path) {
  Approvals a;
  a.path = path;
  a.records.push_back(good(r));
  return a;
}

std::string dir() {
  const std::string d = std::string(NORMGATE_BINARY_DIR) + "/approvals_test_" + std::to_string(::getpid());
  std::filesystem::create_directories(d);
  return d;
}

TEST(ApprovalValidation, AGoodRecordIsValid) {
  const RouteTable t = parse_route_table(kTable, "t.toml");
  EXPECT_EQ(validate_approval(good(t.routes[0])), "");
  EXPECT_EQ(validate_approval(good(t.routes[1])), "");
}

// Form res records hold h_new (0: bit for bit) when their gate checked it;
// older res records without it stay valid and current but say so
// (Approval::h_new_gated); no other form's record may hold it.
TEST(ApprovalValidation, FormResRecordsHoldHNewWhenTheirGateCheckedIt) {
  const RouteTable t = parse_route_table(R"(arch = "sm90a"
route = [
  { op = "bwd", mode = "det", H = 64, w = "bf16", form = "res", T = [1, 700], variant = "bwd_det_chunked" },
  { op = "fwd", H = 64, w = "bf16", form = "res", T = [1, 700], variant = "fwd_rowwise" },
]
)",
                                         "t.toml");
  for (const Route& r : t.routes) {
    SCOPED_TRACE(r.describe());
    Approval a = good(r);
    a.worst_case = "H=64,T=600,w=bf16,form=res,family=cancel,seed=1";
    EXPECT_EQ(validate_approval(a), "");
    EXPECT_FALSE(a.h_new_gated());
    Approvals older;
    older.path = "a.json";
    older.records.push_back(a);
    const ApprovalStatus so = approval_status(r, older, false);
    EXPECT_EQ(so.state, ApprovalState::current);
    EXPECT_NE(so.detail.find("h_new not checked by that gate"), std::string::npos) << so.detail;
    a.max_err_tol["h_new"] = 0;
    EXPECT_EQ(validate_approval(a), "");
    EXPECT_TRUE(a.h_new_gated());
    older.records[0] = a;
    const ApprovalStatus sn = approval_status(r, older, false);
    EXPECT_EQ(sn.state, ApprovalState::current);
    EXPECT_EQ(sn.detail.find("h_new"), std::string::npos) << sn.detail;
    a.max_err_tol["h_new"] = 0.5;  // within [0, 1], but h_new passes only bit for bit
    EXPECT_NE(validate_approval(a).find("max_err_tol.h_new 0.5 (h_new passes only bit for bit: 0)"),
              std::string::npos)
        << validate_approval(a);
  }
  const RouteTable plain = parse_route_table(kTable, "t.toml");
  Approval p = good(plain.routes[0]);
  EXPECT_TRUE(p.h_new_gated());
  p.max_err_tol["h_new"] = 0;
  EXPECT_NE(validate_approval(p).find("max_err_tol has {dw, dx, h_new, rstd, y}; a bwd approval records "
                                      "{dw, dx, rstd, y}"),
            std::string::npos)
      << validate_approval(p);
}

// Every rule of routing.h's "Validation", one broken at a time: the reason
// names the field and the value.
TEST(ApprovalValidation, EachRuleOnItsOwn) {
  const RouteTable t = parse_route_table(kTable, "t.toml");
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  struct Case {
    int route;
    std::function<void(Approval&)> edit;
    std::string reason;
  };
  const std::vector<Case> cases = {
      {0, [](Approval& a) { a.max_err_tol["y"] = 5.0; }, "max_err_tol.y 5 outside [0, 1]"},
      {0, [&](Approval& a) { a.max_err_tol["y"] = nan; }, "max_err_tol.y nan outside [0, 1]"},
      {0, [&](Approval& a) { a.max_err_tol["dw"] = inf; }, "max_err_tol.dw inf outside [0, 1]"},
      {0, [](Approval& a) { a.max_err_tol["rstd"] = -3; }, "max_err_tol.rstd -3 outside [0, 1]"},
      {0, [](Approval& a) { a.max_err_tol["y"] = 1.0000000000000002; }, "max_err_tol.y 1.0000000000000002"},
      {0, [](Approval& a) { a.max_err_tol.clear(); }, "max_err_tol has {}; a bwd approval records {dw, dx, rstd, y}"},
      {0, [](Approval& a) { a.max_err_tol.erase("dw"); }, "max_err_tol has {dx, rstd, y}"},
      {1, [](Approval& a) { a.max_err_tol["dx"] = 0.1; }, "max_err_tol has {dx, rstd, y}; a fwd approval records {rstd, y}"},
      {0, [](Approval& a) { a.cases = 0; }, "cases 0 (needs >= 1 and >= the 4 t_points)"},
      {0, [](Approval& a) { a.cases = -5; }, "cases -5"},
      {0, [](Approval& a) { a.cases = 3; }, "cases 3 (needs >= 1 and >= the 4 t_points)"},
      {0, [](Approval& a) { a.seed_set = ""; }, "seed_set: "},
      {0, [](Approval& a) { a.seed_set = "garbage"; }, "seed_set: "},
      {0, [](Approval& a) { a.seed_set = "seeds=0..15"; }, "seed_set: 'seeds=0..15' is not canonical (3x16)"},
      {0, [](Approval& a) { a.t_points.clear(); }, "t_points is empty"},
      {0, [](Approval& a) { a.t_points.back() = 701; }, "t_points[3] 701 outside the window T=1..700"},
      {0, [](Approval& a) { a.t_points.front() = 0; }, "t_points[0] 0 outside the window"},
      {0, [](Approval& a) { a.t_points = {1, 65, 63}; }, "t_points not strictly increasing at [2] 63"},
      {0, [](Approval& a) { a.t_points = {1, 1}; }, "t_points not strictly increasing at [1] 1"},
      // A gate's T points hold its window's first and last T.
      {0, [](Approval& a) { a.t_points = {1, 63, 65, 100}; },
       "t_points run 1..100, not the window's T=1..700 (a gate's T points hold its first and last T)"},
      {0, [](Approval& a) { a.t_points = {2, 63, 700}; }, "t_points run 2..700, not the window's T=1..700"},
      {0, [](Approval& a) { a.source_sha256[5] = 'A'; }, "source_sha256"},
      {0, [](Approval& a) { a.source_sha256.pop_back(); }, "source_sha256"},
      {0, [](Approval& a) { a.backend = "tpu"; }, "backend 'tpu'"},
      {0, [](Approval& a) { a.backend = "cpu-model"; }, "gpu 'NVIDIA H200' of a cpu-model record"},
      {0, [](Approval& a) { a.worst_case = std::string(1, '-'); }, "worst_case: case id"},  // not "-": GCC 12 -Wrestrict
      {0, [](Approval& a) { a.worst_case = "H=128,T=600,w=bf16,form=plain,family=cancel,seed=1"; }, "is not inside"},
      {0, [](Approval& a) { a.worst_case = "H=64,T=701,w=bf16,form=plain,family=cancel,seed=1"; }, "is not inside"},
      {0, [](Approval& a) { a.worst_case = "H=64,T=600,w=fp32,form=plain,family=cancel,seed=1"; }, "is not inside"},
      {0, [](Approval& a) { a.date = "2026-12-01 03:03:23"; }, "date '2026-12-01 03:03:23' is not ISO 8601 UTC"},
      {0, [](Approval& a) { a.date = "2026-02-29T03:03:23Z"; }, "is not ISO 8601 UTC"},
      {0, [](Approval& a) { a.date = "2026-12-01T24:03:23Z"; }, "is not ISO 8601 UTC"},
      {0, [](Approval& a) { a.H = 0; }, "H 0 outside 1..16384"},
      {0, [](Approval& a) { a.t_lo = 0; }, "T needs 1 <= lo <= hi"},
      {0, [](Approval& a) { a.variant = ""; }, "variant \"\" is not a variant name"},
      // A name no process can register: C would read "bwd_det_chunked" at the NUL.
      {0, [](Approval& a) { a.variant = std::string("bwd_det_chunked\0x", 17); },
       "variant \"bwd_det_chunked\\u0000x\" is not a variant name (1 to 64 of A-Z a-z 0-9 _ . + -)"},
      {0, [](Approval& a) { a.variant = "bwd_det_chunked\u00a0"; }, "is not a variant name"},
      {0, [](Approval& a) { a.variant = std::string(65, 'k'); }, "is not a variant name"},
      {0, [](Approval& a) { a.variant = "ctl_fp32_seq"; }, "variant ctl_fp32_seq is a negative control"},
      // A registered variant must serve the window it approves.
      {0, [](Approval& a) { a.variant = "fwd_rowwise"; }, "variant fwd_rowwise is a fwd variant; window bwd det H=64"},
      {0, [](Approval& a) { a.variant = "bwd_nondet_atomic"; },
       "variant bwd_nondet_atomic is non-deterministic; window bwd det H=64 w=bf16 form=plain T=1..700 is deterministic"},
      {0, [](Approval& a) { a.variant = "bwd_det_heads"; }, "variant bwd_det_heads does not serve window bwd det H=64"},
      {0, [](Approval& a) { a.variant = "bwd_det_wide"; }, "variant bwd_det_wide does not serve window bwd det H=64"},
      {0, [](Approval& a) { a.gpu = ""; }, "gpu is empty"},
      // What a CPU-model gate writes, in a gpu record (and the other way).
      {0, [](Approval& a) { a.driver = "-"; }, "driver '-' of a gpu record (expected the device's driver version)"},
      {0, [](Approval& a) { a.cuda = "-"; }, "cuda '-' of a gpu record"},
      {0, [](Approval& a) { a.gpu = "cpu-model"; }, "gpu 'cpu-model' of a gpu record"},
      {0,
       [](Approval& a) {
         a.backend = "cpu-model";
         a.gpu = "cpu-model";
       },
       "driver '580.159.04' of a cpu-model record (expected \"-\")"},
      {0, [](Approval& a) { a.t_per_window = 1; }, "t_per_window 1 outside 2..1000000"},
      {0, [](Approval& a) { a.dense_points = -1; }, "dense_points -1"},
      {0, [](Approval& a) { a.dense_step = 0; }, "dense_step 0"},
      {0, [](Approval& a) { a.fresh_factor = -2; }, "fresh_factor -2"},
      {0, [](Approval& a) { a.fresh_seeds = "cancel:47..16"; }, "fresh_seeds: "},
      {0, [](Approval& a) { a.oracle = "fp16"; }, "oracle 'fp16'"},
      // The strength fields agree as a gate writes them (a record sealed again
      // after claiming a larger seed set must change these too).
      {0, [](Approval& a) { a.cases = 191; }, "cases 191 below the grid of seed_set 3x16 at the 4 t_points (192 cases)"},
      {0, [](Approval& a) { a.seed_set = "3x120"; }, "cases 400 below the grid of seed_set 3x120 at the 4 t_points (1440"},
      {0,
       [](Approval& a) {
         a.seed_set = "3x120";
         a.cases = 5000;
       },
       "fresh_seeds 'cancel:16..47' do not follow seed_set 3x120 at fresh_factor 2 (one family, seeds 120..359)"},
      {0, [](Approval& a) { a.fresh_factor = 1; }, "do not follow seed_set 3x16 at fresh_factor 1 (one family, seeds 16..31)"},
      {0, [](Approval& a) { a.fresh_factor = 0; }, "fresh_seeds 'cancel:16..47' with fresh_factor 0"},
      {0, [](Approval& a) { a.fresh_seeds = "3x32..47"; }, "fresh_seeds"},
      {0, [](Approval& a) { a.fresh_seeds = "sweep=16..47"; }, "do not follow seed_set 3x16"},
      {0, [&](Approval& a) { a.dw_vs_fp32_worst = -inf; }, "dw_vs_fp32_worst -inf"},
      {0, [](Approval& a) { a.dw_vs_fp32_worst = -0.5; }, "dw_vs_fp32_worst -0.5"},
  };
  for (const auto& c : cases) {
    Approval a = good(t.routes[c.route]);
    c.edit(a);
    const std::string why = validate_approval(a);
    EXPECT_NE(why.find(c.reason), std::string::npos) << "expected '" << c.reason << "', got '" << why << "'";
    // A writer never seals it.
    Approvals file;
    file.path = "x.approvals.json";
    file.records.push_back(a);
    EXPECT_THROW((void)approvals_to_json_text(file), std::invalid_argument) << c.reason;
  }
}

// Every single-bit flip anywhere in a written approvals file: the file is
// refused with an error naming it, or the record is invalid; a record that
// still loads valid is byte for byte the record that was written (never a
// changed value counted current).
TEST(ApprovalDigest, EverySingleBitFlipIsCaught) {
  const RouteTable t = parse_route_table(kTable, "t.toml");
  Approvals a = one_record(t.routes[0], "flip.approvals.json");
  const std::string text = approvals_to_json_text(a);
  const Approvals back = parse_approvals(text, a.path);
  ASSERT_EQ(invalid_count(back), 0u);
  ASSERT_EQ(approval_status(t.routes[0], back, false).state, ApprovalState::current);
  const std::string canon = approval_canonical_bytes(back.records[0]);
  int refused = 0, invalid = 0, same = 0;
  for (size_t i = 0; i < text.size(); ++i)
    for (int bit = 0; bit < 8; ++bit) {
      std::string s = text;
      s[i] = static_cast<char>(s[i] ^ (1 << bit));
      try {
        const Approvals x = parse_approvals(s, a.path);
        ASSERT_EQ(x.records.size(), 1u) << "byte " << i << " bit " << bit;
        if (!x.records[0].invalid.empty()) {
          ++invalid;
          EXPECT_NE(approval_status(t.routes[0], x, true).state, ApprovalState::current);
          continue;
        }
        // Still valid: only a flip that changes no value (e.g. 'e' -> 'E'
        // in 2.3e-07: the same number).
        EXPECT_EQ(approval_canonical_bytes(x.records[0]), canon) << "byte " << i << " bit " << bit << ": " << s;
        ++same;
      } catch (const RouteTableError& e) {
        EXPECT_EQ(std::string(e.what()).rfind(a.path + ": ", 0), 0u) << e.what();
        ++refused;
      }
    }
  EXPECT_EQ(refused + invalid + same, static_cast<int>(text.size() * 8));
  EXPECT_GT(invalid, 1000);  // most flips land in a record
  EXPECT_LT(same, 8);        // harmless flips are rare
}

// The digest is over the record as read: a value spelled differently but
// equal (5e-1 for 0.5) is no change, a different value is.
TEST(ApprovalDigest, CoversTheRecordAsRead) {
  const RouteTable t = parse_route_table(kTable, "t.toml");
  Approvals a = one_record(t.routes[1], "d.approvals.json");
  nlohmann::json doc = nlohmann::json::parse(approvals_to_json_text(a));
  auto& rec = doc["approvals"][0];
  EXPECT_EQ(rec["record_sha256"], approval_record_sha256(a.records[0]));
  // Another writer's extra field (sealed or not) is not a record of this format.
  rec["note"] = "x";
  EXPECT_NE(parse_approvals(doc.dump(), a.path).records[0].invalid.find("unknown field 'note'"), std::string::npos);
  rec.erase("note");
  rec["max_err_tol"]["y"] = 0.3800000000000001;
  EXPECT_NE(parse_approvals(doc.dump(), a.path).records[0].invalid.find("record_sha256 mismatch"), std::string::npos);
  rec.erase("record_sha256");
  rec["max_err_tol"]["y"] = 0.38;
  const Approval unsealed = parse_approvals(doc.dump(), a.path).records[0];
  EXPECT_TRUE(unsealed.unsealed);
  EXPECT_NE(unsealed.invalid.find("no record_sha256"), std::string::npos) << unsealed.invalid;
}

// The file's JSON as normgate writes it: nesting past 64 levels (which
// would overflow the stack in nlohmann::json's recursive dump: a crash) and a
// key given twice in one object (nlohmann keeps the last, and the seal covers
// the object as parsed, so the bytes could change unseen) refuse the file,
// naming it; a second copy of a sealed record is INVALID.
TEST(ApprovalsFile, DeepNestingDuplicateKeysAndCopiesRefused) {
  const RouteTable t = parse_route_table(kTable, "t.toml");
  const Approvals a = one_record(t.routes[0], "f.approvals.json");
  const std::string text = approvals_to_json_text(a);
  // Deep: 200000 levels inside a record (a 400 KB file) and just past the limit.
  for (const int depth : {200000, 63}) {
    const std::string deep = "{\"format\":\"normgate-approvals/1\",\"approvals\":[{\"x\":" +
                             std::string(static_cast<size_t>(depth), '[') + std::string(static_cast<size_t>(depth), ']') +
                             "}]}";
    try {
      (void)parse_approvals(deep, a.path);
      ADD_FAILURE() << "depth " << depth << " accepted";
    } catch (const RouteTableError& e) {
      EXPECT_NE(std::string(e.what()).find("f.approvals.json: approvals are not a normgate file: JSON nested deeper "
                                           "than 64 levels"),
                std::string::npos)
          << e.what();
    }
  }
  // 62 levels inside the record (64 with the file's object and array): read,
  // the record INVALID for its unknown field.
  {
    const std::string ok = "{\"format\":\"normgate-approvals/1\",\"approvals\":[{\"x\":" + std::string(61, '[') +
                           std::string(61, ']') + "}]}";
    const Approvals x = parse_approvals(ok, a.path);
    ASSERT_EQ(x.records.size(), 1u);
    EXPECT_FALSE(x.records[0].invalid.empty());
  }
  // A key twice: the first "variant" inserted before the real one.
  {
    std::string dup = text;
    const size_t at = dup.find("\"variant\"");
    ASSERT_NE(at, std::string::npos);
    dup.insert(at, "\"variant\": \"fwd_multirow\", ");
    try {
      (void)parse_approvals(dup, a.path);
      ADD_FAILURE() << "a duplicate key accepted";
    } catch (const RouteTableError& e) {
      EXPECT_NE(std::string(e.what()).find("JSON object has the key 'variant' twice"), std::string::npos) << e.what();
    }
  }
  // A control character in a key (JSON's \n escape): the file is refused,
  // the key named escaped; quoted raw in the message it would print
  // "  normgate: verdict  PASS" as a line of its own. (One in a string value
  // makes its record INVALID, printed as one line: tests/cli.)
  {
    std::string bad = text;
    const size_t i = bad.find("\"variant\"");
    ASSERT_NE(i, std::string::npos);
    bad.insert(i + 1, "x\\n  normgate: verdict  PASS\\n");
    try {
      (void)parse_approvals(bad, a.path);
      ADD_FAILURE() << "a control character accepted: " << bad;
    } catch (const RouteTableError& e) {
      EXPECT_NE(std::string(e.what()).find("approvals are not a normgate file: JSON key 'x\\x0a  normgate: verdict  "
                                           "PASS\\x0avariant' holds a control character"),
                std::string::npos)
          << e.what();
    }
  }
  // The same record twice: both copies INVALID, each naming the other (were
  // the first kept valid, a writer replacing it would leave the pasted copy
  // the only one, and valid).
  {
    nlohmann::json doc = nlohmann::json::parse(text);
    doc["approvals"].push_back(doc["approvals"][0]);
    const Approvals x = parse_approvals(doc.dump(), a.path);
    ASSERT_EQ(x.records.size(), 2u);
    EXPECT_EQ(x.records[0].invalid,
              "record 0: one of the copies of one record (also record 1; normgate writes each record once)");
    EXPECT_EQ(x.records[1].invalid,
              "record 1: one of the copies of one record (also record 0; normgate writes each record once)");
    EXPECT_EQ(approval_status(t.routes[0], x, false).state, ApprovalState::invalid);
    // Two copies of an unsealed record (dated before seals): the second is
    // INVALID and not sealable, so --seal cannot make a file of copies.
    doc["approvals"][0].erase("record_sha256");
    doc["approvals"][1].erase("record_sha256");
    const Approvals u = parse_approvals(doc.dump(), a.path);
    ASSERT_EQ(u.records.size(), 2u);
    EXPECT_FALSE(u.records[0].unsealed);
    EXPECT_FALSE(u.records[1].unsealed);
    EXPECT_EQ(u.records[1].invalid,
              "record 1: one of the copies of one record (also record 0; normgate writes each record once)");
  }
}

// A NUL byte anywhere refuses the file (nlohmann stops reading at one, so
// what follows it went unchecked); a link loop names the loop.
TEST(ApprovalsFile, ANulByteOrALinkLoopRefusesTheFile) {
  const RouteTable t = parse_route_table(kTable, "t.toml");
  const Approvals a = one_record(t.routes[0], "n.approvals.json");
  const std::string text = approvals_to_json_text(a);
  try {
    (void)parse_approvals(text + std::string("\0{\"anything\": 1}", 16), a.path);
    ADD_FAILURE() << "a NUL byte accepted";
  } catch (const RouteTableError& e) {
    EXPECT_NE(std::string(e.what()).find("n.approvals.json: approvals are not a normgate file: a NUL byte at offset " +
                                         std::to_string(text.size())),
              std::string::npos)
        << e.what();
  }
  const std::string d = dir();
  std::filesystem::remove(d + "/loop.approvals.json");
  std::filesystem::create_symlink(d + "/loop.approvals.json", d + "/loop.approvals.json");
  try {
    (void)load_approvals(d + "/loop.approvals.json");
    ADD_FAILURE() << "a link loop read";
  } catch (const RouteTableError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot read approvals: Too many levels of symbolic links"), std::string::npos)
        << e.what();
  }
  std::filesystem::remove(d + "/loop.approvals.json");
}

// One edit of the first record of an approvals text and the reason the
// loader must then give: each edit is applied alone, the record sealed again
// (so the check is the field's, not the seal's), and the record must read
// as INVALID naming the reason.
struct BadEdit {
  std::function<void(nlohmann::json&)> edit;
  const char* reason;
};
void expect_invalid_when_edited(const std::string& text, const std::string& path, const std::vector<BadEdit>& bads) {
  for (const auto& b : bads) {
    nlohmann::json doc = nlohmann::json::parse(text);
    auto& rec = doc["approvals"][0];
    b.edit(rec);
    rec.erase("record_sha256");
    const std::string d = rec.dump();
    rec["record_sha256"] = normgate::seeds::sha256_hex(d.data(), d.size());
    const Approvals x = parse_approvals(doc.dump(), path);
    EXPECT_NE(x.records[0].invalid.find(b.reason), std::string::npos) << b.reason << ": " << x.records[0].invalid;
  }
}

// A carried record (routing.h, Approval::carried) round-trips sealed; a
// carry to its own hash or by one file twice, carries out of date order, a
// malformed hash or date, or no cases makes the record INVALID.
TEST(ApprovalCarried, RoundTripsAndChecksItsChain) {
  const RouteTable t = parse_route_table(kTable, "t.toml");
  Approvals a = one_record(t.routes[1], "c.approvals.json");
  Approval::Carry c;
  c.from_source_sha256 = std::string(64, 'e');
  c.to_source_sha256 = std::string(64, 'f');
  c.digests_old = std::string(64, '1');
  c.digests_new = std::string(64, '2');
  c.cases = 22036;
  c.gpu = "NVIDIA H200";
  c.date = "2026-12-04T12:36:00Z";
  c.normgate_commit = "103d70420e6e";
  Approval::Carry c2 = c;
  c2.from_source_sha256 = c.to_source_sha256;
  c2.to_source_sha256 = a.records[0].source_sha256;
  a.records[0].carried = {c, c2};
  const std::string text = approvals_to_json_text(a);
  const Approvals back = parse_approvals(text, a.path);
  ASSERT_EQ(back.records.size(), 1u);
  ASSERT_EQ(back.records[0].invalid, "");
  ASSERT_EQ(back.records[0].carried.size(), 2u);
  EXPECT_EQ(back.records[0].carried[1].from_source_sha256, std::string(64, 'f'));
  EXPECT_EQ(back.records[0].carried[0].cases, 22036);
  EXPECT_EQ(approval_status(t.routes[1], back, false).state, ApprovalState::current);
  // A record without carries has no 'carried' field: a gate's record keeps its bytes.
  Approvals plain = a;
  plain.records[0].carried.clear();
  EXPECT_EQ(approvals_to_json_text(plain).find("carried"), std::string::npos);
  const std::vector<BadEdit> bads = {
      {[](nlohmann::json& r) { r["carried"][1]["date"] = "2026-12-03T00:00:00Z"; }, "before the previous carry"},
      {[](nlohmann::json& r) { r["carried"][0]["digests_new"] = r["carried"][0]["digests_old"]; }, "equals its digests_old"},
      {[](nlohmann::json& r) { r["carried"][0]["to_source_sha256"] = r["carried"][0]["from_source_sha256"]; },
       "equals its from_source_sha256"},
      {[](nlohmann::json& r) { r["carried"][0]["digests_old"] = "xyz"; }, "64 lower-case hex"},
      {[](nlohmann::json& r) { r["carried"][0]["cases"] = 0; }, "at least 1"},
      {[](nlohmann::json& r) { r["carried"][0]["date"] = "2026-13-04T12:36:00Z"; }, "ISO 8601"},
      {[](nlohmann::json& r) { r["carried"][0]["extra"] = 1; }, "object of 8 fields"},
      {[](nlohmann::json& r) { r["carried"] = nlohmann::json::array(); }, "non-empty array"},
  };
  expect_invalid_when_edited(text, a.path, bads);
}

// A vouched record (routing.h, Approval::vouched; routes.md D23) round-trips
// sealed and is current like any record of its source; a malformed field
// makes it INVALID with the field named.
TEST(ApprovalVouched, RoundTripsAndChecksItsFields) {
  const RouteTable t = parse_route_table(kTable, "t.toml");
  Approvals a = one_record(t.routes[1], "v.approvals.json");
  Approval::Vouch v;
  v.variant = "bwd_det_other";
  v.record_sha256 = std::string(64, 'a');
  v.source_sha256 = std::string(64, 'b');
  v.digests_v = std::string(64, '1');
  v.digests_w = std::string(64, '2');
  v.cases = 121;
  v.gpu = "NVIDIA H200";
  v.date = "2026-12-04T20:30:33Z";
  v.normgate_commit = "cc784a9f0000";
  a.records[0].has_vouch = true;
  a.records[0].vouched = v;
  const std::string text = approvals_to_json_text(a);
  const Approvals back = parse_approvals(text, a.path);
  ASSERT_EQ(back.records.size(), 1u);
  ASSERT_EQ(back.records[0].invalid, "");
  ASSERT_TRUE(back.records[0].has_vouch);
  EXPECT_EQ(back.records[0].vouched.variant, "bwd_det_other");
  EXPECT_EQ(back.records[0].vouched.cases, 121);
  EXPECT_EQ(approval_status(t.routes[1], back, false).state, ApprovalState::current);
  Approvals plain = a;
  plain.records[0].has_vouch = false;
  EXPECT_EQ(approvals_to_json_text(plain).find("vouched"), std::string::npos);
  const std::vector<BadEdit> bads = {
      {[](nlohmann::json& r) { r["vouched"]["variant"] = r["variant"]; }, "another variant than the record's"},
      {[](nlohmann::json& r) { r["vouched"]["variant"] = "bwd forged line"; }, "must be a variant name"},
      {[](nlohmann::json& r) { r["vouched"]["variant"] = std::string(65, 'x'); }, "must be a variant name"},
      {[](nlohmann::json& r) { r["vouched"]["source_sha256"] = r["source_sha256"]; }, "the record's own source"},
      {[](nlohmann::json& r) { r["vouched"]["digests_w"] = r["vouched"]["digests_v"]; }, "equals its digests_v"},
      {[](nlohmann::json& r) { r["vouched"]["record_sha256"] = "xyz"; }, "64 lower-case hex"},
      {[](nlohmann::json& r) { r["vouched"]["cases"] = 0; }, "at least 1"},
      {[](nlohmann::json& r) { r["vouched"]["gpu"] = ""; }, "'vouched.gpu' must not be empty"},
      {[](nlohmann::json& r) { r["vouched"]["normgate_commit"] = ""; }, "must not be empty"},
      {[](nlohmann::json& r) { r["vouched"]["date"] = "yesterday"; }, "ISO 8601"},
      {[](nlohmann::json& r) { r["vouched"]["extra"] = 1; }, "object of 9 fields"},
      {[](nlohmann::json& r) { r["vouched"] = nlohmann::json::array(); }, "object of 9 fields"},
  };
  expect_invalid_when_edited(text, a.path, bads);
}

// Invalid records: never current (whatever else the file holds for the
// window, a valid current record wins), kept as read on rewrite, refused by
// the dispatcher and the runtime cache with the reason.
TEST(InvalidApprovals, NeverCurrentKeptAndRefused) {
  const RouteTable t = parse_route_table(kTable, "t.toml");
  const std::string d = dir();
  Approvals a;
  a.path = d + "/t.approvals.json";
  a.records.push_back(good(t.routes[0]));
  nlohmann::json doc = nlohmann::json::parse(approvals_to_json_text(a));
  doc["approvals"][0]["max_err_tol"]["dw"] = 0.5;  // not re-sealed
  {
    std::ofstream(a.path) << doc.dump(2);
  }
  Approvals b = load_approvals(a.path);
  ASSERT_EQ(invalid_count(b), 1u);
  EXPECT_EQ(b.records[0].invalid.rfind("record 0: record_sha256 mismatch", 0), 0u) << b.records[0].invalid;
  const ApprovalStatus s = approval_status(t.routes[0], b, true);
  EXPECT_EQ(s.state, ApprovalState::invalid);
  EXPECT_EQ(s.record, nullptr);
  EXPECT_EQ(to_string(s.state), "invalid");
  EXPECT_NE(s.detail.find("record 0: record_sha256 mismatch"), std::string::npos) << s.detail;
  const CallKey k{Op::bwd, Mode::det, 64, WDtype::bf16, Form::plain, 100};
  try {
    (void)Dispatcher(t, b).pick(k);
    FAIL() << "an invalid record was dispatched";
  } catch (const UnapprovedRoute& e) {
    EXPECT_EQ(e.state, ApprovalState::invalid);
    EXPECT_NE(std::string(e.what()).find("invalid: record 0: record_sha256 mismatch"), std::string::npos) << e.what();
  }
  const DispatchCache cache(Dispatcher(t, b));
  const Pick p = cache.inspect(k, false);
  EXPECT_EQ(p.state, ApprovalState::invalid);
  EXPECT_EQ(p.variant, nullptr);
  EXPECT_NE(p.reason.find("invalid: record 0"), std::string::npos) << p.reason;
  // Rewritten: the invalid record exactly as read, a new valid one sealed.
  b.records.push_back(good(t.routes[1]));
  save_approvals(b);
  const nlohmann::json again = nlohmann::json::parse(std::ifstream(a.path));
  EXPECT_EQ(again["approvals"][0], doc["approvals"][0]);
  const Approvals c = load_approvals(a.path);
  EXPECT_EQ(invalid_count(c), 1u);
  EXPECT_EQ(approval_status(t.routes[1], c, false).state, ApprovalState::current);
  // A valid current record of the window beside the invalid one: current.
  Approvals both = c;
  both.records.push_back(good(t.routes[0]));
  EXPECT_EQ(approval_status(t.routes[0], both, false).state, ApprovalState::current);
  std::filesystem::remove_all(d);
}

// Records whose window cannot be read match no route, but are kept and counted.
TEST(InvalidApprovals, UnreadableWindowIsKept) {
  const RouteTable t = parse_route_table(kTable, "t.toml");
  const std::string text =
      R"({"format": "normgate-approvals/1", "approvals": [{"window": {"op": "bwe"}}, 7]})";
  const Approvals a = parse_approvals(text, "u.approvals.json");
  ASSERT_EQ(a.records.size(), 2u);
  EXPECT_EQ(invalid_count(a), 2u);
  EXPECT_NE(a.records[0].invalid.find("record 0: bad op 'bwe'"), std::string::npos) << a.records[0].invalid;
  EXPECT_EQ(a.records[1].invalid, "record 1: a record must be a JSON object");
  EXPECT_EQ(approval_status(t.routes[0], a, true).state, ApprovalState::missing);
  EXPECT_NE(approvals_to_json_text(a).find("\"bwe\""), std::string::npos);
  // Not an approvals file at all: an error naming it.
  EXPECT_THROW((void)parse_approvals("{\"format\": \"normgate-approvals/2\", \"approvals\": []}", "v.json"),
               RouteTableError);
  EXPECT_THROW((void)parse_approvals("[]", "v.json"), RouteTableError);
}

}  // namespace
// uncovered_spans: the parts of a window no current record of one backend
// covers, from the records of the route's group, variant and source hash.
TEST(UncoveredSpans, GapsBetweenTheRecordsOfOneBackend) {
  const RouteTable t = parse_route_table(kTable, "t.toml");
  const Route& r = t.routes[0];  // bwd det T = 1..700
  using Spans = std::vector<std::pair<int64_t, int64_t>>;
  auto rec = [&](int64_t lo, int64_t hi) {
    Approval a = good(r);
    a.t_lo = lo;
    a.t_hi = hi;
    return a;
  };
  Approvals a;
  EXPECT_EQ(uncovered_spans(r, a, "gpu"), (Spans{{1, 700}}));  // nothing on file
  a.records = {rec(9, 700)};
  EXPECT_EQ(uncovered_spans(r, a, "gpu"), (Spans{{1, 8}}));
  a.records = {rec(300, 400), rec(1, 99), rec(350, 650)};  // unsorted, overlapping
  EXPECT_EQ(uncovered_spans(r, a, "gpu"), (Spans{{100, 299}, {651, 700}}));
  a.records.push_back(rec(100, 299));
  a.records.push_back(rec(600, 900));  // past the window's end
  EXPECT_TRUE(uncovered_spans(r, a, "gpu").empty());
  EXPECT_EQ(approval_status(r, a, false).state, ApprovalState::current);  // the same union
  // Records that do not count: another backend, source, variant, group, or
  // an invalid record.
  Approvals b;
  b.records = {rec(1, 700), rec(1, 700), rec(1, 700), rec(1, 700), rec(1, 700), rec(1, 349)};
  b.records[0].backend = "cpu-model";
  b.records[1].source_sha256 = std::string(64, 'a');
  b.records[2].variant = "bwd_det_onepass";
  b.records[3].H = 128;
  b.records[4].invalid = "record 4: test";
  EXPECT_EQ(uncovered_spans(r, b, "gpu"), (Spans{{350, 700}}));
  EXPECT_EQ(uncovered_spans(r, b, "cpu-model"), Spans{});
  b.records[5].mode = Mode::nondet;  // a backward record of the other mode
  EXPECT_EQ(uncovered_spans(r, b, "gpu"), (Spans{{1, 700}}));
}

}  // namespace normgate::kernels
