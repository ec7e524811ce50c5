// audit/src/repro.cpp: one case, one implementation, explained element by element.
#include "normgate/audit/repro.h"
#include "normgate/core/printable.h"
#include "normgate/core/shell_quote.h"

#include <omp.h>

#include <algorithm>
#include <ctime>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "normgate/core/bf16.h"
#include "normgate/kernels/device.h"
#include "normgate/kernels/registry.h"
#include "normgate/seeds/case_id.h"
#include "normgate/validators/check.h"
#include "normgate/audit/export.h"
#include "normgate/core/report_util.h"

namespace normgate::validators {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Order of "worse": larger ratio, then smaller index (as RatioStats' worst).
bool worse(const Element& a, const Element& b) {
  if (a.ratio != b.ratio) return a.ratio > b.ratio;
  return a.index < b.index;
}

// Keep the k first of a stream in the order `before` (a heap whose top is
// the last one kept); sorted() gives them in that order.
template <class T, class Before>
struct KeepFirst {
  size_t k;
  Before before;
  std::vector<T> h;
  void add(const T& e) {
    if (h.size() < k) {
      h.push_back(e);
      std::push_heap(h.begin(), h.end(), before);
    } else if (k > 0 && before(e, h.front())) {
      std::pop_heap(h.begin(), h.end(), before);
      h.back() = e;
      std::push_heap(h.begin(), h.end(), before);
    }
  }
  std::vector<T> sorted() && {
    std::sort(h.begin(), h.end(), before);
    return std::move(h);
  }
};
using TopK = KeepFirst<Element, bool (*)(const Element&, const Element&)>;

Element make(const Budget& b, int64_t index, double got, double ref, double bound, double ideal) {
  Element e;
  e.index = index;
  e.got = got;
  e.ref = ref;
  e.bound = bound;
  e.tol = tolerance(b, ref);
  e.ratio = ratio(b, got, ref);
  e.forced = ratio(b, ideal, ref);
  if (std::isfinite(got) && std::isfinite(ref)) e.err = std::fabs(got - ref);
  else e.err = nonfinite_failure(got, ref) ? kInf : 0.0;
  return e;
}

void need(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("worst_elements: " + what);
}

}  // namespace

std::vector<Element> worst_elements(const oracle::Problem& p, const Outputs& got, const oracle::Reference& ref,
                                    const oracle::Reference& ideal, Output out, int k, int threads) {
  need(k >= 1, "k = " + std::to_string(k) + " must be >= 1");
  need(out != Output::h_new, "h_new is compared bitwise; it has no err/tol elements");
  const int64_t rows = p.x.rows(), cols = p.x.cols;
  const size_t rc = static_cast<size_t>(rows * cols);
  need(got.y.size() == rc && got.dx.size() == rc && got.rstd.size() == static_cast<size_t>(rows) &&
           got.dw.size() == static_cast<size_t>(cols),
       "outputs do not match the problem's [" + std::to_string(rows) + ", " + std::to_string(cols) + "]");
  const Budget b = budget(out);
  const size_t kk = static_cast<size_t>(k);
  TopK all{kk, worse, {}};
  if (out == Output::dw) {
    for (int64_t j = 0; j < cols; ++j) {
      const oracle::VB v = ref.dw(j);
      all.add(make(b, j, static_cast<double>(got.dw[j]), v.v, v.bound,
                   static_cast<double>(static_cast<float>(ideal.dw(j).v))));
    }
  } else if (out == Output::rstd) {
    for (int64_t r = 0; r < rows; ++r) {
      const oracle::VB v = ref.rstd(r);
      all.add(make(b, r, static_cast<double>(got.rstd[r]), v.v, v.bound, static_cast<double>(ref.rstd_f32(r))));
    }
  } else {
    const int nt = threads > 0 ? threads : std::max(1, omp_get_max_threads());
    std::vector<TopK> part(static_cast<size_t>(nt), TopK{kk, worse, {}});
    const bool is_y = out == Output::y;
    const std::vector<uint16_t>& g = is_y ? got.y : got.dx;
#pragma omp parallel num_threads(nt)
    {
      TopK& mine = part[static_cast<size_t>(omp_get_thread_num())];
      std::vector<oracle::VB> rb(static_cast<size_t>(cols)), ib(static_cast<size_t>(cols));
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) {
        if (is_y) {
          ref.y_row(r, rb.data());
        } else {
          ref.dx_row(r, rb.data());
          ideal.dx_row(r, ib.data());
        }
        for (int64_t j = 0; j < cols; ++j) {
          const double id = static_cast<double>(round_to_bf16(is_y ? rb[j].v : ib[j].v));
          mine.add(make(b, r * cols + j, static_cast<double>(bf16_to_float(g[r * cols + j])), rb[j].v, rb[j].bound, id));
        }
      }
    }
    for (const TopK& t : part)
      for (const Element& e : t.h) all.add(e);
  }
  return std::move(all).sorted();
}

DwColumn dw_column(const oracle::Problem& p, const oracle::Reference& ref, int64_t j, int n) {
  const int64_t rows = p.x.rows(), cols = p.x.cols;
  if (j < 0 || j >= cols)
    throw std::invalid_argument("dw_column: column " + std::to_string(j) + " outside [0, " + std::to_string(cols) + ")");
  if (n < 0) throw std::invalid_argument("dw_column: n = " + std::to_string(n) + " must be >= 0");
  DwColumn c;
  c.col = j;
  c.sum = ref.dw(j).v;
  c.sum_abs = ref.dw_abs(j);
  c.escalated = ref.dw_escalated(j);
  const double den = std::fabs(c.sum);
  c.condition = den == 0.0 ? (c.sum_abs == 0.0 ? 1.0 : kInf) : c.sum_abs / den;
  if (std::isnan(c.condition)) c.condition = kInf;
  auto bigger = [](const DwColumn::Row& a, const DwColumn::Row& b) {
    const double fa = std::fabs(a.term), fb = std::fabs(b.term);
    if (fa != fb) return fa > fb;
    return a.row < b.row;
  };
  KeepFirst<DwColumn::Row, decltype(bigger)> top{static_cast<size_t>(n), bigger, {}};
  for (int64_t r = 0; r < rows && n > 0; ++r) {
    const double t = static_cast<double>(bf16_to_float(p.dy.row(r)[j])) *
                     static_cast<double>(bf16_to_float(p.x.row(r)[j])) * ref.rstd(r).v;
    top.add({r, t});
  }
  c.top_rows = std::move(top).sorted();
  return c;
}

namespace {

// Bitwise comparison of one output (T: uint16_t BF16 bits or float).
template <class T>
RecordedDiff diff_output(const char* name, const std::vector<T>& got, const std::vector<T>& rec) {
  if (got.size() != rec.size())
    throw std::runtime_error(std::string("repro: the recorded ") + name + " has " + std::to_string(rec.size()) +
                             " elements, this run " + std::to_string(got.size()));
  RecordedDiff d{name, static_cast<int64_t>(got.size()), 0, 0.0};
  auto value = [](T v) {
    if constexpr (std::is_same_v<T, uint16_t>) return static_cast<double>(bf16_to_float(v));
    else return static_cast<double>(v);
  };
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &rec[i], sizeof(T)) == 0) continue;
    ++d.differ;
    const double a = value(got[i]), b = value(rec[i]);
    const double e = std::isfinite(a) && std::isfinite(b) ? std::fabs(a - b) : kInf;
    d.max_abs = std::max(d.max_abs, e);
  }
  return d;
}

}  // namespace

ReproReport repro(const CheckRequest& req, const ReproOptions& opt) {
  const int k = opt.k;
  if (req.impls.size() != 1)
    throw std::invalid_argument("repro: name exactly one implementation (got " + std::to_string(req.impls.size()) + ")");
  if (k < 1) throw std::invalid_argument("repro: k = " + std::to_string(k) + " must be >= 1");
  ReproReport r;
  PreparedCheck pc = prepare_check(req, opt.inputs);
  seeds::HostInputs inputs_copy;
  if (opt.keep_case) inputs_copy = pc.inputs;
  r.check = finish_check(std::move(pc), [&](const CheckInternals& in) {
    const Outputs& got = in.outs.front();
    if (opt.recorded != nullptr) {
      // (the file's strings escaped: the note is printed as part of one line)
      r.recorded_note =
          "recorded by " + core::escape_controls(opt.recorded_impl) + " on " + core::escape_controls(opt.recorded_backend);
      if (opt.recorded_impl == req.impls.front()) {
        const Outputs& rec = *opt.recorded;
        r.vs_recorded = {diff_output("y", got.y, rec.y), diff_output("rstd", got.rstd, rec.rstd),
                         diff_output("dx", got.dx, rec.dx), diff_output("dw", got.dw, rec.dw)};
        if (!rec.h_new.empty() || !got.h_new.empty()) r.vs_recorded.push_back(diff_output("h_new", got.h_new, rec.h_new));
        // dw of a Mode::nondet variant depends on the order of its atomics.
        const kernels::Variant* v = kernels::find_variant(req.impls.front());
        r.vs_recorded[3].may_differ = v != nullptr && v->mode == kernels::Mode::nondet;
      }
    }
    for (Output o : {Output::y, Output::rstd, Output::dx, Output::dw})
      r.worst.push_back(worst_elements(in.problem, got, in.ref, in.ideal, o, k, req.threads));
    const auto& dw = r.worst.back();
    for (size_t i = 0; i < dw.size() && i < 3; ++i) r.dw_columns.push_back(dw_column(in.problem, in.ref, dw[i].index, 5));
    if (opt.keep_case) {
      SavedCase sc;
      sc.inputs = std::move(inputs_copy);
      sc.inputs_sha256 = seeds::digest(sc.inputs).all;
      sc.outputs = got;
      const int64_t T = in.problem.x.rows(), H = in.problem.x.cols;
      for (int64_t row = 0; row < T; ++row) {
        sc.ref_rstd.push_back(in.ref.rstd(row).v);
        sc.ref_rstd_bound.push_back(in.ref.rstd(row).bound);
      }
      for (int64_t j = 0; j < H; ++j) {
        sc.ref_dw.push_back(in.ref.dw(j).v);
        sc.ref_dw_bound.push_back(in.ref.dw(j).bound);
      }
      sc.maps = error_maps(in.problem, got, in.ref, opt.tile, false, req.threads);
      r.saved = std::move(sc);
    }
  });
  const Backend b = resolve_backend(req.backend);
  const std::string tail = " --variant " + req.impls.front() + " --backend " + (b == Backend::gpu ? "gpu" : "cpu") +
                           " --oracle " + std::string(oracle::to_string(req.oracle)) + " --k " + std::to_string(k);
  r.command = opt.inputs != nullptr && !opt.replay_file.empty()
                  ? "normgate repro --file " + core::shell_quote(opt.replay_file) + tail
                  : "normgate repro " + core::shell_quote(seeds::to_string(req.id)) + tail;
  if (r.saved) r.saved->prov = provenance_of(r.check, opt.normgate_version, opt.normgate_commit);
  return r;
}

std::string format_repro(const ReproReport& r) {
  using detail::fmt;
  std::ostringstream o;
  o << format_report(r.check);
  if (!r.recorded_note.empty()) {
    o << "recorded outputs (" << r.recorded_note << "): ";
    if (r.vs_recorded.empty()) {
      o << "not compared (this run is " << r.check.request.impls.front() << ")\n";
    } else {
      std::string same, diff, expected;
      for (const RecordedDiff& d : r.vs_recorded) {
        const std::string what = d.output + " " + std::to_string(d.differ) + " of " + std::to_string(d.elements) +
                                 " elements differ (max |diff| " + fmt("%.4g", d.max_abs) + ")";
        if (d.differ == 0) same += (same.empty() ? "" : ", ") + d.output;
        else if (d.may_differ) expected += (expected.empty() ? "" : "; ") + what;
        else diff += (diff.empty() ? "" : "; ") + what;
      }
      if (!diff.empty()) o << "DIFFER: " << diff << (same.empty() ? "" : "; identical: " + same);
      else o << "identical bit for bit (" << same << ")";
      if (!expected.empty()) o << "; " << expected << ", as a non-deterministic variant's may";
      o << "\n";
    }
  }
  const int64_t cols = r.check.request.id.H;
  const char* names[] = {"y", "rstd", "dx", "dw"};
  for (size_t t = 0; t < r.worst.size(); ++t) {
    o << "\n" << names[t] << ": the " << r.worst[t].size() << " worst elements\n"
      << "  where                         got                 reference     oracle bound          err          tol      err/tol   forced\n";
    for (const Element& e : r.worst[t]) {
      std::string where;
      if (t == 0 || t == 2) where = "row " + std::to_string(e.index / cols) + ", col " + std::to_string(e.index % cols);
      else if (t == 1) where = "row " + std::to_string(e.index);
      else where = "col " + std::to_string(e.index);
      char line[320];
      std::snprintf(line, sizeof line, "  %-22s %18.10g %25.17g %12.3g %12.4g %12.4g %12.4g %8.3g\n", where.c_str(),
                    e.got, e.ref, e.bound, e.err, e.tol, e.ratio, e.forced);
      o << line;
    }
  }
  for (const DwColumn& c : r.dw_columns) {
    o << "\ndw column " << c.col << ": sum " << fmt("%.17g", c.sum) << ", sum|dy*xhat| " << fmt("%.6g", c.sum_abs)
      << ", conditioning " << fmt("%.3g", c.condition) << (c.escalated ? " (reference from MPFR)" : "")
      << "\n  rows contributing most (dy*x*rstd):";
    for (const auto& row : c.top_rows) o << " r" << row.row << " " << fmt("%.6g", row.term) << ";";
    o << "\n";
  }
  // Partial sums: what a built-in variant's CPU model could show; an
  // external implementation (a plugin, a Python or C kernel) is its own
  // code, and the FP32 baseline has no chunks.
  const std::string& impl = r.check.request.impls.front();
  const kernels::Variant* v = impl == "fp32-baseline" ? nullptr : kernels::find_variant(impl);
  if (v != nullptr && !v->external)
    o << "\nvariant partial sums: not exposed by the kernel variants (their CPU models, "
         "kernels/models/include/normgate/kernels/models.h, follow the same chunk order)\n";
  else if (v != nullptr)
    o << "\nvariant partial sums: not known to normgate (" << core::escape_controls(impl)
      << " is an external implementation: its own code)\n";
  else
    o << "\n";
  o << "reproduce: " << r.command << "\n";
  return o.str();
}

}  // namespace normgate::validators
