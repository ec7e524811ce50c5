// plugin/src/staging.h (internal): one plugin run's tensors in the gate's
// layout on the host, the argument structs over any copy of them (host or
// device pointers), and the check and extraction of the outputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "normgate/core/types.h"
#include "normgate/plugin.h"
#include "normgate/seeds/generate.h"

namespace normgate::plugin::detail {

inline constexpr uint16_t kPoisonBf16 = 0x7FC0;
inline constexpr uint32_t kPoisonF32 = 0x7FC00000u;
inline constexpr int64_t kRowPad = 8;     ///< plain and res rows: stride H + kRowPad
inline constexpr int64_t kGuard = 16;     ///< NaN elements after rstd and dw
inline constexpr uint64_t kMaxWorkspace = uint64_t{1} << 40;

/// A loaded library: its handle and the lock serializing calls into it.
struct Library {
  std::string path;  ///< absolute
  void* handle = nullptr;
  std::mutex mu;
};

/// One variant of a loaded library.
struct PluginVariant {
  std::shared_ptr<Library> lib;
  const ng_plugin_variant* v = nullptr;
  std::string name;
  bool device = false;
  /// "plugin 'PATH' variant 'NAME'", the prefix of every runtime error.
  std::string who() const;
};

/// The host copy of one run's tensors, rows in the gate's layout.
struct Staging {
  seeds::CaseId id;
  int64_t T = 0, H = 0, heads = 1, rows = 0;
  int64_t stride = 0, stride_h = 0;  ///< of every [T, heads, H] tensor
  size_t row_elems = 0;              ///< elements of one such buffer (T * stride)
  bool res = false, bwd = false;
  std::vector<uint16_t> x, dy, u, dh_new;  ///< inputs (u, dh_new: res)
  std::vector<uint16_t> y, dx, h_new;      ///< outputs, NaN-filled (dx: bwd; h_new: res)
  std::vector<float> rstd, dw;             ///< rows + kGuard, H + kGuard (dw: bwd)
  const void* w = nullptr;                 ///< the case's weight (host, in HostInputs)
  size_t w_bytes = 0;
  ng_plugin_shape shape{};
  float eps = 0;
};

/// The row stride of every [T, heads, H] staging buffer of case c, in
/// elements: H + kRowPad for plain and res rows, 40 x 256 for heads24 (a
/// packed qkv row), 4 x 256 for heads4.
int64_t row_stride(const seeds::CaseId& c);

/// Lay in's tensors out and poison the outputs. Throws std::invalid_argument
/// when in's vectors do not have the case's sizes.
Staging stage(const seeds::HostInputs& in, bool bwd);

/// Base pointers of one copy of the staging buffers (host or device).
struct Ptrs {
  const uint16_t *x = nullptr, *dy = nullptr, *u = nullptr, *dh_new = nullptr;
  const void* w = nullptr;
  uint16_t *y = nullptr, *dx = nullptr, *h_new = nullptr;
  float *rstd = nullptr, *dw = nullptr;
  void* workspace = nullptr;
  uint64_t workspace_bytes = 0;
  void* stream = nullptr;
};
ng_plugin_fwd_args fwd_args(const Staging& s, const Ptrs& p);
ng_plugin_bwd_args bwd_args(const Staging& s, const Ptrs& p);

/// The variant's workspace for s's shape (its bwd_workspace_bytes, 0 when
/// NULL). Throws std::runtime_error on an error return or more than 2^40 bytes.
uint64_t workspace_bytes(const PluginVariant& pv, const Staging& s);
uint64_t workspace_bytes(const PluginVariant& pv, bool bwd, const ng_plugin_shape& shape);

/// Host memory one run of case c holds beyond the case's inputs and the
/// Outputs it fills (ExternalImpl::host_bytes): the staging buffers, the
/// copies finish() makes, and a host variant's workspace (its
/// bwd_workspace_bytes, called under the library's lock). Throws as
/// workspace_bytes.
uint64_t host_bytes(const PluginVariant& pv, const seeds::CaseId& c);

/// Throw std::runtime_error "<who>: <entry> returned <rc>: <message>" unless
/// rc == NG_PLUGIN_OK.
void check_rc(const PluginVariant& pv, const char* entry, int rc, const char* err);

/// Check every element outside the outputs' views still holds the poison
/// (std::runtime_error naming the tensor and the first index otherwise), then
/// move the outputs into `out`, contiguous over rows.
void finish(Staging& s, const PluginVariant& pv, Outputs& out);

/// Run a host-memory variant on s (fwd, then bwd for a backward variant).
void run_host(const PluginVariant& pv, Staging& s);
/// Run a device-memory variant on s: upload, fwd, bwd, synchronize,
/// download (device.cu; a build without CUDA throws std::runtime_error).
void run_device(const PluginVariant& pv, Staging& s);
/// Whether device variants can run in this process; when not, *why says why.
bool device_runs_possible(std::string* why);
/// "gpu <device name>" for ExternalImpl::ran_on.
std::string device_name();

}  // namespace normgate::plugin::detail
