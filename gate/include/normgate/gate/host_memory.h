// normgate/gate/host_memory.h: host-memory checks made before any work.
//
// A check, gate or export that cannot fit in host memory is refused at once
// (std::invalid_argument naming the largest case, the bytes it needs and the
// host's or cgroup's limit: exit 2 in the CLI, NG_EINVAL in the C API and a
// ValueError in Python), rather than ended hours in by std::bad_alloc or the
// OOM killer. The CLI's subcommands and ng_gate share these functions, so the
// refusal and its wording are the same whichever way a gate is started.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "normgate/gate/gate.h"
#include "normgate/harness/pipeline.h"
#include "normgate/seeds/case_id.h"

namespace normgate::validators {

/// The least host memory, in bytes, that checking one of `cases` at a time
/// with `n_impls` implementations needs: its BF16 [rows, H] tensors held at
/// once, the inputs (x, and dy for a backward check; form res adds u, and
/// dh_new for a backward check) and each implementation's outputs (y, and
/// dx for a backward check), 2 bytes an element each. `forward_only`: the
/// check validates the forward only (check --outputs fwd). The oracle's
/// per-row and per-column data and the validation tiles come on top
/// (measured: 8.0 bytes an element at plain [32768, 4096] with one
/// implementation, where this bound is 8); a gate's cases prepared ahead:
/// require_gate_host_memory. Throws
/// std::invalid_argument naming the largest case, this bound and the host's
/// physical memory, or the memory limit of its cgroups when that is lower
/// (core::host_memory: the limit and the file it came from are named), when
/// the bound exceeds it, so a check that cannot fit is refused before any
/// work rather than ended by std::bad_alloc or the OOM killer; one that
/// passes may still need more than the host has free.
void require_host_memory(const std::vector<seeds::CaseId>& cases, size_t n_impls, bool forward_only = false);

/// The same for a caller that holds `copies` (>= 1) of a case's inputs and
/// outputs at once (`why` says which, for the message): normgate.check runs
/// a deterministic implementation twice beside the oracle's copy of the
/// inputs (3), normgate.generate builds the inputs and copies them out (2).
void require_host_memory(const std::vector<seeds::CaseId>& cases, size_t n_impls, bool forward_only, size_t copies,
                         const std::string& why);

/// What a command builds in memory beside the checked case, for
/// require_host_memory (peak RSS measured with and without it, `--backend
/// cpu`, H = 1024 plain and res, H = 256 heads24 and heads4, two T each):
enum class MemoryExtra {
  none,
  /// `repro --save`: the arrays it saves (references, error maps) and the
  /// HDF5 file image (audit/src/h5.cpp, the core driver): 14 bytes an
  /// element (plain and the per-head views), 24 for form res.
  case_file,
  /// `export --full`: the [T, H] FP32 dx err/tol map of every case, kept
  /// until the file is written: 4 bytes an element, summed over the cases.
  full_dx_maps,
};

/// require_host_memory(cases, n_impls) plus `extra` (its bytes named in the
/// message), plus the external implementations' extra of `held` (GateHold
/// below, add_external_hold; its other fields ignored).
struct GateHold;
void require_host_memory(const std::vector<seeds::CaseId>& cases, size_t n_impls, MemoryExtra extra);
void require_host_memory(const std::vector<seeds::CaseId>& cases, size_t n_impls, MemoryExtra extra,
                         const GateHold& external);

/// The same with the implementations named: each case counts only those
/// that support it (validators::unsupported_reason empty), as `check
/// --variant all` runs them.
void require_host_memory(const std::vector<seeds::CaseId>& cases, const std::vector<std::string>& impls,
                         bool forward_only = false);

/// What a gate holds in host memory beside one case's tensors
/// (gate_hold): `cases` cases at once, each up to the largest, and
/// `pinned_bytes` of page-locked staging buffers; `why` says where the
/// count comes from, for the refusal's message.
struct GateHold {
  size_t cases = 1;
  uint64_t pinned_bytes = 0;
  std::string why;
  /// Host memory an external implementation's run holds beyond its case's
  /// tensors (harness/external.h ExternalImpl::host_bytes: a plugin's staging
  /// copies and host workspace), the largest over the checked cases, counted
  /// once (external runs take turns); external_case is that case and
  /// external_name its implementation. 0: none.
  uint64_t external_bytes = 0;
  seeds::CaseId external_case{};
  std::string external_name;
};

/// Raise held's external_bytes to the largest ExternalImpl::host_bytes of
/// `variant` over `cases` (harness/external.h external_host_bytes; nothing
/// for a variant that is not external). An exception of host_bytes (a
/// plugin's bwd_workspace_bytes failing) becomes std::invalid_argument
/// naming the implementation and the case: the run is refused before any
/// work (exit 2).
void add_external_hold(GateHold& held, const kernels::Variant& variant, const std::vector<seeds::CaseId>& cases);

/// add_external_hold for every window of a gate's plan routed to an
/// external implementation, over the window's grid T points and its upper
/// T (where refinement may go), each at the largest case's family and seed.
void add_external_hold(GateHold& held, const GatePlan& plan);

/// The gate's hold on `backend` (resolved) over `devices` (the --devices
/// list; empty: every visible device, at least one): on the GPU
/// validators::cases_in_host_memory (the case being checked and one
/// prepared ahead by each worker, a device listed twice counting twice,
/// unless NORMGATE_OVERLAP=0) and validators::kPinnedStagingBytes; on any
/// other backend one case, nothing pinned.
GateHold gate_hold(validators::Backend backend, const std::vector<int>& devices);

/// require_host_memory for a gate's cases (gate, derive --gate): one
/// implementation each, `bwd_cases` checking the backward
/// and `fwd_cases` the forward only, `held.cases` of the largest of either
/// held at once plus `held.pinned_bytes`. The same refusal (exit 2 through
/// std::invalid_argument), naming the count and why, and the largest T
/// that fits with that many held.
void require_gate_host_memory(const std::vector<seeds::CaseId>& bwd_cases, const std::vector<seeds::CaseId>& fwd_cases,
                              const GateHold& held);

}  // namespace normgate::validators
