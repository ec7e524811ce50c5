// bench/timing/src/graph_spans_none.cpp: timing.h's graph spans in a CUDA build
// whose toolkit has no cupti.h (graph_spans.cpp needs its types).
#include <stdexcept>
#include <vector>

#include "normgate/bench/timing.h"

namespace normgate::kernels {

void graph_spans_start() {
  throw std::runtime_error("graph_spans_start: built without CUPTI headers (cupti.h not found at configure time)");
}
std::vector<GraphSpan> graph_spans_take() {
  throw std::runtime_error("graph_spans_take: built without CUPTI headers (cupti.h not found at configure time)");
}
std::vector<GraphSpan> graph_spans_stop() {
  throw std::runtime_error("graph_spans_stop: built without CUPTI headers (cupti.h not found at configure time)");
}

}  // namespace normgate::kernels
