// tests/plugin/libs/test_plugin.cpp: small plugins for the loader's tests,
// one library per TP_CASE (tests/CMakeLists.txt builds each):
//   1 ok        one valid host variant "tp_ok" (fwd: y = x*w, rstd = 1; honours strides)
//   2 noentry   exports ng_plugin_v0 instead of ng_plugin_v1
//   3 version   abi_version 2
//   4 badsha    source_sha256 "abc"
//   5 dup       two variants named "tp_dup"
//   6 clash     a variant named "bwd_det_chunked" (a registered variant)
//   7 device    a valid device-memory variant "tp_device" (never run by the tests)
//   8 stride    host fwd that ignores the row stride (writes y contiguously)
//   9 einval    host fwd that returns NG_PLUGIN_EINVAL with a message (one byte of it not UTF-8)
//  10 null      ng_plugin_v1 returns NULL
//  11 badform   forms 0x10
//  12 fwdbwd    a forward variant with a bwd entry
//  13 same      a valid host variant named "ex_ref_bwd" (the host example's)
//  14 exit      host fwd that calls exit(0)
//  15 bigws     host bwd "tp_bigws" asking for a 2^40-byte workspace (the ABI's most)
//  16 midws     host bwd "tp_midws" asking for 64 MiB + 64 bytes a row of T; refuses T = 7
//  17 flaky     host bwd "tp_flaky", declared det, whose dw differs between calls
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "normgate/plugin.h"

#ifndef TP_CASE
#error "TP_CASE must be defined"
#endif

namespace {

const char* const kSha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

// y = BF16 bits of x*w for BF16 w (here: x copied, the test only checks layout), rstd = 1.
[[maybe_unused]] int fwd_ok(const ng_plugin_fwd_args* a, char*, size_t) {
  const int64_t rows = a->shape.T * a->shape.heads;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = r / a->shape.heads, h = r % a->shape.heads;
    const uint16_t* x = a->x + t * a->x_stride + h * a->x_stride_h;
    uint16_t* y = a->y + t * a->y_stride + h * a->y_stride_h;
    if (TP_CASE == 8) y = a->y + r * a->shape.H;  // ignores the strides
    memcpy(y, x, static_cast<size_t>(a->shape.H) * 2);
    a->rstd[r] = 1.0f;
  }
  if (a->h_new) {
    for (int64_t r = 0; r < rows; ++r)
      memcpy(a->h_new + r * a->h_new_stride, a->x + r * a->x_stride, static_cast<size_t>(a->shape.H) * 2);
  }
  return NG_PLUGIN_OK;
}

[[maybe_unused]] int fwd_einval(const ng_plugin_fwd_args* a, char* err, size_t n) {
  // Ends with a byte that is not UTF-8 and a valid U+00E9 (escape_invalid_utf8).
  snprintf(err, n, "tp_einval: refuses H=%lld \xff\xc3\xa9", static_cast<long long>(a->shape.H));
  return NG_PLUGIN_EINVAL;
}

[[maybe_unused]] int bwd_any(const ng_plugin_bwd_args*, char*, size_t) { return NG_PLUGIN_OK; }

// The largest workspace the ABI allows, more than any test host has.
[[maybe_unused]] int ws_huge(const ng_plugin_shape*, uint64_t* bytes, char*, size_t) {
  *bytes = uint64_t{1} << 40;
  return NG_PLUGIN_OK;
}

// A workspace that fits a run many times over but not many runs at once,
// slightly larger with each T (so a freed one does not fit the next).
[[maybe_unused]] int ws_mid(const ng_plugin_shape* s, uint64_t* bytes, char* err, size_t n) {
  if (s->T == 7) {
    snprintf(err, n, "tp_midws: no workspace for T=7");
    return NG_PLUGIN_EINVAL;
  }
  *bytes = (uint64_t{64} << 20) + 64 * static_cast<uint64_t>(s->T);
  return NG_PLUGIN_OK;
}

// dw 1.0 on odd calls, 2.0 on even ones (dx left unwritten).
[[maybe_unused]] int bwd_flaky(const ng_plugin_bwd_args* a, char*, size_t) {
  static int calls = 0;
  const float v = (++calls & 1) ? 1.0f : 2.0f;
  for (int64_t c = 0; c < a->shape.H; ++c) a->dw[c] = v;
  return NG_PLUGIN_OK;
}

// A kernel that ends the process with exit(0) (a library's abort path).
[[maybe_unused]] int fwd_exit(const ng_plugin_fwd_args*, char*, size_t) { exit(0); }

#define TP_VARIANT(name, op, memory, sha, forms, f, b) \
  { name, op, NG_PLUGIN_MODE_DET, 1, 16384, NG_PLUGIN_WDTYPES_ALL, forms, memory, sha, "test plugin", nullptr, f, b }

#if TP_CASE == 1 || TP_CASE == 2 || TP_CASE == 3 || TP_CASE == 10
const ng_plugin_variant kVariants[] = {TP_VARIANT("tp_ok", NG_PLUGIN_OP_FWD, NG_PLUGIN_MEMORY_HOST, kSha, NG_PLUGIN_FORMS_ALL, fwd_ok, nullptr)};
#elif TP_CASE == 4
const ng_plugin_variant kVariants[] = {TP_VARIANT("tp_badsha", NG_PLUGIN_OP_FWD, NG_PLUGIN_MEMORY_HOST, "abc", 1u, fwd_ok, nullptr)};
#elif TP_CASE == 5
const ng_plugin_variant kVariants[] = {TP_VARIANT("tp_dup", NG_PLUGIN_OP_FWD, NG_PLUGIN_MEMORY_HOST, kSha, 1u, fwd_ok, nullptr),
                                       TP_VARIANT("tp_dup", NG_PLUGIN_OP_FWD, NG_PLUGIN_MEMORY_HOST, kSha, 1u, fwd_ok, nullptr)};
#elif TP_CASE == 6
const ng_plugin_variant kVariants[] = {TP_VARIANT("bwd_det_chunked", NG_PLUGIN_OP_BWD, NG_PLUGIN_MEMORY_HOST, kSha, 1u, fwd_ok, bwd_any)};
#elif TP_CASE == 7
const ng_plugin_variant kVariants[] = {TP_VARIANT("tp_device", NG_PLUGIN_OP_FWD, NG_PLUGIN_MEMORY_DEVICE, kSha, 1u, fwd_ok, nullptr)};
#elif TP_CASE == 8
const ng_plugin_variant kVariants[] = {TP_VARIANT("tp_stride", NG_PLUGIN_OP_FWD, NG_PLUGIN_MEMORY_HOST, kSha, 1u, fwd_ok, nullptr)};
#elif TP_CASE == 9
const ng_plugin_variant kVariants[] = {TP_VARIANT("tp_einval", NG_PLUGIN_OP_FWD, NG_PLUGIN_MEMORY_HOST, kSha, 1u, fwd_einval, nullptr)};
#elif TP_CASE == 11
const ng_plugin_variant kVariants[] = {TP_VARIANT("tp_badform", NG_PLUGIN_OP_FWD, NG_PLUGIN_MEMORY_HOST, kSha, 0x10u, fwd_ok, nullptr)};
#elif TP_CASE == 12
const ng_plugin_variant kVariants[] = {TP_VARIANT("tp_fwdbwd", NG_PLUGIN_OP_FWD, NG_PLUGIN_MEMORY_HOST, kSha, 1u, fwd_ok, bwd_any)};
#elif TP_CASE == 14
const ng_plugin_variant kVariants[] = {TP_VARIANT("tp_exit", NG_PLUGIN_OP_FWD, NG_PLUGIN_MEMORY_HOST, kSha, 1u, fwd_exit, nullptr)};
#elif TP_CASE == 13
const ng_plugin_variant kVariants[] = {TP_VARIANT("ex_ref_bwd", NG_PLUGIN_OP_BWD, NG_PLUGIN_MEMORY_HOST, kSha, 1u, fwd_ok, bwd_any)};
#elif TP_CASE == 17
const ng_plugin_variant kVariants[] = {TP_VARIANT("tp_flaky", NG_PLUGIN_OP_BWD, NG_PLUGIN_MEMORY_HOST, kSha, 1u, fwd_ok, bwd_flaky)};
#elif TP_CASE == 16
const ng_plugin_variant kVariants[] = {{"tp_midws", NG_PLUGIN_OP_BWD, NG_PLUGIN_MODE_DET, 1, 16384, NG_PLUGIN_WDTYPES_ALL, 1u,
                                        NG_PLUGIN_MEMORY_HOST, kSha, "test plugin", ws_mid, fwd_ok, bwd_any}};
#elif TP_CASE == 15
const ng_plugin_variant kVariants[] = {{"tp_bigws", NG_PLUGIN_OP_BWD, NG_PLUGIN_MODE_DET, 1, 16384, NG_PLUGIN_WDTYPES_ALL, 1u,
                                        NG_PLUGIN_MEMORY_HOST, kSha, "test plugin", ws_huge, fwd_ok, bwd_any}};
#endif

const ng_plugin_table kTable = {TP_CASE == 3 ? 2u : static_cast<uint32_t>(NG_PLUGIN_ABI_VERSION),
                                static_cast<uint32_t>(sizeof kVariants / sizeof kVariants[0]), kVariants};

}  // namespace

#if TP_CASE == 2
extern "C" NG_PLUGIN_EXPORT const ng_plugin_table* ng_plugin_v0(void) { return &kTable; }
#elif TP_CASE == 10
extern "C" NG_PLUGIN_EXPORT const ng_plugin_table* ng_plugin_v1(void) { return nullptr; }
#else
extern "C" NG_PLUGIN_EXPORT const ng_plugin_table* ng_plugin_v1(void) { return &kTable; }
#endif
