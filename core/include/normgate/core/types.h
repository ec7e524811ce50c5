// normgate/core/types.h: dtypes, forms and strided row views shared by every
// half of normgate (generator, kernels' CPU models, oracle, validators).
//
// A "row view" describes the rows that RMSNorm normalizes. Plain [T,H] is
// heads=1; the per-head forms view x as [T, heads, cols] with independent
// strides for t and head and a contiguous inner dimension. All strides and
// offsets are in elements and 64-bit.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace normgate {

/// Storage dtype of the weight w.
enum class WDtype : uint8_t { bf16 = 0, fp32 = 1 };

/// Layout/form of a problem. `plain`: [T,H] rows. `res`: fused residual add
/// (h_new = BF16(h+u), then plain). `heads24`: [T,24,256] strided slice of a
/// packed row of 40*256 elements. `heads4`: contiguous [T,4,256].
enum class Form : uint8_t { plain = 0, res = 1, heads24 = 2, heads4 = 3 };

/// Heads a token of form f holds, each a row of its own: 24 (heads24), 4
/// (heads4), 1 (plain, res). A call of T tokens normalizes T * heads_of(f)
/// rows.
constexpr int64_t heads_of(Form f) { return f == Form::heads24 ? 24 : f == Form::heads4 ? 4 : 1; }

/// Name of a weight dtype: "bf16" or "fp32".
std::string_view to_string(WDtype d);
/// Name of a form: "plain", "res", "heads24", "heads4".
std::string_view to_string(Form f);
/// Parse "bf16"/"fp32". Throws std::invalid_argument naming the bad value.
WDtype parse_wdtype(std::string_view s);
/// Parse a form name. Throws std::invalid_argument naming the bad value.
Form parse_form(std::string_view s);

/// A read-only strided view of rows of `cols` elements of type T.
/// Element (t, h, j) lives at p[t*stride_t + h*stride_h + j], for t < T,
/// h < heads, j < cols. The normalized "row" index is r = t*heads + h.
template <class T>
struct RowView {
  const T* p = nullptr;
  int64_t T_rows = 0;    ///< leading extent (tokens)
  int64_t heads = 1;     ///< rows per token (1 for plain)
  int64_t cols = 0;      ///< normalized length (H, or 256 per head)
  int64_t stride_t = 0;  ///< elements between tokens
  int64_t stride_h = 0;  ///< elements between heads of one token

  /// Number of normalized rows, T_rows * heads.
  int64_t rows() const { return T_rows * heads; }
  /// Pointer to normalized row r (r = t*heads + h).
  const T* row(int64_t r) const { return p + (r / heads) * stride_t + (r % heads) * stride_h; }
  /// Contiguous plain [T, H] view.
  static RowView plain(const T* ptr, int64_t rows, int64_t H) { return {ptr, rows, 1, H, H, 0}; }
};

/// A weight vector of `cols` elements, BF16 bits or binary32.
struct WeightView {
  WDtype dtype = WDtype::bf16;
  const void* p = nullptr;
  int64_t cols = 0;
};

}  // namespace normgate

namespace normgate {

/// Outputs of one training step (forward + backward) of an implementation
/// under test, copied to the host, contiguous over normalized rows:
/// y, dx: BF16 bits [rows, cols]; rstd: FP32 [rows]; dw: FP32 [cols].
/// For form `res` also h_new (BF16 [rows, cols]); dx then holds dh = dx_norm + dh_new.
struct Outputs {
  std::vector<uint16_t> y;
  std::vector<float> rstd;
  std::vector<uint16_t> dx;
  std::vector<float> dw;
  std::vector<uint16_t> h_new;  ///< empty unless form == res
};

}  // namespace normgate
