// normgate/seeds/generate.h: bulk host generation of a case's input tensors.
//
// Every element comes from family_value() (families.h), so a GPU generator
// using the same function yields byte-identical tensors, and any sub-block can
// be regenerated alone.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "normgate/core/types.h"
#include "normgate/seeds/case_id.h"

namespace normgate::seeds {

/// A case's inputs on the host, contiguous over normalized rows
/// (row r = t*heads + h; the head forms' strided layouts are views built by
/// the caller on top of these contiguous rows, or by the form's own code).
///   x, dy:  BF16 bits [rows, cols]   (form res: x holds h)
///   u:      BF16 bits [rows, cols]   (form res only: the residual branch)
///   dh_new: BF16 bits [rows, cols]   (form res only: gradient reaching h_new)
///   w_bf16: BF16 bits [cols]         (when c.w == bf16)
///   w_f32:  FP32 [cols]              (when c.w == fp32)
struct HostInputs {
  CaseId id;
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<uint16_t> x, dy, u, dh_new, w_bf16;
  std::vector<float> w_f32;

  RowView<uint16_t> x_view() const { return RowView<uint16_t>::plain(x.data(), rows, cols); }
  RowView<uint16_t> dy_view() const { return RowView<uint16_t>::plain(dy.data(), rows, cols); }
  WeightView w_view() const {
    return id.w == WDtype::bf16 ? WeightView{WDtype::bf16, w_bf16.data(), cols}
                                : WeightView{WDtype::fp32, w_f32.data(), cols};
  }
};

/// Generate all inputs of case c, OpenMP-parallel over rows (threads <= 0:
/// OpenMP default). Result is independent of the thread count.
/// Throws std::invalid_argument if rows*cols overflows or exceeds 2^40 elements.
HostInputs generate_host(const CaseId& c, int threads = 0);

/// SHA-256 digests (lowercase hex) of a case's input bytes, little-endian:
/// per tensor (x, dy, w, and u, dh_new for res) and of their concatenation in
/// that order ("all").
struct InputDigests {
  std::string x, dy, w, u, dh_new, all;
};
/// Digest the inputs. Uses OpenSSL's EVP SHA-256 (FIPS 180-4).
InputDigests digest(const HostInputs& in);

/// SHA-256 (lowercase hex) of a byte buffer (OpenSSL EVP, FIPS 180-4).
std::string sha256_hex(const void* data, size_t n);

}  // namespace normgate::seeds
