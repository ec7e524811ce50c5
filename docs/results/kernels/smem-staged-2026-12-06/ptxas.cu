#include "fwd_smem.cuh"
#include "fwd_rows.cuh"
template __global__ void fwdsmem::fwd_smem_kernel<2,0,__nv_bfloat16>(const __nv_bfloat16*, const __nv_bfloat16*, __nv_bfloat16*, float*, double*, int64_t, int, int, double, double);
template __global__ void fwdsmem::fwd_smem_kernel<4,0,__nv_bfloat16>(const __nv_bfloat16*, const __nv_bfloat16*, __nv_bfloat16*, float*, double*, int64_t, int, int, double, double);
template __global__ void fwdsmem::fwd_smem_kernel<2,8,__nv_bfloat16>(const __nv_bfloat16*, const __nv_bfloat16*, __nv_bfloat16*, float*, double*, int64_t, int, int, double, double);
template __global__ void fwdsmem::fwd_smem_kernel<4,8,__nv_bfloat16>(const __nv_bfloat16*, const __nv_bfloat16*, __nv_bfloat16*, float*, double*, int64_t, int, int, double, double);
template __global__ void fwdsmem::fwd_smem_kernel<4,0,float>(const __nv_bfloat16*, const float*, __nv_bfloat16*, float*, double*, int64_t, int, int, double, double);
template __global__ void fwdsmem::fwd_smem_kernel<4,8,float>(const __nv_bfloat16*, const float*, __nv_bfloat16*, float*, double*, int64_t, int, int, double, double);
template __global__ void fwdrows::fwd_rows_kernel<1,4,0,0,__nv_bfloat16,0,0>(const __nv_bfloat16*, const __nv_bfloat16*, __nv_bfloat16*, float*, double*, int64_t, int, int, double, double);
template __global__ void fwdrows::fwd_rows_kernel<1,2,0,0,__nv_bfloat16,0,0>(const __nv_bfloat16*, const __nv_bfloat16*, __nv_bfloat16*, float*, double*, int64_t, int, int, double, double);
