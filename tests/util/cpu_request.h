// tests/util/cpu_request.h: a check request for the validators tests.
#pragma once

#include "normgate/seeds/case_id.h"
#include "normgate/harness/pipeline.h"

namespace normgate::validators::testing {

/// A check of one implementation `impl` on case `id` (seeds::parse_case
/// syntax; throws as parse_case) with the CPU models, 2 OpenMP threads.
inline CheckRequest cpu_request(const char* id, const char* impl) {
  CheckRequest req;
  req.id = seeds::parse_case(id);
  req.impls = {impl};
  req.backend = Backend::cpu;
  req.threads = 2;
  return req;
}

}  // namespace normgate::validators::testing
