// normgate/routing/routing.h: route tables, approvals and the runtime
// dispatcher.
//
// A route table (routes/<arch>.toml, hand-written TOML) maps windows of calls
// to kernel variants. One route:
//
//   { op = "bwd", mode = "det", H = 2048, w = "bf16", form = "plain",
//     T = [1, 65536], variant = "bwd_det_chunked" }
//
//   op       "fwd" | "bwd"
//   mode     "det" | "nondet"        bwd only; a forward route serves both
//                                    modes (they share the forward), so fwd
//                                    routes must not have `mode`
//   H        normalized length, 1..16384
//   w        weight dtype "bf16" | "fp32"
//   form     "plain" | "res" | "heads24" | "heads4"
//   T        [lo, hi]: rows, both inclusive, 1 <= lo <= hi <= seeds::kMaxT
//            (2^31, the largest T a case id names: the gate runs every window)
//   variant  a registry name (registry.h)
//
// Top-level keys: `arch` (required, "sm90a": the only arch the registry
// builds), `description` (optional string), `route` (array of tables; inline
// tables in an array or [[route]] sections), `fallback` (optional table, see
// below). Any other key is an error.
//
// Fallback: what serves a call that no window holds (an H or form the table
// does not route, or T past its windows):
//
//   fallback = { fwd = "fwd_rowwise", bwd_det = "bwd_det_chunked",
//                bwd_nondet = "bwd_nondet_atomic" }
//
// Each key is optional (a missing one: such calls have no fallback and are
// refused); at least one must be given. Values are registry names of the
// key's op; bwd_det must name a deterministic variant; controls are refused
// whatever LoadOptions says. A fallback variant is not gated for the calls it
// serves: the runtime (DispatchCache, dispatch_cache.h) runs it with a one-time
// warning per (op, mode, H, w, form), or refuses in strict mode.
//
// The loader (load_route_table) rejects, naming FILE:LINE and the offending
// entry: TOML syntax errors; unknown keys; missing keys; values of the wrong
// type or outside their range; unknown variants; variants whose op differs
// from the route's; a non-deterministic variant on a det route (a det variant
// may serve a nondet route: it keeps the weaker promise); negative controls
// (unless LoadOptions::allow_controls, an explicit override that exists only
// to prove that the gate fails bad kernels); variants that do not support the
// route's (H, w, form); lo > hi; within one (op, mode, H, w, form),
// windows that overlap or leave a gap (every group must be one contiguous
// range of T; it need not start at 1); and a key or string holding a control
// character (below 0x20, or 0x7F; the top-level description may hold
// newlines and tabs), named escaped (toml_guard.h). Policies (policy.h) and
// derivation specs (derive.h) follow the same rule.
//
// Per-GPU tables. Route timings are one GPU model's (docs/perf/routes.md,
// D26): "dir/stem@SLUG.toml" is the table derived from the timings of the
// device whose name gpu_slug() maps to SLUG ("sm90a@nvidia-h100-80gb-hbm3.toml"
// for "NVIDIA H100 80GB HBM3"), beside the base table "dir/stem.toml" that
// serves every other GPU of the arch. It is an ordinary table; it shares
// the base table's approvals, policy and rejections ("dir/stem.approvals.json"
// and so on: an approval is matched by backend and source hash, not by GPU
// model; the GPU it ran on is recorded only), and the C API's
// default search (capi.h) loads it on that device.
//
// Approvals (routes/<table stem>.approvals.json, written by `normgate gate
// --approve`): one record per (window, backend) saying that the gate passed
// that window's variant, with the variant's source hash and the strength of
// the campaign that passed it (seed set, T points, dense grid, fresh seeds,
// oracle; policy.h says what strength an approval needs). A record's window
// CONTAINS a route's window when op, mode (bwd), H, w and form are equal and
// the record's T range [lo, hi] includes the route's: the gate proved the
// variant over the whole wider window, so over any part of it (route
// derivation splits approved windows at measured crossovers). An approval is
// CURRENT for a route when its window contains (or equals) the route's, its
// variant is the route's and its source_sha256 equals the variant's
// source_sha256 (registry.h) in this build; STALE when such a record exists
// but with another source hash (the code changed since the gate ran);
// MISSING otherwise. Exact-window records are preferred over wider ones, and
// the status says when the approval is of a wider window ("approved as part
// of T=1..131072"). When no single record contains the route's window,
// current records of neighbouring windows (same group, variant, hash and
// backend) whose union covers it without a gap count together ("approved as
// parts T=1..65536 + T=65537..131072"): the gate proved the variant on each.
//
// Validation. load_approvals checks every record field by field; a record
// that fails is INVALID: kept in the file as it was read (a rewrite by `gate
// --approve` never drops it, never re-seals it), reported with its reason
// ("invalid: record 3: max_err_tol.y 5 outside [0, 1]"), and never current,
// stale or cpu-model only: never dispatched, never counted by `normgate
// routes` or `normgate derive`. A record is valid when
//   - window: op, mode (bwd), w, form known; H in 1..16384 (256 for the head
//     forms); 1 <= T lo <= T hi <= kMaxT;
//   - no string of the record, at any depth, holds a control character
//     (below 0x20, or 0x7F: normgate writes none);
//   - variant a non-empty name; source_sha256 64 lower-case hex digits;
//     backend "gpu" or "cpu-model" (gpu "cpu-model", driver and cuda "-"
//     for the latter; none of these for the former); gpu, driver, cuda,
//     normgate_commit, normgate_version non-empty strings;
//   - max_err_tol has exactly the outputs the op gates (fwd: y, rstd; bwd: y,
//     rstd, dx, dw), each a finite number in [0, 1] (an approval records a
//     pass);
//   - t_points non-empty, strictly increasing, from T lo to T hi (a gate's
//     T points hold its window's first and last T); cases an integer >= 1
//     and >= the number of t_points;
//   - seed_set parses (seeds/seed_set.h) and is canonical (as to_string
//     spells it); worst_case parses as a case id (seeds/case_id.h) whose H,
//     w and form are the window's and whose T is inside it;
//   - date ISO 8601 UTC, "YYYY-MM-DDTHH:MM:SSZ", a real calendar time;
//   - strength (when t_per_window is present): t_per_window 2..1000000,
//     dense_points 0..1000000, dense_step 1..kMaxT, fresh_factor 0..1000000,
//     dense_seeds "worst" | "all", fresh_seeds "" or a canonical seed set,
//     oracle "auto" | "fp64" | "mpfr", dw_vs_fp32_worst (bwd only, required)
//     >= 0, "inf" (FP32 eager's dw error was 0) or "nan" (no FP32 baseline);
//     and they agree as a gate writes them: cases >= t_points x the seed
//     set's (family point, seed) pairs (the grid), fresh_seeds empty when
//     fresh_factor is 0, else one family at seeds last+1 .. last +
//     fresh_factor x (seeds a family) of seed_set;
//   - carried (a carry's chain) and vouched (an approval by equivalence) as
//     their struct comments below say, when present;
//   - no field but those above, and record_sha256: SHA-256 of the record's
//     canonical bytes (the record's JSON object without record_sha256,
//     dumped by nlohmann::json::dump(): sorted keys, no whitespace), computed
//     over the record as read, so a flipped bit anywhere in it makes it
//     invalid ("record_sha256 mismatch"). Records written before approvals
//     carried the digest have none: invalid until `normgate approvals --seal`
//     (which seals only records that pass every other check) adds it. A
//     record without one dated from 2026-12-02T02:53:15Z on, when every
//     writer sealed its records, had its seal removed: INVALID, never
//     sealable. The file's JSON nests at most 64 levels, repeats no key in
//     an object (core/json_strict.h) and holds no NUL byte; records that are
//     copies of one another (by record_sha256, or for unsealed ones the seal
//     --seal would give) are all INVALID.
//
// The dispatcher (Dispatcher) picks the route for a call and refuses a route
// without a current approval unless DispatchPolicy::allow_unapproved is set
// (explicit override). Approvals made by a gate of the CPU models (backend
// "cpu-model") are NOT accepted by default: the models predict the GPU's bits
// but the GPU code is what ships, so only DispatchPolicy::accept_cpu_model
// lets them count. Controls are never dispatched, whatever the policy.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "normgate/routing/rejections.h"
#include "normgate/core/types.h"
#include "normgate/kernels/registry.h"

namespace normgate::kernels {

/// Error in a route table or an approvals file. what() starts "FILE:LINE: "
/// (tables) or "FILE: " (approvals) and quotes the offending entry.
class RouteTableError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// One route: a window of calls and the variant that serves it.
struct Route {
  Op op = Op::bwd;
  Mode mode = Mode::det;   ///< fwd routes: Mode::det, meaning "both modes" (see file comment)
  int64_t H = 0;
  WDtype w = WDtype::bf16;
  Form form = Form::plain;
  int64_t t_lo = 0;        ///< first T of the window (inclusive, >= 1)
  int64_t t_hi = 0;        ///< last T of the window (inclusive)
  const Variant* variant = nullptr;  ///< never null in a loaded table
  std::string file;        ///< table file the route was read from
  int line = 0;            ///< 1-based line of the route in that file

  /// The window without the variant, e.g. "bwd det H=2048 w=bf16 form=plain T=1..65536"
  /// ("fwd H=2048 w=bf16 form=plain T=1..65536" for forward routes).
  std::string window() const;
  /// window() + " -> " + variant name.
  std::string describe() const;
  /// "FILE:LINE".
  std::string where() const;
  /// Same (op, mode, H, w, form, t_lo, t_hi); the variant may differ.
  bool same_window(const Route& o) const;
  /// True when a call (op, mode, H, w, form, T) falls in this window (mode is
  /// ignored for forward routes).
  bool covers(Op op, Mode mode, int64_t H, WDtype w, Form form, int64_t T) const;
};

/// The table's designated fallback variants (top-level `fallback`); null
/// where the table names none.
struct RouteFallback {
  const Variant* fwd = nullptr;
  const Variant* bwd_det = nullptr;
  const Variant* bwd_nondet = nullptr;
  int line = 0;  ///< 1-based line of the `fallback` key, 0 when absent

  /// The fallback for calls of (op, mode) (mode ignored for fwd), or nullptr.
  const Variant* for_call(Op op, Mode mode) const {
    return op == Op::fwd ? fwd : (mode == Mode::det ? bwd_det : bwd_nondet);
  }
};

/// Why `var` cannot be a table's fallback for `key`, or "" when it can: the
/// key must be "fwd", "bwd_det" or "bwd_nondet", and a fallback runs every call of its op
/// (and, for bwd_det, mode) outside the windows, so it must be a variant of
/// that op, not a negative control, deterministic for bwd_det, and serve H =
/// kMinH..kMaxH, both weight dtypes and every form (plan.h, registry.h). The
/// message starts with "unknown fallback key" or "variant NAME". Used by the route-table loader and by
/// derive for its spec's [fallback]. Never throws.
std::string fallback_problem(const std::string& key, const Variant& var);

/// A loaded route table.
struct RouteTable {
  std::string path;          ///< as given to the loader
  std::string arch;          ///< "sm90a"
  std::string description;   ///< optional `description`, "" when absent
  std::string sha256;        ///< SHA-256 (lowercase hex) of the file's bytes
  std::vector<Route> routes; ///< in file order
  RouteFallback fallback;    ///< optional `fallback` (all null when absent)

  /// The route whose window holds the call, or nullptr. T == 0 is looked up
  /// as T == 1 (a call with no rows launches nothing but dw = 0, which every
  /// backward variant writes the same way). Never throws.
  const Route* find(Op op, Mode mode, int64_t H, WDtype w, Form form, int64_t T) const;
  /// The route with the same window as r (variant may differ), or nullptr.
  const Route* find_window(const Route& r) const;
};

/// Loader knobs.
struct LoadOptions {
  /// Accept negative controls as route variants. An explicit override for
  /// proving that the gate fails bad kernels; never for a shipped table
  /// (the dispatcher refuses controls whatever this says).
  bool allow_controls = false;
};

/// Parse route-table TOML `text`; `path` names the file in messages and in
/// Route::file. Throws RouteTableError (message "PATH:LINE: what; entry: <the
/// entry's source text>") for every rule in the file comment; the first
/// problem found in file order is reported.
RouteTable parse_route_table(std::string_view text, const std::string& path, const LoadOptions& opt = {});

/// Read and parse the file at `path`. Throws RouteTableError when it cannot
/// be read (naming the path and the OS error) or is invalid (as above).
RouteTable load_route_table(const std::string& path, const LoadOptions& opt = {});

// --- approvals ---------------------------------------------------------------

/// Backend name of approvals made by a gate of the CPU models.
inline constexpr std::string_view kCpuModelBackend = "cpu-model";
/// Backend name of approvals made by a gate of the CUDA kernels.
inline constexpr std::string_view kGpuBackend = "gpu";

/// One approval record (see file comment; JSON field names in parentheses).
struct Approval {
  // the window (window: {op, mode (bwd only), H, w, form, T: [lo, hi]})
  Op op = Op::bwd;
  Mode mode = Mode::det;
  int64_t H = 0;
  WDtype w = WDtype::bf16;
  Form form = Form::plain;
  int64_t t_lo = 0, t_hi = 0;
  std::string variant;        ///< (variant) registry name
  std::string source_sha256;  ///< (source_sha256) the variant's hash when the gate ran
  std::string backend;        ///< (backend) "gpu" or "cpu-model"
  std::string gpu;            ///< (gpu) device name, "cpu-model" for CPU-model gates
  std::string driver;         ///< (driver) NVIDIA driver version, "-" without GPU
  std::string cuda;           ///< (cuda) CUDA runtime version, "-" without GPU
  std::string seed_set;       ///< (seed_set) canonical seed-set spelling of the grid
  std::vector<int64_t> t_points;  ///< (t_points) grid T of the window
  int64_t cases = 0;          ///< (cases) cases run for the window, refinement included
  /// (max_err_tol) max err/tol per gated output ("y", "rstd", "dx", "dw";
  /// forward windows only y and rstd). Form res adds "h_new" (always 0: it
  /// is gated bit for bit against BF16(x + u)) in records made since the
  /// gate checks it; a res record without it was made by a gate that did
  /// not (h_new_gated()). Non-finite values are stored as strings.
  std::map<std::string, double> max_err_tol;
  /// False for a form res record whose gate did not check h_new (no
  /// max_err_tol "h_new": approvals made before h_new was gated). Such a
  /// record still approves its route (the built-in kernels' h_new is
  /// checked bit for bit by the GPU tests; a plugin's or Python
  /// implementation's h_new has no such check), but `gate --base` gates its
  /// window again, and `routes` says so. True otherwise.
  bool h_new_gated() const { return form != Form::res || max_err_tol.count("h_new") > 0; }
  std::string worst_case;     ///< (worst_case) case id of the largest err/tol
  std::string date;           ///< (date) UTC, ISO 8601
  std::string normgate_commit;   ///< (normgate_commit) git commit of the gate binary
  std::string normgate_version;  ///< (normgate_version)

  // Campaign strength (policy.h). Records written before approvals carried
  // it have none of these fields: has_strength is false and the rest keep
  // their defaults. With t_per_window present every field below is required
  // (dw_vs_fp32_worst only for bwd windows).
  bool has_strength = false;
  int t_per_window = 0;       ///< (t_per_window) the gate's --t-per-window
  int dense_points = 0;       ///< (dense_points) dense grid points each side of the worst T (0: none)
  int64_t dense_step = 0;     ///< (dense_step) dense grid spacing in rows
  bool dense_all_seeds = false;  ///< (dense_seeds) "all" (true) or "worst" (false)
  int fresh_factor = 0;       ///< (fresh_factor) fresh seeds = factor x per-family seed count
  std::string fresh_seeds;    ///< (fresh_seeds) seed set of the window's fresh re-run, "" when none ran
  std::string oracle;         ///< (oracle) "auto", "fp64" or "mpfr"
  /// (dw_vs_fp32_worst) bwd windows: the window's worst dw error relative to
  /// FP32 eager's (<= 1: not worse). NaN for fwd windows (absent in JSON);
  /// non-finite values are stored as strings.
  double dw_vs_fp32_worst = std::numeric_limits<double>::quiet_NaN();

  /// (carried) Carries of this approval to a later source of its variant,
  /// oldest first; absent (empty) for an approval as a gate wrote it. Each
  /// says that the build of `source_sha256` then (from_source_sha256) and
  /// the build it was carried to computed bitwise identical outputs on
  /// `cases` cases of the approval's campaign (gate.h approval_cases), by
  /// the digest files whose file_sha256 are digests_old and digests_new
  /// (`normgate digest`; `normgate approvals --carry`; docs/perf/routes.md
  /// D19). The verdict's other fields stay the gate's. Carries are in
  /// order of date, each from one hash to another by two different files;
  /// a comment-only re-key (tools/rekey_approvals.py) may change
  /// source_sha256 before, between or after them.
  struct Carry {
    std::string from_source_sha256;  ///< the variant's hash the record had before
    std::string to_source_sha256;    ///< the hash it was given
    std::string digests_old, digests_new;  ///< file_sha256 of the two digest files
    int64_t cases = 0;               ///< cases compared, every output bit for bit
    std::string gpu;                 ///< device both digest runs used ("cpu-model" without one)
    std::string date;                ///< UTC, ISO 8601
    std::string normgate_commit;     ///< commit of the build it was carried to
  };
  std::vector<Carry> carried;

  /// (vouched) An approval by bitwise equivalence (docs/perf/routes.md D23):
  /// this variant's outputs on every case of another deterministic
  /// variant's approved campaign were bit for bit that variant's, so the
  /// other's verdict is this one's. `normgate approvals --vouch` writes it
  /// (from two files of `normgate digest`, one with `--as`); the verdict and
  /// strength fields are the vouching record's. Absent for a record a gate
  /// wrote. The loader checks the fields' forms and that `variant` is not
  /// the record's own; --vouch checks that both variants are deterministic.
  struct Vouch {
    std::string variant;        ///< the vouching variant (not this one)
    std::string record_sha256;  ///< the vouching record's seal when it vouched
    std::string source_sha256;  ///< the vouching variant's source hash then
    std::string digests_v, digests_w;  ///< file_sha256 of its digests and of this variant's (`digest --as`)
    int64_t cases = 0;          ///< cases compared, every output bit for bit
    std::string gpu;            ///< device both digest runs used ("cpu-model" without one)
    std::string date;           ///< UTC, ISO 8601
    std::string normgate_commit;   ///< commit of the build that wrote the `--as` digests
  };
  bool has_vouch = false;
  Vouch vouched;

  /// (journal: {"head", "lines"}) The gate's --journal when it wrote this
  /// record: the chain's head (the seal, 64 lower-case hex, of the
  /// journal's last line then: validators::GateResult::journal_head) and
  /// the journal's line count then, header included (>= 2). The journal's
  /// line `lines` has seal `head` for as long as the journal is whole,
  /// however many lines a later run appended, and that seal chains every
  /// line before it (docs/schemas.md, "The chain"): `normgate approvals
  /// FILE --journal J` checks a record against its journal. "" and 0
  /// (absent in JSON) for a record of a gate without --journal, and for
  /// every record written before approvals carried it.
  std::string journal_head;
  int64_t journal_lines = 0;

  /// (record_sha256) SHA-256 (64 lower-case hex) of the record's canonical
  /// bytes (approval_record_sha256). save_approvals writes it for every
  /// valid record; load_approvals checks it.
  std::string record_sha256;
  /// Why the record is INVALID, "" when it is valid (set by load_approvals;
  /// see "Validation" in the file comment). An invalid record is never
  /// current, stale or cpu-model only, never dispatched or derived from;
  /// approval_status reports it as ApprovalState::invalid.
  std::string invalid;
  /// Invalid only for want of record_sha256 (a record written before records
  /// carried digests; every other check passes): `normgate approvals --seal`
  /// may seal it. A record without one dated from 2026-12-02T02:53:15Z on
  /// (every writer sealed its records by then) is INVALID instead, never
  /// sealable: its seal was removed.
  bool unsealed = false;
  /// 0-based index of the record in the file as read.
  size_t index = 0;
  /// Invalid records: the record's JSON as read; save_approvals writes it
  /// back as it is (an invalid record is never dropped or re-sealed).
  std::string raw_json;

  /// Window as Route::window() prints it.
  std::string window() const;
  /// True when the window (not the variant) equals r's.
  bool same_window(const Route& r) const;
  /// True when this window contains r's: same op, mode (bwd), H, w and form,
  /// and t_lo <= r.t_lo && r.t_hi <= t_hi (equal windows included).
  bool contains(const Route& r) const;
  /// True when this window and r's share a T: same op, mode (bwd), H, w and
  /// form, and t_lo <= r.t_hi && r.t_lo <= t_hi.
  bool overlaps(const Route& r) const;
};

/// The approvals file of one table.
struct Approvals {
  std::string path;                ///< file read or to be written
  std::vector<Approval> records;   ///< file order
};

/// The file a table shares with its base table, by `suffix` (".approvals.json",
/// ".policy.toml", ".rejections.json"): "dir/stem" + suffix for "dir/stem.toml"
/// and for the per-GPU "dir/stem@SLUG.toml" (table_file_stem); any other
/// name: name + suffix. The one rule behind approvals_path_for,
/// policy_path_for and rejections_path_for (routes.md D26). Never throws.
std::string table_sibling_path(const std::string& table_path, std::string_view suffix);

/// Path of the approvals file next to a table: "dir/stem.approvals.json" for
/// "dir/stem.toml" and for the per-GPU "dir/stem@SLUG.toml" (any other name:
/// name + ".approvals.json"). table_sibling_path(table_path, ".approvals.json").
std::string approvals_path_for(const std::string& table_path);

/// "dir/stem" for "dir/stem.toml" and "dir/stem@SLUG.toml" (a per-GPU table,
/// stem and SLUG non-empty): the prefix of the files a table shares with
/// its base table (approvals, policy, rejections); "" for a name not ending
/// in ".toml" or with an empty stem. Never throws.
std::string table_file_stem(const std::string& table_path);

/// The file-name form of a CUDA device name that per-GPU tables carry:
/// ASCII letters lowercased, digits kept, every run of other bytes one '-',
/// none at either end ("NVIDIA H100 80GB HBM3" -> "nvidia-h100-80gb-hbm3",
/// "NVIDIA H200" -> "nvidia-h200"); "" when the name holds no ASCII letter
/// or digit. Never throws.
std::string gpu_slug(std::string_view device_name);

/// The SLUG of a per-GPU table "dir/stem@SLUG.toml", "" for any other name
/// (a base table, or a name whose part after '@' is not a gpu_slug() value).
/// Never throws.
std::string gpu_table_slug(const std::string& table_path);

/// The route tables whose approvals are `approvals_path` ("dir/stem.approvals.json"):
/// "dir/stem.toml" and every per-GPU "dir/stem@SLUG.toml" that exist as
/// regular files, sorted; empty for another name or an unreadable folder.
/// Never throws.
std::vector<std::string> tables_sharing_approvals(const std::string& approvals_path);

/// The name of the per-GPU table of `device_name` beside base table
/// "dir/stem.toml": "dir/stem@SLUG.toml" (SLUG = gpu_slug(device_name)),
/// whether or not that file exists; "" when base_table is not a plain
/// "dir/stem.toml" (a per-GPU name included) or the slug is empty. The one
/// place the name is built (table_for_gpu, `normgate routes --files --gpu`).
/// Never throws.
std::string gpu_table_path(const std::string& base_table, std::string_view device_name);

/// The per-GPU table of `device_name` beside base table "dir/stem.toml":
/// "dir/stem@SLUG.toml" when that file exists and is a regular file, else
/// base_table itself (also when base_table is not a plain "dir/stem.toml",
/// or the name has an empty slug). What the C API's default search loads
/// (capi.h). Never throws.
std::string table_for_gpu(const std::string& base_table, std::string_view device_name);
/// The inverse of approvals_path_for for the usual names: "dir/stem.toml" for
/// "dir/stem.approvals.json" (the base table: per-GPU tables beside it share
/// the file, tables_sharing_approvals); "" for any other name (a table not named
/// *.toml, whose approvals are "name.approvals.json", is not recovered:
/// the caller says the table is unknown). Whether the file exists is the
/// caller's to check.
std::string table_path_for_approvals(const std::string& approvals_path);

/// Parse an approvals document `text` (`path` names it in messages and in
/// Approvals::path). Throws RouteTableError naming the path when the text is
/// not JSON, not format "normgate-approvals/1" or has no 'approvals' array.
/// Every record is then read and validated on its own (file comment,
/// "Validation"): a record that fails is kept with Approval::invalid set
/// ("record N: field 'x': why"), its JSON in Approval::raw_json. Never throws
/// for a bad record. The fuzz targets call this entry point.
Approvals parse_approvals(std::string_view text, const std::string& path);

/// Read approvals from `path` (parse_approvals). A missing file gives an empty
/// set (nothing is approved). Throws RouteTableError naming the path when it
/// cannot be read (a directory, no permission) or is not an approvals file.
Approvals load_approvals(const std::string& path);

/// Why record `a` is invalid by its fields (everything in the file comment's
/// "Validation" but the digest), or "" when it is valid. Never throws.
std::string validate_approval(const Approval& a);

/// The record's canonical bytes: its JSON object as save_approvals writes
/// it, without 'record_sha256', dumped compactly (nlohmann::json::dump():
/// keys sorted, no spaces). Valid records only (a.invalid empty).
std::string approval_canonical_bytes(const Approval& a);
/// SHA-256 (lower-case hex) of approval_canonical_bytes(a).
std::string approval_record_sha256(const Approval& a);

/// The number of invalid records in a.
size_t invalid_count(const Approvals& a);

/// Serialize (format "normgate-approvals/1", records in the given order,
/// 2-space indentation, trailing newline). Valid records get their
/// record_sha256; invalid ones are written as read (raw_json). Throws
/// std::invalid_argument naming the record and field when a record without
/// Approval::invalid fails validate_approval (a writer never seals an
/// impossible record).
std::string approvals_to_json_text(const Approvals& a);

/// Write a.path atomically (temporary file beside it, fsync, rename); a
/// rewrite keeps the old file's permission bits, a new file is 0644 less the
/// umask. Throws
/// std::invalid_argument as approvals_to_json_text (nothing written), and
/// std::runtime_error naming the path when writing fails.
void save_approvals(const Approvals& a);

/// An exclusive flock(2) on PATH + ".lock" for the object's lifetime (PATH
/// after core::rename_target: a link's target, the file the writers rename
/// onto, so that naming the file by a link or by its target takes one lock): every
/// normgate writer of an approvals file holds it from its re-read to after
/// the rename, so writers side by side never lose each other's records.
/// Blocks until the lock is free; when it is held, first prints one line to
/// stderr naming the lock file ("normgate: waiting for the lock ..."). The
/// lock file is left in place afterwards: unlinking it while another writer
/// waits on it would let a third lock a new file of the same name. Throws
/// std::runtime_error naming the lock file when it cannot be opened or
/// locked.
class ApprovalsLock {
 public:
  explicit ApprovalsLock(const std::string& approvals_path);
  ~ApprovalsLock();
  ApprovalsLock(const ApprovalsLock&) = delete;
  ApprovalsLock& operator=(const ApprovalsLock&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

/// Standing of a route's approval.
enum class ApprovalState : uint8_t {
  current = 0,         ///< a record of an accepted backend matches window, variant and source hash
  missing = 1,         ///< no record of an accepted backend for this window and variant
  stale = 2,           ///< records match window and variant, but none has the current source hash
  cpu_model_only = 3,  ///< only a current cpu-model record, and cpu-model is not accepted
  // 4 is NG_APPROVAL_NONE in the C ABI (no window holds the call)
  invalid = 5,         ///< no current record, and an INVALID record's window contains the route's
};
/// "current", "missing", "stale", "cpu-model only", "invalid".
std::string_view to_string(ApprovalState s);

/// Approval state of one route, and a sentence saying why.
struct ApprovalStatus {
  ApprovalState state = ApprovalState::missing;
  const Approval* record = nullptr;  ///< the current record, or the stale/cpu-model one (null: missing, invalid)
  /// The record's window is wider than the route's (contains it; see file comment).
  bool wider = false;
  /// When no single record contains the route's window but records of
  /// neighbouring windows (same group, variant, source hash, backend) cover
  /// it together without a gap: those records in T order (record = the
  /// first); empty otherwise.
  std::vector<const Approval*> parts;
  /// why, without the state word, e.g. "approved (gpu gate of ...)", "approved as part of T=1..131072 (gpu
  /// gate of ...)", "approved source 3dffde8bb61a (gpu gate of ...), code now 9a1b..."
  std::string detail;
  /// Whether every record the approval rests on (record, or each of parts)
  /// had its gate check h_new (Approval::h_new_gated); true without a record.
  bool h_new_gated() const;
};

/// Look up r's approval among the records whose window contains r's (file
/// comment). accept_cpu_model: whether backend "cpu-model" records count as
/// current. GPU records are preferred when both are current; among records of
/// one backend the exact window, else the narrowest containing one (first in
/// file order on ties); when none contains it, records whose union covers it
/// (ApprovalStatus::parts). Invalid records (Approval::invalid) count for
/// nothing; when no current approval exists and an invalid record's window
/// contains r's (whatever its variant), the state is `invalid` and the detail
/// starts with that record's reason. Mode: a backward record answers for a
/// route of its own mode and, when r routes a deterministic variant
/// (Variant::mode == det) in a nondet window, the det window's record of that
/// variant answers too (the gate runs one campaign for both windows; such a
/// variant's bits do not depend on the mode; docs/perf/routes.md D21; the
/// detail then says "the det window's record"); a nondet record never answers
/// for a det route. Never throws.
ApprovalStatus approval_status(const Route& r, const Approvals& a, bool accept_cpu_model);

/// The parts of r's window [t_lo, t_hi] that no current record of `backend`
/// covers: records of r's group (op, mode for bwd as approval_status takes
/// it, H, w, form), variant and
/// source hash, valid, of that backend, whose windows overlap r's. Disjoint
/// [lo, hi] spans in T order; empty when their union covers the window (then
/// approval_status is current for that backend, alone or through
/// ApprovalStatus::parts), {[t_lo, t_hi]} when none overlaps. What a gate of
/// that backend must still pass before r is approved: `normgate derive`
/// gates these spans, not the whole window (docs/perf/routes.md, D12).
/// Never throws.
std::vector<std::pair<int64_t, int64_t>> uncovered_spans(const Route& r, const Approvals& a,
                                                          std::string_view backend);

// --- dispatcher --------------------------------------------------------------

/// A call to dispatch. T: rows (0 is allowed, see RouteTable::find).
struct CallKey {
  Op op = Op::bwd;
  Mode mode = Mode::det;  ///< ignored for op == fwd
  int64_t H = 0;
  WDtype w = WDtype::bf16;
  Form form = Form::plain;
  int64_t T = 0;
};
/// "bwd det H=2048 w=bf16 form=plain T=5000".
std::string to_string(const CallKey& k);

/// What the dispatcher accepts.
struct DispatchPolicy {
  bool accept_cpu_model = false;   ///< count approvals of CPU-model gates
  bool allow_unapproved = false;   ///< explicit override: dispatch routes without a current approval
};

/// Thrown by Dispatcher::pick when the call's route has no current approval
/// (and the policy does not override). what() names the call, the route
/// (FILE:LINE, window, variant), the approvals file and why (missing, stale
/// with both hashes, or cpu-model only).
class UnapprovedRoute : public std::runtime_error {
 public:
  UnapprovedRoute(const std::string& what, ApprovalState s) : std::runtime_error(what), state(s) {}
  ApprovalState state;
};

/// Result of dispatching one call.
struct Decision {
  const Route* route = nullptr;
  const Variant* variant = nullptr;
  ApprovalStatus approval;
  bool overridden = false;  ///< dispatched only because allow_unapproved is set
};

/// Picks variants for calls from a route table and its approvals.
class Dispatcher {
 public:
  /// Owns the table and approvals. Throws RouteTableError if the table routes
  /// a negative control (loaded with allow_controls): controls are never
  /// dispatched.
  Dispatcher(RouteTable table, Approvals approvals, DispatchPolicy policy = {});
  /// Load `table_path` (controls refused), the approvals next to it and
  /// the rejections file next to it (rejections.h; a missing one holds
  /// none): a record a remembered failure refutes counts for nothing, as in
  /// `normgate routes` (docs/perf/routes.md D28), so a hand copy of an older
  /// approvals file cannot make such a route run; refuted() lists them and
  /// a refusal of their route names the failure. Throws RouteTableError as
  /// load_route_table / load_approvals / load_rejections (naming the file).
  static Dispatcher from_files(const std::string& table_path, DispatchPolicy policy = {});

  /// The decision for a call. Throws std::invalid_argument naming the call
  /// and the table when no route covers it (T < 0 included), and
  /// UnapprovedRoute when the route has no current approval and the policy
  /// does not override it.
  Decision pick(const CallKey& k) const;
  /// Like pick, but never refuses: returns the decision with its approval
  /// state (route null when no route covers the call). Never throws.
  Decision inspect(const CallKey& k) const;

  const RouteTable& table() const { return table_; }
  const Approvals& approvals() const { return approvals_; }
  const DispatchPolicy& policy() const { return policy_; }
  /// approval_status(r, approvals(), policy().accept_cpu_model), its detail
  /// naming the failure that refuted a record of r's variant whose window
  /// meets r's when r is not current (refuted()). Never throws.
  ApprovalStatus approval_of(const Route& r) const;
  /// The first remembered failure (rejections()) of r's variant, in this
  /// build's source, inside r's window on the gpu backend (also cpu-model
  /// when the policy accepts CPU-model approvals): no gate of that source
  /// approves r's window (gate --approve refuses), so a refusal advises
  /// another variant instead of a gate. nullptr when none. Never throws.
  const Rejection* failed_inside(const Route& r) const;
  /// The sentence a refusal of r ends its reason with when failed_inside(r)
  /// is not null: ". No gate of this source approves the window: ...".
  std::string failed_inside_text(const Rejection& q) const;
  /// The rejections file from_files read (empty for a Dispatcher built from
  /// a table and approvals directly).
  const Rejections& rejections() const { return rejections_; }
  /// The records from_files left out of approvals(), each with why
  /// (RefutedRecord::reason), in file order; empty for a Dispatcher built
  /// from a table and approvals directly.
  const std::vector<std::pair<Approval, std::string>>& refuted() const { return refuted_; }

 private:
  RouteTable table_;
  Approvals approvals_;
  DispatchPolicy policy_;
  std::vector<std::pair<Approval, std::string>> refuted_;
  Rejections rejections_;
};

}  // namespace normgate::kernels
