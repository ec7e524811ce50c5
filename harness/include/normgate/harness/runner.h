// normgate/harness/runner.h: run one case end to end on the GPU, and generate
// a case's inputs on the device.
//
// Everything here is declared in every build; in a build without CUDA,
// gpu_available() returns false and the other functions throw
// std::runtime_error("... built without CUDA").
#pragma once

#include <vector>

#include <cstdint>

#include "normgate/core/types.h"
#include "normgate/kernels/device.h"
#include "normgate/kernels/registry.h"
#include "normgate/kernels/rmsnorm.h"
#include "normgate/seeds/case_id.h"
#include "normgate/seeds/generate.h"

namespace normgate::kernels {

/// gpu_available() lives in normgate/kernels/device.h (included here).

/// Device buffers for a case's inputs; rows are normalized rows (c.rows()),
/// row r of a tensor at p + r*stride (elements). Null tensors are skipped,
/// except x, dy and w, which are required when rows*cols > 0 (w: when cols > 0).
struct DeviceInputBuffers {
  uint16_t* x = nullptr;       ///< BF16 bits [rows, cols] (form res: h)
  int64_t x_stride = 0;
  uint16_t* dy = nullptr;      ///< BF16 bits [rows, cols], optional
  int64_t dy_stride = 0;
  void* w = nullptr;           ///< [cols]: BF16 bits if c.w == bf16, else FP32
  uint16_t* u = nullptr;       ///< BF16 bits [rows, cols], optional
  int64_t u_stride = 0;
  uint16_t* dh_new = nullptr;  ///< BF16 bits [rows, cols], optional
  int64_t dh_new_stride = 0;
  /// Per-head layout of every row tensor above: row r = t*heads + h at
  /// p + t*stride + h*stride_h (plain: heads = 1, row r at p + r*stride).
  int64_t heads = 1;
  int64_t stride_h = 0;
};

/// Fill the buffers with case c's inputs on the device, element by element
/// with seeds::family_value (the host generator's function), so the bytes
/// equal seeds::generate_host(c). Enqueued on `stream`, not synchronized.
/// x and w are required; dy, u and dh_new are generated where not null.
/// Throws std::invalid_argument for a null required buffer or a stride < cols,
/// std::runtime_error on a CUDA error.
void generate_device_inputs(const seeds::CaseId& c, const DeviceInputBuffers& b, Stream stream = nullptr);

/// generate_device_inputs into temporary device buffers, copied back into a
/// HostInputs laid out like generate_host's (u, dh_new only for form res).
seeds::HostInputs generate_inputs_on_gpu(const seeds::CaseId& c);

/// While at least one ReuseGpuBuffers object lives (in any thread), run_gpu
/// and run_gpu_shared keep their device buffers when they return and reuse
/// them in the next run, grow-only (a buffer is freed and reallocated only
/// when a run needs it larger), instead of a cudaMalloc and cudaFree of every
/// buffer (several GB per large case) in every run. Results are unchanged:
/// every buffer is still poisoned or fully written before each use. Memory:
/// the largest runs' buffers stay allocated until the last object ends (or,
/// if a run is using them then, until that run returns). Buffers are kept
/// per device (the calling thread's current device, cudaGetDevice): a run
/// only ever gets buffers of its own device. Each kept set serves one run at
/// a time; a run that finds every set of its device busy (two threads on
/// one device: `--devices 0,0`) starts another set, kept as well, so a
/// device holds as many sets as runs ever overlapped on it. A gate or check
/// pipeline (validators::run_checks) holds one; the library (C API) does
/// not. In a build without CUDA it does nothing.
class ReuseGpuBuffers {
 public:
  ReuseGpuBuffers();
  ~ReuseGpuBuffers();
  ReuseGpuBuffers(const ReuseGpuBuffers&) = delete;
  ReuseGpuBuffers& operator=(const ReuseGpuBuffers&) = delete;
};

/// While at least one ReuseHostBuffers object lives (in any thread), run_gpu
/// and run_gpu_shared take the host vectors of the BF16 [rows, cols] tensors
/// they copy back (Outputs::y, dx, h_new; SharedGpuRun::inputs' x, dy, u,
/// dh_new; those of at least 2^19 elements, 1 MiB) from a pool filled by
/// recycle_host_buffers, instead of fresh vectors whose every page faults in
/// (and is zeroed by the kernel) during the copy: several GB per large case.
/// A pooled vector is used when its capacity suffices (the smallest such)
/// and refilled by the download (by default the DMA engine writes its
/// pages, page-locked for that copy only; NORMGATE_DOWNLOAD=staged copies
/// out of the pinned staging buffers instead, on the calling thread or split
/// over NORMGATE_COPY_THREADS threads when that is set to 2..64), so results
/// are bitwise those of fresh vectors.
/// New vectors get capacity for 2x the elements (grow-only: later, larger
/// cases fit; unwritten pages cost no memory). The vectors are ordinary
/// std::vector memory, registered with CUDA only while a copy into them
/// runs: their owner may free them at any time. Memory: up to 16 vectors handed back and not yet taken stay
/// allocated until the last scope ends. A gate or check pipeline
/// (validators::run_checks) holds one and hands every GPU case's vectors
/// back when the case is done, so its overlapped cases (the oracle of case
/// k reads its vectors while the GPU half of case k+1 fills others) never
/// share one. Works in a build without CUDA too (nothing takes from the
/// pool there).
class ReuseHostBuffers {
 public:
  ReuseHostBuffers();
  ~ReuseHostBuffers();
  ReuseHostBuffers(const ReuseHostBuffers&) = delete;
  ReuseHostBuffers& operator=(const ReuseHostBuffers&) = delete;
};

/// Hand the storage of in.x, dy, u, dh_new (BF16 [rows, cols]) to the pool
/// of ReuseHostBuffers; they are left empty (the other fields untouched).
/// Outside a scope, or for vectors under 1 MiB, the storage is freed. The
/// caller must not use what they held any more (a later run overwrites it).
/// Never throws.
void recycle_host_buffers(seeds::HostInputs& in) noexcept;
/// As above for out.y, dx, h_new (rstd and dw are left as they are).
void recycle_host_buffers(Outputs& out) noexcept;

/// Knobs of a pipeline run (defaults: contiguous, aligned, poison seed 1).
struct GpuRunOptions {
  int64_t row_pad = 0;          ///< row stride = H + row_pad (elements) for x, dy, y, dx
  int64_t misalign_elems = 0;   ///< offset x, dy, y, dx by this many elements from a
                                ///< 256-byte boundary (1 forces the scalar path)
  uint32_t poison_seed = 1;     ///< workspace garbage pattern
  ControlUse controls = ControlUse::allow;  ///< run_gpu exists to check controls too
  /// Tests only: after the forward, overwrite one element just past the
  /// first row of y's view (in the row padding or the next row's gap), so the
  /// outside-view check must throw. Needs a layout with a gap (row_pad > 0 or
  /// form heads24).
  bool test_write_outside_view = false;
  /// Tests only: after backward variant k = test_flip_dx_of (>= 0) ran, flip
  /// the lowest bit of its dx element 0, so run_gpu_shared must see a dx that
  /// differs from the earlier variants' and copy it.
  int test_flip_dx_of = -1;
  /// run_gpu_shared with generated inputs only (run_gpu, and run_gpu_shared
  /// given host inputs, throw std::invalid_argument when it is set): also copy
  /// the inputs it generated on the device back to the host, into
  /// SharedGpuRun::inputs (what generate_inputs_on_gpu(c) returns, byte for
  /// byte, without generating them a second time).
  bool download_inputs = false;
  /// The forward variant to run (nullptr: default_fwd(), fwd_rowwise): a
  /// forward variant's own run (pipeline.h impl_variants); its y, rstd, msq
  /// (and h_new) feed every backward variant of the run. Must be a forward
  /// variant supporting the case (std::invalid_argument otherwise).
  const Variant* fwd = nullptr;
  /// Forward outputs only (what a forward-only check reads,
  /// validators::CheckRequest::forward_only): the backward variants still
  /// run (poisoned first, their writes outside the view still checked), but
  /// their dx and dw are not copied back: every result's dx and dw stay
  /// empty (in run_gpu_shared dx_source[k] = k). y, rstd and h_new, and the
  /// inputs with download_inputs, are copied as without it. Saves one BF16
  /// tensor of downloads per case (x, dy, y are still copied).
  bool forward_outputs_only = false;
};

/// What a pipeline run did besides its outputs.
struct GpuRunInfo {
  bool fwd_vector = false;      ///< forward took the 16-byte path
  bool bwd_vector = false;      ///< backward took the 16-byte path
  size_t workspace_bytes = 0;   ///< bwd_workspace_bytes(bwd, T, H)
};

/// One training step on the GPU: allocate in c's layout (plain: rows of
/// stride H + opt.row_pad; heads4: contiguous [T,4,256]; heads24: the q part
/// of packed rows of 40*256; res: plain rows plus u, h_new, dh_new); generate
/// c's inputs on the device; poison y, dx, h_new (BF16 NaN 0x7FC0), rstd and
/// dw (FP32 NaN 0x7FC00000) and the workspace (pseudo-random words from
/// opt.poison_seed); run rmsnorm_fwd(opt.fwd, default default_fwd()) with eps, then
/// rmsnorm_bwd(bwd) (res: on h_new, adding dh_new); synchronize; copy y,
/// rstd, dx, dw (res: h_new) back, contiguous over normalized rows.
/// After each kernel the poisoned memory outside its output view is checked
/// (std::runtime_error naming the variant when anything there was written).
/// Throws std::invalid_argument for a bad case/variant (H or dtype or form
/// unsupported, bwd not a backward variant), std::runtime_error on CUDA
/// errors (device memory is freed either way).
Outputs run_gpu(const Variant& bwd, const seeds::CaseId& c, float eps, const GpuRunOptions& opt = {},
                GpuRunInfo* info = nullptr);

/// Several backward variants on one set of inputs: allocate and generate once,
/// run the forward once (y, rstd poisoned before it), then for each variant in
/// order poison dx, dw and the workspace, run it, synchronize and copy its
/// outputs back. Result k holds variant k's dx, dw and its own copy of the
/// shared y and rstd; equal to run_gpu(*bwds[k], c, eps, opt) element for
/// element (the forward is deterministic). `info`, when given, describes
/// variant 0. Throws as run_gpu, and std::invalid_argument for an empty list
/// or a null entry (nothing is launched).
std::vector<Outputs> run_gpu(const std::vector<const Variant*>& bwds, const seeds::CaseId& c, float eps,
                             const GpuRunOptions& opt = {}, GpuRunInfo* info = nullptr);

/// As above on the caller's inputs (a saved case: in.id gives the shape and
/// weight dtype; in.x, in.dy [rows, cols] BF16 bits and in.w_bf16 or in.w_f32
/// [cols] are uploaded instead of generated). Throws std::invalid_argument when
/// their sizes do not match in.id, otherwise as above.
std::vector<Outputs> run_gpu(const std::vector<const Variant*>& bwds, const seeds::HostInputs& in, float eps,
                             const GpuRunOptions& opt = {});

/// Result of run_gpu_shared: outs[0] is complete (y, rstd, dx, dw; h_new for
/// form res); for k > 0 outs[k] holds dw, and dx only when dx_source[k] == k:
/// otherwise its dx is bitwise equal (compared on the device, every byte of
/// the padded buffer) to that of variant dx_source[k] < k, and was not
/// copied. y, rstd and h_new of every variant are outs[0]'s (one forward).
struct SharedGpuRun {
  std::vector<Outputs> outs;
  std::vector<size_t> dx_source;
  /// With GpuRunOptions::download_inputs: the case's inputs as the device
  /// generated them, laid out like seeds::generate_host's (u, dh_new only for
  /// form res); empty otherwise.
  seeds::HostInputs inputs;
  /// With download_inputs: seconds from the call's start to the end of the
  /// inputs' download (device allocation, poison, generation, copy back);
  /// 0 otherwise.
  double seconds_inputs = 0;
  /// Host wall-clock phases of the call (validators::PipelineStats):
  /// seconds_generation, with download_inputs only (else 0), from the call's
  /// start until the host saw the device generation finish (allocation,
  /// poison, generation; the inputs' download waits for it anyway, so the
  /// wait adds no synchronization that delays anything); seconds_downloads,
  /// the time inside device-to-host copies of inputs and outputs (each
  /// starts after a synchronization, so no kernel time is in it). The rest
  /// of the call (poison, forward, backward, outside-view checks, uploads)
  /// is the caller's "kernels" time.
  double seconds_generation = 0, seconds_downloads = 0;
};

/// run_gpu over a list without duplicate host copies (what a check needs: its
/// validation reads identical tensors once). in == nullptr generates c's
/// inputs on the device, else uploads *in (whose id must be c). Throws as
/// run_gpu.
SharedGpuRun run_gpu_shared(const std::vector<const Variant*>& bwds, const seeds::CaseId& c,
                            const seeds::HostInputs* in, float eps, const GpuRunOptions& opt = {});

/// Digests (core/output_digest.h) of one run's outputs, each over the tensor
/// packed over normalized rows as Outputs holds it: y, h_new, dx BF16 bits
/// [rows, cols]; rstd FP32 [rows]; dw FP32 [cols].
struct OutputDigests {
  uint64_t y = 0, rstd = 0, msq = 0, h_new = 0, dx = 0, dw = 0;
  /// msq (the forward's binary64 mean square per row, the backward's input;
  /// 8-byte elements) was digested: on the GPU, not by the CPU models, whose
  /// Outputs hold no msq.
  bool has_msq = false;
  bool has_h_new = false;  ///< form res: h_new was digested
  bool has_bwd = false;    ///< dx and dw were digested (not forward_outputs_only)
};

/// run_gpu(bwd, c, eps, opt) with each output digested on the device where
/// it lies instead of copied back (8 bytes per tensor cross the bus): the
/// same layout, poisoning, generation, forward (opt.fwd), backward and
/// outside-view checks; msq too (has_msq). With opt.forward_outputs_only
/// only the forward runs: dy and dh_new are not generated, no backward runs,
/// dx and dw are not digested (has_bwd false). The digests equal those the
/// host computes over run_gpu's Outputs (core::digest_u16 / digest_u32),
/// which a test checks.
/// Throws as run_gpu; std::invalid_argument for opt.download_inputs.
OutputDigests run_gpu_digests(const Variant& bwd, const seeds::CaseId& c, float eps, const GpuRunOptions& opt = {});

}  // namespace normgate::kernels
