// gate/src/gate_internal.h (internal): what the gate's planner (windows.cpp),
// run loop (run.cpp) and reports share: the names of the outputs, a gate's
// options parsed and its table loaded, the window selection (--base,
// --windows), the input checks both plan_gate and run_gate make.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "normgate/core/report_util.h"
#include "normgate/gate/gate.h"
#include "normgate/routing/routing.h"
#include "normgate/seeds/seed_set.h"

namespace normgate::validators::gate_detail {

// Names every gate source uses unqualified (each .cpp says `using namespace
// gate_detail;`).
using kernels::Op;
using kernels::Route;
using detail::Clock;
using detail::fmt;
using detail::num;
using detail::since;

inline constexpr const char* kOut[4] = {"y", "rstd", "dx", "dw"};

/// Now as UTC ISO 8601 ("2026-12-01T03:03:23Z").
std::string utc_now();

/// Option checks common to plan_gate and run_gate (std::invalid_argument naming the option).
void check_options(const GateOptions& o);

/// "gpu" or "cpu-model" (kernels::kGpuBackend / kCpuModelBackend).
std::string backend_name(Backend b);

/// A window's cases at the T points ts: every (family, seed) of s per T.
std::vector<seeds::CaseId> expand(const Route& r, const std::vector<int64_t>& ts, const seeds::SeedSet& s);

// What a gate's options name, parsed and loaded (throws the input errors).
struct GateInputs {
  seeds::SeedSet seed_set;
  WindowFilter filter;
  kernels::LoadOptions lo;
  kernels::RouteTable table;
};
GateInputs load_gate_inputs(const GateOptions& opt);

// The windows a gate covers: --base (changed windows only), then --windows.
struct Selection {
  std::vector<const Route*> gated;
  std::vector<std::string> skipped, removed, filtered_out;
  std::vector<std::string> source_changed;  ///< --base: same window and variant, sources not proven the same
  std::string base_sha256;
};
Selection select_windows(const GateOptions& opt, const kernels::RouteTable& table, const WindowFilter& filter,
                         const kernels::LoadOptions& lo);

/// rows x H of a case, as a double.
double elements_of(const seeds::CaseId& c);

// Input errors of the seed set that run_gate and plan_gate both refuse (the
// same messages). Fresh seeds follow the set's last seed: fresh_factor x its per-family count.
uint64_t fresh_seed_count(const seeds::SeedSet& set, int fresh_factor, const std::string& canonical);

}  // namespace normgate::validators::gate_detail
