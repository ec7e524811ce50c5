// harness/src/pipeline.cpp: the check pipeline (pipeline.h): generate, run on the GPU
// or the CPU models, reference and validate, with the GPU and oracle halves overlapped.
#include "normgate/harness/pipeline.h"

#include <omp.h>

#include <algorithm>
#include <future>
#include <mutex>
#include <condition_variable>
#include <thread>
#include <optional>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "normgate/core/report_util.h"

#include "normgate/core/bf16.h"
#include "normgate/kernels/models.h"
#include "normgate/kernels/registry.h"
#include "normgate/harness/devices.h"
#include "normgate/harness/runner.h"
#include "host_pool.h"
#include "normgate/oracle/reference.h"
#include "normgate/seeds/generate.h"

namespace normgate::validators {
namespace {

using detail::Clock;
using detail::fmt;
using detail::num;
using detail::since;

constexpr std::string_view kBaseline = "fp32-baseline";



// "row 12, col 7" for [rows, cols] tensors, "row 12" / "col 7" for vectors.
std::string where(Output o, int64_t index, int64_t cols) {
  if (index < 0) return "-";
  switch (o) {
    case Output::rstd: return "row " + std::to_string(index);
    case Output::dw: return "col " + std::to_string(index);
    default: return "row " + std::to_string(index / cols) + ", col " + std::to_string(index % cols);
  }
}

std::string esc_counts(const oracle::Escalations& e) {
  std::ostringstream o;
  o << "rstd " << e.rstd << ", y " << e.y << ", dx " << e.dx << " rows, dw " << e.dw << " columns";
  if (e.unmet) o << ", " << e.unmet << " units short of the stop rule";
  if (e.skipped) o << ", " << e.skipped << " units NOT escalated (MPFR element budget; their comparisons may stay uncertified)";
  return o.str();
}


nlohmann::json esc_json(const oracle::Escalations& e) {
  return {{"rstd_rows", e.rstd}, {"y_rows", e.y},          {"dx_rows", e.dx},      {"mpfr_rows", e.rows},
          {"dw_cols", e.dw},     {"unmet", e.unmet},       {"skipped", e.skipped},   {"max_bits", e.max_bits},
          {"seconds", e.seconds}};
}

nlohmann::json worst_json(const Worst& w) {
  return {{"index", w.index}, {"ratio", num(w.ratio)}, {"got", num(w.got)},     {"ref", num(w.ref)},
          {"err", num(w.err)}, {"tol", num(w.tol)},     {"bound", num(w.bound)}};
}

}  // namespace

std::string oracle_line(const CheckReport& rep) {
  const auto& a = rep.escalations_ref;
  const auto& b = rep.escalations_ideal;
  switch (rep.request.oracle) {
    case oracle::OracleMode::fp64:
      return "FP64 only (--oracle fp64): compensated sums, per-element error bound, no MPFR escalation";
    case oracle::OracleMode::mpfr:
      return "MPFR for every element with finite inputs (--oracle mpfr), up to " +
             std::to_string(std::max(a.max_bits, b.max_bits)) + " bits, " + fmt("%.2f", a.seconds + b.seconds) + " s";
    default:
      break;
  }
  std::string s = "FP64 with MPFR escalation (--oracle auto): escalated " + esc_counts(a) + "; ideal kernel: " +
                  esc_counts(b);
  if (a.any() || b.any())
    s += "; up to " + std::to_string(std::max(a.max_bits, b.max_bits)) + " bits, " +
         fmt("%.2f", a.seconds + b.seconds) + " s in MPFR";
  return s;
}

std::string_view to_string(Backend b) {
  switch (b) {
    case Backend::cpu: return "cpu";
    case Backend::gpu: return "gpu";
    default: return "auto";
  }
}

Backend parse_backend(std::string_view s) {
  for (Backend b : {Backend::auto_, Backend::cpu, Backend::gpu})
    if (s == to_string(b)) return b;
  throw std::invalid_argument("bad backend '" + std::string(s) + "' (expected auto, cpu or gpu)");
}

Backend resolve_backend(Backend b) {
  if (b == Backend::auto_) return kernels::gpu_available() ? Backend::gpu : Backend::cpu;
  return b;
}

std::vector<std::string> expand_impls(const std::vector<std::string>& names) {
  std::vector<std::string> out;
  auto add = [&out](std::string_view n) {
    for (const auto& o : out)
      if (o == n) return;
    out.emplace_back(n);
  };
  for (const auto& n : names) {
    if (n == "all") {
      for (const auto& v : kernels::variants())
        if (v.op == kernels::Op::bwd) add(v.name);
      for (const auto& v : kernels::variants())  // every backward run above has the default's y and rstd
        if (v.op == kernels::Op::fwd && &v != &kernels::default_fwd()) add(v.name);
    } else if (n == kBaseline) {
      add(n);
    } else {
      if (kernels::find_variant(n) == nullptr) {
        std::string known = "fp32-baseline, all";
        for (const auto& v : kernels::variants()) known += ", " + std::string(v.name);
        throw std::invalid_argument("unknown implementation '" + n + "' (known: " + known + ")");
      }
      add(n);
    }
  }
  if (out.empty()) throw std::invalid_argument("no implementation given");
  return out;
}

std::string fwd_carrier(const seeds::CaseId& c) {
  for (const auto& v : kernels::variants())
    if (v.op == kernels::Op::bwd && !v.control && !v.external && v.supports_h(c.H) && v.supports(c.w) && v.supports(c.form))
      return std::string(v.name);
  throw std::invalid_argument("no backward variant supports case " + seeds::to_string(c));
}

std::string unsupported_reason(const std::string& impl, const seeds::CaseId& c) {
  if (impl == kBaseline) return "";
  const kernels::Variant& v = kernels::variant(impl);  // throws for an unknown name
  if (!v.supports_h(c.H))
    return "H = " + std::to_string(c.H) + " outside " + std::to_string(v.h_min) + ".." + std::to_string(v.h_max);
  if (!v.supports(c.w)) return "weight dtype " + std::string(to_string(c.w));
  if (!v.supports(c.form)) return "form " + std::string(to_string(c.form));
  if (!v.external && v.op == kernels::Op::fwd) {  // impl_variants: a carrier backward after it
    try {
      (void)fwd_carrier(c);
    } catch (const std::invalid_argument&) {
      return "no backward variant carries its forward on this case";
    }
  }
  return "";
}

void require_supported(const std::vector<seeds::CaseId>& cases, const std::vector<std::string>& impls) {
  for (const auto& impl : impls) {
    const seeds::CaseId* first = nullptr;
    std::string why;
    int64_t n = 0;
    for (const auto& c : cases) {
      std::string r = unsupported_reason(impl, c);
      if (r.empty()) continue;
      if (first == nullptr) {
        first = &c;
        why = std::move(r);
      }
      ++n;
    }
    if (first != nullptr)
      throw std::invalid_argument("variant " + impl + " does not support case " + seeds::to_string(*first) + " (" +
                                  why + "); it does not support " + std::to_string(n) + " of the grid's " +
                                  std::to_string(cases.size()) + " cases; nothing was run");
  }
}

std::vector<GridSkip> grid_skips(const std::vector<seeds::CaseId>& cases, const std::vector<std::string>& impls) {
  std::vector<GridSkip> out;
  for (const auto& impl : impls) {
    GridSkip g;
    g.impl = impl;
    for (const auto& c : cases) {
      std::string r = unsupported_reason(impl, c);
      if (r.empty()) continue;
      if (g.cases++ == 0) {
        g.first_case = seeds::to_string(c);
        g.why = std::move(r);
      }
    }
    if (g.cases > 0) out.push_back(std::move(g));
  }
  return out;
}

ImplVariants impl_variants(const std::string& impl, const seeds::CaseId& c) {
  if (impl == kBaseline) throw std::invalid_argument("impl_variants: fp32-baseline is not a kernel variant");
  const kernels::Variant& v = kernels::variant(impl);  // throws for an unknown name
  if (v.external) return {&v, &v};
  if (v.op == kernels::Op::bwd) return {&kernels::default_fwd(), &v};
  return {&v, &kernels::variant(fwd_carrier(c))};
}

Verdict CheckReport::verdict() const {
  Verdict v = Verdict::pass;
  for (const auto& i : impls) v = combine(v, i.result.verdict());
  return v;
}

bool CheckReport::pass() const { return verdict() == Verdict::pass; }

namespace {

// Form res: the normalized input is h_new = BF16(h + u), computed from the
// inputs alone (round_to_bf16 of the double sum, exact for BF16 operands), by
// round_sum_to_bf16_row (vectorized; element by element this took ~5 ns per
// element on one core). In parallel over rows, in chunks of ~16384 elements
// (dynamic: a slower thread takes fewer), into an UninitVector: no serial
// zero-fill first (it cost ~1 ns per element on one thread, mostly page
// faults), each page is first touched by the thread that writes it.
UninitVector<uint16_t> expected_h_new(const seeds::HostInputs& in, int threads) {
  UninitVector<uint16_t> h;
  if (in.id.form != Form::res) return h;
  const int64_t rows = in.rows, cols = in.cols;
  if (static_cast<int64_t>(in.x.size()) != rows * cols || in.u.size() != in.x.size())
    throw std::invalid_argument("expected_h_new: x and u must be rows*cols elements");
  h.resize(in.x.size());  // uninitialized: every element is written below
  const int nt = threads > 0 ? threads : omp_get_max_threads();
  const int64_t rchunk = std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1));
  const uint16_t* x = in.x.data();
  const uint16_t* u = in.u.data();
  uint16_t* out = h.data();
#pragma omp parallel for num_threads(nt) schedule(dynamic, rchunk)
  for (int64_t r = 0; r < rows; ++r) round_sum_to_bf16_row(x + r * cols, u + r * cols, cols, out + r * cols);
  return h;
}

// dh = dx + dh_new for res (Problem::dx_add).
oracle::Problem case_problem(const seeds::HostInputs& in, const UninitVector<uint16_t>& h_new_expected) {
  const bool res = in.id.form == Form::res;
  const RowView<uint16_t> x = res ? RowView<uint16_t>::plain(h_new_expected.data(), in.rows, in.cols) : in.x_view();
  const RowView<uint16_t> dh_new =
      res ? RowView<uint16_t>::plain(in.dh_new.data(), in.rows, in.cols) : RowView<uint16_t>{};
  return oracle::Problem{x, in.dy_view(), in.w_view(), in.id.eps, dh_new};
}

Outputs case_baseline(const seeds::HostInputs& in, const oracle::Problem& p, int threads, bool rows) {
  Outputs b = oracle::fp32_baseline(p, threads, rows);
  if (rows && in.id.form == Form::res) {  // FP32 eager's h_new: RN_bf16(RN_fp32(h + u)), the double rounding a kernel must avoid
    b.h_new.resize(in.x.size());
    const int64_t n = static_cast<int64_t>(in.x.size());
    const int nt = threads > 0 ? threads : omp_get_max_threads();
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t i = 0; i < n; ++i) b.h_new[i] = bf16_from_float(bf16_to_float(in.x[i]) + bf16_to_float(in.u[i]));
  }
  return b;
}

}  // namespace

CaseOracle::CaseOracle(const seeds::HostInputs& in, oracle::OracleMode mode, int threads, bool baseline_rows,
                       bool forward_only)
    : h_new_expected(expected_h_new(in, threads)), problem(case_problem(in, h_new_expected)) {
  // Both references from one pass over the inputs (the same bits as two
  // Reference::compute calls, fp64 then fp32_rounded).
  oracle::Options o = oracle_options(oracle::RstdMode::fp64, mode, threads);  // compute_pair sets rstd
  o.forward_only = forward_only;
  // The baseline's rstd and dw (the "dw vs FP32" yardstick) come from the
  // pair's pass (D22 of docs/perf/oracle-and-gate-throughput.md); its y and
  // dx, when the baseline is itself validated, from a pass of its own.
  // Forward only: the baseline's dw is not read; the baseline is computed
  // only when it is itself validated.
  const bool fused = !forward_only && !baseline_rows;
  oracle::ReferencePair pair = oracle::Reference::compute_pair(problem, o, fused ? &baseline : nullptr);
  ref = std::move(pair.ref);
  ideal = std::move(pair.ideal);
  if (!fused && (!forward_only || baseline_rows)) baseline = case_baseline(in, problem, threads, baseline_rows);
}

PreparedCheck prepare_check(const CheckRequest& req) { return prepare_check(req, nullptr); }

PreparedCheck prepare_check(const CheckRequest& req, const seeds::HostInputs* given) {
  if (req.skip_unsupported) {  // "all": only the variants that support the case; the others said
    CheckRequest r = req;
    r.skip_unsupported = false;
    r.impls.clear();
    std::vector<Skipped> skipped;
    for (const auto& name : req.impls) {
      std::string why = unsupported_reason(name, req.id);  // throws for an unknown name
      if (why.empty())
        r.impls.push_back(name);
      else
        skipped.push_back({name, std::move(why)});
    }
    if (r.impls.empty())
      throw std::invalid_argument("no implementation of the request supports case " + seeds::to_string(req.id));
    PreparedCheck pc = prepare_check(r, given);
    pc.skipped = std::move(skipped);
    return pc;
  }
  if (given != nullptr && !(given->id == req.id))
    throw std::invalid_argument("prepare_check: the given inputs are of case " + seeds::to_string(given->id) +
                                ", the request of " + seeds::to_string(req.id));

  if (req.oracle == oracle::OracleMode::mpfr &&
      req.id.rows() * req.id.H > oracle::EscalationPolicy{}.mpfr_max_elements)
    throw std::invalid_argument("--oracle mpfr is for small cases: rows*H = " + std::to_string(req.id.rows() * req.id.H) +
                                " exceeds " + std::to_string(oracle::EscalationPolicy{}.mpfr_max_elements) +
                                "; use --oracle auto (FP64 with MPFR escalation)");
  const Backend backend = resolve_backend(req.backend);
  if (backend == Backend::gpu && !kernels::gpu_available())
    throw std::invalid_argument(
        "backend gpu requested but no usable CUDA device is present (backend cpu, or auto, runs the kernels' CPU "
        "models instead)");
  for (const auto& name : req.impls) {
    if (name == kBaseline) continue;
    const auto& v = kernels::variant(name);
    if (const std::string why = unsupported_reason(name, req.id); !why.empty())
      throw std::invalid_argument("variant " + name + " does not support case " + seeds::to_string(req.id) + " (" +
                                  why + ")");
    if (v.external && find_external(v) == nullptr)
      throw std::invalid_argument("external variant " + name + " has no registered implementation to run");
    (void)impl_variants(name, req.id);  // a forward variant needs a carrier backward for the case
  }

  PreparedCheck pc;
  pc.request = req;
  pc.backend = backend;
  // GPU: the backward variants of the request run on one generation of the
  // inputs after one forward, the default (kernels::run_gpu_shared over a
  // list); each forward variant named runs its own forward, then its
  // carrier backward (one more run_gpu_shared each).
  struct GpuRun {
    const kernels::Variant* fwd = nullptr;  // nullptr: the default forward
    std::vector<const kernels::Variant*> bwds;
    std::vector<size_t> slots;  // positions among the request's kernel impls
  };
  std::vector<GpuRun> runs;
  size_t gpu_impls = 0;
  if (backend == Backend::gpu) {
    GpuRun bwd_run;
    std::vector<GpuRun> fwd_runs;
    for (const auto& name : req.impls) {
      if (name == kBaseline) continue;
      const kernels::Variant& v = kernels::variant(name);
      if (v.external) continue;  // runs through its callback below
      if (v.model_only) continue;  // no GPU kernel: finish_check runs its CPU model
      if (v.op == kernels::Op::bwd) {
        bwd_run.bwds.push_back(&v);
        bwd_run.slots.push_back(gpu_impls++);
      } else {
        const ImplVariants iv = impl_variants(name, req.id);
        fwd_runs.push_back({iv.fwd, {iv.bwd}, {gpu_impls++}});
      }
    }
    if (!bwd_run.bwds.empty()) runs.push_back(std::move(bwd_run));
    for (auto& r : fwd_runs) runs.push_back(std::move(r));
  }
  // With GPU variants and no given inputs, the first run's own generation is
  // the case's: its device buffers are copied back (download_inputs), the
  // bytes generate_inputs_on_gpu would return, without a second generation
  // (later runs generate the same bytes again on the device).
  const bool inputs_from_run = given == nullptr && !runs.empty();
  auto t0 = Clock::now();
  if (given != nullptr) {
    pc.inputs = *given;
    pc.inputs_from = "given inputs (a saved case), not the generator";
  } else {
    if (backend != Backend::gpu) {
      pc.inputs = seeds::generate_host(req.id, req.threads);
    } else if (!inputs_from_run) {
      pc.inputs = kernels::generate_inputs_on_gpu(req.id);
    }
    pc.inputs_from = backend == Backend::gpu ? "GPU generator (same Philox code as the host)" : "host generator";
  }
  pc.seconds_generate = since(t0);
  pc.phases.generation = pc.seconds_generate;

  if (!runs.empty()) {
    t0 = Clock::now();
    pc.gpu_outs.resize(gpu_impls);
    pc.gpu_dx_source.resize(gpu_impls);
    pc.gpu_fwd_source.resize(gpu_impls);
    double seconds_inputs = 0, seconds_generation = 0;
    for (size_t k = 0; k < runs.size(); ++k) {
      const GpuRun& g = runs[k];
      kernels::GpuRunOptions opt;
      opt.download_inputs = inputs_from_run && k == 0;
      opt.fwd = g.fwd;
      // A forward-only check reads no dx, dw: they are not downloaded (D16 of
      // docs/perf/oracle-and-gate-throughput.md; validation leaves them out).
      opt.forward_outputs_only = req.forward_only;
      kernels::SharedGpuRun run = kernels::run_gpu_shared(g.bwds, req.id, given != nullptr ? &pc.inputs : nullptr,
                                                          static_cast<float>(req.id.eps), opt);
      for (size_t i = 0; i < g.slots.size(); ++i) {
        pc.gpu_outs[g.slots[i]] = std::move(run.outs[i]);
        pc.gpu_dx_source[g.slots[i]] = g.slots[run.dx_source[i]];
        pc.gpu_fwd_source[g.slots[i]] = g.slots[0];  // the run's one forward
      }
      pc.phases.downloads += run.seconds_downloads;
      if (opt.download_inputs) {  // generation (and the inputs' download) is the first part of the first run
        pc.inputs = std::move(run.inputs);
        pc.inputs_from_run = true;
        seconds_inputs = run.seconds_inputs;
        seconds_generation = run.seconds_generation;
      }
    }
    pc.seconds_gpu = since(t0);
    if (pc.inputs_from_run) pc.phases.generation = seconds_generation;
    pc.phases.kernels = std::max(0.0, pc.seconds_gpu - (pc.inputs_from_run ? seconds_generation : 0.0) - pc.phases.downloads);
    if (pc.inputs_from_run) {
      pc.seconds_generate = seconds_inputs;
      pc.seconds_gpu = std::max(0.0, pc.seconds_gpu - seconds_inputs);
    }
  }
  // External implementations, on the case's inputs as the oracle will see them.
  for (const auto& name : req.impls) {
    if (name == kBaseline) continue;
    const kernels::Variant& v = kernels::variant(name);
    if (!v.external) continue;
    const ExternalImpl* x = find_external(v);
    if (x == nullptr) throw std::invalid_argument("external variant " + name + " has no registered implementation");
    // One external run at a time in the process, as with one prepare worker
    // (run_checks may prepare several cases at once on several devices).
    static std::mutex external_mu;
    const std::lock_guard<std::mutex> lock(external_mu);
    pc.ext_runs.push_back(run_external(*x, pc.inputs));
    pc.phases.kernels += pc.ext_runs.back().seconds;
  }
  return pc;
}

CheckReport finish_check(PreparedCheck&& pc, const std::function<void(const CheckInternals&)>& inspect) {
  const CheckRequest& req = pc.request;
  CheckReport rep;
  rep.request = req;
  rep.skipped = pc.skipped;
  rep.inputs_from = pc.inputs_from;
  rep.seconds_generate = pc.seconds_generate;
  const seeds::HostInputs& in = pc.inputs;

  const bool res = req.id.form == Form::res;
  auto t0 = Clock::now();
  // The FP32 baseline's y and dx only when it is validated as an implementation.
  const bool baseline_rows = std::find(req.impls.begin(), req.impls.end(), kBaseline) != req.impls.end();
  CaseOracle co(in, req.oracle, req.threads, baseline_rows, req.forward_only);
  const oracle::Problem& p = co.problem;
  const oracle::Reference& ref = co.ref;
  const oracle::Reference& ideal = co.ideal;
  // The FP32 baseline: co.baseline until it is validated as an
  // implementation, then that implementation's entry of outs (moved there: a
  // copy would be a serial pass over its y, dx and h_new).
  const Outputs* baseline = req.forward_only && !baseline_rows ? nullptr : &co.baseline;
  const RowView<uint16_t> dh_new = p.dx_add;
  rep.seconds_oracle = since(t0);
  rep.escalations_ref = ref.escalations();
  rep.escalations_ideal = ideal.escalations();

  // The GPU call's time is shared equally among its variants in the report.
  const double gpu_seconds_each =
      pc.gpu_outs.empty() ? 0.0 : pc.seconds_gpu / static_cast<double>(pc.gpu_outs.size());
  std::vector<Outputs> outs;
  outs.reserve(req.impls.size());
  size_t next_gpu = 0, next_ext = 0;
  std::vector<size_t> gpu_pos;  // position in outs of GPU variant g
  // Per impl: the outputs it was not required to produce and did not (an
  // external forward implementation's dx, dw): left out of its validation.
  std::vector<std::vector<Output>> absent(req.impls.size());
  for (const auto& name : req.impls) {
    ImplResult ir;
    ir.impl = name;
    const kernels::Variant* var = name == kBaseline ? nullptr : &kernels::variant(name);
    if (name != kBaseline) {
      const ImplVariants iv = impl_variants(name, req.id);
      ir.fwd = iv.fwd->name;
      ir.bwd = iv.bwd->name;
    }
    t0 = Clock::now();
    if (var != nullptr && var->external) {
      if (next_ext >= pc.ext_runs.size())
        throw std::logic_error("finish_check: fewer external runs than external implementations (prepare_check not called?)");
      ExternalRun& run = pc.ext_runs[next_ext++];
      const ExternalImpl* x = find_external(*var);
      ir.ran_on = x ? x->ran_on : std::string("external");
      ir.not_produced = run.not_produced;
      if (var->op == kernels::Op::fwd)
        for (const auto& np : run.not_produced) {
          if (np == "dx") absent[outs.size()].push_back(Output::dx);
          if (np == "dw") absent[outs.size()].push_back(Output::dw);
        }
      outs.push_back(std::move(run.out));
      ir.seconds_impl = run.seconds;
    } else if (name == kBaseline) {
      ir.ran_on = "cpu (FP32 baseline)";
      if (baseline == &co.baseline) {
        outs.push_back(std::move(co.baseline));
        baseline = &outs.back();  // stable: outs holds req.impls.size() without reallocating
      } else {
        outs.push_back(*baseline);  // named twice
      }
      ir.seconds_impl = since(t0);
    } else if (pc.backend == Backend::gpu && !(var != nullptr && var->model_only)) {
      if (next_gpu >= pc.gpu_outs.size())
        throw std::logic_error("finish_check: fewer GPU outputs than GPU variants (prepare_check not called?)");
      ir.ran_on = "gpu";
      gpu_pos.push_back(outs.size());
      outs.push_back(std::move(pc.gpu_outs[next_gpu++]));
      ir.seconds_impl = gpu_seconds_each;
    } else {
      ir.ran_on = pc.backend == Backend::gpu ? "cpu model (a model-only control: no GPU kernel)" : "cpu model (no GPU used)";
      // The model gets h and u (it computes h_new itself, as the kernel does).
      const RowView<uint16_t> u = res ? RowView<uint16_t>::plain(in.u.data(), in.rows, in.cols) : RowView<uint16_t>{};
      const ImplVariants iv = impl_variants(name, req.id);  // the forward and backward it runs
      // A forward-only check reads no dx, dw: the model's backward is not run.
      outs.push_back(kernels::run_model(*iv.fwd, *iv.bwd, in.x_view(), p.dy, p.w, static_cast<float>(req.id.eps),
                                        req.threads, u, dh_new, req.id.heads(), req.forward_only));
      ir.seconds_impl = since(t0);
    }
    rep.impls.push_back(std::move(ir));
  }
  // One validation sweep for all implementations (the oracle's rows are
  // evaluated once); its time is shared equally in the report.
  t0 = Clock::now();
  // GPU variants share their run's forward y and rstd (and, where equal, dx)
  // with the host copy of the run's first variant (kernels::run_gpu_shared).
  std::vector<OutputsRef> refs;
  for (const auto& o : outs) refs.push_back(OutputsRef::of(o));
  for (size_t g = 0; g < gpu_pos.size(); ++g) {
    OutputsRef& r = refs[gpu_pos[g]];
    const size_t fsrc = g < pc.gpu_fwd_source.size() ? pc.gpu_fwd_source[g] : 0;
    if (fsrc >= gpu_pos.size()) throw std::logic_error("finish_check: bad forward source");
    r.y = &outs[gpu_pos[fsrc]].y;
    r.rstd = &outs[gpu_pos[fsrc]].rstd;
    r.h_new = &outs[gpu_pos[fsrc]].h_new;  // form res: that forward's h_new
    const size_t src = g < pc.gpu_dx_source.size() ? pc.gpu_dx_source[g] : g;
    if (src >= gpu_pos.size()) throw std::logic_error("finish_check: bad dx source");
    r.dx = &outs[gpu_pos[src]].dx;
  }
  // Implementations with an output left out (absent) are validated on their
  // own (validate_present); the rest in one sweep.
  std::vector<OutputsRef> full;
  std::vector<size_t> full_pos;
  for (size_t k = 0; k < refs.size(); ++k)
    if (absent[k].empty()) {
      full.push_back(refs[k]);
      full_pos.push_back(k);
    }
  std::vector<CaseResult> results(refs.size());
  if (req.forward_only) {
    // Forward outputs only: dx and dw of every implementation left out (the
    // oracle has no backward reference), the rest in one sweep.
    std::vector<OutputsRef> fwd = refs;
    for (OutputsRef& r : fwd) {
      r.dx = TensorRef<uint16_t>();
      r.dw = TensorRef<float>();
    }
    results = validate_present(p, fwd, ref, ideal, nullptr, req.threads, co.h_new_expected);
    full.clear();
    for (auto& a : absent) a.clear();
  }
  if (!full.empty()) {
    auto swept = validate_cases(p, full, ref, ideal, baseline, req.threads, co.h_new_expected);
    for (size_t i = 0; i < full_pos.size(); ++i) results[full_pos[i]] = std::move(swept[i]);
  }
  for (size_t k = 0; k < refs.size(); ++k) {
    if (absent[k].empty()) continue;
    OutputsRef r = refs[k];
    for (Output o : absent[k]) {
      if (o == Output::dx) r.dx = TensorRef<uint16_t>();
      if (o == Output::dw) r.dw = TensorRef<float>();
    }
    results[k] = validate_present(p, r, ref, ideal, baseline, req.threads, co.h_new_expected);
  }
  const double per = since(t0) / static_cast<double>(outs.size());
  for (size_t k = 0; k < rep.impls.size(); ++k) {
    ImplResult& ir = rep.impls[k];
    ir.result = std::move(results[k]);
    ir.seconds_validate = per;
    for (const auto& t : ir.result.tensors)  // dw may be absent (an external forward implementation's)
      if (t.output() == Output::dw && t.worst.index >= 0) ir.dw_worst_abs_sum = ref.dw_abs(t.worst.index);
  }
  if (inspect) inspect(CheckInternals{p, ref, ideal, outs, refs});
  // The GPU run's host vectors are done with (nothing below reads them):
  // inside run_checks (kernels::ReuseHostBuffers) they go back to the pool
  // for a later case's GPU half; elsewhere they are freed, as on return.
  for (size_t pos : gpu_pos) kernels::recycle_host_buffers(outs[pos]);
  if (pc.inputs_from_run) kernels::recycle_host_buffers(pc.inputs);
  return rep;
}

CheckReport run_check(const CheckRequest& req) { return finish_check(prepare_check(req)); }

PhaseSeconds& PhaseSeconds::operator+=(const PhaseSeconds& o) {
  generation += o.generation;
  kernels += o.kernels;
  downloads += o.downloads;
  reference += o.reference;
  validation += o.validation;
  journal += o.journal;
  return *this;
}

PipelineStats& PipelineStats::operator+=(const PipelineStats& o) {
  cases += o.cases;
  overlapped = overlapped || o.overlapped;
  if (devices.empty()) devices = o.devices;
  seconds_total += o.seconds_total;
  seconds_prepare += o.seconds_prepare;
  seconds_finish += o.seconds_finish;
  seconds_waiting_for_prepare += o.seconds_waiting_for_prepare;
  elements += o.elements;
  phases += o.phases;
  return *this;
}

bool pipeline_overlap() {
  const char* e = std::getenv("NORMGATE_OVERLAP");
  if (e == nullptr || *e == '\0' || std::strcmp(e, "1") == 0) return true;
  if (std::strcmp(e, "0") == 0) return false;
  static std::once_flag said;
  std::call_once(said, [e] {
    std::fprintf(stderr, "normgate: NORMGATE_OVERLAP='%s' is neither '0' nor '1'; overlapping as by default\n", e);
  });
  return true;
}

size_t cases_in_host_memory(bool gpu, size_t devices) {
  // run_checks below: with overlap, case i is finished while the workers
  // prepare i+1..i+G (the prepare of i+G is launched once i's is taken).
  return gpu && pipeline_overlap() ? std::max<size_t>(devices, 1) + 1 : 1;
}

PipelineStats run_checks(size_t n, const std::function<CheckRequest(size_t)>& request,
                         const std::function<void(size_t, CheckReport*, std::exception_ptr)>& done,
                         const std::vector<int>& devices) {
  PipelineStats st;
  const auto t_all = Clock::now();
  // Prepare request i (in the calling thread or a worker): never throws; an
  // exception is carried to done().
  struct Slot {
    std::optional<PreparedCheck> pc;
    std::exception_ptr err;
    double seconds = 0;
  };
  if (n == 0) return st;
  std::optional<CheckRequest> first;
  std::exception_ptr first_err;  // request(0) is called once; its error belongs to case 0
  try {
    first.emplace(request(0));
  } catch (...) {
    first_err = std::current_exception();
  }
  // The GPU workers' devices, checked before any work. Backend gpu without
  // a device and no list: each prepare_check throws (that case's error), as
  // on one thread.
  const int count = first && resolve_backend(first->backend) == Backend::gpu ? kernels::device_count() : 0;
  const bool gpu = first && resolve_backend(first->backend) == Backend::gpu && (count > 0 || !devices.empty());
  std::vector<int> devs;
  if (gpu) {
    devs = devices.empty() ? kernels::parse_devices("all", count) : devices;
    for (int d : devs)
      if (d < 0 || d >= count)
        throw std::invalid_argument("run_checks: device " + std::to_string(d) + " does not exist (" +
                                    std::to_string(count) + " visible CUDA devices)");
    st.devices = devs;
  }
  // request(i) once per i, in order, one at a time: a worker waits for the
  // call of request(i-1) to return before it calls request(i).
  std::mutex req_mu;
  std::condition_variable req_cv;
  size_t next_request = 1;
  // dev >= 0: on a worker thread, which makes that device current before
  // anything else (a failure is this case's error, after its request's turn,
  // so the next request still gets its turn).
  auto prepare = [&](size_t i, int dev) {
    Slot s;
    const auto t0 = Clock::now();
    std::exception_ptr dev_err;
    if (dev >= 0) {
      try {
        kernels::use_device(dev);
      } catch (...) {
        dev_err = std::current_exception();
      }
    }
    try {
      if (i == 0 && first_err) std::rethrow_exception(first_err);
      std::optional<CheckRequest> r;
      if (i == 0) {
        r = *first;
      } else {
        std::unique_lock<std::mutex> lock(req_mu);
        req_cv.wait(lock, [&] { return next_request == i; });
        struct Next {  // the next request's turn, however request(i) ends
          std::unique_lock<std::mutex>& l;
          std::condition_variable& cv;
          size_t& next;
          ~Next() {
            ++next;
            l.unlock();
            cv.notify_all();
          }
        } turn{lock, req_cv, next_request};
        r.emplace(request(i));
      }
      if (dev_err) std::rethrow_exception(dev_err);
      s.pc.emplace(prepare_check(*r));
    } catch (...) {
      s.err = std::current_exception();
    }
    s.seconds = since(t0);
    return s;
  };
  // Overlap only pays when the first half runs on the GPU; on the CPU both
  // halves would compete for the same cores.
  const bool overlap = n > 1 && gpu && pipeline_overlap();
  st.overlapped = overlap;
  // GPU runs keep their device buffers from case to case (freed when this
  // returns, after the workers below have finished).
  std::optional<kernels::ReuseGpuBuffers> keep_device_buffers;
  // And their host vectors: finish_check hands case k's back when it is done
  // with them, and a later case's GPU half fills them again: no fresh pages
  // to fault in. The GPU halves running while case k is finished take only
  // vectors handed back before they ask.
  std::optional<kernels::ReuseHostBuffers> keep_host_buffers;
  if (gpu) {
    keep_device_buffers.emplace();
    keep_host_buffers.emplace();
  }
  const size_t G = gpu ? devs.size() : 1;
  // GPU backend: ahead[i % G] prepares case i on device devs[i % G], on its
  // own thread (which sets that device before any CUDA call).
  std::vector<std::future<Slot>> ahead(G);
  auto launch = [&](size_t i) {
    const int dev = devs[i % G];
    ahead[i % G] = std::async(std::launch::async, [&prepare, i, dev] { return prepare(i, dev); });
  };
  // Without overlap one case is in flight: case i+1 is launched after case
  // i is finished (below).
  if (gpu)
    for (size_t i = 0; i < std::min(n, overlap ? G : size_t{1}); ++i) launch(i);
  Slot cur;
  for (size_t i = 0; i < n; ++i) {
    if (!gpu) {
      cur = prepare(i, -1);
    } else {
      const auto tw = Clock::now();
      cur = ahead[i % G].get();
      st.seconds_waiting_for_prepare += since(tw);
      if (overlap && i + G < n) launch(i + G);  // the worker of device devs[i % G] is free
    }
    st.seconds_prepare += cur.seconds;
    const auto t0 = Clock::now();
    std::exception_ptr err = cur.err;
    std::optional<CheckReport> rep;
    // While workers prepare later cases, the oracle leaves them a core each
    // (the result does not depend on the thread count).
    if (!err && overlap && i + 1 < n && cur.pc->request.threads <= 0)
      cur.pc->request.threads = std::max(1, omp_get_num_procs() - static_cast<int>(G));
    PhaseSeconds ph;
    int64_t elems = 0;
    if (!err) {
      ph = cur.pc->phases;
      elems = cur.pc->request.id.rows() * cur.pc->request.id.H;
      try {
        rep.emplace(finish_check(std::move(*cur.pc)));
      } catch (...) {
        err = std::current_exception();
      }
    }
    cur = Slot{};
    st.seconds_finish += since(t0);
    ++st.cases;
    if (rep) {  // this case's phases (a case that threw counts in none)
      ph.reference = rep->seconds_oracle;
      for (const auto& ir : rep->impls) {
        ph.validation += ir.seconds_validate;
        if (ir.ran_on.rfind("cpu model", 0) == 0) ph.kernels += ir.seconds_impl;
      }
      st.elements += elems;
    }
    const auto tj = Clock::now();
    done(i, rep ? &*rep : nullptr, err);  // may throw: the prepares in flight are awaited by ~future
    if (rep) {
      ph.journal = since(tj);
      st.phases += ph;
    }
    if (gpu && !overlap && i + 1 < n) launch(i + 1);  // NORMGATE_OVERLAP=0: now, with the host idle
  }
  st.seconds_total = since(t_all);
  return st;
}

HostCopyBandwidth measure_host_copy(size_t bytes, int repetitions, int threads) {
  if (bytes == 0) throw std::invalid_argument("measure_host_copy: bytes = 0");
  if (repetitions < 1)
    throw std::invalid_argument("measure_host_copy: repetitions = " + std::to_string(repetitions) + " < 1");
  const int nt = threads > 0 ? threads : omp_get_num_procs();
  // Both buffers are written first, by the threads that copy (their pages are
  // mapped before the timed copies), with distinct bytes.
  UninitVector<unsigned char> a, b;
  a.resize(bytes);
  b.resize(bytes);
  const int64_t nb = static_cast<int64_t>(bytes);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t i = 0; i < nb; i += 4096) {
    const size_t len = std::min<size_t>(4096, bytes - static_cast<size_t>(i));
    std::memset(a.data() + i, 0x5A, len);
    std::memset(b.data() + i, 0xA5, len);
  }
  HostCopyBandwidth r;
  r.bytes = bytes;
  r.repetitions = repetitions;
  r.threads = nt;
  r.best_seconds = INFINITY;
  for (int k = 0; k < repetitions; ++k) {
    const auto t0 = Clock::now();
    kernels::detail::copy_bytes(k % 2 ? a.data() : b.data(), k % 2 ? b.data() : a.data(), bytes, nt);
    r.best_seconds = std::min(r.best_seconds, since(t0));
  }
  r.bytes_per_second = r.best_seconds > 0 ? static_cast<double>(bytes) / r.best_seconds : 0.0;
  return r;
}

namespace {
struct PhaseRow {
  const char* name;
  double seconds;
};
std::vector<PhaseRow> phase_rows(const PipelineStats& st) {
  const PhaseSeconds& p = st.phases;
  return {{"generation", p.generation}, {"kernels", p.kernels},       {"downloads", p.downloads},
          {"reference", p.reference},   {"validation", p.validation}, {"journal", p.journal}};
}
std::string pad(std::string s) {  // a phase name in a column of 11
  s.resize(std::max<size_t>(s.size(), 11), ' ');
  return s;
}
double rate(int64_t elements, double seconds) {
  return seconds > 0 ? static_cast<double>(elements) / seconds : 0.0;
}
}  // namespace

nlohmann::json to_json(const PipelineStats& st, const HostCopyBandwidth& copy) {
  auto phase = [&st](double seconds) {
    nlohmann::json j{{"seconds", seconds}};
    j["elements_per_second"] = seconds > 0 ? nlohmann::json(rate(st.elements, seconds)) : nlohmann::json(nullptr);
    return j;
  };
  nlohmann::json j;
  j["format"] = kPipelineStatsFormat;
  j["cases"] = st.cases;
  j["elements"] = st.elements;
  j["elements_are"] = "sum over the cases with a report of rows*H of the case (T*H; T*heads*H for head forms), once "
                      "per case";
  j["devices"] = st.devices;
  j["overlapped"] = st.overlapped;
  j["seconds"] = {{"total", st.seconds_total},
                  {"prepare", st.seconds_prepare},
                  {"finish", st.seconds_finish},
                  {"waiting_for_prepare", st.seconds_waiting_for_prepare}};
  for (const auto& r : phase_rows(st)) j["phases"][r.name] = phase(r.seconds);
  j["end_to_end"] = phase(st.seconds_total);
  j["host_copy"] = {{"bytes", copy.bytes},
                    {"repetitions", copy.repetitions},
                    {"threads", copy.threads},
                    {"best_seconds", copy.best_seconds},
                    {"bytes_per_second", copy.bytes_per_second}};
  j["bytes_per_element"] = kBytesPerElement;
  const double e2e = rate(st.elements, st.seconds_total);
  j["end_to_end_fraction_of_host_copy"] =
      copy.bytes_per_second > 0 && st.seconds_total > 0 ? nlohmann::json(e2e * kBytesPerElement / copy.bytes_per_second)
                                                        : nlohmann::json(nullptr);
  return j;
}

std::string format_pipeline_stats(const PipelineStats& st, const HostCopyBandwidth& copy) {
  std::ostringstream o;
  o << "throughput " << st.cases << " cases, " << fmt("%.4g", static_cast<double>(st.elements))
    << " elements (rows*H per case) in " << fmt("%.2f", st.seconds_total) << " s";
  if (!st.devices.empty()) o << " on devices " << kernels::to_string(st.devices);
  o << "\n";
  const double e2e = rate(st.elements, st.seconds_total);
  for (const auto& r : phase_rows(st))
    o << "  " << pad(r.name) << fmt("%9.2f", r.seconds) << " s  "
      << (r.seconds > 0 ? fmt("%.3g", rate(st.elements, r.seconds)) + " elements/s" : std::string("-"))
      // The step after each case, also without a journal (PhaseSeconds).
      << (std::string(r.name) == "journal" ? "  (each case's results recorded: the journal's append where there is "
                                             "one, the windows' aggregates, progress)"
                                           : "")
      << "\n";
  o << "  " << pad("end to end") << fmt("%9.2f", st.seconds_total) << " s  ";
  if (st.elements == 0) {  // nothing checked (a resumed run with nothing left): no rate to state
    o << "- (no case checked in this process)\n";
    return o.str();
  }
  o << fmt("%.3g", e2e) << " elements/s";
  if (copy.bytes_per_second > 0)
    o << " = " << fmt("%.3g", e2e * kBytesPerElement / 1e9) << " GB/s at " << fmt("%g", kBytesPerElement)
      << " B/element, " << fmt("%.1f", 100.0 * e2e * kBytesPerElement / copy.bytes_per_second)
      << "% of the host copy bandwidth " << fmt("%.3g", copy.bytes_per_second / 1e9) << " GB/s (best of "
      << copy.repetitions << " copies of " << fmt("%.3g", static_cast<double>(copy.bytes) / (1 << 30)) << " GiB, "
      << copy.threads << " threads)";
  o << "\n";
  return o.str();
}

std::string format_report(const CheckReport& rep) {
  const int64_t cols = rep.request.id.H;
  std::ostringstream o;
  o << "case     " << seeds::to_string(rep.request.id) << "\n"
    << "inputs   " << rep.inputs_from << "\n"
    << "oracle   " << oracle_line(rep) << "\n";
  if (rep.request.forward_only)
    o << "outputs  forward only (--outputs fwd): y, rstd" << (rep.request.id.form == Form::res ? ", h_new" : "")
      << " checked; dx, dw not checked (the backward's reference was not computed)\n";
  for (const auto& sk : rep.skipped) o << "skipped  " << sk.impl << ": " << sk.why << "\n";
  for (const auto& ir : rep.impls) {
    const auto& r = ir.result;
    o << "\nimpl     " << ir.impl << " on " << ir.ran_on
      << (ir.fwd.empty() ? std::string()
          : ir.fwd == ir.bwd ? " (external implementation: its own step)"
                             : " (forward " + ir.fwd + ", backward " + ir.bwd + ")")
      << "\n"
      << "output  max err/tol  worst at              over budget  forced   kernel  bound/tol   p99 <=  uncertified\n";
    // Every element exact: no element is "the worst" (the tie rule would name the first).
    auto all_exact = [](const RatioStats& s) { return s.worst.ratio == 0.0 && s.n > 0; };
    for (const auto& s : r.tensors) {
      // The histogram bin's upper edge, capped at the max (both bound p99; the bin edge can exceed the max).
      double p99 = s.hist.quantile_upper(0.99);
      if (std::isfinite(p99) && p99 > s.worst.ratio) p99 = s.worst.ratio;
      char line[256];
      std::snprintf(line, sizeof line, "%-6s  %11.4g  %-20s  %11lld  %6.2g  %7.2g  %9.2g  %8s  %11lld\n",
                    std::string(to_string(s.output())).c_str(), s.worst.ratio,
                    (all_exact(s) ? std::string("- (all exact)") : where(s.output(), s.worst.index, cols))
                        .c_str(),
                    static_cast<long long>(s.over), s.worst.forced, s.worst.ratio - s.worst.forced,
                    s.max_bound_ratio,
                    // The histogram's last finite bin is (1e4, inf): say so rather than "inf".
                    (std::isinf(p99) && std::isfinite(s.worst.ratio)) ? "> 1e4" : fmt("%.2g", p99).c_str(),
                    static_cast<long long>(s.uncertified));
      o << line;
    }
    // The gate report's margins table and the JSON's "forced" are the same
    // quantity: at the worst element (max_forced, the tensor's largest, is
    // in the JSON only).
    o << "        (forced: an ideal kernel's err/tol at the worst element; kernel: max err/tol minus forced)\n";
    if (!ir.not_produced.empty()) {
      o << "not produced (left poisoned):";
      for (const auto& n : ir.not_produced) o << " " << n;
      o << " (an output its op owes fails; dx, dw of a forward implementation are left out)\n";
    }
    if (rep.request.id.form == Form::res &&
        std::any_of(r.tensors.begin(), r.tensors.end(), [](const RatioStats& t) { return t.output() == Output::dx; }))
      o << "res: dx above is dh = BF16(dx + dh_new), the one tensor the backward returns for h and u\n";
    // Per-head forms: the rows above are normalized rows r = token*heads + head; decode the worst ones.
    if (const int64_t heads = rep.request.id.heads(); heads > 1) {
      std::string dec;
      for (const auto& s : r.tensors) {
        if (s.output() == Output::dw || s.worst.index < 0 || all_exact(s)) continue;
        const int64_t row = s.output() == Output::rstd ? s.worst.index : s.worst.index / cols;
        dec += (dec.empty() ? "" : "; ") + std::string(to_string(s.output())) + " row " + std::to_string(row) +
               " = token " + std::to_string(row / heads) + ", head " + std::to_string(row % heads);
      }
      if (!dec.empty()) o << "rows are token*" << heads << " + head: " << dec << "\n";
    }
    // No column with a (floored) baseline error: the worst quotient is 0/0 (1 by convention) or absent.
    if (rep.request.forward_only)
      ;  // no dw: nothing to compare (the outputs line says so)
    else if (std::find(ir.not_produced.begin(), ir.not_produced.end(), "dw") != ir.not_produced.end())
      o << "dw vs FP32 baseline: - (dw not produced)\n";
    else if (std::isnan(r.dw_vs_fp32_median) && (std::isnan(r.dw_vs_fp32_worst) || r.dw_vs_fp32_worst == 1.0))
      o << "dw vs FP32 baseline: - (no column with a baseline error or a nonzero dy*xhat term: T = 0, or dy*xhat = 0)\n";
    else
      o << "dw vs FP32 baseline: max error " << fmt("%.4g", r.dw_vs_fp32_worst)
        << "x the baseline's max error; per column, median "
        << (std::isnan(r.dw_vs_fp32_median) ? std::string("- (no column with a floored baseline error)")
                                            : fmt("%.4g", r.dw_vs_fp32_median) + "x")
        << " (<= 1: not worse than FP32 eager; an error under 2^-23 x its column's mean |dy*xhat|, and within budget, counts as that)\n";
    for (const auto& s : r.tensors) {
      if (s.verdict() != Verdict::fail) continue;
      const auto& w = s.worst;
      o << to_string(s.output()) << " FAILS: " << s.over << " of " << s.n << " elements over budget; worst at "
        << where(s.output(), w.index, cols) << ":\n"
        << "  got " << fmt("%.9g", w.got) << ", reference " << fmt("%.17g", w.ref) << " (oracle bound "
        << fmt("%.3g", w.bound) << ")\n"
        << "  err " << fmt("%.4g", w.err) << " > tol " << fmt("%.4g", w.tol) << "  (err/tol " << fmt("%.4g", w.ratio)
        << "; an ideal kernel on the FP32 rstd would have " << fmt("%.3g", w.forced) << ")\n";
      if (s.output() == Output::dw && w.ref != 0)
        o << "  column conditioning sum|dy*xhat| / |sum dy*xhat| = "
          << fmt("%.3g", ir.dw_worst_abs_sum / std::fabs(w.ref)) << "\n";
    }
    for (const auto& s : r.tensors) {
      if (s.uncertified == 0) continue;
      const auto& u = s.uncertain;
      o << to_string(s.output()) << (s.verdict() == Verdict::inconclusive ? " INCONCLUSIVE: " : " also: ")
        << s.uncertified << " of " << s.n
        << " comparisons uncertified (err/tol could cross 1 within the oracle's bound); least certain at "
        << where(s.output(), u.index, cols) << ":\n"
        << "  got " << fmt("%.9g", u.got) << ", reference " << fmt("%.17g", u.ref) << " +- " << fmt("%.3g", u.bound)
        << " (bound/tol " << fmt("%.3g", u.tol > 0 ? u.bound / u.tol : INFINITY) << "), err/tol "
        << fmt("%.6g", u.ratio) << "\n";
      if (std::isinf(u.bound))
        o << "  (bound +inf: that reference is the IEEE propagation of non-finite inputs; there is no "
             "real-number result to certify against)\n";
      else
        o << "  (small cases can be re-checked with --oracle mpfr)\n";
    }
    const Verdict v = r.verdict();
    o << "verdict  "
      << (v == Verdict::pass ? "PASS" : v == Verdict::fail ? "FAIL" : "INCONCLUSIVE (never a pass: see above)")
      << "\n";
  }
  return o.str();
}

nlohmann::json to_json(const RatioStats& s) {
  const auto& w = s.worst;
  return nlohmann::json{{"n", s.n},
                       {"over", s.over},
                       {"max_ratio", num(w.ratio)},
                       {"worst_index", w.index},
                       {"got", num(w.got)},
                       {"ref", num(w.ref)},
                       {"err", num(w.err)},
                       {"tol", num(w.tol)},
                       {"bound", num(w.bound)},
                       {"forced", num(w.forced)},
                       {"kernel_excess", num(w.ratio - w.forced)},
                       {"max_forced", num(s.max_forced)},
                       {"max_bound_over_tol", num(s.max_bound_ratio)},
                       {"p50_upper", num(s.hist.quantile_upper(0.5))},
                       {"p99_upper", num(s.hist.quantile_upper(0.99))},
                       {"histogram", s.hist.count},
                       {"uncertified", s.uncertified},
                       {"over_certified", s.over_certified},
                       {"least_certain", worst_json(s.uncertain)},
                       {"verdict", std::string(to_string(s.verdict()))},
                       {"pass", s.pass()}};
}

nlohmann::json to_json(const CheckReport& rep) {
  nlohmann::json j;
  j["format"] = kCheckReportFormat;
  j["case"] = seeds::to_string(rep.request.id);
  j["inputs_from"] = rep.inputs_from;
  if (rep.request.forward_only) j["outputs"] = "fwd";  // absent: every output checked
  j["pass"] = rep.pass();
  j["verdict"] = std::string(to_string(rep.verdict()));
  j["oracle"] = {{"mode", std::string(oracle::to_string(rep.request.oracle))},
                 {"escalations", {{"ref", esc_json(rep.escalations_ref)}, {"ideal", esc_json(rep.escalations_ideal)}}}};
  j["seconds"] = {{"generate", rep.seconds_generate}, {"oracle", rep.seconds_oracle}};
  j["skipped"] = nlohmann::json::array();
  for (const auto& sk : rep.skipped) j["skipped"].push_back({{"impl", sk.impl}, {"why", sk.why}});
  for (const auto& ir : rep.impls) {
    nlohmann::json ji;
    ji["impl"] = ir.impl;
    ji["ran_on"] = ir.ran_on;
    if (!ir.fwd.empty()) {  // the kernel variants it ran (impl_variants)
      ji["fwd"] = ir.fwd;
      ji["bwd"] = ir.bwd;
    }
    if (!ir.not_produced.empty()) ji["not_produced"] = ir.not_produced;
    ji["pass"] = ir.result.pass();
    ji["verdict"] = std::string(to_string(ir.result.verdict()));
    ji["uncertified"] = ir.result.uncertified();
    ji["dw_vs_fp32_worst"] = num(ir.result.dw_vs_fp32_worst);
    ji["dw_vs_fp32_median"] = num(ir.result.dw_vs_fp32_median);
    ji["dw_worst_condition"] = num(ir.result.dw_worst_condition);
    ji["seconds"] = {{"impl", ir.seconds_impl}, {"validate", ir.seconds_validate}};
    for (const auto& s : ir.result.tensors) ji["outputs"][std::string(to_string(s.output()))] = to_json(s);
    j["impls"].push_back(std::move(ji));
  }
  return j;
}

std::vector<seeds::CaseId> Grid::cases() const {
  std::vector<seeds::CaseId> out;
  for (Form f : forms) {
    const bool heads = f == Form::heads24 || f == Form::heads4;
    if (heads && std::find(H.begin(), H.end(), int64_t{256}) == H.end())
      throw std::invalid_argument("grid: form " + std::string(to_string(f)) + " needs H=256 in the H list");
    for (int64_t h : H) {
      if (heads && h != 256) continue;
      for (int64_t t : T)
        for (WDtype d : w) seeds::append_cases(seeds, h, t, d, f, out);
    }
  }
  return out;
}

std::vector<Aggregate> run_campaign(const std::vector<seeds::CaseId>& cases, const std::vector<std::string>& impls,
                                    Backend backend, int threads,
                                    const std::function<void(const CheckReport&)>& on_case,
                                    oracle::OracleMode oracle, bool skip_unsupported,
                                    const std::vector<int>& devices) {
  std::vector<Aggregate> aggs;
  auto slot = [&aggs](const std::string& impl, const seeds::CaseId& c) -> Aggregate& {
    const std::string point = seeds::to_string(seeds::FamilyPoint{c.family, c.eps, c.kappa});
    for (auto& a : aggs)
      if (a.impl == impl && a.point == point) return a;
    aggs.push_back({});
    aggs.back().impl = impl;
    aggs.back().family = c.family;
    aggs.back().point = point;
    aggs.back().kappa = c.family == seeds::Family::cancel && c.eps == seeds::kDefaultEps ? c.kappa : 0;
    return aggs.back();
  };
  if (!skip_unsupported) require_supported(cases, impls);  // before any work
  for (const auto& impl : impls)  // impl-major order, family points in first-seen order
    for (const auto& c : cases) slot(impl, c);
  run_checks(
      cases.size(), [&](size_t i) { return CheckRequest{cases[i], impls, backend, threads, oracle, skip_unsupported}; },
      [&](size_t i, CheckReport* rep, std::exception_ptr err) {
        if (err) std::rethrow_exception(err);
        const seeds::CaseId& c = cases[i];
        for (const auto& ir : rep->impls) {
          Aggregate& a = slot(ir.impl, c);
          ++a.cases;
          const Verdict v = ir.result.verdict();
          if (v == Verdict::fail) ++a.failed;
          if (v == Verdict::inconclusive) ++a.inconclusive;
          for (const auto& s : ir.result.tensors) {
            const int k = static_cast<int>(s.output());
            if (a.worst_case[k].empty() || s.worst.ratio > a.max_ratio[k]) {
              a.max_ratio[k] = s.worst.ratio;
              a.worst_case[k] = seeds::to_string(c);
              a.forced_at_worst[k] = s.worst.forced;
            }
          }
          if (!(ir.result.dw_vs_fp32_worst <= a.dw_vs_fp32_worst)) a.dw_vs_fp32_worst = ir.result.dw_vs_fp32_worst;
        }
        if (on_case) on_case(*rep);
      },
      devices);
  std::erase_if(aggs, [](const Aggregate& a) { return a.cases == 0; });  // skipped everywhere (skip_unsupported)
  return aggs;
}

std::string format_aggregates(const std::vector<Aggregate>& aggs) {
  std::ostringstream o;
  o << "Max err/tol per output over the cases; dw forced share = the worst dw error of an ideal kernel that "
       "takes the FP32 rstd as exact, over the implementation's (above 1: the implementation does better than "
       "the FP32 rstd allows, as normgate's backward with msq does); dw vs FP32 = worst over cases of "
       "(max dw error / FP32 eager's max dw error); inconclusive = cases with an uncertified comparison "
       "and no certain failure (never counted as passing).\n\n"
    << "| impl | family | cases | failed | inconclusive | y | rstd | dx | dw | dw forced share | dw vs FP32 | worst dw case |\n"
    << "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
  for (const auto& a : aggs) {
    const int dw = static_cast<int>(Output::dw);
    const double share = a.max_ratio[dw] > 0 ? a.forced_at_worst[dw] / a.max_ratio[dw] : 0.0;
    o << "| " << a.impl << " | " << a.point << " | " << a.cases << " | " << a.failed << " | "
      << a.inconclusive << " | " << fmt("%.3g", a.max_ratio[0]) << " | " << fmt("%.3g", a.max_ratio[1]) << " | " << fmt("%.3g", a.max_ratio[2])
      << " | " << fmt("%.3g", a.max_ratio[dw]) << " | " << fmt("%.2f", share) << " | "
      << fmt("%.3g", a.dw_vs_fp32_worst) << " | " << a.worst_case[dw] << " |\n";
  }
  // Conditioning headroom per implementation, where the grid ran cancel at
  // several kappa (a seed set such as 5xN).
  std::vector<std::string> order;
  for (const auto& a : aggs)
    if (std::find(order.begin(), order.end(), a.impl) == order.end()) order.push_back(a.impl);
  std::string lines;
  for (const auto& impl : order) {
    const double h = aggregate_headroom(aggs, impl);
    int levels = 0;
    for (const auto& a : aggs) levels += a.impl == impl && a.kappa > 0;
    if (levels < 2 || h < 0) continue;
    lines += "| " + impl + " | " + (h == 0 ? std::string("<") + fmt("%g", seeds::kKappaLevels[0]) : fmt("%g", h)) + " |\n";
  }
  if (!lines.empty())
    o << "\nConditioning headroom: the highest cancel kappa at which the implementation passes every case of "
         "that level and of every lower level run.\n\n| impl | kappa headroom |\n| --- | --- |\n"
      << lines;
  return o.str();
}

double aggregate_headroom(const std::vector<Aggregate>& aggs, const std::string& impl) {
  double head = -1;
  for (double k : seeds::kKappaLevels) {
    const Aggregate* at = nullptr;
    for (const auto& a : aggs)
      if (a.impl == impl && a.kappa == k) at = &a;
    if (at == nullptr || at->cases == 0) continue;
    if (at->failed > 0 || at->inconclusive > 0) return head >= 0 ? head : k == seeds::kKappaLevels[0] ? 0 : -1;
    head = k;
  }
  return head;
}

}  // namespace normgate::validators
