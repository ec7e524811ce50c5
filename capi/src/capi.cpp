// capi/src/capi.cpp: the C ABI (normgate/capi.h) over the kernels' launch
// API, the host generator and the validators' oracle. Host C++ only: every
// function maps its C arguments onto the C++ API inside guard(), which turns
// exceptions into return codes and the thread-local message.
#include "normgate/capi.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cerrno>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "normgate/core/file_target.h"
#include "normgate/core/json_number.h"
#include "normgate/core/printable.h"
#include "normgate/core/types.h"
#include "normgate/kernels/device.h"
#include "normgate/kernels/registry.h"
#include "normgate/kernels/rmsnorm.h"
#include "normgate/harness/runner.h"
#include "normgate/bench/timing.h"
#include "normgate/oracle/reference.h"
#include "normgate/seeds/case_id.h"
#include "normgate/seeds/generate.h"
#include "normgate/seeds/seed_set.h"
#include "normgate/validators/check.h"
#include "normgate/harness/pipeline.h"
#include "normgate/harness/devices.h"
#include "normgate/harness/external.h"
#include "normgate/audit/export.h"
#include "normgate/gate/gate.h"
#include "normgate/gate/host_memory.h"
#include "normgate/gate/journal.h"  // kJournalKeyEnv
#include "normgate/routing/dispatch_cache.h"
#include "normgate/routing/routing.h"
#include "normgate_version.h"

namespace nk = normgate::kernels;
namespace ns = normgate::seeds;
namespace nv = normgate::validators;
using normgate::Form;
using normgate::WDtype;

struct ng_oracle {
  ns::HostInputs inputs;                 // the CaseOracle's views point into these
  std::unique_ptr<nv::CaseOracle> oracle;
  int threads = 0;
};

namespace {

thread_local std::string g_error;

[[noreturn]] void bad(const std::string& msg) { throw std::invalid_argument(msg); }

// The route table cannot be loaded (NG_EROUTE).
class RouteLoadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Runs f; maps routing refusals to NG_EROUTE, std::invalid_argument to
// NG_EINVAL, anything else to NG_EFAIL, with "fn: message" as the thread's
// last error.
template <class F>
int guard(const char* fn, F&& f) noexcept {
  auto fail = [fn](int rc, const char* msg) noexcept {
    try {
      g_error = std::string(fn) + ": " + msg;
    } catch (...) {  // no memory for the message: the return code still says it
    }
    return rc;
  };
  try {
    g_error.clear();
    f();
    return NG_OK;
  } catch (const nv::Cancelled& e) {
    return fail(NG_ECANCEL, e.what());
  } catch (const nk::UnapprovedRoute& e) {
    return fail(NG_EROUTE, e.what());
  } catch (const nk::NoRoute& e) {
    return fail(NG_EROUTE, e.what());
  } catch (const RouteLoadError& e) {
    return fail(NG_EROUTE, e.what());
  } catch (const std::invalid_argument& e) {
    return fail(NG_EINVAL, e.what());
  } catch (const std::bad_alloc&) {
    return fail(NG_EFAIL, "out of host memory");
  } catch (const std::exception& e) {
    return fail(NG_EFAIL, e.what());
  } catch (...) {
    return fail(NG_EFAIL, "unknown exception");
  }
}

// Write `text` to `path` atomically: a temporary file beside it, flushed,
// then renamed over it (a reader never sees a partial report).
void write_atomic(const std::string& link_or_path, const std::string& text) {
  // A link is written through: the file it names is replaced, never the link.
  const std::string path = normgate::core::rename_target(link_or_path);
  const std::string tmp = normgate::core::temp_name_beside(path);
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) throw std::runtime_error("cannot write '" + tmp + "': " + std::strerror(errno));
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size() && std::fflush(f) == 0 &&
                  ::fsync(::fileno(f)) == 0;
  if (std::fclose(f) != 0 || !ok) {
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot write '" + tmp + "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(errno));
  }
}

void need(const void* p, const char* what) {
  if (p == nullptr) bad(std::string(what) + " is NULL");
}

// A struct that starts with its own size (capi.h): at least this header's.
// `fill`: how the caller sets it, for the message.
void need_size(uint32_t got, size_t want, const char* type, const std::string& fill) {
  if (got < want)
    bad("struct_size = " + std::to_string(got) + " is below sizeof(" + type + ") = " + std::to_string(want) + " (" +
        fill + ")");
}

ns::CaseId parse(const char* case_id) {
  need(case_id, "case_id");
  return ns::parse_case(case_id);
}

WDtype wdtype(int32_t d, const char* field) {
  if (d == NG_W_BF16) return WDtype::bf16;
  if (d == NG_W_FP32) return WDtype::fp32;
  bad(std::string(field) + " = " + std::to_string(d) + " (expected 0 = bf16 or 1 = fp32)");
}

Form form(int32_t f, const char* field) {
  if (f >= NG_FORM_PLAIN && f <= NG_FORM_HEADS4) return static_cast<Form>(f);
  bad(std::string(field) + " = " + std::to_string(f) + " (expected 0 = plain, 1 = res, 2 = heads24, 3 = heads4)");
}

// A backward variant the C API runs: not a forward variant, not a control.
const nk::Variant& bwd_variant(const char* name) {
  need(name, "variant");
  const nk::Variant& v = nk::variant(name);  // throws, listing the known names
  if (v.op != nk::Op::bwd) {
    std::string expected;  // the registry's backward variants the C API runs
    for (const nk::Variant& b : nk::variants())
      if (b.op == nk::Op::bwd && !b.control) expected += (expected.empty() ? "" : ", ") + std::string(b.name);
    bad("variant '" + std::string(name) + "' is a forward variant (expected a backward one: " + expected + ")");
  }
  if (v.control)
    bad("variant '" + std::string(name) + "' is a negative control; the C API does not run controls");
  return v;
}

const auto* u16(const void* p) { return static_cast<const uint16_t*>(p); }

// Copy n elements of T from p into a vector (the validators take vectors).
// p aligned for T: the vector is constructed from the range, one pass (a
// copy) instead of a zero-fill then a copy (two serial passes over memory
// just mapped: the oracle's inputs at [65537, 5120] res are 2.7 GB; one pass
// took the open at [16384, 5120] res from 0.72-0.85 s to 0.48 s on the dev
// machine, docs/perf/peers.md, D6).
// p unaligned (the validate path copies such buffers): bytes copied as they
// are, never read as T in place.
template <class T>
std::vector<T> host_copy(const void* p, uint64_t n) {
  if (n == 0) return {};
  const size_t m = static_cast<size_t>(n);
  if (reinterpret_cast<uintptr_t>(p) % alignof(T) == 0) {
    const T* b = static_cast<const T*>(p);
    return std::vector<T>(b, b + m);
  }
  std::vector<T> v(m);
  std::memcpy(v.data(), p, m * sizeof(T));
  return v;
}

void check_elems(const char* what, const void* p, uint64_t got, int64_t want) {
  need(p, what);
  if (got != static_cast<uint64_t>(want))
    bad(std::string(what) + " has " + std::to_string(got) + " elements, the case needs " + std::to_string(want));
}

// The buffers of ng_host_inputs against case c: x, dy rows*H, w H, u and
// dh_new rows*H for form res and NULL (0) otherwise.
// A row tensor of a case with T = 0 has no elements: its buffer may be NULL
// (an empty tensor's address, e.g. torch's data_ptr() of an empty tensor).
void check_rows_buffer(const char* what, const void* p, uint64_t got, int64_t want) {
  if (want == 0 && got == 0) return;
  check_elems(what, p, got, want);
}

void check_input_buffers(const ns::CaseId& c, const ng_host_inputs* b) {
  const int64_t n = c.rows() * c.H;  // case ids bound rows*H well inside int64
  check_rows_buffer("x", b->x, b->x_elems, n);
  check_rows_buffer("dy", b->dy, b->dy_elems, n);
  check_elems("w", b->w, b->w_elems, c.H);
  if (c.form == Form::res) {
    check_rows_buffer("u", b->u, b->u_elems, n);
    check_rows_buffer("dh_new", b->dh_new, b->dh_new_elems, n);
  } else {
    if (b->u != nullptr || b->u_elems != 0)
      bad("u must be NULL (0 elements): form " + std::string(normgate::to_string(c.form)) + " has no u");
    if (b->dh_new != nullptr || b->dh_new_elems != 0)
      bad("dh_new must be NULL (0 elements): form " + std::string(normgate::to_string(c.form)) + " has no dh_new");
  }
}

// Builds the handle's CaseOracle over o->inputs (oracle mode auto).
void build_oracle(ng_oracle& o) {
  o.oracle = std::make_unique<nv::CaseOracle>(o.inputs, normgate::oracle::OracleMode::auto_, o.threads,
                                              /*baseline_rows=*/false);  // its dw only (dw vs FP32)
}

// threads of a call: <= 0 means the runtime's default; more than
// NG_MAX_THREADS is refused before any parallel region starts.
int checked_threads(int threads) {
  if (threads > NG_MAX_THREADS)
    bad("threads = " + std::to_string(threads) + " exceeds NG_MAX_THREADS (" + std::to_string(NG_MAX_THREADS) + ")");
  return threads;
}

// ---- routing ---------------------------------------------------------------

// The table in use: loaded once, lazily; replaced only by ng_routes_load.
// Caches are never freed (a decision's strings and a pick in flight on
// another thread may still point into a replaced one); reloads are rare.
std::mutex g_routes_mu;                          // loads
std::atomic<const nk::DispatchCache*> g_routes{nullptr};
std::vector<std::unique_ptr<nk::DispatchCache>> g_routes_all;  // owned, under g_routes_mu
std::atomic<int> g_strict{-1};                   // -1: NORMGATE_STRICT_ROUTES decides
std::atomic<int> g_warn_stderr{1};
thread_local std::string g_warning;              // the last one-time warning of this thread
thread_local std::string g_route_msg;            // ng_route_info::message of ng_route_for
thread_local std::string g_last_msg;             // ... of ng_last_route
thread_local ng_route_info g_last{};
thread_local bool g_have_last = false;

bool env_flag(const char* name) {
  const char* e = std::getenv(name);
  return e && *e && std::string_view(e) != "0";
}

bool strict_routes() {
  int s = g_strict.load(std::memory_order_relaxed);
  if (s < 0) {
    s = env_flag("NORMGATE_STRICT_ROUTES") ? 1 : 0;
    int unset = -1;
    g_strict.compare_exchange_strong(unset, s);
    s = g_strict.load(std::memory_order_relaxed);
  }
  return s != 0;
}

// NORMGATE_DISPATCH: comma-separated allow-unapproved, accept-cpu-model.
nk::DispatchPolicy env_policy() {
  nk::DispatchPolicy p;
  const char* e = std::getenv("NORMGATE_DISPATCH");
  if (!e) return p;
  std::string_view v(e);
  while (!v.empty()) {
    const size_t c = v.find(',');
    std::string_view tok = v.substr(0, c);
    v = c == std::string_view::npos ? std::string_view{} : v.substr(c + 1);
    while (!tok.empty() && tok.front() == ' ') tok.remove_prefix(1);
    while (!tok.empty() && tok.back() == ' ') tok.remove_suffix(1);
    if (tok.empty()) continue;
    if (tok == "allow-unapproved")
      p.allow_unapproved = true;
    else if (tok == "accept-cpu-model")
      p.accept_cpu_model = true;
    else
      throw RouteLoadError("NORMGATE_DISPATCH='" + std::string(e) + "': unknown token '" + std::string(tok) +
                           "' (known: allow-unapproved, accept-cpu-model; comma-separated)");
  }
  return p;
}

// The folder of this shared library (dladdr), or "" when unknown.
std::filesystem::path library_dir() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&ng_version), &info) == 0 || !info.dli_fname) return {};
  std::error_code ec;
  auto p = std::filesystem::weakly_canonical(std::filesystem::path(info.dli_fname), ec);
  return (ec ? std::filesystem::path(info.dli_fname) : p).parent_path();
}

// The per-GPU table of device 0 beside base table `base`, else `base`
// (capi.h top; routing.h, "Per-GPU tables").
std::string for_this_gpu(const std::string& base) {
  const nk::DeviceInfo d = nk::device_info();
  return d.present ? nk::table_for_gpu(base, d.name) : base;
}

// The default table (capi.h top): $NORMGATE_ROUTES, the installed one, the
// source tree's for the build tree's library; of the last two, the per-GPU
// table of device 0 where one is beside the base table.
std::string default_table() {
  if (const char* e = std::getenv("NORMGATE_ROUTES"); e && *e) return e;
  namespace fs = std::filesystem;
  const fs::path dir = library_dir();
  const fs::path installed = (dir / NORMGATE_ROUTES_REL / "sm90a.toml").lexically_normal();
  std::error_code ec;
  if (!dir.empty() && fs::exists(installed, ec)) return for_this_gpu(installed.string());
#ifdef NORMGATE_BUILD_CAPI_DIR
  if (!dir.empty() && fs::equivalent(dir, fs::path(NORMGATE_BUILD_CAPI_DIR), ec))
    return for_this_gpu(std::string(NORMGATE_SOURCE_ROUTES_DIR) + "/sm90a.toml");
#endif
  throw RouteLoadError("no route table: none installed at " + installed.string() + " (beside " +
                       (dir.empty() ? std::string("this library, whose path is unknown") : dir.string()) +
                       ") and NORMGATE_ROUTES is not set; install the library (cmake --install) or set "
                       "NORMGATE_ROUTES to a route table .toml");
}

const nk::DispatchCache* load_routes(const std::string& path_or_empty) {
  const std::string path = path_or_empty.empty() ? default_table() : path_or_empty;
  nk::DispatchCacheOptions o;
  o.warn = [](const std::string& m) {
    g_warning = m;
    if (g_warn_stderr.load(std::memory_order_relaxed)) {
      std::fprintf(stderr, "normgate: warning: %s\n", m.c_str());
      std::fflush(stderr);
    }
  };
  o.notice = [](const std::string& m) {
    std::fprintf(stderr, "normgate: %s\n", m.c_str());  // the policy: always said, once per load
    std::fflush(stderr);
  };
  o.override_hint = "name the variant explicitly (C: ng_fwd_args.variant or ng_bwd; Python: variant=\"...\"), or, "
                    "for experiments, set NORMGATE_DISPATCH=allow-unapproved";
  o.strict_hint = "NORMGATE_STRICT_ROUTES=1, ng_set_strict_routes(1), normgate.set_strict_routes(True)";
  try {
    auto c = std::make_unique<nk::DispatchCache>(nk::Dispatcher::from_files(path, env_policy()), std::move(o));
    const nk::DispatchCache* raw = c.get();
    g_routes_all.push_back(std::move(c));
    return raw;
  } catch (const nk::RouteTableError& e) {
    throw RouteLoadError(std::string("route table ") + path + ": " + e.what());
  }
}

// The table in use, loaded on first use (a failed load is retried by the next call).
const nk::DispatchCache& routes() {
  if (const nk::DispatchCache* c = g_routes.load(std::memory_order_acquire)) return *c;
  std::lock_guard<std::mutex> lock(g_routes_mu);
  if (const nk::DispatchCache* c = g_routes.load(std::memory_order_acquire)) return *c;
  const nk::DispatchCache* c = load_routes("");
  g_routes.store(c, std::memory_order_release);
  return *c;
}

nk::Op op_of(int32_t op) {
  if (op == NG_OP_FWD) return nk::Op::fwd;
  if (op == NG_OP_BWD) return nk::Op::bwd;
  bad("op = " + std::to_string(op) + " (expected 0 = NG_OP_FWD or 1 = NG_OP_BWD)");
}
nk::Mode mode_of(int32_t m) {
  if (m == NG_MODE_DET) return nk::Mode::det;
  if (m == NG_MODE_NONDET) return nk::Mode::nondet;
  bad("mode = " + std::to_string(m) + " (expected 0 = NG_MODE_DET or 1 = NG_MODE_NONDET)");
}

// The named override: checked against the call; the window holding it is
// reported when a table loads, but a table that cannot load does not stop
// an explicit call.
nk::Pick explicit_pick(const nk::CallKey& k, std::string_view name) {
  const nk::DispatchCache* c = nullptr;
  try {
    c = &routes();
  } catch (const RouteLoadError&) {
    return nk::DispatchCache::check_variant(k, name);
  }
  return c->pick_variant(k, name);
}

// The decision for a call: routed (name NULL or "") or the named override.
nk::Pick decide(const nk::CallKey& k, const char* name) {
  if (name != nullptr && name[0] != '\0') return explicit_pick(k, name);
  return routes().pick(k, strict_routes());
}

void fill_info(const nk::Pick& p, const nk::CallKey& k, ng_route_info& out, std::string& msg) {
  out = ng_route_info{};
  out.variant = p.variant ? p.variant->name.data() : (p.route ? p.route->variant->name.data() : "");
  const nk::DispatchCache* c = g_routes.load(std::memory_order_acquire);
  out.table = c ? c->table().path.c_str() : "";
  msg = p.kind == nk::PickKind::refused ? p.reason : (p.warned ? g_warning : std::string());
  out.message = msg.c_str();
  out.how = static_cast<int32_t>(p.kind);  // PickKind's values are NG_ROUTE_*'s
  out.approval = p.route ? static_cast<int32_t>(p.state) : NG_APPROVAL_NONE;
  out.t_lo = p.route ? p.route->t_lo : 0;
  out.t_hi = p.route ? p.route->t_hi : 0;
  out.op = static_cast<int32_t>(k.op);
  out.mode = static_cast<int32_t>(k.mode);
  out.warned = p.warned ? 1 : 0;
  if (k.op == nk::Op::bwd && p.variant && !p.variant->external)  // an external one has no workspace rule: 0
    out.workspace_bytes = static_cast<uint64_t>(nk::bwd_workspace_bytes(*p.variant, k.T * heads_of(k.form), k.H));
}

// After a kernel call succeeded: what ng_last_route reports.
void record(const nk::Pick& p, const nk::CallKey& k) {
  fill_info(p, k, g_last, g_last_msg);
  g_have_last = true;
}

static_assert(sizeof(ng_external_io) == 208 && sizeof(ng_external_desc) == 96 && sizeof(ng_gate_options) == 128 &&
                  offsetof(ng_gate_options, externals) == 120,
              "capi.h documents these sizes");
static_assert(static_cast<int>(nk::PickKind::routed) == NG_ROUTE_ROUTED &&
              static_cast<int>(nk::PickKind::unapproved) == NG_ROUTE_UNAPPROVED &&
              static_cast<int>(nk::PickKind::fallback) == NG_ROUTE_FALLBACK &&
              static_cast<int>(nk::PickKind::explicit_variant) == NG_ROUTE_EXPLICIT &&
              static_cast<int>(nk::PickKind::refused) == NG_ROUTE_REFUSED);
static_assert(static_cast<int>(nk::ApprovalState::current) == NG_APPROVAL_CURRENT &&
              static_cast<int>(nk::ApprovalState::missing) == NG_APPROVAL_MISSING &&
              static_cast<int>(nk::ApprovalState::stale) == NG_APPROVAL_STALE &&
              static_cast<int>(nk::ApprovalState::cpu_model_only) == NG_APPROVAL_CPU_MODEL_ONLY);

}  // namespace

extern "C" {

const char* ng_version(void) { return "normgate " NORMGATE_CAPI_VERSION " (" NORMGATE_GIT_COMMIT ")"; }

const char* ng_last_error(void) { return g_error.c_str(); }

int ng_device_available(int* out) {
  return guard("ng_device_available", [&] {
    need(out, "out");
    *out = nk::gpu_available() ? 1 : 0;
  });
}

int ng_copy_vec16(void* dst, const void* src, uint64_t bytes, void* stream) {
  return guard("ng_copy_vec16", [&] {
    need(dst, "dst");
    need(src, "src");
    nk::copy_vec16(dst, src, static_cast<size_t>(bytes), static_cast<nk::Stream>(stream));
  });
}

int ng_ceiling_stream(const char* kind, void* dst, const void* src, uint64_t bytes, void* stream) {
  return guard("ng_ceiling_stream", [&] {
    need(kind, "kind");
    const bool copy = nk::ceiling_kind_is_copy(kind);  // std::invalid_argument naming an unknown kind
    if (copy || std::string(kind) != "read_only") need(dst, "dst");
    if (copy || std::string(kind) != "write_only") need(src, "src");
    nk::run_ceiling_kind(kind, dst, src, static_cast<size_t>(bytes), static_cast<nk::Stream>(stream));
  });
}

int ng_graph_spans_start(void) {
  return guard("ng_graph_spans_start", [&] { nk::graph_spans_start(); });
}

namespace {
int graph_spans_out(const char* fn, bool stop, ng_graph_span* out, uint64_t cap, uint64_t* n) {
  return guard(fn, [&] {
    need(n, "n");
    *n = 0;
    if (cap > 0) need(out, "out");
    const std::vector<nk::GraphSpan> spans = stop ? nk::graph_spans_stop() : nk::graph_spans_take();
    *n = spans.size();
    const size_t m = std::min<size_t>(spans.size(), static_cast<size_t>(cap));
    for (size_t i = 0; i < m; ++i)
      out[i] = ng_graph_span{spans[i].graph_id, spans[i].correlation_id, spans[i].start_ns, spans[i].end_ns};
  });
}
}  // namespace

int ng_graph_spans_stop(ng_graph_span* out, uint64_t cap, uint64_t* n) {
  return graph_spans_out("ng_graph_spans_stop", true, out, cap, n);
}

int ng_graph_spans_take(ng_graph_span* out, uint64_t cap, uint64_t* n) {
  return graph_spans_out("ng_graph_spans_take", false, out, cap, n);
}

int ng_fwd(const ng_fwd_args* a, void* stream) {
  return guard("ng_fwd", [&] {
    need(a, "args");
    const nk::CallKey key{nk::Op::fwd, nk::Mode::det, a->H, wdtype(a->w_dtype, "w_dtype"), form(a->form, "form"),
                          a->T};
    const nk::Pick pick = decide(key, a->variant);
    const nk::Variant& v = *pick.variant;
    nk::FwdArgs f;
    f.x = u16(a->x);
    f.x_stride = a->x_stride;
    f.w = normgate::WeightView{wdtype(a->w_dtype, "w_dtype"), a->w, a->H};
    f.y = static_cast<uint16_t*>(a->y);
    f.y_stride = a->y_stride;
    f.rstd = static_cast<float*>(a->rstd);
    f.T = a->T;
    f.H = a->H;
    f.eps = a->eps;
    f.form = form(a->form, "form");
    f.heads = a->heads;
    f.x_stride_h = a->x_stride_h;
    f.y_stride_h = a->y_stride_h;
    f.u = u16(a->u);
    f.u_stride = a->u_stride;
    f.h_new = static_cast<uint16_t*>(a->h_new);
    f.h_new_stride = a->h_new_stride;
    f.msq = static_cast<double*>(a->msq);
    nk::validate_fwd(v, f);  // the kernels' checks first (their messages), then the C ABI's eps rule:
    // eps normal in binary32 (seeds/case_id.h kMinEps..kMaxEps, as every entry
    // point): the kernels take any finite eps >= 0, but a subnormal one is not
    // the problem a case's oracle solves, and 0 makes an all-zero row's y NaN.
    if (const std::string why = ns::eps_problem(static_cast<double>(a->eps)); !why.empty()) bad(why);
    nk::rmsnorm_fwd(v, f, static_cast<nk::Stream>(stream));
    record(pick, key);
  });
}

namespace {
// ng_bwd and ng_bwd_routed: the decision, then the launch.
void run_bwd(const nk::Pick& pick, const nk::CallKey& key, const ng_bwd_args* a, void* stream) {
  const nk::Variant& v = *pick.variant;
  nk::BwdArgs b;
  b.dy = u16(a->dy);
  b.dy_stride = a->dy_stride;
  b.x = u16(a->x);
  b.x_stride = a->x_stride;
  b.w = normgate::WeightView{wdtype(a->w_dtype, "w_dtype"), a->w, a->H};
  b.rstd = static_cast<const float*>(a->rstd);
  b.dx = static_cast<uint16_t*>(a->dx);
  b.dx_stride = a->dx_stride;
  b.dw = static_cast<float*>(a->dw);
  b.T = a->T;
  b.H = a->H;
  b.workspace = a->workspace;
  b.workspace_bytes = static_cast<size_t>(a->workspace_bytes);
  b.form = form(a->form, "form");
  b.heads = a->heads;
  b.dy_stride_h = a->dy_stride_h;
  b.x_stride_h = a->x_stride_h;
  b.dx_stride_h = a->dx_stride_h;
  b.dh_new = u16(a->dh_new);
  b.dh_new_stride = a->dh_new_stride;
  b.msq = static_cast<const double*>(a->msq);
  nk::rmsnorm_bwd(v, b, static_cast<nk::Stream>(stream), nk::ControlUse::refuse);
    record(pick, key);
}

nk::CallKey bwd_key(nk::Mode mode, const ng_bwd_args* a) {
  return nk::CallKey{nk::Op::bwd, mode, a->H, wdtype(a->w_dtype, "w_dtype"), form(a->form, "form"), a->T};
}
}  // namespace

int ng_bwd(const char* variant, const ng_bwd_args* a, void* stream) {
  return guard("ng_bwd", [&] {
    const nk::Variant& v = bwd_variant(variant);
    need(a, "args");
    // The named variant's own mode: a det variant is checked as a det call.
    const nk::CallKey key = bwd_key(v.mode, a);
    run_bwd(explicit_pick(key, v.name), key, a, stream);
  });
}

int ng_bwd_routed(int32_t mode, const ng_bwd_args* a, void* stream) {
  return guard("ng_bwd_routed", [&] {
    const nk::Mode m = mode_of(mode);
    need(a, "args");
    const nk::CallKey key = bwd_key(m, a);
    run_bwd(decide(key, nullptr), key, a, stream);
  });
}

int ng_route_for(int32_t op, int32_t mode, int64_t H, int64_t T, int32_t w_dtype, int32_t form_, const char* variant,
                 ng_route_info* out) {
  int rc_refused = NG_OK;
  const int rc = guard("ng_route_for", [&] {
    need(out, "out");
    const nk::CallKey key{op_of(op), op == NG_OP_FWD ? nk::Mode::det : mode_of(mode), H, wdtype(w_dtype, "w_dtype"),
                          form(form_, "form"), T};
    const nk::DispatchCache& c = routes();
    const nk::Pick p = (variant != nullptr && variant[0] != '\0') ? c.pick_variant(key, variant)
                                                                  : c.inspect(key, strict_routes());
    fill_info(p, key, *out, g_route_msg);
    if (p.kind == nk::PickKind::refused) {
      g_error = "ng_route_for: " + p.reason;
      rc_refused = NG_EROUTE;
    }
  });
  return rc != NG_OK ? rc : rc_refused;
}

int ng_last_route(ng_route_info* out) {
  return guard("ng_last_route", [&] {
    need(out, "out");
    if (!g_have_last) bad("no kernel call (ng_fwd, ng_bwd, ng_bwd_routed) has succeeded on this thread yet");
    *out = g_last;
  });
}

int ng_routes_load(const char* path) {
  return guard("ng_routes_load", [&] {
    std::lock_guard<std::mutex> lock(g_routes_mu);
    const nk::DispatchCache* c = load_routes(path ? std::string(path) : std::string());
    g_routes.store(c, std::memory_order_release);
  });
}

int ng_set_strict_routes(int on) {
  g_error.clear();
  g_strict.store(on != 0 ? 1 : 0);
  return NG_OK;
}

int ng_set_route_warnings(int on) {
  g_error.clear();
  g_warn_stderr.store(on != 0 ? 1 : 0);
  return NG_OK;
}

int ng_variant_info(const char* name, ng_variant_desc* out) {
  return guard("ng_variant_info", [&] {
    need(name, "name");
    need(out, "out");
    const nk::Variant& v = nk::variant(name);
    *out = ng_variant_desc{};
    out->name = v.name.data();
    out->source_sha256 = v.source_sha256.data();
    out->op = static_cast<int32_t>(v.op);
    out->mode = static_cast<int32_t>(v.mode);
    out->control = v.control ? 1 : 0;
  });
}

int ng_bwd_workspace_bytes(const char* variant, int64_t T_rows, int64_t H, uint64_t* out) {
  return guard("ng_bwd_workspace_bytes", [&] {
    const nk::Variant& v = bwd_variant(variant);
    need(out, "out");
    *out = static_cast<uint64_t>(nk::bwd_workspace_bytes(v, T_rows, H));
  });
}

int ng_case_info(const char* case_id, ng_case_info_t* out) {
  return guard("ng_case_info", [&] {
    const ns::CaseId c = parse(case_id);
    need(out, "out");
    const std::string canon = ns::to_string(c);
    const std::string_view fam = ns::to_string(c.family);
    if (canon.size() >= sizeof out->canonical || fam.size() >= sizeof out->family)
      throw std::logic_error("canonical case id longer than NG_CASE_ID_BYTES - 1: " + canon);
    ng_case_info_t info{};
    info.T = c.T;
    info.H = c.H;
    info.heads = c.heads();
    info.rows = c.rows();
    info.form = static_cast<int32_t>(c.form);
    info.w_dtype = static_cast<int32_t>(c.w);
    info.eps = c.eps;
    info.kappa = c.kappa;
    info.seed = c.seed;
    std::memcpy(info.family, fam.data(), fam.size());
    std::memcpy(info.canonical, canon.data(), canon.size());
    *out = info;
  });
}

int ng_seed_set_size(const char* spec, uint64_t* pairs) {
  return guard("ng_seed_set_size", [&] {
    need(spec, "spec");
    need(pairs, "pairs");
    *pairs = ns::parse_seed_set(spec).size();
  });
}

int ng_require_host_memory(const char* case_id, int32_t n_impls, int32_t forward_only, int32_t copies) {
  return guard("ng_require_host_memory", [&] {
    const ns::CaseId c = parse(case_id);
    if (n_impls < 0 || n_impls > 1024) bad("n_impls = " + std::to_string(n_impls) + " is outside 0..1024");
    if (forward_only != 0 && forward_only != 1) bad("forward_only = " + std::to_string(forward_only) + " is not 0 or 1");
    if (copies < 1 || copies > 64) bad("copies = " + std::to_string(copies) + " is outside 1..64");
    nv::require_host_memory({c}, static_cast<size_t>(n_impls), forward_only != 0, static_cast<size_t>(copies),
                            std::to_string(copies) + " copies of the case's tensors held by the caller");
  });
}

int ng_generate_host(const char* case_id, const ng_host_inputs* out) {
  return guard("ng_generate_host", [&] {
    const ns::CaseId c = parse(case_id);
    need(out, "out");
    check_input_buffers(c, out);
    const bool res = c.form == Form::res;
    const ns::HostInputs in = ns::generate_host(c);
    // No memcpy with a NULL buffer, even of 0 bytes (T = 0: x, dy may be NULL).
    auto put = [](void* dst, const void* src, size_t bytes) {
      if (bytes > 0) std::memcpy(dst, src, bytes);
    };
    put(out->x, in.x.data(), in.x.size() * 2);
    put(out->dy, in.dy.data(), in.dy.size() * 2);
    if (c.w == WDtype::bf16)
      put(out->w, in.w_bf16.data(), in.w_bf16.size() * 2);
    else
      put(out->w, in.w_f32.data(), in.w_f32.size() * 4);
    if (res) {
      put(out->u, in.u.data(), in.u.size() * 2);
      put(out->dh_new, in.dh_new.data(), in.dh_new.size() * 2);
    }
  });
}

int ng_generate_device(const char* case_id, const ng_host_inputs* out, void* stream) {
  return guard("ng_generate_device", [&] {
    const ns::CaseId c = parse(case_id);
    need(out, "out");
    check_input_buffers(c, out);
    nk::DeviceInputBuffers b;  // rows contiguous: row r of a tensor at p + r*H (heads folded into rows)
    b.x = static_cast<uint16_t*>(out->x);
    b.x_stride = c.H;
    b.dy = static_cast<uint16_t*>(out->dy);
    b.dy_stride = c.H;
    b.w = out->w;
    b.u = static_cast<uint16_t*>(out->u);
    b.u_stride = c.H;
    b.dh_new = static_cast<uint16_t*>(out->dh_new);
    b.dh_new_stride = c.H;
    nk::generate_device_inputs(c, b, static_cast<nk::Stream>(stream));
  });
}

int ng_oracle_open(const char* case_id, int threads, ng_oracle** out) {
  return guard("ng_oracle_open", [&] {
    need(out, "out");
    *out = nullptr;
    const ns::CaseId c = parse(case_id);
    auto o = std::make_unique<ng_oracle>();
    o->threads = checked_threads(threads);
    o->inputs = ns::generate_host(c, o->threads);
    build_oracle(*o);
    *out = o.release();
  });
}

int ng_oracle_open_inputs(const char* case_id, const ng_host_inputs* in, int threads, ng_oracle** out) {
  return guard("ng_oracle_open_inputs", [&] {
    need(out, "out");
    *out = nullptr;
    const ns::CaseId c = parse(case_id);
    need(in, "inputs");
    check_input_buffers(c, in);
    auto o = std::make_unique<ng_oracle>();
    o->threads = checked_threads(threads);
    ns::HostInputs& h = o->inputs;
    h.id = c;
    h.rows = c.rows();
    h.cols = c.H;
    const int64_t n = h.rows * h.cols;
    h.x = host_copy<uint16_t>(in->x, n);
    h.dy = host_copy<uint16_t>(in->dy, n);
    if (c.form == Form::res) {
      h.u = host_copy<uint16_t>(in->u, n);
      h.dh_new = host_copy<uint16_t>(in->dh_new, n);
    }
    if (c.w == WDtype::bf16)
      h.w_bf16 = host_copy<uint16_t>(in->w, c.H);
    else
      h.w_f32 = host_copy<float>(in->w, c.H);
    ns::check_inputs_sample(h, 64, o->threads);  // another case's inputs: NG_EINVAL naming the element
    build_oracle(*o);
    *out = o.release();
  });
}

int ng_oracle_validate(ng_oracle* o, const ng_outputs* outs, char* json, size_t cap, size_t* needed) {
  return guard("ng_oracle_validate", [&] {
    need(o, "oracle");
    need(outs, "outputs");
    if (needed) *needed = 0;
    const ns::CaseId& c = o->inputs.id;
    const int64_t rows = c.rows(), n = rows * c.H;
    const bool res = c.form == Form::res;
    if (!res && outs->h_new != nullptr)
      bad("h_new given, but form " + std::string(normgate::to_string(c.form)) + " has no h_new");
    // The given tensors (NULL: absent) are validated in place, without a
    // copy (two serial passes over each tensor: ~1/3 of a validation through
    // this call, docs/perf/peers.md, D6); a buffer not aligned for its
    // element type is copied first.
    std::vector<uint16_t> y, dx, h_new;
    std::vector<float> rstd, dw;
    nv::OutputsRef ref;
    auto take = [](const char* what, const void* p, uint64_t elems, int64_t want, auto& copy, auto& slot) {
      using T = typename std::decay_t<decltype(copy)>::value_type;
      if (p == nullptr) return;
      check_elems(what, p, elems, want);
      if (reinterpret_cast<uintptr_t>(p) % alignof(T) == 0) {
        slot = nv::TensorRef<T>(static_cast<const T*>(p), static_cast<size_t>(elems));
      } else {
        copy = host_copy<T>(p, elems);
        slot = &copy;
      }
    };
    take("y", outs->y, outs->y_elems, n, y, ref.y);
    take("rstd", outs->rstd, outs->rstd_elems, rows, rstd, ref.rstd);
    take("dx", outs->dx, outs->dx_elems, n, dx, ref.dx);
    take("dw", outs->dw, outs->dw_elems, c.H, dw, ref.dw);
    take("h_new", outs->h_new, outs->h_new_elems, n, h_new, ref.h_new);
    if (!ref.y && !ref.rstd && !ref.dx && !ref.dw && !ref.h_new) bad("no output given (y, rstd, dx, dw, h_new all NULL)");

    const nv::CaseOracle& co = *o->oracle;
    const nv::CaseResult r =
        nv::validate_present(co.problem, ref, co.ref, co.ideal, &co.baseline, o->threads, co.h_new_expected);

    nlohmann::json j;
    j["case"] = ns::to_string(c);
    j["pass"] = r.pass();
    j["verdict"] = std::string(nv::to_string(r.verdict()));
    j["uncertified"] = r.uncertified();
    j["outputs"] = nlohmann::json::object();
    j["absent"] = nlohmann::json::array();
    const nv::Output names[] = {nv::Output::y, nv::Output::rstd, nv::Output::dx, nv::Output::dw, nv::Output::h_new};
    const bool given[] = {static_cast<bool>(ref.y), static_cast<bool>(ref.rstd), static_cast<bool>(ref.dx),
                          static_cast<bool>(ref.dw), static_cast<bool>(ref.h_new)};
    for (int k = 0; k < 5; ++k) {
      const nv::Output out = names[k];
      if (out == nv::Output::h_new && !res) continue;  // not an output of this form
      const std::string name(nv::to_string(out));
      // h_new of a res case with T == 0 has nothing to compare (validate_present skips it).
      const nv::RatioStats* s = nullptr;
      for (const auto& t : r.tensors)
        if (t.output() == out) s = &t;
      if (!given[k]) {
        j["outputs"][name] = {{"present", false}};
        j["absent"].push_back(name);
        continue;
      }
      nlohmann::json t = s ? nv::to_json(*s) : nlohmann::json::object();
      t["present"] = true;
      t["err_tol"] = s ? normgate::json_number(s->worst.ratio) : nlohmann::json(0.0);
      t["worst"] = s ? s->worst.index : -1;
      t["pass"] = s ? s->pass() : true;
      t["verdict"] = s ? std::string(nv::to_string(s->verdict())) : std::string("pass");
      j["outputs"][name] = std::move(t);
    }
    if (ref.dw) {
      j["dw_vs_fp32"] = {{"worst", normgate::json_number(r.dw_vs_fp32_worst)},
                         {"median", normgate::json_number(r.dw_vs_fp32_median)},
                         {"worst_condition", normgate::json_number(r.dw_worst_condition)},
                         {"max_condition", normgate::json_number(r.dw_max_condition)}};
    }
    const std::string text = j.dump();
    const size_t n_bytes = text.size() + 1;
    if (needed) *needed = n_bytes;
    if (json == nullptr || cap < n_bytes)
      bad("json buffer of " + std::to_string(cap) + " bytes is too small: the report needs " +
          std::to_string(n_bytes) + " (NG_REPORT_BYTES = " + std::to_string(NG_REPORT_BYTES) + " always suffices)");
    std::memcpy(json, text.c_str(), n_bytes);
  });
}

void ng_oracle_close(ng_oracle* o) { delete o; }

int ng_register_external(const ng_external_desc* d) {
  return guard("ng_register_external", [&] {
    need(d, "desc");
    need_size(d->struct_size, sizeof(ng_external_desc), "ng_external_desc", "set it to sizeof(ng_external_desc)");
    need(d->name, "name");
    need(d->source_sha256, "source_sha256");
    need(d->origin, "origin");
    need(d->ran_on, "ran_on");
    if (d->run == nullptr) bad("run is NULL");
    if (d->op != NG_OP_FWD && d->op != NG_OP_BWD)
      bad("op = " + std::to_string(d->op) + " (expected NG_OP_FWD 0 or NG_OP_BWD 1)");
    if (d->mode != NG_MODE_DET && d->mode != NG_MODE_NONDET)
      bad("mode = " + std::to_string(d->mode) + " (expected NG_MODE_DET 0 or NG_MODE_NONDET 1)");
    if (d->wdtypes > 0xFF || d->forms > 0xFF)
      bad("wdtypes = " + std::to_string(d->wdtypes) + ", forms = " + std::to_string(d->forms) +
          ": bit sets of 1 << NG_W_* and 1 << NG_FORM_*");
    nv::ExternalImpl x;
    x.name = d->name;
    x.op = static_cast<nk::Op>(d->op);
    x.mode = static_cast<nk::Mode>(d->mode);
    x.h_min = d->h_min;
    x.h_max = d->h_max;
    x.wdtypes = d->wdtypes == 0 ? uint8_t{0b11} : static_cast<uint8_t>(d->wdtypes);
    x.forms = d->forms == 0 ? uint8_t{0b1} : static_cast<uint8_t>(d->forms);
    x.source_sha256 = d->source_sha256;
    x.origin = d->origin;
    x.description = d->description ? d->description : "";
    x.ran_on = d->ran_on;
    if (d->device < 0)
      bad("device = " + std::to_string(d->device) + " (0 for the host, 1 + N for CUDA device N)");
    if (d->device > 0 && d->device - 1 >= nk::device_count())
      bad("device = " + std::to_string(d->device) + " names CUDA device " + std::to_string(d->device - 1) +
          ", but this process sees " + std::to_string(nk::device_count()) + " (0 for the host)");
    x.cuda_device = d->device - 1;
    const ng_external_run_fn fn = d->run;
    void* const user = d->user;
    const std::string name = x.name;
    x.run = [fn, user, name](const ns::HostInputs& in, normgate::Outputs& out) {
      const std::string cid = ns::to_string(in.id);
      const bool res = in.id.form == Form::res;
      ng_external_io io{};
      io.case_id = cid.c_str();
      io.T = in.id.T;
      io.H = in.cols;
      io.heads = in.id.heads();
      io.rows = in.rows;
      io.form = static_cast<int32_t>(in.id.form);
      io.w_dtype = static_cast<int32_t>(in.id.w);
      io.eps = in.id.eps;
      io.stride_t = io.heads * io.H;
      io.stride_h = io.H;
      io.x = in.x.data();
      io.dy = in.dy.data();
      io.w = in.id.w == WDtype::bf16 ? static_cast<const void*>(in.w_bf16.data()) : in.w_f32.data();
      io.u = res ? in.u.data() : nullptr;
      io.dh_new = res ? in.dh_new.data() : nullptr;
      io.y = out.y.data();
      io.rstd = out.rstd.data();
      io.dx = out.dx.data();
      io.dw = out.dw.data();
      io.h_new = res ? out.h_new.data() : nullptr;
      io.y_elems = out.y.size();
      io.rstd_elems = out.rstd.size();
      io.dx_elems = out.dx.size();
      io.dw_elems = out.dw.size();
      io.h_new_elems = res ? out.h_new.size() : 0;
      char err[2048] = {0};
      io.error = err;
      io.error_cap = sizeof err;
      const int rc = fn(user, &io);
      err[sizeof err - 1] = '\0';
      if (rc == NG_ECANCEL) throw nv::Cancelled("cancelled by external implementation " + name);
      if (rc != 0)
        // Valid UTF-8 (core::escape_invalid_utf8), as a plugin's message.
        throw std::runtime_error((err[0] ? normgate::core::escape_invalid_utf8(err) : std::string("no message")) +
                                 " (returned " + std::to_string(rc) + ")");
    };
    nv::register_external(std::move(x));
  });
}

void ng_gate_options_init(ng_gate_options* o) {
  if (o == nullptr) return;
  *o = ng_gate_options{};
  o->struct_size = sizeof(ng_gate_options);
  o->t_per_window = 8;
  o->dense_points = 16;
  o->dense_step = 64;
  o->fresh_factor = 2;
}

int ng_gate(const ng_gate_options* o, char** json_out) {
  if (json_out != nullptr) *json_out = nullptr;
  return guard("ng_gate", [&] {
    need(o, "options");
    need(json_out, "json_out");
    // A struct of callers built before `externals` (120 bytes) is accepted
    // without it (capi.h).
    need_size(o->struct_size, offsetof(ng_gate_options, externals), "ng_gate_options before externals",
              "fill the struct with ng_gate_options_init");
    if (o->table == nullptr || o->table[0] == '\0') bad("table is NULL or empty");
    if (o->threads < 0 || o->threads > NG_MAX_THREADS)
      bad("threads = " + std::to_string(o->threads) + " is outside 0.." + std::to_string(NG_MAX_THREADS));
    nv::GateOptions g;
    g.table_path = o->table;
    if (o->seeds) g.seeds = o->seeds;
    if (o->windows) g.windows = o->windows;
    if (o->journal) g.journal_path = o->journal;
    g.t_per_window = o->t_per_window;
    g.dense_points = o->dense_points;
    g.dense_step = o->dense_step;
    g.dense_all_seeds = o->dense_all_seeds != 0;
    // Flags are 0 or 1: any other value is a caller's mistake (a garbage or
    // uninitialised field), not "true".
    for (const auto& [v, name] : {std::pair{static_cast<int64_t>(o->retry_errors), "retry_errors"},
                                  std::pair{static_cast<int64_t>(o->approve), "approve"},
                                  std::pair{static_cast<int64_t>(o->dense_all_seeds), "dense_all_seeds"}})
      if (v != 0 && v != 1) bad(std::string(name) + " = " + std::to_string(v) + " is not 0 or 1");
    if (o->retry_errors && (o->journal == nullptr || o->journal[0] == '\0'))
      bad("retry_errors = 1 needs a journal (the errors to retry are journalled ones)");
    g.retry_errors = o->retry_errors != 0;
    if (o->struct_size >= sizeof(ng_gate_options) && o->externals != nullptr) {
      std::vector<std::string> names;
      const std::string list = o->externals;
      // Names as the registry spells them (no blanks), comma-separated; ""
      // alone is none. An empty name (",a", "a,,b", "a,") or one with a
      // blank is refused, quoted.
      for (size_t at = 0; !list.empty() && at <= list.size();) {
        const size_t comma = std::min(list.find(',', at), list.size());
        const std::string name = list.substr(at, comma - at);
        if (name.empty())
          bad("externals '" + normgate::core::escape_controls(list) + "' has an empty name (names, comma-separated)");
        if (name.find_first_of(" \t\r\n") != std::string::npos)
          bad("externals '" + normgate::core::escape_controls(list) + "': name '" +
              normgate::core::escape_controls(name) + "' holds a blank (names, comma-separated, without blanks)");
        if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
        at = comma + 1;
      }
      g.externals = std::move(names);
    }
    g.fresh_factor = o->fresh_factor;
    g.threads = o->threads;
    g.backend = nv::parse_backend(o->backend ? o->backend : "auto");
    g.normgate_version = NORMGATE_CAPI_VERSION;
    g.normgate_commit = NORMGATE_GIT_COMMIT;
    const std::string report_md = o->report_md ? o->report_md : "";
    const std::string report_json = o->report_json ? o->report_json : "";
    for (const auto& [p, what] : {std::pair{o->report_md, "report_md"}, std::pair{o->report_json, "report_json"},
                                  std::pair{o->journal, "journal"}})
      if (p != nullptr && p[0] == '\0') bad(std::string(what) + " is empty (NULL: none)");
    // Paths checked before any work, as the CLI checks its outputs
    // (core::write_problem: written through a link, to a regular file or a
    // new one in a writable folder; never a folder, device, FIFO or socket,
    // which the report's rename would replace), and no two outputs, nor an
    // output and the table, one file.
    auto writable_dir = [](const std::string& path, const char* what) {
      if (const std::string why = normgate::core::write_problem(path); !why.empty())
        bad("cannot write " + std::string(what) + " '" + path + "': " + why);
    };
    writable_dir(report_md, "report_md");
    writable_dir(report_json, "report_json");
    writable_dir(g.journal_path, "journal");
    // One file under two names (core::same_file: the same inode, or the same
    // canonical path for files not made yet).
    auto same = [](const std::string& a, const std::string& b) {
      return !a.empty() && !b.empty() && normgate::core::same_file(a, b);
    };
    const std::vector<std::pair<std::string, std::string>> outs = {
        {"report_md", report_md}, {"report_json", report_json}, {"journal", g.journal_path}};
    // The approvals lock too (routing.h ApprovalsLock; `normgate gate` counts
    // it when approving): a report renamed over it would give it a new inode
    // (the Python adversarial pass wrote report_json there). The journal key
    // file, every run's input where it is set.
    std::vector<std::pair<std::string, std::string>> ins = {
        {"the table", g.table_path},
        {"the table's approvals file", nk::approvals_path_for(g.table_path)},
        {"the table's approvals lock file", nk::approvals_path_for(g.table_path) + ".lock"},
        {"the table's approval policy", nk::policy_path_for(g.table_path)}};
    if (const std::string key = nv::journal_key_file(); !key.empty())
      ins.emplace_back(std::string(nv::kJournalKeyEnv) + " (the journal key file)", key);
    for (size_t i = 0; i < outs.size(); ++i) {
      for (size_t k = 0; k < i; ++k)
        if (same(outs[i].second, outs[k].second))
          bad(outs[k].first + " '" + outs[k].second + "' and " + outs[i].first + " '" + outs[i].second +
              "' name one file: each output needs a file of its own");
      for (const auto& [what, path] : ins)
        if (same(outs[i].second, path))
          bad(outs[i].first + " '" + outs[i].second + "' is " + what + ": writing it would destroy what the gate "
                                                               "reads; give another file");
    }
    const nv::Backend backend = nv::resolve_backend(g.backend);
    if (backend == nv::Backend::gpu && !nk::gpu_available())
      bad("backend gpu requested but no usable CUDA device is present");
    // The table, seeds, filter and numbers, before any work; then the
    // largest case of every window within host memory, as `normgate gate`
    // checks it (gate/host_memory.h): a refusal naming the case and the
    // bytes, not std::bad_alloc in every case of a long run.
    {
      const nv::GatePlan plan = nv::plan_gate(g);
      std::vector<ns::CaseId> bwd_cases, fwd_cases;
      nv::GateHold held = nv::gate_hold(backend, g.devices);
      for (const auto& w : plan.windows)
        if (w.largest.T > 0) (w.forward ? fwd_cases : bwd_cases).push_back(w.largest);
      nv::add_external_hold(held, plan);  // a plugin's staging and workspace
      nv::require_gate_host_memory(bwd_cases, fwd_cases, held);
    }
    nk::Approvals approvals;
    if (o->approve) {
      approvals = nk::load_approvals(nk::approvals_path_for(g.table_path));
      writable_dir(approvals.path, "approvals");
      nv::check_approval_request(g, backend);
    }
    const volatile int32_t* cancel = o->cancel;
    auto check_cancel = [cancel] {
      if (cancel != nullptr && *cancel != 0) throw nv::Cancelled("cancelled (ng_gate_options.cancel set)");
    };
    check_cancel();
    if (o->progress != nullptr) {
      const ng_gate_progress_fn fn = o->progress;
      void* const user = o->progress_user;
      g.progress = [fn, user, check_cancel](const nv::GateProgress& p) {
        ng_gate_progress c{};
        c.phase = p.phase.c_str();
        c.done = p.done;
        c.total = p.total;
        c.run_now = p.run_now;
        c.seconds = p.seconds;
        c.seconds_per_case = p.seconds_per_case;
        c.worst = p.worst;
        c.window = p.window.c_str();
        c.worst_case = p.worst_case.c_str();
        fn(user, &c);
        check_cancel();
      };
    } else {
      g.progress = [check_cancel](const nv::GateProgress&) { check_cancel(); };
    }
    g.before_case = [check_cancel](const ns::CaseId&, const std::vector<std::string>&) { check_cancel(); };
    g.after_case = [check_cancel](int64_t) { check_cancel(); };
    // Held from before the first case to the approvals (registry.h): a
    // re-registration from a progress callback or another thread would
    // change the code under the names and identities being approved.
    const nk::ExternalRegistrationsHeld held("a gate runs (normgate gate, ng_gate or normgate.gate)");
    const nv::GateResult res = nv::run_gate(g);
    nlohmann::json j = nv::gate_to_json(res);
    const std::string md = nv::format_gate_markdown(res);
    if (!report_md.empty()) write_atomic(report_md, md);
    if (!report_json.empty()) write_atomic(report_json, j.dump(2) + "\n");
    j["approvals"] = nlohmann::json::array();
    if (o->approve) {
      j["approvals_file"] = approvals.path;
      for (const auto& c : nv::approve(approvals, res, g)) j["approvals"].push_back(c);
    }
    j["journal"] = {{"path", g.journal_path}, {"resumed", res.cases_resumed}, {"run_now", res.cases_run_now},
                    {"retried", res.cases_retried}};
    // "verdict" is the run's, as `normgate gate` says it (gate_to_json):
    // ERROR and INCOMPLETE too (a new-user pass found a gate whose cases
    // all threw reported as FAIL, and one INCONCLUSIVE window outranking
    // another's FAIL).
    j["markdown"] = md;
    const std::string text = j.dump();
    char* out = static_cast<char*>(std::malloc(text.size() + 1));
    if (out == nullptr) throw std::bad_alloc();
    std::memcpy(out, text.c_str(), text.size() + 1);
    *json_out = out;
  });
}

void ng_export_options_init(ng_export_options* o) {
  if (o == nullptr) return;
  *o = ng_export_options{};
  o->struct_size = sizeof(ng_export_options);
  o->tile = 256;
}

int ng_export(const ng_export_options* o, char** json_out) {
  if (json_out != nullptr) *json_out = nullptr;
  return guard("ng_export", [&] {
    need(o, "options");
    need(json_out, "json_out");
    need_size(o->struct_size, sizeof(ng_export_options), "ng_export_options",
              "fill the struct with ng_export_options_init");
    if (o->report == nullptr || o->report[0] == '\0') bad("report is NULL or empty");
    if (o->out == nullptr || o->out[0] == '\0') bad("out is NULL or empty");
    for (const auto& [v, name] : {std::pair{o->all, "all"}, std::pair{o->full, "full"}})
      if (v != 0 && v != 1) bad(std::string(name) + " = " + std::to_string(v) + " is not 0 or 1");
    if (o->threads < 0 || o->threads > NG_MAX_THREADS)
      bad("threads = " + std::to_string(o->threads) + " is outside 0.." + std::to_string(NG_MAX_THREADS));
    nv::ExportRequest req;
    req.report = o->report;
    req.out = o->out;
    req.keep = o->keep;
    req.all = o->all != 0;
    req.opt.full = o->full != 0;
    req.opt.tile = o->tile;
    req.opt.threads = o->threads;
    req.opt.backend = nv::parse_backend(o->backend ? o->backend : "auto");
    req.opt.oracle = normgate::oracle::parse_oracle_mode(o->oracle ? o->oracle : "auto");
    req.opt.normgate_version = NORMGATE_CAPI_VERSION;
    req.opt.normgate_commit = NORMGATE_GIT_COMMIT;
    if (const volatile int32_t* cancel = o->cancel; cancel != nullptr)
      req.opt.before_case = [cancel] {
        if (*cancel != 0) throw nv::Cancelled("cancelled (ng_export_options.cancel set): nothing written");
      };
    // The output as the CLI checks it (a writable regular file or a new one;
    // never the report it reads).
    if (const std::string why = normgate::core::write_problem(req.out); !why.empty())
      bad("cannot write out '" + req.out + "': " + why);
    if (normgate::core::same_file(req.out, req.report))
      bad("out '" + req.out + "' is the report: writing it would destroy what export reads; give another file");
    const nv::Backend backend = nv::resolve_backend(req.opt.backend);
    if (backend == nv::Backend::gpu && !nk::gpu_available())
      bad("backend gpu requested but no usable CUDA device is present");
    const nk::ExternalRegistrationsHeld held("an export runs (ng_export or normgate.export)");
    const nv::ExportRun run = nv::export_report(req);
    nlohmann::json j;
    j["out"] = req.out;
    j["report_sha256"] = run.report_sha256;
    j["notes"] = run.notes;
    j["pairs"] = nlohmann::json::array();
    static const char* const kOuts[4] = {"y", "rstd", "dx", "dw"};
    for (const auto& e : run.entries) {
      nlohmann::json m;
      for (int k = 0; k < 4; ++k) m[kOuts[k]] = normgate::json_number(e.max_ratio[k]);
      j["pairs"].push_back({{"case", e.prov.case_id}, {"impl", e.prov.impl}, {"fwd", e.prov.fwd},
                            {"window", e.prov.window}, {"verdict", e.prov.verdict}, {"max_err_tol", m}});
    }
    const std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    char* out = static_cast<char*>(std::malloc(text.size() + 1));
    if (out == nullptr) throw std::bad_alloc();
    std::memcpy(out, text.c_str(), text.size() + 1);
    *json_out = out;
  });
}

int ng_table_file(const char* table, const char* suffix, char** out) {
  if (out != nullptr) *out = nullptr;  // NULL on any error
  return guard("ng_table_file", [&] {
    need(table, "table");
    need(suffix, "suffix");
    need(out, "out");
    if (*table == '\0') bad("table is empty");
    if (*suffix == '\0') bad("suffix is empty");
    const std::string path = nk::table_sibling_path(table, suffix);
    char* p = static_cast<char*>(std::malloc(path.size() + 1));
    if (p == nullptr) throw std::bad_alloc();
    std::memcpy(p, path.c_str(), path.size() + 1);
    *out = p;
  });
}

void ng_free_string(char* s) { std::free(s); }

}  // extern "C"
