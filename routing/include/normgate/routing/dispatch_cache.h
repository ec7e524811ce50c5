// normgate/routing/dispatch_cache.h: the runtime dispatch of kernel calls
// (what libnormgate_capi.so and the Python package run), over a route table
// and its approvals (routing.h).
//
// Built once from a Dispatcher: per (op, mode, H, w, form) a vector of the
// table's windows sorted by T, each with its approval state resolved at
// construction (approval_status under the Dispatcher's policy). A call is then
// a binary search over the groups and one over the group's windows; no
// allocation, no lock, no file access (bench/dispatch_bench.cpp measures it).
//
// What a call gets (pick):
//   - a window holds it and its approval is current: that window's variant
//     (PickKind::routed);
//   - a window holds it without a current approval: refused (UnapprovedRoute,
//     naming the call, the window, the table, the approvals file and what is
//     missing or stale), unless DispatchPolicy::allow_unapproved is set
//     (PickKind::unapproved; the policy is announced once, at construction);
//   - no window holds it (an H or form the table does not route, T past the
//     windows): the table's fallback variant (routing.h, `fallback`) with a
//     one-time warning per (op, mode, H, w, form) (PickKind::fallback);
//     refused (NoRoute) in strict mode or when the table names no fallback
//     for the op and mode, or the fallback variant does not support the call.
// T = 0 is looked up as T = 1 (RouteTable::find). pick_variant serves an
// explicit override: the named variant, no approval consulted.
// Negative controls are never picked (the Dispatcher refuses tables routing
// them; pick_variant refuses them by name).
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "normgate/routing/routing.h"

namespace normgate::kernels {

/// How a call's variant was chosen.
enum class PickKind : uint8_t {
  routed = 0,      ///< the window holding the call, current approval
  unapproved = 1,  ///< the window holding the call without a current approval, run by DispatchPolicy::allow_unapproved
  fallback = 2,    ///< no window holds the call: the table's fallback variant
  explicit_variant = 3,  ///< the caller named the variant: no approval consulted
  refused = 4,     ///< inspect() only: pick() would throw (Pick::reason says why)
};
/// "routed", "unapproved", "fallback", "explicit", "refused".
std::string_view to_string(PickKind k);

/// No window holds the call and no fallback may serve it (strict mode, no
/// fallback named for the op and mode, or the fallback variant does not
/// support the call). what() names the call, the table and what it covers.
class NoRoute : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// One decision.
struct Pick {
  const Variant* variant = nullptr;  ///< what runs; null only when refused
  PickKind kind = PickKind::refused;
  const Route* route = nullptr;      ///< the window holding the call (any kind); null when none
  ApprovalState state = ApprovalState::missing;  ///< route's approval state (missing when route is null)
  bool warned = false;               ///< this pick emitted the one-time fallback warning
  std::string reason;                ///< refused (inspect): the refusal's message; else ""
};

/// Knobs of a cache.
struct DispatchCacheOptions {
  /// Receives each fallback group's one-time warning, one line without the
  /// trailing newline. Empty: "normgate: warning: <msg>" on stderr.
  std::function<void(const std::string&)> warn;
  /// Receives the policy notice of the constructor (allow-unapproved,
  /// accept-cpu-model). Empty: "normgate: warning: <msg>" on stderr.
  std::function<void(const std::string&)> notice;
  /// How the caller's API overrides a refusal, appended to UnapprovedRoute's
  /// message (e.g. "pass variant=\"name\"").
  std::string override_hint = "name the variant explicitly (an explicit override), or set "
                              "DispatchPolicy::allow_unapproved";
  /// How strict mode is set and cleared in the caller's API, appended to
  /// NoRoute's and the fallback warning's messages.
  std::string strict_hint = "strict mode";
};

/// The cached dispatcher. Thread-safe: pick/inspect may run concurrently
/// (the one-time warning set is the only mutable state, behind a mutex taken
/// only on the fallback path).
class DispatchCache {
 public:
  /// Takes the Dispatcher (its table, approvals and policy); announces the
  /// policy through options.notice when it allows unapproved routes or accepts
  /// cpu-model approvals.
  explicit DispatchCache(Dispatcher d, DispatchCacheOptions options = {});
  DispatchCache(const DispatchCache&) = delete;
  DispatchCache& operator=(const DispatchCache&) = delete;

  /// The variant for call k (see the file comment). strict: a call outside
  /// every window is refused instead of falling back. Throws
  /// std::invalid_argument for a call no launch accepts (T < 0, H outside
  /// 1..16384, a per-head form at H != 256, T*heads over 2^32 rows: the
  /// call-level limits of api.cpp's launch checks), naming the call and value,
  /// UnapprovedRoute (window without a current approval), NoRoute (no window,
  /// no usable fallback).
  Pick pick(const CallKey& k, bool strict) const;

  /// As pick, without throwing for routing reasons and without emitting the
  /// fallback warning: a refusal returns kind refused and its message in
  /// reason. Throws std::invalid_argument as pick for a bad call.
  Pick inspect(const CallKey& k, bool strict) const;

  /// An explicit override: the variant named `name` for call k (kind
  /// explicit_variant; route and state describe the window holding the call,
  /// for information). Throws std::invalid_argument naming the problem for an
  /// unknown name, a variant of the other op, a negative control, a
  /// non-deterministic variant for a det call, or one that does not support
  /// the call's H, w or form.
  Pick pick_variant(const CallKey& k, std::string_view name) const;

  /// pick_variant's checks without a table (route null, state missing): for
  /// an explicit call where no table could be loaded. Throws as pick_variant.
  static Pick check_variant(const CallKey& k, std::string_view name);

  const Dispatcher& dispatcher() const { return d_; }
  const RouteTable& table() const { return d_.table(); }
  /// Number of (op, mode, H, w, form) groups and of windows cached.
  size_t groups() const { return groups_.size(); }
  size_t windows() const;

 private:
  struct Window {
    int64_t t_lo, t_hi;
    const Route* route;
    ApprovalState state;
  };
  using Group = std::pair<uint64_t, std::vector<Window>>;

  static uint64_t key(Op op, Mode mode, int64_t H, WDtype w, Form form);
  const std::vector<Window>* group(uint64_t k) const;
  Pick decide(const CallKey& k, bool strict, bool query) const;
  std::string covered(const CallKey& k) const;
  void say(const std::function<void(const std::string&)>& sink, const std::string& msg) const;

  Dispatcher d_;
  DispatchCacheOptions opt_;
  std::vector<Group> groups_;  // sorted by key
  mutable std::mutex warned_mu_;
  mutable std::set<uint64_t> warned_;  // fallback groups already warned about
};

}  // namespace normgate::kernels
