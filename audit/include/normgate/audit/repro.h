// normgate/audit/repro.h: re-run one case for one implementation and
// explain its verdict element by element (`normgate repro`).
//
// What a kernel engineer needs after a gate named a worst case: the verdict and
// max err/tol per output (check.h), the k worst elements of every output with
// got, reference, the oracle's bound, err, tol and err/tol, and for the worst
// dw columns their conditioning sum_r|dy*xhat| / |sum_r dy*xhat| and the rows
// that contribute most, plus a command that reproduces it again.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "normgate/oracle/reference.h"
#include "normgate/validators/budget.h"
#include "normgate/audit/case_file.h"
#include "normgate/harness/pipeline.h"

namespace normgate::validators {

/// One compared element. Units are the output's own (BF16/FP32 values widened
/// exactly to double).
struct Element {
  int64_t index = -1;  ///< flat index: r*H + j (y, dx), r (rstd), j (dw)
  double got = 0;      ///< implementation's value
  double ref = 0;      ///< oracle (FP64 with MPFR escalation where needed)
  double bound = 0;    ///< proven |ref - exact| bound (oracle/reference.h)
  double err = 0;      ///< |got - ref| (inf under the non-finite rules)
  double tol = 0;      ///< atol + rtol |ref| (budget.h)
  double ratio = 0;    ///< err / tol (budget.h ratio())
  double forced = 0;   ///< err/tol of the ideal kernel at this element (the interface's share)
};

/// The k elements with the largest err/tol (ties: smaller index first), in
/// that order; fewer when the tensor is smaller. Same arithmetic as
/// validate_case, so worst.front() is the validator's worst element.
/// y, dx: [rows*cols]; rstd: [rows]; dw: [cols]. `ref` in RstdMode::fp64,
/// `ideal` in RstdMode::fp32_rounded. Throws std::invalid_argument for k < 1,
/// for Output::h_new, or when got's sizes do not match p.
std::vector<Element> worst_elements(const oracle::Problem& p, const Outputs& got, const oracle::Reference& ref,
                                    const oracle::Reference& ideal, Output out, int k, int threads = 0);

/// A dw column explained: conditioning and the rows that contribute most.
struct DwColumn {
  int64_t col = -1;
  double sum = 0;          ///< reference dw (the column sum of dy*xhat)
  double sum_abs = 0;      ///< sum_r |dy*xhat| (FP64, relative error <= R u)
  double condition = 0;    ///< sum_abs / |sum| (inf when sum == 0 and sum_abs > 0; 1 for 0/0)
  bool escalated = false;  ///< the reference dw came from MPFR
  struct Row {
    int64_t row = -1;
    double term = 0;       ///< dy[r,j] * x[r,j] * rstd_r in FP64 (rstd: the FP64 reference)
  };
  std::vector<Row> top_rows;  ///< largest |term| first (ties: smaller row)
};

/// Explain column j: dw_column(p, ref, j, n) with the n rows of largest |term|.
/// Throws std::invalid_argument for j outside [0, cols) or n < 0.
DwColumn dw_column(const oracle::Problem& p, const oracle::Reference& ref, int64_t j, int n);

/// One output of a replay compared with the outputs a case file recorded
/// (ReproOptions::recorded): elements whose bits differ, and the largest
/// |this run - recorded| over them (as doubles; +inf where either is NaN or
/// Inf and the bits differ; 0 when none differ or only the sign of a zero
/// does).
struct RecordedDiff {
  std::string output;    ///< "y", "rstd", "dx", "dw" or "h_new"
  int64_t elements = 0;  ///< elements compared
  int64_t differ = 0;    ///< elements whose bits differ
  double max_abs = 0.0;  ///< max |this run - recorded| over those
  /// A difference here is expected: dw of a non-deterministic variant
  /// (registry Mode::nondet; its atomics' order varies run to run).
  bool may_differ = false;
};

/// Everything `normgate repro` prints.
struct ReproReport {
  CheckReport check;                       ///< the case, one implementation
  std::vector<std::vector<Element>> worst; ///< per output in CheckReport order (y, rstd, dx, dw)
  std::vector<DwColumn> dw_columns;        ///< the worst dw columns (at most 3)
  std::string command;                     ///< one line that reproduces this report
  std::optional<SavedCase> saved;          ///< the case as a case file holds it (ReproOptions::keep_case)
  /// This run's outputs against the recorded ones, output by output (empty
  /// when nothing was recorded or the recorded implementation differs; then
  /// recorded_note says why).
  std::vector<RecordedDiff> vs_recorded;
  std::string recorded_note;               ///< e.g. "recorded by bwd_det_chunked on gpu"
  /// Some output that must replay bit for bit (every one but a
  /// may_differ one) differs from the recording (`normgate repro` exits 4).
  bool recorded_mismatch() const {
    for (const RecordedDiff& d : vs_recorded)
      if (d.differ > 0 && !d.may_differ) return true;
    return false;
  }
};

struct ReproOptions {
  int k = 10;                               ///< worst elements per output (>= 1)
  bool keep_case = false;                   ///< fill ReproReport::saved (inputs, outputs, references, maps)
  int64_t tile = 256;                       ///< tile of the pooled maps (keep_case)
  const seeds::HostInputs* inputs = nullptr;  ///< replay these inputs (a saved case) instead of generating
  std::string replay_file;                  ///< where `inputs` came from (for the reproduce command)
  std::string normgate_version, normgate_commit;  ///< provenance (keep_case)
  /// Outputs a case file recorded for these inputs (a replay), by
  /// recorded_impl on recorded_backend: y, dx (and h_new, form res only) BF16
  /// bits [rows, H], rstd FP32 [rows], dw FP32 [H], rows = T x heads. When
  /// recorded_impl is the implementation run, every output is compared bit
  /// for bit (ReproReport::vs_recorded; a GPU recording replayed on the CPU
  /// models must be identical, except a non-deterministic variant's dw).
  const Outputs* recorded = nullptr;
  std::string recorded_impl, recorded_backend;
};

/// Run req (exactly one implementation, a variant or "fp32-baseline") and
/// collect the k worst elements per output and the worst dw columns (top 5
/// rows each). Throws std::invalid_argument as run_check, for k < 1, or when
/// req.impls does not hold exactly one implementation; std::runtime_error
/// when ReproOptions::recorded holds an output of a size other than this
/// run's (a case file inconsistent with its case id; h_new is compared when
/// either side has one).
ReproReport repro(const CheckRequest& req, const ReproOptions& opt);
inline ReproReport repro(const CheckRequest& req, int k = 10) {
  ReproOptions o;
  o.k = k;
  return repro(req, o);
}

/// Human-readable repro report (check table, worst elements, dw columns, the
/// reproduce command).
std::string format_repro(const ReproReport& r);

}  // namespace normgate::validators
