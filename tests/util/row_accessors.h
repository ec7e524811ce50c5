// tests/util/row_accessors.h: the Reference's split row accessors
// (y_row / dx_row into value and bound arrays, dx_row_values) must return the
// bits of the VB row accessors, on plain, res (dx_add) and escalated rows.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "normgate/oracle/reference.h"

namespace normgate::test {

inline void expect_split_rows_match(const oracle::Reference& ref) {
  const auto n = static_cast<size_t>(ref.cols());
  std::vector<oracle::VB> row(n);
  std::vector<double> v(n), b(n), vo(n);
  auto same = [](double p, double q) { return std::memcmp(&p, &q, sizeof p) == 0; };
  for (int64_t r = 0; r < ref.rows(); ++r) {
    ref.y_row(r, row.data());
    ref.y_row(r, v.data(), b.data());
    for (size_t j = 0; j < n; ++j)
      ASSERT_TRUE(same(row[j].v, v[j]) && same(row[j].bound, b[j])) << "y " << r << "," << j;
    ref.dx_row(r, row.data());
    ref.dx_row(r, v.data(), b.data());
    ref.dx_row_values(r, vo.data());
    for (size_t j = 0; j < n; ++j) {
      ASSERT_TRUE(same(row[j].v, v[j]) && same(row[j].bound, b[j])) << "dx " << r << "," << j;
      ASSERT_TRUE(same(row[j].v, vo[j])) << "dx value " << r << "," << j;
    }
  }
}

}  // namespace normgate::test
