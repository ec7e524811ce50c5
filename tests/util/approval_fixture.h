// tests/util/approval_fixture.h: a valid approval record for a route (every
// field passes routing.h's "Validation"), for tests that need approvals on
// file without running a gate.
#pragma once

#include <string>

#include "normgate/routing/routing.h"
#include "normgate/seeds/case_id.h"

namespace normgate::test {

/// A record approving route r's window for its variant: `hash` its source
/// hash ("" : the variant's hash in this build), `backend` "gpu" or
/// "cpu-model"; two T points (one when the window is one T), max err/tol of
/// the op's outputs below 1, the worst case at the window's first T.
inline kernels::Approval valid_approval(const kernels::Route& r, std::string hash = "",
                                        const std::string& backend = "cpu-model") {
  kernels::Approval x;
  x.op = r.op;
  x.mode = r.mode;
  x.H = r.H;
  x.w = r.w;
  x.form = r.form;
  x.t_lo = r.t_lo;
  x.t_hi = r.t_hi;
  x.variant = std::string(r.variant->name);
  x.source_sha256 = hash.empty() ? std::string(r.variant->source_sha256) : std::move(hash);
  x.backend = backend;
  x.gpu = backend == "gpu" ? "NVIDIA H200" : "cpu-model";
  x.driver = backend == "gpu" ? "580.159.04" : "-";
  x.cuda = backend == "gpu" ? "13.0" : "-";
  x.seed_set = "3x16";
  x.t_points = {r.t_lo};
  if (r.t_hi != r.t_lo) x.t_points.push_back(r.t_hi);
  x.cases = 96;
  x.max_err_tol = {{"y", 0.3}, {"rstd", 0.01}};
  if (r.op == kernels::Op::bwd) x.max_err_tol.insert({{"dx", 0.4}, {"dw", 0.02}});
  seeds::CaseId worst;
  worst.H = r.H;
  worst.T = r.t_lo;
  worst.w = r.w;
  worst.form = r.form;
  x.worst_case = seeds::to_string(worst);
  x.date = "2026-12-01T00:00:00Z";
  x.normgate_commit = "test";
  x.normgate_version = "0.2.0";
  return x;
}

}  // namespace normgate::test
