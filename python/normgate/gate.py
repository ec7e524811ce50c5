"""normgate.gate: gate your own RMSNorm implementation with normgate's gate.

An Implementation wraps a Python callable on torch tensors (one training
step: forward, or forward and backward) with a declared source identity.
gate() registers it with the library (ng_register_external, capi.h) and runs
the same gate as `normgate gate` (ng_gate): the planner's T points per
window, refinement (dense grid, fresh seeds), the FP64 oracle, the
validators, the write-ahead journal and resume, the Markdown and JSON
reports, and approvals that go stale when the declared sources change.

    import normgate, my_rmsnorm  # the kernel in a module of its own
    impl = normgate.Implementation("my_rmsnorm", my_rmsnorm.step, op="bwd", sources=[my_rmsnorm])
    rep = normgate.gate(impl, windows=[{"H": 2048, "T": (1, 4096)}], seeds="3x4",
                        journal="out/my.journal", report_md="out/my.md")
    print(rep["verdict"])

sources= is the implementation's identity, part of the journal's campaign:
an edit of a file it names starts a new campaign (the journal is refused).
Name the kernel's files, not the script that calls gate(): with
sources=[__file__] there, even adding retry_errors=True to resume is such
an edit.

The callable gets a dict like generate()'s: x (form res: h, u, dh_new), dy,
w, eps, form, T, H, heads, case; tensors contiguous, [T, H] or
[T, heads, 256], on the implementation's device (a copy: writing into them
changes nothing). It returns a dict of outputs (torch tensors, any device):
y, rstd (forward) and, for op "bwd", dx, dw; h_new for form res. dtypes: y,
dx, h_new bfloat16; rstd, dw float32; sizes: y, dx, h_new T*heads*H
elements, rstd T*heads, dw H. An output not returned stays poisoned: one the
op owes (bwd: y, rstd, dx, dw; fwd: y, rstd; res: h_new) fails its window.
An exception raised by the callable is that case's error (journalled; the
windows needing the case fail; the gate goes on); a returned dict that
breaks the rules above (not a dict, an unknown key, a wrong dtype or size)
stops the gate with that exception, leaving a resumable journal, as Ctrl-C
does (KeyboardInterrupt is re-raised).
"""

import contextlib
import ctypes
import hashlib
import inspect
import json
import numbers
import os
import re
import signal
import stat
import sys
import tempfile
import threading
import time
import types
import warnings

from . import _lib

__all__ = ["Implementation", "gate", "source_sha256"]

NG_ECANCEL = 4
_NAME_RE = re.compile(r"[A-Za-z0-9_.+-]{1,64}\Z")
# The characters of a seed-set spelling (seeds/seed_set.h): counts, families,
# ranges and lists; the library parses it, this keeps junk out of the files
# written before it does.
_SEEDS_RE = re.compile(r"[A-Za-z0-9_.,:=x+-]{1,200}\Z")
_W_BITS = {"bf16": 1 << 0, "fp32": 1 << 1}
_FORM_BITS = {"plain": 1 << 0, "res": 1 << 1, "heads24": 1 << 2, "heads4": 1 << 3}
_OUT_DTYPES = {"y": "bfloat16", "rstd": "float32", "dx": "bfloat16", "dw": "float32", "h_new": "bfloat16"}

_c_i64 = ctypes.c_int64
_c_u64 = ctypes.c_uint64
_c_i32 = ctypes.c_int32
_c_u32 = ctypes.c_uint32
_vp = ctypes.c_void_p


class _ExternalIO(ctypes.Structure):
    """ng_external_io (capi.h)."""

    _fields_ = [
        ("case_id", ctypes.c_char_p),
        ("T", _c_i64), ("H", _c_i64), ("heads", _c_i64), ("rows", _c_i64),
        ("form", _c_i32), ("w_dtype", _c_i32),
        ("eps", ctypes.c_double),
        ("stride_t", _c_i64), ("stride_h", _c_i64),
        ("x", _vp), ("dy", _vp), ("w", _vp), ("u", _vp), ("dh_new", _vp),
        ("y", _vp), ("rstd", _vp), ("dx", _vp), ("dw", _vp), ("h_new", _vp),
        ("y_elems", _c_u64), ("rstd_elems", _c_u64), ("dx_elems", _c_u64), ("dw_elems", _c_u64),
        ("h_new_elems", _c_u64),
        ("error", _vp), ("error_cap", ctypes.c_size_t),
    ]


_RUN_FN = ctypes.CFUNCTYPE(ctypes.c_int, _vp, ctypes.POINTER(_ExternalIO))


class _ExternalDesc(ctypes.Structure):
    """ng_external_desc."""

    _fields_ = [
        ("struct_size", _c_u32), ("op", _c_i32), ("mode", _c_i32), ("wdtypes", _c_u32), ("forms", _c_u32),
        ("device", _c_i32),
        ("h_min", _c_i64), ("h_max", _c_i64),
        ("name", ctypes.c_char_p), ("source_sha256", ctypes.c_char_p), ("origin", ctypes.c_char_p),
        ("description", ctypes.c_char_p), ("ran_on", ctypes.c_char_p),
        ("run", _RUN_FN), ("user", _vp),
    ]


class _Progress(ctypes.Structure):
    """ng_gate_progress."""

    _fields_ = [
        ("phase", ctypes.c_char_p), ("done", _c_i64), ("total", _c_i64), ("run_now", _c_i64),
        ("seconds", ctypes.c_double), ("seconds_per_case", ctypes.c_double), ("worst", ctypes.c_double),
        ("window", ctypes.c_char_p), ("worst_case", ctypes.c_char_p),
    ]


_PROGRESS_FN = ctypes.CFUNCTYPE(None, _vp, ctypes.POINTER(_Progress))


class _GateOptions(ctypes.Structure):
    """ng_gate_options."""

    _fields_ = [
        ("struct_size", _c_u32), ("approve", _c_i32),
        ("table", ctypes.c_char_p), ("seeds", ctypes.c_char_p), ("windows", ctypes.c_char_p),
        ("journal", ctypes.c_char_p), ("report_md", ctypes.c_char_p), ("report_json", ctypes.c_char_p),
        ("backend", ctypes.c_char_p),
        ("t_per_window", _c_i32), ("dense_points", _c_i32), ("dense_step", _c_i64),
        ("fresh_factor", _c_i32), ("threads", _c_i32),
        ("progress", _PROGRESS_FN), ("progress_user", _vp), ("cancel", ctypes.POINTER(_c_i32)),
        ("dense_all_seeds", _c_i32), ("retry_errors", _c_i32), ("externals", ctypes.c_char_p),
    ]


class _ExportOptions(ctypes.Structure):
    """ng_export_options (80 bytes on x86-64 and aarch64 Linux)."""

    _fields_ = [
        ("struct_size", _c_u32), ("report", ctypes.c_char_p), ("out", ctypes.c_char_p),
        ("keep", _c_i32), ("all", _c_i32), ("full", _c_i32), ("tile", _c_i64),
        ("backend", ctypes.c_char_p), ("oracle", ctypes.c_char_p), ("threads", _c_i32),
        ("cancel", ctypes.POINTER(_c_i32)),
    ]


_declared = False


def _table_file(table, suffix):
    """The file route table `table` shares with its base table by `suffix`
    (".policy.toml", ...): the library's rule (ng_table_file, routing.h
    table_sibling_path), not restated here."""
    L = _L()
    if not hasattr(L, "ng_table_file"):
        raise RuntimeError("normgate: " + _lib.library_path() + " predates ng_table_file: rebuild it with "
                           "scripts/build")
    out = _vp()
    _lib.check(L.ng_table_file(os.fsencode(table), suffix.encode(), ctypes.byref(out)))
    try:
        return os.fsdecode(ctypes.cast(out, ctypes.c_char_p).value)
    finally:
        L.ng_free_string(out)


def _L():
    """The library with this module's functions declared."""
    global _declared
    L = _lib.lib()
    if not _declared:
        if not hasattr(L, "ng_gate"):
            raise RuntimeError("normgate: " + _lib.library_path() + " predates the gate ABI (no ng_gate): "
                               "rebuild it with scripts/build")
        L.ng_register_external.restype = ctypes.c_int
        L.ng_register_external.argtypes = [ctypes.POINTER(_ExternalDesc)]
        L.ng_gate_options_init.restype = None
        L.ng_gate_options_init.argtypes = [ctypes.POINTER(_GateOptions)]
        L.ng_gate.restype = ctypes.c_int
        L.ng_gate.argtypes = [ctypes.POINTER(_GateOptions), ctypes.POINTER(_vp)]
        L.ng_free_string.restype = None
        L.ng_free_string.argtypes = [_vp]
        if hasattr(L, "ng_table_file"):
            L.ng_table_file.restype = ctypes.c_int
            L.ng_table_file.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(_vp)]
        if hasattr(L, "ng_export"):
            L.ng_export_options_init.restype = None
            L.ng_export_options_init.argtypes = [ctypes.POINTER(_ExportOptions)]
            L.ng_export.restype = ctypes.c_int
            L.ng_export.argtypes = [ctypes.POINTER(_ExportOptions), ctypes.POINTER(_vp)]
        if hasattr(L, "ng_seed_set_size"):
            L.ng_seed_set_size.restype = ctypes.c_int
            L.ng_seed_set_size.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint64)]
        _declared = True
    return L


def _torch():
    try:
        import torch
    except ImportError:
        raise ImportError("normgate.gate needs torch (pip install torch)") from None
    return torch


# ---- source identity ---------------------------------------------------------

def _file_kind(mode):
    """What a stat mode that is not a regular file is, in words."""
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _read_regular(path, what):
    """The bytes of the regular file at path (a symbolic link: its target's).
    ValueError naming `what` and path for anything else, before opening it: a
    FIFO would block the open, /dev/zero (a link to it included) never ends;
    and for a dangling link or a file that cannot be read."""
    try:
        st = os.stat(path)  # follows links: what open() would read
    except OSError as e:
        dangling = isinstance(e, FileNotFoundError) and os.path.islink(path)
        why = "a symbolic link to a missing file" if dangling else (e.strerror or str(e))
        raise ValueError("sources: %s %r cannot be read (%s)" % (what, path, why)) from None
    if not stat.S_ISREG(st.st_mode):
        raise ValueError("sources: %s %r is not a regular file (%s%s)"
                         % (what, path, "a link to " if os.path.islink(path) else "", _file_kind(st.st_mode)))
    try:
        # O_NONBLOCK: a file swapped for a FIFO since the stat above does not block the open either.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise ValueError("sources: %s %r cannot be read (%s)" % (what, path, e.strerror or e)) from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise ValueError("sources: %s %r is not a regular file (it changed while being read)" % (what, path))
        try:
            return fh.read()
        except OSError as e:
            raise ValueError("sources: %s %r cannot be read (%s)" % (what, path, e.strerror or e)) from None


def _source_bytes(s):
    """(label, bytes) pairs of one declared source."""
    if isinstance(s, (str, bytes, os.PathLike)):
        p = os.fspath(s)
        p = os.fsdecode(p) if isinstance(p, bytes) else p  # any bytes: a UnicodeDecodeError named no path
        if os.path.isdir(p):
            def walk_error(e):  # os.walk would skip an unreadable folder silently: a changed identity
                raise ValueError("sources: folder %r cannot be read (%s)" % (e.filename, e.strerror or e))
            out = []
            # Symlinked sub-folders are followed (a kernel's files under one
            # are its sources too: skipped, an edit there left the identity
            # unchanged), each real folder once (a link cycle ends).
            seen = set()
            for root, dirs, files in os.walk(p, onerror=walk_error, followlinks=True):
                real = os.path.realpath(root)
                if real in seen:
                    dirs[:] = []
                    continue
                seen.add(real)
                dirs.sort()
                for f in sorted(files):
                    full = os.path.join(root, f)
                    out.append((os.path.relpath(full, p).replace(os.sep, "/"),
                                _read_regular(full, "file")))
            if not out:
                raise ValueError("sources: directory %r holds no file" % p)
            return out
        if not os.path.isfile(p):
            raise ValueError("sources: %r is not a file or directory" % p)
        return [(os.path.basename(p), _read_regular(p, "file"))]
    if isinstance(s, types.ModuleType):
        try:
            f = inspect.getsourcefile(s)
        except TypeError:  # a built-in module (sys): inspect's own TypeError named no source
            f = None
        if f is None:
            raise ValueError("sources: module %s has no source file" % s.__name__)
        return [(s.__name__, _read_regular(f, "module %s's file" % s.__name__))]
    if inspect.isfunction(s) or inspect.ismethod(s) or inspect.isclass(s):
        try:
            src = inspect.getsource(s)
        except (OSError, TypeError):
            raise ValueError("sources: the source of %r cannot be read (defined interactively?); "
                             "pass its file or source_sha256=" % (s,)) from None
        return [("%s.%s" % (s.__module__, s.__qualname__), src.encode())]
    raise TypeError("sources: %r is not a path, a module, a function or a class" % (s,))


def source_sha256(sources):
    """The SHA-256 identity of a list of sources: paths (a directory: every
    file under it, sorted), modules (their source file) and functions or
    classes (their source text). It is SHA-256 of the manifest
    "sha256(bytes)  label\\n" per item in order (label: a file's basename, a
    directory file's path below it, a module's name, a function's module and
    qualified name), so the same code gives the same identity on any machine.
    ValueError naming a source that cannot be read; TypeError for another
    kind of object."""
    if isinstance(sources, (str, bytes, os.PathLike)) or not hasattr(sources, "__iter__"):
        sources = [sources]
    lines = []
    for s in sources:
        for label, data in _source_bytes(s):
            lines.append("%s  %s\n" % (hashlib.sha256(data).hexdigest(), label))
    if not lines:
        raise ValueError("sources: empty list (declare the files, modules or functions of the implementation)")
    return hashlib.sha256("".join(lines).encode()).hexdigest()


# ---- implementations -----------------------------------------------------------

def _names(value, allowed, what):
    if isinstance(value, str):
        vals = [value]
    else:
        try:
            vals = list(value)
        except TypeError:
            raise TypeError("%s must be a name or a list of names (any of %s), got %r"
                            % (what, ", ".join(allowed), value)) from None
    if not vals:
        raise ValueError("%s: empty (any of %s)" % (what, ", ".join(allowed)))
    for v in vals:
        if v not in allowed:
            raise ValueError("%s: %r is not one of %s" % (what, v, ", ".join(allowed)))
    return vals


def _int(v, what, lo, hi=None):
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise TypeError("%s must be an int, got %r" % (what, v))
    v = int(v)
    if v < lo or (hi is not None and v > hi):
        raise ValueError("%s = %d is outside %d..%s" % (what, v, lo, hi if hi is not None else "inf"))
    return v


class Implementation:
    """An RMSNorm training step from outside normgate, to gate.

    name: [A-Za-z0-9_.+-]{1,64}, not a built-in variant's name (route tables
        name it; approvals are keyed by it).
    fn: callable(inputs dict) -> outputs dict (module docstring).
    op: "bwd" (gated on y, rstd, dx, dw: fn does forward and backward) or
        "fwd" (y, rstd).
    deterministic: whether repeated runs give the same bits (det windows need
        True; nondet windows take either; op="fwd" needs True, since one
        forward serves both modes). The gate tests it: a deterministic
        implementation runs twice on every case, and differing bits are
        that case's error.
    H: an int, or (h_min, h_max) inclusive, inside 1..16384.
    w: weight dtypes it supports, "bf16" and/or "fp32".
    forms: "plain", "res", "heads24", "heads4" (one or a list).
    sources / source_sha256: its identity, exactly one of them: a list of
        paths, modules, functions or classes (source_sha256() hashes them), or
        64 hex digits you computed. Approvals record it and go stale when it
        changes; a journal of other code is refused.
    device: where fn gets its inputs, "cuda" when torch sees a GPU, else
        "cpu" (None), or any torch device string.
    description: one line for the reports (default: fn's qualified name).
    Raises TypeError or ValueError naming a bad argument.
    """

    def __init__(self, name, fn, op="bwd", deterministic=True, H=(1, 16384), w=("bf16", "fp32"),
                 forms=("plain",), sources=None, source_sha256=None, device=None, description=None):
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ValueError("name: %r is not 1 to 64 characters of A-Z a-z 0-9 _ . + -" % (name,))
        # A leading '-' reads as an option on every command line that names
        # it (repro --variant, check --variant); 'all' is `check --variant
        # all` (plugins refuse both too).
        if name.startswith("-") or name == "all" or name.startswith("ctl_"):
            raise ValueError("name: %r is reserved or reads as an option (%s)"
                             % (name, "check --variant all" if name == "all" else
                                "the negative controls' prefix" if name.startswith("ctl_") else "a leading '-'"))
        if not callable(fn):
            raise TypeError("fn must be callable, got %r" % (fn,))
        if op not in ("fwd", "bwd"):
            raise ValueError("op: %r is not 'fwd' or 'bwd'" % (op,))
        if not isinstance(deterministic, bool):
            raise TypeError("deterministic must be a bool, got %r" % (deterministic,))
        if op == "fwd" and not deterministic:
            raise ValueError("deterministic=False with op='fwd': one forward serves deterministic and "
                             "non-deterministic training alike (its rstd feeds the backward), so a forward "
                             "implementation must be deterministic")
        if isinstance(H, numbers.Integral) and not isinstance(H, bool):
            h_min = h_max = _int(H, "H", 1, 16384)
        else:
            if isinstance(H, (str, bytes)):  # unpacked, "64" gave H[0] = '6'
                raise TypeError("H must be an int or (h_min, h_max), got %r" % (H,))
            try:
                h_min, h_max = H
            except (TypeError, ValueError):
                raise TypeError("H must be an int or (h_min, h_max), got %r" % (H,)) from None
            h_min, h_max = _int(h_min, "H[0]", 1, 16384), _int(h_max, "H[1]", 1, 16384)
            if h_min > h_max:
                raise ValueError("H = %r: h_min > h_max" % (H,))
        self.w = _names(w, list(_W_BITS), "w")
        self.forms = _names(forms, list(_FORM_BITS), "forms")
        if (sources is None) == (source_sha256 is None):
            raise ValueError("give exactly one of sources= (files, modules, functions) or source_sha256= "
                             "(the identity of the implementation's code)")
        if source_sha256 is not None:
            if not isinstance(source_sha256, str) or not re.fullmatch(r"[0-9a-fA-F]{64}", source_sha256):
                raise ValueError("source_sha256: %r is not 64 hex digits" % (source_sha256,))
            self.source_sha256 = source_sha256.lower()
        else:
            self.source_sha256 = globals()["source_sha256"](sources)
        self.sources = sources
        if device is not None and not isinstance(device, str):
            device = str(device)
        if device is not None and not re.fullmatch(r"cpu|cuda(:[0-9]+)?", device):
            raise ValueError("device: %r is not 'cpu', 'cuda' or 'cuda:N'" % (device,))
        self._device = device
        if description is None:
            description = getattr(fn, "__qualname__", type(fn).__name__)
        if not isinstance(description, str) or any(ord(c) < 32 or ord(c) == 127 for c in description):
            raise ValueError("description must be one line of text without control characters, got %r"
                             % (description,))
        _lib._bytes(description, "description")  # a NUL or a lone surrogate: ValueError here, not at registration
        self.name, self.fn, self.op, self.deterministic = name, fn, op, deterministic
        self.H = (h_min, h_max)
        self.description = description

    @property
    def device(self):
        """The torch device fn's inputs are on."""
        if self._device is not None:
            return self._device
        torch = _torch()
        return "cuda" if torch.cuda.is_available() else "cpu"

    def __repr__(self):
        return "Implementation(%r, op=%r, deterministic=%r, H=%r, sha256=%s)" % (
            self.name, self.op, self.deterministic, self.H, self.source_sha256[:12])


def _check_device(impl):
    """impl's device exists here (torch importable): a ValueError naming it
    before any work, not every case's error after."""
    dev = impl.device
    if dev.startswith("cuda"):
        torch = _torch()
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        idx = int(dev.split(":", 1)[1]) if ":" in dev else 0
        if idx >= n:
            raise ValueError("implementation %s: device %r is not present (torch sees %d CUDA device%s)"
                             % (impl.name, dev, n, "" if n == 1 else "s"))
    return dev


class _Stop(Exception):
    """An interface violation of an implementation's return value: stops the gate."""


class _State:
    """What the callbacks of the gate now running report back."""

    def __init__(self):
        self.stop = None          # the exception to re-raise after ng_gate returns
        self.interrupted = False  # Ctrl-C seen in a callback
        self.cancel = _c_i32(0)


@contextlib.contextmanager
def _sigint_cancels(state):
    """Ctrl-C while the library runs: Python raises KeyboardInterrupt at the
    next Python code, a callback, where it could escape the callback's own
    handling (ctypes prints and drops it). In the main thread a handler of
    our own sets state's cancel flag instead (the library stops at the next
    case boundary) and notes the interrupt."""
    old_handler = None
    if threading.current_thread() is threading.main_thread():
        def on_sigint(_signum, _frame):
            state.interrupted = True
            state.cancel.value = 1
        try:
            old_handler = signal.signal(signal.SIGINT, on_sigint)
        except (ValueError, OSError):
            old_handler = None
    try:
        yield
    finally:
        if old_handler is not None:
            signal.signal(signal.SIGINT, old_handler)


_active = [None]   # the _State of the running gate (one at a time per process)
_run_lock = threading.Lock()  # held by a running gate() (one at a time per process)
_registered = {}   # name -> (impl, its CFUNCTYPE object): kept alive for the library


def _host_tensor(ptr, n, dtype, torch):
    """A torch view of n elements at a host address (valid during the callback only)."""
    if n == 0:
        return torch.empty((0,), dtype=dtype)
    if dtype is torch.bfloat16:
        buf = (ctypes.c_uint16 * n).from_address(ptr)
        return torch.frombuffer(buf, dtype=torch.int16, count=n).view(torch.bfloat16)
    buf = (ctypes.c_float * n).from_address(ptr)
    return torch.frombuffer(buf, dtype=torch.float32, count=n)


def _make_run(impl):
    torch = _torch()

    def run(_user, io_p):
        state = _active[0]
        io = io_p.contents
        try:
            dev = torch.device(impl.device)
            T, H, heads, rows = io.T, io.H, io.heads, io.rows
            shape = (T, H) if heads == 1 else (T, heads, H)
            n = rows * H
            res = io.form == _lib.FORMS["res"]
            wdt = torch.bfloat16 if io.w_dtype == _lib.NG_W_BF16 else torch.float32

            def inp(ptr, count, dtype, shp):
                return _host_tensor(ptr, count, dtype, torch).reshape(shp).to(dev, copy=True)

            inputs = {"dy": inp(io.dy, n, torch.bfloat16, shape), "w": inp(io.w, H, wdt, (H,)),
                      "eps": io.eps, "form": _lib.FORM_NAMES[io.form], "T": T, "H": H, "heads": heads,
                      "case": io.case_id.decode()}
            if res:
                inputs["h"] = inp(io.x, n, torch.bfloat16, shape)
                inputs["u"] = inp(io.u, n, torch.bfloat16, shape)
                inputs["dh_new"] = inp(io.dh_new, n, torch.bfloat16, shape)
            else:
                inputs["x"] = inp(io.x, n, torch.bfloat16, shape)
            outs = impl.fn(inputs)
            _write_outputs(impl, outs, io, torch)
            return 0
        except _Stop as e:  # carries the interface violation to raise after ng_gate returns
            if state is not None:
                state.stop = e.args[0]
            return NG_ECANCEL
        except (KeyboardInterrupt, SystemExit) as e:
            if state is not None:
                state.interrupted = True
                if isinstance(e, SystemExit):
                    state.stop = e
            return NG_ECANCEL
        except BaseException as e:  # the case's error, journalled
            try:
                text = "%s: %s" % (type(e).__name__, e)
            except BaseException:  # an exception whose str() raises: its type still names it
                text = "%s (its message could not be formatted)" % type(e).__name__
            # Cut to the buffer on a character boundary: half a UTF-8
            # character made the report invalid JSON after every case ran.
            msg = text.encode("utf-8", "replace").replace(b"\0", b"\\0")[: io.error_cap - 1]
            msg = msg.decode("utf-8", "ignore").encode("utf-8")
            ctypes.memmove(io.error, msg + b"\0", len(msg) + 1)
            return 1

    return run


def _write_outputs(impl, outs, io, torch):
    if not isinstance(outs, dict):
        raise _Stop(TypeError("implementation %s returned %s, not a dict of outputs"
                              % (impl.name, type(outs).__name__)))
    want = {"y": (io.y, io.y_elems), "rstd": (io.rstd, io.rstd_elems), "dx": (io.dx, io.dx_elems),
            "dw": (io.dw, io.dw_elems), "h_new": (io.h_new, io.h_new_elems)}
    for key, t in outs.items():
        if key not in _OUT_DTYPES:
            raise _Stop(ValueError("implementation %s returned unknown output %r (expected any of %s)"
                                   % (impl.name, key, ", ".join(_OUT_DTYPES))))
        if t is None:  # not produced, as if absent (normgate.check reads None so too)
            continue
        if key == "h_new" and not io.h_new:
            raise _Stop(ValueError("implementation %s returned h_new for form %s (only form res has it)"
                                   % (impl.name, _lib.FORM_NAMES[io.form])))
        if not isinstance(t, torch.Tensor):
            raise _Stop(TypeError("implementation %s: output %r is %s, not a torch.Tensor"
                                  % (impl.name, key, type(t).__name__)))
        dt = getattr(torch, _OUT_DTYPES[key])
        if t.dtype != dt:
            raise _Stop(TypeError("implementation %s: output %r has dtype %s; expected %s"
                                  % (impl.name, key, t.dtype, dt)))
        ptr, n = want[key]
        if t.numel() != n:
            raise _Stop(ValueError("implementation %s: output %r has %d elements (shape %s); the case needs %d"
                                   % (impl.name, key, t.numel(), tuple(t.shape), n)))
        if n:
            _host_tensor(ptr, n, dt, torch).copy_(t.detach().reshape(-1))


def _device_code(dev):
    """ng_external_desc.device for a torch device string: 0 for the host,
    1 + N for cuda:N ("cuda" alone: torch's current CUDA device)."""
    if not dev.startswith("cuda"):
        return 0
    if ":" in dev:
        return 1 + int(dev.split(":", 1)[1])
    import torch
    return 1 + torch.cuda.current_device()


def _register(impl):
    """ng_register_external for impl (again, if it was: the same name replaces
    its definition, e.g. after an edit of its sources)."""
    L = _L()
    cfn = _RUN_FN(_make_run(impl))
    d = _ExternalDesc()
    d.struct_size = ctypes.sizeof(_ExternalDesc)
    d.op = _lib.NG_OP_FWD if impl.op == "fwd" else _lib.NG_OP_BWD
    d.mode = _lib.NG_MODE_DET if impl.deterministic else _lib.NG_MODE_NONDET
    d.wdtypes = sum(_W_BITS[x] for x in set(impl.w))
    d.forms = sum(_FORM_BITS[x] for x in set(impl.forms))
    d.h_min, d.h_max = impl.H
    d.name = _lib._bytes(impl.name, "name")
    d.source_sha256 = _lib._bytes(impl.source_sha256, "source_sha256")
    d.origin = b"python"
    d.description = _lib._bytes(impl.description, "description")
    d.ran_on = ("python callable on %s" % impl.device).encode()
    d.device = _device_code(impl.device)
    d.run = cfn
    _lib.check(L.ng_register_external(ctypes.byref(d)))
    _registered[impl.name] = (impl, cfn)


# ---- windows -> route table ----------------------------------------------------

def _parse_window(win, k):
    """{"H": int, "T": (lo, hi) | int | "lo..hi", "w": "bf16", "form": "plain"} or the same as a
    string "H=2048,T=1..4096,w=bf16,form=plain"."""
    what = "windows[%d]" % k
    if isinstance(win, str):
        d = {}
        for term in win.split(","):
            if "=" not in term:
                raise ValueError("%s: term %r is not key=value" % (what, term))
            key, val = (x.strip(" \t") for x in term.split("=", 1))  # ASCII blanks only
            if key in d:
                raise ValueError("%s: %s given twice (%r and %r)" % (what, key, d[key], val))
            d[key] = val
        win = d
    if not isinstance(win, dict):
        raise TypeError("%s must be a dict or 'H=..,T=lo..hi[,w=..,form=..]', got %r" % (what, win))
    unknown = set(win) - {"H", "T", "w", "form"}
    if unknown:
        raise ValueError("%s: unknown keys %s (H, T, w, form)" % (what, sorted(unknown)))
    if "H" not in win or "T" not in win:
        raise ValueError("%s needs H and T" % what)
    H = win["H"]
    if isinstance(H, str):
        if not re.fullmatch(r"[ \t]*[0-9]+[ \t]*", H):  # ASCII digits and blanks only: isdigit() takes "²", "٣"
            raise ValueError("%s H: %r is not a whole number" % (what, H))
        H = int(H)
    H = _int(H, what + " H", 1, 16384)
    T = win["T"]
    if isinstance(T, str):
        m = re.fullmatch(r"[ \t]*([0-9]+)[ \t]*(?:\.\.[ \t]*([0-9]+)[ \t]*)?", T)
        if not m:
            raise ValueError("%s T: %r is not N or A..B" % (what, T))
        T = (int(m.group(1)), int(m.group(2) or m.group(1)))
    elif isinstance(T, numbers.Integral) and not isinstance(T, bool):
        T = (int(T), int(T))
    try:
        lo, hi = T
    except (TypeError, ValueError):
        raise TypeError("%s T must be (lo, hi), an int or 'lo..hi', got %r" % (what, win["T"])) from None
    lo, hi = _int(lo, what + " T lo", 1, 2 ** 31), _int(hi, what + " T hi", 1, 2 ** 31)
    if lo > hi:
        raise ValueError("%s T = %r: lo > hi" % (what, win["T"]))
    w = win.get("w", "bf16")
    if w not in _W_BITS:
        raise ValueError("%s w: %r is not bf16 or fp32" % (what, w))
    form = win.get("form", "plain")
    if form not in _FORM_BITS:
        raise ValueError("%s form: %r is not one of %s" % (what, form, ", ".join(_FORM_BITS)))
    if form in ("heads24", "heads4") and H != 256:
        raise ValueError("%s: form %s needs H = 256, got %d" % (what, form, H))
    return {"H": H, "T": (lo, hi), "w": w, "form": form}


def _table_text(impls, wins):
    # The implementations in name order: the same campaign given them in
    # another order writes the same table (its sha256 is in the journal; a
    # resume with the list reordered was refused as another campaign).
    impls = sorted(impls, key=lambda i: i.name)
    lines = [_TABLE_HEADER + ' for its windows= argument: one route per',
             '# (window, implementation). Re-running the same gate writes the same bytes.',
             'arch = "sm90a"',
             'description = "normgate.gate: %s"' % ", ".join(i.name for i in impls),
             "route = ["]
    seen = {}
    for wi in wins:
        for impl in impls:
            mode = "det" if impl.deterministic else "nondet"
            key = (impl.op, mode if impl.op == "bwd" else "", wi["H"], wi["w"], wi["form"])
            lo, hi = wi["T"]
            for other, (olo, ohi) in seen.get(key, []):
                if lo <= ohi and olo <= hi:
                    raise ValueError("implementations %s and %s would both serve %s H=%d w=%s form=%s T=%d..%d: "
                                     "a route table routes each window to one implementation (gate them in "
                                     "separate calls)" % (other, impl.name, " ".join(k for k in key[:2] if k),
                                                          wi["H"], wi["w"], wi["form"], max(lo, olo), min(hi, ohi)))
            seen.setdefault(key, []).append((impl.name, (lo, hi)))
            if not (impl.H[0] <= wi["H"] <= impl.H[1]) or wi["w"] not in impl.w or wi["form"] not in impl.forms:
                raise ValueError("implementation %s does not support window H=%d w=%s form=%s (H %d..%d, w %s, "
                                 "forms %s)" % (impl.name, wi["H"], wi["w"], wi["form"], impl.H[0], impl.H[1],
                                                "|".join(impl.w), "|".join(impl.forms)))
            mode_txt = ', mode = "%s"' % mode if impl.op == "bwd" else ""
            lines.append('  { op = "%s"%s, H = %d, w = "%s", form = "%s", T = [%d, %d], variant = "%s" },'
                         % (impl.op, mode_txt, wi["H"], wi["w"], wi["form"], lo, hi, impl.name))
    lines.append("]")
    return "\n".join(lines) + "\n"


_TABLE_HEADER = "# Written by normgate.gate()"


def _policy_text(seeds, t_per_window, dense_points, dense_step, fresh_factor):
    return ("# Written by normgate.gate() beside its generated table: the minimum is the\n"
            "# campaign it was first asked to run (edit it to demand more).\n"
            'description = "normgate.gate campaign"\n\n[minimum]\n'
            'seeds = %s\nt_per_window = %d\ndense_points = %d\ndense_step = %d\nfresh_factor = %d\n'
            'backends = ["gpu", "cpu-model"]\n' % (json.dumps(seeds), t_per_window, dense_points, dense_step, fresh_factor))


def _write_atomic(path, text, what="table_out"):
    """text into path (a temporary file beside it, then a rename). ValueError
    naming `what` and path when its folder cannot take the file (a raw
    PermissionError named only the temporary file)."""
    d = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=d)
    except OSError as e:
        raise ValueError("cannot write %s %r: folder %r: %s" % (what, path, d, e.strerror or e)) from None
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; the table and policy are read by others too
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise ValueError("cannot write %s %r: %s" % (what, path, e.strerror or e)) from None
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# ---- progress ----------------------------------------------------------------------

class _Bar:
    """A tqdm bar per phase when tqdm is importable, else a plain line on stderr."""

    def __init__(self, enabled):
        self.enabled = enabled
        self.phase = None
        self.bar = None
        self.last = 0.0
        try:
            import tqdm  # noqa: F401
            self.tqdm = tqdm.tqdm
        except ImportError:
            self.tqdm = None

    def update(self, p):
        if not self.enabled:
            return
        phase = p.phase.decode()
        worst = "worst err/tol %.3g" % p.worst
        if self.tqdm is not None:
            if phase != self.phase:
                self.close()
                # initial: the cases done before this report (resumed from a
                # journal, or run before the first report), so that tqdm's
                # rate counts only the cases run while the bar is up; setting
                # n to p.done showed thousands of cases a second on a resume.
                self.bar = self.tqdm(total=p.total, initial=p.done, desc="gate " + phase, unit="case", leave=True)
                self.phase = phase
            # One write per report: update() draws the bar (at most every
            # mininterval) with the postfix already set; refresh() only when
            # no case was added (the worst err/tol moved alone).
            self.bar.set_postfix_str(worst, refresh=False)
            if p.done > self.bar.n:
                self.bar.update(p.done - self.bar.n)
            else:
                self.bar.refresh()
            return
        now = time.monotonic()
        if phase != self.phase or p.done == p.total or now - self.last > 1.0:
            self.phase, self.last = phase, now
            sys.stderr.write("\rgate %s %d/%d cases, %s " % (phase, p.done, p.total, worst))
            if p.done == p.total:
                sys.stderr.write("\n")
            sys.stderr.flush()

    def close(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None


# ---- the gate ------------------------------------------------------------------------

def _path(v, what):
    if v is None:
        return None
    if not isinstance(v, (str, os.PathLike)):
        raise TypeError("%s must be a path, got %r" % (what, v))
    p = os.fspath(v)
    # The C ABI reads a NUL-terminated name: a NUL inside would cut it to
    # another path (os.fsencode keeps a lone surrogate as the byte it stands for).
    if "\0" in (p if isinstance(p, str) else p.decode("latin-1")):
        raise ValueError("%s %r contains a NUL character" % (what, p))
    d = os.path.dirname(os.path.abspath(p))
    if not os.path.isdir(d):
        raise ValueError("%s %r: directory %r does not exist" % (what, p, d))
    if os.path.isdir(p):
        raise ValueError("%s %r is a folder (give a file name)" % (what, p))
    # Absolute from here on: a step that changes the working directory must
    # not move where the gate writes its reports or re-reads its table.
    return os.path.abspath(p)


def gate(impls, table=None, windows=None, seeds="5x120", t_per_window=8, dense_points=16, dense_step=64,
         fresh_factor=2, journal=None, report_md=None, report_json=None, approve=False, progress=True,
         threads=0, backend="auto", table_out=None, retry_errors=False):
    """Gate implementations the way `normgate gate` gates the built-in variants.

    impls: an Implementation or a list of them (distinct names).
    table: a route table (TOML) that routes windows to them by name (and may
        route built-in variants too); windows: then an optional window filter
        string as `gate --windows` takes ("op=bwd,H=2048").
    windows: instead of a table, a list of windows, each a dict {"H": 2048,
        "T": (1, 4096), "w": "bf16", "form": "plain"} (w, form optional) or
        the string "H=2048,T=1..4096,w=bf16,form=plain"; every implementation
        gets a route in every window (its op; bwd: mode det or nondet per
        `deterministic`). The table is written to table_out (default
        "normgate-gate.toml" beside the journal, else the JSON report, else
        the Markdown report; else a temporary directory) so that the
        campaign can be re-run and approvals have a table; with approve=True
        a policy "<stem>.policy.toml" whose minimum is this campaign is
        written beside it when there is none.
    seeds, t_per_window, dense_points, dense_step, fresh_factor: as `normgate
        gate` (seed set spelling "5x120" (the default), "3x120", "cancel:0..7", ...).
    journal: write-ahead journal; the same call after an interruption (Ctrl-C
        stops the gate at the next case boundary, then KeyboardInterrupt is
        raised) resumes and reaches the same report. A case whose record
        is an error (a callable that raised, a CUDA fault) stays so on
        resume unless retry_errors=True: then it runs again and its new
        record, appended, replaces the error (gate --retry-errors). Two runs
        of a deterministic implementation that gave different bits are no
        such error: the window FAILs, and no retry replaces it.
    report_md, report_json: where to write the reports (atomically).
        Relative paths (these, journal, table, table_out) are taken against
        the working directory when gate() is called: a step that changes
        it does not move them.
    approve: write approvals beside the table (needs its policy); a window
        that fails revokes its earlier approval. The report's "approvals"
        lists the changes, and with progress on each is printed to stderr.
    progress: a tqdm bar (when tqdm is importable, else a line on stderr).
    threads: OpenMP threads of the oracle (0: default); backend: where
        built-in variants of the table run ("auto", "cpu", "gpu").
    Returns the JSON report as a dict: "verdict" (the run's, as `normgate
    gate` says it: "PASS"; "FAIL" for a window over budget, a finding or an
    INCONCLUSIVE window; "ERROR" when the windows that do not pass only had
    cases that could not run; "INCOMPLETE" for missing cases), "pass",
    "windows" (per window: verdict, max err/tol per
    output, worst case, ...), "externals", "approvals" (the changes),
    "approvals_refused" (those of "approvals" that say "refused ...": a
    passing window not approved, below the policy or refuted by a failure
    remembered beside the table, docs/perf/routes.md D28; with approve=True
    and verdict PASS a RuntimeWarning says so, where `normgate gate` exits 1),
    "journal", "markdown" (the Markdown report's text), ...; a non-finite
    number (max err/tol of a NaN output) is a float inf or nan where the
    report_json file holds the string (docs/schemas.md, "Numbers").
    Raises TypeError or ValueError naming a bad argument before any work;
    ValueError too when a window's largest case cannot fit in host memory
    (the bytes it needs, the limit and the largest T that fits are named,
    as `normgate gate` says them).
    """
    if isinstance(impls, Implementation):
        impls = [impls]
    if not isinstance(impls, (list, tuple)) or not impls:
        raise TypeError("impls must be an Implementation or a non-empty list of them, got %r" % (impls,))
    for i, x in enumerate(impls):
        if not isinstance(x, Implementation):
            raise TypeError("impls[%d] is %s, not a normgate.Implementation" % (i, type(x).__name__))
    names = [x.name for x in impls]
    if len(set(names)) != len(names):
        raise ValueError("impls: duplicate names %s" % sorted({n for n in names if names.count(n) > 1}))
    if not isinstance(seeds, str) or not seeds:
        raise TypeError("seeds must be a seed-set string such as '3x16', got %r" % (seeds,))
    if not _SEEDS_RE.match(seeds):
        raise ValueError("seeds %r is not a seed set (e.g. '3x16', 'seeds=120..239', 'cancel:0..7')" % (seeds,))
    L0 = _L()
    if hasattr(L0, "ng_seed_set_size"):  # the library's own parse, before the table and policy are written
        pairs = ctypes.c_uint64(0)
        _lib.check(L0.ng_seed_set_size(seeds.encode(), ctypes.byref(pairs)))  # ValueError quoting it
    t_per_window = _int(t_per_window, "t_per_window", 2, 1 << 20)
    dense_points = _int(dense_points, "dense_points", 0, 1 << 20)
    dense_step = _int(dense_step, "dense_step", 1, 1 << 31)
    fresh_factor = _int(fresh_factor, "fresh_factor", 0, 1 << 20)
    threads = _int(threads, "threads", 0, 4096)
    if not isinstance(approve, bool):
        raise TypeError("approve must be a bool, got %r" % (approve,))
    if not isinstance(progress, bool):
        raise TypeError("progress must be a bool, got %r" % (progress,))
    if not isinstance(retry_errors, bool):
        raise TypeError("retry_errors must be a bool, got %r" % (retry_errors,))
    if retry_errors and journal is None:
        raise ValueError("retry_errors=True needs journal= (the errors it retries are journalled ones)")
    if backend not in ("auto", "cpu", "gpu"):
        raise ValueError("backend: %r is not 'auto', 'cpu' or 'gpu'" % (backend,))
    if isinstance(windows, str):  # a filter string for the C side
        _lib._bytes(windows, "windows")
    journal = _path(journal, "journal")
    report_md = _path(report_md, "report_md")
    report_json = _path(report_json, "report_json")
    table_out = _path(table_out, "table_out")
    window_filter = None
    if (table is None) == (windows is None or isinstance(windows, str)):
        raise ValueError("give table= (a route table path; windows= may then be a filter string) or windows= "
                         "(a list of windows), not both or neither")
    if table is not None and table_out is not None:
        raise ValueError("table_out=%r goes with windows= (the table gate() writes), not with table=%r"
                         % (table_out, table))
    if table is not None:
        table = _path(table, "table")
        if not os.path.isfile(table):
            raise ValueError("table %r is not a file" % table)
        window_filter = windows
    else:
        if not isinstance(windows, (list, tuple)) or not windows:
            raise TypeError("windows must be a non-empty list of windows, got %r" % (windows,))
        wins = [_parse_window(w, k) for k, w in enumerate(windows)]
        text = _table_text(impls, wins)
        if table_out is None:
            base = journal or report_json or report_md
            if base is None:
                if approve:
                    raise ValueError("approve=True with windows= needs a place for the table and its approvals: "
                                     "give table_out=, journal= or a report path")
                table_out = ""  # a temporary folder, made once the lock is held (nothing left by a refusal)
            else:
                table_out = os.path.join(os.path.dirname(os.path.abspath(base)), "normgate-gate.toml")
        table = table_out
    for x in impls:
        _check_device(x)

    # One gate at a time per process, taken before the registration: a
    # second gate() from a step or from another thread would
    # register its implementations over the running gate's, which would then
    # run the other function under the first one's name and identity.
    if not _run_lock.acquire(blocking=False):
        raise RuntimeError("normgate.gate or normgate.export is already running in this process (a gate called "
                           "from a step, or from another thread, would replace the implementations it runs): "
                           "one at a time")
    try:
        # Work starts here: the implementations' registration (the library checks
        # their names against the registry), then the table (windows=).
        if table == "":
            table = os.path.join(tempfile.mkdtemp(prefix="normgate-gate-"), "normgate-gate.toml")
        if backend == "gpu" and not _lib.device_available():
            raise ValueError("backend='gpu' but no usable CUDA device is present (backend 'auto' or 'cpu' runs the "
                             "built-in variants' CPU models)")
        for x in impls:
            _register(x)
        # What the library refuses before any case runs (NG_EINVAL: a journal of
        # another campaign, a policy this campaign is below, ...) must leave the
        # folder as it was: the table and policy written here are put back.
        undo = []
        if windows is not None and not isinstance(windows, str):
            current = None
            if os.path.exists(table):
                with open(table) as f:
                    current = f.read()
            if current is not None and current != text and not current.startswith(_TABLE_HEADER):
                raise ValueError("table_out %r exists and was not written by normgate.gate(): not overwritten "
                                 "(give another path)" % table)
            # The policy the library reads for this table (a per-GPU table
            # STEM@SLUG.toml takes STEM's: ng_table_file, the library's rule),
            # asked before anything is written.
            policy = _table_file(table, ".policy.toml") if approve else None
            if current != text:
                _write_atomic(table, text)
                undo.append((table, current))
            if policy is not None and not os.path.exists(policy):
                _write_atomic(policy, _policy_text(seeds, t_per_window, dense_points, dense_step, fresh_factor),
                              "the table's policy (approve=True)")
                undo.append((policy, None))

        L = _L()
        o = _GateOptions()
        L.ng_gate_options_init(ctypes.byref(o))
        keep = []

        def b(s):
            if s is None:
                return None
            v = os.fsencode(s)  # paths and checked strings (_path, _lib._bytes above): no NUL, any surrogate-escaped byte
            keep.append(v)
            return v

        o.table, o.seeds, o.windows = b(table), b(seeds), b(window_filter)
        o.journal, o.report_md, o.report_json, o.backend = b(journal), b(report_md), b(report_json), b(backend)
        o.t_per_window, o.dense_points, o.dense_step, o.fresh_factor = t_per_window, dense_points, dense_step, fresh_factor
        o.threads, o.approve = threads, 1 if approve else 0
        o.retry_errors = 1 if retry_errors else 0
        # The only externals this gate runs (the library refuses, before any
        # work, a gated window routed to another, e.g. one registered by an
        # earlier gate() of this process, and an implementation no gated
        # window routes, after the windows= filter).
        o.externals = b(",".join(x.name for x in impls))
        state = _State()
        bar = _Bar(progress)

        def on_progress(_user, p):
            try:
                bar.update(p.contents)
            except KeyboardInterrupt:
                state.interrupted = True
                state.cancel.value = 1
            except Exception:  # a broken progress display never stops the gate
                pass

        cb = _PROGRESS_FN(on_progress)
        o.progress = cb
        o.cancel = ctypes.pointer(state.cancel)
        out = _vp()
        if _active[0] is not None:
            raise RuntimeError("normgate.gate is already running in this process")
        # Ctrl-C while the library runs: the gate stops at the next case
        # boundary with its journal resumable, then KeyboardInterrupt is raised
        # (_sigint_cancels).
        _active[0] = state
        try:
            with _sigint_cancels(state):
                try:
                    rc = L.ng_gate(ctypes.byref(o), ctypes.byref(out))
                except KeyboardInterrupt:  # arrived right after the call returned
                    state.interrupted = True
                    rc = None
            bar.close()
        finally:
            _active[0] = None
        if rc == NG_ECANCEL or (rc is None):
            if out.value:
                L.ng_free_string(out)
            if state.stop is not None:
                raise state.stop
            raise KeyboardInterrupt("normgate.gate interrupted; the journal %s resumes it"
                                    % (repr(journal) if journal else "(none given: nothing)"))
        try:
            _lib.check(rc)
        except ValueError:  # refused before any case ran: nothing of this call stays
            for path, before in reversed(undo):
                if before is None:
                    os.unlink(path)
                else:
                    _write_atomic(path, before)
            raise
        try:
            import json
            rep = _lib.report_numbers(json.loads(ctypes.string_at(out.value).decode()))
        finally:
            L.ng_free_string(out)
        rep["table_path"] = table
        j = rep.get("journal") or {}
        if progress and journal and (j.get("resumed") or retry_errors):  # as `normgate gate` says it
            print("normgate.gate: %d finished cases resumed from %s, %d run now%s"
                  % (j.get("resumed", 0), journal, j.get("run_now", 0),
                     " (%d of them journalled errors run again)" % j.get("retried", 0) if retry_errors else ""),
                  file=sys.stderr)
        # Cases that threw fail their windows with every output in budget: say
        # so where the verdict is read, with the way out.
        # Findings about an implementation (two runs of a deterministic one
        # differed; it broke the interface) count among windows[*].errors but
        # are no failed attempt: no retry replaces them.
        wins = rep.get("windows", [])
        findings = sum(w.get("nondeterministic", 0) + w.get("contract_broken", 0) for w in wins)
        errors = sum(w.get("errors", 0) for w in wins) - findings
        if progress and findings:
            print("normgate.gate: %d case(s) are findings about an implementation (windows[*].nondeterministic, "
                  "contract_broken), each failing its window; no retry replaces them (the report's Failures "
                  "section names each)" % findings, file=sys.stderr)
        if progress and errors > 0:
            first = next((x for w in wins for x in (w.get("error_samples") or [])
                          if not x.split(": ", 1)[-1].startswith(("nondeterministic: ", "contract broken: "))), "")
            print("normgate.gate: %d case(s) threw, each failing its window (windows[*].errors, error_samples)%s%s"
                  % (errors, ("; first: " + first) if first else "",
                     "; the same call with retry_errors=True runs them again" if journal else ""), file=sys.stderr)
        if progress:  # what approve=True changed in the approvals file (approved, renewed, revoked, refused)
            for change in rep.get("approvals") or []:
                print("normgate.gate: " + change, file=sys.stderr)
        # A passing window whose approval was refused (below the policy, or a
        # failure remembered beside the table refutes it): the kernels passed,
        # the approval asked for did not happen (`normgate gate` exits 1).
        rep["approvals_refused"] = [c for c in rep.get("approvals") or [] if c.startswith("refused ")]
        if approve and rep["approvals_refused"] and rep.get("verdict") == "PASS":
            n = len(rep["approvals_refused"])
            warnings.warn("normgate.gate: approval refused for %d passing window%s, not approved (the report's "
                          "approvals_refused says why): %s" % (n, "" if n == 1 else "s", rep["approvals_refused"][0]),
                          RuntimeWarning, stacklevel=2)
        if state.interrupted:  # Ctrl-C after the last case: the report is complete, the interrupt still counts
            raise KeyboardInterrupt("normgate.gate interrupted after its last case")
        return rep
    finally:
        _run_lock.release()


def export(report, out, impls=(), keep=None, all=False, full=False, tile=256, backend="auto", oracle="auto",
           threads=0):
    """Error maps of a report's worst cases, as `normgate export` writes them,
    run in this process, so that your own implementations run again.

    report: a gate report (report_json= of normgate.gate, or `normgate gate
        --report-json`) or a check report (`normgate check --json`).
    out: the maps file to write (HDF5, normgate-maps/2: datasets/SCHEMA.md),
        atomically; `normgate plot out` draws it, and checks that it came
        from `report` (its SHA-256 is recorded).
    impls: the Implementations the report names (each registered here, as
        normgate.gate registers them: the same name and sources), besides
        the built-in variants the process knows anyway.
    keep: None: every output's worst case of each window (gate report), or
        3 per implementation (check report); else 1..1000 largest first.
    all: every case the report names (not with keep). full: also each
        case's whole [T, H] dx err/tol map (4 bytes an element).
    tile: edge of the max-pooled y and dx maps (1..2^20).
    backend, oracle, threads: as normgate.gate and `normgate export`.
    Returns {"out", "report_sha256", "notes", "pairs": [{"case", "impl",
    "fwd", "window", "verdict", "max_err_tol": {"y", "rstd", "dx", "dw"}}]}.
    Raises TypeError or ValueError naming a bad argument, an implementation
    the report names that is neither built in nor in impls, a case that
    cannot fit in host memory, before any case runs (nothing written).
    """
    report = _path(report, "report")
    out = _path(out, "out")
    if report is None or out is None:
        raise ValueError("report and out are both required")
    if not os.path.isfile(report):
        raise ValueError("report %r is not a file" % (report,))
    if impls is None:
        impls = ()
    if isinstance(impls, Implementation):
        impls = [impls]
    if not isinstance(impls, (list, tuple)):
        raise TypeError("impls must be an Implementation or a list of them, got %s" % type(impls).__name__)
    impls = list(impls)
    for k, x in enumerate(impls):
        if not isinstance(x, Implementation):
            raise TypeError("impls[%d] is %s, not a normgate.Implementation" % (k, type(x).__name__))
    names = [x.name for x in impls]
    if len(set(names)) != len(names):
        raise ValueError("impls: a name given twice (%s)" % ", ".join(sorted(n for n in set(names)
                                                                      if names.count(n) > 1)))
    keep = 0 if keep is None else _int(keep, "keep", 1, 1000)
    if not isinstance(all, bool) or not isinstance(full, bool):
        raise TypeError("all and full must be bools, got %r and %r" % (all, full))
    if all and keep:
        raise ValueError("all=True and keep=%d exclude each other (all: every case)" % keep)
    tile = _int(tile, "tile", 1, 1 << 20)
    threads = _int(threads, "threads", 0, 4096)
    if backend not in ("auto", "cpu", "gpu"):
        raise ValueError("backend: %r is not 'auto', 'cpu' or 'gpu'" % (backend,))
    if oracle not in ("auto", "fp64", "mpfr"):
        raise ValueError("oracle: %r is not 'auto', 'fp64' or 'mpfr'" % (oracle,))
    for x in impls:
        _check_device(x)
    # The external implementations a gate report names must be given: one
    # registered by an earlier gate() of this process would otherwise run
    # under its name (adversarial pass). A check report names none here; the
    # library refuses an unknown one.
    try:
        with open(report, "rb") as f:
            named = json.loads(f.read().decode("utf-8")).get("externals") or []
        named = sorted({e.get("name") for e in named if isinstance(e, dict) and isinstance(e.get("name"), str)})
    except (OSError, ValueError, AttributeError):
        named = []  # not a report the library reads: it says why
    missing = [n for n in named if n not in names]
    if missing:
        raise ValueError("report %r names external implementation%s %s, not in impls: pass %s (an implementation "
                         "registered by an earlier gate() is not run by a later export)"
                         % (report, "s" if len(missing) > 1 else "", ", ".join(missing),
                            "them" if len(missing) > 1 else "it"))
    L = _L()
    if not hasattr(L, "ng_export"):
        raise RuntimeError("normgate: " + _lib.library_path() + " predates ng_export: rebuild it with scripts/build")
    # One gate or export at a time per process (the registrations below would
    # replace a running gate's implementations).
    if not _run_lock.acquire(blocking=False):
        raise RuntimeError("normgate.gate or normgate.export is already running in this process: one at a time")
    try:
        for x in impls:
            _register(x)
        o = _ExportOptions()
        L.ng_export_options_init(ctypes.byref(o))
        keep_alive = [os.fsencode(report), os.fsencode(out), backend.encode(), oracle.encode()]
        o.report, o.out, o.backend, o.oracle = keep_alive
        o.keep, o.all, o.full, o.tile, o.threads = keep, int(all), int(full), tile, threads
        res = _vp()
        # The implementations' callbacks report here, as during gate(): an
        # interface violation (a wrong shape, not a dict) and Ctrl-C or
        # SystemExit in a step stop the export and are raised as they are.
        state = _State()
        o.cancel = ctypes.pointer(state.cancel)
        if _active[0] is not None:
            raise RuntimeError("normgate.gate is running in this process: export after it")
        _active[0] = state
        try:
            with _sigint_cancels(state):  # Ctrl-C stops it before its next case, nothing written
                try:
                    rc = L.ng_export(ctypes.byref(o), ctypes.byref(res))
                except KeyboardInterrupt:  # arrived right after the call returned
                    state.interrupted = True
                    rc = NG_ECANCEL if not res.value else 0
        finally:
            _active[0] = None
        if rc == NG_ECANCEL:
            if res.value:
                L.ng_free_string(res)
            if state.stop is not None:
                raise state.stop
            raise KeyboardInterrupt("normgate.export interrupted (nothing written)")
        _lib.check(rc)
        try:
            out_json = json.loads(ctypes.string_at(res.value).decode())
        finally:
            L.ng_free_string(res)
        for p in out_json.get("pairs", []):  # "inf"/"nan" as floats, as in gate()'s report
            m = p.get("max_err_tol") or {}
            for k, v in m.items():
                if isinstance(v, str):
                    m[k] = float(v)
        if state.interrupted:  # Ctrl-C after the last case: the file is written, the interrupt still counts
            raise KeyboardInterrupt("normgate.export interrupted after its last case (%s is written)" % out)
        return out_json
    finally:
        _run_lock.release()
