// harness/src/external.cpp: external implementations (external.h): their
// registration beside the kernel registry's entry, and one poisoned run
// (two for a deterministic implementation, compared bit for bit).
#include "normgate/harness/external.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>

namespace normgate::validators {
namespace {

struct Externals {
  std::mutex mu;
  // Keyed by the registry entry (stable address); shared_ptr so that a
  // re-registration does not free an ExternalImpl a running check still uses.
  std::map<const kernels::Variant*, std::shared_ptr<const ExternalImpl>> by_variant;
  std::vector<const kernels::Variant*> order;
  // Every ExternalImpl ever registered stays alive (find_external hands out raw pointers).
  std::deque<std::shared_ptr<const ExternalImpl>> all;
};

Externals& externals_store() {
  static Externals e;
  return e;
}

template <class T>
bool all_equal_bits(const std::vector<T>& v, T bits) {
  return std::all_of(v.begin(), v.end(), [bits](T x) { return std::memcmp(&x, &bits, sizeof x) == 0; });
}

}  // namespace

const kernels::Variant& register_external(ExternalImpl impl) {
  auto bad = [&impl](const std::string& what) {
    throw std::invalid_argument("external implementation '" + impl.name + "': " + what);
  };
  if (!impl.run) bad("no run function");
  if (impl.ran_on.empty()) bad("empty ran_on (say where it runs, e.g. \"python callable on cpu\")");
  if (impl.ran_on.find('\n') != std::string::npos) bad("ran_on must be one line");
  kernels::ExternalVariantSpec spec;
  spec.name = impl.name;
  spec.op = impl.op;
  spec.mode = impl.mode;
  spec.h_min = impl.h_min;
  spec.h_max = impl.h_max;
  spec.wdtypes = impl.wdtypes;
  spec.forms = impl.forms;
  spec.description = impl.description;
  spec.origin = impl.origin;
  spec.source_sha256 = impl.source_sha256;
  Externals& e = externals_store();
  std::lock_guard<std::mutex> lock(e.mu);
  const kernels::Variant& v = kernels::add_external_variant(spec);  // validates, throws naming the field
  impl.source_sha256 = std::string(v.source_sha256);              // as stored (lower case)
  auto p = std::make_shared<const ExternalImpl>(std::move(impl));
  e.all.push_back(p);
  if (e.by_variant.find(&v) == e.by_variant.end()) e.order.push_back(&v);
  e.by_variant[&v] = std::move(p);
  return v;
}

const ExternalImpl* find_external(const kernels::Variant& v) {
  if (!v.external) return nullptr;
  Externals& e = externals_store();
  std::lock_guard<std::mutex> lock(e.mu);
  auto it = e.by_variant.find(&v);
  return it == e.by_variant.end() ? nullptr : it->second.get();
}

std::vector<ExternalImpl> externals() {
  Externals& e = externals_store();
  std::lock_guard<std::mutex> lock(e.mu);
  std::vector<ExternalImpl> out;
  for (const kernels::Variant* v : e.order) out.push_back(*e.by_variant.at(v));
  return out;
}

ExternalRun run_external(const ExternalImpl& impl, const seeds::HostInputs& in) {
  const seeds::CaseId& c = in.id;
  const kernels::Variant* v = kernels::find_variant(impl.name);
  if (v == nullptr || !v->supports_h(c.H) || !v->supports(c.w) || !v->supports(c.form))
    throw std::invalid_argument("external implementation " + impl.name + " does not support case " +
                                seeds::to_string(c));
  const size_t rows = static_cast<size_t>(in.rows), cols = static_cast<size_t>(in.cols);
  float poison_f32;
  std::memcpy(&poison_f32, &kPoisonF32, sizeof poison_f32);
  // One call of impl.run into freshly sized and poisoned outputs; its wall time.
  auto run_once = [&](Outputs& o) {
    o.y.assign(rows * cols, kPoisonBf16);
    o.rstd.assign(rows, poison_f32);
    o.dx.assign(rows * cols, kPoisonBf16);
    o.dw.assign(cols, poison_f32);
    if (c.form == Form::res) o.h_new.assign(rows * cols, kPoisonBf16);
    const auto t0 = std::chrono::steady_clock::now();
    try {
      impl.run(in, o);
    } catch (const Cancelled&) {
      throw;
    } catch (const std::exception& e) {
      throw std::runtime_error("external implementation " + impl.name + " (" + impl.origin + ") failed on " +
                               seeds::to_string(c) + ": " + e.what());
    } catch (...) {
      throw std::runtime_error("external implementation " + impl.name + " (" + impl.origin + ") failed on " +
                               seeds::to_string(c) + " (a non-standard exception)");
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    auto size_is = [&](const char* name, size_t got, size_t want) {
      if (got != want)
        throw std::runtime_error("external implementation " + impl.name + " resized output " + name + " to " +
                                 std::to_string(got) + " elements (the case has " + std::to_string(want) + ")");
    };
    size_is("y", o.y.size(), rows * cols);
    size_is("rstd", o.rstd.size(), rows);
    size_is("dx", o.dx.size(), rows * cols);
    size_is("dw", o.dw.size(), cols);
    size_is("h_new", o.h_new.size(), c.form == Form::res ? rows * cols : 0);
    return seconds;
  };
  ExternalRun r;
  Outputs& o = r.out;
  r.seconds = run_once(o);
  // A deterministic implementation (every forward, and a backward declared
  // det) must give the same bits when run again on the same inputs: the
  // gate's det windows rest on that claim, so it is tested on every case.
  if (impl.op == kernels::Op::fwd || impl.mode == kernels::Mode::det) {
    Outputs again;
    run_once(again);
    auto same = [&](const char* name, const auto& a, const auto& b) {
      if (a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof a[0]) == 0))
        return;
      size_t i = 0;
      while (i < a.size() && std::memcmp(&a[i], &b[i], sizeof a[i]) == 0) ++i;
      uint32_t first = 0, second = 0;
      std::memcpy(&first, &a[i], sizeof a[i]);
      std::memcpy(&second, &b[i], sizeof b[i]);
      char bits[64];
      std::snprintf(bits, sizeof bits, "0x%0*x then 0x%0*x", static_cast<int>(2 * sizeof a[i]), first,
                    static_cast<int>(2 * sizeof b[i]), second);
      throw std::runtime_error("external implementation " + impl.name + " (" + impl.origin +
                               ") is declared deterministic but two runs on " + seeds::to_string(c) +
                               " gave different bits: output " + name + " element " + std::to_string(i) + " (" +
                               bits + ")");
    };
    same("y", o.y, again.y);
    same("rstd", o.rstd, again.rstd);
    same("dx", o.dx, again.dx);
    same("dw", o.dw, again.dw);
    same("h_new", o.h_new, again.h_new);
  }
  auto check = [&](const char* name, bool poisoned, bool empty) {
    if (poisoned && !empty) r.not_produced.emplace_back(name);
  };
  check("y", all_equal_bits(o.y, kPoisonBf16), o.y.empty());
  check("rstd", all_equal_bits(o.rstd, poison_f32), o.rstd.empty());
  check("dx", all_equal_bits(o.dx, kPoisonBf16), o.dx.empty());
  check("dw", all_equal_bits(o.dw, poison_f32), o.dw.empty());
  if (c.form == Form::res) check("h_new", all_equal_bits(o.h_new, kPoisonBf16), o.h_new.empty());
  return r;
}

}  // namespace normgate::validators
