// kernels/src/pipeline.cpp: the process-wide pipeline depth (pipeline.h).
#include "normgate/kernels/pipeline.h"

#include <atomic>
#include <stdexcept>
#include <string>

namespace normgate::kernels {

namespace {
std::atomic<int> g_fwd{PipelineDepth{}.fwd};
std::atomic<int> g_l2{PipelineDepth{}.fwd_l2};

void check(const char* what, int v, int lo) {
  if (v < lo || v > kMaxPipelineDepth)
    throw std::invalid_argument(std::string("pipeline depth ") + what + " = " + std::to_string(v) + " (must be " +
                                std::to_string(lo) + ".." + std::to_string(kMaxPipelineDepth) + ")");
}
}  // namespace

PipelineDepth pipeline_depth() { return {g_fwd.load(), g_l2.load()}; }

void set_pipeline_depth(PipelineDepth d) {
  check("fwd", d.fwd, 1);
  check("fwd_l2", d.fwd_l2, 0);
  g_fwd.store(d.fwd);
  g_l2.store(d.fwd_l2);
}

}  // namespace normgate::kernels
