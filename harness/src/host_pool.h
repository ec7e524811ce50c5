// harness/src/host_pool.h (internal, no CUDA): the host side of a GPU run's
// downloads: a pool of reused host vectors (ReuseHostBuffers, runner.h) and
// a multi-threaded copy out of the pinned staging buffers (host_download.h).
//
// Why: a download into a fresh std::vector first faults in (and the kernel
// zeroes) every page it writes, in the one thread that copies: about 4.3 GB
// per plain [131072, 4096] case of the gate. A vector kept from an earlier
// case has its pages mapped already, and its copy can be split over threads.
// The vectors stay ordinary std::vector memory (not registered with CUDA), so
// whoever ends up owning one may free it at any time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace normgate::kernels::detail {

/// Ask the kernel to back [p, p + bytes) with transparent huge pages
/// (madvise MADV_HUGEPAGE on the 2 MiB-aligned part; Linux only, where THP is
/// "madvise" or "always"; a refusal is ignored, nothing else changes), for
/// the host vectors of the downloads, called before their pages are first
/// touched. Why: the direct path page-locks each destination for its copy
/// (cudaHostRegister) and a fresh vector faults in every page; on 2 MiB
/// pages both cost 512x fewer page operations. Measured on the H200 host
/// with glibc's equivalent (GLIBC_TUNABLES=glibc.malloc.hugetlb=1): a
/// forward window's downloads 7.1e8-8.0e8 -> 1.4e9-1.5e9 elements/s
/// (docs/perf/oracle-and-gate-throughput.md, D17). Ranges under
/// kHugeAdviceMinBytes are left alone.
void advise_huge_pages(const void* p, size_t bytes) noexcept;
inline constexpr size_t kHugeAdviceMinBytes = size_t{4} << 20;

/// Copy `bytes` bytes from src to dst (not overlapping) with up to `threads`
/// threads (OpenMP; at least 4 MiB per thread, so small copies stay on the
/// calling thread). threads <= 1: one memcpy.
void copy_bytes(void* dst, const void* src, size_t bytes, int threads);

/// Threads for the copies out of the staging buffers into reused vectors
/// (host_download.h): NORMGATE_COPY_THREADS when it is set to 1..64, else 1
/// (the calling thread alone, appending, as before). Not more by default: in the gate the copies overlap
/// the oracle half, which runs on every core but one, and with the copies
/// going to reused memory the GPU half is expected to be the shorter one, so
/// extra copy threads would only take cores from the oracle (and on the
/// 2-core dev machine two threads were no faster in the gate's pattern:
/// docs/perf/oracle-and-gate-throughput.md, D7). Read at every call.
int copy_threads();

/// How run_gpu's BF16 [rows, cols] tensors reach host memory
/// (host_download.h download_rows_into), from NORMGATE_DOWNLOAD, read at
/// every call (any other non-empty value than "direct" or "staged" is said
/// once on stderr and taken as direct): "staged" copies them out of the pinned staging buffers on
/// the CPU (copy_threads() threads); "direct" (the default, and what any
/// other value gives) page-locks the destination vector's pages for the one
/// copy (cudaHostRegister), lets the DMA engine write them, and unlocks them
/// before returning, so no CPU copies the bulk of the bytes; the first and
/// last rows that share a page with other memory, and tensors under
/// kDirectMinBytes, still go through the staging buffers, as does a tensor
/// whose registration the driver refuses. Same bytes either way.
enum class DownloadPath { direct, staged };
DownloadPath download_path();

/// Tensors smaller than this many bytes are always staged.
inline constexpr size_t kDirectMinBytes = size_t{4} << 20;

/// Counters of the direct path since the process started (tests): bytes the
/// DMA engine wrote straight into registered vectors, downloads that fell
/// back to staging because a registration failed, and registrations live
/// now (0 whenever no download is running: each is undone before its
/// download returns).
struct DirectDownloadStats {
  uint64_t bytes = 0;
  uint64_t refused = 0;
  int64_t live = 0;
};
DirectDownloadStats direct_download_stats();
/// Update the counters (host_download.h's direct path only).
void note_direct_download(uint64_t bytes, uint64_t refused, int64_t live_delta) noexcept;

/// The pool's limits: vectors under kMinPooledElems elements are neither
/// kept nor handed out; at most kMaxPooled vectors and kMaxPooledBytes of
/// capacity (bytes) are kept (the smallest go first; a single vector is kept
/// whatever its size). 24 GiB holds one res case at [131072, 6144] (seven
/// 1.6 GB tensors, reserved at 2x) with room, without letting a long campaign
/// keep 16 such vectors (~50 GB) per process.
inline constexpr size_t kMinPooledElems = size_t{1} << 19;  // 1 MiB of BF16
inline constexpr size_t kMaxPooled = 16;
inline constexpr size_t kMaxPooledBytes = size_t{24} << 30;

/// Inside a ReuseHostBuffers scope: a vector for a BF16 tensor of n elements,
/// from the pool when one there has capacity >= n (the smallest such; it
/// keeps its size and old contents: the caller clears or overwrites them),
/// else an empty vector with capacity 2n (room for larger later cases
/// without a new allocation; pages are mapped only where written). A pooled
/// vector too small for n is freed first (the largest one, when none fits).
/// Outside a scope, or for n < kMinPooledElems: an empty vector (the caller
/// allocates as before). May throw std::bad_alloc.
std::vector<uint16_t> take_host_u16(size_t n);

/// Hand v's storage to the pool (v is left empty). Kept only inside a
/// ReuseHostBuffers scope, and only vectors of at least kMinPooledElems
/// capacity; the pool holds at most kMaxPooled vectors (the smallest are
/// freed beyond that); everything else is freed here.
void give_host_u16(std::vector<uint16_t>& v) noexcept;

/// Vectors in the pool now, and their total capacity in bytes (tests).
struct HostPoolStats {
  size_t vectors = 0;
  size_t bytes = 0;
};
HostPoolStats host_pool_stats();

}  // namespace normgate::kernels::detail
