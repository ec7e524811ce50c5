// core/src/file_target.cpp: rename_target (file_target.h).
#include "normgate/core/file_target.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
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

int create_replacement(const std::string& tmp, const std::string& target) {
  struct stat st {};
  const bool had = ::stat(target.c_str(), &st) == 0;
  const mode_t mode = had ? (st.st_mode & 0777) : 0644;
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0 || !had || ::fchmod(fd, mode) == 0) return fd;
  const int e = errno;
  ::close(fd);
  ::unlink(tmp.c_str());
  errno = e;
  return -1;
}

std::string regular_file_problem(const std::string& path) {
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (st.type() == std::filesystem::file_type::not_found) return "no such file";
  if (ec) return ec.message();
  if (std::filesystem::is_directory(st)) return "is a directory";
  if (!std::filesystem::is_regular_file(st)) return "not a regular file";
  return "";
}

}  // namespace normgate::core
