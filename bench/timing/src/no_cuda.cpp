// bench/timing/src/no_cuda.cpp: the timing entry points (timing.h) in a build without CUDA: each throws.
#include "built_without_cuda.h"
#include "normgate/bench/timing.h"

namespace normgate::kernels {

using detail::no_cuda;

void copy_vec16(void*, const void*, size_t, Stream) { no_cuda("copy_vec16"); }
TimingStats time_graph(const std::function<void(Stream)>&, int, int) { no_cuda("time_graph"); }
void graph_spans_start() { no_cuda("graph_spans_start"); }
std::vector<GraphSpan> graph_spans_take() { no_cuda("graph_spans_take"); }
std::vector<GraphSpan> graph_spans_stop() { no_cuda("graph_spans_stop"); }

}  // namespace normgate::kernels
