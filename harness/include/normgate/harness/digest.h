// normgate/harness/digest.h: one implementation's outputs on one case,
// digested (core/output_digest.h) instead of validated: the evidence that two
// builds of a variant compute the same bits (`normgate digest`,
// docs/perf/routes.md D19).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "normgate/harness/pipeline.h"
#include "normgate/harness/runner.h"
#include "normgate/seeds/case_id.h"

namespace normgate::validators {

/// Run implementation `impl` (a registered, non-external variant name; the
/// variants it runs are impl_variants(impl, c): a forward variant with its
/// carrier backward, a backward variant after the default forward) on case
/// c as a check would, and digest its outputs: y, rstd (and h_new for form
/// res) always; dx and dw unless `forward_only`. Backend gpu (or auto with a
/// GPU): kernels::run_gpu_digests, the outputs digested on the device;
/// cpu: the inputs generated on the host (seeds::generate_host) and the
/// variants' CPU models run (kernels::run_model), digested on the host. The
/// two backends give the same digests wherever the model is bitwise the
/// kernel. threads: OpenMP threads for generation and model (<= 0: default).
/// Throws std::invalid_argument for an unknown or external impl, a case it
/// does not support, or backend gpu without a GPU; std::runtime_error on a
/// CUDA error.
kernels::OutputDigests digest_case(const std::string& impl, const seeds::CaseId& c, Backend backend,
                                   bool forward_only, int threads = 0);

/// lines_sha256 of a digests file's entry (docs/schemas.md, "Digests"):
/// SHA-256 (lower-case hex) of its lines, each ended by a newline.
std::string digest_lines_sha256(const std::vector<std::string>& lines);

/// file_sha256 of a digests file (docs/schemas.md, "Digests"): SHA-256
/// (lower-case hex) of `doc` without its "file_sha256" key, dumped compactly
/// (nlohmann::json::dump(): keys sorted, no whitespace). The writer seals
/// with it and the carry checks with it.
std::string digests_file_sha256(nlohmann::json doc);

/// "y=<16 hex> rstd=<16 hex>", then " msq=..." when has_msq, " h_new=..."
/// when has_h_new, " dx=... dw=..." when has_bwd (lower-case hex,
/// zero-padded).
std::string to_string(const kernels::OutputDigests& d);

}  // namespace normgate::validators
