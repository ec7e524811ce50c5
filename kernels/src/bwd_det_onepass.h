// kernels/src/bwd_det_onepass.h (internal): the workspace layout of
// bwd_det_onepass, shared by its launcher (bwd_det_onepass.cu) and the
// workspace rule (api.cpp bwd_workspace_bytes). No CUDA needed.
//
//   [0, P)        the FP64 chunk partials [num_chunks, H] (bwd_det_chunked's
//                 layout), P = num_chunks * H * 8 bytes
//   [C, C + 4)    the ticket counter (uint32), C = P rounded up to 16
//   total         C + kOnepassTicketBytes (16: keeps the size a multiple of 16)
#pragma once

#include <cstddef>
#include <cstdint>

#include "normgate/kernels/chunk_plan.h"
#include "normgate/kernels/plan.h"

namespace normgate::kernels::detail {

/// Bytes reserved for the ticket counter (one uint32, padded to 16).
inline constexpr size_t kOnepassTicketBytes = 16;

/// Byte offset of the ticket counter for `rows` normalized rows of H columns
/// (rows >= 1, 1 <= H <= kMaxH): the partials' size rounded up to 16.
inline size_t onepass_ticket_offset(int64_t rows, int64_t H) {
  const size_t partials = static_cast<size_t>(num_chunks(rows, H)) * static_cast<size_t>(H) * sizeof(double);
  return (partials + 15) / 16 * 16;
}

/// bwd_det_onepass's workspace in bytes (rows >= 1).
inline size_t onepass_workspace_bytes(int64_t rows, int64_t H) {
  return onepass_ticket_offset(rows, H) + kOnepassTicketBytes;
}

}  // namespace normgate::kernels::detail
