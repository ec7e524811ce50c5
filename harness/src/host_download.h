// harness/src/host_download.h (internal): device-to-host copies through
// pinned staging buffers.
//
// A cudaMemcpy into pageable memory is staged by the driver with CPU copies
// that compete with the oracle's threads (measured on the H200 host: about
// 0.9 GB/s while the oracle ran). Here the DMA engine writes into two pinned
// buffers (double-buffered, kStageBytes each, one pair per process, used
// under a mutex) and the calling
// thread copies each finished chunk into the destination while the next chunk
// is in flight, into a fresh vector or one kept from an earlier case
// (ReuseHostBuffers, host_pool.h), optionally on copy_threads() threads.
#pragma once

#include <cstddef>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "host_pool.h"
#include "normgate/harness/pipeline.h"

namespace normgate::kernels::detail {

inline constexpr size_t kStageBytes = size_t{64} << 20;
static_assert(2 * kStageBytes == validators::kPinnedStagingBytes,
              "pipeline.h's kPinnedStagingBytes (the host-memory checks) is the staging pair's size");

/// Receives the downloaded bytes in order: `bytes` bytes at `chunk` (pinned
/// staging memory, valid only during the call), the next ones after those of
/// the previous call.
using DownloadSink = std::function<void(const void* chunk, size_t bytes)>;

/// Copy `rows` rows of `width` bytes from device `src` (row pitch `pitch`
/// bytes >= width) on stream s into `sink`, rows packed (width bytes apart),
/// in order; returns when the sink has had every byte. Throws
/// std::runtime_error on CUDA errors, std::invalid_argument when pitch < width.
void download_rows(const DownloadSink& sink, const void* src, size_t width, size_t pitch, size_t rows, cudaStream_t s);

/// download_path()'s direct path (host_pool.h): copy `rows` rows of `width`
/// bytes from device `src` (row pitch `pitch` >= width) on stream s into
/// host `dst` (rows*width bytes, rows packed). The whole pages inside dst are
/// page-locked (cudaHostRegister) for this copy only and written by the DMA
/// engine; the rows (or, when pitch == width, the bytes) that share a page
/// with memory outside dst go through the staging buffers (download_rows).
/// Returns when every byte has landed and the pages are unlocked again.
/// Returns false, having written nothing, when the tensor is under
/// kDirectMinBytes, too small to hold whole pages, or the driver refuses the
/// registration (counted in direct_download_stats().refused); the caller then
/// stages the copy. Throws std::runtime_error on CUDA errors of the copies,
/// std::logic_error if a staged piece comes back short (the pages are
/// unlocked first, after the stream has finished).
bool download_rows_direct(void* dst, const void* src, size_t width, size_t pitch, size_t rows, cudaStream_t s);

/// A sink that appends the downloaded bytes, as elements of T, to `dst`
/// (whose capacity the caller reserved: no reallocation while appending).
template <class T>
DownloadSink append_to(std::vector<T>& dst) {
  return [&dst](const void* chunk, size_t bytes) {
    const T* p = static_cast<const T*>(chunk);
    dst.insert(dst.end(), p, p + bytes / sizeof(T));
  };
}

/// A sink that writes the downloaded bytes in order into dst[0, bytes)
/// (copy_bytes with copy_threads() threads); `*written` counts them. Throws
/// std::logic_error when more than `bytes` arrive.
inline DownloadSink write_to(void* dst, size_t bytes, size_t* written) {
  return [dst, bytes, written](const void* chunk, size_t n) {
    if (n > bytes - *written) throw std::logic_error("download: more bytes than the destination holds");
    copy_bytes(static_cast<char*>(dst) + *written, chunk, n, copy_threads());
    *written += n;
  };
}

/// As download_rows into `dst`, which then holds rows*width bytes, as
/// elements of T (width must be a multiple of sizeof(T)). With
/// download_path() direct (the default) and at least kDirectMinBytes, dst is
/// resized to its elements and download_rows_direct fills it. Staged (or
/// when that returns false): by default the
/// vector is cleared and filled by appending the chunks to reserved memory,
/// so its elements are written once (resize() followed by a copy would
/// first zero them: one more pass over every downloaded byte, and a fresh
/// vector's pages would all fault in during that pass). A vector from the
/// pool of ReuseHostBuffers keeps its storage (clear() and reserve() do not
/// reallocate), so the copy lands in pages mapped by an earlier case. With
/// copy_threads() > 1, a non-empty vector with the capacity is resized
/// instead (which zeroes only the elements past its old size) and
/// overwritten with a copy split over that many threads.
template <class T>
void download_rows_into(std::vector<T>& dst, const void* src, size_t width, size_t pitch, size_t rows,
                        cudaStream_t s) {
  if (width % sizeof(T) != 0)
    throw std::invalid_argument("download_rows_into: width " + std::to_string(width) + " is not a multiple of " +
                                std::to_string(sizeof(T)));
  const size_t n = rows * (width / sizeof(T));
  if (download_path() == DownloadPath::direct && n * sizeof(T) >= kDirectMinBytes) {
    if (dst.capacity() < n) {
      dst.clear();
      dst.reserve(n);
      advise_huge_pages(dst.data(), dst.capacity() * sizeof(T));  // before resize touches its pages
    }
    dst.resize(n);  // zeroes only the elements past the old size (a pooled vector keeps its pages)
    if (download_rows_direct(dst.data(), src, width, pitch, rows, s)) return;
  }
  if (copy_threads() > 1 && !dst.empty() && dst.capacity() >= n) {
    dst.resize(n);
    size_t written = 0;
    download_rows(write_to(dst.data(), n * sizeof(T), &written), src, width, pitch, rows, s);
    if (written != n * sizeof(T)) throw std::logic_error("download_rows_into: fewer bytes than rows*width");
    return;
  }
  if (dst.capacity() < n) {
    dst.clear();
    dst.reserve(n);
    advise_huge_pages(dst.data(), dst.capacity() * sizeof(T));
  }
  dst.clear();
  download_rows(append_to(dst), src, width, pitch, rows, s);
}

/// `n` contiguous elements of T from device `src` into `dst` (cleared, then
/// holding them; see download_rows_into): by the direct path when
/// download_path() says so and it applies, else staged as rows of 1 MiB (a
/// multiple of sizeof(T)) and a last partial row.
template <class T>
void download_into(std::vector<T>& dst, const void* src, size_t n, cudaStream_t s) {
  if (download_path() == DownloadPath::direct && n * sizeof(T) >= kDirectMinBytes) {
    if (dst.capacity() < n) {
      dst.clear();
      dst.reserve(n);
      advise_huge_pages(dst.data(), dst.capacity() * sizeof(T));
    }
    dst.resize(n);
    if (download_rows_direct(dst.data(), src, n * sizeof(T), n * sizeof(T), 1, s)) return;
  }
  dst.clear();
  dst.reserve(n);
  const size_t bytes = n * sizeof(T);
  constexpr size_t kRow = size_t{1} << 20;
  const size_t full = bytes / kRow, rest = bytes % kRow;
  const DownloadSink append = append_to(dst);
  if (full > 0) download_rows(append, src, kRow, kRow, full, s);
  if (rest > 0) download_rows(append, static_cast<const char*>(src) + full * kRow, rest, rest, 1, s);
}

}  // namespace normgate::kernels::detail
