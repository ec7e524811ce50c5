// normgate/core/host_memory.h: how much memory this process may use, for
// the checks that refuse a run before any work when its largest case
// cannot fit (apps' require_host_memory), and how the process's heap keeps
// a case's large blocks for the next case (keep_large_blocks).
#pragma once

#include <cstdint>
#include <string>

namespace normgate::core {

/// What bounds this process's memory.
struct HostMemory {
  uint64_t physical = 0;       ///< bytes of physical memory (sysconf); 0 when the host does not say
  uint64_t cgroup_limit = 0;   ///< the tightest memory limit of this process's cgroups, bytes; 0: none set
  std::string cgroup_file;     ///< the file that limit was read from ("" without one)
  /// This process's address-space limit (getrlimit RLIMIT_AS, the soft
  /// limit `ulimit -v` sets), bytes; 0: unlimited. An allocation past it
  /// fails as surely as one past the host's memory.
  uint64_t address_limit = 0;
  /// This process's address space in use when host_memory() ran
  /// (/proc/self/statm's size), bytes; 0 where unknown. Only the rest of
  /// address_limit can still be allocated.
  uint64_t address_used = 0;
  /// min(physical, cgroup_limit, what is left of address_limit) over the
  /// bounds that are known (0: none known). What is left of address_limit
  /// is address_limit - address_used, and 1 (not 0, "unknown") when the
  /// process already uses all of it.
  uint64_t usable() const;
  /// What is left of address_limit: address_limit - address_used, 1 when
  /// the process already uses all of it, 0 without a limit.
  uint64_t address_left() const;
  /// The bound usable() returns, in words, for messages: "this process's
  /// address-space limit (ulimit -v) of A GiB (B bytes), of which C GiB (D
  /// bytes) is left (E in use)" ("in use unknown" without statm), "this
  /// process's cgroup limit of ... (FILE)" or "this host's ..."; "" when no
  /// bound is known.
  std::string describe_usable() const;
};

/// The address space the stacks of a run's worker threads take once they
/// start, bytes: (std::thread::hardware_concurrency() - 1) threads (the
/// OpenMP default; the main thread's stack is already counted) times one
/// stack: OMP_STACKSIZE (else GOMP_STACKSIZE) when set and readable, else
/// the soft RLIMIT_STACK (`ulimit -s`; glibc's default thread stack), 2 MiB
/// when that is unlimited (glibc's x86-64 default then). For the
/// host-memory checks: `ulimit -v` counts a stack whole as soon as the
/// thread exists (libgomp exits 1 when it cannot make one). Never throws.
uint64_t thread_stacks_bytes();
/// An OpenMP stack size ("512K", "8 M", "4096": kilobytes without a
/// suffix; B, K, M, G any case) in bytes; 0 for null or text that is not one.
uint64_t stack_size_text_bytes(const char* text);

/// "X.Y GiB (N bytes)": bytes in GiB to one decimal and exactly (two close
/// figures stay apart).
std::string gib_and_bytes(unsigned __int128 bytes);

/// Physical memory and the memory limits of the cgroups this process is in
/// (Linux): cgroup v2 `memory.max` and v1 `memory.limit_in_bytes`, read for
/// the process's own cgroup (the paths in `self_cgroup`, the format of
/// /proc/self/cgroup: "ID:CONTROLLERS:PATH" a line, "0::PATH" for v2) and
/// every ancestor up to `root` (the cgroup file system's mount; v1 limits
/// under root/memory), since a limit anywhere above the process applies to
/// it; also root itself, which a container's own namespace shows as its
/// cgroup. "max", and v1's "no limit" values (2^62 and above), are no limit.
/// Files that are missing, unreadable or not regular files are skipped, and
/// paths with "." or ".." components (outside the mount) or longer than
/// 4096 bytes; at most 64 KiB of `self_cgroup` and 64 bytes of a limit file
/// are read. Never throws, never blocks.
HostMemory host_memory(const std::string& root = "/sys/fs/cgroup", const std::string& self_cgroup = "/proc/self/cgroup");

/// A check or gate case allocates its inputs and downloaded outputs (up to
/// ~1.6 GB each at [131072, 6144]) and frees them when the case ends. glibc
/// serves such blocks with fresh mmap()s, so every case would page-fault and
/// zero gigabytes again (dev machine: 8 blocks of 512 MiB allocated on a
/// worker thread cost 2.4 s, 0.33 s from one reused heap). This keeps them
/// in one heap instead: blocks up to 2 GiB from the heap, freed memory kept,
/// one arena (mallopt M_MMAP_THRESHOLD and M_TRIM_THRESHOLD = INT_MAX,
/// M_ARENA_MAX = 1; docs/perf/oracle-and-gate-throughput.md, D7). Call it
/// first in main, before any allocation it should govern. Does nothing when
/// NORMGATE_MALLOC_DEFAULTS is "1" (glibc's defaults kept), or without glibc.
/// Returns whether it applied the settings. Never throws.
bool keep_large_blocks();

}  // namespace normgate::core
