// tests/cli/cli_util.h: run the normgate binary as a user does and capture
// what it printed and its exit code (shared by the CLI tests).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "util/scratch_files.h"  // contains, slurp, fresh_dir

namespace normgate::test {

/// Exit code (-1 when the process did not exit normally) and stdout+stderr.
struct CliRun {
  int code = -1;
  std::string out;
};

/// Path of the normgate binary of this build.
inline std::string normgate_bin() { return std::string(NORMGATE_BINARY_DIR) + "/apps/normgate"; }

/// Run `PREFIX normgate ARGS` through the shell, stderr merged into stdout
/// (PREFIX: environment settings or a wrapper such as `timeout 60`).
inline CliRun run_normgate_with(const std::string& prefix, const std::string& args) {
  const std::string cmd = prefix + (prefix.empty() ? "" : " ") + normgate_bin() + " " + args + " 2>&1";
  CliRun r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

/// Run `normgate ARGS` through the shell, stderr merged into stdout.
inline CliRun run_normgate(const std::string& args) { return run_normgate_with("", args); }

/// `normgate ARGS` under coreutils' timeout: killed after `seconds` (exit
/// 124), so a command that hangs fails its test instead of stalling it.
inline CliRun run_normgate_timeout(const std::string& args, int seconds) {
  return run_normgate_with("timeout " + std::to_string(seconds), args);
}

/// A report without the lines that hold the time of the run (Markdown
/// "- date: ...", JSON "date": ...): what must equal between two runs.
inline std::string without_dates(const std::string& text) {
  std::istringstream in(text);
  std::string line, out;
  while (std::getline(in, line))
    if (!contains(line, "- date: ") && !contains(line, "\"date\":")) out += line + "\n";
  return out;
}

}  // namespace normgate::test
