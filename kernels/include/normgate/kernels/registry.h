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
//   fwd_multirow        forward: fwd_rowwise's rows and arithmetic (the same
//                       bits), each team loading R(H) rows into registers
//                       before reducing any (multirow.h), every form
//   fwd_narrow          forward for rows of H = 256 (plain, heads4, heads24):
//                       16 lanes a row, two rows a warp and two a lane, its
//                       own order of the binary64 sum (fwd_narrow.cu)
//   fwd_wide            forward, plain rows and form res: up to 32 columns a
//                       thread (teams of H/32, wide.h), one row a team, its
//                       own order of the binary64 sum (fwd_wide.cu)
//   fwd_staged          forward, plain rows and form res: one row a team,
//                       each thread's groups (res: of h and u) copied into
//                       its own shared-memory slots
//                       (cp.async) instead of registers, two groups a thread
//                       (staged.h; fwd_rowwise's order for H <= 256 and
//                       2048 < H <= 8192, fwd_wide's for H <= 512 and
//                       15361 <= H, its own elsewhere) (fwd_staged.cu)
//   bwd_det_chunked     backward, deterministic: fixed row chunks, FP64 dw
//                       partials (exact products, fma), fixed-order FP64 combine
//   bwd_nondet_atomic   backward, non-deterministic: the same chunk partials
//                       combined with FP64 atomicAdd (for short chunks,
//                       bwd_det_chunked's combine: nondet_replicas.h)
//   ctl_fp32_seq        NEGATIVE CONTROL: dw as a plain FP32 sequential sum
//   ctl_bf16_partials   NEGATIVE CONTROL: chunk partials rounded to BF16
//                       (the class of Liger PR 950)
//   ctl_warp64_dw       NEGATIVE CONTROL: the dw combine indexed for 64-wide
//                       warps on 32 lanes: columns j with j mod 64 >= 32 keep
//                       dw = 0 (PyTorch PR 183864); H >= 33 (bwd_ctl_warp64.cu)
//   bwd_det_onepass     backward, deterministic: bwd_det_chunked's chunks,
//                       partials and combine (dx, dw bitwise equal) in ONE
//                       kernel: the last chunk CTA (atomic ticket) combines
//   bwd_det_wide        backward, deterministic, H = 4097..6144 (plain, res):
//                       bwd_det_chunked's chunk pass and combine (dx, dw
//                       bitwise equal) in a kernel bounded for 768 threads,
//                       FP32 w held in registers (bwd_det_wide.cu)
//   bwd_det_heads       backward, deterministic, the per-head views (H =
//                       256): bwd_det_chunked's chunk pass and combine (dx,
//                       dw bitwise equal) in a 32-thread kernel of its own,
//                       FP32 w held in registers (bwd_det_heads.cu)
//   bwd_det_wreg        backward, deterministic, H = 1..4096 (plain, res):
//                       bwd_det_chunked's chunk pass and combine (dx, dw
//                       bitwise equal) in its narrow kernel's bound, FP32 w
//                       held in registers (bwd_det_wreg.cu)
//   bwd_det_lean        backward, deterministic: bwd_det_chunked's chunks,
//                       partials and combine (dx, dw bitwise equal); where
//                       each thread of plan.h's one-slot team owns a full
//                       8-column group on the vector path (plain, res, dense
//                       per-head views), a chunk kernel of fewer instructions
//                       a row, else bwd_det_chunked's (bwd_det_lean.cu)
//   bwd_fp32_blocked    backward, deterministic, accuracy for speed: FP32
//                       products (fmaf by rstd), uncompensated FP32 chunk
//                       partials, FP32 fixed-order combine; routable where
//                       the gate approves it (not a control)
// Controls exist to prove that the gate fails bad kernels; no routing may
// select them (control == true), and the launch API refuses them unless the
// caller opts in explicitly.
//
// Model-only negative controls (model_only == true: a CPU model, no GPU
// kernel; kernels/models/src/model_controls.cpp). Each imitates one public
// bug class, named after it; each is registered as a backward variant whose
// step (models.h run_model) carries the fault wherever it sits, forward or
// backward. Registered for every H and weight dtype unless said otherwise:
//   ctl_rstd_bf16          rstd rounded to BF16 before use (y, dx, dw) and
//                          as the output (ROCm PR 1767)
//   ctl_eps_outside_sqrt   rstd = 1/(sqrt(mean x^2) + eps) (PyTorch 189581)
//   ctl_eps_dropped        rstd = 1/sqrt(mean x^2), no eps (PyTorch 189581)
//   ctl_eps_bf16           eps rounded to BF16 before the add (PyTorch 189581)
//   ctl_sumsq_bf16         the row's sum of squares accumulated in BF16
//                          (SGLang PR 27540: outlier channels)
//   ctl_res_grad_early     form res only: dh_new added to dy BEFORE the norm
//                          backward instead of to its dx after (QuACK PR 52/53)
//   ctl_padded_lanes       the mean of squares over the padded width
//                          bit_ceil(H) instead of H: padded lanes counted
//                          (Triton 9838, Liger 518); H not a power of two
//   ctl_heads_shared_stats forms heads24/heads4 only: one rstd per token over
//                          all its heads instead of one per head (Mamba PR 547)
//   ctl_heads_dw_mixed     forms heads24/heads4 only: dw from per-head
//                          partials, head h's read from buffer h & ~1 (odd
//                          heads replaced by their even neighbour)
//                          (torch-xpu-ops PR 4790)
// On the GPU backend a check runs a model-only control's CPU model on the
// case's inputs and says so (harness/pipeline.h prepare_check: ran_on "cpu
// model (a model-only control: no GPU kernel)"); the launch API refuses it
// (rmsnorm_bwd, bwd_workspace_bytes name it): never another kernel in its place.
//
// External variants: implementations from outside the build (a Python
// callable, a plugin library) registered at run time
// (validators::register_external, harness/external.h, which calls
// add_external_variant here). They join variants() after the built-in ones
// (ids 128 and up, in registration order), so route tables, find_variant and
// every list of known names see them; they are flagged `external`, have no
// launcher (the launch API and the CPU models refuse them) and run through
// their own callback in check, gate and repro.
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
  fwd_multirow = 7,
  ctl_rstd_bf16 = 8,
  ctl_eps_outside_sqrt = 9,
  ctl_eps_dropped = 10,
  ctl_eps_bf16 = 11,
  ctl_sumsq_bf16 = 12,
  ctl_res_grad_early = 13,
  ctl_padded_lanes = 14,
  ctl_warp64_dw = 15,
  ctl_heads_shared_stats = 16,
  ctl_heads_dw_mixed = 17,
  fwd_narrow = 18,
  fwd_wide = 19,
  bwd_det_wide = 20,
  bwd_det_heads = 21,
  bwd_det_wreg = 22,
  fwd_staged = 23,
  bwd_det_lean = 24,
  // 128..255: external variants, in registration order (never a built-in).
};

/// The id of the first external variant; the k-th registered is kFirstExternalId + k.
inline constexpr int kFirstExternalId = 128;
/// How many external variants one process may register (ids 128..255).
inline constexpr int kMaxExternalVariants = 128;

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
  /// Registered at run time from outside the build (add_external_variant):
  /// `sources` then holds its origin (e.g. "python", "plugin /abs/libx.so")
  /// and source_sha256 the identity its registrant declared.
  bool external = false;
  /// A negative control with a CPU model and no GPU kernel (see the file
  /// comment): the GPU backend refuses it; `sources` names its model file.
  bool model_only = false;
  /// Controls: the public report of the bug class it imitates (e.g.
  /// "PyTorch 189581"); "" otherwise.
  std::string_view source_of_class = {};

  bool supports(WDtype d) const { return (wdtypes >> static_cast<int>(d)) & 1u; }
  bool supports(Form f) const { return (forms >> static_cast<int>(f)) & 1u; }
  bool supports_h(int64_t H) const { return H >= h_min && H <= h_max; }
};

/// All variants: the built-in ones in VariantId order, then the external
/// ones in registration order. The span and every Variant in it stay valid
/// for the life of the process (external variants are stored in reserved
/// slots that never move); a later registration makes a later call's span
/// longer.
std::span<const Variant> variants();

/// What add_external_variant copies into the registry (it owns the strings).
struct ExternalVariantSpec {
  std::string name;           ///< [A-Za-z0-9_.+-]{1,64}, no built-in's name
  Op op = Op::bwd;
  Mode mode = Mode::det;
  int64_t h_min = 1, h_max = 16384;  ///< 1 <= h_min <= h_max <= 16384
  uint8_t wdtypes = 0b11;     ///< non-empty subset of bits (1 << WDtype)
  uint8_t forms = 0b1;        ///< non-empty subset of bits (1 << Form)
  std::string description;    ///< one line
  std::string origin;         ///< where its code lives, e.g. "python", "plugin /abs/libx.so" (non-empty)
  std::string source_sha256;  ///< 64 lowercase hex digits (upper case is folded)
};

/// Register (or re-register) an external variant; returns its registry
/// entry, whose address never changes. Registering a name again with the
/// same origin replaces that entry's fields in place (the same Variant
/// object, now describing the new code: a notebook re-running its
/// registration after an edit); do not re-register while another thread
/// runs a check or gate of it. Thread-safe otherwise. Throws
/// std::invalid_argument naming the field for a bad field, naming the name
/// when it is a built-in variant's or an external of another origin, and
/// when kMaxExternalVariants are registered, and for a forward variant of
/// mode nondet (one forward serves both modes: it must be deterministic).
/// A re-registration may change op, mode and masks: a DispatchCache built
/// before re-checks every pick against the entry as it is now (serve_gap).
/// Also refused (std::invalid_argument): the names "all" (`check --variant
/// all`), any starting with '-' (read as an option) or "ctl_" (the negative
/// controls'), and any registration while an ExternalRegistrationsHeld
/// lives (a gate runs).
const Variant& add_external_variant(const ExternalVariantSpec& spec);

/// While one of these lives, add_external_variant refuses every call,
/// naming `why`: a gate holds one from its first case to its approvals
/// (validators::run_gate, ng_gate, `normgate gate`), since a registration
/// then would change the code it runs under a name and identity its
/// journal and approvals already hold (found by an adversarial pass: an
/// approval keyed to a source hash that never ran). Nests; thread-safe.
class ExternalRegistrationsHeld {
 public:
  explicit ExternalRegistrationsHeld(std::string why);
  ~ExternalRegistrationsHeld();
  ExternalRegistrationsHeld(const ExternalRegistrationsHeld&) = delete;
  ExternalRegistrationsHeld& operator=(const ExternalRegistrationsHeld&) = delete;

 private:
  std::string why_;
};

/// Whether `name` has a variant name's form: 1 to 64 characters of
/// A-Z a-z 0-9 _ . + - (what add_external_variant accepts; every built-in
/// name has it).
bool variant_name_ok(std::string_view name);

/// The variant called `name`. Throws std::invalid_argument naming the bad
/// name and listing the known ones.
const Variant& variant(std::string_view name);

/// The variant called `name`, or nullptr when none is (e.g. the
/// "fp32-baseline" implementation, which is not a kernel variant). Never throws.
const Variant* find_variant(std::string_view name);

/// Whether `name` is a built-in kernel variant (one this build compiled,
/// with a CPU model): false for an external (plugin, Python or C kernel),
/// for "fp32-baseline" and for any unknown name. Never throws.
bool builtin_variant(std::string_view name);

/// The variant with identity `id` (built-in or external). Throws
/// std::invalid_argument for an id nothing has.
const Variant& variant(VariantId id);

/// The default forward variant (fwd_rowwise): the forward step of every run
/// of a backward variant (check, gate, repro, export), of the C ABI when no
/// variant is named; a run of a forward variant (a forward window of the
/// gate, `check --variant fwd_multirow`) uses that variant instead
/// (harness/pipeline.h).
const Variant& default_fwd();

/// Human-readable one-line summary: name, op, mode, H range, dtypes, forms,
/// control flag (CONTROL, MODEL-ONLY), EXTERNAL(origin) for an external
/// variant, first 12 hex digits of the source hash.
std::string describe(const Variant& v);

/// Why a variant cannot serve a call (or a window, route, approval or
/// fallback): the first of these tests to fail, in this order.
enum class ServeGap : uint8_t {
  none,     ///< every test passed
  op,       ///< a forward variant for a backward call, or the reverse
  control,  ///< a negative control: built to fail, never serves callers
  nondet,   ///< non-deterministic, and the call is a forward or a deterministic backward
  h,        ///< H outside [h_min, h_max]
  w,        ///< the weight dtype is not supported
  form,     ///< the form is not supported
};

/// The H, weight dtype and form of a call or window (serve_gap's shape).
struct CallShape {
  int64_t H;
  WDtype w;
  Form form;
};

/// The first test v fails to serve calls of `op` in `mode`: a det backward
/// call needs a det variant, and so does every forward (one forward window
/// serves both modes; add_external_variant refuses a nondet forward). With `shape`, H, the
/// weight dtype and the form are tested after those; without it, only op,
/// control and mode. `controls_ok` skips the control test (`gate
/// --allow-controls`). Every place that decides whether a variant may serve
/// something (route tables, derive specs, fallbacks, approvals, explicit
/// variants of the dispatcher) asks this and words its own message.
ServeGap serve_gap(const Variant& v, Op op, Mode mode, const CallShape* shape = nullptr, bool controls_ok = false);

}  // namespace normgate::kernels
