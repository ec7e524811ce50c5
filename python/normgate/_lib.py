"""Loader and ctypes declarations of libnormgate_capi.so (capi/include/normgate/capi.h).

The library is found, on first use (importing the package never fails):
  1. installed with this package (`pip install .`): lib/libnormgate_capi.so
     inside the package folder. It comes first, even over $NORMGATE_LIB: the
     ctypes declarations below are those of the library built with them, and
     a variable left over from a source checkout cannot swap in another
     build's library; else
  2. at $NORMGATE_LIB (a path to the .so), else
  3. at $NORMGATE_BUILD/capi/libnormgate_capi.so when NORMGATE_BUILD is set
     (the build folder scripts/build was told to use), else
  4. at ../../build/capi/libnormgate_capi.so relative to this package
     (the repository's build folder: scripts/build makes it).
Nothing here imports torch.
"""

import ctypes
import re
import json
import os
import threading

# Return codes and enum values of capi.h.
NG_OK = 0
NG_EFAIL = 1
NG_EINVAL = 2
NG_EROUTE = 3
NG_OP_FWD = 0
NG_OP_BWD = 1
NG_MODE_DET = 0
NG_MODE_NONDET = 1
ROUTE_HOW = {0: "routed", 1: "unapproved", 2: "fallback", 3: "explicit", 4: "refused"}
APPROVAL = {0: "current", 1: "missing", 2: "stale", 3: "cpu-model only", 4: None, 5: "invalid"}
NG_W_BF16 = 0
NG_W_FP32 = 1
FORMS = {"plain": 0, "res": 1, "heads24": 2, "heads4": 3}
FORM_NAMES = {v: k for k, v in FORMS.items()}
NG_CASE_ID_BYTES = 256
NG_REPORT_BYTES = 65536

_c_i64 = ctypes.c_int64
_c_u64 = ctypes.c_uint64
_c_i32 = ctypes.c_int32
_vp = ctypes.c_void_p


class FwdArgs(ctypes.Structure):
    """ng_fwd_args (field order and types as in capi.h)."""

    _fields_ = [
        ("variant", ctypes.c_char_p),
        ("x", _vp), ("x_stride", _c_i64), ("x_stride_h", _c_i64),
        ("w", _vp), ("w_dtype", _c_i32), ("form", _c_i32),
        ("y", _vp), ("y_stride", _c_i64), ("y_stride_h", _c_i64),
        ("rstd", _vp),
        ("T", _c_i64), ("H", _c_i64), ("heads", _c_i64),
        ("eps", ctypes.c_float),
        ("u", _vp), ("u_stride", _c_i64),
        ("h_new", _vp), ("h_new_stride", _c_i64), ("msq", _vp),
    ]


class BwdArgs(ctypes.Structure):
    """ng_bwd_args."""

    _fields_ = [
        ("dy", _vp), ("dy_stride", _c_i64), ("dy_stride_h", _c_i64),
        ("x", _vp), ("x_stride", _c_i64), ("x_stride_h", _c_i64),
        ("w", _vp), ("w_dtype", _c_i32), ("form", _c_i32),
        ("rstd", _vp),
        ("dx", _vp), ("dx_stride", _c_i64), ("dx_stride_h", _c_i64),
        ("dw", _vp),
        ("T", _c_i64), ("H", _c_i64), ("heads", _c_i64),
        ("workspace", _vp), ("workspace_bytes", _c_u64),
        ("dh_new", _vp), ("dh_new_stride", _c_i64), ("msq", _vp),
    ]


class CaseInfo(ctypes.Structure):
    """ng_case_info_t."""

    _fields_ = [
        ("T", _c_i64), ("H", _c_i64), ("heads", _c_i64), ("rows", _c_i64),
        ("form", _c_i32), ("w_dtype", _c_i32),
        ("eps", ctypes.c_double), ("kappa", ctypes.c_double),
        ("seed", _c_u64),
        ("family", ctypes.c_char * 16),
        ("canonical", ctypes.c_char * NG_CASE_ID_BYTES),
    ]


class HostInputs(ctypes.Structure):
    """ng_host_inputs."""

    _fields_ = [
        ("x", _vp), ("x_elems", _c_u64),
        ("dy", _vp), ("dy_elems", _c_u64),
        ("w", _vp), ("w_elems", _c_u64),
        ("u", _vp), ("u_elems", _c_u64),
        ("dh_new", _vp), ("dh_new_elems", _c_u64),
    ]


class Outputs(ctypes.Structure):
    """ng_outputs."""

    _fields_ = [
        ("y", _vp), ("y_elems", _c_u64),
        ("rstd", _vp), ("rstd_elems", _c_u64),
        ("dx", _vp), ("dx_elems", _c_u64),
        ("dw", _vp), ("dw_elems", _c_u64),
        ("h_new", _vp), ("h_new_elems", _c_u64),
    ]


class RouteInfo(ctypes.Structure):
    """ng_route_info (capi.h): a routing decision."""

    _fields_ = [
        ("variant", ctypes.c_char_p), ("table", ctypes.c_char_p), ("message", ctypes.c_char_p),
        ("how", _c_i32), ("approval", _c_i32),
        ("t_lo", _c_i64), ("t_hi", _c_i64),
        ("op", _c_i32), ("mode", _c_i32), ("warned", _c_i32), ("reserved", _c_i32),
        ("workspace_bytes", _c_u64),
    ]


class VariantDesc(ctypes.Structure):
    """ng_variant_desc (capi.h)."""

    _fields_ = [("name", ctypes.c_char_p), ("source_sha256", ctypes.c_char_p),
                ("op", _c_i32), ("mode", _c_i32), ("control", _c_i32), ("reserved", _c_i32)]


class RouteError(RuntimeError):
    """The route table refuses a call (NG_EROUTE): its window has no current
    approval, or it is outside every window in strict mode, or the table
    cannot be loaded. The message names the call, the window, the table and
    approvals files and what is missing or stale."""


_lock = threading.Lock()
_lib = None


def packaged_library_path():
    """Where `pip install .` puts the library: lib/libnormgate_capi.so inside
    this package (pyproject.toml). None when it is not there (a source tree)."""
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "lib", "libnormgate_capi.so")
    return path if os.path.isfile(path) else None


def library_path():
    """The path the library is loaded from: the one installed with this
    package, else $NORMGATE_LIB, else $NORMGATE_BUILD's, else the build
    folder (module docstring)."""
    packaged = packaged_library_path()
    if packaged:
        return packaged
    env = os.environ.get("NORMGATE_LIB")
    if env:
        return env
    build = os.environ.get("NORMGATE_BUILD")
    if build:
        return os.path.join(os.path.abspath(build), "capi", "libnormgate_capi.so")
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.normpath(os.path.join(here, "..", "..", "build", "capi", "libnormgate_capi.so"))


ABI_MIN = (0, 2)  # first library version with these struct layouts
# Functions every normgate library has: a library without them is another
# library (libm at $NORMGATE_LIB, say), not an old build of this one.
_REQUIRED = ("ng_version", "ng_last_error", "ng_case_info")


def lib():
    """The loaded library (loaded and declared once). Raises RuntimeError with
    the path tried and how to build it when it cannot be loaded."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        path = library_path()
        if not os.path.exists(path):
            raise RuntimeError(
                "normgate: libnormgate_capi.so not found at " + path +
                (" ($NORMGATE_LIB)" if os.environ.get("NORMGATE_LIB") else
                 " ($NORMGATE_BUILD; build it there with `NORMGATE_BUILD=... scripts/build normgate_capi`, "
                 "or set NORMGATE_LIB to its path)" if os.environ.get("NORMGATE_BUILD") else
                 " (install the package with `pip install .`, or build the library with scripts/build, "
                 "or set NORMGATE_LIB to its path)"))
        try:
            L = ctypes.CDLL(path)
        except OSError as e:
            raise RuntimeError("normgate: cannot load " + path + ": " + str(e)) from None
        # Another library (libm at $NORMGATE_LIB, say) loads but lacks the
        # functions: ctypes would raise a bare AttributeError ("undefined
        # symbol") at the first one.
        missing = [name for name in _REQUIRED if not hasattr(L, name)]
        if missing:
            raise RuntimeError("normgate: " + path + " is not the normgate C library libnormgate_capi.so (it has no "
                               + ", ".join(missing) + ")" +
                               (" ($NORMGATE_LIB): set NORMGATE_LIB to the build's capi/libnormgate_capi.so"
                                if os.environ.get("NORMGATE_LIB") == path else ""))
        try:
            _declare(L, path)
        except AttributeError as e:  # a normgate library without one of them: an old or partial build
            raise RuntimeError("normgate: " + path + " lacks a function this package needs (" +
                               str(e).splitlines()[0] + "): rebuild it with scripts/build") from None
        # The structs above have the 0.2.0 layout (msq appended): an older
        # library would read past them. "normgate 0.2.0 (commit)".
        ver = L.ng_version().decode("utf-8", "replace")
        try:
            major, minor = (int(p) for p in ver.split()[1].split(".")[:2])
        except (IndexError, ValueError):
            raise RuntimeError("normgate: " + path + " reports version " + repr(ver) + ", not 'normgate X.Y.Z ...'") from None
        if (major, minor) < ABI_MIN:
            raise RuntimeError("normgate: " + path + " is " + ver + "; this package needs %d.%d or later "
                               "(the C ABI structs changed): rebuild it with scripts/build" % ABI_MIN)
        _lib = L
        return L


def _declare(L, path):
    """The ctypes signatures of the library's functions (AttributeError for one it lacks)."""
    L.ng_version.restype = ctypes.c_char_p
    L.ng_version.argtypes = []
    L.ng_last_error.restype = ctypes.c_char_p
    L.ng_last_error.argtypes = []
    L.ng_device_available.restype = ctypes.c_int
    L.ng_device_available.argtypes = [ctypes.POINTER(ctypes.c_int)]
    L.ng_fwd.restype = ctypes.c_int
    L.ng_fwd.argtypes = [ctypes.POINTER(FwdArgs), _vp]
    L.ng_bwd.restype = ctypes.c_int
    L.ng_bwd.argtypes = [ctypes.c_char_p, ctypes.POINTER(BwdArgs), _vp]
    L.ng_bwd_workspace_bytes.restype = ctypes.c_int
    L.ng_bwd_workspace_bytes.argtypes = [ctypes.c_char_p, _c_i64, _c_i64, ctypes.POINTER(_c_u64)]
    L.ng_copy_vec16.restype = ctypes.c_int
    L.ng_copy_vec16.argtypes = [_vp, _vp, _c_u64, _vp]
    L.ng_ceiling_stream.restype = ctypes.c_int
    L.ng_ceiling_stream.argtypes = [ctypes.c_char_p, _vp, _vp, _c_u64, _vp]
    L.ng_graph_spans_start.restype = ctypes.c_int
    L.ng_graph_spans_start.argtypes = []
    L.ng_graph_spans_stop.restype = ctypes.c_int
    L.ng_graph_spans_stop.argtypes = [ctypes.POINTER(GraphSpan), _c_u64, ctypes.POINTER(_c_u64)]
    L.ng_graph_spans_take.restype = ctypes.c_int
    L.ng_graph_spans_take.argtypes = [ctypes.POINTER(GraphSpan), _c_u64, ctypes.POINTER(_c_u64)]
    L.ng_case_info.restype = ctypes.c_int
    L.ng_case_info.argtypes = [ctypes.c_char_p, ctypes.POINTER(CaseInfo)]
    L.ng_generate_host.restype = ctypes.c_int
    L.ng_generate_host.argtypes = [ctypes.c_char_p, ctypes.POINTER(HostInputs)]
    if hasattr(L, "ng_require_host_memory"):  # a library before it: no check (torch's own error then)
        L.ng_require_host_memory.restype = ctypes.c_int
        L.ng_require_host_memory.argtypes = [ctypes.c_char_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32]
    L.ng_oracle_open.restype = ctypes.c_int
    L.ng_oracle_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(_vp)]
    L.ng_generate_device.restype = ctypes.c_int
    L.ng_generate_device.argtypes = [ctypes.c_char_p, ctypes.POINTER(HostInputs), _vp]
    L.ng_oracle_open_inputs.restype = ctypes.c_int
    L.ng_oracle_open_inputs.argtypes = [ctypes.c_char_p, ctypes.POINTER(HostInputs), ctypes.c_int,
                                        ctypes.POINTER(_vp)]
    L.ng_oracle_validate.restype = ctypes.c_int
    L.ng_oracle_validate.argtypes = [_vp, ctypes.POINTER(Outputs), ctypes.c_char_p, ctypes.c_size_t,
                                     ctypes.POINTER(ctypes.c_size_t)]
    L.ng_oracle_close.restype = None
    L.ng_oracle_close.argtypes = [_vp]
    if not hasattr(L, "ng_route_for"):
        raise RuntimeError("normgate: " + path + " predates routed dispatch (no ng_route_for): rebuild it with "
                           "scripts/build")
    L.ng_bwd_routed.restype = ctypes.c_int
    L.ng_bwd_routed.argtypes = [_c_i32, ctypes.POINTER(BwdArgs), _vp]
    L.ng_route_for.restype = ctypes.c_int
    L.ng_route_for.argtypes = [_c_i32, _c_i32, _c_i64, _c_i64, _c_i32, _c_i32, ctypes.c_char_p,
                               ctypes.POINTER(RouteInfo)]
    L.ng_last_route.restype = ctypes.c_int
    L.ng_last_route.argtypes = [ctypes.POINTER(RouteInfo)]
    L.ng_routes_load.restype = ctypes.c_int
    L.ng_routes_load.argtypes = [ctypes.c_char_p]
    L.ng_set_strict_routes.restype = ctypes.c_int
    L.ng_set_strict_routes.argtypes = [ctypes.c_int]
    L.ng_set_route_warnings.restype = ctypes.c_int
    L.ng_set_route_warnings.argtypes = [ctypes.c_int]
    L.ng_variant_info.restype = ctypes.c_int
    L.ng_variant_info.argtypes = [ctypes.c_char_p, ctypes.POINTER(VariantDesc)]
    # The fallback warnings reach Python users through warnings.warn
    # (normgate/__init__.py), not the library's stderr.
    L.ng_set_route_warnings(0)


def loadable():
    """True when the library can be loaded (tests skip without it)."""
    try:
        lib()
        return True
    except RuntimeError:
        return False


def require_host_memory(case_id, n_impls, forward_only=False, copies=1):
    """ValueError naming the bytes and the host's limit when `copies` of
    case_id's inputs and of n_impls implementations' outputs (0: its inputs
    alone) cannot fit in host memory at once (ng_require_host_memory, as
    `normgate check` refuses it), before anything is allocated."""
    L = lib()
    if hasattr(L, "ng_require_host_memory"):
        check(L.ng_require_host_memory(_bytes(case_id, "case_id"), n_impls, 1 if forward_only else 0, copies))


def check(rc):
    """Raise for a non-zero return code: ValueError (NG_EINVAL) or RuntimeError
    (NG_EFAIL), with the library's message (it names the bad value)."""
    if rc == NG_OK:
        return
    msg = (lib().ng_last_error() or b"").decode("utf-8", "replace")
    # The C entry point's name ("ng_gate: ...") means nothing to a Python
    # caller, whose traceback names the function called: left out.
    msg = re.sub(r"\Ang_[a-z0-9_]+: ", "", msg)
    if rc == NG_EINVAL:
        raise ValueError(msg)
    if rc == NG_EROUTE:
        raise RouteError(msg)
    raise RuntimeError(msg or "normgate: call failed with code %d" % rc)


def _bytes(s, what):
    """s as the NUL-terminated UTF-8 the C ABI reads; ValueError naming `what`
    and the value for a non-str, an embedded NUL (C would stop there and read
    a shorter name) or a lone surrogate (no UTF-8 spelling)."""
    if not isinstance(s, str):
        raise ValueError("%s must be a str, got %r" % (what, type(s).__name__))
    if "\0" in s:
        raise ValueError("%s %r contains a NUL character" % (what, s))
    try:
        return s.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError("%s %r is not valid Unicode text (%s)" % (what, s, e.reason)) from None


def version():
    return lib().ng_version().decode()


def device_available():
    out = ctypes.c_int(0)
    check(lib().ng_device_available(ctypes.byref(out)))
    return bool(out.value)


def case_info(case_id):
    """ng_case_info as a dict: T, H, heads, rows, form (name), w ("bf16"|"fp32"),
    eps, kappa, seed, family, case (the canonical id)."""
    info = CaseInfo()
    check(lib().ng_case_info(_bytes(case_id, "case_id"), ctypes.byref(info)))
    return {
        "T": info.T, "H": info.H, "heads": info.heads, "rows": info.rows,
        "form": FORM_NAMES[info.form], "w": "bf16" if info.w_dtype == NG_W_BF16 else "fp32",
        "eps": info.eps, "kappa": info.kappa, "seed": info.seed,
        "family": info.family.decode(), "case": info.canonical.decode(),
    }


def bwd_workspace_bytes(variant, rows, H):
    out = _c_u64(0)
    check(lib().ng_bwd_workspace_bytes(_bytes(variant, "variant"), int(rows), int(H), ctypes.byref(out)))
    return int(out.value)


def _s(b):
    return (b or b"").decode("utf-8", "replace")


def route_info_dict(r):
    """A RouteInfo as the dict normgate.route_for returns."""
    how = ROUTE_HOW.get(r.how, str(r.how))
    return {
        "variant": _s(r.variant) or None,
        "how": how,
        "approval": APPROVAL.get(r.approval, str(r.approval)),
        "window": (r.t_lo, r.t_hi) if r.t_hi > 0 else None,
        "table": _s(r.table),
        "op": "fwd" if r.op == NG_OP_FWD else "bwd",
        "deterministic": r.mode == NG_MODE_DET if r.op == NG_OP_BWD else None,
        "workspace_bytes": int(r.workspace_bytes),
        "refused": _s(r.message) if how == "refused" else None,
    }


def route_for(op, mode, H, T, w_dtype, form, variant=None):
    """ng_route_for: (rc, RouteInfo). rc NG_OK or NG_EROUTE (a refusal, info
    filled); other codes raise as check() does."""
    info = RouteInfo()
    v = None if variant is None else _bytes(variant, "variant")
    rc = lib().ng_route_for(int(op), int(mode), int(H), int(T), int(w_dtype), int(form), v, ctypes.byref(info))
    if rc not in (NG_OK, NG_EROUTE):
        check(rc)
    if rc == NG_EROUTE and info.how != 4:  # the table did not load: nothing filled
        check(rc)
    return rc, info


def last_route():
    """ng_last_route: the RouteInfo of this thread's last successful kernel call."""
    info = RouteInfo()
    check(lib().ng_last_route(ctypes.byref(info)))
    return info


def variant_info(name):
    """ng_variant_info as a dict: name, source_sha256, op, deterministic, control."""
    d = VariantDesc()
    check(lib().ng_variant_info(_bytes(name, "variant"), ctypes.byref(d)))
    return {"name": _s(d.name), "source_sha256": _s(d.source_sha256), "op": "fwd" if d.op == NG_OP_FWD else "bwd",
            "deterministic": d.mode == NG_MODE_DET, "control": bool(d.control)}


class GraphSpan(ctypes.Structure):
    """ng_graph_span (capi.h): one CUDA-graph execution, GPU timestamps in ns."""
    _fields_ = [("graph_id", ctypes.c_uint32), ("correlation_id", ctypes.c_uint32),
                ("start_ns", _c_u64), ("end_ns", _c_u64)]


def graph_spans_start():
    """ng_graph_spans_start: record every CUDA graph launched from now on
    (CUPTI graph-level trace). Call it BEFORE capturing the graphs to time:
    on the H200 machine a graph instantiated before the start crashed the
    process at its first replay under the trace (capi.h, kernels/timing.h).
    RuntimeError naming the cause if CUPTI is
    missing or refusing, if already recording, or if torch's profiler is
    active (CUPTI's callbacks are process-wide: it would lose its records)."""
    import sys
    # Loaded with torch; absent (no profiler running) without it.
    if getattr(sys.modules.get("torch.autograd.profiler"), "_is_profiler_enabled", False):
        raise RuntimeError("graph_spans_start: torch.profiler is active (CUPTI's callbacks are process-wide)")
    check(lib().ng_graph_spans_start())


def _spans(fn, name, cap):
    cap = int(cap)
    buf = (GraphSpan * max(cap, 1))()
    n = _c_u64(0)
    check(fn(buf, cap, ctypes.byref(n)))
    if n.value > cap:
        raise RuntimeError("%s: %d graph executions recorded, more than the %d expected" % (name, n.value, cap))
    return [(buf[i].graph_id, buf[i].correlation_id, buf[i].start_ns, buf[i].end_ns) for i in range(n.value)]


def graph_spans_take(cap):
    """ng_graph_spans_take: the executions recorded since graph_spans_start
    or the last take, in launch order, as (graph_id, correlation_id,
    start_ns, end_ns) tuples; recording goes on. cap: the most expected;
    RuntimeError if there were more (those records are gone) or if CUPTI
    dropped records. Start BEFORE capturing the graphs (capi.h)."""
    return _spans(lib().ng_graph_spans_take, "graph_spans_take", cap)


def graph_spans_stop(cap):
    """ng_graph_spans_stop: as graph_spans_take, and the recording ends."""
    return _spans(lib().ng_graph_spans_stop, "graph_spans_stop", cap)


def oracle_open(case_id, threads=0):
    h = _vp()
    check(lib().ng_oracle_open(_bytes(case_id, "case_id"), int(threads), ctypes.byref(h)))
    return h


def oracle_open_inputs(case_id, inputs, threads=0):
    """ng_oracle_open_inputs over a HostInputs of host pointers."""
    h = _vp()
    check(lib().ng_oracle_open_inputs(_bytes(case_id, "case_id"), ctypes.byref(inputs), int(threads), ctypes.byref(h)))
    return h


# The report fields that hold a number which may be non-finite (err/tol of a
# NaN or Inf output, its err and got, the upper bounds of the histogram's
# percentiles, ...). The library's JSON spells such a number as the string
# "inf", "-inf" or "nan" (docs/schemas.md, "Numbers"); Python callers get a
# float, so that `err_tol > 1` holds for a broken kernel instead of raising.
# Keyed by field name, not by value: a name (an implementation called "nan")
# stays a string. python/tests/test_gate.py walks a broken kernel's
# check and gate reports for any string left, so a new field is not missed.
_NUMBER_FIELDS = frozenset((
    "bound", "err", "err_tol", "forced", "got", "kappa_headroom", "kernel_excess", "max_bound_over_tol",
    "max_condition", "max_err_tol", "max_forced", "max_ratio", "median", "p50_upper", "p99_upper", "ratio", "ref",
    "tol", "worst", "worst_condition", "worst_err_tol"))
_NONFINITE = {"inf": float("inf"), "-inf": float("-inf"), "nan": float("nan")}


def report_numbers(obj):
    """obj (a report parsed from the library's JSON) with its non-finite
    numbers as floats instead of the strings "inf", "-inf", "nan", in the
    fields of _NUMBER_FIELDS; changed in place and returned."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, str):
                if k in _NUMBER_FIELDS and v in _NONFINITE:
                    obj[k] = _NONFINITE[v]
            else:
                report_numbers(v)
    elif isinstance(obj, list):
        for v in obj:
            report_numbers(v)
    return obj


def oracle_validate(handle, outs):
    buf = ctypes.create_string_buffer(NG_REPORT_BYTES)
    needed = ctypes.c_size_t(0)
    check(lib().ng_oracle_validate(handle, ctypes.byref(outs), buf, NG_REPORT_BYTES, ctypes.byref(needed)))
    return report_numbers(json.loads(buf.value.decode("utf-8")))


def oracle_close(handle):
    if handle:
        lib().ng_oracle_close(handle)
