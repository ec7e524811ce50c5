// tests/gate/gate_test_util.h: what the gate tests share: the small route
// table and fast options that keep a gate within seconds on the CPU models,
// reports without their date, journal files line by line, the message of a
// thrown std::invalid_argument. File helpers: util/scratch_files.h.
#pragma once

#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "normgate/gate/gate.h"
#include "util/scratch_files.h"  // contains, slurp, fresh_dir

namespace normgate::test {

/// tests/data/routes/small.toml: windows of H = 64 and 256, T <= 700.
inline const std::string kSmallTable = std::string(NORMGATE_SOURCE_DIR) + "/tests/data/routes/small.toml";

/// Small, fast options on `table`: 3 families x 1 seed, 4 T per window, 2
/// dense points each side, fresh seeds at the default factor (2x), CPU
/// models, 1 thread, version and commit "test".
inline validators::GateOptions small_opts(const std::string& table = kSmallTable) {
  validators::GateOptions o;
  o.table_path = table;
  o.seeds = "3x1";
  o.t_per_window = 4;
  o.dense_points = 2;
  o.backend = validators::Backend::cpu;
  o.threads = 1;
  o.normgate_version = "test";
  o.normgate_commit = "test";
  return o;
}

/// small_opts without refinement (no dense grid, no fresh seeds): the grid
/// is the whole campaign.
inline validators::GateOptions grid_only_opts(const std::string& table = kSmallTable) {
  validators::GateOptions o = small_opts(table);
  o.dense_points = 0;
  o.fresh_factor = 0;
  return o;
}

/// A Markdown report without its "- date: " line.
inline std::string strip_date(const std::string& md) {
  std::istringstream in(md);
  std::string line, out;
  while (std::getline(in, line))
    if (line.rfind("- date: ", 0) != 0) out += line + "\n";
  return out;
}

/// A JSON report without its "date" member.
inline nlohmann::json strip_date(nlohmann::json j) {
  j.erase("date");
  return j;
}

/// The JSON report of `r` without its date, as text.
inline std::string json_without_date(const validators::GateResult& r) {
  return strip_date(validators::gate_to_json(r)).dump(1);
}

/// The lines of the file at `path`, without their newlines.
inline std::vector<std::string> lines_of(const std::string& path) {
  std::istringstream in(slurp(path));
  std::vector<std::string> v;
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

/// Replace the file at `path` by `text`.
inline void put(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

/// Replace the file at `path` by `lines`, each ended by a newline.
inline void put_lines(const std::string& path, const std::vector<std::string>& lines) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  for (const auto& l : lines) f << l << "\n";
}

/// The message of the std::invalid_argument `f` throws ("" when it returns).
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace normgate::test
