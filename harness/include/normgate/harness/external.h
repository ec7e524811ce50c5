// normgate/harness/external.h: implementations from outside the registry (a
// Python callable, a plugin library) gated like the built-in variants.
//
// register_external puts an ExternalImpl into the kernel registry
// (kernels::add_external_variant: a Variant flagged `external`, id >= 128,
// its address stable for the life of the process), so route tables may route
// windows to it by name and check, gate and repro run it: wherever a GPU
// variant or its CPU model would run, the harness calls its `run` instead,
// on the case's host inputs, after filling every output buffer with poison
// (BF16 NaN 0x7FC0 for y, dx, h_new; FP32 NaN 0x7FC00000 for rstd, dw).
//
// Outputs an implementation owes (op bwd: y, rstd, dx, dw; op fwd: y, rstd;
// both: h_new for form res) are always validated: one it leaves poisoned
// fails (NaN against a finite reference is over every budget), and the check
// report names it "not produced". Outputs beyond its op (dx, dw of a forward
// implementation) are validated when it writes any element of them, else
// left out of its results (not produced: the gate's record then holds NaN
// and fails, so no window can pass on them). An implementation's y and rstd
// are its own: a bwd external's run never reads another run's forward, and
// a forward window of the default forward never reads an external's run.
//
// Approvals record the external's source_sha256, so an approval goes stale
// (routing.h approval_status) when the registered identity changes; the
// gate's journal header includes it too (a journal of the old code is refused).
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "normgate/core/types.h"
#include "normgate/kernels/registry.h"
#include "normgate/seeds/generate.h"

namespace normgate::validators {

/// An implementation from outside the registry (a Python callable, a plugin
/// library): one training step on a case's host inputs.
struct ExternalImpl {
  std::string name;            // unique; must not clash with a registry variant (error naming it)
  kernels::Op op;              // gated in fwd windows (y, rstd) or bwd windows (y, rstd, dx, dw)
  kernels::Mode mode;          // det / nondet (routes name mode for bwd)
  int64_t h_min = 1, h_max = 16384;
  uint8_t wdtypes = 0b11;      // bit (1 << WDtype)
  uint8_t forms = 0b1;         // bit (1 << Form)
  std::string source_sha256;   // identity of its code: approvals go stale when it changes (64 hex)
  std::string origin;          // e.g. "python", "plugin /abs/path/libx.so"
  std::string description;     // one line
  std::string ran_on;          // for reports, e.g. "python callable on cuda:0", "plugin on gpu NVIDIA H200"
  int cuda_device = -1;        // the CUDA device its run computes on (0-based; case files record its
                               // name, driver and CUDA version: kernels::device_info); -1: the host
  // Run one step: read `in` (the case's inputs, core/types.h + seeds/generate.h HostInputs),
  // write every output it produces into `out` (host vectors sized by the case). Throw
  // std::runtime_error on failure (journalled as the case's error).
  std::function<void(const seeds::HostInputs& in, Outputs& out)> run;
  // Optional: host memory in bytes that one `run` of case c holds beyond the
  // case's inputs and the Outputs it fills (a plugin's staging copies and
  // host workspace), for the host-memory check made before any work
  // (gate/host_memory.h; external_host_bytes). Empty: none. May throw
  // std::runtime_error (e.g. a plugin's bwd_workspace_bytes failing), which
  // refuses the check or gate before it starts.
  std::function<uint64_t(const seeds::CaseId& c)> host_bytes;
};

/// ExternalImpl::host_bytes of the implementation behind `v` for case `c`;
/// 0 when `v` is not external, has no registered implementation or no
/// host_bytes. Exceptions of host_bytes propagate.
uint64_t external_host_bytes(const kernels::Variant& v, const seeds::CaseId& c);

/// Register for this process: afterwards kernels::find_variant(name) finds it
/// (a Variant flagged external, id >= 128, pointer stable), route tables may
/// route windows to it, and check/gate/repro run it through `run`.
/// Throws std::invalid_argument naming a bad field or a clashing name.
///
/// Fields: name [A-Za-z0-9_.+-]{1,64}; op, mode; 1 <= h_min <= h_max <=
/// 16384; wdtypes, forms non-empty bit sets; source_sha256 64 hex digits;
/// origin non-empty; ran_on non-empty; run non-empty; cuda_device >= -1. Registering a name
/// again with the same origin replaces its definition (fields, identity,
/// run) in place and returns the same Variant; not while a check or gate of
/// it runs in another thread. A built-in variant's name, or an external's
/// of another origin, is a clash.
const kernels::Variant& register_external(ExternalImpl impl);

/// The registered implementation behind an external variant, or nullptr
/// when `v` is not external (or was registered only in the kernel registry,
/// without a run). The pointer stays valid until `v` is re-registered.
const ExternalImpl* find_external(const kernels::Variant& v);

/// Every registered external implementation, in registration order (copies
/// of their descriptions; `run` included).
std::vector<ExternalImpl> externals();

/// Thrown out of ExternalImpl::run (or a gate's progress or case hooks) to
/// stop a whole check campaign or gate at once: unlike any other exception
/// it is never journalled as the case's error, so a journal it interrupts
/// resumes as if the process had been killed between cases.
class Cancelled : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Poison bit patterns of the outputs an external run gets (they are
/// overwritten by what the implementation produces).
/// How the error of a case whose implementation is declared deterministic
/// but gave different bits on two runs begins. It is a finding about the
/// implementation, not a failure to run it: the gate counts it as a failure
/// of the window (FAIL, not ERROR), `gate --retry-errors` does not run it
/// again, and no later record of the (case, implementation) replaces it.
inline constexpr std::string_view kNondeterministicError = "nondeterministic: ";

/// How the error of a case begins when its implementation broke the
/// interface in a way no rerun undoes (a plugin writing outside an output's
/// view or past its end; outputs resized): a finding about the
/// implementation, treated as kNondeterministicError is (FAIL, not
/// ERROR; not run again; never replaced by a later record).
inline constexpr std::string_view kContractError = "contract broken: ";

/// Thrown out of ExternalImpl::run for such a breach; run_external
/// journals it as "contract broken: external implementation NAME (ORIGIN)
/// on CASE: what()".
class ContractBroken : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// What an error's first bytes say about an external implementation, read
/// at fixed places only, so that neither ORIGIN (a plugin's path) nor an
/// implementation's own message (which comes later: "... failed on CASE:
/// MESSAGE") can name another implementation or make a failure a finding:
/// only the tags make one.
struct ExternalError {
  enum class Kind {
    none,              ///< not an error of an external's run
    failed,            ///< "external implementation NAME (ORIGIN) ...": a run that failed
    nondeterministic,  ///< kNondeterministicError
    contract_broken,   ///< kContractError
  };
  Kind kind = Kind::none;
  /// NAME as the error spells it ("" for Kind::none); not checked against
  /// the registered externals.
  std::string impl;
  /// A finding about the implementation (nondeterministic or
  /// contract_broken): FAIL, not ERROR; never run again or replaced.
  bool finding() const { return kind == Kind::nondeterministic || kind == Kind::contract_broken; }
};

/// Reads the beginning of `error` as run_external words it:
/// "[nondeterministic: |contract broken: ]external implementation NAME
/// (ORIGIN) ...". The one reader of that prefix: the gate's journal and
/// record store, its reruns of a case for the other implementations, and
/// check's and repro's verdicts all use it. Never throws.
ExternalError parse_external_error(std::string_view error);

inline constexpr uint16_t kPoisonBf16 = 0x7FC0;
inline constexpr uint32_t kPoisonF32 = 0x7FC00000u;

/// What run_external found out about the outputs.
struct ExternalRun {
  Outputs out;
  /// Outputs left entirely poisoned ("y", "rstd", "dx", "dw", "h_new"),
  /// those with no element only (an empty tensor, T = 0, counts as produced).
  std::vector<std::string> not_produced;
  double seconds = 0;  ///< wall time of `run`
};

/// Run `impl` on `in`: size and poison every output (y, dx rows*cols; rstd
/// rows; dw cols; h_new rows*cols for form res, else empty), call impl.run,
/// and check that it kept every vector's size. A deterministic
/// implementation (op fwd, or mode det) is run a second time into the same
/// outputs poisoned again, and every output must have the same bits both
/// times (compared by 64-bit hashes of 4096-element blocks: no second copy
/// of the outputs is held; the returned outputs are the second run's).
/// Throws std::invalid_argument when the case is outside impl's H, weight
/// dtype or form; std::runtime_error naming the implementation when run
/// throws (its message kept: a Cancelled passes through unchanged), resized
/// an output, or, declared deterministic, gave different bits on the second
/// run (the output and the block of elements where they first differ).
/// `seconds` is the first run's.
ExternalRun run_external(const ExternalImpl& impl, const seeds::HostInputs& in);

}  // namespace normgate::validators
