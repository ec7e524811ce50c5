// routing/src/dispatch_cache.cpp: the cached runtime dispatch (dispatch_cache.h).
#include "normgate/routing/dispatch_cache.h"
#include "normgate/routing/policy.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "normgate/core/file_target.h"
#include "normgate/kernels/plan.h"

namespace normgate::kernels {

namespace {

// The group of a call without T: "bwd det H=2048 w=bf16 form=plain".
std::string group_text(Op op, Mode mode, int64_t H, WDtype w, Form form) {
  std::string s(to_string(op));
  if (op == Op::bwd) s.append(" ").append(to_string(mode));
  return s + " H=" + std::to_string(H) + " w=" + std::string(to_string(w)) + " form=" +
         std::string(to_string(form));
}

// The gate's --windows filter that selects exactly route r's window.
std::string window_filter(const Route& r) {
  std::string f = "op=" + std::string(to_string(r.op));
  if (r.op == Op::bwd) f += ",mode=" + std::string(to_string(r.mode));
  return f + ",H=" + std::to_string(r.H) + ",w=" + std::string(to_string(r.w)) + ",form=" +
         std::string(to_string(r.form)) + ",T=" + std::to_string(r.t_lo) + ".." + std::to_string(r.t_hi);
}

// A call no launch accepts, whatever the table (api.cpp check_shape's
// call-level limits, in the caller's terms: T is tokens, rows are T*heads):
// std::invalid_argument naming the call and the value.
void check_call(const CallKey& k) {
  const std::string call = to_string(k);
  if (k.T < 0) throw std::invalid_argument(call + ": T < 0");
  if (k.H < kMinH || k.H > kMaxH)
    throw std::invalid_argument(call + ": H = " + std::to_string(k.H) + " outside " + std::to_string(kMinH) + ".." +
                                std::to_string(kMaxH));
  const int64_t heads = heads_of(k.form);
  if (heads > 1 && k.H != 256)
    throw std::invalid_argument(call + ": H = " + std::to_string(k.H) + ": form '" + std::string(to_string(k.form)) +
                                "' normalizes heads of 256");
  if (k.T > kMaxT / heads)
    throw std::invalid_argument(call + ": T = " + std::to_string(k.T) + " is out of range 0.." +
                                std::to_string(kMaxT / heads) +
                                (heads > 1 ? " (T*heads <= " + std::to_string(kMaxT) + ")" : std::string()));
}

// Why variant v, checked when the table was loaded, cannot serve call k now
// ("" when it can): only an external variant re-registered since with
// another op, mode or masks gets here.
std::string no_longer_serves(const Variant& v, const CallKey& k) {
  const CallShape shape{k.H, k.w, k.form};
  if (serve_gap(v, k.op, k.mode, &shape) == ServeGap::none) return "";
  return "the variant no longer serves this call (" + describe(v) +
         "; re-registered after the table was loaded?): load the table again";
}

}  // namespace

std::string_view to_string(PickKind k) {
  switch (k) {
    case PickKind::routed: return "routed";
    case PickKind::unapproved: return "unapproved";
    case PickKind::fallback: return "fallback";
    case PickKind::explicit_variant: return "explicit";
    default: return "refused";
  }
}

uint64_t DispatchCache::key(Op op, Mode mode, int64_t H, WDtype w, Form form) {
  if (op == Op::fwd) mode = Mode::det;  // one forward serves both modes
  return (uint64_t{static_cast<uint8_t>(op)} << 56) | (uint64_t{static_cast<uint8_t>(mode)} << 48) |
         (uint64_t{static_cast<uint8_t>(w)} << 40) | (uint64_t{static_cast<uint8_t>(form)} << 32) |
         static_cast<uint32_t>(H);
}

DispatchCache::DispatchCache(Dispatcher d, DispatchCacheOptions options) : d_(std::move(d)), opt_(std::move(options)) {
  const RouteTable& t = d_.table();
  const bool cpu = d_.policy().accept_cpu_model;
  for (const Route& r : t.routes) {
    const uint64_t k = key(r.op, r.mode, r.H, r.w, r.form);
    auto it = std::find_if(groups_.begin(), groups_.end(), [k](const Group& g) { return g.first == k; });
    if (it == groups_.end()) {
      groups_.emplace_back(k, std::vector<Window>{});
      it = groups_.end() - 1;
    }
    it->second.push_back({r.t_lo, r.t_hi, &r, d_.approval_of(r).state});
  }
  std::sort(groups_.begin(), groups_.end(), [](const Group& a, const Group& b) { return a.first < b.first; });
  for (Group& g : groups_)
    std::sort(g.second.begin(), g.second.end(), [](const Window& a, const Window& b) { return a.t_lo < b.t_lo; });
  if (d_.policy().allow_unapproved)
    say(opt_.notice, "dispatch policy allow-unapproved: windows of " + t.path +
         " without a current approval will run their variant anyway (experiments only; approvals in " +
         d_.approvals().path + ")");
  if (cpu)
    say(opt_.notice, "dispatch policy accept-cpu-model: approvals made by a gate of the CPU models count as current for " +
         t.path + " (the GPU code is what ships)");
}

size_t DispatchCache::windows() const {
  size_t n = 0;
  for (const Group& g : groups_) n += g.second.size();
  return n;
}

void DispatchCache::say(const std::function<void(const std::string&)>& sink, const std::string& msg) const {
  if (sink) {
    sink(msg);
    return;
  }
  std::fprintf(stderr, "normgate: warning: %s\n", msg.c_str());
  std::fflush(stderr);
}

const std::vector<DispatchCache::Window>* DispatchCache::group(uint64_t k) const {
  auto it = std::lower_bound(groups_.begin(), groups_.end(), k,
                             [](const Group& g, uint64_t x) { return g.first < x; });
  return it != groups_.end() && it->first == k ? &it->second : nullptr;
}

std::string DispatchCache::covered(const CallKey& k) const {
  const auto* g = group(key(k.op, k.mode, k.H, k.w, k.form));
  if (!g) return "the table has no window for this op, mode, H, w and form";
  return "its windows for this op, mode, H, w and form cover T = " + std::to_string(g->front().t_lo) + ".." +
         std::to_string(g->back().t_hi);
}

Pick DispatchCache::decide(const CallKey& k, bool strict, bool query) const {
  check_call(k);
  const int64_t T = k.T == 0 ? 1 : k.T;  // no rows: served by the window of T = 1
  const uint64_t gk = key(k.op, k.mode, k.H, k.w, k.form);
  Pick p;
  if (const auto* g = group(gk)) {
    auto it = std::lower_bound(g->begin(), g->end(), T, [](const Window& w, int64_t t) { return w.t_hi < t; });
    if (it != g->end() && it->t_lo <= T) {
      p.route = it->route;
      p.state = it->state;
      // The loader checked the route's variant; an external variant
      // re-registered since (add_external_variant) may no longer serve it.
      if (const std::string gap = no_longer_serves(*it->route->variant, k); !gap.empty()) {
        p.reason = to_string(k) + ": window " + it->route->window() + " (" + it->route->where() + ", variant " +
                   std::string(it->route->variant->name) + "): " + gap;
        return p;
      }
      if (it->state == ApprovalState::current) {
        p.variant = it->route->variant;
        p.kind = PickKind::routed;
        return p;
      }
      if (d_.policy().allow_unapproved) {
        p.variant = it->route->variant;
        p.kind = PickKind::unapproved;
        return p;
      }
      // Cold path: the state's sentence again, for the message.
      const ApprovalStatus s = d_.approval_of(*it->route);
      const Variant& rv = *it->route->variant;
      const std::string head = to_string(k) + ": window " + it->route->window() + " (" + it->route->where() +
                               ", variant " + std::string(rv.name) + ") has no current approval in " +
                               d_.approvals().path + ": " + std::string(to_string(it->state)) + ": " + s.detail;
      // This source failed inside the window: another variant, not a gate.
      if (const Rejection* q = d_.failed_inside(*it->route)) {
        p.reason = head + d_.failed_inside_text(*q) + "; or " + opt_.override_hint;
        return p;
      }
      // An implementation of the user's own is gated where it is registered:
      // the CLI knows a plugin's with --plugin, a Python one not at all.
      const std::string how =
          !rv.external ? approve_command_for(table().path, window_filter(*it->route)) +
                             "; the same with --plan instead of --approve counts its cases and prices them"
          : rv.sources.rfind("python", 0) == 0
              ? "normgate.gate(impl, table='" + table().path + "', windows='" + window_filter(*it->route) +
                    "', approve=True) in Python, at the table's policy minimum"
              : "normgate gate " + table().path + " --plugin LIB.so --windows '" + window_filter(*it->route) +
                    "' --approve, at the table's policy minimum";
      p.reason = head + ". Gate it" +
                 (d_.policy().accept_cpu_model ? std::string() : std::string(" on a CUDA machine")) + " (" + how +
                 (!core::same_file(d_.approvals().path, approvals_path_for(table().path))
                      ? "; it writes " + approvals_path_for(table().path) + ", not " + d_.approvals().path
                      : std::string()) +
                 "), or " + opt_.override_hint;
      return p;
    }
  }
  // No window holds the call.
  const Variant* fb = table().fallback.for_call(k.op, k.mode);
  const std::string where = to_string(k) + " is outside every window of " + table().path + " (" + covered(k) + ")";
  if (!fb) {
    p.reason = where + ", and the table names no fallback for " +
               (k.op == Op::fwd ? std::string("fwd") : "bwd " + std::string(to_string(k.mode))) +
               " (its `fallback` key): nothing is approved to serve it";
    return p;
  }
  if (strict) {
    p.reason = where + "; strict routes are on, so its fallback variant " + std::string(fb->name) +
               " does not run (" + opt_.strict_hint + ")";
    return p;
  }
  if (const CallShape shape{k.H, k.w, k.form}; serve_gap(*fb, k.op, k.mode, &shape) != ServeGap::none) {
    // H, w, form: a fallback may be narrower than the calls (the loader
    // checks op, control and mode); op, control, mode: re-registered since.
    p.reason = where + ", and its fallback variant " + std::string(fb->name) + " does not serve it (" +
               describe(*fb) + ")";
    return p;
  }
  p.variant = fb;
  p.kind = PickKind::fallback;
  if (!query) {
    bool first = false;
    {
      std::lock_guard<std::mutex> lock(warned_mu_);
      first = warned_.insert(gk).second;
    }
    if (first) {
      p.warned = true;
      say(opt_.warn, group_text(k.op, k.mode, k.H, k.w, k.form) + " (T=" + std::to_string(k.T) +
           ") is outside every window of " + table().path + " (" + covered(k) + "): running the table's fallback " +
           std::string(fb->name) + ", which the gate has not approved for these calls; warned once per op, mode, "
           "H, w and form (" + opt_.strict_hint + " makes it an error)");
    }
  }
  return p;
}

Pick DispatchCache::pick(const CallKey& k, bool strict) const {
  Pick p = decide(k, strict, false);
  if (p.kind != PickKind::refused) return p;
  if (p.route) throw UnapprovedRoute(p.reason, p.state);
  throw NoRoute(p.reason);
}

Pick DispatchCache::inspect(const CallKey& k, bool strict) const { return decide(k, strict, true); }

Pick DispatchCache::pick_variant(const CallKey& k, std::string_view name) const {
  Pick p = check_variant(k, name);
  if (k.H >= kMinH && k.H <= kMaxH) {
    if (const Route* r = table().find(k.op, k.mode, k.H, k.w, k.form, k.T)) {
      p.route = r;
      for (const Window& w : *group(key(k.op, k.mode, k.H, k.w, k.form)))
        if (w.route == r) p.state = w.state;
    }
  }
  return p;
}

Pick DispatchCache::check_variant(const CallKey& k, std::string_view name) {
  check_call(k);
  const Variant& v = variant(name);  // throws, listing the known names
  const std::string what = to_string(k) + ": variant " + std::string(name);
  const CallShape shape{k.H, k.w, k.form};
  switch (serve_gap(v, k.op, k.mode, &shape)) {
    case ServeGap::none:
      break;
    case ServeGap::op:
      throw std::invalid_argument(what + " is a " + std::string(to_string(v.op)) + " variant, the call is " +
                                  std::string(to_string(k.op)));
    case ServeGap::control:
      throw std::invalid_argument(what + " is a negative control: never run for callers");
    case ServeGap::nondet:
      throw std::invalid_argument(what + " is non-deterministic; the call asks for a deterministic backward");
    case ServeGap::h:
    case ServeGap::w:
    case ServeGap::form:
      throw std::invalid_argument(what + " does not support this call (" + describe(v) + ")");
  }
  Pick p;
  p.variant = &v;
  p.kind = PickKind::explicit_variant;
  return p;
}

}  // namespace normgate::kernels
