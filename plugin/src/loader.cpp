// plugin/src/loader.cpp: dlopen a plugin, check every field of its table,
// build an ExternalImpl per variant; the host side of a run (staging, host
// calls, the outside-view checks).
#include "normgate/plugin/loader.h"

#include <dlfcn.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>

#include "normgate/core/host_memory.h"
#include "normgate/core/printable.h"
#include "normgate/seeds/case_id.h"
#include "staging.h"

namespace normgate::plugin {

namespace detail {

std::string PluginVariant::who() const { return "plugin '" + lib->path + "' variant '" + name + "'"; }

namespace {

// Element (t, h, j) of a [T, heads, H] buffer of s's layout.
size_t at(const Staging& s, int64_t r, int64_t j) {
  const int64_t t = r / s.heads, h = r % s.heads;
  return static_cast<size_t>(t * s.stride + h * s.stride_h + j);
}

std::vector<uint16_t> lay_out(const Staging& s, const std::vector<uint16_t>& rows, uint16_t fill) {
  std::vector<uint16_t> buf(s.row_elems, fill);
  for (int64_t r = 0; r < s.rows; ++r)
    std::copy_n(rows.data() + r * s.H, s.H, buf.data() + at(s, r, 0));
  return buf;
}

void check_size(const char* what, size_t got, size_t want, const seeds::CaseId& c) {
  if (got != want)
    throw std::invalid_argument("plugin run: input " + std::string(what) + " has " + std::to_string(got) +
                                " elements, case " + seeds::to_string(c) + " needs " + std::to_string(want));
}

// Copy a [T, heads, H] buffer's view out, contiguous over rows, after
// checking that every element outside the view still holds the poison.
std::vector<uint16_t> take_rows(const Staging& s, const std::vector<uint16_t>& buf, const PluginVariant& pv,
                                const char* what) {
  std::vector<bool> inside(s.row_elems, false);
  std::vector<uint16_t> rows(static_cast<size_t>(s.rows * s.H));
  for (int64_t r = 0; r < s.rows; ++r) {
    const size_t b = at(s, r, 0);
    std::fill_n(inside.begin() + static_cast<std::ptrdiff_t>(b), s.H, true);
    std::copy_n(buf.data() + b, s.H, rows.data() + r * s.H);
  }
  for (size_t i = 0; i < s.row_elems; ++i)
    if (!inside[i] && buf[i] != kPoisonBf16)
      throw validators::ContractBroken(pv.who() + ": wrote outside the view of " + what + " (element " + std::to_string(i) +
                               " of its buffer, row stride " + std::to_string(s.stride) + ", holds 0x" +
                               [&] { char b[8]; std::snprintf(b, sizeof b, "%04X", buf[i]); return std::string(b); }() +
                               ")");
  return rows;
}

std::vector<float> take_guarded(std::vector<float>& buf, size_t n, const PluginVariant& pv, const char* what) {
  for (size_t i = n; i < buf.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &buf[i], 4);
    if (bits != kPoisonF32)
      throw validators::ContractBroken(pv.who() + ": wrote past the end of " + what + " (element " + std::to_string(i) +
                               ", " + what + " has " + std::to_string(n) + ")");
  }
  buf.resize(n);
  return std::move(buf);
}

}  // namespace

int64_t row_stride(const seeds::CaseId& c) {
  // heads24: rows of a packed qkv projection, (24 + 8 + 8) heads of 256.
  return c.form == Form::heads24 ? 40 * 256 : c.form == Form::heads4 ? 4 * 256 : c.H + kRowPad;
}

Staging stage(const seeds::HostInputs& in, bool bwd) {
  Staging s;
  const auto& c = in.id;
  s.id = c;
  s.T = c.T;
  s.H = c.H;
  s.heads = c.heads();
  s.rows = c.rows();
  s.res = c.form == Form::res;
  s.bwd = bwd;
  s.stride = row_stride(c);
  s.stride_h = c.form == Form::heads24 || c.form == Form::heads4 ? 256 : 0;
  s.row_elems = static_cast<size_t>(s.T * s.stride);
  const size_t n = static_cast<size_t>(s.rows * s.H);
  check_size("x", in.x.size(), n, c);
  check_size("dy", in.dy.size(), n, c);
  if (s.res) {
    check_size("u", in.u.size(), n, c);
    check_size("dh_new", in.dh_new.size(), n, c);
  }
  if (c.w == WDtype::bf16) {
    check_size("w_bf16", in.w_bf16.size(), static_cast<size_t>(c.H), c);
    s.w = in.w_bf16.data();
    s.w_bytes = in.w_bf16.size() * 2;
  } else {
    check_size("w_f32", in.w_f32.size(), static_cast<size_t>(c.H), c);
    s.w = in.w_f32.data();
    s.w_bytes = in.w_f32.size() * 4;
  }
  // Inputs: the gaps hold a finite pattern (1.0), never read by a correct kernel.
  s.x = lay_out(s, in.x, 0x3F80);
  s.dy = lay_out(s, in.dy, 0x3F80);
  if (s.res) {
    s.u = lay_out(s, in.u, 0x3F80);
    s.dh_new = lay_out(s, in.dh_new, 0x3F80);
    s.h_new.assign(s.row_elems, kPoisonBf16);
  }
  s.y.assign(s.row_elems, kPoisonBf16);
  float nan_f;
  std::memcpy(&nan_f, &kPoisonF32, 4);
  s.rstd.assign(static_cast<size_t>(s.rows + kGuard), nan_f);
  if (bwd) {
    s.dx.assign(s.row_elems, kPoisonBf16);
    s.dw.assign(static_cast<size_t>(s.H + kGuard), nan_f);
  }
  s.shape = ng_plugin_shape{s.T, s.H, s.heads, static_cast<int32_t>(c.w), static_cast<int32_t>(c.form)};
  s.eps = static_cast<float>(c.eps);
  return s;
}

ng_plugin_fwd_args fwd_args(const Staging& s, const Ptrs& p) {
  ng_plugin_fwd_args a{};
  a.shape = s.shape;
  a.eps = s.eps;
  a.x = p.x;
  a.x_stride = s.stride;
  a.x_stride_h = s.stride_h;
  a.w = p.w;
  a.y = p.y;
  a.y_stride = s.stride;
  a.y_stride_h = s.stride_h;
  a.rstd = p.rstd;
  if (s.res) {
    a.u = p.u;
    a.u_stride = s.stride;
    a.h_new = p.h_new;
    a.h_new_stride = s.stride;
  }
  a.stream = p.stream;
  return a;
}

ng_plugin_bwd_args bwd_args(const Staging& s, const Ptrs& p) {
  ng_plugin_bwd_args a{};
  a.shape = s.shape;
  a.eps = s.eps;
  a.dy = p.dy;
  a.dy_stride = s.stride;
  a.dy_stride_h = s.stride_h;
  a.x = s.res ? p.h_new : p.x;  // form res: the backward normalizes the forward's h_new
  a.x_stride = s.stride;
  a.x_stride_h = s.stride_h;
  a.w = p.w;
  a.rstd = p.rstd;
  a.dx = p.dx;
  a.dx_stride = s.stride;
  a.dx_stride_h = s.stride_h;
  a.dw = p.dw;
  if (s.res) {
    a.dh_new = p.dh_new;
    a.dh_new_stride = s.stride;
  }
  a.workspace = p.workspace_bytes ? p.workspace : nullptr;
  a.workspace_bytes = p.workspace_bytes;
  a.stream = p.stream;
  return a;
}

uint64_t workspace_bytes(const PluginVariant& pv, bool bwd, const ng_plugin_shape& shape) {
  if (!bwd || pv.v->bwd_workspace_bytes == nullptr) return 0;
  char err[NG_PLUGIN_ERR_BYTES] = {};
  uint64_t bytes = 0;
  const int rc = pv.v->bwd_workspace_bytes(&shape, &bytes, err, sizeof err);
  check_rc(pv, "bwd_workspace_bytes", rc, err);
  if (bytes > kMaxWorkspace)
    throw std::runtime_error(pv.who() + ": bwd_workspace_bytes asks for " + std::to_string(bytes) +
                             " bytes for T=" + std::to_string(shape.T) + ", H=" + std::to_string(shape.H) +
                             " (at most 2^40)");
  return bytes;
}

uint64_t workspace_bytes(const PluginVariant& pv, const Staging& s) { return workspace_bytes(pv, s.bwd, s.shape); }

uint64_t host_bytes(const PluginVariant& pv, const seeds::CaseId& c) {
  const bool bwd = pv.v->op == NG_PLUGIN_OP_BWD, res = c.form == Form::res;
  const uint64_t row_elems = static_cast<uint64_t>(c.T) * static_cast<uint64_t>(row_stride(c));
  const uint64_t rows = static_cast<uint64_t>(c.rows()), H = static_cast<uint64_t>(c.H);
  // stage(): x, dy and y, dx with the backward, u, dh_new and h_new for form
  // res, BF16 over T * stride each; rstd and dw (FP32) with their guards.
  const uint64_t buffers = 3 + (bwd ? 1 : 0) + (res ? 3 : 0);
  uint64_t b = 2 * row_elems * buffers + 4 * (rows + kGuard) + (bwd ? 4 * (H + kGuard) : 0);
  // finish(): each output taken out of its buffer into a new rows x H array
  // (the one it replaces is freed after) beside a bit an element of the buffer.
  b += 2 * rows * H + row_elems / 8;
  // run_host(): the host workspace, mapped in whole pages.
  if (!pv.device) {
    const ng_plugin_shape shape{c.T, c.H, c.heads(), static_cast<int32_t>(c.w), static_cast<int32_t>(c.form)};
    uint64_t ws = 0;
    {
      std::lock_guard<std::mutex> lock(pv.lib->mu);  // calls into one library are serialized
      ws = workspace_bytes(pv, bwd, shape);
    }
    b += (ws + 4095) / 4096 * 4096;
  }
  return b;
}

void check_rc(const PluginVariant& pv, const char* entry, int rc, const char* err) {
  if (rc == NG_PLUGIN_OK) return;
  // The plugin's bytes as valid UTF-8 (core::escape_invalid_utf8): the
  // same text on stdout, in the reports and in the journal.
  std::string msg = core::escape_invalid_utf8(std::string_view(err, strnlen(err, NG_PLUGIN_ERR_BYTES - 1)));
  if (msg.empty()) msg = "(no message)";
  const char* kind = rc == NG_PLUGIN_EINVAL ? " (invalid arguments)" : rc == NG_PLUGIN_EFAIL ? "" : " (unknown code)";
  throw std::runtime_error(pv.who() + ": " + entry + " returned " + std::to_string(rc) + kind + ": " + msg);
}

void finish(Staging& s, const PluginVariant& pv, Outputs& out) {
  out.y = take_rows(s, s.y, pv, "y");
  out.rstd = take_guarded(s.rstd, static_cast<size_t>(s.rows), pv, "rstd");
  if (s.res) out.h_new = take_rows(s, s.h_new, pv, "h_new");
  if (s.bwd) {  // a forward variant leaves dx and dw as they are (the harness's poison)
    out.dx = take_rows(s, s.dx, pv, "dx");
    out.dw = take_guarded(s.dw, static_cast<size_t>(s.H), pv, "dw");
  }
}

void run_host(const PluginVariant& pv, Staging& s) {
  const uint64_t ws_bytes = workspace_bytes(pv, s);
  // Page-aligned (256 bytes at least), filled with 0xFF bytes (its contents
  // are undefined to the plugin). Mapped for this run and unmapped after it:
  // the gate's heap keeps freed blocks (core::keep_large_blocks), and a
  // workspace from it left each case's block behind when the next request
  // did not fit the hole, so the address space grew by one workspace a case
  // until the cases failed.
  struct Unmap {
    size_t bytes = 0;
    void operator()(void* p) const { ::munmap(p, bytes); }
  };
  std::unique_ptr<void, Unmap> ws(nullptr, Unmap{0});
  if (ws_bytes > 0) {
    // Filled below, so every page is touched: a request past all the memory
    // this process may use (the host's, its cgroup's or ulimit -v's bound;
    // not what is free now, so this is a coarse bound) would end it by the
    // OOM killer, since the allocation itself succeeds under overcommit.
    const core::HostMemory hm = core::host_memory();
    if (hm.usable() != 0 && ws_bytes > hm.usable())
      throw std::runtime_error(pv.who() + ": bwd_workspace_bytes asks for a host workspace of " +
                               core::gib_and_bytes(ws_bytes) + " for T=" + std::to_string(s.T) + ", H=" +
                               std::to_string(s.H) + ", more than " + hm.describe_usable());
    const size_t map_bytes = static_cast<size_t>(ws_bytes);
    void* m = ::mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m != MAP_FAILED) ws = std::unique_ptr<void, Unmap>(m, Unmap{map_bytes});
    if (!ws) throw std::runtime_error(pv.who() + ": cannot allocate a host workspace of " + std::to_string(ws_bytes) + " bytes");
    std::memset(ws.get(), 0xFF, ws_bytes);
  }
  Ptrs p;
  p.x = s.x.data();
  p.dy = s.dy.data();
  p.u = s.u.data();
  p.dh_new = s.dh_new.data();
  p.w = s.w;
  p.y = s.y.data();
  p.dx = s.dx.data();
  p.h_new = s.h_new.data();
  p.rstd = s.rstd.data();
  p.dw = s.dw.data();
  p.workspace = ws.get();
  p.workspace_bytes = ws_bytes;
  char err[NG_PLUGIN_ERR_BYTES] = {};
  const ng_plugin_fwd_args fa = fwd_args(s, p);
  check_rc(pv, "fwd", pv.v->fwd(&fa, err, sizeof err), err);
  if (s.bwd) {
    const ng_plugin_bwd_args ba = bwd_args(s, p);
    check_rc(pv, "bwd", pv.v->bwd(&ba, err, sizeof err), err);
  }
}

}  // namespace detail

namespace {

using detail::Library;
using detail::PluginVariant;

bool valid_name(const char* p, std::string* out) {
  const size_t n = strnlen(p, NG_PLUGIN_MAX_NAME + 1);
  if (n == 0 || n > NG_PLUGIN_MAX_NAME) return false;
  *out = std::string(p, n);
  if (!(p[0] >= 'a' && p[0] <= 'z')) return false;
  return std::all_of(out->begin(), out->end(),
                     [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; });
}

std::string quoted(const char* p, size_t max) {
  std::string s(p, strnlen(p, max));
  std::string q;
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02X", static_cast<unsigned char>(c));
      q += b;
    } else {
      q += c;
    }
  }
  return "'" + q + (s.size() == max ? "...'" : "'");
}

// Check variant i of lib; returns its name.
std::string check_variant(const std::string& path, size_t i, const ng_plugin_variant& v) {
  const std::string at = "plugin '" + path + "': variant " + std::to_string(i);
  auto bad = [&](const std::string& what) { return std::invalid_argument(at + ": " + what); };
  if (v.name == nullptr) throw bad("name is NULL");
  std::string name;
  if (!valid_name(v.name, &name))
    throw bad("name " + quoted(v.name, NG_PLUGIN_MAX_NAME + 1) + " is not 1.." + std::to_string(NG_PLUGIN_MAX_NAME) +
              " characters of [a-z0-9_] starting with a letter");
  const std::string vat = at + " ('" + name + "')";
  auto badv = [&](const std::string& what) { return std::invalid_argument(vat + ": " + what); };
  if (name == "all") throw badv("name 'all' is reserved (check --variant all)");
  if (v.op != NG_PLUGIN_OP_FWD && v.op != NG_PLUGIN_OP_BWD)
    throw badv("op is " + std::to_string(v.op) + " (expected 0 = NG_PLUGIN_OP_FWD or 1 = NG_PLUGIN_OP_BWD)");
  if (v.mode != NG_PLUGIN_MODE_DET && v.mode != NG_PLUGIN_MODE_NONDET)
    throw badv("mode is " + std::to_string(v.mode) + " (expected 0 = NG_PLUGIN_MODE_DET or 1 = NG_PLUGIN_MODE_NONDET)");
  if (v.h_min < 1 || v.h_min > seeds::kMaxH || v.h_max < v.h_min || v.h_max > seeds::kMaxH)
    throw badv("H range h_min=" + std::to_string(v.h_min) + ", h_max=" + std::to_string(v.h_max) +
               " (expected 1 <= h_min <= h_max <= 16384)");
  if (v.wdtypes == 0 || (v.wdtypes & ~NG_PLUGIN_WDTYPES_ALL) != 0)
    throw badv("wdtypes is 0x" + [&] { char b[16]; std::snprintf(b, sizeof b, "%X", v.wdtypes); return std::string(b); }() +
               " (expected a nonzero mask of bits 0x1 = bf16, 0x2 = fp32)");
  if (v.forms == 0 || (v.forms & ~NG_PLUGIN_FORMS_ALL) != 0)
    throw badv("forms is 0x" + [&] { char b[16]; std::snprintf(b, sizeof b, "%X", v.forms); return std::string(b); }() +
               " (expected a nonzero mask of bits 0x1 = plain, 0x2 = res, 0x4 = heads24, 0x8 = heads4)");
  if ((v.forms & ((1u << NG_PLUGIN_FORM_HEADS24) | (1u << NG_PLUGIN_FORM_HEADS4))) != 0 &&
      (v.h_min > 256 || v.h_max < 256))
    throw badv("forms include a head form (H = 256) but the H range " + std::to_string(v.h_min) + ".." +
               std::to_string(v.h_max) + " does not hold 256");
  if (v.memory != NG_PLUGIN_MEMORY_DEVICE && v.memory != NG_PLUGIN_MEMORY_HOST)
    throw badv("memory is " + std::to_string(v.memory) +
               " (expected 0 = NG_PLUGIN_MEMORY_DEVICE or 1 = NG_PLUGIN_MEMORY_HOST)");
  if (v.source_sha256 == nullptr) throw badv("source_sha256 is NULL");
  {
    const size_t n = strnlen(v.source_sha256, 65);
    const bool hex = std::all_of(v.source_sha256, v.source_sha256 + n,
                                 [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
    if (n != 64 || !hex)
      throw badv("source_sha256 " + quoted(v.source_sha256, 65) + " is not 64 lowercase hex digits");
  }
  if (v.description == nullptr) throw badv("description is NULL (use \"\" for none)");
  {
    const size_t n = strnlen(v.description, 201);
    if (n > 200) throw badv("description is longer than 200 bytes");
    if (std::any_of(v.description, v.description + n,
                    [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7F; }))
      throw badv("description " + quoted(v.description, 201) + " holds a control character (one line expected)");
  }
  if (v.fwd == nullptr) throw badv("fwd is NULL (every variant has a forward entry)");
  if (v.op == NG_PLUGIN_OP_BWD && v.bwd == nullptr) throw badv("bwd is NULL on a backward variant");
  if (v.op == NG_PLUGIN_OP_FWD && v.bwd != nullptr)
    throw badv("bwd is set on a forward variant (a forward variant is gated on its forward alone: give the "
               "backward its own variant with op = NG_PLUGIN_OP_BWD)");
  if (v.op == NG_PLUGIN_OP_FWD && v.bwd_workspace_bytes != nullptr)
    throw badv("bwd_workspace_bytes is set on a forward variant");
  if (v.memory == NG_PLUGIN_MEMORY_DEVICE) {
    std::string why;
    if (!detail::device_runs_possible(&why)) throw badv("a device-memory variant, but " + why);
  }
  if (const kernels::Variant* known = kernels::find_variant(name)) {
    // The same library loaded again may register its names again (it replaces
    // them with the same definitions); anyone else's name is a clash.
    if (!known->external)
      throw badv("name '" + name + "' is a registered variant of normgate (normgate variants lists them)");
    if (known->sources != "plugin " + path)
      throw badv("name '" + name + "' is already registered by " + std::string(known->sources));
  }
  return name;
}

std::string ran_on(bool device) {
  return device ? "plugin on " + detail::device_name() : "plugin on host (cpu)";
}

}  // namespace

std::vector<validators::ExternalImpl> load_plugin(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty()) throw std::invalid_argument("plugin '': empty path");
  if (!fs::exists(path, ec)) throw std::invalid_argument("plugin '" + path + "': no such file");
  if (!fs::is_regular_file(path, ec)) throw std::invalid_argument("plugin '" + path + "': not a regular file");
  auto lib = std::make_shared<Library>();
  lib->path = fs::absolute(path, ec).lexically_normal().string();
  if (ec) lib->path = path;
  dlerror();
  lib->handle = dlopen(lib->path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib->handle == nullptr) {
    const char* e = dlerror();
    throw std::invalid_argument("plugin '" + lib->path + "': cannot load it: " + (e ? e : "dlopen failed"));
  }
  // The handle is closed only when loading fails; a loaded plugin stays for
  // the life of the process (its impls call into it).
  struct CloseOnError {
    Library* lib;
    bool keep = false;
    ~CloseOnError() {
      if (!keep) dlclose(lib->handle);
    }
  } guard{lib.get()};
  const std::string at = "plugin '" + lib->path + "'";
  dlerror();
  void* sym = dlsym(lib->handle, NG_PLUGIN_ENTRY);
  if (sym == nullptr)
    throw std::invalid_argument(at + ": no symbol '" NG_PLUGIN_ENTRY
                                "' (not a normgate plugin; built against another ABI version: this normgate reads "
                                "ABI version " + std::to_string(NG_PLUGIN_ABI_VERSION) + ", capi/include/normgate/plugin.h; "
                                "or built with -fvisibility=hidden and the entry point not marked NG_PLUGIN_EXPORT)");
  const auto entry = reinterpret_cast<ng_plugin_entry_v1>(sym);
  const ng_plugin_table* table = entry();
  if (table == nullptr) throw std::invalid_argument(at + ": " NG_PLUGIN_ENTRY "() returned NULL");
  if (table->abi_version != NG_PLUGIN_ABI_VERSION)
    throw std::invalid_argument(at + ": abi_version is " + std::to_string(table->abi_version) +
                                ", this normgate reads ABI version " + std::to_string(NG_PLUGIN_ABI_VERSION) +
                                " (rebuild the plugin against this normgate's plugin.h)");
  if (table->num_variants < 1 || table->num_variants > NG_PLUGIN_MAX_VARIANTS)
    throw std::invalid_argument(at + ": num_variants is " + std::to_string(table->num_variants) + " (expected 1.." +
                                std::to_string(NG_PLUGIN_MAX_VARIANTS) + ")");
  if (table->variants == nullptr) throw std::invalid_argument(at + ": variants is NULL");

  std::vector<validators::ExternalImpl> impls;
  std::map<std::string, size_t> seen;
  for (size_t i = 0; i < table->num_variants; ++i) {
    const ng_plugin_variant& v = table->variants[i];
    const std::string name = check_variant(lib->path, i, v);
    if (auto it = seen.find(name); it != seen.end())
      throw std::invalid_argument(at + ": variant " + std::to_string(i) + ": name '" + name +
                                  "' is also variant " + std::to_string(it->second) + "'s");
    seen.emplace(name, i);
    auto pv = std::make_shared<PluginVariant>();
    pv->lib = lib;
    pv->v = &v;
    pv->name = name;
    pv->device = v.memory == NG_PLUGIN_MEMORY_DEVICE;
    validators::ExternalImpl e;
    e.name = name;
    e.op = v.op == NG_PLUGIN_OP_FWD ? kernels::Op::fwd : kernels::Op::bwd;
    e.mode = v.mode == NG_PLUGIN_MODE_DET ? kernels::Mode::det : kernels::Mode::nondet;
    e.h_min = v.h_min;
    e.h_max = v.h_max;
    e.wdtypes = static_cast<uint8_t>(v.wdtypes);
    e.forms = static_cast<uint8_t>(v.forms);
    e.source_sha256 = v.source_sha256;
    e.origin = "plugin " + lib->path;
    e.description = v.description;
    e.ran_on = ran_on(pv->device);
    e.cuda_device = pv->device ? 0 : -1;  // run_device computes on device 0 (device_name)
    e.host_bytes = [pv](const seeds::CaseId& c) { return detail::host_bytes(*pv, c); };
    e.run = [pv](const seeds::HostInputs& in, Outputs& out) {
      detail::Staging s = detail::stage(in, pv->v->op == NG_PLUGIN_OP_BWD);
      {
        std::lock_guard<std::mutex> lock(pv->lib->mu);
        if (pv->device) detail::run_device(*pv, s);
        else detail::run_host(*pv, s);
      }
      detail::finish(s, *pv, out);
    };
    impls.push_back(std::move(e));
  }
  guard.keep = true;
  return impls;
}

std::vector<const kernels::Variant*> register_plugins(const std::vector<std::string>& paths) {
  std::vector<validators::ExternalImpl> all;
  std::map<std::string, std::string> owner;  // variant name -> the path given for its plugin
  std::map<std::string, std::string> given;  // the library's canonical path -> the path given for it
  for (const auto& p : paths) {
    std::error_code ec;
    const std::string canon = std::filesystem::weakly_canonical(p, ec).string();
    if (!ec && !canon.empty()) {
      if (auto it = given.find(canon); it != given.end())
        throw std::invalid_argument("plugin '" + p + "' is given twice (--plugin '" + it->second + "' loads " + canon +
                                    " already): give each library once");
      given.emplace(canon, p);
    }
    for (auto& e : load_plugin(p)) {
      if (auto it = owner.find(e.name); it != owner.end())
        throw std::invalid_argument("plugin '" + p + "': variant '" + e.name + "' is also a variant of plugin '" +
                                    it->second + "'");
      owner.emplace(e.name, p);
      all.push_back(std::move(e));
    }
  }
  std::vector<const kernels::Variant*> out;
  for (auto& e : all) out.push_back(&validators::register_external(std::move(e)));
  return out;
}

}  // namespace normgate::plugin
