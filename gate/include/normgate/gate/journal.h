// normgate/gate/journal.h: the write-ahead journal of a gate campaign.
//
// A journal is a text file of JSON lines (format 3, docs/schemas.md):
//   line 1   {"campaign":{...},"normgate_journal":3,"sha256":"..."}   what the
//            campaign is (table hash, seeds, options, backend, variant
//            hashes: see run.cpp)
//   line 2+  one finished case each: its id and, per implementation, the
//            numbers the gate reports (CaseRecord), or the error it threw,
//            and "prev": the seal of the line before it.
// Every line is content-addressed, as git trusts its objects: it ends in a
// member "sha256" holding the SHA-256 (lowercase hex) of the line's bytes
// without that member (journal_line). Opening a journal checks every
// complete line's digest, that it is JSON, that each record's "prev" is the
// seal of the line before it (the chain from the header: a line moved,
// repeated, left out or copied in from another journal breaks it), and that
// it is a valid header or record field by field (case_record_from_json,
// then the caller's RecordCheck: the campaign's plan); any failure is an
// error naming the file and the line, so a flipped bit anywhere in a line is
// an error, never a changed number. Two records of the same (case,
// implementation) must agree (below). Journals of formats 1 (no digests)
// and 2 (no chain) are refused: they cannot be checked as a whole.
//
// A plain SHA-256 shows a change made without normgate (a hand edit, a
// flipped bit, a truncation), not a forgery: anyone can recompute it. With a
// journal key (NORMGATE_JOURNAL_KEY_FILE, or set_journal_key) every line is
// sealed with HMAC-SHA256 under the key instead (member "hmac_sha256"), and
// reading a journal then accepts only lines sealed with that key: shard
// journals that travel between machines cannot be rewritten, nor a plain
// line slipped in, by anyone without the key (docs/schemas.md, "Journal
// keys").
//
// Every record is appended as one line (write(), looping over partial
// writes) and fsync()ed before the next case starts, so after a crash, kill
// -9 or power loss the file holds every finished case and at most one torn
// last line (no newline), which opening the journal drops (and truncates
// away); an unterminated last line whose digest and fields are complete (a
// write cut just before its newline) is kept and its newline written.
// Resuming with a different campaign header is refused, naming the fields
// that differ.
//
// Numbers are stored so that they read back bit for bit (shortest round-trip
// decimal; non-finite values as the strings "inf", "-inf", "nan"): a report
// built from journalled records equals the report of an uninterrupted run.
#pragma once

#include <array>
#include <optional>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
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
  /// Form res: h_new, bitwise exact against BF16(x + u) (not produced: ratio
  /// NaN, index -1, over 0, forced NaN, pass false). Empty for the other
  /// forms, and in records of journals written before it was recorded
  /// (such a case's h_new was not checked: its res window cannot pass).
  std::optional<OutputRecord> h_new;
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
  /// The check ran forward outputs only (CheckRequest::forward_only: no
  /// window of the gate read the case's backward): each result holds y and
  /// rstd; its dx and dw are "not produced" (ratio NaN, index -1, over 0,
  /// forced NaN, pass false) and dw_vs_fp32 NaN in memory, and absent from
  /// the journal line, which says "outputs":"fwd". Never set with `error`
  /// (an error is the case's, whatever was checked).
  bool forward_only = false;
};

/// Summarize a check report (every impl of rep) as a record. An output an
/// implementation did not produce (left out of its CaseResult) is recorded as
/// ratio NaN, index -1, over 0, forced NaN, pass false. A report of a
/// forward-only check (rep.request.forward_only) gives a forward-only record.
CaseRecord make_case_record(const CheckReport& rep, double seconds);

/// The journal format this build writes and reads (the header's
/// "normgate_journal"; 1 had no digests, 2 no chain of "prev" seals: both
/// are refused).
inline constexpr int kJournalFormat = 3;

/// What a record line's "prev" holds: the 64 lowercase hex digits of the
/// seal ("sha256" or "hmac_sha256") that ends the line before it.
inline constexpr const char* kJournalChainMember = "prev";

/// A normgate journal that cannot be used as it is: of another format
/// (journal_campaign, Journal::open/read), or sealed otherwise than the key
/// setting says (JournalKeyError). A std::invalid_argument, so a usage
/// error (exit 2) wherever it is not caught by type; callers that tell "not
/// a journal" (a misplaced argument) from "a journal, refused" catch it
/// first.
class JournalError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// A journal read under another key setting than its lines' seals say (a
/// keyed line without a key, a plain line with one, a keyed line whose
/// HMAC fails under this key), or a journal key file that is refused.
class JournalKeyError : public JournalError {
 public:
  using JournalError::JournalError;
};

/// JSON object of a record (a journal line's content, without its digest).
nlohmann::json to_json(const CaseRecord& r);

/// Parse a record (the object of a journal line, its "sha256" member removed,
/// as parse_journal_line returns it) and check it field by field, without
/// knowing the campaign:
///   - members exactly case, impls, results, seconds and (for a case that
///     threw) error, or (a forward-only record, CaseRecord::forward_only)
///     outputs = "fwd"; each result exactly impl, ran_on, y, rstd, dx, dw,
///     dw_vs_fp32, or impl, ran_on, y, rstd in a forward-only record (records
///     without "outputs", every journal written before it, are full);
///   - case: a valid case id in canonical spelling (seeds::parse_case, then
///     seeds::to_string gives it back unchanged);
///   - impls: non-empty, distinct, non-empty names; results: one per impl, in
///     the same order, impl equal; none with error, which is then non-empty;
///   - ran_on non-empty; seconds finite and >= 0;
///   - per output [ratio, index, over, forced, pass], numel the output's
///     element count for the case's shape (y, dx: rows*H; rstd: rows; dw: H;
///     rows = T * heads): either "not produced" (ratio NaN, index -1, over
///     0, forced NaN, pass false), or ratio and forced >= 0 (inf allowed, NaN
///     not), index -1 exactly when numel is 0 (then ratio 0, over 0, pass) and
///     else in [0, numel), over in [0, numel], over > 0 exactly when ratio > 1,
///     and pass only with over 0;
///   - dw_vs_fp32 [worst, median]: each >= 0 or NaN.
/// Throws std::invalid_argument naming the missing or malformed field.
CaseRecord case_record_from_json(const nlohmann::json& j);

/// Whether two records' results for one (case, implementation) agree: the
/// JSON of each (a member of to_json(CaseRecord)'s "results", or
/// {"error": text} for a record with an error) equal, or one of them from a
/// forward-only record (no "dx") and both results with equal impl, ran_on,
/// y and rstd (a full run of the case later gives the forward's same
/// numbers and adds dx, dw). An error never agrees with a result.
bool results_agree(const nlohmann::json& a, const nlohmann::json& b);

/// The part of record `r` that results_agree and resolve_duplicate compare
/// for its implementation i (< r.impls.size()): to_json(r)["results"][i],
/// or {"error": r.error} for a record with an error.
nlohmann::json record_result(const CaseRecord& r, size_t i);

/// What a reader does with a second record of one (case, implementation):
/// `kept` is the one it holds, `next` the one it reads after it (each as in
/// results_agree). Equal records: kept stays. An error is a failed
/// attempt, not a result, so
///   - kept an error: next replaces it (a result, or another error of a
///     later attempt: `gate --retry-errors` runs the case again and appends);
///   - next an error, kept a result: kept stays (journals merged from two
///     machines, one of which failed the case);
///   - two results: kept stays when they agree, except that a full result
///     replaces a forward-only one; results that disagree contradict.
/// Except a determinism violation of `impl` itself (nondeterministic_impl):
/// a finding, not a failed attempt, so it replaces any record of the pair
/// it follows (a forward-only or full result too: the later run found two
/// runs differing) and nothing after it replaces it. An error record that
/// names several implementations (journals before the gate journalled a
/// failing external's error for it alone and ran the case again for the
/// others) holds only the one the violation names to it; the others' copy
/// is an ordinary error.
/// Used by Journal::open and read, `gate --merge` and the gate's record
/// store alike, and by tools/journal_merge.py.
enum class Duplicate { keep, replace, contradict };
Duplicate resolve_duplicate(const nlohmann::json& kept, const nlohmann::json& next, const std::string& impl = "");

/// The implementation a case's error names as declared deterministic with
/// two runs that gave different bits (harness/external.h
/// kNondeterministicError), or as having broken the interface
/// (kContractError): a finding about it either way; "" for any other error
/// (an untagged one never is: a plugin's path, ORIGIN, may hold any
/// wording). Read by harness/external.h parse_external_error, as every
/// reader of that prefix.
std::string nondeterministic_impl(const std::string& error);

/// The environment variable naming the journal key file.
inline constexpr const char* kJournalKeyEnv = "NORMGATE_JOURNAL_KEY_FILE";
/// The path NORMGATE_JOURNAL_KEY_FILE names, "" when it is unset or empty:
/// an input of every run that sets it (no output may be written over it).
std::string journal_key_file();
/// The shortest journal key accepted, in bytes (256 bits of hex text is 64).
inline constexpr size_t kJournalKeyMinBytes = 32;

/// Read a journal key file: its bytes without trailing newlines (so
/// `openssl rand -hex 32 > FILE` works). Throws std::invalid_argument naming
/// the file when it is missing, not a regular file, readable or writable by
/// every user (o+r or o+w: chmod o-rw), over 4096 bytes, or under
/// kJournalKeyMinBytes.
std::string load_journal_key(const std::string& path);

/// Set this process's journal key (empty: none, plain SHA-256 lines), in
/// place of NORMGATE_JOURNAL_KEY_FILE. Throws std::invalid_argument for a
/// key of 1 to kJournalKeyMinBytes - 1 bytes.
void set_journal_key(std::string key);

/// This process's journal key: set_journal_key's, else on first use the
/// file NORMGATE_JOURNAL_KEY_FILE names (load_journal_key; unset or empty:
/// no key). Throws JournalKeyError naming the variable when its file is
/// refused. Thread-safe.
std::string journal_key();

/// The line the journal writes for JSON object `o` (no newline): o.dump()
/// (UTF-8, invalid UTF-8 replaced by U+FFFD) with the member
/// "sha256":"<SHA-256 of those bytes, lowercase hex>" appended before its
/// closing brace; with a journal key (journal_key()) the member
/// "hmac_sha256":"<HMAC-SHA256 of those bytes under the key>" instead.
/// Throws std::invalid_argument when o is not an object with at least one
/// member or the key file is refused; std::runtime_error when OpenSSL fails.
std::string journal_line(const nlohmann::json& o);

/// The inverse of journal_line: check that `line` (no newline) ends in the
/// digest member, that the digest equals the SHA-256 of the line without it
/// (with a journal key: that the member is "hmac_sha256" and equals the
/// HMAC-SHA256 under the key), and parse those bytes. Returns the object
/// without the member. Throws std::invalid_argument saying which check
/// failed (no digest member, a keyed line without a key, a plain line with
/// one, digest mismatch, not a JSON object); JournalKeyError (a
/// std::invalid_argument) when the line is sealed otherwise than the key
/// setting says, or the key file is refused. The "prev" member of a record
/// line is returned as it is: only Journal, which knows the line before,
/// checks it.
nlohmann::json parse_journal_line(std::string_view line);

/// The seal a journal line ends in (the 64 hex digits of its "sha256" or
/// "hmac_sha256" member), unchecked: what the next record's "prev" holds.
/// Throws std::invalid_argument when the line does not end in a seal member.
std::string journal_line_seal(std::string_view line);

/// A check of one resumed record against what the caller knows (run_gate:
/// the campaign's plan and implementations). Throws std::invalid_argument
/// saying what is wrong; Journal::open adds the file and line.
using RecordCheck = std::function<void(const CaseRecord&)>;

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
  /// file is created with the header line (fsynced, directory too); so is a
  /// file holding only a torn header of this campaign (a prefix of its header
  /// line, no newline). An existing file must start with a format-3 header
  /// whose campaign equals `campaign`; its records are read into resumed(): each
  /// complete line's digest is checked (parse_journal_line), then its "prev"
  /// against the seal of the line before it, then the record
  /// (case_record_from_json), then `check` when given. A torn last line
  /// (no newline) is dropped and the file truncated to the last complete
  /// line, unless it passes every check (a write cut just before its
  /// newline): then it is kept and its newline written. A last line that
  /// ends in its digest member but fails its digest is whole, so changed
  /// rather than torn: an error naming it (the file left as it is). Blank lines (only
  /// spaces, tabs, CRs) after the last newline-ended line are formatting (an
  /// editor's or `echo >>`'s trailing newline), not a torn line: ignored,
  /// not counted in dropped_bytes(), and truncated away so that appended
  /// records follow the last one. A blank line before a record is an error
  /// naming the line.
  ///
  /// Duplicates: normgate journals each (case, implementation) once, but
  /// journals merged from several machines (tools/journal_merge.py) or a
  /// case rerun elsewhere may hold it twice, a case first run forward
  /// only (a gate of forward windows) is run again in full when a backward
  /// window needs it, and `gate --retry-errors` runs a case whose record is
  /// an error again. Two records of the same (case, implementation) whose
  /// results agree (results_agree: every number, pass flag and ran_on, or
  /// the error text, identical; a forward-only result and a full one: the
  /// same ran_on, y and rstd) are accepted: the gate reads either with the
  /// same outcome, and only the wall time (seconds), which no report uses,
  /// may differ. An error and any other record are accepted too
  /// (resolve_duplicate: the later attempt, or the result, counts). Two
  /// results that disagree contradict, an error naming both lines: which
  /// one is right cannot be known from the file.
  ///
  /// The file stays locked (flock) while the journal is open. Throws
  /// std::invalid_argument, naming the file (and the line where one is at
  /// fault), when another process holds the lock, when the file is not a
  /// journal or is format 1 (no digests: start a new journal), when the
  /// header's campaign differs (naming the differing keys and both values),
  /// when a complete line is blank but not at the end, fails its digest, has
  /// a "prev" other than the seal of the line before it, is not JSON or not a
  /// valid record
  /// or `check` throws, or when two records contradict; std::runtime_error
  /// when it cannot be opened, read or written.
  static Journal open(const std::string& path, const nlohmann::json& campaign, const RecordCheck& check = {});

  /// Read `path` as open() does, every check included, without changing it:
  /// the file must exist (std::runtime_error naming the path otherwise) and
  /// hold at least a complete header line; it is opened read-only under a
  /// shared flock (std::invalid_argument naming the file while a gate holds
  /// it), a torn last line is dropped from resumed() (dropped_bytes) and
  /// blank lines ending it ignored, both left in the file, and append()
  /// throws std::logic_error. What `gate --merge`
  /// reads the shards' journals with (and `normgate approvals --journal`);
  /// its errors say what is wrong, not what to do: the caller says that
  /// (gate --merge: run that shard again).
  static Journal read(const std::string& path, const nlohmann::json& campaign, const RecordCheck& check = {});

  /// Records found in the file when it was opened, in file order.
  const std::vector<CaseRecord>& resumed() const { return resumed_; }
  /// Line number (1-based) of each record of resumed(), same order.
  const std::vector<int64_t>& resumed_lines() const { return lines_; }
  /// Bytes of a torn last line dropped when the file was opened.
  int64_t dropped_bytes() const { return dropped_; }
  /// Path of the file ("" for an in-memory journal).
  const std::string& path() const { return path_; }
  /// The seal of every complete line of the file, header first (index =
  /// line number - 1), as read and then appended: seals().back() is the
  /// chain's head, what the next record's "prev" holds, and seals().size()
  /// the file's line count. Empty for an in-memory journal. An approval
  /// records the head and the count (routing.h, Approval::journal_head), so
  /// that the journal it came from can be checked against it later, however
  /// many lines were appended since.
  const std::vector<std::string>& seals() const { return seals_; }

  /// Append one record: its line (journal_line of to_json(r) with "prev", the seal of the file's
  /// last line) and newline with write() (looping over partial writes), then fsync(), before
  /// returning. Throws std::runtime_error naming the path
  /// when writing or syncing fails; std::logic_error on a journal opened by read().
  void append(const CaseRecord& r);

 private:
  static Journal load(const std::string& path, const nlohmann::json& campaign, const RecordCheck& check,
                      bool read_only);
  std::string path_;
  int fd_ = -1;
  std::vector<CaseRecord> resumed_;
  std::vector<int64_t> lines_;
  int64_t dropped_ = 0;
  bool read_only_ = false;
  std::string last_seal_;  // the seal of the file's last line: the next record's "prev"
  std::vector<std::string> seals_;  // every line's seal (seals())
};

/// The campaign of the journal at `path`: line 1's "campaign" object, its
/// digest checked (nothing else is read). `gate --merge` learns each shard
/// journal's shard from it before reading the file against the campaign.
/// Throws JournalError naming the file for a journal of another format or
/// sealed otherwise than the key setting says (JournalKeyError);
/// std::invalid_argument naming it when line 1 is no journal header at all
/// (e.g. a table given where a journal belongs); std::runtime_error when the
/// file cannot be read.
nlohmann::json journal_campaign(const std::string& path);

}  // namespace normgate::validators
