// tests/util/rejection_fixture.h: a valid rejection record (every field
// passes rejections.h's validate_rejection), as derive writes one on the CPU
// models, for tests that need a rejections file without running derive.
#pragma once

#include <string>

#include "normgate/kernels/registry.h"
#include "normgate/routing/rejections.h"

namespace normgate::test {

/// bwd det H=64 bf16 plain, T = 2..8 excluded of the gated 1..600,
/// bwd_fp32_blocked with this build's source hash, cpu-model, dw err/tol 3.5
/// on a cancel case.
inline kernels::Rejection valid_rejection() {
  kernels::Rejection r;
  r.op = kernels::Op::bwd;
  r.mode = kernels::Mode::det;
  r.H = 64;
  r.w = WDtype::bf16;
  r.form = Form::plain;
  r.t_lo = 2;
  r.t_hi = 8;
  r.gated_lo = 1;
  r.gated_hi = 600;
  r.variant = "bwd_fp32_blocked";
  r.source_sha256 = std::string(kernels::find_variant("bwd_fp32_blocked")->source_sha256);
  r.backend = "cpu-model";
  r.gpu = "cpu-model";
  r.worst_case = "H=64,T=5,w=bf16,form=plain,family=cancel,seed=1";
  r.worst_err_tol = 3.5;
  r.worst_output = "dw";
  r.date = "2026-12-01T03:03:23Z";
  r.normgate_commit = "7f3941123e32";
  r.normgate_version = "0.2.0";
  return r;
}

}  // namespace normgate::test
