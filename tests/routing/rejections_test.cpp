// tests/routing/rejections_test.cpp: remembered rejections (rejections.h):
// sealed as approvals are (the same digest), every single-bit flip of a
// written file an error naming the file, field rules, and record_rejections
// keeping the records on disk and adding no duplicate claim.
#include <gtest/gtest.h>

#include "util/approval_fixture.h"
#include "util/rejection_fixture.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "normgate/kernels/registry.h"
#include "normgate/routing/rejections.h"
#include "normgate/routing/routing.h"

namespace normgate::kernels {
namespace {

// A valid record, as derive writes one.
Rejection good() { return test::valid_rejection(); }

std::string dir() {
  const std::string d = std::string(NORMGATE_BINARY_DIR) + "/rejections_test_" + std::to_string(::getpid());
  std::filesystem::create_directories(d);
  return d;
}

TEST(Rejections, SealIsTheApprovalsDigestAndEveryBitFlipIsAnError) {
  Rejections a;
  a.path = "x.rejections.json";
  a.records = {good()};
  const std::string text = rejections_to_json_text(a);
  const Rejections back = parse_rejections(text, a.path);
  ASSERT_EQ(back.records.size(), 1u);
  EXPECT_EQ(back.records[0].record_sha256, rejection_record_sha256(good()));
  EXPECT_EQ(back.records[0].window(), "bwd det H=64 w=bf16 form=plain T=2..8");
  // The digest is the approvals' rule: SHA-256 of the compact dump without record_sha256.
  auto j = nlohmann::json::parse(text)["rejections"][0];
  EXPECT_EQ(j["record_sha256"], back.records[0].record_sha256);
  for (size_t i = 0; i < text.size(); ++i)
    for (int b = 0; b < 8; ++b) {
      std::string t = text;
      t[i] = static_cast<char>(t[i] ^ (1 << b));
      try {
        (void)parse_rejections(t, "x.rejections.json");
        ADD_FAILURE() << "byte " << i << " bit " << b << " accepted";
      } catch (const RouteTableError& e) {
        EXPECT_EQ(std::string(e.what()).rfind("x.rejections.json: ", 0), 0u) << e.what();
      }
    }
}

TEST(Rejections, FieldRules) {
  EXPECT_EQ(validate_rejection(good()), "");
  auto why = [](auto change) {
    Rejection r = good();
    change(r);
    return validate_rejection(r);
  };
  EXPECT_NE(why([](Rejection& r) { r.worst_err_tol = 1.0; }).find("not > 1"), std::string::npos);
  EXPECT_NE(why([](Rejection& r) { r.worst_err_tol = std::numeric_limits<double>::quiet_NaN(); }).find("not > 1"),
            std::string::npos);
  EXPECT_EQ(why([](Rejection& r) { r.worst_err_tol = std::numeric_limits<double>::infinity(); }), "");
  EXPECT_NE(why([](Rejection& r) { r.gated_hi = 7; }).find("does not contain"), std::string::npos);
  EXPECT_NE(why([](Rejection& r) { r.worst_case = "H=64,T=700,w=bf16,form=plain,family=cancel,seed=1"; })
                .find("not inside the gated window"),
            std::string::npos);
  EXPECT_NE(why([](Rejection& r) { r.gpu = "NVIDIA H200"; }).find("of a cpu-model record"), std::string::npos);
  EXPECT_NE(why([](Rejection& r) { r.backend = "gpu"; }).find("gpu 'cpu-model' of a gpu record"), std::string::npos);
  EXPECT_NE(why([](Rejection& r) { r.op = Op::fwd; }).find("worst_output 'dw'"), std::string::npos);
  EXPECT_NE(why([](Rejection& r) { r.source_sha256[0] = 'G'; }).find("source_sha256"), std::string::npos);
  // The variant is a name as registered: control bytes (an escape
  // sequence, a NUL) make it none.
  EXPECT_NE(why([](Rejection& r) { r.variant = std::string("fwd\x1b[31m\0x", 9); })
                .find("is not a variant name ([A-Za-z0-9_.+-]{1,64})"),
            std::string::npos);
  Rejections bad;
  bad.path = "p.json";
  bad.records = {good()};
  bad.records[0].worst_err_tol = 0.5;
  EXPECT_THROW((void)rejections_to_json_text(bad), std::invalid_argument);
}

// A record whose window cannot be read is named as such, not as the
// window its defaults would print ("bwd det H=0 ... T=0..0 -> "); one with a
// control character in a field names the field, escaped.
TEST(Rejections, AnUnreadableWindowIsNotNamedAsAWindow) {
  Rejections a;
  a.path = "w.rejections.json";
  a.records = {good()};
  nlohmann::json doc = nlohmann::json::parse(rejections_to_json_text(a));
  doc["rejections"][0]["window"] = "bwd";
  try {
    (void)parse_rejections(doc.dump(), a.path);
    ADD_FAILURE() << "an unreadable window accepted";
  } catch (const RouteTableError& e) {
    EXPECT_NE(std::string(e.what()).find("w.rejections.json: record 0 (window unreadable): "), std::string::npos)
        << e.what();
    EXPECT_EQ(std::string(e.what()).find("H=0"), std::string::npos) << e.what();
  }
  doc = nlohmann::json::parse(rejections_to_json_text(a));
  doc["rejections"][0]["date"] = "2026-12-01T00:00:00Z\n  normgate: verdict  PASS";
  try {
    (void)parse_rejections(doc.dump(), a.path);
    ADD_FAILURE() << "a control character accepted";
  } catch (const RouteTableError& e) {
    EXPECT_NE(std::string(e.what()).find("field 'date' holds a control character ('2026-12-01T00:00:00Z\\x0a  "
                                         "normgate: verdict  PASS'"),
              std::string::npos)
        << e.what();
  }
}

// A second copy of a record makes the file INVALID, naming both.
TEST(Rejections, ACopyOfARecordIsRefused) {
  Rejections a;
  a.path = "c.rejections.json";
  a.records = {good()};
  nlohmann::json doc = nlohmann::json::parse(rejections_to_json_text(a));
  doc["rejections"].push_back(doc["rejections"][0]);
  try {
    (void)parse_rejections(doc.dump(), a.path);
    ADD_FAILURE() << "a copy accepted";
  } catch (const RouteTableError& e) {
    EXPECT_NE(std::string(e.what()).find("c.rejections.json: record 1 (") , std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("a copy of record 0 (the same record_sha256"), std::string::npos) << e.what();
  }
}

TEST(Rejections, RecordKeepsWhatIsOnDiskAndAddsNoDuplicateClaim) {
  const std::string d = dir();
  const std::string table = d + "/t.toml";
  const std::string path = rejections_path_for(table);
  EXPECT_EQ(path, d + "/t.rejections.json");
  std::filesystem::remove(path);
  EXPECT_TRUE(load_rejections(path).records.empty());  // missing: none
  EXPECT_EQ(record_rejections(path, approvals_path_for(table), {good()}), 1u);
  Rejection same = good();
  same.worst_case = "H=64,T=6,w=bf16,form=plain,family=cancel,seed=2";  // another proof of the same claim
  same.date = "2026-12-02T00:00:00Z";
  EXPECT_EQ(record_rejections(path, approvals_path_for(table), {same}), 0u);
  Rejection gpu = good();
  gpu.backend = "gpu";
  gpu.gpu = "NVIDIA H200";
  EXPECT_EQ(record_rejections(path, approvals_path_for(table), {gpu}), 1u);
  const Rejections r = load_rejections(path);
  ASSERT_EQ(r.records.size(), 2u);
  EXPECT_EQ(r.records[0].worst_case, good().worst_case);
  EXPECT_EQ(r.records[1].backend, "gpu");
  EXPECT_TRUE(std::filesystem::exists(approvals_path_for(table) + ".lock"));  // the approvals' lock
  Rejection bad = good();
  bad.worst_err_tol = 0.9;
  EXPECT_THROW((void)record_rejections(path, approvals_path_for(table), {bad}), std::invalid_argument);
  EXPECT_EQ(load_rejections(path).records.size(), 2u);
  std::filesystem::remove_all(d);
}

// refuted_records: which records a failure refutes (the same variant,
// source and backend, windows that meet), in file order, the reason naming
// the failed source and whether it is this build's; INVALID records never.
TEST(Rejections, RefutedRecordsNameTheSourceAndSkipInvalidOnes) {
  Route r;
  r.op = Op::bwd;
  r.mode = Mode::det;
  r.H = 64;
  r.w = WDtype::bf16;
  r.form = Form::plain;
  r.t_lo = 1;
  r.t_hi = 100;
  r.variant = find_variant("bwd_fp32_blocked");
  ASSERT_NE(r.variant, nullptr);
  Approvals a;
  a.path = "x.approvals.json";
  a.records.push_back(test::valid_approval(r));                     // this build's source, cpu-model: refuted
  a.records.push_back(test::valid_approval(r, std::string(64, 'e')));  // another source: not by good()
  Route far = r;
  far.t_lo = 200;
  far.t_hi = 300;
  a.records.push_back(test::valid_approval(far));  // T = 200..300 does not meet 2..8
  a.records.push_back(test::valid_approval(r));
  a.records.back().invalid = "record_sha256 mismatch";  // counts for nothing already
  a.records.push_back(test::valid_approval(r, "", "gpu"));  // another backend
  Rejections rej;
  rej.path = "x.rejections.json";
  Rejection old = good();
  old.source_sha256 = std::string(64, 'e');
  rej.records = {good(), old};
  const std::vector<RefutedRecord> got = refuted_records(a, rej);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].index, 0u);
  EXPECT_EQ(got[0].by, 0u);
  const std::string src = std::string(find_variant("bwd_fp32_blocked")->source_sha256.substr(0, 12));
  EXPECT_EQ(got[0].reason, "the gate failed this variant's source " + src +
                               " (this build's) there (bwd det H=64 w=bf16 form=plain T=2..8 remembered in "
                               "x.rejections.json: case H=64,T=5,w=bf16,form=plain,family=cancel,seed=1, dw err/tol "
                               "3.5, 2026-12-01T03:03:23Z)");
  EXPECT_EQ(got[1].index, 1u);
  EXPECT_EQ(got[1].by, 1u);
  EXPECT_NE(got[1].reason.find("source eeeeeeeeeeee (not this build's) there"), std::string::npos) << got[1].reason;
  EXPECT_TRUE(refuted_records(a, Rejections{}).empty());
}

}  // namespace
}  // namespace normgate::kernels
