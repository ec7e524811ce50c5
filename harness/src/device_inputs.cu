// harness/src/device_inputs.cu: a case's inputs generated on the device with
// seeds::family_value, the function the host generator calls element by
// element (seeds/families.h), so the bytes equal seeds::generate_host's.
#include <stdexcept>
#include <string>

#include "cuda_check.h"
#include "device_blocks.cuh"
#include "device_buffer.h"
#include "host_download.h"
#include "normgate/core/bf16.h"
#include "normgate/harness/runner.h"
#include "normgate/seeds/families.h"

namespace normgate::kernels {
namespace dev {
namespace {

/// Rows of one [rows, cols] BF16 tensor: CTAs stride over rows, threads over
/// columns. family_value's results are BF16-representable, so the conversion
/// is exact.
__global__ void generate_rows_kernel(const seeds::FamilyParams p, const seeds::Tensor which, uint16_t* out,
                                     int64_t stride, int64_t heads, int64_t stride_h, int64_t rows, int64_t cols) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    uint16_t* o = out + (r / heads) * stride + (r % heads) * stride_h;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
      o[j] = bf16_from_float(seeds::family_value(p, which, r, j));
  }
}

/// The weight vector (row argument 0; family_value ignores it for w).
__global__ void generate_weight_kernel(const seeds::FamilyParams p, void* w, int64_t cols) {
  for (int64_t j = global_thread(); j < cols; j += global_threads()) {
    const float v = seeds::family_value(p, seeds::Tensor::w, 0, j);
    if (p.w == WDtype::bf16)
      static_cast<uint16_t*>(w)[j] = bf16_from_float(v);
    else
      static_cast<float*>(w)[j] = v;
  }
}

}  // namespace
}  // namespace dev

namespace {

void enqueue_rows(const seeds::FamilyParams& p, seeds::Tensor which, uint16_t* out, int64_t stride, int64_t heads,
                  int64_t stride_h, int64_t rows, int64_t cols, cudaStream_t s) {
  if (rows == 0 || cols == 0 || out == nullptr) return;
  const int64_t grid = rows < 65535 * 4 ? rows : 65535 * 4;
  dev::generate_rows_kernel<<<static_cast<unsigned>(grid), 256, 0, s>>>(p, which, out, stride, heads, stride_h, rows,
                                                                        cols);
  NG_CUDA_LAUNCHED("generate_rows_kernel");
}

void check_buffer(const char* name, const void* p, int64_t stride, int64_t heads, int64_t stride_h, int64_t rows,
                  int64_t cols, bool required) {
  if (rows == 0 || cols == 0) return;
  if (p == nullptr) {
    if (required) throw std::invalid_argument(std::string("generate_device_inputs: ") + name + " is null");
    return;
  }
  // Rows written must not overlap: stride_h >= cols and a token's heads
  // within its stride (plain: stride >= cols).
  const int64_t inner = heads > 1 ? (heads - 1) * stride_h + cols : cols;
  if ((heads > 1 && stride_h < cols) || stride < inner)
    throw std::invalid_argument(std::string("generate_device_inputs: ") + name + "_stride = " +
                                std::to_string(stride) + " (head stride " + std::to_string(stride_h) + ", " +
                                std::to_string(heads) + " heads) leaves rows of " + std::to_string(cols) +
                                " overlapping");
}

}  // namespace

void generate_device_inputs(const seeds::CaseId& c, const DeviceInputBuffers& b, Stream stream) {
  const seeds::FamilyParams p = seeds::family_params(c);
  const int64_t rows = p.rows, cols = p.cols;
  if (rows < 0 || cols < 0) throw std::invalid_argument("generate_device_inputs: negative shape");
  if (b.heads < 1 || rows % b.heads != 0)
    throw std::invalid_argument("generate_device_inputs: heads = " + std::to_string(b.heads) + " does not divide " +
                                std::to_string(rows) + " rows");
  const int64_t hd = b.heads, sh = b.stride_h;
  check_buffer("x", b.x, b.x_stride, hd, sh, rows, cols, true);
  check_buffer("dy", b.dy, b.dy_stride, hd, sh, rows, cols, false);
  check_buffer("u", b.u, b.u_stride, hd, sh, rows, cols, false);
  check_buffer("dh_new", b.dh_new, b.dh_new_stride, hd, sh, rows, cols, false);
  if (cols > 0 && b.w == nullptr) throw std::invalid_argument("generate_device_inputs: w is null");
  enqueue_rows(p, seeds::Tensor::x, b.x, b.x_stride, hd, sh, rows, cols, stream);
  enqueue_rows(p, seeds::Tensor::dy, b.dy, b.dy_stride, hd, sh, rows, cols, stream);
  enqueue_rows(p, seeds::Tensor::u, b.u, b.u_stride, hd, sh, rows, cols, stream);
  enqueue_rows(p, seeds::Tensor::dh_new, b.dh_new, b.dh_new_stride, hd, sh, rows, cols, stream);
  if (cols > 0) {
    const int64_t blocks = (cols + 255) / 256;
    dev::generate_weight_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(p, b.w, cols);
    NG_CUDA_LAUNCHED("generate_weight_kernel");
  }
}

seeds::HostInputs generate_inputs_on_gpu(const seeds::CaseId& c) {
  const int64_t rows = c.rows(), cols = c.H;
  if (rows < 0 || cols < 0 || (cols > 0 && rows > (int64_t{1} << 40) / cols))
    throw std::invalid_argument("generate_inputs_on_gpu: rows*cols of " + seeds::to_string(c) +
                                " is negative or exceeds 2^40");
  const size_t n = static_cast<size_t>(rows * cols);
  const bool res = c.form == Form::res;
  detail::DeviceBuffer x(n * 2), dy(n * 2), u(res ? n * 2 : 0), dh(res ? n * 2 : 0);
  detail::DeviceBuffer w(static_cast<size_t>(cols) * (c.w == WDtype::bf16 ? 2 : 4));
  DeviceInputBuffers b;
  b.x = x.as<uint16_t>();
  b.x_stride = cols;
  b.dy = dy.as<uint16_t>();
  b.dy_stride = cols;
  b.w = w.get();
  b.u = res ? u.as<uint16_t>() : nullptr;
  b.u_stride = cols;
  b.dh_new = res ? dh.as<uint16_t>() : nullptr;
  b.dh_new_stride = cols;
  generate_device_inputs(c, b, nullptr);
  NG_CUDA(cudaDeviceSynchronize());

  seeds::HostInputs h;
  h.id = c;
  h.rows = rows;
  h.cols = cols;
  auto down = [&](std::vector<uint16_t>& dst, const detail::DeviceBuffer& src) {
    detail::download_into(dst, src.get(), n, nullptr);  // staged: written once; direct: sized, then DMA
  };
  down(h.x, x);
  down(h.dy, dy);
  if (res) {
    down(h.u, u);
    down(h.dh_new, dh);
  }
  if (c.w == WDtype::bf16) {
    h.w_bf16.resize(static_cast<size_t>(cols));
    if (cols > 0) NG_CUDA(cudaMemcpy(h.w_bf16.data(), w.get(), w.bytes(), cudaMemcpyDeviceToHost));
  } else {
    h.w_f32.resize(static_cast<size_t>(cols));
    if (cols > 0) NG_CUDA(cudaMemcpy(h.w_f32.data(), w.get(), w.bytes(), cudaMemcpyDeviceToHost));
  }
  return h;
}

}  // namespace normgate::kernels
