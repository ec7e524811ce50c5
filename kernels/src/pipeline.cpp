// kernels/src/pipeline.cpp: the process-wide forward streaming settings (pipeline.h).
#include "normgate/kernels/pipeline.h"

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace normgate::kernels {

namespace {
// fwd in bits 0-7, fwd_l2 in bits 8-15, fwd_block in bits 16-47,
// fwd_res_fused in bit 48, fwd_simple in bit 49, fwd_res_simple in bit 50,
// fwd_rstd_warp in bit 51: one word.
constexpr uint64_t pack(const PipelineDepth& d) {
  return static_cast<uint64_t>(d.fwd) | (static_cast<uint64_t>(d.fwd_l2) << 8) |
         (static_cast<uint64_t>(d.fwd_block) << 16) | (static_cast<uint64_t>(d.fwd_res_fused ? 1 : 0) << 48) |
         (static_cast<uint64_t>(d.fwd_simple ? 1 : 0) << 49) | (static_cast<uint64_t>(d.fwd_res_simple ? 1 : 0) << 50) | (static_cast<uint64_t>(d.fwd_rstd_warp ? 1 : 0) << 51);
}
std::atomic<uint64_t> g_packed{pack(PipelineDepth{})};

void check(const char* what, int v, int lo, int hi) {
  if (v < lo || v > hi)
    throw std::invalid_argument(std::string("pipeline ") + what + " = " + std::to_string(v) + " (must be " +
                                std::to_string(lo) + ".." + std::to_string(hi) + ")");
}
}  // namespace

PipelineDepth pipeline_depth() {
  const uint64_t p = g_packed.load();
  PipelineDepth d;
  d.fwd = static_cast<int>(p & 0xFFu);
  d.fwd_l2 = static_cast<int>((p >> 8) & 0xFFu);
  d.fwd_block = static_cast<int>((p >> 16) & 0xFFFFFFFFu);
  d.fwd_res_fused = ((p >> 48) & 1u) != 0;
  d.fwd_simple = ((p >> 49) & 1u) != 0;
  d.fwd_res_simple = ((p >> 50) & 1u) != 0;
  d.fwd_rstd_warp = ((p >> 51) & 1u) != 0;
  return d;
}

void set_pipeline_depth(PipelineDepth d) {
  check("fwd", d.fwd, 1, kMaxPipelineDepth);
  check("fwd_l2", d.fwd_l2, 0, kMaxPipelineDepth);
  check("fwd_block", d.fwd_block, 0, kMaxFwdBlockRows);
  g_packed.store(pack(d));
}

}  // namespace normgate::kernels
