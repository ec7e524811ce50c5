// gate/src/report_junit.cpp: the gate's JUnit XML report (format_gate_junit),
// for CI systems that show test results.
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>

#include "gate_internal.h"
#include "normgate/core/printable.h"
#include "normgate/core/report_util.h"
#include "normgate/kernels/registry.h"

namespace normgate::validators {

using namespace gate_detail;

namespace {

// Length of the well-formed UTF-8 sequence at s[i] (RFC 3629: no overlong
// forms, no surrogates, nothing above U+10FFFF), 0 when there is none.
size_t utf8_length(const std::string& s, size_t i) {
  const auto b = [&](size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0u; };
  const unsigned c = b(0);
  const auto cont = [&](size_t k) { return (b(k) & 0xC0u) == 0x80u; };
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    const unsigned lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    return b(1) >= lo && b(1) <= hi && cont(2) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    const unsigned lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    return b(1) >= lo && b(1) <= hi && cont(2) && cont(3) ? 4 : 0;
  }
  return 0;
}

// Text for an XML attribute value or element content: the five predefined
// entities, and every control character XML 1.0 cannot carry (all below
// 0x20 but tab, newline, carriage return), and DEL, as the text \xNN, as
// normgate's other reports escape them. Newlines and tabs in
// attributes are written as character references so a parser keeps them.
// A byte that starts no well-formed UTF-8 sequence (a path in another
// encoding), and the non-characters U+FFFE and U+FFFF, are U+FFFD, so the
// document stays well-formed UTF-8 XML; the C1 controls, the line and
// paragraph separators and the bidirectional controls are \uXXXX
// (core/printable.h escape_controls).
std::string esc(const std::string& s, bool attribute) {
  std::string o;
  o.reserve(s.size() + 16);
  for (size_t i = 0; i < s.size(); ++i) {
    const char ch = s[i];
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x80) {
      const size_t n = utf8_length(s, i);
      // U+FFFE and U+FFFF (EF BF BE, EF BF BF) are not XML 1.0 characters
      // either (the Char production, section 2.2): U+FFFD too.
      const bool non_char = n == 3 && c == 0xEF && static_cast<unsigned char>(s[i + 1]) == 0xBF &&
                            static_cast<unsigned char>(s[i + 2]) >= 0xBE;
      if (n == 0 || non_char) {
        o += "\xEF\xBF\xBD";
        i += non_char ? 2 : 0;
      } else {
        // The C1 controls, U+2028/U+2029 and the bidirectional controls as
        // \uXXXX, as every other report writes them (escape_controls): a
        // CI page would otherwise show a plugin's message reordered.
        o += core::escape_controls(std::string_view(s).substr(i, n));
        i += n - 1;
      }
      continue;
    }
    switch (ch) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += attribute ? "&quot;" : "\""; break;
      case '\'': o += attribute ? "&apos;" : "'"; break;
      case '\n': o += attribute ? "&#10;" : "\n"; break;
      case '\t': o += attribute ? "&#9;" : "\t"; break;
      case '\r': o += "&#13;"; break;
      default: o += core::escape_controls(std::string_view(&ch, 1));  // \xNN for a control, else ch
    }
  }
  return o;
}

std::string attr(const std::string& s) { return esc(s, true); }
std::string text(const std::string& s) { return esc(s, false); }

std::string ratio(double v) { return std::isfinite(v) ? fmt("%.4g", v) : std::isnan(v) ? "nan" : "inf"; }

std::string seconds(double s) { return fmt("%.3f", std::isfinite(s) && s > 0 ? s : 0.0); }

// "normgate.bwd.det", "normgate.fwd": the window's op and mode.
std::string classname(const WindowResult& w) {
  std::string c = "normgate." + std::string(kernels::to_string(w.route.op));
  if (w.route.op == kernels::Op::bwd) {
    c += '.';  // appended piecewise: "." + std::string(...) trips GCC 12's -Wrestrict (a false positive)
    c += kernels::to_string(w.route.mode);
  }
  return c;
}

// What a CI log shows for a window: every gated output, the phases, families.
std::string details(const WindowResult& w) {
  std::ostringstream o;
  o << w.route.where() << ": " << w.route.describe() << (w.control ? " (NEGATIVE CONTROL)" : "") << "\n";
  o << "verdict " << to_string(w.verdict) << "; " << w.cases << " cases, " << w.errors << " errors; forward " << w.fwd
    << "\n";
  for (int k = 0; k < w.gated_outputs(); ++k) {
    const auto& a = w.out[k];
    o << "  " << kOut[k] << ": max err/tol " << ratio(a.max_ratio) << ", cases over budget " << a.cases_over;
    if (a.cases_inconclusive) o << " (" << a.cases_inconclusive << " only uncertified)";
    if (!a.worst_case.empty()) o << ", worst case " << a.worst_case;
    o << "\n";
  }
  if (w.gates_h_new()) {
    o << "  h_new (bitwise): cases that differ " << w.h_new.cases_over;
    if (w.h_new_unchecked) o << ", cases not checked (an older journal) " << w.h_new_unchecked;
    if (w.h_new.cases_over && !w.h_new.worst_case.empty()) o << ", e.g. " << w.h_new.worst_case;
    o << "\n";
  }
  for (const auto& f : w.families) o << "  family " << f.family << ": " << f.failed << " of " << f.cases << " cases fail\n";
  for (const auto& e : w.error_samples) o << "  error: " << e << "\n";
  if (!w.worst_case.empty())
    o << "repro: normgate repro '" << w.worst_case << "' --variant "
      << (w.route.op == kernels::Op::bwd ? w.route.variant->name : w.impl) << "\n";
  return o.str();
}

}  // namespace

std::string format_gate_junit(const GateResult& r, double wall_seconds) {
  int64_t failures = 0, errors = 0, total_cases = 0;
  for (const auto& w : r.windows) {
    total_cases += w.cases;
    // A finding about the implementation (nondeterministic, contract
    // broken) is a failure, as the Markdown and JSON verdicts say.
    const bool finding = w.nondeterministic + w.contract_broken > 0;
    if (w.incomplete || (!finding && (w.errors > 0 || w.verdict == Verdict::inconclusive))) ++errors;
    else if (!w.pass) ++failures;
  }
  const size_t tests = r.windows.size() + r.skipped.size();
  std::ostringstream head;
  head << "tests=\"" << tests << "\" failures=\"" << failures << "\" errors=\"" << errors << "\" skipped=\""
       << r.skipped.size() << "\" time=\"" << seconds(wall_seconds) << "\"";
  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  o << "<testsuites name=\"normgate gate\" " << head.str() << ">\n";
  o << "  <testsuite name=\"" << attr(r.table_path) << "\" " << head.str() << " timestamp=\"" << attr(r.date)
    << "\">\n";
  o << "    <properties>\n";
  auto prop = [&o](const char* k, const std::string& v) {
    o << "      <property name=\"" << k << "\" value=\"" << attr(v) << "\"/>\n";
  };
  prop("table_sha256", r.table_sha256);
  prop("backend", r.backend);
  prop("backend_detail", r.backend_detail);
  prop("device", r.device.present ? r.device.name : "");
  prop("seeds", r.seeds);
  prop("oracle", r.oracle);
  prop("windows_filter", r.windows_filter);
  prop("base", r.base_path);
  prop("normgate_version", r.normgate_version);
  prop("normgate_commit", r.normgate_commit);
  o << "    </properties>\n";
  for (const auto& w : r.windows) {
    // Windows share cases, so no window has a time of its own: the run's
    // wall time is shared out by the windows' case counts.
    const double t = total_cases > 0 ? wall_seconds * static_cast<double>(w.cases) / static_cast<double>(total_cases) : 0;
    o << "    <testcase classname=\"" << classname(w) << "\" name=\"" << attr(w.route.describe()) << "\" file=\""
      << attr(w.route.where()) << "\" time=\"" << seconds(t) << "\"";
    if (w.pass) {
      o << ">\n";
    } else if (w.incomplete) {
      o << ">\n      <error type=\"incomplete\" message=\""
        << attr("INCOMPLETE: " +
                (r.shard.empty() ? detail::counted(w.missing, "case") + " without a result (shards not run, not merged, "
                                       "or cut short)"
                                 : "shard " + r.shard + " (grid cases of one shard, no refinement)"))
        << "\">" << text(details(w)) << "</error>\n";
    } else if (w.nondeterministic + w.contract_broken > 0) {
      const std::string what =
          (w.nondeterministic > 0 ? std::to_string(w.nondeterministic) + " of " + std::to_string(w.cases) +
                                        " cases: declared deterministic, two runs gave different bits"
                                  : std::string()) +
          (w.nondeterministic > 0 && w.contract_broken > 0 ? "; " : "") +
          (w.contract_broken > 0 ? std::to_string(w.contract_broken) + " of " + std::to_string(w.cases) +
                                       " cases: broke the implementation interface"
                                 : std::string());
      o << ">\n      <failure type=\"finding\" message=\""
        << attr(what + (w.error_samples.empty() ? "" : ": " + w.error_samples.front())) << "\">" << text(details(w))
        << "</failure>\n";
    } else if (w.errors > 0) {
      o << ">\n      <error type=\"case error\" message=\""
        << attr(std::to_string(w.errors) + " of " + std::to_string(w.cases) + " cases threw" +
                (w.error_samples.empty() ? "" : ": " + w.error_samples.front()))
        << "\">" << text(details(w)) << "</error>\n";
    } else if (w.verdict == Verdict::inconclusive) {
      o << ">\n      <error type=\"inconclusive\" message=\""
        << attr("INCONCLUSIVE: no element over budget, but the oracle's bound could not decide some comparisons of " +
                w.worst_output + " (worst case " + w.worst_case + "); re-run it with --oracle mpfr")
        << "\">" << text(details(w)) << "</error>\n";
    } else {
      o << ">\n      <failure type=\"over budget\" message=\""
        << attr(w.worst_output + " err/tol " + ratio(w.worst) + " > 1 in case " + w.worst_case +
                (w.control ? " (negative control, built to fail)" : ""))
        << "\">" << text(details(w)) << "</failure>\n";
    }
    o << "      <system-out>" << text(details(w)) << "</system-out>\n";
    o << "    </testcase>\n";
  }
  for (const auto& s : r.skipped)
    o << "    <testcase classname=\"normgate.unchanged\" name=\"" << attr(s) << "\" time=\"0.000\">\n"
      << "      <skipped message=\"unchanged against the base table " << attr(r.base_path) << "\"/>\n"
      << "    </testcase>\n";
  o << "  </testsuite>\n</testsuites>\n";
  return o.str();
}

}  // namespace normgate::validators
