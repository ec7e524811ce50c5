// normgate/routing/derive.h: route tables derived from measurements, not
// written by hand (`normgate derive`, apps/cmd_derive.cpp).
//
// A derivation spec (routes/<arch>.derive.toml) names what to route and the
// candidates:
//
//   arch = "sm90a"
//   description = "..."                     # optional, copied to the table
//   gpu = "NVIDIA H200"                     # optional: the CUDA device name whose
//                                           # timings alone derive this spec's table
//                                           # (compared as gpu_slug, routing.h)
//   T = [1, 64, 512, 4096, 65536, 131072]   # the T grid, ascending, first = 1;
//                                           # the last is every group's last T
//   [candidates]   # per op and mode, MOST ACCURATE FIRST (ties go earlier)
//   fwd = ["fwd_rowwise", "fwd_multirow"]
//   bwd_det = ["bwd_det_chunked", "bwd_det_onepass", "bwd_fp32_blocked"]
//   bwd_nondet = ["bwd_det_chunked", "bwd_nondet_atomic", "bwd_fp32_blocked"]
//   [bench]        # optional; defaults shown
//   rounds = 3            # interleaved rounds (>= 2)
//   reps = 50             # graph replays per measurement (>= 20)
//   crossover_steps = 3   # bisections of each crossover interval (0..12)
//   [fallback]     # optional, copied to the table (routing.h, `fallback`)
//   fwd = "fwd_rowwise"
//   [[group]]      # one or more; H and w may be lists (the cartesian product)
//   op = "bwd"  modes = ["det", "nondet"]  H = [2048, 4096]  w = ["bf16", "fp32"]  form = "plain"
//
// The method (the seed PR's): every candidate of a group is timed at every
// grid T in one process, each measurement a CUDA-graph replay with the L2
// flushed before every replay (bench/timing), candidates interleaved within
// each round in a rotating order, and the first candidate timed twice per
// round: the A/A floor of a point is the largest relative difference between
// those two timings over the rounds. A point's winner is the first candidate
// in the spec's order whose median time is within the floor of the fastest
// one (ties go to the more accurate variant). Where neighbouring grid points
// have different winners, the interval is bisected crossover_steps times
// (new points timed the same way), and windows are split at the last point
// the earlier winner holds: window A = [.., T_a], window B = [T_a + 1, ..].
// Timings do not depend on the mode: a det variant is timed once and serves
// both modes' groups, so deterministic=False is never routed slower than
// deterministic=True (a det variant may serve a nondet window).
//
// Then the gate: a window's winner must have a current approval (routing.h,
// approval_status); windows whose winner has none are gated, and a winner
// the gate rejects is excluded from that window's T points, and the group
// derived again, until every window's winner is approved or no candidate is
// left. A table with a window that no approved candidate serves is not
// written (`normgate derive` exits 1 and writes the report only).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "normgate/core/types.h"
#include "normgate/kernels/registry.h"
#include "normgate/routing/routing.h"

namespace normgate::kernels {

/// One (op, mode, H, w, form) to route over T = 1 .. spec.t_grid.back().
struct DeriveGroup {
  Op op = Op::bwd;
  Mode mode = Mode::det;  ///< fwd groups: Mode::det (both modes share the forward)
  int64_t H = 0;
  WDtype w = WDtype::bf16;
  Form form = Form::plain;
  /// "bwd det H=2048 w=bf16 form=plain" (window text without T).
  std::string key() const;
};

/// A parsed derivation spec (file comment).
struct DeriveSpec {
  std::string path;
  std::string arch;
  std::string description;
  std::string gpu;                             ///< optional `gpu`, "" when absent (a non-empty gpu_slug otherwise)
  std::vector<int64_t> t_grid;                 ///< ascending, t_grid[0] == 1
  std::vector<const Variant*> fwd, bwd_det, bwd_nondet;  ///< candidates, most accurate first
  int rounds = 3, reps = 50, crossover_steps = 3;
  std::vector<std::pair<std::string, std::string>> fallback;  ///< (key, variant) in file order
  std::vector<DeriveGroup> groups;             ///< expanded, file order

  /// The candidates of g (its op and mode) that support g's H, w and form.
  std::vector<const Variant*> candidates(const DeriveGroup& g) const;
};

/// Parse spec TOML `text` (`path` names it in messages). Throws
/// RouteTableError "PATH:LINE: what" for: TOML syntax, unknown or missing
/// keys, a T grid that is empty, not ascending, not starting at 1 or beyond
/// seeds::kMaxT (2^31: a route table's limit); unknown variants; a candidate of the wrong op; a non-deterministic
/// candidate in bwd_det; a negative control; bench values out of range; a
/// group with no candidate supporting it; groups repeated.
DeriveSpec parse_derive_spec(std::string_view text, const std::string& path);
/// Read and parse the file at `path` (errors as above, or naming the OS error).
DeriveSpec load_derive_spec(const std::string& path);

/// Where a timing was measured (shape of one call).
struct BenchKey {
  Op op = Op::bwd;
  int64_t H = 0;
  WDtype w = WDtype::bf16;
  Form form = Form::plain;
  int64_t T = 0;
  auto operator<=>(const BenchKey&) const = default;
};

/// Timings of the candidates at one shape, microseconds.
struct BenchPoint {
  BenchKey key;
  std::map<std::string, double> median_us;                ///< per variant name: median over rounds
  std::map<std::string, std::vector<double>> rounds_us;   ///< per variant: each round's median of reps
  std::string aa_variant;                                 ///< the variant timed twice per round
  double aa_floor = 0;  ///< max over rounds of |A - A'| / min(A, A') (relative, >= 0)
  /// The A/A repeat A' of each round (aa_variant timed again at the end of
  /// the round), us; empty in timings written before 2026-12-03 (then the
  /// tie rule falls back to aa_floor, see ties_with).
  std::vector<double> aa_rounds_us;
};

/// Whether candidate `v` ties with the fastest candidate `fastest` at point
/// p, i.e. is not measurably slower (both names must have rounds_us).
/// With aa_rounds_us (one per round, every round of both candidates
/// present): the median over rounds of t_v/t_fastest is at most 1 + the
/// median over rounds of the A/A gap |A - A'| / min(A, A'). Each round's
/// candidates run milliseconds apart, so the per-round ratio cancels drift
/// that moves whole rounds (the H200's power cap moves SM clocks by up to
/// 17% between rounds: docs/perf/routes.md D9), and one noisy round can
/// neither make nor break a tie. Without aa_rounds_us: median_v <=
/// median_fastest * (1 + aa_floor), the rule the older timings were
/// derived with.
bool ties_with(const BenchPoint& p, const std::string& v, const std::string& fastest);
/// v measurably slower than u at p: v's median is larger and v does not tie
/// with u (ties_with). The winner at a point (winner_at) is the first
/// candidate measurably slower than no other live candidate.
bool measurably_slower(const BenchPoint& p, const std::string& v, const std::string& u);
/// v measurably slower than none of `live` (v itself may be among them):
/// what makes a candidate eligible at a point; winner_at takes the first
/// eligible one in spec order, the report marks the others `~`.
bool slower_than_none(const BenchPoint& p, const std::string& v, const std::vector<std::string>& live);
/// Whether p carries what the paired rule needs: aa_rounds_us, and as many
/// rounds of every variant (parse_timings refuses points where they differ).
bool paired_rounds(const BenchPoint& p);
/// The relative floor ties_with applies at p: the median per-round A/A gap
/// with aa_rounds_us, else aa_floor (for reports).
double tie_floor(const BenchPoint& p);

/// Every timing of a derivation, with where it was measured.
struct Timings {
  std::string gpu, driver, cuda, date, normgate_commit;
  int rounds = 0, reps = 0;
  std::map<BenchKey, BenchPoint> points;

  const BenchPoint* find(const BenchKey& k) const;
};

/// JSON ("normgate-timings/1"): {format, gpu, driver, cuda, date,
/// normgate_commit, rounds, reps, points: [{op, H, w, form, T, aa_variant,
/// aa_floor, [aa_rounds_us: [us...] (one per round),] median_us: {variant:
/// us}, rounds_us: {variant: [us...]}}]}.
std::string timings_to_json_text(const Timings& t);
/// Parse timings JSON; throws RouteTableError naming `path` and the bad
/// field: wrong format, a non-positive or non-finite median or round time,
/// a variant with a median but no rounds (or rounds but no median), a
/// second point of the same shape.
Timings parse_timings(std::string_view text, const std::string& path);
Timings load_timings(const std::string& path);

/// A (variant, group, T point) the gate rejected or that must not be used.
struct Exclusion {
  std::string group;    ///< DeriveGroup::key()
  std::string variant;
  int64_t t_lo = 0, t_hi = 0;  ///< excluded over these T (inclusive)
};

/// One derived window.
struct DerivedWindow {
  DeriveGroup group;
  int64_t t_lo = 0, t_hi = 0;
  const Variant* variant = nullptr;      ///< the winner
  std::vector<int64_t> points;           ///< timed T inside the window
  /// Per timed point in the window, the variant winning there and why
  /// ("fastest", "within A/A floor of X, more accurate").
  std::vector<std::string> reasons;
  bool no_candidate = false;             ///< every candidate excluded somewhere in the window
};

/// The T points timed for g's shape (op, H, w, form), ascending: the grid and
/// any crossover points in `timings`.
std::vector<int64_t> timed_points(const DeriveGroup& g, const Timings& timings);

/// The winner at one point: the first candidate (spec order) not excluded at
/// T that is measurably slower (measurably_slower) than no other
/// non-excluded candidate. Without aa_rounds_us this is the older rule, a
/// median within aa_floor of the fastest. nullptr when no candidate is left or the point has no timing of
/// any remaining candidate. `reason` (may be null) receives why.
const Variant* winner_at(const DeriveSpec& spec, const DeriveGroup& g, const BenchPoint& p,
                         const std::vector<Exclusion>& excl, std::string* reason);

/// Windows of one group: runs of equal winners over the timed points, split
/// at the last point the earlier winner holds; the first window starts at 1
/// and the last ends at spec.t_grid.back(). Throws std::invalid_argument
/// naming the group and T when a grid point has no timing, or no timing of
/// one of the group's candidates.
std::vector<DerivedWindow> derive_group(const DeriveSpec& spec, const DeriveGroup& g, const Timings& timings,
                                        const std::vector<Exclusion>& excl);

/// Crossover intervals still worth timing: for each group, each pair of
/// neighbouring timed points (a, b) with different winners and b - a > 1,
/// the point to time next (the geometric mean of a and b, rounded, strictly
/// between them). Shapes, de-duplicated, ascending. Groups whose grid is
/// not fully timed are skipped.
std::vector<BenchKey> crossover_points(const DeriveSpec& spec, const Timings& timings,
                                       const std::vector<Exclusion>& excl);

/// Route-table TOML for windows (routing.h format): a header comment
/// (`header`, each line prefixed "# "), arch, description, fallback, then one
/// route per window in the order given.
std::string route_table_text(const DeriveSpec& spec, const std::vector<DerivedWindow>& windows,
                             const std::string& header);

}  // namespace normgate::kernels
