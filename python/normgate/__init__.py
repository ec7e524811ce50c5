"""normgate: RMSNorm training kernels (H200, sm_90a) and their FP64 accuracy oracle, from Python.

A thin ctypes layer over libnormgate_capi.so (capi/include/normgate/capi.h);
no build against PyTorch. The library is the one installed with this package
(`pip install .`), else $NORMGATE_LIB, else ../../build/capi/libnormgate_capi.so
relative to this package (scripts/build makes it; _lib.py); a missing library
is reported on first use, not at import. __version__ is the CMake project's
(_version.py).

torch is imported inside the functions that need it, so `import normgate`
works without torch (version(), device_available(), case_info() and
bwd_workspace_bytes() need no torch; everything else does).

Tensors (torch):
  x, dy, y, dx, h_new, u, dh_new: CUDA bfloat16, [T, H] (plain, res) or
      [T, heads, 256] with heads 24 (heads24) or 4 (heads4). The last dim must be
      contiguous (stride 1); the other strides are taken from the tensor, so a
      strided slice of a wider buffer (the q part of a packed qkv row) works
      without a copy. dy may be an expanded tensor (stride 0) for the head forms.
  w: CUDA [H] (one w[256] shared by all heads), bfloat16 or float32, contiguous.
  rstd: CUDA float32, [T] or [T, heads] (T*heads values, contiguous).
  dw: CUDA float32 [H].
Which kernel runs: each call runs the variant the route table routes for its
exact (op, mode, H, T, weight dtype, form), if that window's approval is
current (capi.h, "Which kernel runs": the table is $NORMGATE_ROUTES, else the
one installed with the library, else in a build tree the repository's
routes/sm90a.toml; of the last two, on a GPU with a table of its own beside
it, sm90a@SLUG.toml). A window without a current approval raises RouteError
naming it, unless the call names its variant (variant="...") or
NORMGATE_DISPATCH=allow-unapproved is set when the table loads. A call outside
every window runs the table's fallback variant with a RouteWarning once per
(op, mode, H, w, form); set_strict_routes(True) or NORMGATE_STRICT_ROUTES=1
makes it a RouteError. route_for() answers without a GPU; last_variant() says
what the last call ran.

PyTorch integration (normgate.ops, imported on first use of RMSNorm, rms_norm
or ops): the kernels as torch.library operators torch.ops.normgate.rms_norm_fwd,
rms_norm_res_fwd and rms_norm_bwd (fake implementations for tracing, autograd
registered), so torch.compile traces them with no graph break; rms_norm (the
functional form) and RMSNorm (a drop-in for torch.nn.RMSNorm: any leading
dims, autocast, the residual and per-head forms) run through them.

Kernels run on torch's current CUDA stream of the tensors' device and return
without synchronizing. Nothing is copied silently: a tensor of the wrong device,
dtype or layout raises ValueError naming it (only Oracle.validate copies, to
the host, as documented there). Errors from the library: ValueError for an
invalid argument, RuntimeError otherwise (e.g. a CUDA error).
"""

import ctypes
import math
import operator
import numbers
import os
import re
import threading
import time
import warnings

from . import _lib
from ._version import __version__
from ._lib import RouteError, case_info, device_available, library_path, variant_info, version
from .cases import CaseContentError, CaseDigestError, load_case  # noqa: F401  saved case files (h5py, on call)

# RMSNormFunction, RMSNorm and ops are importable by name too (on first access:
# they need torch; normgate.ops registers the torch.library operators); they
# are not in __all__ so `import *` needs no torch.
__all__ = [
    "rmsnorm_train_forward", "rmsnorm_train_backward", "rms_norm",
    "route_for", "last_variant", "set_strict_routes", "load_routes", "variant_info", "RouteError", "RouteWarning",
    "generate", "Oracle", "check", "case_info", "device_available", "version", "library_path",
    "bwd_workspace_bytes", "ceiling_stream", "CEILING_KINDS", "copy_vec16", "default_threads", "MAX_THREADS",
    "EPS_MIN", "EPS_MAX",
]

# Gate your own implementation (normgate/gate.py): Implementation, gate, source_sha256.
from .gate import Implementation, export, gate, source_sha256  # noqa: E402
__all__ += ["Implementation", "export", "gate", "source_sha256"]

_HEADS = {24: "heads24", 4: "heads4"}
_DET = "bwd_det_chunked"
_NONDET = "bwd_nondet_atomic"


def _torch():
    try:
        import torch
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise RuntimeError("normgate: this function needs torch (pip install torch)") from e
    return torch


def _ptr(t):
    return ctypes.c_void_p(t.data_ptr())


def _check_cuda(name, t, dtypes, device=None):
    torch = _torch()
    if not isinstance(t, torch.Tensor):
        raise ValueError("%s must be a torch.Tensor, got %s" % (name, type(t).__name__))
    if t.device.type != "cuda":
        raise ValueError("%s is on %s; normgate's kernels need a CUDA tensor" % (name, t.device))
    if device is not None and t.device != device:
        raise ValueError("%s is on %s, x on %s: every tensor must be on one device" % (name, t.device, device))
    if t.dtype not in dtypes:
        raise ValueError("%s has dtype %s; expected %s" % (name, t.dtype, " or ".join(str(d) for d in dtypes)))


def _rows_layout(name, t, shape=None):
    """(T, heads, H, stride, stride_h) of a [T, H] or [T, heads, 256] tensor
    whose last dim is contiguous."""
    if shape is not None and tuple(t.shape) != tuple(shape):
        raise ValueError("%s has shape %s; expected %s" % (name, tuple(t.shape), tuple(shape)))
    if t.dim() == 2:
        T, H = t.shape
        heads, stride_h = 1, 0
    elif t.dim() == 3:
        T, heads, H = t.shape
        if heads not in _HEADS or H != 256:
            raise ValueError("%s has shape %s; per-head tensors are [T, 24, 256] or [T, 4, 256]"
                             % (name, tuple(t.shape)))
        stride_h = t.stride(1)
    else:
        raise ValueError("%s has %d dims; expected [T, H] or [T, heads, 256]" % (name, t.dim()))
    if H > 1 and t.stride(-1) != 1:
        raise ValueError("%s: the last dim is not contiguous (stride %d); normgate does not copy: pass "
                         "a tensor whose last dim has stride 1" % (name, t.stride(-1)))
    stride = t.stride(0)
    if T == 1 and heads == 1:
        stride = max(stride, H)  # one row: its stride is never used, the kernel wants >= H
    return T, heads, H, stride, stride_h


def _weight(w, H, device):
    torch = _torch()
    _check_cuda("w", w, (torch.bfloat16, torch.float32), device)
    if w.dim() != 1 or w.shape[0] != H:
        raise ValueError("w has shape %s; expected [%d]" % (tuple(w.shape), H))
    if H > 1 and w.stride(0) != 1:
        raise ValueError("w is not contiguous (stride %d); normgate does not copy" % w.stride(0))
    return _lib.NG_W_BF16 if w.dtype == torch.bfloat16 else _lib.NG_W_FP32


def _stream(device):
    torch = _torch()
    return ctypes.c_void_p(torch.cuda.current_stream(device).cuda_stream)


def _rstd_shape(T, heads):
    return (T,) if heads == 1 else (T, heads)


class RouteWarning(RuntimeWarning):
    """A call outside every window of the route table runs the table's
    fallback variant, which the gate has not approved for it (warned once per
    op, mode, H, w and form)."""


_W_NAMES = {"bf16": _lib.NG_W_BF16, "bfloat16": _lib.NG_W_BF16, "torch.bfloat16": _lib.NG_W_BF16,
            "fp32": _lib.NG_W_FP32, "float32": _lib.NG_W_FP32, "torch.float32": _lib.NG_W_FP32}
_FORM_HEADS = {"plain": 1, "res": 1, "heads24": 24, "heads4": 4}
_warned = set()           # fallback groups warned about (warn once per op, mode, H, w, form)
_warn_lock = threading.Lock()
_last = {}                # "fwd" / "bwd" / "any" -> the last call's route dict


def _op_code(op):
    if not isinstance(op, str) or op not in ("fwd", "bwd"):
        raise ValueError("op must be \"fwd\" or \"bwd\", got %r" % (op,))
    return _lib.NG_OP_FWD if op == "fwd" else _lib.NG_OP_BWD


def _w_code(w_dtype):
    name = str(w_dtype)
    if name not in _W_NAMES:
        raise ValueError("w_dtype must be \"bf16\" or \"fp32\" (or the torch dtype), got %r" % (w_dtype,))
    return _W_NAMES[name]


def _form_code(form):
    if not isinstance(form, str) or form not in _lib.FORMS:  # a list is unhashable: ValueError, not TypeError
        raise ValueError("form must be one of %s, got %r" % (", ".join(_lib.FORMS), form))
    return _lib.FORMS[form]


def route_for(op, H, T, w_dtype="bf16", form="plain", deterministic=True, variant=None):
    """Which variant a call would run, without running it (no GPU or torch needed).

    op: "fwd" or "bwd"; H: normalized length (256 for the head forms); T: tokens
    (rows of [T, H], or T of [T, heads, 256]); w_dtype: "bf16" or "fp32" (or
    torch.bfloat16 / torch.float32); form: "plain", "res", "heads24", "heads4";
    deterministic: the backward's mode (ignored for fwd); variant: a name to
    check as an explicit override (ValueError if it cannot serve the call).
    Returns a dict: variant (name), how ("routed", "unapproved", "fallback",
    "explicit", "refused"), approval of the window holding the call
    ("current", "missing", "stale", "cpu-model only", "invalid"; None when no window
    holds it), window ((lo, hi) or None), table (path), op, deterministic,
    workspace_bytes (what the backward needs), refused (the refusal's message
    when how == "refused", else None). Never warns. RouteError when the table
    cannot be loaded; ValueError for a bad argument.
    """
    for name, v in (("H", H), ("T", T)):
        _int64("route_for", name, v)
    if not isinstance(deterministic, bool):
        raise ValueError("route_for: deterministic must be True or False, got %r" % (deterministic,))
    if variant is not None and (not isinstance(variant, str) or not variant):
        raise ValueError("route_for: variant must be a variant name or None, got %r" % (variant,))
    mode = _lib.NG_MODE_DET if deterministic else _lib.NG_MODE_NONDET
    _, info = _lib.route_for(_op_code(op), mode, int(H), int(T), _w_code(w_dtype), _form_code(form), variant)
    return _lib.route_info_dict(info)


_route_cache = {}  # (op, deterministic, H, T, w, form, variant) -> route dict of a call that may run


def _route(op, H, T, w, form, deterministic, variant):
    """route_for for a kernel call: RouteError when refused, the one-time
    RouteWarning for a fallback. Decisions that let a call run are cached
    (a training loop repeats its shapes; ~10 us per miss through ctypes);
    load_routes and set_strict_routes clear the cache."""
    key = (op, deterministic, H, T, w, form, variant)
    d = _route_cache.get(key)
    if d is not None:
        return d
    mode = _lib.NG_MODE_DET if deterministic else _lib.NG_MODE_NONDET
    rc, info = _lib.route_for(_op_code(op), mode, H, T, w, _lib.FORMS[form], variant)
    d = _lib.route_info_dict(info)
    if rc == _lib.NG_EROUTE:
        raise RouteError(d["refused"])
    if d["how"] == "fallback":
        key = (op, mode if op == "bwd" else None, H, w, form)
        with _warn_lock:
            first = key not in _warned
            _warned.add(key)
        if first:
            group = op + ("" if op == "fwd" else (" det" if deterministic else " nondet"))
            warnings.warn("normgate: %s H=%d w=%s form=%s (T=%d) is outside every window of %s: running the "
                          "table's fallback %s, which the gate has not approved for these calls; warned once per "
                          "op, mode, H, w and form (normgate.set_strict_routes(True) or NORMGATE_STRICT_ROUTES=1 "
                          "makes it an error)" % (group, H, "bf16" if w == _lib.NG_W_BF16 else "fp32", form, T,
                                                  d["table"], d["variant"]), RouteWarning, stacklevel=3)
    if len(_route_cache) >= 4096:
        _route_cache.clear()
    _route_cache[key] = d
    return d


def _record(op):
    """What the kernel call just made on this thread ran (ng_last_route),
    kept raw; last_variant() converts it."""
    info = _lib.last_route()
    _last[op] = info
    _last["any"] = info


def last_variant(op=None):
    """The route dict (as route_for returns; how is never "refused") of the
    last kernel call made through this module, as the library reports it
    (ng_last_route), on any thread (autograd runs the backward on its own
    thread): op None: the last call; "fwd" / "bwd": the last call of that op.
    None before any call. The same call gives the same (equal) dict."""
    if op is not None:
        _op_code(op)
    info = _last.get("any" if op is None else op)
    if info is None:
        return None
    d = _last_dicts.get(id(info))
    if d is None or d[0] is not info:
        d = (info, _lib.route_info_dict(info))
        _last_dicts.clear()
        _last_dicts[id(info)] = d
    return d[1]


_last_dicts = {}  # id(RouteInfo) -> (RouteInfo, its dict): last_variant() of one call is one object


def set_strict_routes(on=True):
    """on: calls outside every window of the route table raise RouteError
    instead of running the fallback (for the whole process; overrides
    NORMGATE_STRICT_ROUTES). ValueError for anything but True or False (as
    route_for's deterministic=): the string "false" is truthy, and would have
    turned strict mode on."""
    if not isinstance(on, bool):
        raise ValueError("set_strict_routes: on must be True or False, got %r" % (on,))
    _lib.check(_lib.lib().ng_set_strict_routes(1 if on else 0))
    _route_cache.clear()


def load_routes(path=None):
    """Load (or reload) the route table now: path None: the default search
    ($NORMGATE_ROUTES, the installed table, the build tree's routes/; of the
    last two, on a GPU with a table of its own beside sm90a.toml, its
    sm90a@SLUG.toml: capi.h); else
    that .toml (approvals beside it). Re-reads NORMGATE_DISPATCH; the fallback
    warnings start afresh. RouteError naming the problem (the table in use
    stays); ValueError for a path that is not a str or os.PathLike, or is
    empty (the library would take "" for the default search). Returns the
    table's path."""
    if path is not None:
        if not isinstance(path, (str, os.PathLike)):
            raise ValueError("load_routes: path must be a str, an os.PathLike or None, got %r" % (path,))
        p = os.fspath(path)
        if not isinstance(p, str):  # a PathLike of bytes: as load_routes(b"...")
            raise ValueError("load_routes: path must be a str path, got %r" % (p,))
        if not p:
            raise ValueError("load_routes: path is empty (''); pass None for the default search")
        path = p
    _lib.check(_lib.lib().ng_routes_load(None if path is None else _lib._bytes(path, "path")))
    with _warn_lock:
        _warned.clear()
    _route_cache.clear()
    return route_for("fwd", 1, 1)["table"]


def _variant_for(variant, op):
    """The name for op out of variant: None, a name (used for the op it
    belongs to), or a dict {"fwd": name, "bwd": name} (keys optional)."""
    if variant is None:
        return None
    if isinstance(variant, dict):
        unknown = set(variant) - {"fwd", "bwd"}
        if unknown:
            raise ValueError("variant dict keys must be \"fwd\" and/or \"bwd\", got %s" % sorted(unknown))
        # Every name given, not only op's: a wrong one fails here, not at the
        # first backward (or inside a traced graph).
        for key, name in variant.items():
            if name is None:
                continue
            if not isinstance(name, str):
                raise ValueError("variant[%r] must be a variant name or None, got %r" % (key, name))
            got = variant_info(name)["op"]  # ValueError naming an unknown name
            if got != key:
                raise ValueError("variant[%r] = %r is a %s variant" % (key, name, got))
        return variant.get(op)
    if isinstance(variant, str):
        return variant if variant_info(variant)["op"] == op else None
    raise ValueError("variant must be None, a variant name or {\"fwd\": ..., \"bwd\": ...}, got %r" % (variant,))


def _int64(fn, name, v):
    """v as an int, or ValueError naming fn, the argument and the value: ctypes
    would truncate 2048.9 to 2048, take True as 1 and keep the low 64 bits of
    2**64 + 5."""
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise ValueError("%s: %s must be an integer, got %r" % (fn, name, v))
    if not -(1 << 63) <= v < (1 << 63):
        raise ValueError("%s: %s = %d does not fit in 64 bits" % (fn, name, v))
    return int(v)


def bwd_workspace_bytes(T_rows, H, deterministic=True, variant=None):
    """Device workspace (bytes) the named backward variant needs for T_rows =
    T*heads rows of length H (variant None: bwd_det_chunked, or
    bwd_nondet_atomic when not deterministic). The routed variant's need for a
    call: route_for("bwd", ...)["workspace_bytes"]. ValueError for an unknown
    variant, a T_rows or H it refuses, or one that is not an integer of 64 bits."""
    rows, h = _int64("bwd_workspace_bytes", "T_rows", T_rows), _int64("bwd_workspace_bytes", "H", H)
    if not isinstance(deterministic, bool):
        raise ValueError("bwd_workspace_bytes: deterministic must be True or False, got %r" % (deterministic,))
    if variant is not None and (not isinstance(variant, str) or not variant):
        raise ValueError("bwd_workspace_bytes: variant must be a variant name or None, got %r" % (variant,))
    return _lib.bwd_workspace_bytes(variant if variant is not None else (_DET if deterministic else _NONDET), rows, h)


def copy_vec16(dst, src):
    """Benchmark ceiling: copy src into dst (CUDA tensors, same number of bytes,
    contiguous, 16-byte aligned, a multiple of 16 bytes) with normgate's
    16-byte vectorized copy kernel on the current stream. Bandwidth = 2 *
    bytes / time (read + write). ValueError for a bad tensor."""
    torch = _torch()
    for name, t in (("dst", dst), ("src", src)):
        if not isinstance(t, torch.Tensor) or not t.is_cuda:
            raise ValueError(f"copy_vec16: {name} must be a CUDA tensor, got {type(t).__name__}"
                             f"{'' if not isinstance(t, torch.Tensor) else ' on ' + str(t.device)}")
        if not t.is_contiguous():
            raise ValueError(f"copy_vec16: {name} must be contiguous (strides {tuple(t.stride())})")
    nbytes = src.numel() * src.element_size()
    if dst.numel() * dst.element_size() != nbytes:
        raise ValueError(f"copy_vec16: dst holds {dst.numel() * dst.element_size()} bytes, src {nbytes}")
    with torch.cuda.device(src.device):
        _lib.check(_lib.lib().ng_copy_vec16(_ptr(dst), _ptr(src), nbytes, _stream(src.device)))


CEILING_KINDS = ("vec16_grid4", "vec16_tile1", "vec16_tile2", "vec16_tile4", "vec16_tile8", "vec16_tile16", "memcpy", "tma_bulk",
                 "read_only", "write_only")
"""The benchmark ceiling streams (bench/timing/src/ceiling.cu): the copies,
then the one-direction streams read_only and write_only."""


def ceiling_stream(kind, dst, src):
    """Benchmark ceiling: run stream `kind` (one of CEILING_KINDS) on the
    current stream. Copies copy src into dst (bandwidth = 2 * bytes / time);
    "read_only" reads src (dst None), "write_only" writes dst (src None)
    (bandwidth = bytes / time). Tensors: CUDA, contiguous, 16-byte aligned, a
    multiple of 16 bytes, dst and src the same size. ValueError for an unknown
    kind or a bad tensor."""
    torch = _torch()
    if kind not in CEILING_KINDS:
        raise ValueError(f"ceiling_stream: kind {kind!r} is not one of {', '.join(CEILING_KINDS)}")
    used = [(n, t) for n, t in (("dst", dst), ("src", src))
            if not (n == "dst" and kind == "read_only") and not (n == "src" and kind == "write_only")]
    for name, t in used:
        if not isinstance(t, torch.Tensor) or not t.is_cuda:
            raise ValueError(f"ceiling_stream: {name} must be a CUDA tensor, got {type(t).__name__}"
                             f"{'' if not isinstance(t, torch.Tensor) else ' on ' + str(t.device)}")
        if not t.is_contiguous():
            raise ValueError(f"ceiling_stream: {name} must be contiguous (strides {tuple(t.stride())})")
    sizes = {t.numel() * t.element_size() for _, t in used}
    if len(sizes) != 1:
        raise ValueError(f"ceiling_stream: dst and src hold different byte counts {sorted(sizes)}")
    nbytes = sizes.pop()
    dev = used[0][1].device
    with torch.cuda.device(dev):
        _lib.check(_lib.lib().ng_ceiling_stream(_lib._bytes(kind, "kind"), _ptr(dst) if kind != "read_only" else None,
                                                _ptr(src) if kind != "write_only" else None, nbytes, _stream(dev)))


# The eps every entry point accepts (seeds/case_id.h kMinEps, kMaxEps; the C
# ABI's ng_fwd refuses the rest too): the normal float32 numbers, since the
# kernels take float32(eps). Below FLT_MIN it is a subnormal or 0 there (0:
# an all-zero row's y is NaN); above FLT_MAX infinite.
EPS_MIN = 2.0 ** -126                      # FLT_MIN, 1.1754943508222875e-38
EPS_MAX = (2.0 - 2.0 ** -23) * 2.0 ** 127  # FLT_MAX, 3.4028234663852886e+38


def _check_eps(eps, what="eps"):
    """eps as a Python float, or ValueError naming the value when it is not a
    real number in EPS_MIN..EPS_MAX (finite, normal in float32). The kernels
    use float32(eps)."""
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise ValueError("%s must be a float, got %r" % (what, eps))
    try:
        e = float(eps)
    except OverflowError:  # an int past the float range
        e = math.inf
    if math.isfinite(e) and EPS_MIN <= e <= EPS_MAX:
        return e
    there = ""
    if math.isfinite(e) and 0 < e < EPS_MIN:
        f = ctypes.c_float(e).value
        if f == 0.0:
            there = " (0 there)"
        elif f < EPS_MIN:
            there = " (a subnormal %r there)" % f
        else:  # within half an ulp below EPS_MIN: float32(eps) is EPS_MIN itself
            there = " (it rounds up to EPS_MIN there, but the oracle would use eps as given: give EPS_MIN)"
    elif math.isfinite(e) and EPS_MAX < e < 2.0 ** 128 - 2.0 ** 103:
        there = " (it rounds down to EPS_MAX there, but the oracle would use eps as given: give EPS_MAX)"
    raise ValueError("%s = %r is outside %r..%r (the normal float32 numbers): the kernels take float32(eps)%s"
                     % (what, eps, EPS_MIN, EPS_MAX, there))


def rmsnorm_train_forward(x, w, eps=1e-6, residual=None, out=None, msq=None, variant=None):
    """RMSNorm forward (training): y = x * rstd * w with rstd = 1/sqrt(mean(x^2) + eps) per row.

    x: CUDA bfloat16 [T, H] or [T, heads, 256] (heads 24 or 4), last dim contiguous,
    other strides free. w: CUDA [H] bfloat16 or float32. eps: float, finite and in
    EPS_MIN..EPS_MAX (the normal float32 range, 1.1754943508222875e-38 ..
    3.4028234663852886e+38; the kernel uses float32(eps)), else ValueError naming
    it before anything runs. residual: u [T, H] bfloat16 for the fused residual add (form res;
    x is then h): h_new = bf16(h + u) (one rounding) is normalized and returned.
    out: optional preallocated y (same shape as x, bfloat16, last dim contiguous).
    msq: optional CUDA float64 tensor of T*heads contiguous values that receives
    each row's m = mean(x^2) + eps in binary64 (rstd rounds 1/sqrt(m) to
    float32); pass it to rmsnorm_train_backward(msq=...) for a dw free of the
    float32 rstd's rounding (the autograd Function does).
    variant: None runs the routed variant (module docstring: RouteError when
    the call's window has no current approval); a forward variant's name runs
    that one, an explicit override. last_variant("fwd") says what ran.
    Returns (y, rstd), or (y, rstd, h_new) with residual. y has x's shape
    (a new contiguous tensor unless out is given); rstd is float32 [T] ([T, heads]
    for the head forms); h_new is a new contiguous [T, H] bfloat16 tensor.
    """
    eps = _check_eps(eps)  # before anything else: needs no torch, no GPU
    torch = _torch()
    _check_cuda("x", x, (torch.bfloat16,))
    dev = x.device
    T, heads, H, xs, xsh = _rows_layout("x", x)
    wd = _weight(w, H, dev)
    res = residual is not None
    if res and heads != 1:
        raise ValueError("residual is given but x has shape %s; the fused residual add is for [T, H] rows"
                         % (tuple(x.shape),))
    if out is None:
        y = torch.empty(tuple(x.shape), dtype=torch.bfloat16, device=dev)
    else:
        _check_cuda("out", out, (torch.bfloat16,), dev)
        y = out
    _, _, _, ys, ysh = _rows_layout("out", y, x.shape)
    form = "res" if res else _HEADS.get(heads, "plain")
    _route("fwd", H, T, wd, form, True, variant)
    rstd = torch.empty(_rstd_shape(T, heads), dtype=torch.float32, device=dev)
    a = _lib.FwdArgs()
    a.variant = None if variant is None else _lib._bytes(variant, "variant")
    a.x, a.x_stride, a.x_stride_h = x.data_ptr(), xs, xsh
    a.w, a.w_dtype = w.data_ptr(), wd
    a.form = _lib.FORMS["res" if res else _HEADS.get(heads, "plain")]
    a.y, a.y_stride, a.y_stride_h = y.data_ptr(), ys, ysh
    a.rstd = rstd.data_ptr()
    a.T, a.H, a.heads = T, H, heads
    a.eps = eps
    if msq is not None:
        _check_msq(msq, T * heads, dev)
        a.msq = msq.data_ptr()
    h_new = None
    if res:
        _check_cuda("residual", residual, (torch.bfloat16,), dev)
        _, _, _, us, _ = _rows_layout("residual", residual, x.shape)
        h_new = torch.empty((T, H), dtype=torch.bfloat16, device=dev)
        a.u, a.u_stride = residual.data_ptr(), us
        a.h_new, a.h_new_stride = h_new.data_ptr(), H
    with torch.cuda.device(dev):
        _lib.check(_lib.lib().ng_fwd(ctypes.byref(a), _stream(dev)))
        _record("fwd")
    return (y, rstd, h_new) if res else (y, rstd)


def _check_msq(msq, rows, dev):
    torch = _torch()
    _check_cuda("msq", msq, (torch.float64,), dev)
    if msq.numel() != rows or not msq.is_contiguous():
        raise ValueError("msq has shape %s (contiguous: %s); expected %d contiguous float64 values (T*heads)"
                         % (tuple(msq.shape), msq.is_contiguous(), rows))


def rmsnorm_train_backward(dy, x, w, rstd, dh_new=None, deterministic=True, workspace=None, dx=None, dw=None,
                           msq=None, variant=None):
    """RMSNorm backward: dx (bfloat16, x's shape) and dw (float32 [H]).

    dy, x: as in the forward (x is the forward's input; with the fused residual
    add, the forward's h_new). dy may be expanded (stride 0) for the head forms.
    rstd: the forward's float32 rstd (T*heads values, contiguous). dh_new:
    [T, H] bfloat16 gradient reaching h_new from the residual stream (form
    res): dx then holds dh = bf16(dx + dh_new) (one rounding).
    deterministic: True runs the variant routed for deterministic backwards
    (bitwise reproducible), False the one routed for nondet (dw may differ in
    the last bits between runs; a det variant may serve it).
    variant: None runs the routed variant (module docstring: RouteError when
    the call's window has no current approval); a backward variant's name runs
    that one, an explicit override (a nondet one only with deterministic=False).
    last_variant("bwd") says what ran.
    workspace: optional CUDA uint8 tensor of at least route_for("bwd", ...)
    ["workspace_bytes"] bytes for this call (allocated per call when None). dx, dw: optional
    preallocated outputs (dx: x's shape, last dim contiguous; dw: float32 [H]).
    msq: the forward's msq (float64, T*heads values; optional): dw then uses
    each row's rstd refined against it in binary64. Without it dw takes the
    float32 rstd as exact, whose rounding can put dw over the budget on long
    columns (docs/perf/numerics.md, D2 and D3).
    Returns (dx, dw); dw is float32 whatever w's dtype.
    """
    torch = _torch()
    _check_cuda("x", x, (torch.bfloat16,))
    dev = x.device
    T, heads, H, xs, xsh = _rows_layout("x", x)
    _check_cuda("dy", dy, (torch.bfloat16,), dev)
    _, _, _, dys, dysh = _rows_layout("dy", dy, x.shape)
    wd = _weight(w, H, dev)
    _check_cuda("rstd", rstd, (torch.float32,), dev)
    if rstd.numel() != T * heads or not rstd.is_contiguous():
        raise ValueError("rstd has shape %s (contiguous: %s); expected %d contiguous float32 values (T*heads)"
                         % (tuple(rstd.shape), rstd.is_contiguous(), T * heads))
    res = dh_new is not None
    if res and heads != 1:
        raise ValueError("dh_new is given but x has shape %s; the fused residual add is for [T, H] rows"
                         % (tuple(x.shape),))
    form = "res" if res else _HEADS.get(heads, "plain")
    route = _route("bwd", H, T, wd, form, deterministic, variant)
    if dx is None:
        dx = torch.empty(tuple(x.shape), dtype=torch.bfloat16, device=dev)
    else:
        _check_cuda("dx", dx, (torch.bfloat16,), dev)
    _, _, _, dxs, dxsh = _rows_layout("dx", dx, x.shape)
    if dw is None:
        dw = torch.empty((H,), dtype=torch.float32, device=dev)
    else:
        _check_cuda("dw", dw, (torch.float32,), dev)
        if tuple(dw.shape) != (H,) or (H > 1 and dw.stride(0) != 1):
            raise ValueError("dw has shape %s; expected a contiguous [%d]" % (tuple(dw.shape), H))
    need = route["workspace_bytes"]
    if workspace is None:
        workspace = torch.empty((max(need, 1),), dtype=torch.uint8, device=dev)
    else:
        _check_cuda("workspace", workspace, (torch.uint8,), dev)
        if not workspace.is_contiguous() or workspace.numel() < need:
            raise ValueError("workspace has %d bytes (contiguous: %s); %s needs %d contiguous bytes"
                             % (workspace.numel(), workspace.is_contiguous(), route["variant"], need))
    a = _lib.BwdArgs()
    a.dy, a.dy_stride, a.dy_stride_h = dy.data_ptr(), dys, dysh
    a.x, a.x_stride, a.x_stride_h = x.data_ptr(), xs, xsh
    a.w, a.w_dtype = w.data_ptr(), wd
    a.form = _lib.FORMS["res" if res else _HEADS.get(heads, "plain")]
    a.rstd = rstd.data_ptr()
    a.dx, a.dx_stride, a.dx_stride_h = dx.data_ptr(), dxs, dxsh
    a.dw = dw.data_ptr()
    a.T, a.H, a.heads = T, H, heads
    a.workspace, a.workspace_bytes = workspace.data_ptr(), workspace.numel()
    if msq is not None:
        _check_msq(msq, T * heads, dev)
        a.msq = msq.data_ptr()
    if res:
        _check_cuda("dh_new", dh_new, (torch.bfloat16,), dev)
        _, _, _, dns, _ = _rows_layout("dh_new", dh_new, x.shape)
        a.dh_new, a.dh_new_stride = dh_new.data_ptr(), dns
    with torch.cuda.device(dev):
        if variant is None:
            mode = _lib.NG_MODE_DET if deterministic else _lib.NG_MODE_NONDET
            _lib.check(_lib.lib().ng_bwd_routed(mode, ctypes.byref(a), _stream(dev)))
        else:
            _lib.check(_lib.lib().ng_bwd(_lib._bytes(variant, "variant"), ctypes.byref(a), _stream(dev)))
        _record("bwd")
    return dx, dw


def _autograd_function():
    torch = _torch()

    class RMSNormFunction(torch.autograd.Function):
        """Autograd over normgate's kernels: y = rms_norm(x) * w, as a plain
        autograd.Function whose calls go through ctypes (torch.compile breaks
        the graph at each). rms_norm and RMSNorm use the torch.library
        operators of normgate.ops instead, which it traces.

        forward(ctx, x, w, eps=1e-6, deterministic=True, variant=None) -> y.
        variant: None (both ops routed), a variant name (used for its own op,
        the other routed) or {"fwd": name, "bwd": name} (either key
        optional): explicit overrides. backward returns
        (dx, dw) with dw cast to w.dtype (the kernel's dw is float32; for a bf16 w
        autograd needs a bf16 gradient, so dw is rounded once to bf16 there). An
        incoming gradient whose layout the kernel cannot take (last dim not
        contiguous, or a stride-0 [T, H]) is made contiguous first: autograd
        chooses that tensor, so this is the one place that copies.
        """

        @staticmethod
        def forward(ctx, x, w, eps=1e-6, deterministic=True, variant=None):
            T, heads = x.shape[0], (x.shape[1] if x.dim() == 3 else 1)
            msq = torch.empty((T * heads,), dtype=torch.float64, device=x.device)
            y, rstd = rmsnorm_train_forward(x, w, eps, msq=msq, variant=_variant_for(variant, "fwd"))
            ctx.save_for_backward(x, w, rstd, msq)
            ctx.deterministic = deterministic
            ctx.bwd_variant = _variant_for(variant, "bwd")
            return y

        @staticmethod
        def backward(ctx, dy):
            x, w, rstd, msq = ctx.saved_tensors
            if dy.dtype != torch.bfloat16:
                dy = dy.to(torch.bfloat16)
            ok = dy.stride(-1) == 1 and (dy.dim() == 3 or dy.shape[0] <= 1 or dy.stride(0) >= dy.shape[1])
            if not ok:
                dy = dy.contiguous()
            dx, dw = rmsnorm_train_backward(dy, x, w, rstd, deterministic=ctx.deterministic, msq=msq,
                                            variant=ctx.bwd_variant)
            return dx, dw.to(w.dtype), None, None, None

    return RMSNormFunction


_fn_cache = {}


def __getattr__(name):
    # RMSNormFunction is defined on first access (it subclasses a torch class);
    # RMSNorm, rms_norm's operators and `ops` live in normgate.ops (imports torch,
    # registers the torch.library operators).
    if name == "RMSNormFunction":
        if "f" not in _fn_cache:
            _fn_cache["f"] = _autograd_function()
        return _fn_cache["f"]
    if name in ("RMSNorm", "ops"):
        import importlib
        ops = importlib.import_module(".ops", __name__)
        return ops if name == "ops" else ops.RMSNorm
    raise AttributeError("module 'normgate' has no attribute %r" % name)


def rms_norm(x, w, eps=1e-6, deterministic=True, variant=None, residual=None):
    """y = RMSNorm(x) * w with autograd, through the torch.library operators
    of normgate.ops (torch.compile traces it): x [T, H] or [T, heads, 256]
    bfloat16; dx bf16, dw in w's dtype. Routed variants unless variant names
    one (a name for its own op, or {"fwd": ..., "bwd": ...}). residual [T, H]:
    the fused residual add, returning (y, h_new). normgate.ops.rms_norm says
    more; normgate.RMSNorm is the module (any leading dims, autocast)."""
    return __getattr__("ops").rms_norm(x, w, eps, deterministic, variant, residual)


def generate(case_id, device="cuda"):
    """The inputs of a case (the host generator's bits: what every normgate check uses).

    Returns a dict: x (or h and u for form res), dy, dh_new (res), w (bfloat16
    or float32 per the case), eps (float), form (str), T, H, heads, case (the
    canonical id). Tensors are contiguous, [T, H] or [T, heads, 256], on `device`.
    On a CUDA device they are made there by the device generator
    (ng_generate_device, the same bits as the host generator: tested), on
    torch's current stream; elsewhere by the host generator.
    """
    torch = _torch()
    info = _lib.case_info(case_id)
    T, H, heads, rows = info["T"], info["H"], info["heads"], info["rows"]
    shape = (T, H) if heads == 1 else (T, heads, H)
    n = rows * H
    res = info["form"] == "res"
    dev = torch.device(device)
    if dev.type != "cuda":  # host tensors: refused before allocating when they cannot fit
        _lib.require_host_memory(case_id, 0, copies=2)  # the generator's and these (measured: 8.0 B/element plain)
    on_gpu = dev.type == "cuda"
    if on_gpu and not torch.cuda.is_available():
        raise ValueError("device %r: torch sees no CUDA device; pass device=\"cpu\" for the host "
                         "generator (the same bits)" % (device,))

    def bf16():
        return torch.empty((n,), dtype=torch.bfloat16, device=dev if on_gpu else "cpu")

    x, dy = bf16(), bf16()
    w = torch.empty((H,), dtype=torch.bfloat16 if info["w"] == "bf16" else torch.float32,
                    device=dev if on_gpu else "cpu")
    u, dh_new = (bf16(), bf16()) if res else (None, None)
    b = _inputs_struct(x, dy, w, u, dh_new)
    if on_gpu:
        with torch.cuda.device(dev):
            _lib.check(_lib.lib().ng_generate_device(_lib._bytes(case_id, "case_id"), ctypes.byref(b),
                                                     _stream(x.device)))
    else:
        _lib.check(_lib.lib().ng_generate_host(_lib._bytes(case_id, "case_id"), ctypes.byref(b)))
    out = {"dy": dy.view(shape).to(device), "w": w.to(device), "eps": info["eps"], "form": info["form"],
           "T": T, "H": H, "heads": heads, "case": info["case"]}
    if res:
        out["h"] = x.view(shape).to(device)
        out["u"] = u.view(shape).to(device)
        out["dh_new"] = dh_new.view(shape).to(device)
    else:
        out["x"] = x.view(shape).to(device)
    return out


def _inputs_struct(x, dy, w, u=None, dh_new=None):
    """ng_host_inputs over contiguous tensors (pointers and element counts;
    u, dh_new None: NULL, 0). The tensors must outlive the struct's use."""
    b = _lib.HostInputs()
    b.x, b.x_elems = x.data_ptr(), x.numel()
    b.dy, b.dy_elems = dy.data_ptr(), dy.numel()
    b.w, b.w_elems = w.data_ptr(), w.numel()
    if u is not None:
        b.u, b.u_elems = u.data_ptr(), u.numel()
    if dh_new is not None:
        b.dh_new, b.dh_new_elems = dh_new.data_ptr(), dh_new.numel()
    return b


_EMPTY = ctypes.c_uint64(0)  # the address given for an empty output tensor


MAX_THREADS = 4096  # the C ABI's NG_MAX_THREADS


def default_threads():
    """The OpenMP threads the oracle and validators use when given threads=0
    (an int >= 1).

    OMP_NUM_THREADS if it is set and valid: its first entry, as libgomp reads
    it ("8,4" gives 8: the outer level's count), ASCII digits only, capped at
    MAX_THREADS (with a RuntimeWarning). A value libgomp would ignore (empty, not a number, 0) is
    ignored here too, with a RuntimeWarning naming it. Otherwise every CPU
    the calling thread may run on (os.sched_getaffinity; a CPU quota of a
    cgroup is not seen, and a thread pinned by OMP_PROC_BIND or
    GOMP_CPU_AFFINITY sees its own set only).

    Not the OpenMP runtime's own default: torch ships a libgomp.so.1 of its
    own, the dynamic linker hands that same runtime to this library (same
    soname, loaded first), and torch sets its thread count to
    torch.get_num_threads() (physical cores, or what set_num_threads gave),
    so the oracle's parallel regions would run on that many threads.
    Measured here (2 CPUs): torch.set_num_threads(1) made Oracle(threads=0)'s
    open at [4096, 5120] res 0.265 s instead of 0.209 s (docs/perf/peers.md,
    D6)."""
    env = os.environ.get("OMP_NUM_THREADS")
    if env is not None:
        first = env.split(",")[0].strip()
        if re.fullmatch(r"[0-9]+", first) and int(first) >= 1:
            if int(first) > MAX_THREADS:
                warnings.warn("OMP_NUM_THREADS=%r is above MAX_THREADS: %d threads" % (env, MAX_THREADS),
                              RuntimeWarning, stacklevel=2)
            return min(int(first), MAX_THREADS)
        warnings.warn("OMP_NUM_THREADS=%r is not a positive integer (or a list of them): ignored, "
                      "using the CPU affinity" % env, RuntimeWarning, stacklevel=2)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _threads(threads):
    """threads as given (1..MAX_THREADS), or default_threads() for 0.
    Any integer type (numpy's included; not bool). ValueError naming the value
    for a negative count, one above MAX_THREADS or a non-integer."""
    if isinstance(threads, bool):
        raise ValueError("threads must be an int >= 0 (0: default_threads()), got %r" % (threads,))
    try:
        n = operator.index(threads)
    except TypeError:
        raise ValueError("threads must be an int >= 0 (0: default_threads()), got %r" % (threads,)) from None
    if n < 0 or n > MAX_THREADS:
        raise ValueError("threads = %d is outside 0..%d (0: default_threads())" % (n, MAX_THREADS))
    return n if n > 0 else default_threads()


def _host(t):
    """A contiguous host copy of tensor t for the C ABI, which reads it only
    during the call that takes it.

    A CPU tensor is returned as it is when contiguous (no copy; the C ABI
    reads it in place), else a contiguous copy. A CUDA tensor is copied
    synchronously into page-locked memory from torch's caching host
    allocator: one DMA at PCIe rate, and the pages are reused by the next
    copy of the same size class instead of being faulted in again (pageable
    .to("cpu"): 38.8-40.4 s of a row's 68.8-73.9 s accuracy phase on the
    H200, 0.7-3.3 s after; docs/perf/peers.md, D6). torch rounds each such
    block up to a power of two and keeps it page-locked for the rest of the
    process (the four ~0.67 GB inputs of [65537, 5120] res hold ~4 GB;
    torch's _host_emptyCache returns them). If page-locked memory cannot be had
    (cudaHostAlloc fails, e.g. under a memory limit) the copy is made to
    pageable memory instead (slower, same bits)."""
    torch = _torch()
    t = t.detach()
    if t.device.type != "cuda":
        return t.to("cpu").contiguous()
    try:
        h = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    except RuntimeError:
        return t.to("cpu").contiguous()
    h.copy_(t)  # synchronous: the ABI reads h right after
    return h


_OUT_DTYPES = {"y": "bfloat16", "rstd": "float32", "dx": "bfloat16", "dw": "float32", "h_new": "bfloat16"}


class Oracle:
    """The FP64 oracle of one case (reference with MPFR escalation), computed
    once; validate() any number of implementations' outputs against it. A
    context manager (close() frees it).

        with normgate.Oracle("H=4096,T=4097,w=bf16,form=plain,family=cancel,seed=0") as o:
            report = o.validate(y=y, rstd=rstd, dx=dx, dw=dw)
            assert report["pass"], report

    inputs: None (the host generator makes the case's inputs again: tens of
    CPU ns per element and tensor), or the dict generate(case_id, ...)
    returned (its tensors on any device; copied to host memory by _host, and
    again by the C ABI, which keeps its own copy): the oracle
    uses those bits after checking a sample of them against the generator
    (ng_oracle_open_inputs: 64 rows spread over each tensor, and w), so inputs
    of another case raise ValueError naming the tensor, row and column.
    threads: OpenMP threads (0: default_threads(), i.e. OMP_NUM_THREADS or
    every CPU of the process's affinity, not the runtime's default, which
    torch lowers); results do not depend on it. ValueError naming the value
    if negative, above MAX_THREADS (4096) or not an integer.
    seconds: wall seconds spent so far, by part (a dict, for planning
    benchmarks): "copy" (inputs' and outputs' copies to host memory), "open"
    (the oracle's reference, sample check included), "validate" (the
    validators, outputs already on the host).
    """

    def __init__(self, case_id, threads=0, inputs=None):
        self._h = None
        self.seconds = {"copy": 0.0, "open": 0.0, "validate": 0.0}
        self.info = _lib.case_info(case_id)
        self.case = self.info["case"]
        threads = _threads(threads)
        if inputs is None:
            t0 = time.perf_counter()
            self._h = _lib.oracle_open(case_id, threads)
            self.seconds["open"] += time.perf_counter() - t0
            return
        torch = _torch()
        if not isinstance(inputs, dict):
            raise ValueError("inputs must be the dict generate() returns, got %s" % type(inputs).__name__)
        res = self.info["form"] == "res"
        names = ("h", "dy", "w", "u", "dh_new") if res else ("x", "dy", "w")
        want_w = torch.bfloat16 if self.info["w"] == "bf16" else torch.float32
        keep = {}
        for name in names:  # checked before any copy
            t = inputs.get(name)
            if not isinstance(t, torch.Tensor):
                raise ValueError("inputs[%r] must be a torch.Tensor (form %s), got %s"
                                 % (name, self.info["form"], type(t).__name__))
            want = want_w if name == "w" else torch.bfloat16
            if t.dtype != want:
                raise ValueError("inputs[%r] has dtype %s; expected %s" % (name, t.dtype, want))
            keep[name] = t
        t0 = time.perf_counter()
        keep = {name: _host(t).reshape(-1) for name, t in keep.items()}
        t1 = time.perf_counter()
        b = _inputs_struct(keep[names[0]], keep["dy"], keep["w"], keep.get("u"), keep.get("dh_new"))
        self._h = _lib.oracle_open_inputs(case_id, b, threads)
        self.seconds["copy"] += t1 - t0
        self.seconds["open"] += time.perf_counter() - t1

    def close(self):
        h, self._h = self._h, None
        _lib.oracle_close(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def validate(self, y=None, rstd=None, dx=None, dw=None, h_new=None):
        """Validate the given outputs (None: not produced, reported absent) and
        return the report (a dict: case, pass, verdict, outputs{name: {present,
        err_tol, worst, pass, ...}}, absent, uncertified, dw_vs_fp32). A
        non-finite number (err/tol of a NaN or Inf output) is a float inf or
        nan, not the JSON files' string (docs/schemas.md, "Numbers").

        Tensors may be on any device and in any layout of the right shape: CUDA
        tensors are copied to page-locked host memory (_host), non-contiguous
        CPU tensors to contiguous ones; contiguous CPU tensors are read in
        place during the call (a buffer misaligned for its dtype is copied by
        the C ABI). dtypes: y, dx, h_new bfloat16; rstd, dw float32 (else
        ValueError). Shapes: y, dx, h_new T*heads*H elements (form res: dx is
        dh), rstd T*heads, dw H.
        """
        torch = _torch()
        if self._h is None:
            raise ValueError("Oracle is closed")
        o = _lib.Outputs()
        keep = []
        t0 = time.perf_counter()
        for name, t in (("y", y), ("rstd", rstd), ("dx", dx), ("dw", dw), ("h_new", h_new)):
            if t is None:
                continue
            if not isinstance(t, torch.Tensor):
                raise ValueError("%s must be a torch.Tensor, got %s" % (name, type(t).__name__))
            want = getattr(torch, _OUT_DTYPES[name])
            if t.dtype != want:
                raise ValueError("%s has dtype %s; expected %s" % (name, t.dtype, want))
            h = _host(t)
            keep.append(h)
            # An empty tensor (T = 0) has address 0, which the C ABI reads as
            # "not given": point it at a live byte instead (nothing is read).
            setattr(o, name, h.data_ptr() or ctypes.addressof(_EMPTY))
            setattr(o, name + "_elems", h.numel())
        t1 = time.perf_counter()
        rep = _lib.oracle_validate(self._h, o)
        self.seconds["copy"] += t1 - t0
        self.seconds["validate"] += time.perf_counter() - t1
        return rep


def _desc(t):
    """A short description of an output for messages: absent, or dtype and shape."""
    return "absent" if t is None else "%s %s" % (str(t.dtype).replace("torch.", ""), tuple(t.shape))


def check(impl, case_id, device=None):
    """Run `impl` on a case's inputs and validate what it returns.

    impl: a normgate.Implementation (its fn runs on its device; declared
    deterministic, it runs twice and the two runs must give the same bits,
    as in normgate.gate), or a bare callable. Either takes
    generate(case_id, device)'s dict and returns a dict with any of y, rstd,
    dx, dw, h_new (torch tensors; the others are reported absent).
    device: where the inputs are made; None: the Implementation's device,
    "cuda" for a bare callable (ValueError on a machine without one, naming
    device="cpu").
    Returns the Oracle's report (see Oracle.validate); for an Implementation,
    an output its op owes (bwd: y, rstd, dx, dw; fwd: y, rstd; form res also
    h_new) that fn did not return makes it fail ("pass" False, "verdict"
    "fail", "not_produced" naming them), as in normgate.gate. Raises
    ValueError for an unknown output, a non-dict result or a case the
    Implementation declares no support for (H, w, forms). A deterministic
    Implementation whose two runs differ is a finding, as in the gate and
    `normgate check`: the report of its first run with "pass" False,
    "verdict" "fail" and "nondeterministic" naming the output, the element
    and both bit patterns.
    """
    from .gate import Implementation  # gate.py imports this module
    owed = ()
    if isinstance(impl, Implementation):
        fn, det = impl.fn, impl.deterministic
        device = impl.device if device is None else device
        # What the gate holds it to: a case it declares no support for is a
        # ValueError here (it ran, and failed inside fn), and the outputs its
        # op owes must be there (a bwd returning y alone passed check).
        info = _lib.case_info(case_id)
        if not (impl.H[0] <= info["H"] <= impl.H[1]) or info["w"] not in impl.w or info["form"] not in impl.forms:
            raise ValueError("implementation %s does not support case %s (H %d..%d, w %s, forms %s)"
                             % (impl.name, case_id, impl.H[0], impl.H[1], "|".join(impl.w), "|".join(impl.forms)))
        owed = (("y", "rstd") if impl.op == "fwd" else ("y", "rstd", "dx", "dw")) + \
            (("h_new",) if info["form"] == "res" else ())
    elif callable(impl):
        fn, det = impl, False
        device = "cuda" if device is None else device
    else:
        raise TypeError("impl must be a normgate.Implementation or a callable, got %r" % (impl,))
    if not isinstance(device, str) or not re.fullmatch(r"cpu|cuda(:[0-9]+)?", device):
        raise ValueError("device: %r is not 'cpu', 'cuda' or 'cuda:N'" % (device,))  # torch's RuntimeError named none
    # The oracle holds the inputs on the host and the outputs come back
    # there: refused before any allocation when the case cannot fit (torch's
    # allocator failed, or the OOM killer ended the process; adversarial pass).
    # Measured peak RSS (H = 2048, cpu): 24.0 bytes an element for a
    # deterministic implementation (the inputs, the oracle's copy, a second
    # run's inputs and outputs), 11.9 for one run: 3 and 2 copies.
    _lib.require_host_memory(case_id, 1, impl.op == "fwd" if isinstance(impl, Implementation) else False,
                             copies=3 if det else 2)
    inputs = generate(case_id, device)

    def outputs_of(outs):
        if not isinstance(outs, dict):
            raise ValueError("impl must return a dict of outputs, got %s" % type(outs).__name__)
        unknown = sorted(set(outs) - set(_OUT_DTYPES))
        if unknown:
            raise ValueError("impl returned unknown outputs %s (expected any of y, rstd, dx, dw, h_new)" % unknown)
        return outs

    # The oracle copies the inputs before impl runs (an impl writing into its
    # inputs cannot change what it is checked against), without a second
    # host generation.
    with Oracle(case_id, inputs=inputs) as o:
        outs = outputs_of(fn(inputs))
        finding = None
        if det:
            torch = _torch()

            def kept(d):  # what validate() reads: tensors; None or absent is "not produced"
                return {k: v.detach().clone() for k, v in d.items() if isinstance(v, torch.Tensor)}

            first = kept(outs)
            again = kept(outputs_of(fn(generate(case_id, device))))
            for k in sorted(set(first) | set(again)):
                a, b = first.get(k), again.get(k)
                # Compared as the gate compares them: flat, element by element
                # (a reshape of the same bits is the same output).
                if a is None or b is None or a.dtype != b.dtype or a.numel() != b.numel():
                    finding = ("implementation %s is declared deterministic but two runs on %s gave different "
                               "outputs: %s is %s, then %s" % (impl.name, case_id, k, _desc(a), _desc(b)))
                    break
                if a.numel() == 0:
                    continue
                width = a.element_size()
                ab = a.reshape(-1).view(torch.uint8).reshape(-1, width)
                bb = b.reshape(-1).view(torch.uint8).reshape(-1, width).to(ab.device)
                diff = (ab != bb).any(dim=1).nonzero()
                if diff.numel() == 0:
                    continue
                i = int(diff[0])
                bits = lambda t: "0x" + bytes(t[i].cpu().tolist())[::-1].hex()  # noqa: E731 (little-endian)
                finding = ("implementation %s is declared deterministic but two runs on %s gave different "
                           "bits: output %s element %d (%s then %s)" % (impl.name, case_id, k, i, bits(ab), bits(bb)))
                break
        rep = o.validate(**outs)
        if finding is not None:  # a finding about impl, as the gate counts it: the case fails
            rep["pass"] = False
            rep["verdict"] = "fail"
            rep["nondeterministic"] = finding
        missing = [k for k in owed if outs.get(k) is None]
        if missing:  # not produced: fails, as in the gate ("an owed output fails its window")
            rep["pass"] = False
            rep["verdict"] = "fail"
            rep["not_produced"] = missing
        return rep
