// normgate/routing/policy.h: the approval policy of a route table: the
// minimum gate campaign an approval needs, and the target the project works
// towards.
//
// File: routes/<table stem>.policy.toml, next to the table and its approvals
// (policy_path_for). TOML:
//
//   description = "..."            # optional
//   [minimum]                      # required: what `gate --approve` demands
//   name = "..."                   # optional label, e.g. "issue 30 floor"
//   seeds = "3x16"                 # seed-set spelling (seed_set.h): its families
//                                  # and its seed count per family; the range
//                                  # itself does not matter ("seeds=200..215"
//                                  # is as strong as "3x16")
//   t_per_window = 8               # gate --t-per-window at least this
//   dense_points = 16              # dense grid points each side of the worst T,
//                                  # at least this (0: no dense grid required)
//   dense_step = 64                # dense grid spacing at most this (rows);
//                                  # required when dense_points > 0
//   dense_seeds = "worst"          # optional, "worst" (default) or "all":
//                                  # "all" demands --dense-seeds all
//   fresh_factor = 1               # gate --fresh-factor at least this (0: none)
//   backends = ["gpu"]             # gate backends whose approvals count:
//                                  # "gpu" and/or "cpu-model"
//   dw_not_worse_than_fp32 = false # optional (default false): on backward
//                                  # windows with FP32 weights, dw's worst error
//                                  # over the window's cases must not exceed FP32
//                                  # eager's on the same inputs (the gate's "dw vs
//                                  # FP32" worst <= 1; NaN or inf fail it)
//   [target]                       # optional: the standard `normgate routes`
//                                  # reports progress against; same keys
//
// Any other key, a missing required key, a value of the wrong type or out of
// range (t_per_window >= 2, dense_points >= 0, dense_step >= 1, fresh_factor
// >= 0, backends a non-empty list of known names) is an error naming
// FILE:LINE and the key (PolicyError).
//
// Without a policy file, `normgate gate --approve` refuses before any work
// (there is no standard to approve against: write one) and `normgate routes`
// says "no policy" and lists approvals without a policy check. The policy
// does not change which approvals the dispatcher accepts (routing.h): it
// governs what may be written, and `routes` shows whether each record meets it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "normgate/core/types.h"
#include "normgate/routing/routing.h"

namespace normgate::kernels {

/// Error in a policy file. what() starts "FILE:LINE: " and names the key.
class PolicyError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// The strength of a gate campaign: what it ran (an approval record, a gate
/// result) or was asked to run (gate options).
struct CampaignStrength {
  std::string seed_set;          ///< seed-set spelling (seed_set.h), e.g. "3x16"
  int t_per_window = 0;          ///< --t-per-window (target T points per window)
  int dense_points = 0;          ///< dense grid points each side of the worst T (0: none)
  int64_t dense_step = 0;        ///< dense grid spacing in rows
  bool dense_all_seeds = false;  ///< --dense-seeds all
  int fresh_factor = 0;          ///< fresh seeds = factor x per-family seed count (0: none)
  std::string backend;           ///< "gpu" or "cpu-model"
};

/// One section of a policy ([minimum] or [target]).
struct PolicyLevel {
  std::string section;           ///< "minimum" or "target"
  std::string name;              ///< optional `name`, "" when absent
  std::string path;              ///< policy file, for messages
  int line = 0;                  ///< 1-based line of the section header
  std::string seeds;             ///< `seeds` as written
  std::vector<std::string> families;  ///< its family names ("normal", "llm", "cancel", ...)
  uint64_t seeds_per_family = 0; ///< its seed count per family
  int t_per_window = 2;
  int dense_points = 0;
  int64_t dense_step = 0;        ///< maximum spacing (0 when dense_points == 0 and absent)
  bool dense_all_seeds = false;
  int fresh_factor = 0;
  std::vector<std::string> backends;
  bool dw_not_worse_than_fp32 = false;
  std::map<std::string, int> key_line;  ///< 1-based line of each key present

  /// "PATH:LINE" of `key` (of the section header when the key is absent).
  std::string where(const std::string& key) const;
  /// "the policy minimum" or "the policy target".
  std::string label() const;
  /// One sentence per requirement `c` does not meet, each naming the value,
  /// the requirement and where the policy says it, e.g. "seeds 3x1 below the
  /// policy minimum 3x16 (routes/sm90a.policy.toml:7)" or "no dense
  /// refinement (the policy minimum needs 16 points each side, step <= 64;
  /// ...)". Empty when `c` meets every campaign requirement. A seed set that
  /// does not parse is one shortfall naming it. Never throws.
  std::vector<std::string> shortfalls(const CampaignStrength& c) const;
  /// The window requirement (dw_not_worse_than_fp32) for one gated window:
  /// "" when it does not apply (forward window, BF16 weights, or the key is
  /// false) or holds (dw_vs_fp32_worst <= 1), else a sentence giving the value
  /// and where the policy says it. dw_vs_fp32_worst: the gate's WindowResult::
  /// dw_vs_fp32_worst (NaN: no FP32 baseline; fails the requirement). Never throws.
  std::string window_shortfall(Op op, WDtype w, double dw_vs_fp32_worst) const;
  /// shortfalls() and window_shortfall() of an approval record. A record
  /// without strength fields (written before approvals carried them) gives
  /// one shortfall: "campaign strength not recorded". Never throws.
  std::vector<std::string> record_shortfalls(const Approval& a) const;
  /// record_shortfalls() of every record an approval rests on
  /// (ApprovalStatus::parts when the window is approved as parts, else
  /// ApprovalStatus::record), each shortfall once, in the parts' order: a
  /// window meets the level only where every part does. Empty when there is
  /// no record. Never throws.
  std::vector<std::string> status_shortfalls(const ApprovalStatus& s) const;
  /// One line: "seeds 3x16, t-per-window 8, dense 16 x 64 (worst seed),
  /// fresh x1, backends gpu[, dw not worse than FP32 eager on FP32-weight
  /// windows]".
  std::string describe() const;
};

/// A loaded approval policy.
struct ApprovalPolicy {
  std::string path;                ///< as given to the loader
  std::string description;         ///< optional top-level `description`
  PolicyLevel minimum;             ///< [minimum]
  std::optional<PolicyLevel> target;  ///< [target], when present
};

/// Path of a table's policy file: "dir/stem.policy.toml" for
/// "dir/stem.toml" and for the per-GPU "dir/stem@SLUG.toml" (routing.h,
/// "Per-GPU tables"; any other name: name + ".policy.toml").
std::string policy_path_for(const std::string& table_path);
/// Path of the policy that governs an approvals file: "dir/stem.policy.toml"
/// for "dir/stem.approvals.json" (the table's policy; any other name: name +
/// ".policy.toml").
std::string policy_path_for_approvals(const std::string& approvals_path);

/// Parse policy TOML `text`; `path` names the file in messages. Throws
/// PolicyError ("PATH:LINE: what") for TOML syntax errors and every rule of
/// the file comment; the first problem found is reported.
ApprovalPolicy parse_policy(std::string_view text, const std::string& path);

/// Read and parse the policy at `path`; std::nullopt when no file is there.
/// Throws PolicyError naming the path when it is a directory or cannot be
/// read, and as parse_policy when it is invalid.
std::optional<ApprovalPolicy> load_policy(const std::string& path);

/// The `normgate gate` options that meet the policy minimum of `table_path`
/// (policy_path_for) for a window filter `windows`, for the refusal messages
/// of the dispatcher: "normgate gate TABLE --windows 'F' --seeds S
/// --t-per-window N --dense-points D --dense-step K --fresh-factor F
/// --approve (the policy minimum, POLICY)" (--dense-seeds all and --backend
/// cpu where the minimum needs them); without a policy file, a command
/// saying that --approve needs one first; a policy that does not load, the
/// command with "at the policy minimum of POLICY". Never throws (cold
/// path: it reads the policy file each call).
std::string approve_command_for(const std::string& table_path, const std::string& windows) noexcept;

/// The campaign strength an approval record carries (CampaignStrength fields
/// from the record's seed_set, t_per_window, dense_points, dense_step,
/// dense_seeds, fresh_factor and backend). Meaningful only when
/// a.has_strength. Never throws.
CampaignStrength strength_of(const Approval& a);

/// One line for humans: "seeds 3x16, T points 33 (t-per-window 8), dense 16
/// x 64 (worst seed), fresh x2 (normal:16..47), oracle auto, backend gpu[, dw
/// vs FP32 1]", or "seeds 3x16, T points 33, backend gpu; campaign strength
/// not recorded" for records without strength fields. Never throws.
std::string describe_strength(const Approval& a);

}  // namespace normgate::kernels
