// tests/util/row_accessors.h: the Reference's split row accessors
// (y_row / dx_row into value and bound arrays, dx_row_values), over whole rows
// and column ranges, must return the bits of the VB row accessors, on plain,
// res (dx_add) and escalated rows.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "normgate/oracle/reference.h"

namespace normgate::test {

inline void expect_split_rows_match(const oracle::Reference& ref) {
  const auto n = static_cast<size_t>(ref.cols());
  std::vector<oracle::VB> yrow(n), dxrow(n);
  std::vector<double> v(n), b(n), vo(n);
  auto same = [](double p, double q) { return std::memcmp(&p, &q, sizeof p) == 0; };
  // Column ranges [j0, j0 + len): the whole row, tiles of 7 columns (a
  // ragged last one) and empty ranges, against the whole-row VB values.
  std::vector<std::pair<int64_t, int64_t>> ranges{{0, ref.cols()}, {0, 0}, {ref.cols(), 0}};
  for (int64_t j0 = 0; j0 < ref.cols(); j0 += 7) ranges.emplace_back(j0, std::min<int64_t>(7, ref.cols() - j0));
  for (int64_t r = 0; r < ref.rows(); ++r) {
    ref.y_row(r, yrow.data());
    ref.dx_row(r, dxrow.data());
    for (const auto& [j0, len] : ranges) {
      std::fill(v.begin(), v.end(), -1.0);
      std::fill(b.begin(), b.end(), -1.0);
      ref.y_row(r, j0, len, v.data(), b.data());
      for (int64_t i = 0; i < len; ++i)
        ASSERT_TRUE(same(yrow[j0 + i].v, v[i]) && same(yrow[j0 + i].bound, b[i])) << "y " << r << "," << j0 + i;
      ref.dx_row(r, j0, len, v.data(), b.data());
      ref.dx_row_values(r, j0, len, vo.data());
      for (int64_t i = 0; i < len; ++i) {
        ASSERT_TRUE(same(dxrow[j0 + i].v, v[i]) && same(dxrow[j0 + i].bound, b[i])) << "dx " << r << "," << j0 + i;
        ASSERT_TRUE(same(dxrow[j0 + i].v, vo[i])) << "dx value " << r << "," << j0 + i;
      }
    }
  }
}

}  // namespace normgate::test
