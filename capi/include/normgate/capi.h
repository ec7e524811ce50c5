/* normgate/capi.h: the C ABI of libnormgate_capi.so (build/capi/).
 *
 * A small, stable C interface over normgate's RMSNorm training kernels, its
 * host input generator and its FP64 oracle, for callers outside C++ (the
 * Python package python/normgate loads it with ctypes). Pure C (C99); every
 * struct is plain data in the field order shown, natural alignment, no
 * packing. ABI history: 0.2.0 appended `msq` to ng_fwd_args (152 bytes) and
 * ng_bwd_args (168 bytes); callers built against 0.1.0 headers must rebuild
 * (check ng_version()). Routed dispatch (same version; detect it by the
 * symbol ng_route_for) added NG_EROUTE, ng_bwd_routed and the routing
 * functions, and changed the meaning of a NULL ng_fwd_args.variant from
 * "fwd_rowwise" to "the routed variant". External implementations and the
 * gate (same version; detect them by the symbol ng_gate) added NG_ECANCEL,
 * ng_register_external, ng_gate_options_init, ng_gate and ng_free_string (and
 * later ng_table_file: detect it by its symbol); their structs start
 * with their own size (struct_size), so that later versions can append
 * fields and still accept callers built against this header.
 *
 * Tensors and units:
 *   - BF16 tensors are bit patterns (uint16_t per element); FP32 tensors are
 *     IEEE binary32.
 *   - Strides and element counts are in ELEMENTS (not bytes), int64/uint64.
 *   - Rows: plain and res are [T, H]; the head forms heads24 and heads4 are
 *     [T, heads, 256] views (row r = t*heads + h, rstd [T*heads], one w[256]
 *     shared by all heads). Host buffers of this API are contiguous over rows
 *     ([T*heads, H]); device tensors of ng_fwd / ng_bwd may be strided views.
 *   - Kernel calls (ng_fwd, ng_bwd) take DEVICE pointers and enqueue on the
 *     given CUDA stream (a cudaStream_t passed as void*; NULL: the legacy
 *     default stream) without synchronizing. Everything else is host-side.
 *   - Kernel math, alignment rules and the vector/scalar paths are those of
 *     kernels/include/normgate/kernels/rmsnorm.h; the oracle and budgets those
 *     of oracle/reference.h and validators/budget.h.
 *
 * Errors: every function returning int returns
 *   NG_OK (0)          success;
 *   NG_EINVAL (2)      an invalid argument (a null or misaligned pointer, a
 *                      bad case id, unknown variant, wrong size, ...): nothing
 *                      was enqueued or written;
 *   NG_EROUTE (3)      the route table refuses the call (see "Which kernel
 *                      runs" below: no current approval for its window, or
 *                      outside every window in strict mode), or the table
 *                      cannot be loaded: nothing was enqueued;
 *   NG_EFAIL (1)       any other failure (a CUDA error, a library built
 *                      without CUDA, out of memory).
 *
 * Which kernel runs (ng_fwd with a NULL variant, ng_bwd_routed): the variant
 * the route table routes for the call's exact (op, mode, H, T, weight dtype,
 * form), if its window has a CURRENT approval (routing/routing.h: approved
 * by a GPU gate of the variant's present source hash; approvals of CPU-model
 * gates do not count). The table is loaded once, lazily, on the first call
 * that needs it (thread-safe), from
 *   1. $NORMGATE_ROUTES (a route-table .toml; its approvals beside it,
 *      <stem>.approvals.json), else
 *   2. the table installed with the library:
 *      <prefix>/share/normgate/routes/sm90a.toml, found relative to this
 *      .so (<prefix>/lib/...), else
 *   3. in the build tree only (the .so where the build made it): the source
 *      tree's routes/sm90a.toml.
 *   In 2 and 3, where a per-GPU table of CUDA device 0 (as the process sees
 *   it: CUDA_VISIBLE_DEVICES applies) lies beside sm90a.toml, it is loaded
 *   instead: sm90a@SLUG.toml, SLUG the device name with ASCII letters
 *   lowercased, digits kept and every run of other characters one '-', none
 *   at either end (NVIDIA H100
 *   80GB HBM3: sm90a@nvidia-h100-80gb-hbm3.toml), derived from that GPU
 *   model's timings and sharing sm90a.approvals.json
 *   (routing/routing.h, "Per-GPU tables"; docs/perf/routes.md, D26).
 *   sm90a.toml serves every other sm_90a GPU (its timings are the H200's).
 *   Reading device 0's name initializes the CUDA runtime (not a context)
 *   when the default table loads, also from ng_route_for. The table
 *   field of ng_route_info names the file loaded.
 * Each call is then a cached lookup (two binary searches; tens of ns,
 * bench/dispatch_bench.cpp), far below a kernel launch.
 *   - A window without a current approval: NG_EROUTE; ng_last_error names
 *     the call, the window, the table and approvals files, and what is
 *     missing or stale. Overrides: name the variant (ng_fwd_args.variant,
 *     ng_bwd), or, for experiments, NORMGATE_DISPATCH=allow-unapproved in the
 *     environment when the table loads (announced once on stderr).
 *     NORMGATE_DISPATCH=accept-cpu-model lets CPU-model approvals count
 *     (tokens comma-separated; an unknown token: NG_EROUTE at load).
 *   - Outside every window (an H or form the table does not route, T past
 *     its windows): the table's `fallback` variant, with a warning on stderr
 *     once per (op, mode, H, w, form) (ng_set_route_warnings turns stderr
 *     off; ng_route_info.warned/message still report it); NG_EROUTE instead
 *     in strict mode (NORMGATE_STRICT_ROUTES=1 in the environment at the
 *     first call, or ng_set_strict_routes) or when the table names none.
 *   - T = 0 is served by the window holding T = 1.
 * ng_route_for answers the same question without running anything, and
 * ng_last_route says what the last kernel call of this thread ran.
 * No C++ exception ever crosses this ABI. After a failing call,
 * ng_last_error() returns a message naming the function and the bad value;
 * it is thread-local and valid until the next ng_* call on the same thread
 * (every call clears it on entry; "" after a success).
 */
#ifndef NORMGATE_CAPI_H
#define NORMGATE_CAPI_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define NG_API __attribute__((visibility("default")))
#else
#define NG_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Return codes. */
#define NG_OK 0
#define NG_EFAIL 1
#define NG_EINVAL 2
#define NG_EROUTE 3
#define NG_ECANCEL 4  /* ng_gate, ng_export: cancelled between cases (a gate's journal resumes; an export
                         writes nothing) */

/* The most OpenMP threads a call takes (threads above it: NG_EINVAL naming
 * the value; libgomp fails to start ~1e5 threads and the process dies). */
#define NG_MAX_THREADS 4096

/* Weight dtypes (the w_dtype fields): values of normgate::WDtype. */
#define NG_W_BF16 0
#define NG_W_FP32 1

/* Forms (the form fields): values of normgate::Form (core/types.h). */
#define NG_FORM_PLAIN 0   /* [T, H] rows */
#define NG_FORM_RES 1     /* [T, H], fused residual add: h_new = BF16(h + u) */
#define NG_FORM_HEADS24 2 /* [T, 24, 256] (q part of a packed qkv row) */
#define NG_FORM_HEADS4 3  /* [T, 4, 256] */

/* Ops and backward modes (ng_route_for, ng_bwd_routed). */
#define NG_OP_FWD 0
#define NG_OP_BWD 1
#define NG_MODE_DET 0    /* bitwise deterministic backward */
#define NG_MODE_NONDET 1 /* may differ in the last bits of dw between runs */

/* ng_route_info::how: how the variant was chosen. */
#define NG_ROUTE_ROUTED 0     /* the window holding the call; current approval */
#define NG_ROUTE_UNAPPROVED 1 /* that window without a current approval, run by NORMGATE_DISPATCH=allow-unapproved */
#define NG_ROUTE_FALLBACK 2   /* no window holds the call: the table's fallback variant */
#define NG_ROUTE_EXPLICIT 3   /* the caller named the variant; no approval consulted */
#define NG_ROUTE_REFUSED 4    /* ng_route_for only: a kernel call would fail with NG_EROUTE */

/* ng_route_info::approval: the approval state of the window holding the call. */
#define NG_APPROVAL_CURRENT 0
#define NG_APPROVAL_MISSING 1
#define NG_APPROVAL_STALE 2          /* approved, but the variant's sources changed since */
#define NG_APPROVAL_CPU_MODEL_ONLY 3 /* only a CPU-model gate approved it (not accepted) */
#define NG_APPROVAL_NONE 4           /* no window holds the call */
#define NG_APPROVAL_INVALID 5        /* no current approval; an INVALID record of the approvals file holds the window */

/* Size of ng_case_info_t::canonical (bytes, including the terminating NUL). */
#define NG_CASE_ID_BYTES 256
/* A JSON buffer of this many bytes always holds ng_oracle_validate's report. */
#define NG_REPORT_BYTES 65536

/* Library version and commit, e.g. "normgate 0.2.0 (b814cc6ce1a7)". Static
 * storage; never NULL. */
NG_API const char* ng_version(void);

/* The message of the last failing ng_* call of this thread ("" if the last
 * call succeeded). Valid until the next ng_* call on this thread. */
NG_API const char* ng_last_error(void);

/* *out = 1 when a usable CUDA device is present (device 0) and the library
 * was built with CUDA, else 0. out must not be NULL. */
NG_API int ng_device_available(int* out);

/* ---- kernels ------------------------------------------------------------ */

/* Forward arguments (normgate::kernels::FwdArgs). All pointers DEVICE.
 * x, y: BF16 [T, H] (form res: x holds h), row t at p + t*stride; head forms
 * [T, heads, 256], row (t, h) at p + t*stride + h*stride_h. rstd: FP32
 * [T*heads], contiguous. w: [H], BF16 (w_dtype NG_W_BF16) or FP32. */
typedef struct ng_fwd_args {
  const char* variant;  /* NULL or "": the routed variant (capi.h top: "Which kernel
                           runs"); a forward variant's name: that variant, an
                           explicit override (no approval consulted) */
  const void* x;        /* BF16 bits */
  int64_t x_stride;     /* elements between tokens (>= H for plain/res) */
  int64_t x_stride_h;   /* head forms: elements between heads; else ignored (0) */
  const void* w;        /* [H], w_dtype */
  int32_t w_dtype;      /* NG_W_BF16 | NG_W_FP32 */
  int32_t form;         /* NG_FORM_* */
  void* y;              /* BF16 bits, output; must not overlap x, w, rstd */
  int64_t y_stride;
  int64_t y_stride_h;
  void* rstd;           /* FP32 [T*heads], output */
  int64_t T;            /* tokens; T*heads in 0 .. 2^32 (0: nothing is launched) */
  int64_t H;            /* normalized length, 1 .. 16384 (256 for head forms) */
  int64_t heads;        /* 1 (plain, res), 24 (heads24) or 4 (heads4) */
  float eps;            /* binary32 (the kernel's own eps), normal: finite and
                           1.17549435e-38 (FLT_MIN) <= eps <= FLT_MAX; a subnormal,
                           zero or negative eps is NG_EINVAL naming the value */
  /* Form res only (NULL/0 otherwise): u [T, H] BF16, the residual branch;
   * h_new [T, H] BF16 output = BF16(h + u) (one rounding), what is normalized. */
  const void* u;
  int64_t u_stride;
  void* h_new;
  int64_t h_new_stride;
  /* Optional (NULL: not written): binary64 [T*heads] output, 8-byte aligned,
   * each row's m = mean(x^2) + eps whose 1/sqrt rstd rounds to FP32. Pass
   * it to ng_bwd (ng_bwd_args.msq) for a dw free of the FP32 rstd's rounding. */
  void* msq;
} ng_fwd_args;

/* Backward arguments (normgate::kernels::BwdArgs). All pointers DEVICE.
 * dy, x, dx: BF16 as in ng_fwd_args (form res: x is the forward's h_new);
 * rstd: the forward's FP32 [T*heads]; dw: FP32 [H] output, always written. */
typedef struct ng_bwd_args {
  const void* dy;       /* BF16 bits */
  int64_t dy_stride;    /* head forms: may be 0 (an expanded dy), as may dy_stride_h */
  int64_t dy_stride_h;
  const void* x;        /* BF16 bits */
  int64_t x_stride;
  int64_t x_stride_h;
  const void* w;        /* [H], w_dtype */
  int32_t w_dtype;      /* NG_W_BF16 | NG_W_FP32 */
  int32_t form;         /* NG_FORM_* */
  const void* rstd;     /* FP32 [T*heads] */
  void* dx;             /* BF16 bits, output (form res: dh = dx + dh_new, one rounding) */
  int64_t dx_stride;
  int64_t dx_stride_h;
  void* dw;             /* FP32 [H], output */
  int64_t T;
  int64_t H;
  int64_t heads;
  void* workspace;      /* device, 16-byte aligned, >= ng_bwd_workspace_bytes(); may be
                           NULL when that is 0; contents on entry do not matter */
  uint64_t workspace_bytes;
  /* Form res only (optional there; NULL otherwise): dh_new [T, H] BF16. */
  const void* dh_new;
  int64_t dh_new_stride;
  /* Optional (NULL: dw uses rstd as it is): the forward's msq, binary64
   * [T*heads], 8-byte aligned, not overlapping dx, dw or the workspace; dw
   * then uses each row's rstd refined against it (kernels/rstd.h
   * rstd_refined). A zero-initialized struct gives NULL. */
  const void* msq;
} ng_bwd_args;

/* RMSNorm forward: y and rstd (and h_new for res), with the routed variant
 * for (fwd, H, T, w_dtype, form) (a->variant NULL or "") or the named one.
 * The variant is chosen first (NG_EROUTE: refused, nothing enqueued; the
 * decision is what ng_last_route reports after a success), then arguments
 * are validated (NG_EINVAL naming the first bad value; nothing enqueued),
 * then the kernel is enqueued on `stream`. A library built without CUDA
 * returns NG_EFAIL ("... built without CUDA") after validation. */
NG_API int ng_fwd(const ng_fwd_args* a, void* stream);

/* RMSNorm backward with the NAMED variant, an explicit override (no
 * approval consulted): e.g. "bwd_det_chunked" (bitwise deterministic) or
 * "bwd_nondet_atomic" (FP64 atomics; dw may vary in the last bits); any
 * backward variant of ng_variant_info. Negative controls (ctl_*), forward
 * variants and NULL are refused (NG_EINVAL; ng_bwd_routed runs the routed
 * one). Validation, enqueueing and errors as ng_fwd. */
NG_API int ng_bwd(const char* variant, const ng_bwd_args* a, void* stream);

/* RMSNorm backward with the routed variant for (bwd, mode, H, T, w_dtype,
 * form) (capi.h top: "Which kernel runs"). mode: NG_MODE_DET or
 * NG_MODE_NONDET (a det variant may serve nondet). The workspace must hold
 * what the routed variant needs: ng_route_for's workspace_bytes for the same
 * call. NG_EROUTE when refused (nothing enqueued); otherwise as ng_bwd. */
NG_API int ng_bwd_routed(int32_t mode, const ng_bwd_args* a, void* stream);

/* Device workspace in bytes that ng_bwd(variant, ...) needs for T_rows
 * normalized rows (T*heads) of length H (0 when T_rows == 0). NG_EINVAL for
 * an unknown, forward or control variant, T_rows outside 0 .. 2^32, or H
 * outside the variant's range. */
NG_API int ng_bwd_workspace_bytes(const char* variant, int64_t T_rows, int64_t H, uint64_t* out);

/* ---- routing: which variant serves a call ------------------------------ */

/* A routing decision (72 bytes). Strings: variant and table have static
 * storage (valid until the process ends); message is thread-local, valid
 * until the next ng_* call on this thread. */
typedef struct ng_route_info {
  const char* variant;      /* registry name of the variant that runs (REFUSED with a
                               window: the window's variant; REFUSED without: "") */
  const char* table;        /* path of the route table in use */
  const char* message;      /* REFUSED: why (as ng_last_error); a call that
                               emitted the fallback warning: the warning; else "" */
  int32_t how;              /* NG_ROUTE_* */
  int32_t approval;         /* NG_APPROVAL_* of the window holding the call */
  int64_t t_lo;             /* that window's T range, both inclusive; 0, 0 when none */
  int64_t t_hi;
  int32_t op;               /* NG_OP_* of the call */
  int32_t mode;             /* NG_MODE_* of the call (the forward serves both) */
  int32_t warned;           /* 1: this call emitted the one-time fallback warning */
  int32_t reserved;         /* 0 */
  uint64_t workspace_bytes; /* bwd: ng_bwd_routed's workspace for this call (the
                               variant's need for T*heads rows); fwd, REFUSED, an external variant: 0 */
} ng_route_info;

/* Which variant a kernel call (op, mode, H, T tokens, w_dtype, form) would
 * run, without running it and without emitting the fallback warning.
 * variant NULL or "": the routed decision, under the current strict setting
 * and policy; a name: the explicit override's checks (NG_EINVAL naming the
 * problem: unknown, other op, a control, nondet for a det call, H/w/form
 * unsupported). Loads the table on first use. Returns NG_OK, or NG_EROUTE
 * when a kernel call would be refused: *out is filled either way (how =
 * NG_ROUTE_REFUSED, message = why); NG_EROUTE without filling *out when the
 * table cannot be loaded; NG_EINVAL for a bad op, mode (op bwd: a forward
 * call ignores mode), w_dtype, form, T < 0,
 * T*heads over 2^32, H outside 1..16384, a head form at H != 256, or out
 * NULL (the limits of a launch, checked here too). */
NG_API int ng_route_for(int32_t op, int32_t mode, int64_t H, int64_t T, int32_t w_dtype, int32_t form,
                        const char* variant, ng_route_info* out);

/* The decision of the last successful kernel call (ng_fwd, ng_bwd,
 * ng_bwd_routed) of this thread. NG_EINVAL when there was none. */
NG_API int ng_last_route(ng_route_info* out);

/* Load (or reload) the route table now and use it from the next call on:
 * path NULL or "": the default search (capi.h top); else that .toml, its
 * approvals beside it. Re-reads NORMGATE_DISPATCH; the fallback warnings
 * start afresh. A failing load (NG_EROUTE naming the file and the problem)
 * keeps the table in use. Decisions already returned stay valid. */
NG_API int ng_routes_load(const char* path);

/* Strict routes: on != 0 refuses calls outside every window (NG_EROUTE)
 * instead of running the fallback; 0 allows the fallback. Overrides
 * NORMGATE_STRICT_ROUTES for the whole process. */
NG_API int ng_set_strict_routes(int on);

/* on != 0 (the default): the one-time fallback warnings and the policy
 * notice go to stderr; 0: they do not (ng_route_info reports them). For
 * hosts with their own warning channel (the Python package). */
NG_API int ng_set_route_warnings(int on);

/* A registered variant (kernels/registry.h), 32 bytes. */
typedef struct ng_variant_desc {
  const char* name;           /* static storage */
  const char* source_sha256;  /* SHA-256 of its sources in this build (lowercase hex) */
  int32_t op;                 /* NG_OP_* */
  int32_t mode;               /* NG_MODE_*: its own promise */
  int32_t control;            /* 1: a negative control (never run by this library) */
  int32_t reserved;
} ng_variant_desc;

/* The variant called `name`. NG_EINVAL for an unknown name (the message lists
 * the known ones) or NULL arguments. */
NG_API int ng_variant_info(const char* name, ng_variant_desc* out);

/* Benchmark ceiling: enqueue a device-to-device copy of `bytes` bytes with
 * 16-byte loads and stores (kernels/timing.h copy_vec16); the copy reads and
 * writes `bytes` each, so its bandwidth is 2*bytes/time. dst and src: device
 * pointers, 16-byte aligned, not overlapping; bytes % 16 == 0 (else
 * NG_EINVAL naming the value). stream: as ng_fwd. */
NG_API int ng_copy_vec16(void* dst, const void* src, uint64_t bytes, void* stream);

/* Benchmark ceiling streams (bench/timing/include/normgate/bench/timing.h,
 * ceiling_kinds): `kind` is one of "vec16_grid4" (= ng_copy_vec16),
 * "vec16_tile1", "vec16_tile2", "vec16_tile4", "vec16_tile8", "vec16_tile16", "memcpy",
 * "tma_bulk" (copies: read and write `bytes`, bandwidth 2*bytes/time) or
 * "read_only" (reads src; dst may be NULL) / "write_only" (writes dst; src may
 * be NULL), bandwidth bytes/time. Buffers as ng_copy_vec16. NG_EINVAL for an
 * unknown kind (naming it) or a bad buffer. stream: as ng_fwd. */
NG_API int ng_ceiling_stream(const char* kind, void* dst, const void* src, uint64_t bytes, void* stream);

/* One CUDA-graph execution from CUPTI's graph-level trace (kernels/timing.h
 * GraphSpan): GPU timestamps in ns of its first node's start and its last
 * node's end (both 0: CUPTI could not time it). 24 bytes. */
typedef struct ng_graph_span {
  uint32_t graph_id;
  uint32_t correlation_id; /* the launch's; one per launch, increasing */
  uint64_t start_ns;
  uint64_t end_ns;
} ng_graph_span;

/* Start recording every CUDA graph launched in this process (any runtime:
 * torch's too) with CUPTI's graph-level trace, for benchmarks that take the
 * span of a replay from GPU timestamps rather than from CUDA events around
 * the launch. CUPTI is dlopen'ed at the first call (libcupti.so.13 first).
 * CUPTI's callbacks are process-wide: another CUPTI client (torch.profiler)
 * loses its records while this records. NG_EFAIL naming the cause: CUPTI
 * missing or refusing (no usable device), already recording, or a build
 * without CUDA or cupti.h. */
NG_API int ng_graph_spans_start(void);

/* Stop recording and hand over the executions recorded since
 * ng_graph_spans_start, in launch (correlation id) order: min(*n, cap) of
 * them into out (out may be NULL when cap is 0), *n = how many there were
 * (so a second call is not possible: size cap generously). Synchronize the
 * launches' streams first. NG_EFAIL when not recording, or when CUPTI dropped
 * records or left a buffer unread (named count; recording has ended either
 * way); NG_EINVAL for n NULL, or out NULL with cap > 0. */
NG_API int ng_graph_spans_stop(ng_graph_span* out, uint64_t cap, uint64_t* n);

/* As ng_graph_spans_stop, but recording goes on: the executions since the
 * start or the last take. A benchmark starts once, BEFORE capturing its
 * graphs (a graph instantiated before the start crashed at its first replay
 * under the trace on the H200 machine: kernels/timing.h), and takes each
 * timed block's records. */
NG_API int ng_graph_spans_take(ng_graph_span* out, uint64_t cap, uint64_t* n);

/* ---- cases and the host generator -------------------------------------- */

/* What a case id (seeds/case_id.h, e.g.
 * "H=4096,T=65537,w=bf16,form=plain,family=cancel,seed=17") describes. */
typedef struct ng_case_info_t {
  int64_t T;        /* tokens */
  int64_t H;        /* normalized length (256 for head forms) */
  int64_t heads;    /* 1, 24 or 4 */
  int64_t rows;     /* T*heads: rows of x, dy, y, dx; length of rstd */
  int32_t form;     /* NG_FORM_* */
  int32_t w_dtype;  /* NG_W_* */
  double eps;       /* the case's eps (binary64; finite, FLT_MIN..FLT_MAX, else
                       the case id is NG_EINVAL); the kernels and the oracle
                       use float(eps) */
  double kappa;     /* cancel's target condition number (1e8 when not given) */
  uint64_t seed;
  char family[16];  /* "normal", "llm", "cancel", "zeros", "tiny", "huge", "specials" */
  char canonical[NG_CASE_ID_BYTES]; /* canonical case id, NUL-terminated */
} ng_case_info_t;

/* Parse and validate case_id into *out. NG_EINVAL for a NULL argument or a
 * bad case id (the message names the bad key or value). */
NG_API int ng_case_info(const char* case_id, ng_case_info_t* out);

/* Parse and validate a seed set as `normgate gate --seeds` and ng_gate take
 * it ("3x16", "5x120", "seeds=0..7", "cancel:0..7", ...: seeds/seed_set.h)
 * and put its number of (family point, seed) pairs into *pairs. NG_EINVAL
 * for a NULL argument or a bad seed set (the message quotes it and names
 * the bad part). For callers that must refuse a bad seed set before they
 * write anything (normgate.gate's table and policy). */
NG_API int ng_seed_set_size(const char* spec, uint64_t* pairs);

/* The host-memory check `normgate check` makes before any work
 * (gate/host_memory.h require_host_memory): NG_OK when `copies` (1..64)
 * of case_id's inputs and of the outputs of n_impls implementations (0: its
 * inputs alone; 0..1024), held at once, can fit in this host's physical
 * memory or its cgroup's limit; NG_EINVAL naming the case, the bytes it
 * needs at least (BF16 inputs and outputs, 2 bytes an element each) and
 * the limit otherwise, or for a bad argument. forward_only (0 or 1): a
 * forward check (no dy, dx). For callers that allocate a case themselves
 * and must refuse one that cannot fit before allocating anything:
 * normgate.check holds 3 copies for a deterministic implementation (the
 * inputs, the oracle's copy, a second run's) and 2 otherwise,
 * normgate.generate 2 (the generator's and the caller's). */
NG_API int ng_require_host_memory(const char* case_id, int32_t n_impls, int32_t forward_only, int32_t copies);

/* Caller-owned HOST buffers for a case's inputs, contiguous over rows
 * ([rows, H], head forms [T, heads, 256]); *_elems is each buffer's size in
 * elements and must equal what the case needs: x, dy, u, dh_new rows*H
 * (BF16 bits); w H elements, BF16 bits for w=bf16, FP32 for w=fp32. u and
 * dh_new are form res only and must be NULL (size 0) for the other forms.
 * A case with T = 0 needs 0 elements of x, dy, u, dh_new: their pointers may
 * then be NULL. */
typedef struct ng_host_inputs {
  void* x;              /* BF16 bits (form res: h) */
  uint64_t x_elems;
  void* dy;             /* BF16 bits */
  uint64_t dy_elems;
  void* w;              /* BF16 bits or FP32, per the case's w */
  uint64_t w_elems;
  void* u;              /* res: BF16 bits, the residual branch; else NULL */
  uint64_t u_elems;
  void* dh_new;         /* res: BF16 bits, gradient reaching h_new; else NULL */
  uint64_t dh_new_elems;
} ng_host_inputs;

/* Fill *out's buffers with the case's inputs from the host generator
 * (seeds/generate.h generate_host: the bits every normgate check uses; the
 * same case id gives the same bits on every call, thread count and machine).
 * NG_EINVAL for a bad case id, a NULL buffer the case needs, a non-NULL
 * buffer it lacks, or a size mismatch (the message names the tensor). */
NG_API int ng_generate_host(const char* case_id, const ng_host_inputs* out);

/* As ng_generate_host, on the GPU: *out's buffers are DEVICE pointers (same
 * struct, layout and sizes, contiguous), filled by the device generator
 * (kernels/runner.h generate_device_inputs: element by element with the host
 * generator's function, so the bytes equal ng_generate_host's; tested in
 * tests/capi). Enqueued on `stream` (NULL: the default stream), not
 * synchronized. NG_EINVAL as ng_generate_host; NG_EFAIL on a CUDA error or
 * in a library built without CUDA. */
NG_API int ng_generate_device(const char* case_id, const ng_host_inputs* out, void* stream);

/* ---- the oracle ---------------------------------------------------------- */

/* One case's inputs and FP64 reference (with MPFR escalation, as every
 * normgate check), computed once; any number of implementations' outputs can
 * then be validated against it. Opaque; one thread at a time per handle. */
typedef struct ng_oracle ng_oracle;

/* Generate the case's inputs on the host, compute the reference, the ideal
 * kernel and the FP32 baseline (oracle mode auto) with `threads` OpenMP
 * threads (<= 0: default; results do not depend on it; above NG_MAX_THREADS:
 * NG_EINVAL). Memory: the inputs
 * plus O(rows + H) doubles. *out receives the handle (NULL on failure). */
NG_API int ng_oracle_open(const char* case_id, int threads, ng_oracle** out);

/* As ng_oracle_open, over the caller's copy of the case's inputs instead of
 * the host generator's (HOST buffers, the layout and sizes of
 * ng_generate_host; copied, so they may be freed after the call): for inputs
 * already made, e.g. by ng_generate_device and copied to the host, it saves
 * the host generation (tens of CPU ns per element and tensor). The inputs
 * must be the case's generator output: a sample is recomputed
 * (seeds/generate.h check_inputs_sample: every element of 64 rows spread over
 * the tensor, first and last included, and all of w) and a difference is
 * NG_EINVAL naming the tensor, row, column and both bit patterns; so is a
 * wrong size or a NULL buffer the case needs. Same reports as ng_oracle_open
 * for the same bits. */
NG_API int ng_oracle_open_inputs(const char* case_id, const ng_host_inputs* in, int threads, ng_oracle** out);

/* One implementation's outputs, HOST pointers, contiguous over rows (the
 * layout of ng_host_inputs). Any pointer may be NULL: that output was not
 * produced and is reported absent. *_elems must equal the case's size of
 * each given tensor: y, dx, h_new rows*H (BF16 bits); rstd rows (FP32); dw
 * H (FP32). Form res: dx holds dh (= dx + dh_new), h_new the forward's
 * BF16(h + u); h_new must be NULL for the other forms. A given tensor of 0
 * elements (T = 0) still needs a non-NULL pointer (never read). */
typedef struct ng_outputs {
  const void* y;
  uint64_t y_elems;
  const void* rstd;
  uint64_t rstd_elems;
  const void* dx;
  uint64_t dx_elems;
  const void* dw;
  uint64_t dw_elems;
  const void* h_new;
  uint64_t h_new_elems;
} ng_outputs;

/* Validate every element of every given output against normgate's budgets
 * (validators/budget.h: y, dx atol = rtol = 1e-2; rstd rtol 1e-5; dw atol =
 * rtol = 1e-4 vs FP64; h_new bitwise) and write a JSON object (NUL-terminated)
 * into json[0 .. cap):
 *   {"case": canonical id, "pass": bool, "verdict": "pass"|"fail"|"inconclusive",
 *    "outputs": {"y": {"present": true, "err_tol": max err/tol, "worst": flat
 *                      index of the max (row-major over [rows, H]), "pass": bool,
 *                      "verdict": ..., plus every statistic of the check report
 *                      (n, over, got, ref, tol, bound, histogram, ...)},
 *                "rstd": {"present": false}, ...  (y, rstd, dx, dw; h_new for res)},
 *    "absent": [names of outputs not given],
 *    "uncertified": comparisons the oracle's bound cannot decide,
 *    "dw_vs_fp32": {"worst": ..., "median": ...}   (only when dw is given)}
 * Non-finite numbers are the strings "inf", "-inf", "nan". "pass" is true only
 * when every given element is within budget and every comparison certified
 * (an inconclusive verdict is never a pass). *needed (if needed != NULL)
 * receives the report's size in bytes including the NUL. NG_EINVAL when a
 * size is wrong, every output is NULL, or cap < *needed (NG_REPORT_BYTES
 * always suffices). */
NG_API int ng_oracle_validate(ng_oracle* o, const ng_outputs* outs, char* json, size_t cap, size_t* needed);

/* Free the handle (NULL is a no-op). */
NG_API void ng_oracle_close(ng_oracle* o);

/* ---- external implementations and the gate ----------------------------- */

/* What one run of an external implementation gets (ng_external_run_fn): the
 * case, its inputs and its output buffers, all HOST memory owned by the
 * library and valid during the call only. Row tensors are [rows, H]
 * contiguous (head forms: [T, heads, 256], row r = t*heads + h); the strides
 * say so explicitly: element (t, h, j) of a row tensor is at
 * p[t*stride_t + h*stride_h + j] (elements). Inputs as ng_generate_host
 * makes them (form res: x holds h, and u, dh_new are given; NULL
 * otherwise). Outputs arrive filled with poison (BF16 NaN 0x7FC0, FP32 NaN
 * 0x7FC00000); write every output you produce, in place (y, dx, h_new BF16
 * bits; rstd, dw FP32; res: dx holds dh = dx + dh_new, h_new the forward's
 * BF16(h + u); h_new is NULL for the other forms). An output left poisoned
 * is "not produced": one the op owes (bwd: y, rstd, dx, dw; fwd: y, rstd;
 * res: h_new) fails its window; dx, dw of a forward implementation are
 * left out. 208 bytes. */
typedef struct ng_external_io {
  const char* case_id;   /* canonical case id */
  int64_t T, H, heads, rows;
  int32_t form;          /* NG_FORM_* */
  int32_t w_dtype;       /* NG_W_* */
  double eps;            /* the case's eps (binary64; the kernels and the oracle
                            use float(eps), in FLT_MIN..FLT_MAX) */
  int64_t stride_t;      /* elements between tokens of a row tensor: heads*H */
  int64_t stride_h;      /* elements between heads of a token: H */
  const uint16_t* x;     /* [rows, H] BF16 bits (form res: h) */
  const uint16_t* dy;    /* [rows, H] BF16 bits */
  const void* w;         /* [H]: BF16 bits (w_dtype NG_W_BF16) or FP32 */
  const uint16_t* u;     /* res: [rows, H] BF16 bits, else NULL */
  const uint16_t* dh_new;/* res: [rows, H] BF16 bits, else NULL */
  uint16_t* y;           /* [rows, H] BF16 bits */
  float* rstd;           /* [rows] */
  uint16_t* dx;          /* [rows, H] BF16 bits */
  float* dw;             /* [H] */
  uint16_t* h_new;       /* res: [rows, H] BF16 bits, else NULL */
  uint64_t y_elems, rstd_elems, dx_elems, dw_elems, h_new_elems;
  char* error;           /* on failure write a NUL-terminated message here ... */
  size_t error_cap;      /* ... of at most error_cap bytes (>= 256) */
} ng_external_io;

/* One training step of an external implementation on io's case. Return 0 on
 * success; NG_ECANCEL to stop the whole gate at once (the case is not
 * journalled: a resumed gate redoes it; Ctrl-C in a Python callable); any
 * other value is a failure of this case (journalled as its error, with
 * io->error's message): the windows needing the case fail and the gate goes
 * on. May be called from a thread other than ng_gate's caller (on the GPU
 * backend the next case is prepared on a worker thread), never from two at
 * once. */
typedef int (*ng_external_run_fn)(void* user, const ng_external_io* io);

/* An external implementation (harness/external.h ExternalImpl): set
 * struct_size = sizeof(ng_external_desc). Strings are copied. 96 bytes. */
typedef struct ng_external_desc {
  uint32_t struct_size;
  int32_t op;              /* NG_OP_FWD (gated on y, rstd) or NG_OP_BWD (y, rstd, dx, dw) */
  int32_t mode;            /* NG_MODE_*: det windows need NG_MODE_DET; a forward must be NG_MODE_DET
                              (one forward serves both modes). A det run is called twice per
                              case and must give the same bits (else that case's error) */
  uint32_t wdtypes;        /* bits 1 << NG_W_*; 0: both */
  uint32_t forms;          /* bits 1 << NG_FORM_*; 0: plain only */
  int32_t device;          /* where `run` computes: 0 the host; 1 + N CUDA device N, one this
                              process sees (case files record its name, driver and CUDA
                              version). Was `reserved` (0) */
  int64_t h_min, h_max;    /* supported H, 1 <= h_min <= h_max <= 16384 */
  const char* name;        /* [A-Za-z0-9_.+-]{1,64}; not a built-in variant's */
  const char* source_sha256; /* 64 hex digits: the identity of its code (approvals go stale when it changes) */
  const char* origin;      /* where its code lives, e.g. "python", "plugin /abs/libx.so" */
  const char* description; /* one line; NULL: "" */
  const char* ran_on;      /* for reports, e.g. "python callable on cuda:0" */
  ng_external_run_fn run;
  void* user;              /* passed to run; must stay valid while the process may run it */
} ng_external_desc;

/* Register (or, same name and origin, re-register: replaces its definition)
 * an external implementation for this process: route tables may then route
 * windows to it by name, and ng_gate runs it through `run`. NG_EINVAL naming
 * the bad field (a forward of NG_MODE_NONDET too), a built-in variant's
 * name, a name another origin took, the names "all", any starting with '-'
 * or "ctl_" (the CLI reads them otherwise), and any registration while
 * ng_gate or ng_export runs in this process (it would change the code they
 * run under a name their journal and approvals hold). A route table loaded before a
 * re-registration re-checks each call against the new definition: a call
 * it no longer serves (op, mode, H, weight dtype or form) is refused with
 * NG_EROUTE, naming the variant; load the table again. */
NG_API int ng_register_external(const ng_external_desc* d);

/* Progress of a running gate (validators::GateProgress), given to
 * ng_gate_options::progress after every case. Strings valid during the call. */
typedef struct ng_gate_progress {
  const char* phase;        /* "grid", "dense", "fresh" */
  int64_t done, total;      /* cases of this phase finished (journalled ones included) / in all */
  int64_t run_now;          /* cases this process ran so far */
  double seconds;           /* wall time so far */
  double seconds_per_case;  /* mean over the cases this process ran */
  double worst;             /* largest gated err/tol so far */
  const char* window;       /* first window the current case serves */
  const char* worst_case;   /* case id of `worst` ("" before the first) */
} ng_gate_progress;
typedef void (*ng_gate_progress_fn)(void* user, const ng_gate_progress* p);

/* What ng_gate runs: `normgate gate`'s options. Fill it with
 * ng_gate_options_init (struct_size and every default), then set what
 * differs; NULL strings mean "none" or the default given. 128 bytes. */
typedef struct ng_gate_options {
  uint32_t struct_size;
  int32_t approve;          /* 1: write approvals beside the table (needs its policy, checked first); 0 or 1 */
  const char* table;        /* route table (TOML), required */
  const char* seeds;        /* seed set, NULL: "5x120" (the default families) */
  const char* windows;      /* window filter (gate --windows), NULL: every window */
  const char* journal;      /* write-ahead journal path, NULL: none (not resumable) */
  const char* report_md;    /* Markdown report path, NULL: none (written atomically) */
  const char* report_json;  /* JSON report path, NULL: none (written atomically) */
  const char* backend;      /* "auto" (NULL), "cpu", "gpu": where built-in variants run */
  int32_t t_per_window;     /* T points per window, 2..2^20 (default 8) */
  int32_t dense_points;     /* dense-grid points each side of the worst T, 0..2^20 (default 16; 0: none) */
  int64_t dense_step;       /* dense-grid spacing in rows, 1..2^31 (default 64) */
  int32_t fresh_factor;     /* fresh seeds = factor x seeds per family, 0..2^20 (default 2; 0: none) */
  int32_t threads;          /* OpenMP threads, 0: default; <= NG_MAX_THREADS */
  ng_gate_progress_fn progress; /* NULL: none */
  void* progress_user;
  const volatile int32_t* cancel; /* NULL, or a flag: non-zero stops the gate at the next case boundary */
  int32_t dense_all_seeds;  /* 1: the dense grid runs every (family, seed); 0 or 1 (another value: NG_EINVAL) */
  int32_t retry_errors;     /* 1: cases the journal holds only as errors run again (gate --retry-errors;
                               needs journal); 0: a journalled error stays the case's outcome */
  const char* externals;    /* NULL: any registered external a gated window routes runs. Else the names,
                               comma-separated without blanks ("" none), of the only externals this gate
                               runs: a gated window routed to another, a built-in variant's name, or a
                               name the table routes no window to, is NG_EINVAL before any work (one the
                               table routes only in windows the filter leaves out is taken, not run).
                               normgate.gate() passes the implementations it was given. (Added after the
                               first release of ng_gate: a caller's struct_size of 120, without it, reads
                               as NULL.) */
} ng_gate_options;

/* Defaults: struct_size, t_per_window 8, dense_points 16, dense_step 64,
 * fresh_factor 2, everything else 0 / NULL. o must not be NULL. */
NG_API void ng_gate_options_init(ng_gate_options* o);

/* Run the gate (validators::run_gate, as `normgate gate`): every input is
 * checked before any case runs (NG_EINVAL naming it: bad table or window
 * filter, bad seeds, a report or journal path that cannot be written (an
 * empty one, a missing or read-only folder, a folder, device, FIFO or
 * socket), two outputs on one file or an output that is the table, its
 * approvals file or its policy, --approve without a policy or below it, an
 * external routed but never registered, a window whose largest case cannot
 * fit in host memory: the bound, the limit and the largest T that fits
 * named, as `normgate gate` refuses it; gate/host_memory.h). Then the reports are written (each
 * atomically: a temporary file renamed, through a link), approvals when
 * asked, and *json_out receives the
 * JSON report (gate_to_json, plus "approvals": the changes, and
 * "journal": {"path", "resumed", "run_now", "retried"}), NUL-terminated, allocated by
 * the library: free it with ng_free_string. Its "verdict" is the run's, as
 * `normgate gate` prints it: "PASS", "FAIL" (a window over budget, a
 * finding, or INCONCLUSIVE), "ERROR" (cases that could not run, none over
 * budget) or "INCOMPLETE" (cases missing). Returns NG_OK whatever the
 * verdict (read "verdict" or "pass"); NG_ECANCEL when *cancel became non-zero
 * or an external run returned NG_ECANCEL: the journal holds every finished
 * case and the same call resumes (no report written, *json_out NULL);
 * NG_EFAIL for a runtime failure (a journal that cannot be written). */
NG_API int ng_gate(const ng_gate_options* o, char** json_out);

/* The path of the file route table `table` shares with its base table, by
 * `suffix` (".approvals.json", ".policy.toml", ".rejections.json"):
 * "dir/stem" + suffix for "dir/stem.toml" and for a per-GPU table
 * "dir/stem@SLUG.toml", name + suffix for any other name (routing.h
 * table_sibling_path; docs/perf/routes.md D26). Reads no file; the path is
 * as given (not normalized); a malformed '@' name (dir/x@H100.toml) is an
 * ordinary table: dir/x@H100 + suffix (`normgate routes --files` refuses
 * it). *out receives the path, NUL-terminated, allocated by the library:
 * free it with ng_free_string. NG_EINVAL for a NULL argument or an empty
 * table or suffix; NG_EFAIL out of host memory; *out is NULL on any error.
 * Added after ng_gate at the same version: detect it by its symbol. */
NG_API int ng_table_file(const char* table, const char* suffix, char** out);

/* Error maps of a report's worst cases (`normgate export`), in the calling
 * process, so that the implementations registered here (ng_register_external:
 * a Python implementation through normgate.export) run again. Added after
 * ng_gate at the same version: detect it by its symbol ng_export. */
typedef struct ng_export_options {
  uint32_t struct_size;
  const char* report;   /* gate report (--report-json) or check report (--json), required */
  const char* out;      /* maps file to write (HDF5, normgate-maps/2; datasets/SCHEMA.md), required */
  int32_t keep;         /* 0: every output's worst case of each window (gate report) or 3 (check report);
                           else 1..1000 largest err/tol first */
  int32_t all;          /* 1: every case the report names (keep must be 0); 0 or 1 */
  int32_t full;         /* 1: also each case's whole [T, H] dx err/tol map (4 bytes an element); 0 or 1 */
  int64_t tile;         /* edge of the max-pooled y/dx maps, 1..2^20 (default 256) */
  const char* backend;  /* "auto" (NULL), "cpu", "gpu": where built-in variants run */
  const char* oracle;   /* "auto" (NULL), "fp64", "mpfr" */
  int32_t threads;      /* OpenMP threads, 0: default; <= NG_MAX_THREADS */
  const volatile int32_t* cancel; /* NULL, or a flag: non-zero stops the export before its next case
                                     (NG_ECANCEL, nothing written) */
} ng_export_options;

/* Defaults: struct_size, tile 256, everything else 0 / NULL. o must not be NULL. */
NG_API void ng_export_options_init(ng_export_options* o);

/* Export (audit/export.h export_report, as `normgate export`): every input is
 * checked before any case runs (NG_EINVAL naming it: the report unreadable,
 * not JSON or of another kind, no worst case in it, an implementation it
 * names that this process does not know, a case its implementation does not
 * support or that cannot fit in host memory, an output path that cannot be
 * written or is the report itself, a field out of range). Then each (case,
 * implementation) pair runs again (generator, implementation, oracle) and the
 * maps file is written atomically, bound to the report's SHA-256 (`normgate
 * plot` checks it). *json_out receives {"out", "report_sha256", "notes":
 * [string], "pairs": [{"case", "impl", "fwd", "window", "verdict",
 * "max_err_tol": {"y", "rstd", "dx", "dw"}}]}, NUL-terminated, allocated by
 * the library: free it with ng_free_string. No external may be registered
 * while it runs. NG_ECANCEL when *cancel became non-zero or an external's run
 * returned NG_ECANCEL (nothing written); NG_EFAIL for a runtime failure (a
 * write that fails). */
NG_API int ng_export(const ng_export_options* o, char** json_out);

/* Free a string the library allocated (ng_gate's report, ng_export's
 * summary, ng_table_file's path). NULL is a no-op. */
NG_API void ng_free_string(char* s);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* NORMGATE_CAPI_H */
