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

// Elements per hashed block of a deterministic implementation's outputs
// (run_external): a difference is reported to within one block.
constexpr size_t kHashBlock = 4096;

// A 64-bit hash of n bytes (8 at a time, the tail zero-padded; the length
// mixed in), multiply-xorshift: equal bytes hash alike, different ones
// almost never.
uint64_t block_hash(const unsigned char* p, size_t n) {
  uint64_t h = 0x243F6A8885A308D3ull ^ n;
  auto mix = [&h](uint64_t w) {
    h ^= w;
    h *= 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
  };
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    mix(w);
  }
  if (i < n) {
    uint64_t w = 0;
    std::memcpy(&w, p + i, n - i);
    mix(w);
  }
  mix(h >> 17);
  return h;
}

template <class T>
bool all_equal_bits(const std::vector<T>& v, T bits) {
  return std::all_of(v.begin(), v.end(), [bits](T x) { return std::memcmp(&x, &bits, sizeof x) == 0; });
}

}  // namespace

ExternalError parse_external_error(std::string_view error) {
  constexpr std::string_view tag = "external implementation ";
  ExternalError r;
  ExternalError::Kind kind = ExternalError::Kind::failed;
  if (error.starts_with(kNondeterministicError)) {
    kind = ExternalError::Kind::nondeterministic;
    error.remove_prefix(kNondeterministicError.size());
  } else if (error.starts_with(kContractError)) {
    kind = ExternalError::Kind::contract_broken;
    error.remove_prefix(kContractError.size());
  }
  if (!error.starts_with(tag)) return r;
  const std::string_view rest = error.substr(tag.size());
  const size_t open = rest.find(" (");
  if (open == std::string_view::npos || open == 0) return r;
  r.kind = kind;
  r.impl = std::string(rest.substr(0, open));
  return r;
}

const kernels::Variant& register_external(ExternalImpl impl) {
  auto bad = [&impl](const std::string& what) {
    throw std::invalid_argument("external implementation '" + impl.name + "': " + what);
  };
  if (!impl.run) bad("no run function");
  if (impl.ran_on.empty()) bad("empty ran_on (say where it runs, e.g. \"python callable on cpu\")");
  if (impl.ran_on.find('\n') != std::string::npos) bad("ran_on must be one line");
  if (impl.cuda_device < -1)
    bad("cuda_device = " + std::to_string(impl.cuda_device) + " (a CUDA device index >= 0, or -1 for the host)");
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

uint64_t external_host_bytes(const kernels::Variant& v, const seeds::CaseId& c) {
  const ExternalImpl* x = find_external(v);
  return x != nullptr && x->host_bytes ? x->host_bytes(c) : 0;
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
    } catch (const ContractBroken& e) {
      throw std::runtime_error(std::string(kContractError) + "external implementation " + impl.name + " (" +
                               impl.origin + ") on " + seeds::to_string(c) + ": " + e.what());
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
        throw std::runtime_error(std::string(kContractError) + "external implementation " + impl.name + " (" +
                                 impl.origin + ") on " + seeds::to_string(c) + ": resized output " + name + " to " +
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
  // The first run's outputs are kept as 64-bit hashes of blocks of
  // kHashBlock elements (no second copy of the outputs in memory), the
  // second run writes into the same, poisoned again, vectors, and its
  // hashes must match. Two different blocks hash alike with a chance of
  // about 2^-64.
  if (impl.op == kernels::Op::fwd || impl.mode == kernels::Mode::det) {
    auto hashes = [](const Outputs& out) {
      std::vector<std::vector<uint64_t>> h;
      auto add = [&h](const auto& v) {
        std::vector<uint64_t> blocks;
        const auto* bytes = reinterpret_cast<const unsigned char*>(v.data());
        const size_t n = v.size() * sizeof v[0], step = kHashBlock * sizeof v[0];
        for (size_t b = 0; b < n; b += step) blocks.push_back(block_hash(bytes + b, std::min(step, n - b)));
        h.push_back(std::move(blocks));
      };
      add(out.y);
      add(out.rstd);
      add(out.dx);
      add(out.dw);
      add(out.h_new);
      return h;
    };
    const auto first = hashes(o);
    // rstd and dw (rows and H floats) are kept whole, so a difference there
    // is named by its element and both bit patterns.
    const std::vector<float> rstd1 = o.rstd, dw1 = o.dw;
    run_once(o);
    auto same_floats = [&](const char* name, const std::vector<float>& a, const std::vector<float>& b) {
      for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
        uint32_t x, y;
        std::memcpy(&x, &a[i], 4);
        std::memcpy(&y, &b[i], 4);
        if (x != y) {
          char bits[48];
          std::snprintf(bits, sizeof bits, " (0x%08x then 0x%08x)", x, y);
          throw std::runtime_error(std::string(kNondeterministicError) + "external implementation " + impl.name +
                                   " (" + impl.origin + ") is declared deterministic but two runs on " +
                                   seeds::to_string(c) + " gave different bits: output " + name + " element " +
                                   std::to_string(i) + bits);
        }
      }
    };
    same_floats("rstd", rstd1, o.rstd);
    same_floats("dw", dw1, o.dw);
    const auto again = hashes(o);
    static const char* const kNames[] = {"y", "rstd", "dx", "dw", "h_new"};
    const size_t sizes[] = {o.y.size(), o.rstd.size(), o.dx.size(), o.dw.size(), o.h_new.size()};
    for (size_t k = 0; k < first.size(); ++k)
      for (size_t b = 0; b < first[k].size(); ++b)
        if (first[k][b] != again[k][b]) {
          const size_t lo = b * kHashBlock, hi = std::min(sizes[k], lo + kHashBlock);
          throw std::runtime_error(std::string(kNondeterministicError) + "external implementation " + impl.name + " (" + impl.origin +
                                   ") is declared deterministic but two runs on " + seeds::to_string(c) +
                                   " gave different bits: output " + kNames[k] + ", elements " +
                                   std::to_string(lo) + ".." + std::to_string(hi - 1));
        }
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
