// normgate/bench/candidates.h: candidates timed side by side at one shape,
// the measurement a route derivation rests on (routing/derive.h).
//
// Method (the seed PR's): each measurement is time_graph (timing.h): one call
// captured in a CUDA graph, replayed `reps` times with the L2 flushed before
// every replay, the median of the replays. A point is `rounds` interleaved
// rounds; each round times every candidate once and the first candidate a
// second time (A/A), n + 1 slots in the order round_order gives: rotated by
// the round, so no slot (the repeat included) always runs last.
// A candidate's time is the median of its per-round medians; the A/A floor
// is max over rounds of |A - A'| / min(A, A').
// Declared in every build; without CUDA the functions throw std::runtime_error.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "normgate/core/types.h"
#include "normgate/kernels/registry.h"

namespace normgate::kernels {

/// Timings of candidates at one shape (microseconds).
struct CandidateTimes {
  std::vector<double> median_us;               ///< per candidate, in the order given
  std::vector<std::vector<double>> rounds_us;  ///< per candidate, each round's median
  double aa_floor = 0;                         ///< relative, >= 0: max over rounds of the A/A gap
  std::vector<double> aa_rounds_us;            ///< candidate 0 timed again in each round (round_order)
};

/// The slots of round r (0-based) of n >= 1 candidates, in timing order:
/// each of 0..n-1 once and n (the A/A repeat of candidate 0) once; round r
/// is round 0 rotated left by r (mod n + 1), round 0 being 0, 1, .., n.
/// Before 2026-12-03 the repeat ran last in every round (docs/perf/routes.md
/// D9). Throws std::invalid_argument for n < 1 or r < 0.
std::vector<size_t> round_order(size_t n, int r);

/// Device buffers of one (H, w, form) up to t_max tokens, filled with the
/// `normal` family's inputs (harness/device_inputs), and the forward's rstd
/// and msq (fwd_rowwise) for the backward. Layouts: plain and res [T, H]
/// rows; heads4 [T, 4, 256] contiguous; heads24 the q part of a packed qkv
/// token of (24+8+8)*256 elements (stride 10240, head stride 256), the layout
/// a fused-QKV projection produces. Form res: the forward reads h and u and
/// writes h_new; the backward reads dh_new.
class CandidateBench {
 public:
  /// Allocates and fills (synchronizes). Throws std::invalid_argument for
  /// H out of 1..16384, H != 256 with a per-head form, t_max < 1 or rows
  /// (t_max * heads) > kMaxT; std::runtime_error on a CUDA error (out of
  /// memory included) or without CUDA.
  CandidateBench(int64_t H, WDtype w, Form form, int64_t t_max);
  ~CandidateBench();
  CandidateBench(const CandidateBench&) = delete;
  CandidateBench& operator=(const CandidateBench&) = delete;

  /// Time `candidates` (all of op `op`, non-controls, supporting the shape)
  /// at T tokens (1 <= T <= t_max) with the method above. rounds >= 2,
  /// reps >= 20. Throws std::invalid_argument naming the bad value.
  CandidateTimes time(Op op, int64_t T, std::span<const Variant* const> candidates, int rounds, int reps);

  /// Bytes the op moves once at T tokens (inputs read once, outputs written
  /// once; workspace not counted), for GB/s.
  double bytes(Op op, int64_t T) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> p_;
  int64_t H_, t_max_;
  WDtype w_;
  Form form_;
};

}  // namespace normgate::kernels
