// Tests of the family descriptions used by `normgate families`.
#include "normgate/seeds/family_docs.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace normgate::seeds {
namespace {

TEST(FamilyDocs, EveryFamilyHasDistinctTexts) {
  std::set<std::string_view> summaries, details;
  for (Family f : {Family::normal, Family::llm, Family::cancel, Family::zeros, Family::tiny, Family::huge, Family::specials,
                   Family::epsnear}) {
    const std::string_view s = family_summary(f), d = family_details(f);
    EXPECT_FALSE(s.empty());
    EXPECT_LT(s.size(), 100u) << to_string(f);
    EXPECT_EQ(s.find('\n'), std::string_view::npos) << to_string(f);
    EXPECT_NE(d.find('\n'), std::string_view::npos) << to_string(f);
    EXPECT_NE(d.back(), '\n');
    EXPECT_NE(d.find("purpose"), std::string_view::npos) << to_string(f);
    summaries.insert(s);
    details.insert(d);
  }
  EXPECT_EQ(summaries.size(), 8u);
  EXPECT_EQ(details.size(), 8u);
  // The parameters quoted match the generator's (families.h).
  EXPECT_NE(family_details(Family::llm).find("[50, 2000]"), std::string_view::npos);
  EXPECT_NE(family_details(Family::cancel).find("kappa"), std::string_view::npos);
  EXPECT_NE(family_details(Family::tiny).find("[-133, -120]"), std::string_view::npos);
  EXPECT_NE(family_details(Family::epsnear).find("[-4, 4]"), std::string_view::npos);
  EXPECT_EQ(family_summary(static_cast<Family>(99)), "unknown family");
}

}  // namespace
}  // namespace normgate::seeds
