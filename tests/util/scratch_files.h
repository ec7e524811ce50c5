// tests/util/scratch_files.h: the file helpers of tests that write and read
// back files (a fresh scratch folder, a whole file, a substring test), shared
// by the CLI tests (tests/cli/cli_util.h) and the gate tests
// (tests/gate/gate_test_util.h).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace normgate::test {

/// True when `needle` occurs in `s`.
inline bool contains(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

/// The whole content of the file at `path` ("" when it cannot be read).
inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// Write `text` to the file at `path` (created or truncated).
inline void spit(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

/// How many times `what` occurs in `s` (not overlapping).
inline size_t occurrences(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t i = s.find(what); i != std::string::npos; i = s.find(what, i + what.size())) ++n;
  return n;
}

/// A fresh, empty folder NORMGATE_BINARY_DIR/PREFIX_NAME_PID (removed first
/// if a killed run left it); its path.
inline std::string fresh_dir(const std::string& prefix, const std::string& name) {
  const std::string d = std::string(NORMGATE_BINARY_DIR) + "/" + prefix + "_" + name + "_" + std::to_string(::getpid());
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

}  // namespace normgate::test
