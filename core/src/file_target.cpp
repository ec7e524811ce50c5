// core/src/file_target.cpp: rename_target (file_target.h).
#include "normgate/core/file_target.h"

#include <filesystem>
#include <system_error>

namespace normgate::core {

std::string rename_target(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty() || !fs::is_symlink(fs::symlink_status(path, ec))) return path;
  const fs::path real = fs::weakly_canonical(fs::path(path), ec);
  return ec || real.empty() ? path : real.string();
}

}  // namespace normgate::core
