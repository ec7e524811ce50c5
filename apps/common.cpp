// apps/common.cpp: what the subcommands share: their registration in --help order, the common
// options, writable-path checks, atomic writes.
#include "commands.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "normgate/audit/export.h"
#include "normgate/plugin/loader.h"

namespace normgate::app {

void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw std::runtime_error("cannot open '" + tmp + "' for writing");
    f << text;
    f.flush();
    if (!f) {
      std::filesystem::remove(tmp);
      throw std::runtime_error("cannot write '" + tmp + "'");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp);
    throw std::runtime_error("cannot rename '" + tmp + "' to '" + path + "': " + ec.message());
  }
}

void check_report_paths(const std::vector<ReportPath>& reports, const std::string& journal) {
  const ReportPath* to_stdout = nullptr;
  namespace fs = std::filesystem;
  // Two outputs on one file: the later write would destroy the earlier (a
  // report over the journal loses the campaign's resume).
  auto same = [](const std::string& a, const std::string& b) {
    std::error_code ec;
    return fs::weakly_canonical(a, ec) == fs::weakly_canonical(b, ec);
  };
  for (size_t i = 0; i < reports.size(); ++i) {
    const auto& r = reports[i];
    if (r.path.empty() || r.path == "-") continue;
    if (!journal.empty() && same(r.path, journal))
      throw std::invalid_argument(std::string(r.option) + " '" + r.path + "' is the journal's file (--journal)");
    for (size_t j = 0; j < i; ++j)
      if (!reports[j].path.empty() && reports[j].path != "-" && same(r.path, reports[j].path))
        throw std::invalid_argument(std::string(reports[j].option) + " and " + r.option + " name one file '" +
                                    r.path + "'");
  }
  for (const auto& r : reports) {
    if (r.path != "-") {
      check_writable(r.path);
      continue;
    }
    if (to_stdout)
      throw std::invalid_argument(std::string(to_stdout->option) + " - and " + r.option +
                                  " - : only one report can go to stdout");
    to_stdout = &r;
  }
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
nlohmann::json read_report(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw std::invalid_argument("cannot read report '" + path + "': " +
                                (std::filesystem::exists(path, ec) ? "not a regular file" : "no such file"));
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("cannot read report '" + path + "'");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument("report '" + path + "' is not JSON: " + e.what());
  }
  int version = 0;
  try {
    version = validators::report_format_version(j);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("report '" + path + "': " + e.what());
  }
  if (version == 0)
    std::printf("note     %s has no \"format\" field: a report written before normgate versioned its reports, "
                "read as version 0 (the fields of version 1; docs/schemas.md)\n",
                path.c_str());
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
  add_derive(app, cmds);
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

CLI::Option* add_plugin_option(CLI::App* sub, std::vector<std::string>& paths) {
  return sub
      ->add_option("--plugin", paths,
                   "Plugin library (LIB.so, the C ABI of capi/include/normgate/plugin.h) whose variants routes, "
                   "--variant and reports may name; repeatable, loaded before any work (a bad one: exit 2)")
      ->allow_extra_args(false);
}

void load_plugins(const std::vector<std::string>& paths) {
  if (!paths.empty()) plugin::register_plugins(paths);
}

/// Throws std::invalid_argument (exit 2) before any work when `path`'s folder
/// does not exist or is not writable, so a long check never fails at the end.
void check_writable(const std::string& path) {
  if (path.empty()) return;
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec) || ::access(dir.c_str(), W_OK) != 0)
    throw std::invalid_argument("cannot write '" + path + "': folder '" + dir.string() +
                                "' does not exist or is not writable");
  if (fs::is_directory(path, ec))
    throw std::invalid_argument("cannot write '" + path + "': it is a folder (give a file name)");
  if (fs::exists(path, ec) && ::access(path.c_str(), W_OK) != 0)
    throw std::invalid_argument("cannot write '" + path + "': the file exists and is not writable");
}

}  // namespace normgate::app
