/* normgate/plugin.h: the C ABI of a normgate plugin, an outside RMSNorm
 * implementation that `normgate gate|check|repro|variants --plugin LIB.so`
 * loads and gates exactly as it gates the registered kernel variants.
 *
 * ABI version 1 (NG_PLUGIN_ABI_VERSION). Pure C (C99); every struct is plain
 * data in the field order shown, natural alignment, no packing. A plugin is a
 * shared library exporting ONE function,
 *
 *     const ng_plugin_table* ng_plugin_v1(void);
 *
 * (declare it with NG_PLUGIN_EXPORT). It returns a pointer to a table with
 * static storage (valid until the library is unloaded; normgate never unloads
 * a plugin it registered) describing 1 .. NG_PLUGIN_MAX_VARIANTS variants.
 * A later, incompatible ABI gets a new entry name (ng_plugin_v2) and version;
 * a library built against another version is refused at load, naming both.
 * ng_plugin_v1 may be called more than once and must return the same table.
 *
 * What normgate checks when it loads a plugin (each violation is an input
 * error, exit 2 before any work, naming the library, the variant and the
 * field): the entry symbol; table->abi_version == NG_PLUGIN_ABI_VERSION;
 * 1 <= num_variants <= NG_PLUGIN_MAX_VARIANTS and variants != NULL; per
 * variant every field as documented on ng_plugin_variant below; no name twice
 * (in one plugin, across plugins, or equal to a registered variant, e.g.
 * "bwd_det_chunked"); a device-memory variant needs a normgate built with
 * CUDA and a usable GPU.
 *
 * Tensors and units (the layouts of kernels/include/normgate/kernels/rmsnorm.h):
 *   - BF16 tensors are bit patterns (uint16_t per element); FP32 tensors are
 *     IEEE binary32; w is BF16 bits or binary32 as w_dtype says.
 *   - Strides are in ELEMENTS (not bytes), int64. The inner dimension of
 *     every row is contiguous.
 *   - Forms: plain: x, y, dy, dx are [T, H], row t at p + t*stride.
 *     res: plain rows plus the fused residual add: the forward reads h (in
 *     x) and u [T, H], writes h_new = BF16(h + u) (ONE rounding of the exact
 *     sum; checked bit for bit) and normalizes h_new; the backward's x is the
 *     forward's h_new and it adds the optional dh_new [T, H] to dx before the
 *     one rounding (dx then holds dh = dx + dh_new).
 *     heads24 / heads4: [T, heads, 256] views (heads = 24 or 4, H = 256);
 *     normalized row r = t*heads + h lives at p + t*stride + h*stride_h; one
 *     w[256] is shared by every head. rstd is [T*heads], contiguous.
 *   - Rows normalized: rows = T*heads (heads = 1 for plain and res), 0 .. 2^31.
 *     T = 0 is a valid call: nothing to normalize, but dw must be written
 *     (zeros).
 *   - How normgate lays tensors out when it gates (a plugin must honour the
 *     strides it is given, not assume these): plain and res rows of stride
 *     H + 8; heads24 the q part of packed rows of 40*256 (stride 10240,
 *     stride_h 256); heads4 contiguous [T, 4, 256]. Every output buffer is
 *     filled with NaN (BF16 0x7FC0, FP32 0x7FC00000) before the call, and
 *     the gaps between rows and a guard after rstd and dw are checked
 *     afterwards: a write outside an output's view fails the case as a
 *     finding about the variant ("contract broken: ...": its window FAILs
 *     and no rerun replaces it; normgate check says FAIL, exit 1).
 *
 * Math a variant is gated against (validators/budget.h; every element, FP64
 * oracle): y = x * rstd * w with rstd = 1/sqrt(mean(x^2) + eps) per row;
 * dx = rstd * (g - xhat * mean(g * xhat)) with g = dy * w, xhat = x * rstd;
 * dw_j = sum over rows of dy * xhat (column j). Budgets: y, dx: atol 1e-2,
 * rtol 1e-2; rstd: rtol 1e-5; dw: atol 1e-4, rtol 1e-4 against FP64 (on the
 * `cancel` family, columns with condition number up to 1e8: an FP32 sum
 * fails there); h_new: bitwise.
 *
 * Memory space (ng_plugin_variant::memory):
 *   NG_PLUGIN_MEMORY_DEVICE: every tensor pointer, the workspace included,
 *     is CUDA device memory on the current device (device 0), and `stream`
 *     is a cudaStream_t (passed as void*, never NULL) on which the call
 *     enqueues its work. It may return before the work finishes; normgate
 *     synchronizes the stream after the backward (the forward's results are
 *     read by the backward through stream order). Work on other streams must
 *     be joined back into `stream` before returning.
 *   NG_PLUGIN_MEMORY_HOST: every pointer is host memory and `stream` is
 *     NULL; the call computes synchronously. For CPU implementations (and
 *     CI machines without a GPU).
 * Ownership: every buffer belongs to normgate and is valid only during the
 * call; a plugin must not free it, keep it, or write anything but its
 * outputs (within their views) and the workspace. Inputs are const.
 *
 * Threads: normgate never calls into one plugin library from two threads at
 * once (calls are serialized per library), but consecutive calls may come
 * from different threads.
 *
 * Errors: every entry returns NG_PLUGIN_OK (0) on success, or
 *   NG_PLUGIN_EINVAL (2): the arguments are outside what the variant
 *                         supports (a shape it declared but cannot run);
 *   NG_PLUGIN_EFAIL (1):  anything else (a CUDA error, out of memory).
 * On failure it writes a NUL-terminated message (at most err_size bytes,
 * err_size >= NG_PLUGIN_ERR_BYTES; truncate, never overflow) into `err`; any
 * other return value counts as a failure too. A failing call fails the case
 * (a runtime error naming the plugin, the variant, the entry and the
 * message); C++ exceptions must never cross this ABI.
 *
 * Source identity (ng_plugin_variant::source_sha256): 64 lowercase hex
 * digits naming the exact code of the variant. Approvals of a variant name
 * this hash; when it changes, they go stale and the window must be gated
 * again. The plugin computes it at build time over its source files; with
 * CMake, include cmake/NormgatePlugin.cmake and call
 *     normgate_plugin_sha256(VAR file1.cu file2.h ...)
 * which sets VAR to the SHA-256 of the manifest "sha256(file)  file\n" over
 * the files in order (paths as given, relative to CMAKE_CURRENT_SOURCE_DIR:
 * reproducible with `sha256sum file1.cu file2.h | sha256sum`) and re-runs
 * CMake when a file changes; pass it to the compiler, e.g.
 * target_compile_definitions(t PRIVATE MY_SHA256="${VAR}").
 * examples/plugin/ has two complete plugins.
 */
#ifndef NORMGATE_PLUGIN_H
#define NORMGATE_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define NG_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define NG_PLUGIN_EXPORT
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header; the table's abi_version must equal it. */
#define NG_PLUGIN_ABI_VERSION 1
/* The one symbol a plugin of this version exports. */
#define NG_PLUGIN_ENTRY "ng_plugin_v1"
/* Most variants one plugin may describe. */
#define NG_PLUGIN_MAX_VARIANTS 64
/* Longest variant name, in bytes (without the NUL). */
#define NG_PLUGIN_MAX_NAME 64
/* Size of the error buffer normgate passes (bytes, NUL included). */
#define NG_PLUGIN_ERR_BYTES 1024

/* Return codes of the entries. */
#define NG_PLUGIN_OK 0
#define NG_PLUGIN_EFAIL 1
#define NG_PLUGIN_EINVAL 2

/* op: which half of the training step the variant is gated on. A forward
 * variant is gated in forward windows (y, rstd; h_new for res) and has no
 * backward entry; a backward variant is gated in backward windows on a whole
 * step, its own forward then its backward (y, rstd, dx, dw; h_new). */
#define NG_PLUGIN_OP_FWD 0
#define NG_PLUGIN_OP_BWD 1
/* mode: whether repeated runs give bitwise identical outputs. A det variant
 * may serve nondet windows (it keeps the weaker promise), not the reverse.
 * check and gate run a det variant (and every forward) twice per case and
 * compare every output bit; a difference is that case's error. */
#define NG_PLUGIN_MODE_DET 0
#define NG_PLUGIN_MODE_NONDET 1
/* Weight dtypes (w_dtype) and forms (form): the values of capi.h's NG_W_*
 * and NG_FORM_*, and of normgate::WDtype and normgate::Form. */
#define NG_PLUGIN_W_BF16 0
#define NG_PLUGIN_W_FP32 1
#define NG_PLUGIN_FORM_PLAIN 0
#define NG_PLUGIN_FORM_RES 1
#define NG_PLUGIN_FORM_HEADS24 2
#define NG_PLUGIN_FORM_HEADS4 3
/* Bit masks of the wdtypes and forms fields: bit (1 << value). */
#define NG_PLUGIN_WDTYPES_ALL 0x3u
#define NG_PLUGIN_FORMS_ALL 0xFu
/* memory: where the tensors of the calls live (see the top of this file). */
#define NG_PLUGIN_MEMORY_DEVICE 0
#define NG_PLUGIN_MEMORY_HOST 1

/* The shape of one call (what a workspace size depends on). */
typedef struct ng_plugin_shape {
  int64_t T;       /* tokens, 0 .. 2^31 / heads */
  int64_t H;       /* normalized length: within the variant's [h_min, h_max]; 256 for the head forms */
  int64_t heads;   /* 1 (plain, res), 24 (heads24) or 4 (heads4) */
  int32_t w_dtype; /* NG_PLUGIN_W_* */
  int32_t form;    /* NG_PLUGIN_FORM_* */
} ng_plugin_shape;

/* Forward arguments. Inputs x [T, H] BF16 (form res: h), w [H], u (res);
 * outputs y [T, H] BF16, rstd [T*heads] FP32 (1/sqrt(mean(x^2) + eps) of
 * each normalized row, res: of h_new), h_new (res). Head forms: x and y are
 * [T, heads, 256] views. */
typedef struct ng_plugin_fwd_args {
  ng_plugin_shape shape;
  float eps;                /* binary32, finite, > 0 */
  const uint16_t* x;        /* BF16 bits */
  int64_t x_stride;         /* elements between tokens (plain, res: >= H) */
  int64_t x_stride_h;       /* head forms: elements between heads of a token; else 0 */
  const void* w;            /* [H]: BF16 bits (w_dtype BF16) or binary32 */
  uint16_t* y;              /* BF16 bits, output */
  int64_t y_stride;
  int64_t y_stride_h;
  float* rstd;              /* FP32 [T*heads], output, contiguous */
  const uint16_t* u;        /* form res: [T, H] BF16, the residual branch; else NULL */
  int64_t u_stride;
  uint16_t* h_new;          /* form res: [T, H] BF16 output, BF16(h + u) one rounding; else NULL */
  int64_t h_new_stride;
  void* stream;             /* device variants: cudaStream_t; host variants: NULL */
} ng_plugin_fwd_args;

/* Backward arguments. Inputs dy, x (res: the forward's h_new) [T, H] BF16,
 * w [H], rstd [T*heads] FP32 (this variant's own forward output), eps (the
 * forward's, for a backward that recomputes rstd more precisely), dh_new
 * (res, optional); outputs dx [T, H] BF16 (res: dh = dx + dh_new, one
 * rounding), dw [H] FP32 (ALWAYS written, zeros when T == 0). */
typedef struct ng_plugin_bwd_args {
  ng_plugin_shape shape;
  float eps;
  const uint16_t* dy;       /* BF16 bits */
  int64_t dy_stride;
  int64_t dy_stride_h;
  const uint16_t* x;        /* BF16 bits (res: h_new) */
  int64_t x_stride;
  int64_t x_stride_h;
  const void* w;            /* [H], w_dtype */
  const float* rstd;        /* FP32 [T*heads] */
  uint16_t* dx;             /* BF16 bits, output */
  int64_t dx_stride;
  int64_t dx_stride_h;
  float* dw;                /* FP32 [H], output */
  const uint16_t* dh_new;   /* form res: [T, H] BF16 or NULL (dh = dx); else NULL */
  int64_t dh_new_stride;
  void* workspace;          /* workspace_bytes bytes in the variant's memory space, 256-byte
                               aligned, contents undefined on entry; NULL when 0 bytes */
  uint64_t workspace_bytes; /* what bwd_workspace_bytes returned for this shape */
  void* stream;             /* device variants: cudaStream_t; host variants: NULL */
} ng_plugin_bwd_args;

/* One variant. Every string is NUL-terminated with static storage. */
typedef struct ng_plugin_variant {
  const char* name;          /* [a-z][a-z0-9_]*, at most NG_PLUGIN_MAX_NAME bytes; unique among
                                every plugin and registered variant; what route tables name */
  int32_t op;                /* NG_PLUGIN_OP_FWD | NG_PLUGIN_OP_BWD */
  int32_t mode;              /* NG_PLUGIN_MODE_DET | NG_PLUGIN_MODE_NONDET */
  int64_t h_min, h_max;      /* supported H, inclusive, 1 <= h_min <= h_max <= 16384; a head form
                                in `forms` needs 256 in the range */
  uint32_t wdtypes;          /* bit (1 << NG_PLUGIN_W_*) per supported weight dtype; nonzero,
                                no bit outside NG_PLUGIN_WDTYPES_ALL */
  uint32_t forms;            /* bit (1 << NG_PLUGIN_FORM_*) per supported form; nonzero, no bit
                                outside NG_PLUGIN_FORMS_ALL */
  int32_t memory;            /* NG_PLUGIN_MEMORY_DEVICE | NG_PLUGIN_MEMORY_HOST */
  const char* source_sha256; /* 64 lowercase hex digits (top of this file) */
  const char* description;   /* one line (no control characters), at most 200 bytes; may be "" */
  /* Workspace of one backward call: *bytes for `shape` (0: none; at most
   * 2^40). NULL: no workspace ever. Returns NG_PLUGIN_OK or an error as the
   * entries do. Must not be set on a forward variant. Also called before a
   * gate, check, repro or export starts (a gate: for each window's grid T
   * and its upper T): a host variant's workspace counts in the host-memory
   * check made before any work (more than the process may use is a usage
   * error, exit 2), and an error return there refuses the run (exit 2,
   * naming the case). A host workspace is mapped for its run and unmapped
   * after it. */
  int (*bwd_workspace_bytes)(const ng_plugin_shape* shape, uint64_t* bytes, char* err, size_t err_size);
  /* Forward: writes y, rstd (and h_new for res). Required. */
  int (*fwd)(const ng_plugin_fwd_args* args, char* err, size_t err_size);
  /* Backward: writes dx, dw. Required for a backward variant, NULL for a
   * forward one. Called after this variant's own fwd on the same inputs. */
  int (*bwd)(const ng_plugin_bwd_args* args, char* err, size_t err_size);
} ng_plugin_variant;

/* What ng_plugin_v1 returns. */
typedef struct ng_plugin_table {
  uint32_t abi_version;                /* NG_PLUGIN_ABI_VERSION (the header the plugin was built with) */
  uint32_t num_variants;               /* 1 .. NG_PLUGIN_MAX_VARIANTS */
  const ng_plugin_variant* variants;   /* num_variants entries */
} ng_plugin_table;

/* The entry point's type, for dlsym. */
typedef const ng_plugin_table* (*ng_plugin_entry_v1)(void);

#ifdef __cplusplus
}
#endif

#endif /* NORMGATE_PLUGIN_H */
