// normgate/kernels/registry.h: every kernel variant normgate can run, by name.
//
// A variant is one forward or backward implementation. The registry is the
// single list the launch API, the CPU models, the tests and the CLI iterate
// over: registering a variant here registers its tests. Each entry carries a
// SHA-256 of the source files that define its GPU code, computed when CMake
// configures the build (kernels/CMakeLists.txt), so an approval can name the
// exact code it approved.
//
// Variants (names say what they do):
//   fwd_rowwise         forward: one team of threads per row (plan.h)
//   bwd_det_chunked     backward, deterministic: fixed row chunks, FP64 dw
//                       partials (exact products, fma), fixed-order FP64 combine
//   bwd_nondet_atomic   backward, non-deterministic: the same chunk partials
//                       combined with FP64 atomicAdd (for short chunks,
//                       bwd_det_chunked's combine: nondet_replicas.h)
//   ctl_fp32_seq        NEGATIVE CONTROL: dw as a plain FP32 sequential sum
//   ctl_bf16_partials   NEGATIVE CONTROL: chunk partials rounded to BF16
//   bwd_det_onepass     backward, deterministic: bwd_det_chunked's chunks,
//                       partials and combine (dx, dw bitwise equal) in ONE
//                       kernel: the last chunk CTA (atomic ticket) combines
//   bwd_fp32_blocked    backward, deterministic, accuracy for speed: FP32
//                       products (fmaf by rstd), uncompensated FP32 chunk
//                       partials, FP32 fixed-order combine; routable where
//                       the gate approves it (not a control)
// Controls exist to prove that the gate fails bad kernels; no routing may
// select them (control == true), and the launch API refuses them unless the
// caller opts in explicitly.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "normgate/core/types.h"

namespace normgate::kernels {

/// Which half of the training step a variant computes.
enum class Op : uint8_t { fwd = 0, bwd = 1 };
/// Whether repeated runs on the same inputs give bitwise identical outputs.
enum class Mode : uint8_t { det = 0, nondet = 1 };
/// Stable identity of a variant (dispatch key; never reused).
enum class VariantId : uint8_t {
  fwd_rowwise = 0,
  bwd_det_chunked = 1,
  bwd_nondet_atomic = 2,
  ctl_fp32_seq = 3,
  ctl_bf16_partials = 4,
  bwd_det_onepass = 5,
  bwd_fp32_blocked = 6,
};

/// "fwd" / "bwd".
std::string_view to_string(Op op);
/// "det" / "nondet".
std::string_view to_string(Mode m);

/// One registered variant.
struct Variant {
  VariantId id;
  std::string_view name;         ///< e.g. "bwd_det_chunked" (unique)
  Op op;
  Mode mode;
  int64_t h_min;                 ///< supported H range, inclusive
  int64_t h_max;
  uint8_t wdtypes;               ///< bit (1 << WDtype) per supported weight dtype
  uint8_t forms;                 ///< bit (1 << Form) per supported form
  bool control;                  ///< negative control: never routable
  std::string_view description;  ///< one line
  /// Files (relative to kernels/) whose bytes define the GPU code, separated
  /// by ';', in the order hashed.
  std::string_view sources;
  /// SHA-256 (lowercase hex) of the manifest "sha256(file)  file\n" over
  /// `sources` in order; reproducible with
  ///   cd kernels && sha256sum <sources in order> | sha256sum
  std::string_view source_sha256;

  bool supports(WDtype d) const { return (wdtypes >> static_cast<int>(d)) & 1u; }
  bool supports(Form f) const { return (forms >> static_cast<int>(f)) & 1u; }
  bool supports_h(int64_t H) const { return H >= h_min && H <= h_max; }
};

/// All variants, in VariantId order.
std::span<const Variant> variants();

/// The variant called `name`. Throws std::invalid_argument naming the bad
/// name and listing the known ones.
const Variant& variant(std::string_view name);

/// The variant called `name`, or nullptr when none is (e.g. the
/// "fp32-baseline" implementation, which is not a kernel variant). Never throws.
const Variant* find_variant(std::string_view name);

/// The variant with identity `id`.
const Variant& variant(VariantId id);

/// The forward variant every GPU pipeline run uses (fwd_rowwise).
const Variant& default_fwd();

/// Human-readable one-line summary: name, op, mode, H range, dtypes, forms,
/// control flag, first 12 hex digits of the source hash.
std::string describe(const Variant& v);

}  // namespace normgate::kernels
