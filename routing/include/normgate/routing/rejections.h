// normgate/routing/rejections.h: the gate's remembered rejections.
//
// `normgate derive --gate winners` records every window the gate rejects
// (a case over budget: err/tol > 1) in the rejections file beside the output
// table, "dir/stem.rejections.json" for "dir/stem.toml", so a later derive
// does not gate that candidate on that window again while the variant's
// source is unchanged. A record holds the proof: the failing case id, its
// err/tol and output; derive excludes the variant from the recorded T range
// (Exclusion, derive.h) when the variant's source_sha256 in this build is
// the recorded one and the record's backend is the gate's (a GPU rejection
// counts for GPU derives only, a CPU-model one for CPU-model derives only).
//
// A sibling file, not a key of the approvals file: the approvals loader
// refuses unknown top-level keys (older binaries, the C ABI and the Python
// package read approvals), approvals ship with the package and feed the
// dispatcher while rejections are derive's bookkeeping, and a bad approval
// record is kept and counts for nothing while a bad rejection record stops
// derive (it would silently re-route a window).
//
// Format "normgate-rejections/1":
//
//   { "format": "normgate-rejections/1", "rejections": [ RECORD, ... ] }
//
//   RECORD: {
//     "window": {op, mode (bwd only), H, w, form, T: [lo, hi]}
//                    the EXCLUDED range: derive routes the variant nowhere in
//                    it (the timed points around the failing case's T)
//     "gated_T": [lo, hi]   the window the gate ran; contains window.T
//     "variant", "source_sha256" (64 lower-case hex: the variant's hash when
//     the gate ran, registry.h), "backend" ("gpu" | "cpu-model"),
//     "gpu" (device name, never "cpu-model", for gpu records; "cpu-model" for
//     cpu-model records),
//     "worst_case" (a case id whose H, w, form are the window's and whose T
//     is inside gated_T), "worst_err_tol" (a number > 1, or "inf"),
//     "worst_output" ("y" | "rstd" | "dx" | "dw"; fwd only y, rstd),
//     "date" (YYYY-MM-DDTHH:MM:SSZ), "normgate_commit", "normgate_version"
//     (non-empty), "record_sha256",
//     "rechecked" (optional): {"backend": "gpu" | "cpu-model",
//     "from_source_sha256", "from_record_sha256" (64 lower-case hex each)}
//                    present when `normgate approvals FILE --recheck` wrote
//                    the record: it ran the failing case of an earlier record
//                    (that seal, that source) again with this source, on that
//                    backend, and it was over budget again (worst_err_tol,
//                    worst_output are the new run's; date, normgate_commit
//                    and version the recheck's; window, gated_T, backend, gpu
//                    and worst_case the earlier record's; gpu the device it
//                    ran on again). The backend is the record's own: a
//                    variant's source hash covers its CUDA sources, not its
//                    CPU model, so only the GPU re-proves a GPU record
//                    (docs/perf/routes.md D22). }
//
// record_sha256 is the approvals' seal (routing.h, "Validation"): SHA-256 of
// the record's JSON object without record_sha256, dumped compactly (sorted
// keys, no whitespace), over the record as read. Unlike approvals, a record
// that fails any check (a field, an unknown field, the seal) makes the whole
// file an error: load_rejections throws naming the file and the record.
//
// Writers hold ApprovalsLock (routing.h) of the table's approvals file, so
// rejections and approvals of one table have one lock.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "normgate/core/types.h"
#include "normgate/kernels/registry.h"

namespace normgate::kernels {

struct Approval;   // normgate/routing/routing.h
struct Approvals;  // normgate/routing/routing.h
struct Route;     // normgate/routing/routing.h

/// One rejection record (JSON names in the file comment).
struct Rejection {
  Op op = Op::bwd;
  Mode mode = Mode::det;       ///< fwd: Mode::det (absent in JSON)
  int64_t H = 0;
  WDtype w = WDtype::bf16;
  Form form = Form::plain;
  int64_t t_lo = 0, t_hi = 0;  ///< excluded T range, rows, inclusive
  int64_t gated_lo = 0, gated_hi = 0;  ///< the gated window's T range, rows, inclusive
  std::string variant;         ///< registry name
  std::string source_sha256;   ///< the variant's source hash when the gate ran
  std::string backend;         ///< "gpu" or "cpu-model"
  std::string gpu;             ///< device name, "cpu-model" for cpu-model records
  std::string worst_case;      ///< the case over budget (case id)
  double worst_err_tol = 0;    ///< its err/tol (> 1; +inf allowed)
  std::string worst_output;    ///< "y", "rstd", "dx" or "dw"
  std::string date;            ///< UTC, ISO 8601
  std::string normgate_commit, normgate_version;
  std::string record_sha256;   ///< set by parse_rejections and rejections_to_json_text
  size_t index = 0;            ///< 0-based index in the file as read
  /// A record re-proved after a source change (file comment, "rechecked").
  struct Recheck {
    std::string backend;             ///< where the case ran again: "gpu" or "cpu-model"
    std::string from_source_sha256;  ///< the earlier record's source hash
    std::string from_record_sha256;  ///< the earlier record's seal
  };
  std::optional<Recheck> rechecked;

  /// DeriveGroup::key() of the window: "bwd det H=64 w=bf16 form=plain".
  std::string group() const;
  /// group() + " T=lo..hi" (the excluded range).
  std::string window() const;
  /// Same window, variant, source hash and backend (what makes a duplicate).
  bool same_claim(const Rejection& o) const;
  /// Whether this failure refutes approval record x: the same variant,
  /// source hash and backend, the same op, H, w and form, the same mode (or
  /// either, for a deterministic backward variant, whose bits do not depend
  /// on it), and T ranges that meet. `approvals --merge-into` refuses such a
  /// record and `normgate routes` does not count it (routes.md D28).
  bool refutes(const Approval& x) const;
  /// The same for the record a gate of backend `backend_` would write for
  /// route r (its window, its variant's source hash in this build); false
  /// when r names no variant.
  bool refutes(const Route& r, std::string_view backend_) const;
};

/// The rejections file of one table.
struct Rejections {
  std::string path;
  std::vector<Rejection> records;  ///< file order
};

/// "dir/stem.rejections.json" for "dir/stem.toml" and for the per-GPU
/// "dir/stem@SLUG.toml" (routing.h, "Per-GPU tables"; any other name: name
/// + ".rejections.json").
std::string rejections_path_for(const std::string& table_path);

/// Why `r` is invalid by its fields (file comment), "" when valid. Never throws.
std::string validate_rejection(const Rejection& r);

/// SHA-256 (lower-case hex) of r's canonical bytes (file comment).
std::string rejection_record_sha256(const Rejection& r);

/// Parse `text` (`path` names it in messages). Throws RouteTableError
/// (routing.h) "PATH: record N: why" for the first bad record (a field, an
/// unknown field, a string holding a control character, named escaped,
/// "record_sha256 mismatch ..."), and "PATH: why" when the
/// text is not JSON or not format "normgate-rejections/1".
Rejections parse_rejections(std::string_view text, const std::string& path);

/// Read `path` (parse_rejections); a missing file is an empty set. Throws
/// RouteTableError naming the path when it cannot be read or is invalid.
Rejections load_rejections(const std::string& path);

/// Serialize (format above, records in order, each sealed, 2-space indent,
/// trailing newline). Throws std::invalid_argument naming the record when a
/// record fails validate_rejection (a writer never seals a bad record).
std::string rejections_to_json_text(const Rejections& r);

/// One record an approvals file holds that a remembered failure refutes.
struct RefutedRecord {
  size_t index = 0;       ///< its position in the approvals file (file order)
  size_t by = 0;          ///< the refuting record's position in the rejections file
  std::string reason;     ///< "the gate failed this variant's source there (WINDOW remembered in PATH: case C, OUT err/tol E, DATE)"
};

/// Which valid records of `a` a record of `rej` refutes (Rejection::refutes
/// (Approval); the first such rejection in file order), in `a`'s file
/// order. What `normgate routes` leaves out and the dispatcher counts for
/// nothing (routes.md D28). Never throws (std::bad_alloc aside).
std::vector<RefutedRecord> refuted_records(const Approvals& a, const Rejections& rej);

/// Moves the records refuted_records(a, rej) names out of a.records (the
/// others keep their order) and returns each with its reason, in file
/// order: what `normgate routes` and Dispatcher::from_files leave out.
std::vector<std::pair<Approval, std::string>> take_refuted(Approvals& a, const Rejections& rej);

/// The first record of `rej` (file order) that refutes route r on the gpu
/// backend, or also on cpu-model when `cpu_model_too` (Rejection::refutes
/// (Route, backend): r's variant in this build's source failed inside r's
/// window, so no gate of that source approves it); nullptr when none.
const Rejection* failure_inside(const Rejections& rej, const Route& r, bool cpu_model_too);

/// Under ApprovalsLock(approvals_path): re-read `path`, append each record of
/// `add` that no record there already claims (Rejection::same_claim), write
/// atomically (temporary file, fsync, rename) when anything was added.
/// Returns the number added. Throws RouteTableError when the file on disk is
/// invalid, std::invalid_argument for a bad record of `add` (nothing
/// written), std::runtime_error naming the path when writing fails.
size_t record_rejections(const std::string& path, const std::string& approvals_path,
                         const std::vector<Rejection>& add);

}  // namespace normgate::kernels
