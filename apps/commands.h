// apps/commands.h: subcommand registration for the normgate CLI and what the
// subcommands share (common.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "normgate/gate/gate.h"
#include "normgate/gate/host_memory.h"
#include "normgate/seeds/case_id.h"

namespace normgate::app {

/// Holds the action of the subcommand that was selected; run() returns the
/// process exit code (0 ok, 1 verdict failed). Errors are thrown:
/// std::invalid_argument for usage/input errors (exit 2), others exit 3.
struct Commands {
  std::function<int()> run = [] { return 0; };
};

/// Whether an error thrown out of a check is a finding about an external
/// implementation (harness/external.h kNondeterministicError,
/// kContractError; read by parse_external_error) rather than a failed run:
/// check and repro then say FAIL and exit 1, as a gate fails the window.
bool is_finding(const std::string& error);

/// Register every subcommand on `app`; the chosen one stores its action in `cmds`.
void register_commands(CLI::App& app, Commands& cmds);

// One per subcommand (apps/cmd_<name>.cpp), registered in --help order by
// register_commands (common.cpp).
void add_families(CLI::App& app, Commands& cmds);
void add_case(CLI::App& app, Commands& cmds);
void add_check(CLI::App& app, Commands& cmds);
void add_variants(CLI::App& app, Commands& cmds);
void add_gate(CLI::App& app, Commands& cmds);
void add_routes(CLI::App& app, Commands& cmds);
void add_approvals(CLI::App& app, Commands& cmds);
void add_digest(CLI::App& app, Commands& cmds);
void add_derive(CLI::App& app, Commands& cmds);
void add_mutate(CLI::App& app, Commands& cmds);

void add_repro(CLI::App& app, Commands& cmds);
void add_inspect(CLI::App& app, Commands& cmds);
void add_export(CLI::App& app, Commands& cmds);
void add_plot(CLI::App& app, Commands& cmds);

/// Upper limit of the gate's campaign counts (gate.h, the library's).
inline constexpr int kMaxCampaignCount = validators::kMaxCampaignCount;

/// Throws std::invalid_argument (exit 2) before any work, naming `option`
/// and `path`, when `path` cannot be written: its folder does not exist or
/// is not writable, it is a folder, or it exists and is not writable ("" is
/// accepted: nothing to write).
void check_writable(const std::string& path, const std::string& option = "");

/// A file a subcommand reads or writes and the option (or positional
/// argument) that names it. `path` "" : not given.
struct PathArg {
  std::string option;
  std::string path;
  /// Under check_outputs' dash_is_stdout: this output still never goes to
  /// stdout (the gate's journal and --stats-json), so no message offers "-".
  bool never_stdout = false;
};

/// `text` safe to print on a terminal: every control byte but newline and
/// tab (and DEL) as \xHH, so that a NUL does not cut a message short and an
/// escape sequence read from a file or an argument is shown, not obeyed.
/// Bytes >= 0x80 (UTF-8) are kept.
std::string printable(std::string_view text);
/// printable() for the message of a core::MultilineError (main's
/// "normgate: error: ..."), whose thrower escaped the values it quotes: its
/// newlines are line breaks, other controls \xHH (a tab \x09).
/// `user_values`: the command line's arguments that hold a newline (main
/// passes them): a newline whose line (its first 16 bytes) comes from one
/// of them is \x0a, should a thrower have quoted one unescaped. Every other
/// message is printed with printable_line.
std::string printable_message(std::string_view text, const std::vector<std::string>& user_values = {});
/// printable() for one value inside a line (a path, a name, a case id read
/// from a file or an argument): newline and tab as \x0a and \x09 too, so
/// that a value cannot start a line of its own in the output.
std::string printable_line(std::string_view text);

/// Whether `impls` (expanded names) holds a built-in kernel variant: what
/// the "no GPU in use: kernel variants run as their CPU models" note is
/// about (plugins, Python or C kernels and the FP32 baseline run as they
/// are).
bool runs_builtin_variant(const std::vector<std::string>& impls);

/// Before any work, every file a subcommand will write: each output is
/// writable (check_writable); no two outputs are one file (same inode when
/// both exist, else the same canonical path); no output is one of `inputs`
/// (route table, base table, spec, timings, report, case file, plugin...:
/// the write would destroy what the run reads). A read-modify-write of one
/// file (the approvals file under --approve) is listed as an output only.
/// "-" (stdout) is skipped where `dash_is_stdout` (but not for an output
/// marked never_stdout); at most one output may be "-". Throws
/// std::invalid_argument (exit 2) naming both options.
void check_outputs(const std::vector<PathArg>& outputs, const std::vector<PathArg>& inputs = {},
                   bool dash_is_stdout = false);

/// A file that is read and then appended to or rewritten in place (the gate
/// journal, an approvals file): when it exists it must be a regular file
/// this process can read and write, else std::invalid_argument (exit 2)
/// naming `option` and `path`; when it does not, check_writable.
void check_read_write(const std::string& path, const std::string& option);

/// A file that is read when it exists (an approvals file beside a table):
/// a folder or an unreadable file is std::invalid_argument (exit 2) naming
/// `option` and `path`; a missing file is accepted.
void check_readable_if_present(const std::string& path, const std::string& option);

/// Every option and positional argument of the selected subcommand of
/// `app` that was given an empty value ("") is std::invalid_argument
/// (exit 2) naming it: an empty path is never taken as "not given".
void reject_empty_values(const CLI::App& app);

/// Make every integer option of `app` and its subcommands (CLI11 type name
/// INT or UINT) read its values as decimal integers only: an optional sign
/// and the digits 0-9. CLI11 alone reads "010" as octal 8 and accepts "0x10",
/// "0b10" and digit separators ("1'000", "1_000"); here "010" is 10 and the
/// others are a usage error (exit 2) naming the option and the value. Every
/// floating-point option (type FLOAT) likewise takes decimal notation only:
/// an optional sign, digits with an optional point, an optional exponent
/// (1e8, 2.5, .5, 1E-3); CLI11 alone also reads hexadecimal ("0x10" as
/// 16, "0x1p3"), digit separators and surrounding blanks. Call after the
/// options are registered and before parsing.
void decimal_number_options(CLI::App& app);

/// `--backend` (auto|cpu|gpu, validators::parse_backend's names) and
/// `--oracle` (auto|fp64|mpfr, oracle::parse_oracle_mode's names) with the
/// given help, default shown: the value sets of every subcommand in one place.
CLI::Option* add_backend_option(CLI::App* sub, std::string& value, const std::string& help);
CLI::Option* add_oracle_option(CLI::App* sub, std::string& value, const std::string& help);

/// `--threads N`: OpenMP threads, an integer in 0..4096 (0: OpenMP's
/// default; the C ABI's NG_MAX_THREADS: libgomp cannot start ~1e5 threads,
/// and the process died of it), with the given help.
CLI::Option* add_threads_option(CLI::App* sub, int& value, const std::string& help);

/// --devices LIST (default "all"): the GPUs a pipeline spreads its cases'
/// GPU halves over (validators::run_checks).
CLI::Option* add_devices_option(CLI::App* sub, std::string& value);

/// The --devices value read for this process's devices
/// (kernels::parse_devices with kernels::device_count()), before any work;
/// std::invalid_argument (exit 2) naming --devices and the bad value.
/// `given`: --devices was on the command line; `backend`: the --backend
/// value as given (auto|cpu|gpu). --devices given with --backend cpu is
/// std::invalid_argument (exit 2) naming both: the CPU models use no device.
std::vector<int> parse_devices_option(const std::string& text, bool given, const std::string& backend);

/// `--plugin LIB.so`, repeatable (one path per occurrence): plugin libraries
/// whose variants (capi/include/normgate/plugin.h) the subcommand may name.
CLI::Option* add_plugin_option(CLI::App* sub, std::vector<std::string>& paths);

// The host-memory checks before any work (normgate/gate/host_memory.h,
// shared with the C API's ng_gate).
using validators::GateHold;
using validators::MemoryExtra;
using validators::gate_hold;
using validators::require_gate_host_memory;
using validators::require_host_memory;


/// When `table`'s file name holds an '@' but is not a per-GPU table name
/// STEM@SLUG.toml (routing.h gpu_table_slug: SLUG lowercase ASCII letters
/// and digits, single '-' between them), a note on stderr that it is read
/// as a table of its own, naming the approvals and policy files it takes
/// (e.g. sm90a@H100.toml: sm90a@H100.approvals.json, not sm90a's). `gate`
/// and `routes` say it before any work; `routes --files` refuses the name.
void note_not_a_per_gpu_table(const std::string& table);

/// Load and register every plugin of `paths` (plugin/loader.h
/// register_plugins), before any other work: a missing or bad library is
/// std::invalid_argument (exit 2) naming it and the field at fault.
void load_plugins(const std::vector<std::string>& paths);

/// While one lives, an exit() from anywhere in the process (a plugin's
/// kernel calling exit(0), a library's abort path through exit) ends it with
/// status 3 and a line on stderr naming `what`, not the status that exit()
/// was given: a gate that never reached its verdict must not read as a
/// PASS to a CI job. _exit and signals are out of its reach (a signal ends
/// the process by that signal, as before).
class ExitGuard {
 public:
  explicit ExitGuard(const char* what);
  ~ExitGuard();
  ExitGuard(const ExitGuard&) = delete;
  ExitGuard& operator=(const ExitGuard&) = delete;
};

/// Write `text` to `path` atomically: a temporary file beside it (written,
/// fsync'ed, closed), then rename, then an fsync of the folder. Throws
/// std::runtime_error (exit 3) naming `path` and the system's reason when
/// any step fails (a full disk, an I/O error); the temporary file is removed
/// and `path` keeps its previous contents.
void write_file_atomic(const std::string& path, const std::string& text);

/// Several files (path, text) written all or none: every temporary file is
/// written and fsync'ed before the first rename, and a rename that fails
/// puts the files renamed before it back (from hard links of the previous
/// files, PATH.old.PID.N, removed at the end), so a full disk or an I/O error
/// leaves every path as it was (std::runtime_error naming the path; the
/// temporaries removed). Paths "" are skipped.
void write_files_atomic(const std::vector<std::pair<std::string, std::string>>& files);

/// A report option and its value ("" : not asked for; "-" : stdout).
struct ReportPath {
  const char* option;
  std::string path;
};


/// When one of `reports` is "-": moves the process's stdout to stderr (what
/// is printed from here on, by the command and the libraries, goes to
/// stderr, so stdout carries the report alone) and returns a descriptor of
/// the original stdout for write_report; else -1. Throws std::runtime_error
/// when the descriptors cannot be duplicated.
int stdout_to_stderr_for(const std::vector<ReportPath>& reports);

/// `text` to `path`: "" nothing, "-" descriptor `fd` (stdout_to_stderr_for's),
/// else write_file_atomic. Throws std::runtime_error when writing fails.
void write_report(const std::string& path, const std::string& text, int fd);

/// A report (`gate --report-json` or `check --json`) as JSON; a missing,
/// unreadable or unparsable file, or one whose "format" this normgate does
/// not read (validators::report_format_version: another kind of document,
/// an unknown major version), is std::invalid_argument (exit 2) naming it.
/// A report without "format" (written before reports were versioned) is
/// read, with a `note` line on stdout. `sha256`, when given, receives the
/// SHA-256 (hex) of the bytes parsed (export records it in the maps file).
nlohmann::json read_report(const std::string& path, std::string* sha256 = nullptr);

/// `j` as the text of a JSON file normgate writes: `indent` spaces (-1:
/// one line), a final newline. A string that is not UTF-8 (a path in
/// another encoding) keeps U+FFFD where its bad bytes were, instead of
/// failing a finished run (nlohmann's error_handler_t::replace).
template <class Json>
std::string json_text(const Json& j, int indent = 2) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace) + "\n";
}

}  // namespace normgate::app
