// host_memory.cpp: the host-memory checks of normgate/gate/host_memory.h.
#include "normgate/gate/host_memory.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "normgate/core/host_memory.h"
#include "normgate/harness/devices.h"
#include "normgate/harness/external.h"

namespace normgate::validators {

namespace {

// require_host_memory for a count of implementations per case (counts[k] for
// cases[k]); the message names the largest case's count.
// fwd_only[k]: case k validates the forward only. held: the GPU pipeline's
// cases in host memory at once and its pinned staging (GateHold; {1, 0}
// outside the gate).
void require_memory_for(const std::vector<seeds::CaseId>& cases, const std::vector<size_t>& counts,
                        const std::vector<bool>& fwd_only, MemoryExtra extra = MemoryExtra::none,
                        const GateHold& held = GateHold{}) {
  const seeds::CaseId* big = nullptr;
  size_t big_impls = 0, big_k = 0;
  unsigned __int128 most = 0;
  std::vector<unsigned __int128> bytes(cases.size(), 0);  // each case's, for the advice below
  // export --full keeps every case's FP32 dx map (4 bytes an element) until
  // it writes the file: their sum comes on top of the largest case.
  unsigned __int128 maps = 0;
  if (extra == MemoryExtra::full_dx_maps)
    for (const auto& c : cases)
      maps += static_cast<unsigned __int128>(4) * static_cast<uint64_t>(c.rows()) * static_cast<uint64_t>(c.H);
  for (size_t k = 0; k < cases.size(); ++k) {
    const seeds::CaseId& c = cases[k];
    // BF16 [rows, H] tensors, in thirds (heads24's x is the q slice of a
    // packed qkv row of (24 + 8 + 8) x 256: 5/3 of a tensor). A case holds
    // both ops' inputs whichever it checks: x and dy; form res h, u, dy,
    // dh_new and the expected h_new. Each implementation's outputs: y (res:
    // and h_new), and dx with the backward. Measured (`normgate check
    // --backend cpu`, peak RSS over T, H = 1024 and heads24): plain 6.1
    // (forward only) and 8.0 bytes an element, two backward implementations
    // 11.9, res 13.9 and 15.8, heads24 6.9 and 8.9; this gives 6, 8, 12,
    // 14, 16, 7.3 and 9.3.
    const bool res = c.form == normgate::Form::res;
    const uint64_t in3 = (res ? 15 : 6) + (c.form == normgate::Form::heads24 ? 2 : 0);
    const bool forward_only = fwd_only[k];
    const uint64_t out3 = 3 * (forward_only ? (res ? 2 : 1) : (res ? 3 : 2));
    // repro --save (MemoryExtra::case_file): 14 bytes an element, res 24.
    const uint64_t file3 = extra == MemoryExtra::case_file ? (res ? 36 : 21) : 0;
    const unsigned __int128 b = static_cast<unsigned __int128>(2) * static_cast<uint64_t>(c.rows()) *
                                static_cast<uint64_t>(c.H) * (in3 + out3 * counts[k] + file3) / 3;
    bytes[k] = b;
    if (big == nullptr || b > most) most = b, big = &c, big_impls = counts[k], big_k = k;
  }
  const core::HostMemory hm = core::host_memory();
  const uint64_t have64 = hm.usable();
  if (big == nullptr || have64 == 0) return;  // nothing to check, or the host does not say
  // Beside the tensors: the worker threads' stacks, which the address-space
  // limit counts as soon as the threads start (core::thread_stacks_bytes),
  // and a margin of 1% + 32 MiB for the rest (the oracle's row arrays, the
  // runtime's own allocations; measured 4-14 MB over the tensors at 41M
  // elements under ulimit -v). A gate on the GPU holds held.cases cases at
  // once (each up to the largest) and its pinned staging buffers.
  const size_t n_held = std::max<size_t>(held.cases, 1);
  const unsigned __int128 case_bytes = most;  // the largest case, its extra included
  const unsigned __int128 tensors = case_bytes * n_held + maps;
  const unsigned __int128 stacks = core::thread_stacks_bytes();
  const unsigned __int128 pinned = held.pinned_bytes;
  const unsigned __int128 external = held.external_bytes;
  constexpr uint64_t kFixed = uint64_t{32} << 20;
  const unsigned __int128 margin = tensors / 100 + kFixed;
  most = tensors + stacks + pinned + external + margin;
  const unsigned __int128 have = have64;
  if (most <= have) return;
  auto gib = [](unsigned __int128 b) { return core::gib_and_bytes(b); };
  const std::string where = hm.describe_usable();
  const std::string what =
      (big_impls == 0 ? std::string("its inputs")
                      : "its inputs and the outputs of " + std::to_string(big_impls) +
                            (big_impls == 1 ? " implementation" : " implementations")) +
      (extra == MemoryExtra::case_file ? ", and the case file built in memory (--save)"
       : extra == MemoryExtra::full_dx_maps
           ? ", and " + core::gib_and_bytes(maps) + " for the full dx maps of " + std::to_string(cases.size()) +
                 (cases.size() == 1 ? " case" : " cases") + " (--full)"
           : std::string());
  // The largest T of this shape that fits: the tensors grow linearly in T
  // (the other cases' maps, under --full, taken as they are). Every case of
  // the same H and form must fit at that T (a gate's backward window needs
  // more a row than a forward-only one that may be the largest case now).
  const unsigned __int128 own_maps =
      extra == MemoryExtra::full_dx_maps
          ? static_cast<unsigned __int128>(4) * static_cast<uint64_t>(big->rows()) * static_cast<uint64_t>(big->H)
          : 0;
  const unsigned __int128 fixed_maps = maps - own_maps;
  unsigned __int128 case_per_t = 0;
  for (size_t k = 0; k < cases.size(); ++k)
    if (cases[k].H == big->H && cases[k].form == big->form && cases[k].T > 0)
      case_per_t = std::max(case_per_t, bytes[k] / static_cast<uint64_t>(cases[k].T));
  // An external implementation's extra is taken as it is (a workspace need
  // not grow with T): the advice holds it fixed and says so.
  const unsigned __int128 per_t =
      big->T > 0 ? case_per_t * n_held + own_maps / static_cast<uint64_t>(big->T) : 0;
  const unsigned __int128 fixed = stacks + pinned + kFixed + fixed_maps + external;
  const unsigned __int128 room = have > fixed ? have - fixed : 0;
  const unsigned __int128 t_max = per_t > 0 ? room * 100 / (per_t * 101) : 0;
  const std::string ext_case = external > 0 ? seeds::to_string(held.external_case) : std::string();
  const std::string beside_ext =
      external > 0 ? " (beside the " + gib(external) + " of external implementation " + held.external_name + " at " +
                         ext_case + ")"
                   : std::string();
  const std::string advice =
      t_max >= 1 ? ": choose T <= " + std::to_string(static_cast<uint64_t>(t_max)) + " at this H and form" +
                       beside_ext + (big_impls > 1 ? ", or fewer implementations" : "")
      : external > 0 && have <= stacks + pinned + kFixed + fixed_maps + external
          ? ": external implementation " + held.external_name + " alone needs more than that at " + ext_case +
                " (its staging copies and the host workspace its bwd_workspace_bytes asks for): route it smaller "
                "cases or give this process more memory"
          : ": no T of this H and form fits" + beside_ext;
  const std::string held_words =
      n_held > 1 ? " for " + std::to_string(n_held) + " cases held at once (" + held.why + "), each up to " +
                       gib(case_bytes)
                 : std::string();
  const std::string pinned_words = held.pinned_bytes > 0 ? gib(pinned) + " of pinned staging buffers, " : "";
  const std::string external_words =
      external > 0 ? gib(external) + " that external implementation " + held.external_name + " holds beside its case's tensors (" +
                         seeds::to_string(held.external_case) + ": staging copies and its host workspace), "
                   : "";
  const bool mixed = std::find(fwd_only.begin(), fwd_only.end(), !fwd_only[big_k]) != fwd_only.end();
  const std::string check_words = mixed ? (fwd_only[big_k] ? ", a forward-only check" : ", a backward check") : "";
  throw std::invalid_argument("case " + seeds::to_string(*big) + " (" + std::to_string(big->rows()) + " rows of " +
                              std::to_string(big->H) + check_words + ") needs about " + gib(most) + " of host memory: " +
                              gib(tensors) + (extra == MemoryExtra::none ? " of BF16 tensors (" : " of arrays (") +
                              what + ")" + held_words + ", " + pinned_words + external_words + gib(stacks) +
                              " for the threads' stacks and " + gib(margin) + " of margin (1% + 32 MiB); more than " +
                              where + advice);
}

}  // namespace

void require_host_memory(const std::vector<seeds::CaseId>& cases, size_t n_impls, bool forward_only) {
  require_memory_for(cases, std::vector<size_t>(cases.size(), n_impls), std::vector<bool>(cases.size(), forward_only));
}

void require_host_memory(const std::vector<seeds::CaseId>& cases, size_t n_impls, bool forward_only, size_t copies,
                         const std::string& why) {
  GateHold held;
  held.cases = std::max<size_t>(copies, 1);
  held.why = why;
  require_memory_for(cases, std::vector<size_t>(cases.size(), n_impls), std::vector<bool>(cases.size(), forward_only),
                     MemoryExtra::none, held);
}

void require_host_memory(const std::vector<seeds::CaseId>& cases, size_t n_impls, MemoryExtra extra) {
  require_memory_for(cases, std::vector<size_t>(cases.size(), n_impls), std::vector<bool>(cases.size(), false), extra);
}

void require_host_memory(const std::vector<seeds::CaseId>& cases, size_t n_impls, MemoryExtra extra,
                         const GateHold& external) {
  GateHold held;
  held.external_bytes = external.external_bytes;
  held.external_case = external.external_case;
  held.external_name = external.external_name;
  require_memory_for(cases, std::vector<size_t>(cases.size(), n_impls), std::vector<bool>(cases.size(), false), extra,
                     held);
}

GateHold gate_hold(validators::Backend backend, const std::vector<int>& devices) {
  GateHold h;
  if (backend != validators::Backend::gpu) return h;
  const size_t g = devices.empty() ? static_cast<size_t>(std::max(kernels::device_count(), 1)) : devices.size();
  h.cases = validators::cases_in_host_memory(true, g);
  h.pinned_bytes = validators::kPinnedStagingBytes;
  h.why = g == 1 ? "the case being checked and the next one prepared on the GPU"
                 : "the case being checked and one prepared ahead by each of " + std::to_string(g) + " GPU workers";
  return h;
}

void require_gate_host_memory(const std::vector<seeds::CaseId>& bwd_cases, const std::vector<seeds::CaseId>& fwd_cases,
                              const GateHold& held) {
  std::vector<seeds::CaseId> all = bwd_cases;
  all.insert(all.end(), fwd_cases.begin(), fwd_cases.end());
  std::vector<bool> fwd(bwd_cases.size(), false);
  fwd.resize(all.size(), true);
  require_memory_for(all, std::vector<size_t>(all.size(), 1), fwd, MemoryExtra::none, held);
}

void require_host_memory(const std::vector<seeds::CaseId>& cases, const std::vector<std::string>& impls,
                         bool forward_only) {
  std::vector<size_t> counts(cases.size(), 0);
  GateHold held;
  for (size_t k = 0; k < cases.size(); ++k)
    for (const auto& impl : impls)
      if (validators::unsupported_reason(impl, cases[k]).empty()) {
        // The FP32 eager baseline computes its backward too on a forward-only
        // check (its dx beside its y: two forward implementations' outputs;
        // measured: bad_alloc under ulimit -v where one was counted).
        counts[k] += forward_only && impl == "fp32-baseline" ? 2 : 1;
        if (const kernels::Variant* v = kernels::find_variant(impl)) add_external_hold(held, *v, {cases[k]});
      }
  require_memory_for(cases, counts, std::vector<bool>(cases.size(), forward_only), MemoryExtra::none, held);
}

void add_external_hold(GateHold& held, const GatePlan& plan) {
  for (const auto& w : plan.windows) {
    if (w.variant == nullptr || !w.variant->external || w.largest.T <= 0) continue;
    std::vector<seeds::CaseId> cases;
    for (int64_t t : w.t) {
      seeds::CaseId c = w.largest;
      c.T = t;
      cases.push_back(c);
    }
    cases.push_back(w.largest);
    add_external_hold(held, *w.variant, cases);
  }
}

void add_external_hold(GateHold& held, const kernels::Variant& variant, const std::vector<seeds::CaseId>& cases) {
  if (!variant.external) return;
  for (const auto& c : cases) {
    uint64_t b = 0;
    try {
      b = external_host_bytes(variant, c);
    } catch (const std::exception& e) {
      // Before any work: the implementation cannot size a run of a case the
      // table gives it (a plugin's bwd_workspace_bytes refusing the shape).
      throw std::invalid_argument("external implementation " + std::string(variant.name) + " cannot size a run of case " +
                                  seeds::to_string(c) + " (asked before any work): " + e.what());
    }
    if (b > held.external_bytes) {
      held.external_bytes = b;
      held.external_case = c;
      held.external_name = std::string(variant.name);
    }
  }
}


}  // namespace normgate::validators
