// core/src/file_target.cpp: rename_target, temp names (file_target.h).
#include "normgate/core/file_target.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

namespace normgate::core {

std::vector<std::string> link_chain(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty()) return {};
  fs::path p = fs::absolute(fs::path(path), ec);
  if (ec) return {};
  std::vector<std::string> chain{p.string()};
  for (int hops = 0; fs::is_symlink(fs::symlink_status(p, ec)); ++hops) {
    if (ec || hops >= 40) return {};  // a loop, or unreadable
    const fs::path to = fs::read_symlink(p, ec);
    if (ec) return {};
    p = to.is_absolute() ? to : p.parent_path() / to;
    chain.push_back(p.string());
  }
  return chain;
}

std::string rename_target(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty() || !fs::is_symlink(fs::symlink_status(path, ec))) return path;
  // Follow the chain link by link: weakly_canonical alone stops at a
  // dangling link (its status, through the link, is "not found") and
  // returned the link itself, so the rename replaced the link.
  const std::vector<std::string> chain = link_chain(path);
  if (chain.empty()) return path;  // a loop, or unreadable
  const fs::path real = fs::weakly_canonical(chain.back(), ec);
  return ec || real.empty() ? path : real.string();
}

std::string temp_name_beside(const std::string& target, const char* kind) {
  static std::atomic<uint64_t> calls{0};
  return target + "." + kind + "." + std::to_string(::getpid()) + "." + std::to_string(++calls);
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

std::string write_problem(const std::string& path) {
  if (path.empty()) return "";
  namespace fs = std::filesystem;
  // The atomic write (and an approvals file's lock) goes to the folder of
  // the file a link points to, not the link's: check that one.
  const std::string real = rename_target(path);
  const fs::path dir = fs::path(real).has_parent_path() ? fs::path(real).parent_path() : fs::path(".");
  const std::string via = real == path ? "" : " (the folder of '" + real + "', where its link points)";
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return "folder '" + dir.string() + "' does not exist" + via;
  if (::access(dir.c_str(), W_OK) != 0)
    return "folder '" + dir.string() + "' is not writable" + via + ": " + std::strerror(errno);
  if (fs::is_directory(path, ec)) return "it is a folder (give a file name)";
  // A device, FIFO or socket: the rename that ends an atomic write would put
  // a regular file in its place.
  if (fs::exists(path, ec) && !fs::is_regular_file(path, ec))
    return "it exists and is not a regular file (the write would replace it)";
  if (fs::exists(path, ec) && ::access(path.c_str(), W_OK) != 0) return "the file exists and is not writable";
  return "";
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa{}, sb{};
  const bool ea = ::stat(a.c_str(), &sa) == 0, eb = ::stat(b.c_str(), &sb) == 0;
  if (ea && eb) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  if (ea != eb) return false;
  // Made absolute first: weakly_canonical leaves a relative path whose every
  // component is missing ("x.json") as it is, while "./x.json" becomes
  // absolute, so two spellings of one new file would compare unequal.
  namespace fs = std::filesystem;
  auto where = [](const std::string& p, std::error_code& e) {
    const fs::path abs = fs::absolute(rename_target(p), e);
    return e ? fs::path() : fs::weakly_canonical(abs, e);
  };
  std::error_code e1, e2;
  const auto ca = where(a, e1), cb = where(b, e2);
  return !e1 && !e2 && ca == cb;
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
