// apps/commands.h: subcommand registration for the normgate CLI and what the
// subcommands share (common.cpp).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace normgate::app {

/// Holds the action of the subcommand that was selected; run() returns the
/// process exit code (0 ok, 1 verdict failed). Errors are thrown:
/// std::invalid_argument for usage/input errors (exit 2), others exit 3.
struct Commands {
  std::function<int()> run = [] { return 0; };
};

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
void add_derive(CLI::App& app, Commands& cmds);

void add_repro(CLI::App& app, Commands& cmds);
void add_inspect(CLI::App& app, Commands& cmds);
void add_export(CLI::App& app, Commands& cmds);
void add_plot(CLI::App& app, Commands& cmds);

/// Throws std::invalid_argument (exit 2) before any work when `path`'s folder
/// does not exist or is not writable ("" is accepted: nothing to write).
void check_writable(const std::string& path);

/// `--backend` (auto|cpu|gpu, validators::parse_backend's names) and
/// `--oracle` (auto|fp64|mpfr, oracle::parse_oracle_mode's names) with the
/// given help, default shown: the value sets of every subcommand in one place.
CLI::Option* add_backend_option(CLI::App* sub, std::string& value, const std::string& help);
CLI::Option* add_oracle_option(CLI::App* sub, std::string& value, const std::string& help);

/// `--threads N`: OpenMP threads, an integer in 0..4096 (0: OpenMP's
/// default; the C ABI's NG_MAX_THREADS: libgomp cannot start ~1e5 threads,
/// and the process died of it), with the given help.
CLI::Option* add_threads_option(CLI::App* sub, int& value, const std::string& help);

/// `--plugin LIB.so`, repeatable (one path per occurrence): plugin libraries
/// whose variants (capi/include/normgate/plugin.h) the subcommand may name.
CLI::Option* add_plugin_option(CLI::App* sub, std::vector<std::string>& paths);

/// Load and register every plugin of `paths` (plugin/loader.h
/// register_plugins), before any other work: a missing or bad library is
/// std::invalid_argument (exit 2) naming it and the field at fault.
void load_plugins(const std::vector<std::string>& paths);

/// Write `text` to `path` atomically: a temporary file beside it, then rename.
/// Throws std::runtime_error naming the path when writing fails.
void write_file_atomic(const std::string& path, const std::string& text);

/// A report option and its value ("" : not asked for; "-" : stdout).
struct ReportPath {
  const char* option;
  std::string path;
};

/// Before any work: at most one report may go to stdout ("-"), no two
/// outputs (reports, the journal `journal`, "" for none) may name one file,
/// else std::invalid_argument naming the options; every other report path
/// must be writable (check_writable: a folder, a read-only file refused).
void check_report_paths(const std::vector<ReportPath>& reports, const std::string& journal = "");

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
/// read, with a `note` line on stdout.
nlohmann::json read_report(const std::string& path);

}  // namespace normgate::app
