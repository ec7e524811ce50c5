// routing/src/routing.cpp: route-table loader, approvals file, dispatcher
// (routing.h).
#include "normgate/routing/routing.h"
#include "normgate/routing/policy.h"
#include "normgate/routing/rejections.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "normgate/core/file_target.h"
#include "normgate/core/json_number.h"
#include "normgate/core/json_strict.h"
#include "normgate/core/printable.h"
#include "normgate/core/report_util.h"
#include "normgate/core/temp_files.h"
#include "normgate/kernels/plan.h"
#include "normgate/seeds/case_id.h"   // kMaxT of case ids
#include "normgate/seeds/generate.h"  // sha256_hex
#include "normgate/seeds/seed_set.h"
#include "toml_guard.h"

namespace normgate::kernels {

namespace {

constexpr std::string_view kRouteKeys[] = {"op", "mode", "H", "w", "form", "T", "variant"};
constexpr std::string_view kTopKeys[] = {"arch", "description", "route", "fallback"};
constexpr std::string_view kFallbackKeys[] = {"fwd", "bwd_det", "bwd_nondet"};
constexpr std::string_view kArch = "sm90a";
constexpr std::string_view kApprovalsFormat = "normgate-approvals/1";

std::string join(std::span<const std::string_view> xs) {
  std::string s;
  for (auto x : xs) s += (s.empty() ? "" : ", ") + std::string(x);
  return s;
}

std::string window_text(Op op, Mode mode, int64_t H, WDtype w, Form form, int64_t lo, int64_t hi) {
  std::string s(to_string(op));
  if (op == Op::bwd) s += " " + std::string(to_string(mode));
  s += " H=" + std::to_string(H) + " w=" + std::string(to_string(w)) + " form=" + std::string(to_string(form));
  if (lo >= 0) s += " T=" + std::to_string(lo) + ".." + std::to_string(hi);
  return s;
}

Op parse_op(std::string_view s) {
  if (s == "fwd") return Op::fwd;
  if (s == "bwd") return Op::bwd;
  throw std::invalid_argument("bad op '" + std::string(s) + "' (expected fwd or bwd)");
}
Mode parse_mode(std::string_view s) {
  if (s == "det") return Mode::det;
  if (s == "nondet") return Mode::nondet;
  throw std::invalid_argument("bad mode '" + std::string(s) + "' (expected det or nondet)");
}

// Lines [first, last] (1-based) of text, trimmed and joined by a space; capped.
std::string source_lines(std::string_view text, int first, int last) {
  std::string out;
  int line = 1;
  size_t pos = 0;
  while (pos <= text.size() && line <= last) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    if (line >= first) {
      std::string_view l = text.substr(pos, nl - pos);
      while (!l.empty() && (l.front() == ' ' || l.front() == '\t')) l.remove_prefix(1);
      while (!l.empty() && (l.back() == ' ' || l.back() == '\t' || l.back() == '\r' || l.back() == ','))
        l.remove_suffix(1);
      if (!l.empty()) out += (out.empty() ? "" : " ") + std::string(l);
    }
    pos = nl + 1;
    ++line;
  }
  if (out.size() > 240) out = out.substr(0, 237) + "...";
  return out;
}

// Loader context: the file's text and path, for messages.
struct Ctx {
  std::string_view text;
  const std::string& path;
  [[noreturn]] void fail(int line, const std::string& what, const toml::node* entry = nullptr) const {
    std::string msg = path + ":" + std::to_string(line) + ": " + what;
    if (entry) {
      const auto& src = entry->source();
      auto last = std::max(src.begin.line, src.end.line);
      // A [[route]] section's region may end at its header: extend it to its last value.
      if (const toml::table* t = entry->as_table())
        for (auto&& [k, v] : *t) last = std::max({last, k.source().end.line, v.source().end.line});
      msg += "; entry: " + source_lines(text, static_cast<int>(src.begin.line), static_cast<int>(last));
    }
    throw RouteTableError(msg);
  }
};

int line_of(const toml::node& n) { return static_cast<int>(n.source().begin.line); }

// Required/optional typed fields of one route table.
template <class T>
T get_value(const Ctx& ctx, const toml::table& t, std::string_view key, std::string_view type_name) {
  const toml::node* n = t.get(key);
  if (!n) ctx.fail(line_of(t), "missing key '" + std::string(key) + "'", &t);
  auto v = n->value<T>();
  if (!v || (std::is_same_v<T, int64_t> && !n->is_integer()) || (std::is_same_v<T, std::string> && !n->is_string()))
    ctx.fail(line_of(*n), "key '" + std::string(key) + "' must be " + std::string(type_name), &t);
  return *v;
}

Route parse_route(const Ctx& ctx, const toml::node& node, const LoadOptions& opt) {
  const toml::table* tp = node.as_table();
  if (!tp) ctx.fail(line_of(node), "a route must be a table, e.g. { op = \"bwd\", mode = \"det\", H = 2048, "
                                   "w = \"bf16\", form = \"plain\", T = [1, 65536], variant = \"bwd_det_chunked\" }",
                    &node);
  const toml::table& t = *tp;
  for (auto&& [k, v] : t) {
    (void)v;
    if (std::find(std::begin(kRouteKeys), std::end(kRouteKeys), k.str()) == std::end(kRouteKeys))
      ctx.fail(static_cast<int>(k.source().begin.line),
               "unknown key '" + std::string(k.str()) + "' (known: " + join(kRouteKeys) + ")", &t);
  }
  Route r;
  r.file = ctx.path;
  r.line = line_of(t);
  auto field = [&](std::string_view key, auto&& parse) {
    const std::string s = get_value<std::string>(ctx, t, key, "a string");
    try {
      return parse(s);
    } catch (const std::invalid_argument& e) {
      ctx.fail(line_of(*t.get(key)), e.what(), &t);
    }
  };
  r.op = field("op", parse_op);
  if (r.op == Op::bwd) {
    r.mode = field("mode", parse_mode);
  } else if (t.contains("mode")) {
    ctx.fail(line_of(*t.get("mode")),
             "a fwd route must not have 'mode': both modes share the forward, so one fwd route serves both", &t);
  }
  r.H = get_value<int64_t>(ctx, t, "H", "an integer");
  if (r.H < kMinH || r.H > kMaxH)
    ctx.fail(line_of(*t.get("H")),
             "H " + std::to_string(r.H) + " out of range " + std::to_string(kMinH) + ".." + std::to_string(kMaxH), &t);
  r.w = field("w", [](const std::string& s) { return parse_wdtype(s); });
  r.form = field("form", [](const std::string& s) { return parse_form(s); });
  const toml::node* tn = t.get("T");
  if (!tn) ctx.fail(line_of(t), "missing key 'T'", &t);
  const toml::array* ta = tn->as_array();
  if (!ta || ta->size() != 2 || !(*ta)[0].is_integer() || !(*ta)[1].is_integer())
    ctx.fail(line_of(*tn), "key 'T' must be [lo, hi], two integers (both inclusive)", &t);
  r.t_lo = *(*ta)[0].value<int64_t>();
  r.t_hi = *(*ta)[1].value<int64_t>();
  if (r.t_lo < 1) ctx.fail(line_of(*tn), "T lo " + std::to_string(r.t_lo) + " < 1", &t);
  // The gate names every case by its id, whose T stops at seeds::kMaxT
  // (2^31; the kernels' own kMaxT is 2^32): a window beyond it could be
  // dispatched but never gated, so it is refused here.
  if (r.t_hi > seeds::kMaxT)
    ctx.fail(line_of(*tn),
             "T hi " + std::to_string(r.t_hi) + " > " + std::to_string(seeds::kMaxT) +
                 " (the largest T a case id names: a window beyond it cannot be gated)",
             &t);
  if (r.t_lo > r.t_hi)
    ctx.fail(line_of(*tn), "T lo " + std::to_string(r.t_lo) + " > hi " + std::to_string(r.t_hi), &t);
  const std::string vname = get_value<std::string>(ctx, t, "variant", "a string");
  const int vline = line_of(*t.get("variant"));
  try {
    r.variant = &variant(vname);
  } catch (const std::invalid_argument& e) {
    // A name the registry lacks is often an implementation of the user's own,
    // gated from Python (normgate.gate writes such tables) or a plugin's.
    ctx.fail(vline,
             std::string(e.what()) +
                 " (an implementation of your own is known only where it is registered: a plugin's with "
                 "--plugin LIB.so, a Python one in the process that called normgate.gate; `normgate approvals "
                 "FILE` reads such a table's approvals file without it)",
             &t);
  }
  const Variant& v = *r.variant;
  const CallShape shape{r.H, r.w, r.form};
  switch (serve_gap(v, r.op, r.mode, &shape, opt.allow_controls)) {
    case ServeGap::none:
      break;
    case ServeGap::op:
      ctx.fail(vline, "variant " + vname + " is a " + std::string(to_string(v.op)) + " variant but the route is " +
                          std::string(to_string(r.op)), &t);
    case ServeGap::control:
      ctx.fail(vline, "variant " + vname + " is a NEGATIVE CONTROL and may not be routed (controls exist to prove "
                      "that the gate fails bad kernels; `normgate gate --allow-controls` runs one anyway, never "
                      "approved)", &t);
    case ServeGap::nondet:
      ctx.fail(vline, "variant " + vname + " is non-deterministic and cannot serve a det route", &t);
    case ServeGap::h:
      ctx.fail(vline, "variant " + vname + " does not support H=" + std::to_string(r.H) + " (supports " +
                          std::to_string(v.h_min) + ".." + std::to_string(v.h_max) + ")", &t);
    case ServeGap::w:
      ctx.fail(vline, "variant " + vname + " does not support weight dtype " + std::string(to_string(r.w)), &t);
    case ServeGap::form:
      ctx.fail(vline, "variant " + vname + " does not support form " + std::string(to_string(r.form)), &t);
  }
  if ((r.form == Form::heads24 || r.form == Form::heads4) && r.H != 256)
    ctx.fail(vline, "form " + std::string(to_string(r.form)) + " normalizes heads of 256: H must be 256, not " +
                        std::to_string(r.H), &t);
  return r;
}

// The optional top-level `fallback` table (routing.h, "Fallback").
RouteFallback parse_fallback(const Ctx& ctx, const toml::node& node) {
  const toml::table* tp = node.as_table();
  if (!tp)
    ctx.fail(line_of(node), "fallback must be a table, e.g. fallback = { fwd = \"fwd_rowwise\", bwd_det = "
                            "\"bwd_det_chunked\", bwd_nondet = \"bwd_nondet_atomic\" }", &node);
  const toml::table& t = *tp;
  RouteFallback f;
  f.line = line_of(t);
  if (t.empty())
    ctx.fail(line_of(t), "fallback is empty: name at least one of " + join(kFallbackKeys) + " (or drop the key)", &t);
  for (auto&& [k, v] : t) {
    const std::string key(k.str());
    const int kline = static_cast<int>(k.source().begin.line);
    if (!v.is_string()) ctx.fail(kline, "fallback." + key + " must be a string (a variant name)", &t);
    const std::string vname = *v.value<std::string>();
    const Variant* var = nullptr;
    try {
      var = &variant(vname);  // throws, listing the known names
    } catch (const std::invalid_argument& e) {
      ctx.fail(kline, "fallback." + key + ": " + e.what(), &t);
    }
    if (const std::string why = fallback_problem(key, *var); !why.empty()) ctx.fail(kline, "fallback." + key + ": " + why, &t);
    (key == "fwd" ? f.fwd : key == "bwd_det" ? f.bwd_det : f.bwd_nondet) = var;
  }
  return f;
}

// Overlaps and gaps within one (op, mode, H, w, form). Reports the conflict
// whose later-in-file route comes first in the file.
void check_windows(const Ctx& ctx, const std::vector<Route>& routes, const std::vector<const toml::node*>& nodes) {
  std::vector<size_t> idx(routes.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  auto group = [&](size_t i) {
    const Route& r = routes[i];
    return std::make_tuple(static_cast<int>(r.op), static_cast<int>(r.mode), r.H, static_cast<int>(r.w),
                           static_cast<int>(r.form));
  };
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    if (group(a) != group(b)) return group(a) < group(b);
    return routes[a].t_lo < routes[b].t_lo;
  });
  size_t best = routes.size();  // index of the later route of the first conflict (by line)
  std::string best_msg;
  for (size_t k = 1; k < idx.size(); ++k) {
    const size_t a = idx[k - 1], b = idx[k];
    if (group(a) != group(b)) continue;
    const Route& ra = routes[a];
    const Route& rb = routes[b];
    const bool overlap = rb.t_lo <= ra.t_hi;
    const bool gap = rb.t_lo > ra.t_hi + 1;
    if (!overlap && !gap) continue;
    const size_t later = ra.line > rb.line ? a : b;
    const Route& L = routes[later];
    const Route& O = routes[later == a ? b : a];
    auto span = [](const Route& r) { return "T=" + std::to_string(r.t_lo) + ".." + std::to_string(r.t_hi); };
    std::string msg;
    if (overlap)
      msg = span(L) + " overlaps " + span(O) + " of the route at " + O.where();
    else
      msg = "gap: T=" + std::to_string(ra.t_hi + 1) + ".." + std::to_string(rb.t_lo - 1) +
            " is not routed between this route (" + span(L) + ") and the route at " + O.where() + " (" + span(O) + ")";
    msg += ", same " + window_text(ra.op, ra.mode, ra.H, ra.w, ra.form, -1, -1);
    if (best == routes.size() || routes[later].line < routes[best].line) {
      best = later;
      best_msg = msg;
    }
  }
  if (best != routes.size()) ctx.fail(routes[best].line, best_msg, nodes[best]);
}

// ---- approvals JSON ---------------------------------------------------------


nlohmann::json to_json(const Approval& a) {
  nlohmann::json win;
  win["op"] = to_string(a.op);
  if (a.op == Op::bwd) win["mode"] = to_string(a.mode);
  win["H"] = a.H;
  win["w"] = to_string(a.w);
  win["form"] = to_string(a.form);
  win["T"] = {a.t_lo, a.t_hi};
  nlohmann::json j;
  j["window"] = win;
  j["variant"] = a.variant;
  j["source_sha256"] = a.source_sha256;
  j["backend"] = a.backend;
  j["gpu"] = a.gpu;
  j["driver"] = a.driver;
  j["cuda"] = a.cuda;
  j["seed_set"] = a.seed_set;
  j["t_points"] = a.t_points;
  j["cases"] = a.cases;
  nlohmann::json m = nlohmann::json::object();
  for (const auto& [k, v] : a.max_err_tol) m[k] = json_number(v);
  j["max_err_tol"] = m;
  j["worst_case"] = a.worst_case;
  j["date"] = a.date;
  j["normgate_commit"] = a.normgate_commit;
  j["normgate_version"] = a.normgate_version;
  if (a.has_strength) {
    j["t_per_window"] = a.t_per_window;
    j["dense_points"] = a.dense_points;
    j["dense_step"] = a.dense_step;
    j["dense_seeds"] = a.dense_all_seeds ? "all" : "worst";
    j["fresh_factor"] = a.fresh_factor;
    j["fresh_seeds"] = a.fresh_seeds;
    j["oracle"] = a.oracle;
    if (a.op == Op::bwd) j["dw_vs_fp32_worst"] = json_number(a.dw_vs_fp32_worst);
  }
  if (!a.carried.empty()) {  // absent otherwise: a gate's record keeps its bytes and seal
    nlohmann::json cs = nlohmann::json::array();
    for (const auto& c : a.carried)
      cs.push_back({{"from_source_sha256", c.from_source_sha256}, {"to_source_sha256", c.to_source_sha256},
                    {"digests_old", c.digests_old}, {"digests_new", c.digests_new}, {"cases", c.cases},
                    {"gpu", c.gpu}, {"date", c.date}, {"normgate_commit", c.normgate_commit}});
    j["carried"] = cs;
  }
  if (!a.journal_head.empty())  // absent otherwise
    j["journal"] = {{"head", a.journal_head}, {"lines", a.journal_lines}};
  if (a.has_vouch) {  // absent otherwise
    const auto& v = a.vouched;
    j["vouched"] = {{"variant", v.variant}, {"record_sha256", v.record_sha256}, {"source_sha256", v.source_sha256},
                    {"digests_v", v.digests_v}, {"digests_w", v.digests_w}, {"cases", v.cases}, {"gpu", v.gpu},
                    {"date", v.date}, {"normgate_commit", v.normgate_commit}};
  }
  return j;
}

// The seal of a record (approvals and rejections alike, routing.h
// "Validation"): SHA-256 of the JSON object without record_sha256, dumped
// compactly (sorted keys, no whitespace).
std::string record_digest(nlohmann::json rec) {
  rec.erase("record_sha256");
  const std::string dump = rec.dump();
  return seeds::sha256_hex(dump.data(), dump.size());
}

// The record's fields (routing.h, "Validation"); "record_sha256" too.
constexpr std::string_view kRecordKeys[] = {
    "window", "variant", "source_sha256", "backend", "gpu", "driver", "cuda", "seed_set", "t_points", "cases",
    "max_err_tol", "worst_case", "date", "normgate_commit", "normgate_version", "t_per_window", "dense_points",
    "dense_step", "dense_seeds", "fresh_factor", "fresh_seeds", "oracle", "dw_vs_fp32_worst", "record_sha256",
    "carried", "vouched", "journal"};
constexpr std::string_view kWindowKeys[] = {"op", "mode", "H", "w", "form", "T"};

bool lower_hex64(const std::string& s);
bool iso8601_utc(const std::string& s);

// The first string of record j (a field's value at any depth) holding a
// control character, as "field 'NAME' holds a control character ('...')",
// the value escaped; "" when none does. normgate writes none; one quoted in
// a message could start a line of its own, so the record is INVALID.
std::string control_field(const nlohmann::json& j, const std::string& at = "") {
  if (j.is_string()) {
    const std::string& v = j.get_ref<const std::string&>();
    if (core::has_control_bytes(v))
      return "field '" + at + "' holds a control character ('" + core::escape_controls(v) +
             "'; normgate writes none)";
    return "";
  }
  if (j.is_object()) {
    for (const auto& [k, v] : j.items())
      if (std::string why = control_field(v, at.empty() ? k : at + "." + k); !why.empty()) return why;
  } else if (j.is_array()) {
    size_t i = 0;
    for (const auto& v : j)
      if (std::string why = control_field(v, at + "[" + std::to_string(i++) + "]"); !why.empty()) return why;
  }
  return "";
}

// Read record j into a. The window is read first and assigned whole (a record
// whose window cannot be read keeps H = 0: it contains no route's window).
// Throws std::invalid_argument naming the first malformed field.
void from_json(const nlohmann::json& j, Approval& a) {
  if (!j.is_object()) throw std::invalid_argument("a record must be a JSON object");
  auto field = [&j](const char* k) -> const nlohmann::json& {
    if (!j.contains(k)) throw std::invalid_argument(std::string("missing field '") + k + "'");
    return j.at(k);
  };
  auto str = [&](const nlohmann::json& o, const char* k, const char* where = "") {
    if (!o.contains(k) || !o.at(k).is_string())
      throw std::invalid_argument(std::string("field '") + where + k + "' must be a string");
    return o.at(k).get<std::string>();
  };
  auto integer = [&](const nlohmann::json& v, const std::string& name) {
    if (!v.is_number_integer()) throw std::invalid_argument("field '" + name + "' must be an integer");
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw std::invalid_argument("field '" + name + "' out of range");
    return v.get<int64_t>();
  };
  for (const auto& [k, v] : j.items()) {
    (void)v;
    if (std::find(std::begin(kRecordKeys), std::end(kRecordKeys), k) == std::end(kRecordKeys))
      throw std::invalid_argument("unknown field '" + k + "'");
  }
  {
    const auto& win = field("window");
    if (!win.is_object()) throw std::invalid_argument("field 'window' must be an object");
    for (const auto& [k, v] : win.items()) {
      (void)v;
      if (std::find(std::begin(kWindowKeys), std::end(kWindowKeys), k) == std::end(kWindowKeys))
        throw std::invalid_argument("unknown field 'window." + k + "'");
    }
    Approval w;
    w.op = parse_op(str(win, "op", "window."));
    if (w.op == Op::bwd) w.mode = parse_mode(str(win, "mode", "window."));
    else if (win.contains("mode")) throw std::invalid_argument("a fwd window has no 'window.mode'");
    if (!win.contains("H")) throw std::invalid_argument("missing field 'window.H'");
    w.H = integer(win.at("H"), "window.H");
    w.w = parse_wdtype(str(win, "w", "window."));
    w.form = parse_form(str(win, "form", "window."));
    if (!win.contains("T") || !win.at("T").is_array() || win.at("T").size() != 2)
      throw std::invalid_argument("field 'window.T' must be [lo, hi]");
    w.t_lo = integer(win.at("T")[0], "window.T[0]");
    w.t_hi = integer(win.at("T")[1], "window.T[1]");
    a.op = w.op;
    a.mode = w.mode;
    a.H = w.H;
    a.w = w.w;
    a.form = w.form;
    a.t_lo = w.t_lo;
    a.t_hi = w.t_hi;
  }
  a.variant = str(j, "variant");
  a.source_sha256 = str(j, "source_sha256");
  a.backend = str(j, "backend");
  a.gpu = str(j, "gpu");
  a.driver = str(j, "driver");
  a.cuda = str(j, "cuda");
  a.seed_set = str(j, "seed_set");
  const auto& tp = field("t_points");
  if (!tp.is_array()) throw std::invalid_argument("field 't_points' must be an array");
  for (size_t i = 0; i < tp.size(); ++i) a.t_points.push_back(integer(tp[i], "t_points[" + std::to_string(i) + "]"));
  a.cases = integer(field("cases"), "cases");
  const auto& m = field("max_err_tol");
  if (!m.is_object()) throw std::invalid_argument("field 'max_err_tol' must be an object");
  for (const auto& [k, v] : m.items()) a.max_err_tol[k] = from_json_number(v, "max_err_tol." + k);
  a.worst_case = str(j, "worst_case");
  a.date = str(j, "date");
  a.normgate_commit = str(j, "normgate_commit");
  a.normgate_version = str(j, "normgate_version");
  // Campaign strength: absent in records written before approvals carried it.
  const bool any_strength = std::any_of(std::begin(kRecordKeys) + 15, std::begin(kRecordKeys) + 23,
                                        [&j](std::string_view k) { return j.contains(std::string(k)); });
  if (any_strength) {
    a.has_strength = true;
    auto small = [&](const char* k) {
      const int64_t v = integer(field(k), k);
      if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
        throw std::invalid_argument(std::string("field '") + k + "' " + std::to_string(v) + " out of range");
      return static_cast<int>(v);
    };
    a.t_per_window = small("t_per_window");
    a.dense_points = small("dense_points");
    a.dense_step = integer(field("dense_step"), "dense_step");
    a.fresh_factor = small("fresh_factor");
    (void)field("dense_seeds");
    const std::string ds = str(j, "dense_seeds");
    if (ds != "worst" && ds != "all")
      throw std::invalid_argument("field 'dense_seeds' must be \"worst\" or \"all\", got '" + ds + "'");
    a.dense_all_seeds = ds == "all";
    (void)field("fresh_seeds");
    a.fresh_seeds = str(j, "fresh_seeds");
    (void)field("oracle");
    a.oracle = str(j, "oracle");
    if (a.op == Op::bwd) a.dw_vs_fp32_worst = from_json_number(field("dw_vs_fp32_worst"), "dw_vs_fp32_worst");
    else if (j.contains("dw_vs_fp32_worst")) throw std::invalid_argument("a fwd record has no 'dw_vs_fp32_worst'");
  }
  if (j.contains("carried")) {
    const auto& cs = j.at("carried");
    if (!cs.is_array() || cs.empty()) throw std::invalid_argument("field 'carried' must be a non-empty array");
    std::string prev = "";
    for (size_t i = 0; i < cs.size(); ++i) {
      const std::string at = "carried[" + std::to_string(i) + "].";
      const auto& c = cs[i];
      if (!c.is_object() || c.size() != 8) throw std::invalid_argument("field '" + at.substr(0, at.size() - 1) +
                                                                       "' must be an object of 8 fields");
      Approval::Carry x;
      auto hex = [&](const char* k) {
        const std::string v = str(c, k, at.c_str());
        if (!lower_hex64(v)) throw std::invalid_argument("field '" + at + k + "' must be 64 lower-case hex digits");
        return v;
      };
      x.from_source_sha256 = hex("from_source_sha256");
      x.to_source_sha256 = hex("to_source_sha256");
      x.digests_old = hex("digests_old");
      x.digests_new = hex("digests_new");
      if (!c.contains("cases")) throw std::invalid_argument("missing field '" + at + "cases'");
      x.cases = integer(c.at("cases"), at + "cases");
      if (x.cases < 1) throw std::invalid_argument("field '" + at + "cases' must be at least 1");
      x.gpu = str(c, "gpu", at.c_str());
      x.date = str(c, "date", at.c_str());
      if (!iso8601_utc(x.date)) throw std::invalid_argument("field '" + at + "date' must be UTC ISO 8601");
      x.normgate_commit = str(c, "normgate_commit", at.c_str());
      // Carries in order of time. One need not start where the previous
      // one ended, nor the last end at the record's source_sha256: a
      // comment-only re-key (tools/rekey_approvals.py) changes
      // source_sha256 alone, before or between carries.
      if (x.from_source_sha256 == x.to_source_sha256)
        throw std::invalid_argument("field '" + at + "to_source_sha256' equals its from_source_sha256");
      if (x.digests_old == x.digests_new)
        throw std::invalid_argument("field '" + at + "digests_new' equals its digests_old (one file cannot be both)");
      if (i > 0 && x.date < prev)
        throw std::invalid_argument("field '" + at + "date' is before the previous carry's");
      prev = x.date;
      a.carried.push_back(std::move(x));
    }
  }
  if (j.contains("vouched")) {
    const auto& c = j.at("vouched");
    const std::string at = "vouched.";
    if (!c.is_object() || c.size() != 9) throw std::invalid_argument("field 'vouched' must be an object of 9 fields");
    auto hex = [&](const char* k) {
      const std::string v = str(c, k, at.c_str());
      if (!lower_hex64(v)) throw std::invalid_argument("field '" + at + k + "' must be 64 lower-case hex digits");
      return v;
    };
    Approval::Vouch v;
    v.variant = str(c, "variant", at.c_str());
    if (!variant_name_ok(v.variant))
      throw std::invalid_argument("field 'vouched.variant' must be a variant name ([A-Za-z0-9_.+-]{1,64})");
    if (v.variant == a.variant)
      throw std::invalid_argument("field 'vouched.variant' must name another variant than the record's");
    v.record_sha256 = hex("record_sha256");
    v.source_sha256 = hex("source_sha256");
    if (v.source_sha256 == a.source_sha256)
      throw std::invalid_argument("field 'vouched.source_sha256' is the record's own source (it names the voucher's)");
    v.digests_v = hex("digests_v");
    v.digests_w = hex("digests_w");
    if (v.digests_v == v.digests_w)
      throw std::invalid_argument("field 'vouched.digests_w' equals its digests_v (one file cannot be both)");
    if (!c.contains("cases")) throw std::invalid_argument("missing field 'vouched.cases'");
    v.cases = integer(c.at("cases"), "vouched.cases");
    if (v.cases < 1) throw std::invalid_argument("field 'vouched.cases' must be at least 1");
    v.gpu = str(c, "gpu", at.c_str());
    if (v.gpu.empty()) throw std::invalid_argument("field 'vouched.gpu' must not be empty");
    v.date = str(c, "date", at.c_str());
    if (!iso8601_utc(v.date)) throw std::invalid_argument("field 'vouched.date' must be UTC ISO 8601");
    v.normgate_commit = str(c, "normgate_commit", at.c_str());
    if (v.normgate_commit.empty()) throw std::invalid_argument("field 'vouched.normgate_commit' must not be empty");
    a.has_vouch = true;
    a.vouched = std::move(v);
  }
  if (j.contains("journal")) {
    const auto& jj = j.at("journal");
    if (!jj.is_object() || jj.size() != 2 || !jj.contains("head") || !jj.contains("lines"))
      throw std::invalid_argument("field 'journal' must be an object of exactly 'head' and 'lines'");
    a.journal_head = str(jj, "head", "journal.");
    if (!lower_hex64(a.journal_head))
      throw std::invalid_argument("field 'journal.head' '" + a.journal_head + "' is not 64 lower-case hex digits");
    a.journal_lines = integer(jj.at("lines"), "journal.lines");
    if (a.journal_lines < 2)
      throw std::invalid_argument("field 'journal.lines' " + std::to_string(a.journal_lines) +
                                  " (a journal with a record has at least 2 lines)");
  }
  if (j.contains("record_sha256")) a.record_sha256 = str(j, "record_sha256");
}

bool lower_hex64(const std::string& s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// "YYYY-MM-DDTHH:MM:SSZ", a real calendar time.
bool iso8601_utc(const std::string& s) {
  if (s.size() != 20 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' || s[19] != 'Z')
    return false;
  for (size_t i : {0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18})
    if (s[i] < '0' || s[i] > '9') return false;
  auto num = [&s](size_t at, size_t n) { return std::stoi(s.substr(at, n)); };
  const int y = num(0, 4), mo = num(5, 2), d = num(8, 2), h = num(11, 2), mi = num(14, 2), se = num(17, 2);
  if (mo < 1 || mo > 12 || d < 1 || h > 23 || mi > 59 || se > 59) return false;
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return d <= kDays[mo - 1] + (mo == 2 && leap ? 1 : 0);
}

// Why the seed-set spelling s is not a canonical seed set, or "".
std::string seed_set_problem(const std::string& s) {
  try {
    const std::string canon = seeds::to_string(seeds::parse_seed_set(s));
    if (canon != s) return "'" + s + "' is not canonical (" + canon + ")";
    return {};
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
}

std::string num_text(double v) {
  std::ostringstream o;
  o.precision(17);
  o << v;
  return o.str();
}

}  // namespace

std::string validate_approval(const Approval& a) {
  try {
    const std::string win = "window " + a.window();
    if (a.H < kMinH || a.H > kMaxH)
      return win + ": H " + std::to_string(a.H) + " outside " + std::to_string(kMinH) + ".." + std::to_string(kMaxH);
    if ((a.form == Form::heads24 || a.form == Form::heads4) && a.H != 256)
      return win + ": form " + std::string(to_string(a.form)) + " needs H = 256";
    if (a.t_lo < 1 || a.t_hi < a.t_lo || a.t_hi > kMaxT)
      return win + ": T needs 1 <= lo <= hi <= " + std::to_string(kMaxT);
    // Every variant name a process can register (built-in, plugin,
    // external) is 1 to 64 of A-Z a-z 0-9 _ . + - (registry.h).
    if (a.variant.empty() || a.variant.size() > 64 ||
        a.variant.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.+-") !=
            std::string::npos)
      return "variant " + nlohmann::json(a.variant).dump() + " is not a variant name (1 to 64 of A-Z a-z 0-9 _ . + -)";
    // A registered variant must serve the window it approves (a name not
    // registered here may be a plugin's, loaded by another process).
    if (const Variant* v = find_variant(a.variant)) {
      const CallShape shape{a.H, a.w, a.form};
      switch (serve_gap(*v, a.op, a.mode, &shape)) {
        case ServeGap::none:
          break;
        case ServeGap::op:
          return "variant " + a.variant + " is a " + std::string(to_string(v->op)) + " variant; " + win + " is " +
                 std::string(to_string(a.op));
        case ServeGap::control:
          return "variant " + a.variant + " is a negative control: never routed, never approved";
        case ServeGap::nondet:
          return "variant " + a.variant + " is non-deterministic; " + win + " is deterministic";
        case ServeGap::h:
        case ServeGap::w:
        case ServeGap::form:
          return "variant " + a.variant + " does not serve " + win + " (" + describe(*v) + ")";
      }
    }
    if (!lower_hex64(a.source_sha256)) return "source_sha256 '" + a.source_sha256 + "' is not 64 lower-case hex digits";
    if (a.backend != kGpuBackend && a.backend != kCpuModelBackend)
      return "backend '" + a.backend + "' (expected \"gpu\" or \"cpu-model\")";
    if (a.backend == kCpuModelBackend && a.gpu != kCpuModelBackend)
      return "gpu '" + a.gpu + "' of a cpu-model record (expected \"cpu-model\")";
    // A gate on the GPU records the device, its driver and CUDA runtime
    // (gate/approvals.cpp); "-" is what a CPU-model gate writes for the last
    // two, and "cpu-model" its gpu: a gpu record holding them was not
    // written by a GPU gate.
    if (a.backend == kGpuBackend) {
      if (a.gpu == kCpuModelBackend) return "gpu 'cpu-model' of a gpu record (expected the device's name)";
      if (a.driver == "-") return "driver '-' of a gpu record (expected the device's driver version)";
      if (a.cuda == "-") return "cuda '-' of a gpu record (expected the CUDA runtime's version)";
    } else {
      if (a.driver != "-") return "driver '" + a.driver + "' of a cpu-model record (expected \"-\")";
      if (a.cuda != "-") return "cuda '" + a.cuda + "' of a cpu-model record (expected \"-\")";
    }
    const std::pair<const char*, const std::string*> texts[] = {{"gpu", &a.gpu},
                                                                 {"driver", &a.driver},
                                                                 {"cuda", &a.cuda},
                                                                 {"normgate_commit", &a.normgate_commit},
                                                                 {"normgate_version", &a.normgate_version}};
    for (const auto& [name, v] : texts)
      if (v->empty()) return std::string(name) + " is empty";
    // max_err_tol: exactly the gated outputs, each a pass; form res's h_new
    // (bit for bit, so 0) in records made since the gate checks it.
    const bool res = a.form == Form::res;
    std::vector<std::string> want = a.op == Op::bwd ? std::vector<std::string>{"dw", "dx", "rstd", "y"}
                                                    : std::vector<std::string>{"rstd", "y"};
    std::vector<std::string> have;
    for (const auto& [k, v] : a.max_err_tol)
      if (!(res && k == "h_new")) have.push_back(k);
    if (have != want || (!res && a.max_err_tol.count("h_new"))) {
      std::string w, h;
      for (const auto& k : want) w += (w.empty() ? "" : ", ") + k;
      for (const auto& [k, v] : a.max_err_tol) h += (h.empty() ? "" : ", ") + k;
      return "max_err_tol has {" + h + "}; a " + std::string(to_string(a.op)) + " approval records {" + w + "}" +
             (res ? " and, when its gate checked it, h_new" : "");
    }
    for (const auto& [k, v] : a.max_err_tol)
      if (!std::isfinite(v) || v < 0 || v > 1)
        return "max_err_tol." + k + " " + num_text(v) + " outside [0, 1] (an approval records a pass)";
    if (const auto h = a.max_err_tol.find("h_new"); h != a.max_err_tol.end() && h->second != 0)
      return "max_err_tol.h_new " + num_text(h->second) + " (h_new passes only bit for bit: 0)";
    if (a.t_points.empty()) return "t_points is empty";
    for (size_t i = 0; i < a.t_points.size(); ++i) {
      const int64_t t = a.t_points[i];
      if (t < a.t_lo || t > a.t_hi)
        return "t_points[" + std::to_string(i) + "] " + std::to_string(t) + " outside the window T=" +
               std::to_string(a.t_lo) + ".." + std::to_string(a.t_hi);
      if (i > 0 && t <= a.t_points[i - 1])
        return "t_points not strictly increasing at [" + std::to_string(i) + "] " + std::to_string(t);
    }
    // A campaign's T points always hold the window's first and last T
    // (window_t_points, gate/gate.h): a record without them was not written
    // by a gate.
    if (a.t_points.front() != a.t_lo || a.t_points.back() != a.t_hi)
      return "t_points run " + std::to_string(a.t_points.front()) + ".." + std::to_string(a.t_points.back()) +
             ", not the window's T=" + std::to_string(a.t_lo) + ".." + std::to_string(a.t_hi) +
             " (a gate's T points hold its first and last T)";
    if (a.cases < 1 || a.cases < static_cast<int64_t>(a.t_points.size()))
      return "cases " + std::to_string(a.cases) + " (needs >= 1 and >= the " + std::to_string(a.t_points.size()) +
             " t_points)";
    if (const auto p = seed_set_problem(a.seed_set); !p.empty()) return "seed_set: " + p;
    seeds::CaseId c;
    try {
      c = seeds::parse_case(a.worst_case);
    } catch (const std::invalid_argument& e) {
      return "worst_case: " + std::string(e.what());
    }
    if (c.H != a.H || c.w != a.w || c.form != a.form || c.T < a.t_lo || c.T > a.t_hi)
      return "worst_case '" + a.worst_case + "' is not inside " + win;
    if (!iso8601_utc(a.date)) return "date '" + a.date + "' is not ISO 8601 UTC (YYYY-MM-DDTHH:MM:SSZ)";
    if (a.has_strength) {
      constexpr int kBig = 1000000;
      if (a.t_per_window < 2 || a.t_per_window > kBig)
        return "t_per_window " + std::to_string(a.t_per_window) + " outside 2.." + std::to_string(kBig);
      if (a.dense_points < 0 || a.dense_points > kBig)
        return "dense_points " + std::to_string(a.dense_points) + " outside 0.." + std::to_string(kBig);
      if (a.dense_step < 1 || a.dense_step > kMaxT)
        return "dense_step " + std::to_string(a.dense_step) + " outside 1.." + std::to_string(kMaxT);
      if (a.fresh_factor < 0 || a.fresh_factor > kBig)
        return "fresh_factor " + std::to_string(a.fresh_factor) + " outside 0.." + std::to_string(kBig);
      if (!a.fresh_seeds.empty())
        if (const auto p = seed_set_problem(a.fresh_seeds); !p.empty()) return "fresh_seeds: " + p;
      // The strength fields agree with one another as a gate writes them:
      // its grid ran the whole seed set at every T point, and its fresh
      // seeds (one family) follow the set's last seed, fresh_factor times as
      // many as a family has. A record edited to claim a larger set, and
      // sealed again, must change these too.
      const seeds::SeedSet set = seeds::parse_seed_set(a.seed_set);
      const uint64_t grid = static_cast<uint64_t>(a.t_points.size()) * set.size();
      if (static_cast<uint64_t>(a.cases) < grid)
        return "cases " + std::to_string(a.cases) + " below the grid of seed_set " + a.seed_set + " at the " +
               std::to_string(a.t_points.size()) + " t_points (" + std::to_string(grid) + " cases)";
      if (a.fresh_factor == 0 && !a.fresh_seeds.empty())
        return "fresh_seeds '" + a.fresh_seeds + "' with fresh_factor 0";
      if (a.fresh_factor > 0 && !a.fresh_seeds.empty()) {
        const seeds::SeedSet fresh = seeds::parse_seed_set(a.fresh_seeds);
        const uint64_t per_family = set.last - set.first + 1;
        const uint64_t want = per_family * static_cast<uint64_t>(a.fresh_factor);
        if (fresh.points().size() != 1 || set.last == std::numeric_limits<uint64_t>::max() ||
            fresh.first != set.last + 1 || fresh.last - fresh.first + 1 != want)
          return "fresh_seeds '" + a.fresh_seeds + "' do not follow seed_set " + a.seed_set + " at fresh_factor " +
                 std::to_string(a.fresh_factor) + " (one family, seeds " + std::to_string(set.last + 1) + ".." +
                 std::to_string(set.last + want) + ")";
      }
      if (a.oracle != "auto" && a.oracle != "fp64" && a.oracle != "mpfr")
        return "oracle '" + a.oracle + "' (expected auto, fp64 or mpfr)";
      // inf: FP32 eager's dw error was 0 and the variant's not; nan: no FP32 baseline.
      if (a.op == Op::bwd && a.dw_vs_fp32_worst < 0)
        return "dw_vs_fp32_worst " + num_text(a.dw_vs_fp32_worst) + " (needs >= 0, inf or nan)";
    }
    return {};
  } catch (const std::exception& e) {  // never throws
    return e.what();
  }
}


// ---- Route / RouteTable -------------------------------------------------------

std::string Route::window() const { return window_text(op, mode, H, w, form, t_lo, t_hi); }
std::string Route::describe() const { return window() + " -> " + std::string(variant ? variant->name : "?"); }
std::string Route::where() const { return file + ":" + std::to_string(line); }

bool Route::same_window(const Route& o) const {
  return op == o.op && (op == Op::fwd || mode == o.mode) && H == o.H && w == o.w && form == o.form &&
         t_lo == o.t_lo && t_hi == o.t_hi;
}

bool Route::covers(Op op_, Mode mode_, int64_t H_, WDtype w_, Form form_, int64_t T) const {
  return op == op_ && (op == Op::fwd || mode == mode_) && H == H_ && w == w_ && form == form_ && T >= t_lo &&
         T <= t_hi;
}

const Route* RouteTable::find(Op op, Mode mode, int64_t H, WDtype w, Form form, int64_t T) const {
  if (T == 0) T = 1;
  for (const Route& r : routes)
    if (r.covers(op, mode, H, w, form, T)) return &r;
  return nullptr;
}

const Route* RouteTable::find_window(const Route& x) const {
  for (const Route& r : routes)
    if (r.same_window(x)) return &r;
  return nullptr;
}

RouteTable parse_route_table(std::string_view text, const std::string& path, const LoadOptions& opt) {
  const Ctx ctx{text, path};
  toml::table root;
  if (const auto bad = detail::toml_unclassifiable(text))
    throw RouteTableError(path + ":" + std::to_string(bad->first) + ": " + bad->second);
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    throw RouteTableError(path + ":" + std::to_string(e.source().begin.line) + ": TOML syntax error: " +
                          std::string(e.description()));
  }
  if (const auto bad = detail::toml_control_string(root))
    throw RouteTableError(path + ":" + std::to_string(bad->first) + ": " + bad->second);
  for (auto&& [k, v] : root) {
    (void)v;
    if (std::find(std::begin(kTopKeys), std::end(kTopKeys), k.str()) == std::end(kTopKeys))
      ctx.fail(static_cast<int>(k.source().begin.line),
               "unknown top-level key '" + std::string(k.str()) + "' (known: " + join(kTopKeys) + ")");
  }
  RouteTable t;
  t.path = path;
  t.sha256 = seeds::sha256_hex(text.data(), text.size());
  const toml::node* arch = root.get("arch");
  if (!arch) ctx.fail(1, "missing top-level key 'arch' (expected arch = \"" + std::string(kArch) + "\")");
  if (!arch->is_string() || arch->value<std::string>() != kArch)
    ctx.fail(line_of(*arch), "arch must be \"" + std::string(kArch) + "\" (the only arch the registry builds)");
  t.arch = std::string(kArch);
  if (const toml::node* d = root.get("description")) {
    if (!d->is_string()) ctx.fail(line_of(*d), "description must be a string");
    t.description = *d->value<std::string>();
  }
  const toml::node* rn = root.get("route");
  if (!rn) ctx.fail(1, "missing key 'route' (an array of routes)");
  const toml::array* ra = rn->as_array();
  if (!ra) ctx.fail(line_of(*rn), "'route' must be an array of tables");
  if (ra->empty()) ctx.fail(line_of(*rn), "'route' is empty: a table needs at least one route");
  std::vector<const toml::node*> nodes;
  for (const toml::node& n : *ra) {
    t.routes.push_back(parse_route(ctx, n, opt));
    nodes.push_back(&n);
  }
  check_windows(ctx, t.routes, nodes);
  if (const toml::node* fb = root.get("fallback")) t.fallback = parse_fallback(ctx, *fb);
  return t;
}

RouteTable load_route_table(const std::string& path, const LoadOptions& opt) {
  // An ifstream opens a folder and reads nothing, blocks on a FIFO and
  // reads a device such as /dev/zero without end: only a regular file is
  // read (a missing one falls through to the open's own error).
  if (const std::string why = core::regular_file_problem(path); why == "is a directory")
    throw RouteTableError(path + ": cannot read route table: it is a directory (give the table's .toml file)");
  else if (!why.empty() && why != "no such file")
    throw RouteTableError(path + ": cannot read route table: " + why);
  std::ifstream f(path, std::ios::binary);
  if (!f) throw RouteTableError(path + ": cannot read route table: " + std::strerror(errno));
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) throw RouteTableError(path + ": read error");
  return parse_route_table(ss.str(), path, opt);
}

// ---- approvals ----------------------------------------------------------------

std::string Approval::window() const { return window_text(op, mode, H, w, form, t_lo, t_hi); }

bool Approval::same_window(const Route& r) const {
  return op == r.op && (op == Op::fwd || mode == r.mode) && H == r.H && w == r.w && form == r.form &&
         t_lo == r.t_lo && t_hi == r.t_hi;
}

bool Approval::contains(const Route& r) const {
  return op == r.op && (op == Op::fwd || mode == r.mode) && H == r.H && w == r.w && form == r.form &&
         t_lo <= r.t_lo && r.t_hi <= t_hi;
}

bool Approval::overlaps(const Route& r) const {
  return op == r.op && (op == Op::fwd || mode == r.mode) && H == r.H && w == r.w && form == r.form &&
         t_lo <= r.t_hi && r.t_lo <= t_hi;
}

std::string table_path_for_approvals(const std::string& approvals_path) {
  constexpr std::string_view kSuffix = ".approvals.json";
  if (approvals_path.size() <= kSuffix.size() ||
      approvals_path.compare(approvals_path.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0)
    return {};
  return approvals_path.substr(0, approvals_path.size() - kSuffix.size()) + ".toml";
}

std::string gpu_slug(std::string_view device_name) {
  std::string out;
  bool gap = false;
  for (const char ch : device_name) {
    const auto c = static_cast<unsigned char>(ch);
    const bool alnum = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (!alnum) {
      gap = true;
      continue;
    }
    if (gap && !out.empty()) out += '-';
    gap = false;
    out += (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : static_cast<char>(c);
  }
  return out;
}

namespace {
// The file name's stem (".toml" off) and where its '@' is (npos: none);
// false when the name does not end in ".toml" or has nothing before it.
bool split_table_name(const std::string& table_path, std::string& dir, std::string& stem, size_t& at) {
  constexpr std::string_view kToml = ".toml";
  const size_t slash = table_path.find_last_of('/');
  const std::string name = slash == std::string::npos ? table_path : table_path.substr(slash + 1);
  if (name.size() <= kToml.size() || name.compare(name.size() - kToml.size(), kToml.size(), kToml) != 0)
    return false;
  dir = slash == std::string::npos ? std::string() : table_path.substr(0, slash + 1);
  stem = name.substr(0, name.size() - kToml.size());
  at = stem.find('@');
  return true;
}
}  // namespace

std::string gpu_table_slug(const std::string& table_path) {
  std::string dir, stem;
  size_t at = 0;
  if (!split_table_name(table_path, dir, stem, at) || at == std::string::npos || at == 0) return {};
  const std::string slug = stem.substr(at + 1);
  return !slug.empty() && gpu_slug(slug) == slug ? slug : std::string();
}

std::string table_file_stem(const std::string& table_path) {
  std::string dir, stem;
  size_t at = 0;
  if (!split_table_name(table_path, dir, stem, at)) return {};
  if (!gpu_table_slug(table_path).empty()) stem.resize(at);
  return dir + stem;
}

std::string gpu_table_path(const std::string& base_table, std::string_view device_name) {
  std::string dir, stem;
  size_t at = 0;
  const std::string slug = gpu_slug(device_name);
  if (slug.empty() || !split_table_name(base_table, dir, stem, at) || at != std::string::npos) return "";
  return dir + stem + "@" + slug + ".toml";
}

std::string table_for_gpu(const std::string& base_table, std::string_view device_name) {
  const std::string candidate = gpu_table_path(base_table, device_name);
  std::error_code ec;
  return !candidate.empty() && std::filesystem::is_regular_file(candidate, ec) ? candidate : base_table;
}

std::vector<std::string> tables_sharing_approvals(const std::string& approvals_path) {
  std::vector<std::string> out;
  const std::string base = table_path_for_approvals(approvals_path);  // "dir/stem.toml" or ""
  if (base.empty()) return out;
  std::string dir, stem;
  size_t at = 0;
  if (!split_table_name(base, dir, stem, at) || at != std::string::npos) return out;
  std::error_code ec;
  if (std::filesystem::is_regular_file(base, ec)) out.push_back(base);
  const std::filesystem::path folder = dir.empty() ? std::filesystem::path(".") : std::filesystem::path(dir);
  std::filesystem::directory_iterator it(folder, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const std::string p = dir + name;
    if (name.rfind(stem + "@", 0) == 0 && !gpu_table_slug(p).empty() && table_file_stem(p) == dir + stem &&
        std::filesystem::is_regular_file(p, ec))
      out.push_back(p);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string table_sibling_path(const std::string& table_path, std::string_view suffix) {
  if (!gpu_table_slug(table_path).empty()) return table_file_stem(table_path) + std::string(suffix);
  const std::filesystem::path p(table_path);
  if (p.extension() == ".toml") {
    std::filesystem::path q = p;
    q.replace_extension(std::string(suffix));
    return q.string();
  }
  return table_path + std::string(suffix);
}

std::string approvals_path_for(const std::string& table_path) {
  return table_sibling_path(table_path, ".approvals.json");
}

// The envelope of a file of sealed records (approvals, rejections): JSON, the
// "format" string, one array of records named `key`, no other top-level key.
static nlohmann::json parse_sealed_file(std::string_view text, const std::string& path, const std::string& key,
                                 const std::string& a_file, std::string_view format) {
  // JSON text holds no NUL byte; nlohmann's parser stops at one, so the
  // bytes after it would go unread.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos)
    throw RouteTableError(path + ": " + key + " are not a normgate file: a NUL byte at offset " +
                          std::to_string(nul) + " (JSON text holds none)");
  nlohmann::json j;
  try {
    // Nesting and duplicate keys refused (json_strict.h): a record's seal
    // covers the object as parsed.
    j = parse_json_strict(text);
  } catch (const nlohmann::json::exception& e) {
    throw RouteTableError(path + ": " + key + " are not valid JSON: " + e.what());
  } catch (const std::invalid_argument& e) {
    throw RouteTableError(path + ": " + key + " are not a normgate file: " + e.what());
  }
  if (!j.is_object() || !j.contains("format") || j["format"] != format)
    throw RouteTableError(path + ": not " + a_file + " (expected \"format\": \"" + std::string(format) + "\")");
  if (!j.contains(key) || !j[key].is_array()) throw RouteTableError(path + ": '" + key + "' must be an array");
  for (const auto& [k, v] : j.items()) {
    (void)v;
    if (k != "format" && k != key) throw RouteTableError(path + ": unknown top-level key '" + k + "'");
  }
  return j;
}

// "" when a sealed record's record_sha256 (`claimed`) is well formed and is
// the digest of the record as read (routing.h, "Validation"), else why not.
static std::string seal_problem(const nlohmann::json& rec, const std::string& claimed) {
  if (!lower_hex64(claimed)) return "record_sha256 '" + claimed + "' is not 64 lower-case hex digits";
  const std::string sha = record_digest(rec);
  if (sha != claimed)
    return "record_sha256 mismatch: the record's bytes hash to " + sha.substr(0, 12) + ", it says " +
           claimed.substr(0, 12) + " (changed after it was written)";
  return "";
}

// The date from which every writer of approvals sealed each record it wrote
// (b80df9f, "routing: validate approval records, seal them with
// record_sha256"); ISO 8601 UTC, compared as text.
static constexpr const char* kSealedSince = "2026-12-02T02:53:15Z";

Approvals parse_approvals(std::string_view text, const std::string& path) {
  Approvals a;
  a.path = path;
  const nlohmann::json j = parse_sealed_file(text, path, "approvals", "an approvals file", kApprovalsFormat);
  size_t i = 0;
  // Each record read valid or sealable, and its digest: its record_sha256,
  // or for an unsealed one the digest --seal would give it.
  std::vector<std::pair<size_t, std::string>> digests;
  for (const auto& rec : j["approvals"]) {
    Approval x;
    x.index = i;
    std::string why;
    try {
      from_json(rec, x);
      why = control_field(rec);
      if (why.empty()) why = validate_approval(x);
      if (why.empty()) {
        x.unsealed = !rec.contains("record_sha256");
        if (x.unsealed && x.date >= kSealedSince) {
          // Every writer sealed what it wrote from then on: the seal was
          // removed, or an older build wrote it.
          x.unsealed = false;
          why = "no record_sha256, yet dated " + x.date + ", when every normgate writer sealed its records (from " +
                std::string(kSealedSince) + "): its seal was removed, or a build older than that wrote it (not "
                "sealable; gate the window again)";
        } else if (x.unsealed) {
          why = "no record_sha256: written before approvals carried digests (before " + std::string(kSealedSince) +
                "), or its seal removed. `normgate approvals --seal " + path +
                "` trusts such records: seal only those whose history you trust (git log -p)";
        } else {
          why = seal_problem(rec, x.record_sha256);
        }
      }
    } catch (const std::exception& e) {
      why = e.what();
    }
    if (why.empty() || x.unsealed) digests.emplace_back(i, x.unsealed ? approval_record_sha256(x) : x.record_sha256);
    if (!why.empty()) {
      x.invalid = "record " + std::to_string(i) + ": " + why;
      x.raw_json = rec.dump();
    }
    a.records.push_back(std::move(x));
    ++i;
  }
  // Copies: normgate writes each record once (merges keep one per window
  // and variant), so two records with one digest were pasted in. Every
  // copy is INVALID, the first too: were the first kept valid, a writer
  // replacing it later would leave a pasted copy the only one, and valid.
  // Unsealed records count by the seal --seal would give them.
  for (size_t p = 0; p < digests.size(); ++p) {
    std::string others;
    for (size_t q = 0; q < digests.size(); ++q)
      if (q != p && digests[q].second == digests[p].second)
        others += (others.empty() ? "" : ", ") + std::to_string(digests[q].first);
    if (others.empty()) continue;
    Approval& x = a.records[digests[p].first];
    const std::string why = "one of the copies of one record (also record " + others +
                            "; normgate writes each record once)";
    if (x.invalid.empty()) x.raw_json = j["approvals"][digests[p].first].dump();
    x.invalid = "record " + std::to_string(digests[p].first) + ": " + why;
    x.unsealed = false;  // not sealable either
  }
  return a;
}

Approvals load_approvals(const std::string& path) {
  // A folder, a FIFO, socket or device (the read would block or never end)
  // or a status that cannot be read (a link loop) is refused naming the
  // reason; a missing file is no approvals (below).
  if (const std::string why = core::regular_file_problem(path); !why.empty() && why != "no such file")
    throw RouteTableError(path + ": cannot read approvals: " + why);
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    if (!std::filesystem::exists(path)) {
      Approvals a;
      a.path = path;
      return a;
    }
    throw RouteTableError(path + ": cannot read approvals: " + std::strerror(errno));
  }
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) throw RouteTableError(path + ": cannot read approvals: read error");
  return parse_approvals(ss.str(), path);
}

std::string approval_canonical_bytes(const Approval& a) { return to_json(a).dump(); }

std::string approval_record_sha256(const Approval& a) {
  const std::string b = approval_canonical_bytes(a);
  return seeds::sha256_hex(b.data(), b.size());
}

size_t invalid_count(const Approvals& a) {
  return static_cast<size_t>(
      std::count_if(a.records.begin(), a.records.end(), [](const Approval& x) { return !x.invalid.empty(); }));
}

std::string approvals_to_json_text(const Approvals& a) {
  nlohmann::json j;
  j["format"] = kApprovalsFormat;
  j["approvals"] = nlohmann::json::array();
  size_t i = 0;
  for (const auto& r : a.records) {
    if (!r.invalid.empty()) {
      // Kept as read: an invalid record is never dropped or re-sealed.
      j["approvals"].push_back(nlohmann::json::parse(r.raw_json));
    } else {
      if (const std::string why = validate_approval(r); !why.empty())
        throw std::invalid_argument(a.path + ": refusing to write record " + std::to_string(i) + " (" + r.window() +
                                    " -> " + r.variant + "): " + why);
      nlohmann::json x = to_json(r);
      x["record_sha256"] = record_digest(x);
      j["approvals"].push_back(std::move(x));
    }
    ++i;
  }
  return j.dump(2) + "\n";
}

// The lock belongs to the file written (a link is written through: its
// target's lock), so that writers naming one file by a link and by its
// target exclude each other.
ApprovalsLock::ApprovalsLock(const std::string& approvals_path)
    : path_(core::rename_target(approvals_path) + ".lock") {
  // The lock file takes the approvals file's read and write bits (less the
  // umask), so whoever may write the approvals may lock them: a group-
  // writable file in a shared folder gets a group-writable lock. flock
  // needs no write access, so a lock file someone else created read-only
  // is opened read-only.
  mode_t mode = 0644;
  struct stat st {};
  if (::stat(core::rename_target(approvals_path).c_str(), &st) == 0) mode = st.st_mode & 0666;
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, mode);
  if (fd_ < 0 && errno == EACCES) fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw std::runtime_error("cannot open lock file '" + path_ + "': " + std::strerror(errno));
  // Free: taken at once, silently. Held: say so once before blocking, so a
  // writer that waits is not mistaken for one that hangs.
  if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
  if (errno == EWOULDBLOCK)
    std::fprintf(stderr,
                 "normgate: waiting for the lock '%s': another writer of the approvals file holds it "
                 "(gate --approve, derive --approve, approvals --seal or --merge-into)\n",
                 path_.c_str());
  while (::flock(fd_, LOCK_EX) != 0)
    if (errno != EINTR) {
      const int e = errno;
      ::close(fd_);
      throw std::runtime_error("cannot lock '" + path_ + "': " + std::strerror(e));
    }
}

ApprovalsLock::~ApprovalsLock() { ::close(fd_); }  // closing releases the lock

namespace {

// Write text to path atomically: a temporary file beside it, fsync, rename,
// fsync of the folder (a link is written through, never replaced).
void write_sealed_file(const std::string& path, const std::string& text) {
  const std::string target = core::rename_target(path);  // a link is written through, never replaced
  const std::string tmp = core::temp_name_beside(target);
  const core::TrackedTemp tracked(tmp);  // a signal while it exists removes it (temp_files.h)
  // A rewrite keeps the file's permission bits (core::create_replacement).
  const int fd = core::create_replacement(tmp, target);
  if (fd < 0) throw std::runtime_error("cannot open '" + tmp + "' for writing: " + std::strerror(errno));
  size_t off = 0;
  while (off < text.size()) {
    const ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string err = std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      throw std::runtime_error("cannot write '" + tmp + "': " + err);
    }
    off += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    throw std::runtime_error("cannot flush '" + tmp + "': " + std::strerror(errno));
  }
  if (::rename(tmp.c_str(), target.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw std::runtime_error("cannot rename '" + tmp + "' to '" + path + "': " + err);
  }
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace

void save_approvals(const Approvals& a) { write_sealed_file(a.path, approvals_to_json_text(a)); }

std::string_view to_string(ApprovalState s) {
  switch (s) {
    case ApprovalState::current: return "current";
    case ApprovalState::stale: return "stale";
    case ApprovalState::cpu_model_only: return "cpu-model only";
    case ApprovalState::invalid: return "invalid";
    default: return "missing";
  }
}

namespace {
// Whether record x's mode answers for route r's: the same mode (or a
// forward, which serves both), or x is the det window's record of the
// deterministic variant r routes in a nondet window. The gate runs such a
// variant's cases once for its det and nondet windows alike (its bits do not
// depend on the mode), so the two records would rest on the same outputs
// (docs/perf/routes.md D21). Never the other way: a nondet record does not
// answer for a det window.
bool mode_answers(const Approval& x, const Route& r) {
  if (x.op == Op::fwd || x.mode == r.mode) return true;
  return x.mode == Mode::det && r.mode == Mode::nondet && r.variant && r.variant->mode == Mode::det &&
         x.variant == r.variant->name;
}
// Whether x's window contains r's in r's group, its mode answering for r's.
bool contains_for(const Approval& x, const Route& r) {
  return x.op == r.op && mode_answers(x, r) && x.H == r.H && x.w == r.w && x.form == r.form && x.t_lo <= r.t_lo &&
         r.t_hi <= x.t_hi;
}
// Whether x's window overlaps r's in r's group, its mode answering for r's.
bool meets_for(const Approval& x, const Route& r) {
  return x.op == r.op && mode_answers(x, r) && x.H == r.H && x.w == r.w && x.form == r.form && x.t_lo <= r.t_hi &&
         r.t_lo <= x.t_hi;
}
// Whether x may cover part of r's window: a valid record of r's group (op,
// mode for bwd as mode_answers says, H, w, form), variant and source hash, of
// `backend`, whose window overlaps r's (approval_status's parts, uncovered_spans).
bool covers_part(const Approval& x, const Route& r, std::string_view backend) {
  const std::string_view vname = r.variant ? r.variant->name : std::string_view{};
  const std::string_view hash = r.variant ? r.variant->source_sha256 : std::string_view{};
  return meets_for(x, r) && x.invalid.empty() && x.variant == vname && x.source_sha256 == hash &&
         x.backend == backend;
}
}  // namespace

std::vector<std::pair<int64_t, int64_t>> uncovered_spans(const Route& r, const Approvals& a,
                                                          std::string_view backend) {
  std::vector<std::pair<int64_t, int64_t>> xs;  // the matching records' windows
  for (const Approval& x : a.records)
    if (covers_part(x, r, backend)) xs.emplace_back(x.t_lo, x.t_hi);
  std::sort(xs.begin(), xs.end());
  std::vector<std::pair<int64_t, int64_t>> gaps;
  int64_t next = r.t_lo;  // first T not yet covered
  for (const auto& [lo, hi] : xs) {
    if (next > r.t_hi) break;
    if (lo > next) gaps.emplace_back(next, std::min(lo - 1, r.t_hi));
    next = std::max(next, hi + 1);  // hi < INT64_MAX: windows end at kMaxT at most
  }
  if (next <= r.t_hi) gaps.emplace_back(next, r.t_hi);
  return gaps;
}

ApprovalStatus approval_status(const Route& r, const Approvals& a, bool accept_cpu_model) {
  const std::string_view vname = r.variant ? r.variant->name : std::string_view{};
  const std::string_view hash = r.variant ? r.variant->source_sha256 : std::string_view{};
  // Preference among records of one kind: the exact window, else the
  // narrowest containing one, else the first in file order.
  auto better = [&r](const Approval* cand, const Approval* best) {
    if (!best) return true;
    const bool ce = cand->same_window(r), be = best->same_window(r);
    if (ce != be) return ce;
    return cand->t_hi - cand->t_lo < best->t_hi - best->t_lo;
  };
  const Approval *gpu_cur = nullptr, *cpu_cur = nullptr, *stale = nullptr, *other_variant = nullptr,
                 *invalid = nullptr;
  for (const Approval& x : a.records) {
    if (!contains_for(x, r)) continue;
    if (!x.invalid.empty()) {  // never approves anything (routing.h, "Validation")
      if (!invalid) invalid = &x;
      continue;
    }
    if (x.variant != vname) {
      if (better(&x, other_variant)) other_variant = &x;
      continue;
    }
    if (x.source_sha256 == hash) {
      if (x.backend == kGpuBackend && better(&x, gpu_cur)) gpu_cur = &x;
      if (x.backend == kCpuModelBackend && better(&x, cpu_cur)) cpu_cur = &x;
    } else if (better(&x, stale)) {
      stale = &x;
    }
  }
  // No single record holds the window: records of neighbouring windows
  // (same group, variant, source hash and backend) whose union covers it
  // without a gap count together, e.g. T=1..65536 and T=65537..131072 for
  // a route T=2049..131072 (the gate proved the variant on each part).
  std::vector<const Approval*> parts;
  auto union_covers = [&](std::string_view backend) {
    std::vector<const Approval*> xs;
    for (const Approval& x : a.records)
      if (covers_part(x, r, backend)) xs.push_back(&x);
    // By t_lo; on ties the route's own mode first (a det record answers for
    // a nondet route only where no nondet record does as well).
    std::sort(xs.begin(), xs.end(), [&r](const Approval* p, const Approval* q) {
      if (p->t_lo != q->t_lo) return p->t_lo < q->t_lo;
      return (p->mode == r.mode) > (q->mode == r.mode);
    });
    std::vector<const Approval*> used;
    int64_t next = r.t_lo;  // first T not yet covered
    for (const Approval* x : xs) {
      if (x->t_lo > next) break;  // a gap
      if (x->t_hi >= next) {
        used.push_back(x);
        next = x->t_hi + 1;
      }
      if (next > r.t_hi) {
        parts = used;
        return true;
      }
    }
    return false;
  };
  if (!gpu_cur && !(cpu_cur && accept_cpu_model)) {
    if (!union_covers(kGpuBackend) && accept_cpu_model) union_covers(kCpuModelBackend);
  }
  ApprovalStatus s;
  auto from = [&r](const Approval& x) {
    std::string carried;
    if (!x.carried.empty())  // D19 of docs/perf/routes.md: the verdict is the gate's, the source a later one
      carried = "; carried by digests " +
                (x.carried.size() == 1 ? std::string("once") : std::to_string(x.carried.size()) + " times") +
                ", last " + x.carried.back().date + ", " + std::to_string(x.carried.back().cases) +
                " cases bit for bit";
    const std::string det_for_nondet =
        x.op == Op::bwd && x.mode != r.mode ? "; the det window's record: a deterministic variant's bits do not "
                                              "depend on the mode"
                                            : "";
    if (x.has_vouch)  // D23 of docs/perf/routes.md: the verdict is the vouching variant's
      carried += "; vouched for by " + x.vouched.variant + "'s record " + x.vouched.record_sha256.substr(0, 12) +
                 " (" + std::to_string(x.vouched.cases) + " cases bit for bit, " + x.vouched.date + ")";
    const std::string h_new = x.h_new_gated() ? "" : "; h_new not checked by that gate (the record predates it)";
    return " (" + x.backend + " gate of " + x.date + ", " + x.gpu + ", seeds " + x.seed_set + carried +
           det_for_nondet + h_new + ")";
  };
  // " as part of T=LO..HI" when the record's window is wider than the route's.
  auto same_t = [&r](const Approval& x) { return x.t_lo == r.t_lo && x.t_hi == r.t_hi; };
  auto part = [&same_t](const Approval& x) {
    return same_t(x) ? std::string()
                            : " as part of T=" + std::to_string(x.t_lo) + ".." + std::to_string(x.t_hi);
  };
  if (!parts.empty()) {
    s.state = ApprovalState::current;
    s.record = parts.front();
    s.parts = parts;
    s.detail = "approved as parts";
    for (const Approval* x : parts)
      s.detail += std::string(x == parts.front() ? " " : " + ") + "T=" + std::to_string(x->t_lo) + ".." +
                  std::to_string(x->t_hi);
    s.detail += from(*parts.front());
    if (std::any_of(parts.begin(), parts.end(), [&r](const Approval* x) { return x->op == Op::bwd && x->mode != r.mode; }) &&
        parts.front()->mode == r.mode)
      s.detail += "; a part is the det window's record (a deterministic variant's bits do not depend on the mode)";
  } else if (gpu_cur || (cpu_cur && accept_cpu_model)) {
    s.state = ApprovalState::current;
    s.record = gpu_cur ? gpu_cur : cpu_cur;
    s.detail = "approved" + part(*s.record) + from(*s.record);
  } else if (invalid) {
    // Before cpu-model only, stale and missing: the file holds a record for
    // this window that cannot be trusted, which is what must be fixed.
    s.state = ApprovalState::invalid;  // record stays null: nothing of it is to be read
    s.detail = invalid->invalid + " (" + a.path + ": an invalid record never approves; re-gate the window with "
               "--approve and delete the record)";
  } else if (cpu_cur) {
    s.state = ApprovalState::cpu_model_only;
    s.record = cpu_cur;
    s.detail = "only a cpu-model approval" + part(*cpu_cur) + from(*cpu_cur) +
               ", which is not accepted: the GPU code is what ships (normgate routes --accept-cpu-model, "
               "NORMGATE_DISPATCH=accept-cpu-model for calls, or DispatchPolicy::accept_cpu_model in C++, "
               "overrides)";
  } else if (stale) {
    s.state = ApprovalState::stale;
    s.record = stale;
    s.detail = "approved source " + stale->source_sha256.substr(0, 12) + part(*stale) + from(*stale) +
               ", code now " + std::string(hash.substr(0, 12)) + " (the variant's sources changed since the gate)";
  } else {
    s.state = ApprovalState::missing;
    s.detail = other_variant ? "the approval on file for this window" +
                                   (other_variant->same_window(r) ? std::string()
                                                                  : " (as part of T=" + std::to_string(other_variant->t_lo) +
                                                                        ".." + std::to_string(other_variant->t_hi) + ")") +
                                   " is for variant " + other_variant->variant + ", the table routes " +
                                   std::string(vname)
                             : "no approval for this window and variant";
  }
  s.wider = s.record && !same_t(*s.record);
  return s;
}

bool ApprovalStatus::h_new_gated() const {
  if (!parts.empty())
    return std::all_of(parts.begin(), parts.end(), [](const Approval* x) { return x->h_new_gated(); });
  return record == nullptr || record->h_new_gated();
}

// ---- dispatcher ---------------------------------------------------------------

std::string fallback_problem(const std::string& key, const Variant& var) {
  if (std::find(std::begin(kFallbackKeys), std::end(kFallbackKeys), key) == std::end(kFallbackKeys))
    return "unknown fallback key '" + key + "' (known: " + join(kFallbackKeys) + ")";
  const std::string v = "variant " + std::string(var.name);
  const Op op = key == "fwd" ? Op::fwd : Op::bwd;
  switch (serve_gap(var, op, key == "bwd_nondet" ? Mode::nondet : Mode::det)) {
    case ServeGap::op:
      return v + " is a " + std::string(to_string(var.op)) + " variant";
    case ServeGap::control:
      return v + " is a NEGATIVE CONTROL and may never serve calls";
    case ServeGap::nondet:
      return v + " is non-deterministic and cannot serve det calls";
    default:  // none (no shape was given, so never h, w or form)
      break;
  }
  // Every call outside the windows: any H, both weight dtypes, every form (a
  // narrower variant would be refused at run time).
  bool every_call = var.h_min <= kMinH && var.h_max >= kMaxH;
  for (const WDtype d : {WDtype::bf16, WDtype::fp32}) every_call = every_call && var.supports(d);
  for (const Form x : {Form::plain, Form::res, Form::heads24, Form::heads4}) every_call = every_call && var.supports(x);
  if (!every_call)
    return v + " cannot serve every call outside the windows (" + describe(var) + "; a fallback needs H = " +
           std::to_string(kMinH) + ".." + std::to_string(kMaxH) + ", both weight dtypes, every form)";
  return "";
}

std::string to_string(const CallKey& k) {
  return window_text(k.op, k.mode, k.H, k.w, k.form, -1, -1) + " T=" + std::to_string(k.T);
}

Dispatcher::Dispatcher(RouteTable table, Approvals approvals, DispatchPolicy policy)
    : table_(std::move(table)), approvals_(std::move(approvals)), policy_(policy) {
  for (const Route& r : table_.routes)
    if (r.variant && r.variant->control)
      throw RouteTableError(r.where() + ": the dispatcher never routes a negative control; entry: " + r.describe());
  for (const Variant* v : {table_.fallback.fwd, table_.fallback.bwd_det, table_.fallback.bwd_nondet})
    if (v && v->control)
      throw RouteTableError(table_.path + ":" + std::to_string(table_.fallback.line) +
                            ": the dispatcher never runs a negative control; fallback " + std::string(v->name));
}

Dispatcher Dispatcher::from_files(const std::string& table_path, DispatchPolicy policy) {
  RouteTable t = load_route_table(table_path);
  Approvals a = load_approvals(approvals_path_for(table_path));
  Rejections rej = load_rejections(rejections_path_for(table_path));
  std::vector<std::pair<Approval, std::string>> refuted = take_refuted(a, rej);
  Dispatcher d(std::move(t), std::move(a), policy);
  d.refuted_ = std::move(refuted);
  d.rejections_ = std::move(rej);
  return d;
}

const Rejection* Dispatcher::failed_inside(const Route& r) const {
  return failure_inside(rejections_, r, policy_.accept_cpu_model);
}

std::string Dispatcher::failed_inside_text(const Rejection& q) const {
  return ". No gate of this source approves the window: it failed a " + q.backend + " gate at " +
         core::escape_controls(q.window(), false) + " (case " + core::escape_controls(q.worst_case, false) + ", " +
         q.worst_output + " err/tol " + validators::detail::fmt("%g", q.worst_err_tol) + ", remembered in " + core::escape_controls(rejections_.path, false) +
         "); route another variant there (normgate derive), or change its source";
}

ApprovalStatus Dispatcher::approval_of(const Route& r) const {
  ApprovalStatus s = approval_status(r, approvals_, policy_.accept_cpu_model);
  // A refuted record of r's variant whose window meets r's (as a part
  // approval_status would count: meets_for): the whole window or one of the
  // parts that would have covered it.
  if (s.state == ApprovalState::current || !r.variant) return s;
  for (const bool own_mode : {true, false})  // a record of the route's own mode first
    for (const auto& [x, why] : refuted_)
      if (x.variant == r.variant->name && meets_for(x, r) && (!own_mode || x.mode == r.mode)) {
        s.detail += "; the " + x.backend + " approval of " + core::escape_controls(x.window(), false) +
                    " does not count: " + why;
        return s;
      }
  return s;
}

Decision Dispatcher::inspect(const CallKey& k) const {
  Decision d;
  if (k.T < 0) return d;
  d.route = table_.find(k.op, k.mode, k.H, k.w, k.form, k.T);
  if (!d.route) return d;
  d.variant = d.route->variant;
  d.approval = approval_of(*d.route);
  d.overridden = d.approval.state != ApprovalState::current && policy_.allow_unapproved;
  return d;
}

namespace {
// The gate's --windows filter that selects exactly route r's window.
std::string window_filter(const Route& r) {
  std::string f = "op=" + std::string(to_string(r.op));
  if (r.op == Op::bwd) f += ",mode=" + std::string(to_string(r.mode));
  return f + ",H=" + std::to_string(r.H) + ",w=" + std::string(to_string(r.w)) + ",form=" +
         std::string(to_string(r.form)) + ",T=" + std::to_string(r.t_lo) + ".." + std::to_string(r.t_hi);
}
}  // namespace

Decision Dispatcher::pick(const CallKey& k) const {
  Decision d = inspect(k);
  if (!d.route) {
    // What the table does cover for this (op, mode, H, w, form), if anything.
    int64_t lo = -1, hi = -1;
    for (const Route& r : table_.routes)
      if (r.op == k.op && (k.op == Op::fwd || r.mode == k.mode) && r.H == k.H && r.w == k.w && r.form == k.form) {
        lo = lo < 0 ? r.t_lo : std::min(lo, r.t_lo);
        hi = std::max(hi, r.t_hi);
      }
    const std::string covered = lo < 0 ? " (the table has no route for this op, mode, H, w and form)"
                                       : " (its windows for this op, mode, H, w and form cover T = " +
                                             std::to_string(lo) + ".." + std::to_string(hi) + ")";
    const Variant* fb = k.T < 0 ? nullptr : table_.fallback.for_call(k.op, k.mode);
    const std::string fallback = fb ? "; at run time the table's fallback " + std::string(fb->name) +
                                          " serves it with a warning (DispatchCache; strict mode refuses it)"
                                    : "";
    throw std::invalid_argument("no route for " + to_string(k) + " in " + table_.path +
                                (k.T < 0 ? " (T < 0)" : covered) + fallback);
  }
  if (d.approval.state != ApprovalState::current && !policy_.allow_unapproved) {
    // This build's source of the variant failed inside the window (a
    // remembered rejection): no gate of it approves the window (gate
    // --approve refuses), so the advice is another variant, not a gate.
    const Rejection* failed = failed_inside(*d.route);
    const std::string way =
        failed ? failed_inside_text(*failed)
               : ". Gate this window (" + approve_command_for(table_.path, window_filter(*d.route)) +
                     "; add --plan first to see its cases)";
    throw UnapprovedRoute(to_string(k) + ": route " + d.route->where() + " (" + d.route->describe() +
                              ") has no current approval in " + approvals_.path + ": " +
                              std::string(to_string(d.approval.state)) + ": " + d.approval.detail + way +
                              ", or override: `normgate routes "
                              "--allow-unapproved` on the CLI, DispatchPolicy::allow_unapproved in C++",
                          d.approval.state);
  }
  return d;
}

// ---- rejections (rejections.h) ---------------------------------------------

namespace {

constexpr std::string_view kRejectionsFormat = "normgate-rejections/1";
constexpr std::string_view kRejectionKeys[] = {
    "window",       "gated_T", "variant", "source_sha256",   "backend",          "gpu",          "worst_case",
    "worst_err_tol", "worst_output", "date", "normgate_commit", "normgate_version", "record_sha256", "rechecked"};
constexpr std::string_view kRecheckKeys[] = {"backend", "from_source_sha256", "from_record_sha256"};

nlohmann::json to_json(const Rejection& r) {
  nlohmann::json win;
  win["op"] = to_string(r.op);
  if (r.op == Op::bwd) win["mode"] = to_string(r.mode);
  win["H"] = r.H;
  win["w"] = to_string(r.w);
  win["form"] = to_string(r.form);
  win["T"] = {r.t_lo, r.t_hi};
  nlohmann::json j;
  j["window"] = win;
  j["gated_T"] = {r.gated_lo, r.gated_hi};
  j["variant"] = r.variant;
  j["source_sha256"] = r.source_sha256;
  j["backend"] = r.backend;
  j["gpu"] = r.gpu;
  j["worst_case"] = r.worst_case;
  j["worst_err_tol"] = json_number(r.worst_err_tol);
  j["worst_output"] = r.worst_output;
  j["date"] = r.date;
  j["normgate_commit"] = r.normgate_commit;
  j["normgate_version"] = r.normgate_version;
  if (r.rechecked)
    j["rechecked"] = {{"backend", r.rechecked->backend},
                      {"from_source_sha256", r.rechecked->from_source_sha256},
                      {"from_record_sha256", r.rechecked->from_record_sha256}};
  return j;
}

// Read record j into r; throws std::invalid_argument naming the first
// malformed field (the fields' values are checked by validate_rejection).
void from_json(const nlohmann::json& j, Rejection& r) {
  if (!j.is_object()) throw std::invalid_argument("a record must be a JSON object");
  for (const auto& [k, v] : j.items()) {
    (void)v;
    if (std::find(std::begin(kRejectionKeys), std::end(kRejectionKeys), k) == std::end(kRejectionKeys))
      throw std::invalid_argument("unknown field '" + k + "'");
  }
  auto str = [](const nlohmann::json& o, const char* k, const char* where = "") {
    if (!o.contains(k) || !o.at(k).is_string())
      throw std::invalid_argument(std::string("field '") + where + k + "' must be a string");
    return o.at(k).get<std::string>();
  };
  auto integer = [](const nlohmann::json& v, const std::string& name) {
    if (!v.is_number_integer()) throw std::invalid_argument("field '" + name + "' must be an integer");
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw std::invalid_argument("field '" + name + "' out of range");
    return v.get<int64_t>();
  };
  auto pair = [&](const nlohmann::json& o, const char* k, const char* name, int64_t& lo, int64_t& hi) {
    if (!o.contains(k) || !o.at(k).is_array() || o.at(k).size() != 2)
      throw std::invalid_argument(std::string("field '") + name + "' must be [lo, hi]");
    lo = integer(o.at(k)[0], std::string(name) + "[0]");
    hi = integer(o.at(k)[1], std::string(name) + "[1]");
  };
  if (!j.contains("window") || !j.at("window").is_object())
    throw std::invalid_argument("field 'window' must be an object");
  const auto& win = j.at("window");
  for (const auto& [k, v] : win.items()) {
    (void)v;
    if (std::find(std::begin(kWindowKeys), std::end(kWindowKeys), k) == std::end(kWindowKeys))
      throw std::invalid_argument("unknown field 'window." + k + "'");
  }
  r.op = parse_op(str(win, "op", "window."));
  if (r.op == Op::bwd) r.mode = parse_mode(str(win, "mode", "window."));
  else if (win.contains("mode")) throw std::invalid_argument("a fwd window has no 'window.mode'");
  if (!win.contains("H")) throw std::invalid_argument("missing field 'window.H'");
  r.H = integer(win.at("H"), "window.H");
  r.w = parse_wdtype(str(win, "w", "window."));
  r.form = parse_form(str(win, "form", "window."));
  pair(win, "T", "window.T", r.t_lo, r.t_hi);
  pair(j, "gated_T", "gated_T", r.gated_lo, r.gated_hi);
  r.variant = str(j, "variant");
  r.source_sha256 = str(j, "source_sha256");
  r.backend = str(j, "backend");
  r.gpu = str(j, "gpu");
  r.worst_case = str(j, "worst_case");
  if (!j.contains("worst_err_tol")) throw std::invalid_argument("missing field 'worst_err_tol'");
  r.worst_err_tol = from_json_number(j.at("worst_err_tol"), "worst_err_tol");
  r.worst_output = str(j, "worst_output");
  r.date = str(j, "date");
  r.normgate_commit = str(j, "normgate_commit");
  r.normgate_version = str(j, "normgate_version");
  r.record_sha256 = str(j, "record_sha256");
  if (j.contains("rechecked")) {
    const auto& c = j.at("rechecked");
    if (!c.is_object()) throw std::invalid_argument("field 'rechecked' must be an object");
    for (const auto& [k, v] : c.items()) {
      (void)v;
      if (std::find(std::begin(kRecheckKeys), std::end(kRecheckKeys), k) == std::end(kRecheckKeys))
        throw std::invalid_argument("unknown field 'rechecked." + k + "'");
    }
    r.rechecked = Rejection::Recheck{str(c, "backend", "rechecked."), str(c, "from_source_sha256", "rechecked."),
                                     str(c, "from_record_sha256", "rechecked.")};
  }
}

}  // namespace

std::string Rejection::group() const { return window_text(op, mode, H, w, form, -1, -1); }
std::string Rejection::window() const { return window_text(op, mode, H, w, form, t_lo, t_hi); }
bool Rejection::same_claim(const Rejection& o) const {
  return window() == o.window() && variant == o.variant && source_sha256 == o.source_sha256 && backend == o.backend;
}

namespace {
// Rejection::refutes for a window given field by field (an approval record's
// or a route's).
bool refutes_window(const Rejection& q, Op op, Mode mode, int64_t H, WDtype w, Form form, int64_t lo, int64_t hi,
                    std::string_view variant, std::string_view source, std::string_view backend) {
  if (q.variant != variant || q.source_sha256 != source || q.backend != backend) return false;
  if (q.op != op || q.H != H || q.w != w || q.form != form) return false;
  const Variant* v = find_variant(variant);
  const bool det_bwd = op == Op::bwd && v != nullptr && v->mode == Mode::det;
  if (q.mode != mode && !det_bwd) return false;
  return q.t_lo <= hi && lo <= q.t_hi;
}
}  // namespace

bool Rejection::refutes(const Approval& x) const {
  return refutes_window(*this, x.op, x.mode, x.H, x.w, x.form, x.t_lo, x.t_hi, x.variant, x.source_sha256, x.backend);
}

bool Rejection::refutes(const Route& r, std::string_view backend_) const {
  return r.variant != nullptr && refutes_window(*this, r.op, r.mode, r.H, r.w, r.form, r.t_lo, r.t_hi, r.variant->name,
                                                r.variant->source_sha256, backend_);
}

std::vector<RefutedRecord> refuted_records(const Approvals& a, const Rejections& rej) {
  std::vector<RefutedRecord> out;
  for (size_t i = 0; i < a.records.size(); ++i) {
    const Approval& x = a.records[i];
    if (!x.invalid.empty()) continue;  // already counts for nothing
    for (size_t k = 0; k < rej.records.size(); ++k) {
      const Rejection& q = rej.records[k];
      if (!q.refutes(x)) continue;
      out.push_back({i, k,
                     "the gate failed this variant's source " + x.source_sha256.substr(0, 12) +
                         (find_variant(x.variant) && find_variant(x.variant)->source_sha256 == x.source_sha256
                              ? " (this build's)"
                              : " (not this build's)") +
                         " there (" + core::escape_controls(q.window(), false) +
                         " remembered in " + core::escape_controls(rej.path, false) + ": case " +
                         core::escape_controls(q.worst_case, false) + ", " + q.worst_output + " err/tol " +
                         validators::detail::fmt("%g", q.worst_err_tol) + ", " +
                         core::escape_controls(q.date, false) + ")"});
      break;
    }
  }
  return out;
}

std::vector<std::pair<Approval, std::string>> take_refuted(Approvals& a, const Rejections& rej) {
  const std::vector<RefutedRecord> gone = refuted_records(a, rej);
  std::vector<std::pair<Approval, std::string>> out;
  if (gone.empty()) return out;
  std::vector<Approval> kept;
  size_t g = 0;
  for (size_t i = 0; i < a.records.size(); ++i) {
    if (g < gone.size() && gone[g].index == i)
      out.emplace_back(std::move(a.records[i]), gone[g++].reason);
    else
      kept.push_back(std::move(a.records[i]));
  }
  a.records = std::move(kept);
  return out;
}

const Rejection* failure_inside(const Rejections& rej, const Route& r, bool cpu_model_too) {
  for (const Rejection& q : rej.records)
    if ((q.backend == kGpuBackend || cpu_model_too) && q.refutes(r, q.backend)) return &q;
  return nullptr;
}

std::string rejections_path_for(const std::string& table_path) {
  return table_sibling_path(table_path, ".rejections.json");
}

std::string validate_rejection(const Rejection& r) {
  try {
    const std::string win = "window " + r.window();
    if (r.H < kMinH || r.H > kMaxH)
      return win + ": H " + std::to_string(r.H) + " outside " + std::to_string(kMinH) + ".." + std::to_string(kMaxH);
    if ((r.form == Form::heads24 || r.form == Form::heads4) && r.H != 256)
      return win + ": form " + std::string(to_string(r.form)) + " needs H = 256";
    if (r.t_lo < 1 || r.t_hi < r.t_lo || r.t_hi > kMaxT)
      return win + ": T needs 1 <= lo <= hi <= " + std::to_string(kMaxT);
    if (r.gated_lo > r.t_lo || r.gated_hi < r.t_hi)
      return "gated_T [" + std::to_string(r.gated_lo) + ", " + std::to_string(r.gated_hi) +
             "] does not contain the excluded " + win;
    if (!variant_name_ok(r.variant))
      return "variant '" + r.variant + "' is not a variant name ([A-Za-z0-9_.+-]{1,64})";
    if (!lower_hex64(r.source_sha256)) return "source_sha256 '" + r.source_sha256 + "' is not 64 lower-case hex digits";
    if (r.backend != kGpuBackend && r.backend != kCpuModelBackend)
      return "backend '" + r.backend + "' (expected \"gpu\" or \"cpu-model\")";
    if (r.gpu.empty()) return "gpu is empty";
    if (r.backend == kCpuModelBackend && r.gpu != kCpuModelBackend)
      return "gpu '" + r.gpu + "' of a cpu-model record (expected \"cpu-model\")";
    if (r.backend == kGpuBackend && r.gpu == kCpuModelBackend)
      return "gpu 'cpu-model' of a gpu record (expected the device's name)";  // as validate_approval
    seeds::CaseId c;
    try {
      c = seeds::parse_case(r.worst_case);
    } catch (const std::invalid_argument& e) {
      return "worst_case: " + std::string(e.what());
    }
    if (c.H != r.H || c.w != r.w || c.form != r.form || c.T < r.gated_lo || c.T > r.gated_hi)
      return "worst_case '" + r.worst_case + "' is not inside the gated window T=" + std::to_string(r.gated_lo) +
             ".." + std::to_string(r.gated_hi) + " of " + r.group();
    if (std::isnan(r.worst_err_tol) || !(r.worst_err_tol > 1))
      return "worst_err_tol " + num_text(r.worst_err_tol) + " is not > 1 (a rejection records a case over budget)";
    const bool out_ok = r.worst_output == "y" || r.worst_output == "rstd" ||
                        (r.op == Op::bwd && (r.worst_output == "dx" || r.worst_output == "dw"));
    if (!out_ok)
      return "worst_output '" + r.worst_output + "' is not an output a " + std::string(to_string(r.op)) +
             " window gates";
    if (!iso8601_utc(r.date)) return "date '" + r.date + "' is not ISO 8601 UTC (YYYY-MM-DDTHH:MM:SSZ)";
    if (r.normgate_commit.empty()) return "normgate_commit is empty";
    if (r.normgate_version.empty()) return "normgate_version is empty";
    if (r.rechecked) {
      const auto& c = *r.rechecked;
      if (c.backend != kGpuBackend && c.backend != kCpuModelBackend)
        return "rechecked.backend '" + c.backend + "' (expected \"gpu\" or \"cpu-model\")";
      if (!lower_hex64(c.from_source_sha256))
        return "rechecked.from_source_sha256 '" + c.from_source_sha256 + "' is not 64 lower-case hex digits";
      if (!lower_hex64(c.from_record_sha256))
        return "rechecked.from_record_sha256 '" + c.from_record_sha256 + "' is not 64 lower-case hex digits";
      if (c.from_source_sha256 == r.source_sha256)
        return "rechecked.from_source_sha256 is the record's own source (a recheck re-keys to another)";
    }
    return {};
  } catch (const std::exception& e) {  // never throws
    return e.what();
  }
}

std::string rejection_record_sha256(const Rejection& r) { return record_digest(to_json(r)); }

Rejections parse_rejections(std::string_view text, const std::string& path) {
  Rejections out;
  out.path = path;
  const nlohmann::json j = parse_sealed_file(text, path, "rejections", "a rejections file", kRejectionsFormat);
  size_t i = 0;
  for (const auto& rec : j["rejections"]) {
    Rejection x;
    x.index = i;
    std::string why;
    try {
      from_json(rec, x);
      why = control_field(rec);
      if (why.empty()) why = validate_rejection(x);
      if (why.empty()) {
        why = seal_problem(rec, x.record_sha256);
      }
    } catch (const std::exception& e) {
      why = e.what();
    }
    // A copy of an earlier record: normgate writes each rejection once.
    for (size_t k = 0; why.empty() && k < out.records.size(); ++k)
      if (out.records[k].record_sha256 == x.record_sha256)
        why = "a copy of record " + std::to_string(k) + " (the same record_sha256; normgate writes each record once)";
    if (!why.empty())
      // (a record whose window could not be read keeps H = 0: not named as
      // a window it is not)
      throw RouteTableError(path + ": record " + std::to_string(i) +
                            (x.H > 0 ? " (" + x.window() + " -> " + x.variant + ")" : std::string(" (window unreadable)")) +
                            ": " + why + "; a remembered rejection re-routes windows, so derive stops (remove the "
                            "record, or the file, to gate again)");
    out.records.push_back(std::move(x));
    ++i;
  }
  return out;
}

Rejections load_rejections(const std::string& path) {
  // As load_approvals: refused naming the reason; a missing file is none.
  if (const std::string why = core::regular_file_problem(path); !why.empty() && why != "no such file")
    throw RouteTableError(path + ": cannot read rejections: " + why);
  // A missing file is none, but a link to a missing file is a file meant to
  // be there: reading it as "no failures" would drop every refutation.
  if (std::error_code ec; std::filesystem::is_symlink(std::filesystem::symlink_status(path, ec)) &&
                          !std::filesystem::exists(path, ec))
    throw RouteTableError(path + ": cannot read rejections: a symbolic link to a missing file");
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    if (!std::filesystem::exists(path)) {
      Rejections r;
      r.path = path;
      return r;
    }
    throw RouteTableError(path + ": cannot read rejections: " + std::strerror(errno));
  }
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) throw RouteTableError(path + ": cannot read rejections: read error");
  return parse_rejections(ss.str(), path);
}

std::string rejections_to_json_text(const Rejections& r) {
  nlohmann::json j;
  j["format"] = kRejectionsFormat;
  j["rejections"] = nlohmann::json::array();
  size_t i = 0;
  for (const auto& x : r.records) {
    if (const std::string why = validate_rejection(x); !why.empty())
      throw std::invalid_argument(r.path + ": refusing to write record " + std::to_string(i) + " (" + x.window() +
                                  " -> " + x.variant + "): " + why);
    nlohmann::json o = to_json(x);
    o["record_sha256"] = record_digest(o);
    j["rejections"].push_back(std::move(o));
    ++i;
  }
  return j.dump(2) + "\n";
}

size_t record_rejections(const std::string& path, const std::string& approvals_path,
                         const std::vector<Rejection>& add) {
  for (const auto& x : add)
    if (const std::string why = validate_rejection(x); !why.empty())
      throw std::invalid_argument(path + ": refusing to record " + x.window() + " -> " + x.variant + ": " + why);
  const ApprovalsLock lock(approvals_path);
  Rejections cur = load_rejections(path);  // re-read under the lock: other writers' records are kept
  size_t added = 0;
  for (const auto& x : add) {
    if (std::any_of(cur.records.begin(), cur.records.end(), [&](const Rejection& y) { return y.same_claim(x); }))
      continue;
    cur.records.push_back(x);
    ++added;
  }
  if (added) write_sealed_file(path, rejections_to_json_text(cur));
  return added;
}

}  // namespace normgate::kernels
