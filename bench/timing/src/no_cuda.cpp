// bench/timing/src/no_cuda.cpp: the timing entry points (timing.h) in a build without CUDA: each throws.
#include "built_without_cuda.h"
#include "normgate/bench/candidates.h"
#include "normgate/bench/timing.h"

namespace normgate::kernels {

using detail::no_cuda;

void copy_vec16(void*, const void*, size_t, Stream) { no_cuda("copy_vec16"); }
void run_ceiling_kind(const std::string&, void*, const void*, size_t, Stream) { no_cuda("run_ceiling_kind"); }
TimingStats time_graph(const std::function<void(Stream)>&, int, int) { no_cuda("time_graph"); }
void graph_spans_start() { no_cuda("graph_spans_start"); }
std::vector<GraphSpan> graph_spans_take() { no_cuda("graph_spans_take"); }
std::vector<GraphSpan> graph_spans_stop() { no_cuda("graph_spans_stop"); }

struct CandidateBench::Impl {};
CandidateBench::CandidateBench(int64_t H, WDtype w, Form form, int64_t t_max)
    : H_(H), t_max_(t_max), w_(w), form_(form) {
  no_cuda("CandidateBench");
}
CandidateBench::~CandidateBench() = default;
double CandidateBench::bytes(Op, int64_t) const { no_cuda("CandidateBench::bytes"); }
CandidateTimes CandidateBench::time(Op, int64_t, std::span<const Variant* const>, int, int) {
  no_cuda("CandidateBench::time");
}

}  // namespace normgate::kernels
