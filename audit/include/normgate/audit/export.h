// normgate/audit/export.h: error maps of a report's worst cases, for
// audit (`normgate export REPORT -o maps.h5`; file layout: case_file.h and
// datasets/SCHEMA.md).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "normgate/audit/case_file.h"
#include "normgate/harness/pipeline.h"

namespace normgate::validators {

/// One (case, implementation) to export, and where it came from.
struct ExportItem {
  std::string case_id, impl, window, seed_set;
  /// Gate reports: the window's routed variant and its source hash as the
  /// report records them ("" when it records none; check reports).
  std::string variant, variant_sha256;
};

/// The schema version of a report that export_plan and report_windows read:
/// a gate report (gate.h kGateReportFormat) or a check report (pipeline.h
/// kCheckReportFormat; a grid: a JSON array of them, each checked). Returns
/// 1, or 0 for a report without "format" (written before normgate versioned
/// its reports; the fields are version 1's, read the same way). Throws
/// std::invalid_argument saying why (core/doc_format.h check_doc_format: a
/// format that is not a string "NAME/MAJOR", another kind of document such
/// as normgate-derivation/1, an unknown major version; in a grid, which
/// element) when the report is none of these. An array mixing versioned and
/// unversioned elements is refused too.
int report_format_version(const nlohmann::json& report);

/// What to export from a report (JSON as written by `normgate gate
/// --report-json` or `normgate check --json`):
/// - gate report: per window, the distinct worst cases of its outputs (and of
///   dw vs FP32), largest err/tol first, at most `keep` (all of them when
///   all == true: one per output at most, which is what `normgate export`
///   takes when --keep is not given), each with the window's variant
///   (forward windows: the first non-control backward variant that supports
///   the case);
/// - check report of one case (an object with "case"), or of a grid (an
///   array of them): per implementation, its cases ranked by their largest
///   max_ratio over the outputs, at most `keep` (all of them when all == true).
/// Throws std::invalid_argument naming the field when the JSON is neither, or
/// keep < 1.
std::vector<ExportItem> export_plan(const nlohmann::json& report, int keep = 3, bool all = false);

/// One window of a report and its worst case (`normgate repro --from-report`).
struct ReportWindow {
  size_t index = 0;        ///< 0-based position in the report
  std::string label;       ///< gate report: the window ("bwd det H=2048 w=bf16 form=plain T=1..128");
                           ///< check report: the implementation
  std::string route;       ///< gate report: the route's FILE:LINE ("" for check reports)
  std::string variant;     ///< gate report: the routed variant (fwd_* for forward windows); check: the implementation
  std::string worst_case;  ///< case with the largest err/tol over every output ("" when none is named)
  std::string output;      ///< the output of that maximum (y, rstd, dx, dw, h_new)
  double ratio = 0;        ///< that err/tol (non-finite, spelled "inf"/"nan" in reports: inf)
  /// Implementation that reproduces it: the window's variant (bwd), the first
  /// non-control backward variant that supports the case (fwd windows, as
  /// export_plan), or the check report's implementation. "" when no case.
  std::string impl;
};

/// The windows of a report, in order: a gate report's windows (worst case:
/// the largest max_err_tol over its outputs' worst cases, ties to the gate's
/// own "worst" case, else to the first of y, rstd, dx, dw); a check report of
/// one case or a grid: one window per implementation it names, first-seen
/// order (worst case: the largest max_ratio over every case and output,
/// ties to the first). Throws std::invalid_argument naming the field when
/// the JSON is neither report or a field is malformed. `only_output` (y,
/// rstd, dx, dw or h_new; "" for all): each window's worst case over that
/// output alone (ties to the gate's own "worst" only when it is of that
/// output); a window without it has worst_case "".
std::vector<ReportWindow> report_windows(const nlohmann::json& report, const std::string& only_output = "");

/// The window `key` selects: its label, its route FILE:LINE (gate reports),
/// or its 0-based index. Throws std::invalid_argument when the report names
/// no case at all, when `key` matches no window (the message lists the
/// windows, index and label), or when the selected window names no case.
/// `only_output` (y, rstd, dx, dw or h_new; "" for all): the worst case of
/// that output alone (report_windows); a window without a worst case of it
/// is std::invalid_argument naming the outputs it has.
ReportWindow select_report_window(const nlohmann::json& report, const std::string& key,
                                  const std::string& only_output = "");

struct ExportOptions {
  Backend backend = Backend::auto_;
  oracle::OracleMode oracle = oracle::OracleMode::auto_;
  int threads = 0;
  int64_t tile = 256;
  bool full = false;  ///< also the full [T, H] dx err/tol map
  std::string normgate_version, normgate_commit;
  /// Called before each case runs (ng_export's cancel flag: it throws
  /// validators::Cancelled, and nothing is written); empty: none.
  std::function<void()> before_case;
};

/// Provenance of a one-implementation report: case, implementation and its
/// source hash, backend (and the device when it ran on the GPU), oracle and
/// escalations, family, budgets, verdict, version, commit, date (now, UTC).
/// window and seed_set are left empty. Throws std::invalid_argument when the
/// report does not hold exactly one implementation.
Provenance provenance_of(const CheckReport& rep, const std::string& version, const std::string& commit);

/// Re-run every item (generator, implementation, oracle) and compute its
/// maps. Throws as run_check.
std::vector<MapsEntry> export_maps(const std::vector<ExportItem>& items, const ExportOptions& opt);

/// A report file read for export and repro: its bytes hashed once (SHA-256,
/// 64 lowercase hex, into *sha256 when given) and parsed as JSON, its format
/// checked (report_format_version). A report without "format" (version 0)
/// adds a note to *notes. Throws std::invalid_argument naming the path: not
/// a regular file, unreadable, not JSON (a Markdown report is named as
/// such), another kind of document.
nlohmann::json read_report_file(const std::string& path, std::string* sha256 = nullptr,
                                std::vector<std::string>* notes = nullptr);

/// `normgate export REPORT -o OUT` as one call (the CLI and ng_export):
/// what to export and how.
struct ExportRequest {
  std::string report;  ///< gate report (--report-json) or check report (--json)
  std::string out;     ///< maps file to write (normgate-maps/2, atomically)
  int keep = 0;        ///< 0: every output's worst case (gate report) or 3 (check report); else 1..1000
  bool all = false;    ///< every case the report names (excludes keep)
  ExportOptions opt;   ///< backend (resolved here), oracle, threads, tile, full, version, commit
};

/// What export_report did: the plan, the notes (the backend used, a
/// version-0 report), the entries written, the report's SHA-256.
struct ExportRun {
  std::vector<ExportItem> items;
  std::vector<std::string> notes;
  std::vector<MapsEntry> entries;
  std::string report_sha256;
};

/// Read the report, plan its pairs (export_plan), and check before any case
/// runs that each pair's implementation is known to this process (a built-in
/// variant, a loaded plugin's, an external registered in it: a Python
/// implementation through ng_export), its case parses, is supported and
/// fits in host memory (with full: every case's dx map too); then re-run
/// them (export_maps) and write `out` (write_maps_file, bound to the
/// report's SHA-256). `on_plan` runs once the checks pass, before the first
/// case (the CLI prints the plan there). Throws std::invalid_argument for
/// every input problem (nothing written), else as export_maps and
/// write_maps_file.
ExportRun export_report(const ExportRequest& req, const std::function<void(const ExportRun&)>& on_plan = {});

}  // namespace normgate::validators
