// normgate/plugin/loader.h: load outside variants from plugin libraries (the
// C ABI of capi/include/normgate/plugin.h) and register them as external
// implementations (harness/external.h), so that check, gate and repro run
// them as they run the registry's variants.
//
// A plugin variant's run (ExternalImpl::run) does one training step on a
// case's host inputs:
//   1. lays the inputs out as the gate does (plain/res: rows of stride H + 8;
//      heads24: the q part of packed rows of 40*256; heads4: contiguous
//      [T, 4, 256]) and fills every output buffer with NaN (BF16 0x7FC0, FP32
//      0x7FC00000), rstd and dw with a guard of 16 NaN after them;
//   2. host-memory variant: calls fwd (then bwd) on those host buffers;
//      device-memory variant: allocates device buffers, uploads the inputs
//      and the poisoned outputs, fills the workspace with 0xFF bytes, calls
//      fwd then bwd on a fresh stream, synchronizes, downloads, frees
//      (every CUDA call checked);
//   3. checks that nothing outside an output's view was written (the row
//      gaps of y, dx, h_new and the guards of rstd and dw) and copies the
//      outputs into Outputs, contiguous over normalized rows: y, rstd
//      (h_new for form res) and, for a backward variant, dx and dw (a
//      forward variant leaves out.dx and out.dw as they were).
// Runtime failures (an entry's nonzero return with its message, a CUDA
// error, a write outside a view) throw std::runtime_error naming the
// library, the variant and what failed. Calls into one library are
// serialized (a mutex per library).
#pragma once

#include <string>
#include <vector>

#include "normgate/harness/external.h"
#include "normgate/kernels/registry.h"

namespace normgate::plugin {

/// Load the plugin at `path` (a shared library exporting ng_plugin_v1) and
/// build one ExternalImpl per variant it describes, in its order, without
/// registering them. Every field is validated (plugin.h: "What normgate
/// checks"); a name equal to a registered variant (kernels::find_variant) is
/// refused, unless it is an external variant this same library registered
/// (loading a library again re-registers the same definitions). Throws std::invalid_argument whose message starts
/// "plugin 'PATH': " and names the variant and field at fault: no such file,
/// dlopen's error, the missing entry symbol, a NULL table, another ABI
/// version, a bad variant count, a bad field, a duplicate name, a device
/// variant without CUDA or without a usable GPU. The library stays loaded
/// (its impls' run calls into it) until the process ends.
std::vector<validators::ExternalImpl> load_plugin(const std::string& path);

/// load_plugin for every path, then register every variant
/// (validators::register_external), in order. All libraries are loaded and
/// checked, names across them included, before the first registration:
/// an error registers nothing. Returns the registered variants. Throws
/// std::invalid_argument as load_plugin and for a name two plugins share.
std::vector<const kernels::Variant*> register_plugins(const std::vector<std::string>& paths);

}  // namespace normgate::plugin
