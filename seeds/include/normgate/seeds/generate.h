// normgate/seeds/generate.h: bulk host generation of a case's input tensors.
//
// Every element comes from family_value() (families.h), so a GPU generator
// using the same function yields byte-identical tensors, and any sub-block can
// be regenerated alone.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
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
/// OpenMP default). Element (r, j) of tensor t is
/// bf16_from_float(family_value(family_params(c), t, r, j)) (w_f32 holds the
/// binary32 value itself), so the result is independent of the thread count
/// and equal to what a device generator using family_value produces.
/// u and dh_new are filled for form res only (empty otherwise); exactly one
/// of w_bf16 / w_f32 is filled. Memory: 2 bytes per element per tensor.
/// Throws std::invalid_argument if c is invalid (validate_case) or rows*cols
/// overflows or exceeds 2^40 elements; std::bad_alloc if memory runs out.
HostInputs generate_host(const CaseId& c, int threads = 0);

/// Check that `in` holds case in.id's inputs (for inputs made elsewhere, e.g.
/// by the device generator, before an oracle relies on them), on a sample:
/// every column of rows 0 and rows-1 and of up to `samples` - 2 rows spread
/// evenly between (all rows when rows <= samples), for x, dy, and u, dh_new
/// for form res, plus all of w, each element recomputed as generate_host
/// writes it (family_value, BF16-rounded except w_f32). It catches inputs of
/// another case (seed, family, kappa, shape, form, weight dtype) or layout;
/// not a single wrong element in a row it does not visit. Cost: about
/// samples * H generator calls per tensor (OpenMP over the sampled rows,
/// threads <= 0: default).
/// Throws std::invalid_argument when a tensor's size is not the case's
/// (naming the tensor, its size and the expected one) or on the first sampled
/// element that differs (naming the tensor, row, column and both BF16/FP32
/// bit patterns), and for samples < 2.
void check_inputs_sample(const HostInputs& in, int samples = 64, int threads = 0);

/// SHA-256 digests (lowercase hex, 64 characters) of a case's input bytes,
/// little-endian (BF16 tensors 2 bytes per element, w_f32 4 bytes): per
/// tensor (x, dy, w = whichever of w_bf16/w_f32 the case uses, and u, dh_new
/// for res; u and dh_new are "" for other forms) and of their concatenation
/// in the order x, dy, w, u, dh_new ("all"). Shapes are not hashed: the case
/// id fixes them.
struct InputDigests {
  std::string x, dy, w, u, dh_new, all;
};
/// Digest the inputs. Uses OpenSSL's EVP SHA-256 (FIPS 180-4).
/// Throws std::runtime_error if OpenSSL fails.
InputDigests digest(const HostInputs& in);

/// SHA-256 (lowercase hex, 64 characters) of n bytes at data (OpenSSL EVP,
/// FIPS 180-4); data may be null when n == 0. Throws std::runtime_error if
/// OpenSSL fails.
std::string sha256_hex(const void* data, size_t n);

/// HMAC-SHA256 (RFC 2104, FIPS 198-1; lowercase hex, 64 characters) of n
/// bytes at data under `key` (any length, at least one byte; OpenSSL HMAC).
/// Test vectors: RFC 4231. Throws std::invalid_argument for an empty key,
/// std::runtime_error if OpenSSL fails.
std::string hmac_sha256_hex(std::string_view key, const void* data, size_t n);

}  // namespace normgate::seeds
