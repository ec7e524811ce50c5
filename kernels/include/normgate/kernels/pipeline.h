// normgate/kernels/pipeline.h: how the forward streams its rows.
//
// By default (fwd_simple, fwd_res_simple) the forward runs one row per team
// with each thread's columns loaded straight into registers; the ring below
// serves per-head views, the scalar path (H % 8 != 0 or misaligned rows),
// grids too large for one row per team, and fwd_simple = false.
// The ring: the forward stages each thread's columns of the rows its team will work on
// into shared memory (device_blocks.cuh: input rings): `fwd` stages, so while
// one row is computed, the loads of the team's next fwd-1 rows are in flight.
// It may also ask the L2 for a row further ahead (`fwd_l2`), and its CTAs
// either stride over all rows (a persistent grid, `fwd_block` = 0) or each
// take a fixed block of rows (`fwd_block` rows per team, a grid as large as
// the rows need, scheduled by the hardware). (The backward keeps its own
// register double buffer and L2 prefetch for x and dy: a shared-memory ring
// for them measured slower there, docs/perf/backward.md, D1; only form res's
// dh_new goes through a small one-row-ahead ring, bwd_chunk_pass.cuh and
// backward.md, D7.) None of these changes what is computed: every row is
// normalized by one team with the same arithmetic, so outputs are bitwise the
// same at every setting (tests/kernels check it on the GPU). They are speed
// knobs outside the variants' numerics; routes are gated at the defaults, and
// bench/kernels_bench --depth sweeps them.
#pragma once

namespace normgate::kernels {

inline constexpr int kMaxPipelineDepth = 8;
inline constexpr int kMaxFwdBlockRows = 1 << 20;

/// The forward's streaming settings.
struct PipelineDepth {
  /// Ring stages per team, 1..kMaxPipelineDepth (1 = load a row, then compute it).
  int fwd = 3;
  /// L2 bulk prefetch distance beyond the ring, counted in the team's own
  /// rows (one team's consecutive rows are a grid stride apart), 0 = none,
  /// 0..kMaxPipelineDepth. Vector path only (ignored for H % 8 != 0 or
  /// misaligned rows).
  int fwd_l2 = 0;
  /// Rows per team per CTA, 0..kMaxFwdBlockRows: 0 = persistent grid (as many
  /// CTAs as fit at once, striding over all rows); B > 0 = CTA b takes the
  /// rows [b*teams*B, (b+1)*teams*B), grid = ceil(rows / (teams*B)).
  int fwd_block = 0;
  /// Form res: h_new = BF16(h + u) formed inside the normalizing kernel (h
  /// and u loaded beside each other: through the ring, or straight into
  /// registers under fwd_res_simple; h_new never read back) instead of by its
  /// own kernel first. Same bits either way. On by default: 0.86-0.92x the time
  /// of the two-kernel path on the H200 (docs/perf/forward.md, D3).
  bool fwd_res_fused = true;
  /// Forward without ring or persistent loop: one row per team, a grid of
  /// ceil(rows / teams) CTAs, each thread's groups loaded straight into
  /// registers (the shape of torch.compile's forward: many short CTAs at high
  /// occupancy). Vector path, plain rows and unfused res rows (fused res
  /// follows fwd_res_simple; per-head views and the scalar path keep the ring
  /// kernel); fwd, fwd_l2 and fwd_block then do not apply. Same bits. On by
  /// default since the binary64 rstd: 0.88-0.99x the ring kernel's time at
  /// the measured plain shapes, slower only at [98304, 5120] (575 vs 559 us;
  /// docs/perf/forward.md, D1).
  bool fwd_simple = true;
  /// The same simple forward for form res fused (fwd_res_fused), on by
  /// default: there it measured 0.86x (H=2048) and 0.91x (H=4096) of the
  /// ring kernel's time and equal at H=6144 (docs/perf/forward.md, D2), where
  /// the plain forward before the binary64 rstd gained at H=2048 but lost at
  /// 4096 (D1). Same bits.
  bool fwd_res_simple = true;
  /// Teams of more than one warp: only the team's first warp collects the
  /// warp totals and computes rstd (rstd.h), then hands it to the others
  /// through shared memory (a second barrier per row), instead of every warp
  /// doing both. The binary64 collect and rstd cost FP64, conversion and
  /// shuffle issue slots in every warp (docs/perf/forward.md, D5 and D6).
  /// Same bits.
  bool fwd_rstd_warp = true;
};

/// The settings the launchers use now (the defaults above until
/// set_pipeline_depth). One atomic word: a reader never sees half of a
/// concurrent set_pipeline_depth.
PipelineDepth pipeline_depth();

/// Set the settings for later launches (a process-wide setting; for
/// benchmarks). A launch lowers `fwd` where a CTA's shared memory would exceed
/// the device's opt-in limit (never below 1).
/// Throws std::invalid_argument naming the value unless 1 <= fwd <= kMaxPipelineDepth,
/// 0 <= fwd_l2 <= kMaxPipelineDepth and 0 <= fwd_block <= kMaxFwdBlockRows.
void set_pipeline_depth(PipelineDepth d);

}  // namespace normgate::kernels
