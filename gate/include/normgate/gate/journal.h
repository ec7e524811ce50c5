// normgate/gate/journal.h: the write-ahead journal of a gate campaign.
//
// A journal is a text file of JSON lines:
//   line 1   {"normgate_journal": 1, "campaign": {...}}   what the campaign is
//            (table hash, seeds, options, backend, variant hashes: see gate.cpp)
//   line 2+  one finished case each: its id and, per implementation, the
//            numbers the gate reports (CaseRecord), or the error it threw.
// Every record is appended as one line (write(), looping over partial
// writes) and fsync()ed before the next case starts, so after a crash, kill -9 or power loss the file holds every
// finished case and at most one torn last line (no newline), which opening
// the journal drops (and truncates away). Resuming with a different campaign
// header is refused, naming the fields that differ.
//
// Numbers are stored so that they read back bit for bit (shortest round-trip
// decimal; non-finite values as the strings "inf", "-inf", "nan"): a report
// built from journalled records equals the report of an uninterrupted run.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "normgate/harness/pipeline.h"

namespace normgate::validators {

/// The gate's summary of one output of one implementation on one case.
struct OutputRecord {
  double ratio = 0;     ///< max err/tol over the tensor's elements (0 for an empty tensor)
  int64_t index = -1;   ///< flat index of that element (-1: empty tensor)
  int64_t over = 0;     ///< elements with err/tol > 1
  double forced = 0;    ///< the part of the worst ratio the interface forces (ideal kernel)
  /// RatioStats::pass() of the tensor: no element over budget (and, where the
  /// validators certify comparisons against the oracle's bound, every
  /// comparison certified).
  bool pass = true;
  bool operator==(const OutputRecord&) const = default;
};

/// The gate's summary of one implementation on one case.
struct ImplRecord {
  std::string impl;                   ///< "bwd_det_chunked", ...
  std::string ran_on;                 ///< ImplResult::ran_on
  std::array<OutputRecord, 4> out{};  ///< y, rstd, dx, dw (Output order)
  double dw_vs_fp32_worst = 0;        ///< CaseResult::dw_vs_fp32_worst
  double dw_vs_fp32_median = 0;       ///< CaseResult::dw_vs_fp32_median
  bool operator==(const ImplRecord&) const = default;
};

/// One finished case: results of the implementations that ran, or the error.
struct CaseRecord {
  std::string case_id;             ///< canonical case id (seeds::to_string)
  std::vector<std::string> impls;  ///< implementations requested, registry order
  std::vector<ImplRecord> results; ///< one per impl, same order; empty when error is set
  std::string error;               ///< non-empty: run_check threw this (GPU fault, OOM, ...)
  double seconds = 0;              ///< wall time of the case (not part of reports)
};

/// Summarize a check report (every impl of rep) as a record. An output an
/// implementation did not produce (left out of its CaseResult) is recorded as
/// ratio NaN, index -1, pass false.
CaseRecord make_case_record(const CheckReport& rep, double seconds);

/// JSON object of a record (one journal line without the newline).
nlohmann::json to_json(const CaseRecord& r);

/// Parse a record. Throws std::invalid_argument naming the missing or
/// malformed field.
CaseRecord case_record_from_json(const nlohmann::json& j);

/// An open journal (or an in-memory one when no path is given).
class Journal {
 public:
  /// In-memory journal: append() keeps nothing on disk.
  Journal() = default;
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;
  Journal(Journal&& o) noexcept;
  Journal& operator=(Journal&& o) noexcept;
  ~Journal();

  /// Open `path` for campaign `campaign` (a JSON object). A missing or empty
  /// file is created with the header line (fsynced, directory too). An
  /// existing file must start with a header whose campaign equals
  /// `campaign`; its records are read into resumed(), a torn last line is
  /// dropped and the file truncated to the last complete record.
  /// The file stays locked (flock) while the journal is open. Throws
  /// std::invalid_argument when another process holds the lock, when the
  /// header differs (naming the differing keys and both values), a complete line is not a valid record
  /// (naming the line number), or the file is not a journal; std::runtime_error
  /// when it cannot be opened, read or written.
  static Journal open(const std::string& path, const nlohmann::json& campaign);

  /// Records found in the file when it was opened, in file order.
  const std::vector<CaseRecord>& resumed() const { return resumed_; }
  /// Bytes of a torn last line dropped when the file was opened.
  int64_t dropped_bytes() const { return dropped_; }
  /// Path of the file ("" for an in-memory journal).
  const std::string& path() const { return path_; }

  /// Append one record: its line and newline with write() (looping over
  /// partial writes), then fsync(), before returning. Throws std::runtime_error naming the path
  /// when writing or syncing fails.
  void append(const CaseRecord& r);

 private:
  std::string path_;
  int fd_ = -1;
  std::vector<CaseRecord> resumed_;
  int64_t dropped_ = 0;
};

}  // namespace normgate::validators
