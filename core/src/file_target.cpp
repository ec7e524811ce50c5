// core/src/file_target.cpp: rename_target (file_target.h).
#include "normgate/core/file_target.h"

#include <filesystem>
#include <system_error>

namespace normgate::core {

std::string rename_target(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty() || !fs::is_symlink(fs::symlink_status(path, ec))) return path;
  // Follow the chain link by link: weakly_canonical alone stops at a
  // dangling link (its status, through the link, is "not found") and
  // returned the link itself, so the rename replaced the link.
  fs::path p = fs::absolute(fs::path(path), ec);
  if (ec) return path;
  for (int hops = 0; fs::is_symlink(fs::symlink_status(p, ec)); ++hops) {
    if (ec || hops >= 40) return path;  // a loop, or unreadable
    const fs::path to = fs::read_symlink(p, ec);
    if (ec) return path;
    p = to.is_absolute() ? to : p.parent_path() / to;
  }
  const fs::path real = fs::weakly_canonical(p, ec);
  return ec || real.empty() ? path : real.string();
}

}  // namespace normgate::core
