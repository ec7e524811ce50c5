// core/src/host_memory.cpp: host_memory and keep_large_blocks (host_memory.h).
#include "normgate/core/host_memory.h"

#include <fcntl.h>
#if defined(__GLIBC__) || defined(__linux__)
#include <malloc.h>
#endif
#include <sys/stat.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstdio>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace normgate::core {
namespace {

// Up to `max` bytes of `file` when it is a regular file (cgroup and /proc
// files are), else "" (missing, unreadable, a FIFO or a device: never
// blocks, never reads without bound).
std::string read_small(const std::string& file, size_t max) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return "";
  struct stat st {};
  std::string out;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    char buf[4096];
    while (out.size() < max) {
      const ssize_t n = ::read(fd, buf, std::min(sizeof buf, max - out.size()));
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  return out;
}

// The limit in `file`, or 0 when it is missing, unreadable, "max" or v1's
// "no limit" (a page-rounded 2^63 - 1; anything from 2^62 up is taken as none).
uint64_t read_limit(const std::string& file) {
  std::istringstream in(read_small(file, 64));
  std::string text;
  if (!(in >> text) || text == "max") return 0;
  uint64_t v = 0;
  for (char ch : text) {
    if (ch < '0' || ch > '9') return 0;
    const uint64_t d = static_cast<uint64_t>(ch - '0');
    if (v > (UINT64_MAX - d) / 10) return 0;
    v = v * 10 + d;
  }
  return v >= (uint64_t{1} << 62) ? 0 : v;
}

// `dir` (a cgroup path such as "/a/b") and each of its ancestors, "/" last.
std::vector<std::string> self_and_ancestors(std::string dir) {
  std::vector<std::string> out;
  while (!dir.empty() && dir != "/") {
    out.push_back(dir);
    const size_t slash = dir.find_last_of('/');
    dir = slash == std::string::npos || slash == 0 ? "/" : dir.substr(0, slash);
  }
  out.push_back("/");
  return out;
}

}  // namespace

uint64_t stack_size_text_bytes(const char* text) {
  if (text == nullptr) return 0;
  const std::string t(text);
  size_t i = 0;
  while (i < t.size() && t[i] == ' ') ++i;
  size_t j = i;
  while (j < t.size() && t[j] >= '0' && t[j] <= '9') ++j;
  if (j == i || j - i > 15) return 0;
  uint64_t n = std::stoull(t.substr(i, j - i));
  while (j < t.size() && t[j] == ' ') ++j;
  uint64_t unit = 1024;  // OpenMP: kilobytes without a suffix
  if (j < t.size()) {
    switch (t[j] | 0x20) {
      case 'b': unit = 1; break;
      case 'k': unit = uint64_t{1} << 10; break;
      case 'm': unit = uint64_t{1} << 20; break;
      case 'g': unit = uint64_t{1} << 30; break;
      default: return 0;
    }
    ++j;
    while (j < t.size() && t[j] == ' ') ++j;
    if (j != t.size()) return 0;
  }
  return n * unit;
}

uint64_t thread_stacks_bytes() {
  const unsigned hw = std::thread::hardware_concurrency();
  const uint64_t workers = hw > 1 ? hw - 1 : 0;
  uint64_t each = stack_size_text_bytes(std::getenv("OMP_STACKSIZE"));
  if (each == 0) each = stack_size_text_bytes(std::getenv("GOMP_STACKSIZE"));
  if (each == 0) {
    struct rlimit rl {};
    each = ::getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? static_cast<uint64_t>(rl.rlim_cur)
                                                                               : uint64_t{2} << 20;
  }
  return workers * each;
}

uint64_t HostMemory::address_left() const {
  return address_limit == 0 ? 0 : address_used < address_limit ? address_limit - address_used : 1;
}

uint64_t HostMemory::usable() const {
  uint64_t u = 0;
  for (const uint64_t b : {physical, cgroup_limit, address_left()})
    if (b != 0) u = u == 0 ? b : std::min(u, b);
  return u;
}

std::string gib_and_bytes(unsigned __int128 bytes) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.1f GiB (%.0f bytes)", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0),
                static_cast<double>(bytes));
  return buf;
}

std::string HostMemory::describe_usable() const {
  const uint64_t have = usable();
  if (have == 0) return "";
  if (address_limit != 0 && address_left() == have)
    return "this process's address-space limit (ulimit -v) of " + gib_and_bytes(address_limit) + ", of which " +
           gib_and_bytes(have) + " is left (" + (address_used != 0 ? gib_and_bytes(address_used) + " in use" : "in use unknown") +
           ")";
  if (cgroup_limit == have) return "this process's cgroup limit of " + gib_and_bytes(have) + " (" + cgroup_file + ")";
  return "this host's " + gib_and_bytes(have);
}

HostMemory host_memory(const std::string& root, const std::string& self_cgroup) {
  HostMemory m;
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) m.physical = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
  if (struct rlimit rl {}; ::getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
    m.address_limit = static_cast<uint64_t>(rl.rlim_cur);
  // statm's first field: the address space in pages.
  if (std::istringstream statm(read_small("/proc/self/statm", 256)); page > 0) {
    unsigned long long size_pages = 0;
    if (statm >> size_pages) m.address_used = static_cast<uint64_t>(size_pages) * static_cast<uint64_t>(page);
  }
  std::vector<std::string> files;
  std::istringstream in(read_small(self_cgroup, 64 * 1024));
  std::string line;
  while (std::getline(in, line)) {
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    // An absolute path below the mount: not outside it ("/.." where a
    // namespace hides the cgroup), not absurdly long.
    if (path.empty() || path[0] != '/' || path.size() > 4096 || (path + "/").find("/../") != std::string::npos ||
        (path + "/").find("/./") != std::string::npos)
      continue;
    bool memory = controllers.empty();  // v2: "0::PATH"
    std::istringstream cs(controllers);
    for (std::string c; std::getline(cs, c, ',');) memory = memory || c == "memory";
    if (!memory) continue;
    for (const std::string& d : self_and_ancestors(path)) {
      const std::string sub = d == "/" ? "" : d;
      files.push_back(controllers.empty() ? root + sub + "/memory.max" : root + "/memory" + sub + "/memory.limit_in_bytes");
    }
  }
  files.push_back(root + "/memory.max");
  files.push_back(root + "/memory/memory.limit_in_bytes");
  for (const std::string& f : files) {
    const uint64_t v = read_limit(f);
    if (v != 0 && (m.cgroup_limit == 0 || v < m.cgroup_limit)) {
      m.cgroup_limit = v;
      m.cgroup_file = f;
    }
  }
  return m;
}

bool keep_large_blocks() {
#if defined(__GLIBC__)
  const char* keep = std::getenv("NORMGATE_MALLOC_DEFAULTS");
  if (keep != nullptr && std::string(keep) == "1") return false;
  mallopt(M_MMAP_THRESHOLD, INT_MAX);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
  mallopt(M_ARENA_MAX, 1);
  return true;
#else
  return false;
#endif
}

}  // namespace normgate::core
