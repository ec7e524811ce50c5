// apps/common.cpp: what the subcommands share: their registration in --help order, the common
// options, writable-path checks, atomic writes.
#include "commands.h"
#include "normgate/harness/external.h"
#include "normgate/gate/journal.h"  // kJournalKeyEnv

#include "normgate/core/file_target.h"
#include "normgate/core/host_memory.h"
#include "normgate/core/printable.h"
#include "normgate/core/temp_files.h"
#include "normgate/kernels/registry.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "normgate/audit/export.h"
#include "normgate/harness/devices.h"
#include "normgate/harness/pipeline.h"
#include "normgate/routing/policy.h"
#include "normgate/routing/routing.h"
#include "normgate/plugin/loader.h"
#include "normgate/seeds/generate.h"

namespace normgate::app {

namespace {

// The system's reason for the last failed call.
std::string sys_reason() { return std::strerror(errno); }


// "OPTION 'PATH'" for messages ("'PATH'" when no option is known).
std::string named(const std::string& option, const std::string& path) {
  return (option.empty() ? "" : option + " ") + "'" + path + "'";
}

// `text` into a new temporary file beside `path` (written, fsync'ed, closed);
// its name. Any failure: the temporary removed, std::runtime_error naming
// `path` and the system's reason.
std::string write_temp(const std::string& path, const std::string& text) {
  const std::string tmp = core::temp_name_beside(path);
  // Tracked until commit_temp renames or removes it: a signal meanwhile
  // removes it (core/temp_files.h).
  core::track_temp(tmp);
  auto fail = [&](const std::string& step, int fd) {
    const std::string why = sys_reason();
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    core::untrack_temp(tmp);
    throw std::runtime_error("cannot write '" + path + "' (" + step + " of its temporary file '" + tmp +
                             "' failed: " + why + "); '" + path + "' was left as it was");
  };
  // A rewrite keeps the old file's permission bits (core::create_replacement).
  const int fd = core::create_replacement(tmp, path);
  if (fd < 0) {
    const std::string why = sys_reason();
    core::untrack_temp(tmp);
    throw std::runtime_error("cannot write '" + path + "': cannot create its temporary file '" + tmp + "': " + why);
  }
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) errno = ENOSPC;  // a write that writes nothing: the disk took no more
    if (n <= 0) fail("a write", fd);
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) fail("fsync", fd);
  if (::close(fd) != 0) fail("close", -1);
  return tmp;
}

// The temporary file `tmp` renamed to `path`, then the folder synced (best
// effort: some file systems refuse to sync a folder; the data is safe).
void commit_temp(const std::string& tmp, const std::string& path) {
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = sys_reason();
    ::unlink(tmp.c_str());
    core::untrack_temp(tmp);
    throw std::runtime_error("cannot write '" + path + "': the rename of its temporary file '" + tmp +
                             "' failed: " + why + "; '" + path + "' was left as it was");
  }
  core::untrack_temp(tmp);
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace

std::string printable(std::string_view text) { return core::escape_controls(text, true); }

std::string printable_message(std::string_view text, const std::vector<std::string>& user_values) {
  std::string out;
  size_t from = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && text[i] != '\n') continue;
    out += core::escape_controls(text.substr(from, i - from), false);
    if (i < text.size()) {
      // The newline and what follows it on its line (up to 16 bytes): a
      // value given on the command line that holds them is where this
      // line break came from, not normgate.
      size_t end = text.find('\n', i + 1);
      if (end == std::string_view::npos) end = text.size();
      const std::string_view seg = text.substr(i, std::min<size_t>(end - i, 17));
      bool keep = true;
      for (const auto& v : user_values) keep = keep && v.find(seg) == std::string::npos;
      out += keep ? "\n" : "\\x0a";
    }
    from = i + 1;
  }
  return out;
}

std::string printable_line(std::string_view text) { return core::escape_controls(text, false); }

bool runs_builtin_variant(const std::vector<std::string>& impls) {
  return std::any_of(impls.begin(), impls.end(), [](const std::string& n) { return kernels::builtin_variant(n); });
}

// A symbolic link is written through: the file it points to is replaced,
// never the link (core/file_target.h).
void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string real = core::rename_target(path);
  commit_temp(write_temp(real, text), real);
}

void write_files_atomic(const std::vector<std::pair<std::string, std::string>>& files) {
  std::vector<std::pair<std::string, std::string>> temps;  // (temporary, path)
  try {
    for (const auto& [path, text] : files)
      if (!path.empty()) {
        const std::string real = core::rename_target(path);  // a link is written through
        temps.emplace_back(write_temp(real, text), real);
      }
  } catch (...) {
    for (const auto& t : temps) {
      ::unlink(t.first.c_str());
      core::untrack_temp(t.first);
    }
    throw;
  }
  // Before the renames, a hard link keeps each previous file, so a rename
  // that fails (an I/O error) can put the earlier ones back. The links are
  // tracked as the temporaries are: a signal during the renames removes
  // them (each file is then whole, the old or the new one).
  std::vector<std::string> kept(temps.size());  // "" : no previous file (or no link)
  for (size_t i = 0; i < temps.size(); ++i) {
    const std::string old = core::temp_name_beside(temps[i].second, "old");
    ::unlink(old.c_str());
    core::track_temp(old);
    if (::link(temps[i].second.c_str(), old.c_str()) == 0) kept[i] = old;
    else core::untrack_temp(old);
  }
  auto drop_kept = [](const std::string& k) {
    ::unlink(k.c_str());
    core::untrack_temp(k);
  };
  for (size_t i = 0; i < temps.size(); ++i) {
    try {
      commit_temp(temps[i].first, temps[i].second);
    } catch (...) {
      for (size_t k = i + 1; k < temps.size(); ++k) {
        ::unlink(temps[k].first.c_str());
        core::untrack_temp(temps[k].first);
      }
      for (size_t k = 0; k < i; ++k) {  // the ones already renamed: back to what they were
        if (!kept[k].empty()) {
          ::rename(kept[k].c_str(), temps[k].second.c_str());
          core::untrack_temp(kept[k]);
        } else {
          ::unlink(temps[k].second.c_str());
        }
      }
      for (size_t k = i; k < temps.size(); ++k)
        if (!kept[k].empty()) drop_kept(kept[k]);
      throw;
    }
  }
  for (const auto& k : kept)
    if (!k.empty()) drop_kept(k);
}

void check_outputs(const std::vector<PathArg>& outputs, const std::vector<PathArg>& given_inputs,
                   bool dash_is_stdout) {
  // The journal key file is every command's input where it is set: a report
  // written over it would leave the journals sealed with it unreadable
  // (found by an adversarial pass).
  std::vector<PathArg> inputs = given_inputs;
  if (const std::string key = validators::journal_key_file(); !key.empty())
    inputs.push_back({validators::kJournalKeyEnv, key});
  const PathArg* to_stdout = nullptr;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const auto& o = outputs[i];
    if (o.path.empty()) continue;
    const bool stdout_ok = dash_is_stdout && !o.never_stdout;
    if (stdout_ok && o.path == "-") {
      if (to_stdout)
        throw std::invalid_argument(to_stdout->option + " - and " + o.option + " - : only one report can go to stdout");
      to_stdout = &o;
      continue;
    }
    // Elsewhere "-" would be a file named "-" in the working folder.
    if (o.path == "-")
      throw std::invalid_argument(o.option + " -: give a file (this output does not go to stdout)");
    // A path into /proc or /dev (but /dev/shm, a plain tmpfs), or a link
    // there (/dev/stdout -> /proc/self/fd/1), is no file to replace: the
    // rename would put a file where the system's entry was, or fail after
    // the run. Checked first: as a user, the folder's permissions would
    // hide the reason.
    {
      std::error_code ec;
      // A link loop: no file to write through (the rename would replace the
      // link itself).
      (void)std::filesystem::status(o.path, ec);
      if (ec && ec != std::errc::no_such_file_or_directory)
        throw std::invalid_argument(named(o.option, o.path) + ": " + ec.message());
      namespace fs = std::filesystem;
      const auto system = [](const std::string& x) {
        return x.rfind("/proc/", 0) == 0 || x.rfind("/sys/", 0) == 0 ||
               (x.rfind("/dev/", 0) == 0 && x.rfind("/dev/shm/", 0) != 0);
      };
      const std::string hint = stdout_ok ? " (use - for stdout)" : "";
      // Every step of the link chain, not only where it ends: /dev/stdout ->
      // /proc/self/fd/1 ends at the file stdout is redirected to, which the
      // rename would replace (`--json /dev/stdout >> ci.log` lost the log).
      const std::vector<std::string> chain = core::link_chain(o.path);
      for (size_t n = 0; n < chain.size(); ++n) {
        const std::string step = fs::path(chain[n]).lexically_normal().string();
        if (!system(step)) continue;
        if (n == 0)
          throw std::invalid_argument(named(o.option, o.path) + " is in " + step.substr(0, step.find('/', 1) + 1) +
                                      ", not a file to write" + hint);
        throw std::invalid_argument(named(o.option, o.path) + " is a link to " + step + ", not a file" + hint);
      }
      ec.clear();
      // The folders resolved too (a link to /proc in the path's folders).
      std::string real = core::rename_target(o.path);
      const fs::path canon = fs::weakly_canonical(real, ec);
      if (!ec) real = canon.string();
      if (system(real) && core::rename_target(o.path) != o.path)
        throw std::invalid_argument(named(o.option, o.path) + " is a link to " + real + ", not a file" + hint);
      if (system(real))
        throw std::invalid_argument(named(o.option, o.path) + " is in " + real.substr(0, real.find('/', 1) + 1) +
                                    ", not a file to write" + hint);
    }
    check_writable(o.path, o.option);
    // Two outputs on one file: the later write would destroy the earlier (a
    // report over the journal loses the campaign's resume).
    for (size_t j = 0; j < i; ++j) {
      const auto& p = outputs[j];
      if (p.path.empty() || (dash_is_stdout && !p.never_stdout && p.path == "-")) continue;
      if (core::same_file(o.path, p.path))
        throw std::invalid_argument(named(p.option, p.path) + " and " + named(o.option, o.path) +
                                    " name one file: each output needs a file of its own");
    }
    // An output over an input: the run would destroy what it reads.
    for (const auto& in : inputs)
      if (!in.path.empty() && core::same_file(o.path, in.path))
        throw std::invalid_argument(named(o.option, o.path) + " is also this run's input, " + named(in.option, in.path) +
                                    ": writing it would destroy what this run reads; give another file");
  }
}

void check_read_write(const std::string& path, const std::string& option) {
  if (path.empty()) return;
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto st = fs::status(path, ec);
  // A status that cannot be read (a link loop, no permission to search a
  // folder) is an input error now, not a failure to open it after the checks.
  if (ec && st.type() != fs::file_type::not_found)
    throw std::invalid_argument(named(option, path) + ": " + ec.message());
  if (!fs::exists(st)) {
    check_writable(path, option);
    return;
  }
  if (fs::is_directory(st)) throw std::invalid_argument(named(option, path) + " is a folder (give a file name)");
  if (!fs::is_regular_file(st)) throw std::invalid_argument(named(option, path) + " is not a regular file");
  if (::access(path.c_str(), R_OK | W_OK) != 0)
    throw std::invalid_argument(named(option, path) + " cannot be read and written: " + sys_reason());
}

void check_readable_if_present(const std::string& path, const std::string& option) {
  if (path.empty()) return;
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (!fs::exists(st)) return;
  if (fs::is_directory(st)) throw std::invalid_argument(named(option, path) + " is a folder, not a file");
  if (::access(path.c_str(), R_OK) != 0)
    throw std::invalid_argument(named(option, path) + " cannot be read: " + sys_reason());
}

void reject_empty_values(const CLI::App& app) {
  for (const CLI::App* sub : app.get_subcommands()) {
    for (const CLI::Option* opt : sub->get_options()) {
      if (opt->count() == 0) continue;
      for (const std::string& v : opt->results())
        if (v.empty())
          throw std::invalid_argument(sub->get_name() + " " + opt->get_name() +
                                      ": an empty value (\"\"); give a value or leave the option out");
    }
    reject_empty_values(*sub);
  }
}

void decimal_number_options(CLI::App& app) {
  const CLI::Validator decimal(
      [](std::string& v) -> std::string {
        const size_t sign = !v.empty() && (v[0] == '-' || v[0] == '+') ? 1 : 0;
        bool digits = v.size() > sign;
        for (size_t k = sign; k < v.size() && digits; ++k) digits = v[k] >= '0' && v[k] <= '9';
        if (!digits)
          return "'" + v + "' is not a decimal integer (an optional sign and the digits 0-9: no 0x, 0b or 0o prefix, "
                 "no separators)";
        size_t z = sign;  // leading zeros dropped, so that 010 is ten (CLI11 would read octal)
        while (z + 1 < v.size() && v[z] == '0') ++z;
        v.erase(sign, z - sign);
        return {};
      },
      "", "decimal");
  const CLI::Validator decimal_real(
      [](std::string& v) -> std::string {
        size_t k = !v.empty() && (v[0] == '-' || v[0] == '+') ? 1 : 0;
        auto digits = [&] {
          const size_t from = k;
          while (k < v.size() && v[k] >= '0' && v[k] <= '9') ++k;
          return k - from;
        };
        size_t mant = digits();
        if (k < v.size() && v[k] == '.') {
          ++k;
          mant += digits();
        }
        bool ok = mant > 0;
        if (ok && k < v.size() && (v[k] == 'e' || v[k] == 'E')) {
          ++k;
          if (k < v.size() && (v[k] == '-' || v[k] == '+')) ++k;
          ok = digits() > 0;
        }
        if (!ok || k != v.size())
          return "'" + v + "' is not a decimal number (an optional sign, digits with an optional point and an "
                 "optional exponent, e.g. 1e8 or 2.5: no hexadecimal, no separators)";
        return {};
      },
      "", "decimal");
  for (CLI::Option* opt : app.get_options()) {
    const std::string t = opt->get_type_name();
    if (t.rfind("INT", 0) == 0 || t.rfind("UINT", 0) == 0) opt->transform(decimal);
    if (t.rfind("FLOAT", 0) == 0) opt->transform(decimal_real);
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) decimal_number_options(*sub);
}

int stdout_to_stderr_for(const std::vector<ReportPath>& reports) {
  bool any = false;
  for (const auto& r : reports) any = any || r.path == "-";
  if (!any) return -1;
  std::fflush(stdout);
  const int fd = ::dup(STDOUT_FILENO);
  if (fd < 0 || ::dup2(STDERR_FILENO, STDOUT_FILENO) < 0)
    throw std::runtime_error(std::string("cannot move stdout to stderr for a report to stdout: ") + std::strerror(errno));
  return fd;
}

void write_report(const std::string& path, const std::string& text, int fd) {
  if (path.empty()) return;
  if (path != "-") {
    write_file_atomic(path, text);
    return;
  }
  if (fd < 0) throw std::logic_error("write_report: a report to stdout without stdout_to_stderr_for");
  std::fflush(stdout);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error(std::string("cannot write the report to stdout: ") + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
}

// A report (`gate --report-json` or `check --json`) as JSON; a missing,
// unreadable or unparsable file is an input error (exit 2) naming it.
namespace {
std::atomic<const char*> g_exit_guard{nullptr};
void exit_guard_handler() {
  if (const char* what = g_exit_guard.load()) {
    const std::string msg = std::string("\nnormgate: error: exit() was called while ") + what +
                            " ran (by a plugin or a library it loaded): no verdict was reached; exit 3\n";
    (void)!::write(STDERR_FILENO, msg.data(), msg.size());
    ::_exit(3);
  }
}
}  // namespace

ExitGuard::ExitGuard(const char* what) {
  static const bool registered = std::atexit(exit_guard_handler) == 0;
  (void)registered;
  g_exit_guard.store(what);
}

ExitGuard::~ExitGuard() { g_exit_guard.store(nullptr); }

nlohmann::json read_report(const std::string& path, std::string* sha256) {
  std::vector<std::string> notes;
  nlohmann::json j = validators::read_report_file(path, sha256, &notes);
  for (const auto& n : notes) std::printf("note     %s\n", printable_line(n).c_str());
  return j;
}

void register_commands(CLI::App& app, Commands& cmds) {
  add_families(app, cmds);
  add_case(app, cmds);
  add_check(app, cmds);
  add_variants(app, cmds);
  add_gate(app, cmds);
  add_routes(app, cmds);
  add_approvals(app, cmds);
  add_digest(app, cmds);
  add_derive(app, cmds);
  add_mutate(app, cmds);
  add_repro(app, cmds);
  add_inspect(app, cmds);
  add_export(app, cmds);
  add_plot(app, cmds);
}

CLI::Option* add_backend_option(CLI::App* sub, std::string& value, const std::string& help) {
  return sub->add_option("--backend", value, help)->capture_default_str()->check(CLI::IsMember({"auto", "cpu", "gpu"}));
}

CLI::Option* add_oracle_option(CLI::App* sub, std::string& value, const std::string& help) {
  return sub->add_option("--oracle", value, help)->capture_default_str()->check(CLI::IsMember({"auto", "fp64", "mpfr"}));
}

CLI::Option* add_threads_option(CLI::App* sub, int& value, const std::string& help) {
  return sub->add_option("--threads", value, help)->check(CLI::TypeValidator<int>("an integer"))->check(CLI::Range(0, 4096));
}

CLI::Option* add_devices_option(CLI::App* sub, std::string& value) {
  return sub
      ->add_option("--devices", value,
                   "GPU backend: the devices the cases' GPU halves are spread over, one worker each, cases "
                   "finished in order (reports do not depend on it): all (every visible device) or indices, e.g. "
                   "0,1,2,3; a device may repeat (0,0: two workers on device 0). Refused with --backend cpu (the "
                   "CPU models run on no device)")
      ->capture_default_str();
}

std::vector<int> parse_devices_option(const std::string& text, bool given, const std::string& backend) {
  // As for other options that cannot apply (--md with --case, --rate
  // without --plan): refused, not ignored, so that a wrong belief about
  // where the cases run is said rather than kept.
  if (given && backend == "cpu")
    throw std::invalid_argument("--devices " + text + " has no effect with --backend cpu: the CPU models run on no "
                                "device; drop --devices, or use --backend gpu (or auto) to spread the cases over GPUs");
  try {
    return kernels::parse_devices(text, kernels::device_count());
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("--devices: " + std::string(e.what()));
  }
}

CLI::Option* add_plugin_option(CLI::App* sub, std::vector<std::string>& paths) {
  return sub
      ->add_option("--plugin", paths,
                   "Plugin library (LIB.so, the C ABI of capi/include/normgate/plugin.h) whose variants routes, "
                   "--variant and reports may name; repeatable, loaded before any work (a bad one: exit 2)")
      ->allow_extra_args(false);
}

void note_not_a_per_gpu_table(const std::string& table) {
  const std::string name = std::filesystem::path(table).filename().string();
  if (name.find('@') == std::string::npos || !kernels::gpu_table_slug(table).empty()) return;
  std::fprintf(stderr,
               "normgate: note: '%s' holds an '@' but is not a per-GPU table name STEM@SLUG.toml (SLUG: lowercase "
               "ASCII letters and digits, single '-' between them, as a CUDA device name's slug): it is read as a "
               "table of its own, with its own approvals (%s) and policy (%s)\n",
               printable_line(table).c_str(), printable_line(kernels::approvals_path_for(table)).c_str(),
               printable_line(kernels::policy_path_for(table)).c_str());
}

void load_plugins(const std::vector<std::string>& paths) {
  if (!paths.empty()) plugin::register_plugins(paths);
}

// Before any work, so a long run never fails at the end on its outputs.
void check_writable(const std::string& path, const std::string& option) {
  if (const std::string why = core::write_problem(path); !why.empty())
    throw std::invalid_argument("cannot write " + named(option, path) + ": " + why);
}

bool is_finding(const std::string& error) {
  return validators::parse_external_error(error).finding();
}

}  // namespace normgate::app
