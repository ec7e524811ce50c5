// normgate/gate/mutation.h: the mutation score of the gate's families.
//
// Every negative control of the registry (registry.h: each imitates one
// public bug class) is a mutant of a correct kernel; a family point (a
// family at one eps and kappa: seed_set.h FamilyPoint) kills a control when
// some case of that point fails it. run_mutation runs the default family
// set (5xN) over a few small shapes on the CPU models (every control where
// it applies, and the real variants beside them) and returns the kill
// matrix: which point kills which control, whether every control is killed,
// whether any real variant fails, and each variant's conditioning headroom
// (the highest kappa of kKappaLevels at which it passes every cancel case,
// and every cancel case below it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "normgate/core/types.h"
#include "normgate/seeds/seed_set.h"

namespace normgate::validators {

/// One shape the mutation score runs every point of its seed set at.
struct MutationShape {
  int64_t H = 0, T = 0;
  WDtype w = WDtype::bf16;
  Form form = Form::plain;
};

/// The default shapes: plain H = 1000 (not a power of two: padded lanes
/// show) and res H = 1000 at T = 600 (w bf16 and fp32), heads4 at T = 150
/// (600 rows of 256): every control applies to at least one.
std::vector<MutationShape> default_mutation_shapes();

struct MutationOptions {
  /// Seed set (seed_set.h); default: the gate's default points, seed 0.
  std::string seeds = "5x1";
  std::vector<MutationShape> shapes = default_mutation_shapes();
  /// Real (non-control) variants expected to fail somewhere (an accuracy for
  /// speed variant the gate rejects on cancel, e.g. bwd_fp32_blocked): their
  /// failures are reported, not counted against the score. Each must name a
  /// non-control variant (else std::invalid_argument).
  std::vector<std::string> expect_fail;
  int threads = 0;  ///< OpenMP threads (<= 0: default)
};

/// One variant's row of the matrix.
struct MutationRow {
  std::string variant;
  bool control = false;
  bool expect_fail = false;     ///< listed in MutationOptions::expect_fail
  std::string source_of_class;  ///< controls: the public report of the bug class
  /// Per point (MutationResult::points order): 'X' a case of the point
  /// fails, '?' none fails but one is inconclusive, '.' every case passes,
  /// '-' no case of the point applies (shape, weight or form unsupported).
  std::string cells;
  int64_t cases = 0, failed = 0;
  /// The first failing case id ("" when none).
  std::string first_failure;
  /// Highest kappa of kKappaLevels with every cancel case at it and below
  /// passing; 0 when it fails at the lowest (1e2); -1 when not measured (no
  /// cancel case applies, or it fails at the lowest level run above 1e2).
  double kappa_headroom = -1;
  bool killed() const { return cells.find('X') != std::string::npos; }
};

struct MutationResult {
  std::string seeds;                       ///< canonical seed set
  std::vector<std::string> points;         ///< column labels, e.g. "cancel,kappa=10000"
  std::vector<MutationRow> rows;           ///< controls first (registry order), then real variants
  int64_t cases = 0;                       ///< distinct cases (each checked once for every variant)
  /// Every control killed and no real variant (outside expect_fail) failing.
  bool pass() const;
  std::vector<std::string> survivors() const;    ///< controls no point kills
  std::vector<std::string> real_failures() const; ///< real variants that failed, outside expect_fail
};

/// The label of a family point (seeds::to_string(FamilyPoint)).
std::string point_label(const seeds::FamilyPoint& p);

/// Run the mutation score (CPU models; see the file comment). Throws
/// std::invalid_argument for a bad seed set, an empty shape list, a shape a
/// case id refuses, or a bad expect_fail name, before any case runs.
MutationResult run_mutation(const MutationOptions& opt);

/// The matrix as text: one row per variant, one column per point, then
/// cases, failures, kappa headroom and the bug class's public source; a
/// legend and the verdict line.
std::string format_mutation(const MutationResult& r);

/// The matrix as JSON ("format": kMutationFormat; docs/schemas.md).
inline constexpr const char* kMutationFormat = "normgate-mutation/1";
nlohmann::json to_json(const MutationResult& r);

/// A kappa headroom for reports: "none" (< 0), "<1e2" (0: fails at the
/// lowest level), else the level ("1e+06" style shortest, e.g. "1e6").
std::string format_headroom(double kappa);

}  // namespace normgate::validators
