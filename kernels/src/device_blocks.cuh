// kernels/src/device_blocks.cuh (internal): the device building blocks every
// variant composes: 8-column BF16 groups (16-byte vector or guarded scalar
// load/store), weight groups, the warp butterfly and the team reduction of
// plan.h, and the shared kernel-argument types. The dw accumulators (Acc64,
// Comp64) live in include/normgate/kernels/accum.h (host and device).
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <set>
#include <utility>

#include "normgate/core/bf16.h"
#include "normgate/core/hd.h"
#include "normgate/kernels/accum.h"
#include "normgate/kernels/pipeline.h"
#include "normgate/kernels/plan.h"

namespace normgate::kernels::dev {

/// 8 consecutive BF16 values packed in 16 bytes: element e is the low (e even)
/// or high (e odd) half of word e/2, i.e. memory order.
struct Group8 {
  uint4 u;
};

/// Element e (0..7, a compile-time constant after unrolling) as FP32 (exact).
__device__ __forceinline__ float group_at(const Group8& v, int e) {
  const uint32_t w = e < 2 ? v.u.x : e < 4 ? v.u.y : e < 6 ? v.u.z : v.u.w;
  return __uint_as_float((e & 1) ? (w & 0xFFFF0000u) : (w << 16));
}

/// Load the 8 columns col0..col0+7 of `row`; columns >= H read as +0.
/// vec: one 16-byte load (requires H % 8 == 0 and a 16-byte aligned row);
/// otherwise 8 guarded 2-byte loads. Read-only path (ld.global.nc).
__device__ __forceinline__ Group8 load_group(const __nv_bfloat16* row, int col0, int H, bool vec) {
  Group8 v;
  v.u = make_uint4(0u, 0u, 0u, 0u);
  if (col0 >= H) return v;
  if (vec) {
    v.u = __ldg(reinterpret_cast<const uint4*>(row + col0));
    return v;
  }
  const unsigned short* p = reinterpret_cast<const unsigned short*>(row) + col0;
  uint32_t w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const uint32_t b = (col0 + e < H) ? static_cast<uint32_t>(__ldg(p + e)) : 0u;
    w[e / 2] |= (e & 1) ? (b << 16) : b;
  }
  v.u = make_uint4(w[0], w[1], w[2], w[3]);
  return v;
}

/// Round 8 FP32 values to BF16 (RNE, cvt.rn.bf16x2.f32) and store them to
/// columns col0..col0+7 of `row` (columns >= H are not written). vec: one
/// 16-byte store; otherwise guarded 2-byte stores.
/// Store 8 BF16 bit patterns packed as in Group8 (element e in the low (e
/// even) or high half of word e/2) at columns col0..col0+7, guarded as store_group.
__device__ __forceinline__ void store_group_bits(__nv_bfloat16* row, int col0, int H, bool vec, const Group8& g) {
  if (col0 >= H) return;
  if (vec) {
    *reinterpret_cast<uint4*>(row + col0) = g.u;
    return;
  }
  const uint32_t w[4] = {g.u.x, g.u.y, g.u.z, g.u.w};
  unsigned short* p = reinterpret_cast<unsigned short*>(row) + col0;
#pragma unroll
  for (int e = 0; e < 8; ++e)
    if (col0 + e < H) p[e] = static_cast<unsigned short>((e & 1) ? (w[e / 2] >> 16) : (w[e / 2] & 0xFFFFu));
}

/// Element-wise BF16(a_e + b_e), one rounding of each exact sum (core/bf16.h
/// bf16_sum_rn), a_e given as FP32 values: the res forward's h + u (a
/// memory-bound kernel, where this compact form holds the fewest registers).
__device__ __forceinline__ Group8 sum_group(const float (&a)[8], const Group8& b) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    w[i] = static_cast<uint32_t>(bf16_sum_rn(a[2 * i], group_at(b, 2 * i))) |
           (static_cast<uint32_t>(bf16_sum_rn(a[2 * i + 1], group_at(b, 2 * i + 1))) << 16);
  Group8 g;
  g.u = make_uint4(w[0], w[1], w[2], w[3]);
  return g;
}

/// sum_group's bits for every input, in fewer instructions on the common
/// case (the res backward's dh = BF16(dx + dh_new), an issue-bound kernel:
/// docs/perf/backward.md, D6). bf16_sum_rn returns RN_bf16(s) for s =
/// RN_fp32(a + b) unless s is not finite or s is a BF16 midpoint (low 16
/// bits 0x8000), and for finite s the hardware's RNE conversion
/// (cvt.rn.bf16x2.f32) is that RN_bf16. So a group takes one FP32 add and
/// half a conversion per element, and only a group holding such an s (about
/// 2^-16 of finite sums) runs bf16_sum_rn's TwoSum path.
/// tests/kernels/device_blocks_test.cu checks it bit for bit.
__device__ __forceinline__ Group8 sum_group_fast(const float (&a)[8], const Group8& b) {
  float s[8];
  bool rare = false;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    s[e] = __fadd_rn(a[e], group_at(b, e));
    const uint32_t u = __float_as_uint(s[e]);
    rare |= (u & 0xFFFFu) == 0x8000u || (u & 0x7F800000u) == 0x7F800000u;
  }
  if (rare) return sum_group(a, b);
  Group8 g;
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(s[2 * i], s[2 * i + 1]);  // .x (low half) = element 2i
    w[i] = *reinterpret_cast<const uint32_t*>(&h);
  }
  g.u = make_uint4(w[0], w[1], w[2], w[3]);
  return g;
}

__device__ __forceinline__ void store_group(__nv_bfloat16* row, int col0, int H, bool vec,
                                            const float (&f)[8]) {
  if (col0 >= H) return;
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __nv_bfloat162 b = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    w[i] = *reinterpret_cast<const uint32_t*>(&b);
  }
  if (vec) {
    *reinterpret_cast<uint4*>(row + col0) = make_uint4(w[0], w[1], w[2], w[3]);
    return;
  }
  unsigned short* p = reinterpret_cast<unsigned short*>(row) + col0;
#pragma unroll
  for (int e = 0; e < 8; ++e)
    if (col0 + e < H) p[e] = static_cast<unsigned short>((e & 1) ? (w[e / 2] >> 16) : (w[e / 2] & 0xFFFFu));
}

/// Weights of columns col0..col0+7 as FP32 (exact); columns >= H give +0.
/// vec: 16-byte loads (w 16-byte aligned, H % 8 == 0), else guarded scalars.
__device__ __forceinline__ void load_weights(const float* w, int col0, int H, bool vec, float (&out)[8]) {
  if (vec && col0 < H) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(w + col0));
    const float4 b = __ldg(reinterpret_cast<const float4*>(w + col0) + 1);
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
    out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
    return;
  }
#pragma unroll
  for (int e = 0; e < 8; ++e) out[e] = (col0 + e < H) ? __ldg(w + col0 + e) : 0.0f;
}
__device__ __forceinline__ void load_weights(const __nv_bfloat16* w, int col0, int H, bool vec,
                                             float (&out)[8]) {
  const Group8 g = load_group(w, col0, H, vec);
#pragma unroll
  for (int e = 0; e < 8; ++e) out[e] = group_at(g, e);
}

/// ss + the squares of a group's 8 values in binary64, column ascending
/// (dfma_rn each; x^2 is exact): the forward's sum of squares (rstd.h).
__device__ __forceinline__ double add_squares(const Group8& g, double ss) {
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const double xd = static_cast<double>(group_at(g, e));
    ss = dfma_rn(xd, xd, ss);
  }
  return ss;
}

/// y = BF16_rn((x * rstd) * w) for one 8-column group, stored at col0 of yr
/// (the forward's output: two FP32 products, then RNE).
__device__ __forceinline__ void store_y_group(__nv_bfloat16* yr, int col0, int H, bool vec, const Group8& x, float rs,
                                              const float (&w)[8]) {
  float y[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) y[e] = mul_rn(mul_rn(group_at(x, e), rs), w[e]);
  store_group(yr, col0, H, vec, y);
}

/// Warp butterfly sum (plan.h): offsets 16, 8, 4, 2, 1, each lane adding its
/// partner's value to its own. Every lane ends with the same bits (FP32
/// addition is commutative, so partners compute the same sums).
/// Also in binary64 (the forward's sum of squares, rstd.h), same order.
template <class T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = sum_rn(v, __shfl_xor_sync(0xFFFFFFFFu, v, off));
  return v;
}

/// Team sum (plan.h), in two steps so that a caller can do independent work
/// while the barrier between them completes:
///   team_sum_publish: warp butterfly; lane 0 stores the warp total in
///     red[warp] (warp index within the CTA); returns the warp total (the
///     team total when team == 32);
///   <barrier: __syncthreads, or the cluster barrier for a 2-CTA team>
///   team_sum_collect / cluster_team_sum_collect: lane l of each warp takes
///     warp l's total of its team (0 for l >= team/32) and butterflies again.
/// `red` is a 32-entry shared buffer (T = float, or double) that must not be rewritten until every
/// thread has passed one more barrier (callers alternate two buffers). `team`
/// is uniform across the CTA, a multiple of 32; a team's warps are
/// first_warp .. first_warp + team/32 - 1.
template <class T>
__device__ __forceinline__ T team_sum_publish(T v, T* red) {
  v = warp_sum(v);
  if ((threadIdx.x & 31u) == 0u) red[threadIdx.x >> 5] = v;
  return v;
}
template <class T>
__device__ __forceinline__ T team_sum_collect(const T* red, int team, int first_warp) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  return warp_sum(lane < (team >> 5) ? red[first_warp + lane] : T(0));
}
/// The collect step of a team split over the 2 CTAs of a cluster (team =
/// 2*blockDim.x; CTA rank q holds team threads q*blockDim.x ..): warp l's
/// total lives in the shared memory of the CTA that owns warp l (DSMEM).
/// A CTA must not exit while its peer may still read its `red`: end such a
/// kernel with a cluster barrier.
__device__ __forceinline__ float cluster_team_sum_collect(float* red, int team) {
  namespace cg = cooperative_groups;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int wpc = static_cast<int>(blockDim.x) >> 5;  // warps per CTA
  float u = 0.0f;
  if (lane < (team >> 5)) {
    const float* src = cg::this_cluster().map_shared_rank(red, static_cast<unsigned>(lane / wpc));
    u = src[lane % wpc];
  }
  return warp_sum(u);
}

/// One-call team sum for a team inside one CTA (contains a __syncthreads when
/// team > 32: all threads of the CTA must call it).
template <class T>
__device__ __forceinline__ T team_sum(T v, T* red, int team, int first_warp) {
  v = team_sum_publish(v, red);
  if (team <= 32) return v;
  __syncthreads();
  return team_sum_collect(red, team, first_warp);
}

/// Input rings (the kernels' load pipeline). A thread stages its own column
/// groups of the rows it will work on into its own shared-memory slots, up to
/// `stages` rows ahead, with asynchronous copies (cp.async, global -> L2 ->
/// shared, sm_80+); only the thread that issued a copy reads its slot, so no
/// barrier orders them: cp.async.wait_group does. Rows in flight then cost
/// shared memory instead of registers.
/// One 16-byte copy of 8 BF16 columns (src 16-byte aligned).
__device__ __forceinline__ void cp_async16(uint4* dst, const void* src) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}
/// Close this thread's current group of copies (an empty group is allowed).
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
/// Wait until at most n of this thread's groups are pending (0 <= n <= 7; the
/// instruction takes an immediate, hence the switch on a uniform value).
static_assert(kMaxPipelineDepth - 1 <= 7, "cp_async_wait_pending covers 0..7 pending groups");
__device__ __forceinline__ void cp_async_wait_pending(int n) {
  switch (n) {
    case 0: asm volatile("cp.async.wait_group 0;" ::: "memory"); break;
    case 1: asm volatile("cp.async.wait_group 1;" ::: "memory"); break;
    case 2: asm volatile("cp.async.wait_group 2;" ::: "memory"); break;
    case 3: asm volatile("cp.async.wait_group 3;" ::: "memory"); break;
    case 4: asm volatile("cp.async.wait_group 4;" ::: "memory"); break;
    case 5: asm volatile("cp.async.wait_group 5;" ::: "memory"); break;
    case 6: asm volatile("cp.async.wait_group 6;" ::: "memory"); break;
    default: asm volatile("cp.async.wait_group 7;" ::: "memory"); break;
  }
}
/// Stage columns col0..col0+7 of `row` into this thread's slot `dst`, read
/// back as a Group8 (load_group's values: columns >= H as +0). vec: one
/// asynchronous 16-byte copy; otherwise load_group's guarded scalar loads,
/// stored synchronously (the slow, unaligned path keeps no loads in flight).
__device__ __forceinline__ void stage_group(uint4* dst, const __nv_bfloat16* row, int col0, int H, bool vec) {
  if (vec && col0 < H) {
    cp_async16(dst, row + col0);
    return;
  }
  *dst = load_group(row, col0, H, vec).u;
}

/// Ask the L2 to fetch `bytes` (a multiple of 16) at a 16-byte aligned
/// global address (sm_90 bulk prefetch; uses no registers, never waited on).
__device__ __forceinline__ void prefetch_l2_bulk(const void* p, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}

/// Host side of the input rings: the dynamic shared memory a CTA may use
/// (the device's opt-in limit less 1 KiB for the kernels' static buffers),
/// and the ring depth that fits it: min(want, limit / stage_bytes), at least 1
/// (a stage is at most 64 KiB for every supported H, so one always fits).
inline int ring_smem_limit() {
  int dev = 0, optin = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess || optin < 49152)
    optin = 49152;
  return optin - 1024;
}
inline int ring_depth(int want, size_t stage_bytes) {
  const size_t fit = static_cast<size_t>(ring_smem_limit()) / (stage_bytes > 0 ? stage_bytes : 1);
  const size_t d = fit < static_cast<size_t>(want) ? fit : static_cast<size_t>(want);
  return d < 1 ? 1 : static_cast<int>(d);
}
/// Let kernel f take up to ring_smem_limit() bytes of dynamic shared memory.
/// The attribute persists, so it is set once per (kernel, device), not on
/// every launch.
template <class F>
inline cudaError_t ring_allow(F* f) {
  static std::mutex m;
  static std::set<std::pair<const void*, int>> done;
  const void* fn = reinterpret_cast<const void*>(f);
  int dev = 0;
  if (const cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
  const std::lock_guard<std::mutex> lock(m);
  if (done.count({fn, dev}) != 0) return cudaSuccess;
  const cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, ring_smem_limit());
  if (e == cudaSuccess) done.insert({fn, dev});
  return e;
}

/// Column indices are `int` on the device (H <= kMaxH = 16384); row indices
/// and element offsets are int64_t.

/// Device view of a BF16 tensor's normalized rows. kHeads == false (plain):
/// row r at p + r*stride. kHeads == true (per-head views): row r = t*heads +
/// h at p + t*stride + h*stride_h. A compile-time choice, so the plain
/// kernels carry no head arithmetic (it costs registers: measured as spills).
template <class P, bool kHeads = false>
struct Rows {
  P* p;
  int64_t stride;
  int64_t heads = 1;
  int64_t stride_h = 0;
  __device__ __forceinline__ P* row(int64_t r) const {
    if constexpr (kHeads) {
      return p + (r / heads) * stride + (r % heads) * stride_h;
    } else {
      return p + r * stride;
    }
  }
  /// row(r) without a division: t = r / heads by plan.h div_by_magic with
  /// magic = heads_magic(heads) (exact for 0 <= r < 2^32; rows <= kMaxT =
  /// 2^32). Rows::row's 64-bit division and remainder compile to a call.
  __device__ __forceinline__ P* row(int64_t r, uint64_t magic) const {
    if constexpr (kHeads) {
      const int64_t t = static_cast<int64_t>(div_by_magic(static_cast<uint64_t>(r), magic));
      return p + t * stride + (r - t * heads) * stride_h;
    } else {
      return p + r * stride;
    }
  }
};


/// Kernel arguments of the backward chunk pass (bwd_chunk_pass.cuh).
template <class WT, bool kHeads = false>
struct BwdRows {
  Rows<const __nv_bfloat16, kHeads> dy;
  Rows<const __nv_bfloat16, kHeads> x;
  const WT* w;
  const float* rstd;
  Rows<__nv_bfloat16, kHeads> dx;
  int64_t T;
  int H;  ///< columns are int on the device (H <= kMaxH)
  int64_t num_chunks;
  bool vec;
  Rows<const __nv_bfloat16> add{nullptr, 0};  ///< form res: dh_new, added to dx (p == nullptr: none)
  const double* msq = nullptr;  ///< optional [T]: the forward's m per row (dw: rstd.h rstd_refined)
};

/// Grid-stride loop helper: [begin, n) with step gridDim*blockDim, 64-bit.
__device__ __forceinline__ int64_t global_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t global_threads() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

}  // namespace normgate::kernels::dev
