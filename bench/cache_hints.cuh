// bench/cache_hints.cuh: the 16-byte loads and y stores with cache hints
// that the forward experiments share (bench/fwd_narrow.cuh `--fwd-narrow
// 16:2:256:K`, bench/fwd_rows.cuh `--fwd-rows R:S:B:F:P:K`); not used by
// any variant. K (the arithmetic never changes, only the instructions):
//   0  the variants' code: load_group (ld.global.nc, the __ldg path) and
//      store_y_group (NVVM may split a 16-byte y store into 32-bit ones);
//   1  every y store one st.global.v4.b32;
//   2  as 1 with st.global.cs (evict first: streaming store);
//   3  as 1 with loads ld.global.nc.L1::no_allocate;
//   4  loads as 3 with an L2 evict_first policy (createpolicy.fractional,
//      as Triton's eviction_policy="evict_first"), stores as 2.
// PTX ISA: ld (cache eviction priority, L2::cache_hint), st (.cs),
// createpolicy.
#pragma once

#include "device_blocks.cuh"

namespace benchhints {

using normgate::kernels::dev::Group8;

// 16 bytes of a row at p (16-byte aligned) with kHint's load (file comment).
template <int kHint>
__device__ __forceinline__ Group8 hint_load(const __nv_bfloat16* p) {
  Group8 g;
  if constexpr (kHint == 3) {
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(g.u.x), "=r"(g.u.y), "=r"(g.u.z), "=r"(g.u.w)
        : "l"(p));
  } else if constexpr (kHint == 4) {
    uint64_t pol;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
        : "=r"(g.u.x), "=r"(g.u.y), "=r"(g.u.z), "=r"(g.u.w)
        : "l"(p), "l"(pol));
  } else {
    g.u = __ldg(reinterpret_cast<const uint4*>(p));
  }
  return g;
}

// y = BF16_rn((x * rstd) * w) for one group (store_y_group's arithmetic),
// stored at p (16-byte aligned) with kHint's store (file comment).
template <int kHint>
__device__ __forceinline__ void hint_store_y(__nv_bfloat16* p, const Group8& x, float rs, const float (&w)[8]) {
  namespace dv = normgate::kernels::dev;
  if constexpr (kHint == 0) {
    dv::store_y_group(p, 0, 8, true, x, rs, w);
  } else {
    uint32_t u[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const __nv_bfloat162 b =
          __floats2bfloat162_rn(normgate::mul_rn(normgate::mul_rn(dv::group_at(x, 2 * i), rs), w[2 * i]),
                                normgate::mul_rn(normgate::mul_rn(dv::group_at(x, 2 * i + 1), rs), w[2 * i + 1]));
      u[i] = *reinterpret_cast<const uint32_t*>(&b);
    }
    if constexpr (kHint == 2 || kHint == 4)
      asm volatile("st.global.cs.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(u[0]), "r"(u[1]), "r"(u[2]), "r"(u[3])
                   : "memory");
    else
      asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(u[0]), "r"(u[1]), "r"(u[2]), "r"(u[3])
                   : "memory");
  }
}

}  // namespace benchhints
