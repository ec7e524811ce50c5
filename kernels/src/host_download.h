// kernels/src/host_download.h (internal): device-to-host copies through
// pinned staging buffers.
//
// A cudaMemcpy into pageable memory is staged by the driver with CPU copies
// that compete with the oracle's threads (measured on the H200 host: about
// 0.9 GB/s while the oracle ran). Here the DMA engine writes into two pinned
// buffers (double-buffered, kStageBytes each, one pair per process, used
// under a mutex) and the calling
// thread copies each finished chunk into the destination while the next chunk
// is in flight.
#pragma once

#include <cstddef>

#include <cuda_runtime.h>

namespace normgate::kernels::detail {

inline constexpr size_t kStageBytes = size_t{64} << 20;

/// Copy `rows` rows of `width` bytes from device `src` (row pitch `pitch`
/// bytes >= width) to host `dst` (rows packed, width bytes apart) on stream s;
/// returns when dst holds the data. Throws std::runtime_error on CUDA errors.
void download_rows(void* dst, const void* src, size_t width, size_t pitch, size_t rows, cudaStream_t s);

/// Copy `bytes` contiguous bytes (as rows of 1 MiB and a last partial row).
inline void download(void* dst, const void* src, size_t bytes, cudaStream_t s) {
  constexpr size_t kRow = size_t{1} << 20;
  const size_t full = bytes / kRow, rest = bytes % kRow;
  if (full > 0) download_rows(dst, src, kRow, kRow, full, s);
  if (rest > 0)
    download_rows(static_cast<char*>(dst) + full * kRow, static_cast<const char*>(src) + full * kRow, rest, rest, 1, s);
}

}  // namespace normgate::kernels::detail
