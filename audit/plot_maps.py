#!/usr/bin/env python3
"""Render audit pictures and an index page from normgate HDF5 files (datasets/SCHEMA.md).

Reads a normgate-case/2 file (`normgate repro ... --save`, error maps in
/maps, provenance on /) or a normgate-maps/2 file (`normgate export`, one
entry per /cases/NNNN group), after checking its content digest
(/@content_sha256 over every attribute and dataset, as python/normgate/cases.py
computes it), and writes into OUTDIR, per entry, the pictures
of the outputs its window gates, then OUTDIR/index.html:

  forward window (gates y, rstd):
    NNNN_<slug>_y_tiles.png   max y err/tol per tile x tile block (heatmap)
    NNNN_<slug>_rstd.png      rstd err/tol per row (log y), budget line at 1
  backward window, check report or saved case (gates y, rstd, dx, dw):
    NNNN_<slug>_dx_tiles.png  max dx err/tol per tile x tile block (heatmap)
    NNNN_<slug>_dw.png        dw err/tol per column (log y), budget line at 1
    (and _y_tiles / _rstd as well when y or rstd is over budget)
  every entry:
    NNNN_<slug>_hist.png      err/tol histograms of the gated outputs (log-log)
  index.html                  one page: windows in the report's order, each
                              with its verdict first, then per case its pictures

Heatmaps share one fixed log colour scale (err/tol 1e-4 and below .. 10 and
above, the budget 1 where viridis turns to reds; cells over 1 outlined black,
the worst cell white; values written in cells large enough to hold them).
Window order and verdicts come from the gate report the maps were exported
from: --report, else the file's /@source (as recorded, else beside FILE.h5),
used only when it holds every entry's window and case and, where the file
records the report's SHA-256 (/@source_sha256, written by export), only
when its bytes hash to it. Whatever the report says, a window with an
exported case over budget on a gated output shows as FAIL (and says why).
Without a report, the file's order is used and a window's verdict shows as
FAIL when an exported case is over budget on a gated output, else UNKNOWN
(a maps file does not record window verdicts); a check report's or a saved
case's entries are grouped per implementation with their cases' own
verdicts.

NNNN is 0000 for a case file and the group name for a maps file; the slug is
made from case_id and the variant under audit (a forward window's forward
variant, else impl). Every file is first written under a temporary name in
OUTDIR (.NAME.XXXXXX.tmp); only when all of them, index.html included, are
written are they renamed into place, index.html last. So OUTDIR never holds a
half-written picture, and a run that fails or is interrupted (Ctrl-C,
SIGTERM, SIGHUP, SIGQUIT) removes its temporary files and leaves the files of an
earlier run as they were (and removes OUTDIR when it made it).

Usage: plot_maps.py FILE.h5 -o OUTDIR [--dpi N] [--report REPORT.json]

Exit status: 0 all pictures and the index written; 2 bad usage, an
unreadable/malformed file or one whose content digest does not match (one
line on stderr naming the file and the dataset or attribute), a dataset that
declares more data than the file stores, a file of the older schemas without
a digest, or a --report that is not the maps' gate report or has a field of
the wrong type (one line naming the report and the field); 3 an output that
cannot be written (a full disk; a folder in the way, checked before any
drawing) or an internal error (one line, no traceback); 128 + N interrupted
by signal N (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP, 131 SIGQUIT). On any exit but 0,
nothing of this run is left (earlier files stay as they were).
A gate report found through /@source (not --report) that is not JSON, not
a gate report, malformed, or not the bytes /@source_sha256 records is not
used: a note says why.
Needs python3 with h5py, numpy and matplotlib.
"""
import argparse
import hashlib
import html
import json
import math
import os
import re
import signal
import sys
import tempfile
import textwrap
import urllib.parse

PROG = "plot_maps.py"
CASE_SCHEMA = "normgate-case/2"
MAPS_SCHEMA = "normgate-maps/2"
OLD_SCHEMAS = ("normgate-case/1", "normgate-maps/1")  # no content digest: refused
TYPES = {"<u2": "u16", "<i8": "i64", "<f4": "f32", "<f8": "f64"}  # stored types the manifest knows
FLOOR = 1e-8  # err/tol values below this (exact zeros included) are drawn at FLOOR
HIST_NAMES = ("hist_y", "hist_rstd", "hist_dx", "hist_dw")
PROV_KEYS = ("case_id", "impl", "backend", "verdict", "oracle", "date", "gpu", "window", "fwd")


class Bad(Exception):
    """A problem with the input file or the command line: one line, exit 2."""


class Failed(Exception):
    """A runtime failure (an output that cannot be written: a full disk): one line, exit 3."""


class Interrupted(BaseException):
    """SIGTERM, SIGHUP or SIGQUIT (SIGINT is KeyboardInterrupt): this run's files removed, exit 128 + signum."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


# Signals received, in order. The handlers raise at whatever bytecode runs,
# and an exception raised inside a callback (a weakref's, a __del__) is
# printed and dropped by Python: the run would go on. Staged.commit checks
# this list with the signals held, so a dropped interruption still ends the
# run before anything is renamed into place.
_received = []


def on_signal(signum, _frame):
    _received.append(signum)
    raise Interrupted(signum)


def on_sigint(signum, _frame):
    _received.append(signum)
    raise KeyboardInterrupt


HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def die(msg, code=2):
    print(f"{PROG}: error: {msg}", file=sys.stderr)
    sys.exit(code)


def text_is_markdown(text):
    """True for a gate's Markdown report (it opens with '# normgate gate')."""
    return isinstance(text, str) and text.lstrip().startswith("#")


if __name__ == "__main__":
    # SIGTERM and SIGHUP (a scheduler, a closed terminal) end the run as Ctrl-C
    # does (main: this run's temporary files removed, exit 128 + the signal).
    for _sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(_sig, on_signal)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not one ignored by the parent
        signal.signal(signal.SIGINT, on_sigint)

try:
    import numpy as np
    import h5py
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    from matplotlib import colors as mcolors
    from matplotlib.lines import Line2D
    from matplotlib.patches import Rectangle
except ImportError as e:  # pragma: no cover - environment problem
    die(f"needs numpy, h5py and matplotlib ({e}); e.g. pip install h5py matplotlib numpy")
except (KeyboardInterrupt, Interrupted) as _err:  # interrupted while importing: nothing written yet
    _signum = _err.signum if isinstance(_err, Interrupted) else signal.SIGINT
    print(f"{PROG}: interrupted ({signal.Signals(_signum).name})", file=sys.stderr)
    sys.exit(128 + _signum)


# --------------------------------------------------------------------------- reading


def as_str(v):
    """Decode an HDF5 string attribute (h5py gives bytes for fixed-length strings)."""
    if isinstance(v, np.ndarray) and v.shape == ():
        v = v[()]
    if isinstance(v, (bytes, np.bytes_)):
        return bytes(v).decode("utf-8", errors="replace").rstrip("\x00")
    if isinstance(v, str):
        return v
    raise TypeError(f"not a string attribute ({type(v).__name__})")


def attr_str(path, obj, name, required=True):
    where = f"{obj.name}@{name}" if obj.name != "/" else f"/@{name}"
    if name not in obj.attrs:
        if required:
            raise Bad(f"{path}: attribute {where} is missing")
        return ""
    try:
        return as_str(obj.attrs[name])
    except (TypeError, OSError) as e:
        raise Bad(f"{path}: attribute {where} is not a string ({e})")


def attr_int(path, obj, name):
    where = f"{obj.name}@{name}"
    if name not in obj.attrs:
        raise Bad(f"{path}: attribute {where} is missing")
    v = obj.attrs[name]
    try:
        v = np.asarray(v)
        if v.shape != () or v.dtype.kind not in "iu":
            raise TypeError
        return int(v)
    except (TypeError, ValueError):
        raise Bad(f"{path}: attribute {where} is not an integer")


def attr_float(path, obj, name):
    if name not in obj.attrs:
        return None
    try:
        return float(np.asarray(obj.attrs[name]))
    except (TypeError, ValueError):
        raise Bad(f"{path}: attribute {obj.name}@{name} is not a number")


def dataset(path, grp, name, shape):
    full = f"{grp.name.rstrip('/')}/{name}"
    if name not in grp:
        raise Bad(f"{path}: dataset {full} is missing")
    d = grp[name]
    if not isinstance(d, h5py.Dataset):
        raise Bad(f"{path}: {full} is not a dataset")
    if tuple(d.shape) != tuple(shape):
        raise Bad(f"{path}: dataset {full} has shape {list(d.shape)}, expected {list(shape)}")
    try:
        return np.asarray(d[()])
    except (OSError, ValueError) as e:  # Fletcher-32 mismatch, filter failure, ...
        raise Bad(f"{path}: dataset {full} cannot be read ({str(e).splitlines()[0]})")


HEADS = {"heads24": 24, "heads4": 4}  # rows per token of the per-head forms (seeds/case_id.h)


def case_dims(case_id):
    """Rows and columns of a case's [rows, H] maps from a case_id such as
    'H=300,T=600,...' (None where absent), and its heads per token: rows =
    T * heads (per-head forms store one row per (token, head), token-major),
    heads = 1 for plain and res."""
    kv = dict(p.split("=", 1) for p in case_id.split(",") if "=" in p)
    heads = HEADS.get(kv.get("form", "plain"), 1)
    out = []
    for k in ("T", "H"):
        try:
            out.append(int(kv[k]))
        except (KeyError, ValueError):
            out.append(None)
    if out[0] is not None:
        out[0] *= heads
    return out[0], out[1], heads


def read_entry(path, grp, maps, key):
    """One entry: provenance from grp, error maps from maps (same group in a maps file)."""
    prov = {k: attr_str(path, grp, k, required=k in ("case_id", "impl", "verdict")) for k in PROV_KEYS}
    rows, cols, tile = (attr_int(path, maps, a) for a in ("rows", "cols", "tile"))
    if rows < 0 or cols < 0 or tile <= 0:
        raise Bad(f"{path}: {maps.name}: bad @rows/@cols/@tile = {rows}/{cols}/{tile}")
    r_id, h_id, heads = case_dims(prov["case_id"])
    if (r_id is not None and r_id != rows) or (h_id is not None and h_id != cols):
        want = f"{r_id}/{h_id}" + (f" (T x {heads} heads)" if heads > 1 else "")
        raise Bad(f"{path}: {maps.name}: @rows/@cols = {rows}/{cols} disagree with case_id "
                  f"'{prov['case_id']}' (expected {want})")
    tr, tc = -(-rows // tile), -(-cols // tile)
    e = {"key": key, "prov": prov, "rows": rows, "cols": cols, "tile": tile, "heads": heads}
    e["dw_ratio"] = dataset(path, maps, "dw_ratio", (cols,)).astype(np.float64)
    e["dw_bound_over_tol"] = dataset(path, maps, "dw_bound_over_tol", (cols,)).astype(np.float64)
    e["dx_tiles"] = dataset(path, maps, "dx_tiles", (tr, tc)).astype(np.float64)
    e["y_tiles"] = dataset(path, maps, "y_tiles", (tr, tc)).astype(np.float64)
    e["rstd_ratio"] = dataset(path, maps, "rstd_ratio", (rows,)).astype(np.float64)
    if "hist_upper" not in maps:
        raise Bad(f"{path}: dataset {maps.name.rstrip('/')}/hist_upper is missing")
    if not isinstance(maps["hist_upper"], h5py.Dataset) or maps["hist_upper"].ndim != 1:
        raise Bad(f"{path}: {maps.name.rstrip('/')}/hist_upper is not a 1-D dataset")
    nb = maps["hist_upper"].shape[0]
    up = dataset(path, maps, "hist_upper", (nb,)).astype(np.float64)
    # Layout (validators/include/normgate/validators/stats.h): bin 0 exact zero
    # (upper 0), bin 1 (0, 1e-8], log bins, bin n-2 (1e4, inf) finite overflow,
    # bin n-1 inf/NaN. Both last upper edges are inf.
    fin = up[1:-2]
    if (nb < 5 or up[0] != 0 or not np.all(np.isinf(up[-2:])) or not np.all(np.isfinite(fin))
            or not np.all(fin > 0) or not np.all(np.diff(fin) > 0)):
        raise Bad(f"{path}: dataset {maps.name.rstrip('/')}/hist_upper: unexpected bin edges "
                  "(want 0, increasing finite edges, inf, inf)")
    e["hist_upper"] = up
    e["hist"] = {h: dataset(path, maps, h, (nb,)).astype(np.int64) for h in HIST_NAMES}
    e["max_ratio"] = {o: attr_float(path, grp, f"max_ratio_{o}") for o in ("y", "rstd", "dx", "dw")}
    # A case file records no max_ratio_*: the maps hold the exact maxima (tiles are max-pooled).
    for o, v in (("y", e["y_tiles"]), ("rstd", e["rstd_ratio"]), ("dx", e["dx_tiles"]), ("dw", e["dw_ratio"])):
        if e["max_ratio"][o] is None:
            e["max_ratio"][o] = exact_max(v)
    return e


def exact_max(v):
    """Largest err/tol of an array (inf when any is non-finite, as ratio() reports a NaN); None when empty."""
    if v.size == 0:
        return None
    return math.inf if not np.all(np.isfinite(v)) else float(np.max(v))


# deflate (the writer's filter) shrinks data at most about 1032:1: a dataset
# that declares more than this times its stored bytes (plus 1 MiB) is not data
# the file holds (python/normgate/cases.py's _check_sizes, the same rule).
MAX_STORED_RATIO = 1100
SLACK_BYTES = 1 << 20


def check_sizes(path, f):
    """Bad naming the dataset and its shape unless every dataset is backed by
    the bytes the file stores; reads no data (a crafted small file declaring
    [2^31, 16384] would otherwise be allocated in full before its digest
    could fail)."""
    def visit(name, obj):
        if not isinstance(obj, h5py.Dataset):
            return
        shape = tuple(int(d) for d in (obj.shape or ()))
        n = obj.dtype.itemsize
        for d in shape:
            n *= d
        if n == 0:
            return
        try:
            stored = int(obj.id.get_storage_size())
        except (OSError, RuntimeError, ValueError):
            stored = 0
        if n > MAX_STORED_RATIO * stored + SLACK_BYTES:
            raise Bad(f"{path}: dataset /{name} declares shape {list(shape)} ({n} bytes) but the file stores only "
                      f"{stored} bytes of it (damaged or crafted: refused before reading it)")

    f.visititems(visit)


def content_sha256(path, f):
    """The file's content digest (datasets/SCHEMA.md, "Content digest"; the
    same computation as python/normgate/cases.py's content_sha256, which this
    standalone script cannot import): SHA-256 of the sorted manifest lines
    "TYPE DIMS SHA256(VALUE) KEY\n" of every attribute but /@content_sha256
    and every dataset. The datasets' declared sizes are checked first (check_sizes)."""
    check_sizes(path, f)
    lines = {}

    def add(key, type_, dims, data):
        if not all(" " < c < "\x7f" for c in key):
            raise Bad(f"{path}: the name {key!r} has spaces or control characters")
        # '@' separates object and attribute: a dataset named /maps@rows
        # would take the key of /maps's attribute rows.
        if key.count("@") != (1 if dims == "-" else 0):
            raise Bad(f"{path}: the name {key!r} holds '@' (an object or attribute name may not)")
        lines[key] = f"{type_} {dims} {hashlib.sha256(data).hexdigest()} {key}\n"

    def attrs_of(obj):
        for name in obj.attrs:
            key = ("/" if obj.name == "/" else obj.name) + "@" + name
            if key == "/@content_sha256":
                continue
            aid = obj.attrs.get_id(name)
            dt = aid.dtype
            if aid.shape != ():
                raise Bad(f"{path}: attribute {key} is not a scalar")
            if dt.kind == "S":
                add(key, "str", "-", bytes(obj.attrs[name]).rstrip(b"\0"))
            elif dt.str in TYPES:
                add(key, TYPES[dt.str], "-", np.asarray(obj.attrs[name], dtype=dt).tobytes())
            else:
                raise Bad(f"{path}: attribute {key} is stored as {dt}, not one of str, u16, i64, f32, f64")

    def visit(name, obj):
        attrs_of(obj)
        if isinstance(obj, h5py.Dataset):
            if obj.dtype.str not in TYPES:
                raise Bad(f"{path}: dataset /{name} is stored as {obj.dtype}, not one of u16, i64, f32, f64")
            data = np.ascontiguousarray(obj[()]).tobytes() if obj.size else b""
            add("/" + name, TYPES[obj.dtype.str], "x".join(str(d) for d in obj.shape), data)
        elif not isinstance(obj, h5py.Group):
            raise Bad(f"{path}: object /{name} is neither a group nor a dataset")

    attrs_of(f)
    f.visititems(visit)
    return hashlib.sha256("".join(lines[k] for k in sorted(lines)).encode()).hexdigest()


def verify_content(path, f):
    recorded = attr_str(path, f, "content_sha256")
    found = content_sha256(path, f)
    if found != recorded:
        raise Bad(f"{path}: content SHA-256 mismatch: the file records {recorded}, its attributes and datasets "
                  f"hash to {found} (modified or damaged after it was written)")


def read_file(path):
    if not os.path.exists(path):
        raise Bad(f"{path}: no such file")
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise Bad(f"{path}: not a readable HDF5 file ({str(e).splitlines()[0]})")
    try:
        with f:
            return read_layout(path, f)
    except (OSError, KeyError, ValueError, TypeError) as e:  # anything h5py raises on a damaged file
        raise Bad(f"{path}: cannot read ({str(e).splitlines()[0] if str(e) else type(e).__name__})")


def read_layout(path, f):
    schema = attr_str(path, f, "schema")
    if schema in OLD_SCHEMAS:
        raise Bad(f"{path}: schema '{schema}' was written before content digests and is no longer read; write it "
                  "again (normgate repro --save, normgate export) or upgrade a file whose history you trust with "
                  "normgate inspect FILE --upgrade NEW.h5")
    if schema in (CASE_SCHEMA, MAPS_SCHEMA):
        verify_content(path, f)
    if schema == CASE_SCHEMA:
        if "maps" not in f or not isinstance(f["maps"], h5py.Group):
            raise Bad(f"{path}: group /maps is missing")
        return schema, ("", ""), [read_entry(path, f, f["maps"], "0000")]
    if schema == MAPS_SCHEMA:
        n = attr_int(path, f, "entries")
        out = []
        for i in range(n):
            name = f"cases/{i:04d}"
            if name not in f or not isinstance(f[name], h5py.Group):
                raise Bad(f"{path}: group /{name} is missing ({n} entries recorded in /@entries)")
            g = f[name]
            out.append(read_entry(path, g, g, f"{i:04d}"))
        sha = attr_str(path, f, "source_sha256", required=False)
        if sha and not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise Bad(f"{path}: attribute /@source_sha256 is not 64 lowercase hex digits")
        return schema, (attr_str(path, f, "source", required=False), sha), out
    raise Bad(f"{path}: schema '{schema}', expected '{CASE_SCHEMA}' or '{MAPS_SCHEMA}'")


# --------------------------------------------------------------------------- helpers


def slug(case_id, impl, limit=56):
    """Short filesystem-safe name: 'H=300,T=600,w=fp32,form=plain,family=cancel,seed=1'
    + 'ctl_fp32_seq' -> 'H300-T600-wfp32-plain-cancel-s1_ctl_fp32_seq'."""
    parts = []
    for p in case_id.split(","):
        k, eq, v = p.partition("=")
        if not eq:
            parts.append(k)
        elif k == "seed":
            parts.append("s" + v)
        elif len(k) == 1:
            parts.append(k + v)
        else:
            parts.append(v)

    def clean(x):
        return re.sub(r"[^A-Za-z0-9._+-]+", "-", x).strip("-._")

    c = clean("-".join(parts)) or "case"
    i = clean(impl) or "impl"
    s = f"{c}_{i}"
    if len(s) > limit:  # keep it short but distinct: cut both parts, add a hash
        h = hashlib.sha1((case_id + "\0" + impl).encode()).hexdigest()[:6]
        room = limit - len(h) - 2
        ii = min(len(i), room // 2)
        cc = room - ii
        if len(c) < cc:
            cc, ii = len(c), room - len(c)
        s = f"{c[:cc].rstrip('-._')}_{i[:ii].rstrip('-._')}-{h}"
    return s


def fmt(v):
    if v is None:
        return "n/a"
    if math.isinf(v):
        return "inf"
    return f"{v:.3g}"


class Staged:
    """This run's files, written under temporary names in OUTDIR and renamed into
    place together (commit) only when all of them are written: a failure or an
    interruption before that removes them (discard) and leaves the files of an
    earlier run untouched."""

    def __init__(self, outdir):
        self.outdir = outdir
        self.files = []  # [(temporary path, final name)], in the order written
        self.committed = False  # every file renamed into place

    def write(self, name, mode, write):
        """write(fh) into a new temporary file in OUTDIR opened with `mode` (mode 0666
        less the umask), kept for commit. Nothing is left behind on failure."""
        # The signals held from the temporary's creation until it is listed: an
        # interruption in between would leave it behind unlisted.
        old = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
        try:
            fd, tmp = tempfile.mkstemp(prefix="." + name + ".", suffix=".tmp", dir=self.outdir)
            self.files.append((tmp, name))  # an interruption from here on removes it
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
        try:
            umask = os.umask(0)
            os.umask(umask)
            os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; give the usual mode
            with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as fh:
                fd = None
                write(fh)
        finally:
            if fd is not None:  # not yet owned by a file object
                try:
                    os.close(fd)
                except OSError:  # an interruption after fdopen: the dropped file object closed it
                    pass

    def commit(self):
        """Rename every file into place, in order (index.html is written, so renamed,
        last), with SIGINT, SIGTERM and SIGHUP held until all are; returns the final
        paths. Failed naming the file when one cannot be renamed."""
        old = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
        done = []
        try:
            if _received:  # an interruption whose exception a callback swallowed
                if _received[0] == signal.SIGINT:
                    raise KeyboardInterrupt
                raise Interrupted(_received[0])
            while self.files:
                tmp, name = self.files[0]
                final = os.path.join(self.outdir, name)
                if os.path.isdir(final) and not os.path.islink(final):
                    raise Failed(f"cannot write {name} in {self.outdir}: a folder of that name is in the way")
                try:
                    os.replace(tmp, final)
                except OSError as err:
                    raise Failed(f"cannot write {name} in {self.outdir} ({err})")
                self.files.pop(0)
                done.append(final)
            self.committed = True  # before the held signals arrive
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
        return done

    def discard(self):
        """Remove the files not renamed into place."""
        while self.files:
            tmp, _ = self.files.pop()
            try:
                os.unlink(tmp)
            except OSError:
                pass


def save(fig, staged, name, dpi):
    """Write fig as the PNG OUTDIR/name (staged: renamed into place by commit)."""
    try:
        staged.write(name, "wb", lambda fh: fig.savefig(fh, format="png", dpi=dpi))
    finally:
        plt.close(fig)


# --------------------------------------------------------------------------- what is gated

OUTPUTS = ("y", "rstd", "dx", "dw")
GATED = {"fwd": ("y", "rstd"), "bwd": OUTPUTS}  # the gate report's budgets line
PICTURE = {"y": "y_tiles", "rstd": "rstd", "dx": "dx_tiles", "dw": "dw"}  # file suffix per output


def entry_op(e):
    """'fwd' for an entry of a forward window (it gates y and rstd only), else 'bwd' (a
    backward window, a check report's implementation or a saved case: all four outputs)."""
    return "fwd" if e["prov"]["window"].startswith("fwd") else "bwd"


def over(v):
    return v is not None and not (v <= 1)  # > 1, inf or NaN


def pictured(e):
    """Outputs drawn for an entry, in order: a forward window's y and rstd; a backward
    step's dx and dw, then y and rstd as well when one of them is over budget (they are
    gated too, but the backward's own outputs come first)."""
    if entry_op(e) == "fwd":
        return ["y", "rstd"]
    return ["dx", "dw"] + [o for o in ("y", "rstd") if over(e["max_ratio"][o])]


def audited(e):
    """The variant under audit: a forward window's forward variant, else the implementation."""
    p = e["prov"]
    return (p["fwd"] or "fwd") if entry_op(e) == "fwd" and p["window"] else p["impl"]


def variant_text(e):
    """The code under audit: a forward window's forward variant, else the implementation."""
    p = e["prov"]
    if entry_op(e) == "fwd" and p["window"]:
        v = p["fwd"] or "forward (not recorded)"
        return f"{v}  (its case then ran backward {p['impl']}: not pictured, not gated here)"
    v = p["impl"]
    if p["fwd"]:
        v += f"  (forward {p['fwd']})"
    if p["impl"].startswith("ctl_"):
        v += "  NEGATIVE CONTROL"
    return v


OK_COLOUR, OVER_COLOUR = "#1a7f37", "#c62828"


def titles(fig, ax, e, out, what, mx):
    """Headline (output, what is drawn, max err/tol; green within budget, red over) and two
    lines naming window, variant and case. Long lines are wrapped to the figure's width."""
    p = e["prov"]
    bad = over(mx)
    head = f"{out} err/tol {what}  --  max {fmt(mx)}  " + ("> 1: OVER BUDGET" if bad else "<= 1: within budget")
    width = max(40, int(fig.get_figwidth() * 12.5))
    lines = [f"window {p['window']}" if p["window"] else "no window (a saved case or a check report's case)",
             f"variant {variant_text(e)}",
             f"case {p['case_id']}   [{p['backend'] or '?'}]"]
    sub = "\n".join(textwrap.fill(x, width, subsequent_indent="    ") for x in lines)
    ax.set_title(sub, fontsize=8.5, loc="left", color="0.2")
    fig.suptitle(head, x=0.01, ha="left", fontsize=11.5, fontweight="bold",
                 color=OVER_COLOUR if bad else OK_COLOUR)


def row_label(e):
    if e["heads"] > 1:  # per-head forms: one row per (token, head), token-major
        return f"rows r = token*{e['heads']} + head  ({e['rows']} rows = T x {e['heads']} heads)"
    return f"rows r  (T = {e['rows']})"


# --------------------------------------------------------------------------- pictures

# One colour scale for every heatmap of every export, so pictures compare at a glance:
# log err/tol from 1e-4 (and below) to 10 (and above); 1, the budget, is where the
# colours turn from viridis (dark: far below budget, yellow: near it) to reds (over).
CMIN, CMAX = 1e-4, 10.0


def fixed_cmap():
    n = 250
    f = (0 - math.log10(CMIN)) / (math.log10(CMAX) - math.log10(CMIN))
    nb = int(round(f * n))
    below = plt.get_cmap("viridis")(np.linspace(0.0, 1.0, nb))
    above = plt.get_cmap("Reds")(np.linspace(0.55, 0.95, n - nb))
    cm = mcolors.ListedColormap(np.vstack([below, above]), name="errtol_fixed")
    cm.set_under(below[0])
    cm.set_over(plt.get_cmap("Reds")(1.0))
    cm.set_bad("black")  # inf: a non-finite result
    return cm


def edge_ticks(edges, n):
    """Tile edges as ticks, without one that would print over the last (a partial last tile)."""
    ticks = [int(x) for x in edges[:-1] if n - x >= 0.06 * n] + [int(n)]
    return ticks


def plot_tiles(e, out):
    """Heatmap of an output's max err/tol per tile x tile block (y_tiles or dx_tiles)."""
    t = e[f"{out}_tiles"]
    T, H, tile = e["rows"], e["cols"], e["tile"]
    tr, tc = t.shape
    fig, ax = plt.subplots(figsize=(9.5, 6.6), layout="constrained")
    mx = exact_max(t)
    what = f"per {tile}x{tile} tile (max over the tile)"
    if t.size == 0:
        ax.text(0.5, 0.5, f"no {out} tiles (T or H is 0)", ha="center", va="center", transform=ax.transAxes)
        titles(fig, ax, e, out, what, mx)
        return fig
    inf = ~np.isfinite(t)
    norm = mcolors.LogNorm(vmin=CMIN, vmax=CMAX, clip=False)
    cmap = fixed_cmap()
    shown = np.ma.masked_invalid(np.where(t > 0, t, CMIN / 10))  # 0 is below the scale
    redges = np.minimum(np.arange(tr + 1) * tile, T)
    cedges = np.minimum(np.arange(tc + 1) * tile, H)
    many = tr * tc > 400
    m = ax.pcolormesh(cedges, redges, shown, cmap=cmap, norm=norm,
                      edgecolors="face" if many else "white", linewidth=0 if many else 0.6)
    ax.set_xlim(0, H)
    ax.set_ylim(T, 0)  # row 0 at the top, as in the [T, H] tensor
    cb = fig.colorbar(m, ax=ax, extend="both", pad=0.02, aspect=30)
    cb.set_label(f"{out} err/tol  (max over each tile; log; pass <= 1)")
    cb.set_ticks([1e-4, 1e-3, 1e-2, 1e-1, 1, 10])
    cb.set_ticklabels(["<=1e-4", "1e-3", "0.01", "0.1", "1 budget", ">=10"])
    cb.ax.axhline(1.0, color="black", lw=2.5)
    # over budget: outlined in black; the worst tile: white-and-black outline
    n_over = 0
    for a in range(tr):
        for c in range(tc):
            if over(t[a, c]):
                n_over += 1
                ax.add_patch(Rectangle((cedges[c], redges[a]), cedges[c + 1] - cedges[c],
                                       redges[a + 1] - redges[a], fill=False, ec="black",
                                       lw=0.8 if many else 2.0, zorder=4))
    a_, c_ = np.unravel_index(int(np.argmax(np.where(np.isfinite(t), t, np.inf))), t.shape)
    for ec, lw in (("white", 4.0), ("black", 1.6)):
        ax.add_patch(Rectangle((cedges[c_], redges[a_]), cedges[c_ + 1] - cedges[c_],
                               redges[a_ + 1] - redges[a_], fill=False, ec=ec, lw=lw, zorder=5))
    # values in the cells when they fit: font from the cell's size on the page
    aw, ah = 9.5 - 2.3, 6.6 - 1.9  # axes size in inches, roughly
    cw = aw * 72 * tile / max(H, 1)
    ch = ah * 72 * tile / max(T, 1)
    fs = min(9.0, cw / 2.6, ch * 0.7)
    if fs >= 5.0 and tr * tc <= 1200:
        for a in range(tr):
            for c in range(tc):
                v = t[a, c]
                # a partial last tile (T or H not a multiple of the tile) may be too thin for text
                if ((redges[a + 1] - redges[a]) * ah * 72 / max(T, 1) < fs * 1.2
                        or (cedges[c + 1] - cedges[c]) * aw * 72 / max(H, 1) < fs * 2.4):
                    continue
                txt = "inf" if not np.isfinite(v) else ("0" if v == 0 else f"{v:.2g}")
                r_, g_, b_, _ = cmap(norm(v)) if np.isfinite(v) and v > 0 else (0, 0, 0, 1)
                dark = 0.299 * r_ + 0.587 * g_ + 0.114 * b_ < 0.55
                ax.text((cedges[c] + min(cedges[c + 1], H)) / 2, (redges[a] + redges[a + 1]) / 2, txt,
                        ha="center", va="center", fontsize=fs, color="white" if dark else "black", zorder=6)
    ax.set_xticks(edge_ticks(cedges, H) if tc <= 16 else
                  matplotlib.ticker.MaxNLocator(integer=True).tick_values(0, H))
    ax.set_yticks(edge_ticks(redges, T) if tr <= 16 else
                  matplotlib.ticker.MaxNLocator(integer=True).tick_values(0, T))
    ax.set_xlim(0, H)
    ax.set_ylim(T, 0)
    for lab in ax.get_xticklabels():
        lab.set_rotation(45 if 8 < tc <= 16 else 0)
    notes = [f"{tr} x {tc} tiles; over budget (> 1, outlined black): {n_over}",
             f"worst tile outlined white: rows {redges[a_]}..{redges[a_ + 1] - 1}, cols {cedges[c_]}..{cedges[c_ + 1] - 1}"]
    if inf.any():
        notes.append(f"black = inf ({int(inf.sum())})")
    ax.set_xlabel(f"columns j  (H = {H})\n" + "; ".join(notes), fontsize=9)
    ax.set_ylabel(row_label(e))
    titles(fig, ax, e, out, what, mx)
    return fig


def plot_series(e, out):
    """err/tol per element of a vector output: dw per column j, rstd per row r (log y),
    the budget line at 1; dw with its oracle bound / tol. Over 20000 points are max-pooled."""
    r = e["dw_ratio"] if out == "dw" else e["rstd_ratio"]
    b = e["dw_bound_over_tol"] if out == "dw" else None
    n = r.size
    unit = "col" if out == "dw" else "row"
    fig, ax = plt.subplots(figsize=(9.5, 5.2), layout="constrained")
    mx = exact_max(r)
    what = "per column j" if out == "dw" else "per row r"
    if n == 0:
        ax.text(0.5, 0.5, f"no {out} elements", ha="center", va="center", transform=ax.transAxes)
        titles(fig, ax, e, out, what, mx)
        return fig
    inf = ~np.isfinite(r)  # ratio() gives inf for a non-finite failure
    fin = ~inf
    low = fin & (r < FLOOR)
    ov = fin & (r > 1)

    def count(mask):
        k = int(mask.sum())
        return f"{k} {unit}" + ("" if k == 1 else "s")

    pool = 1
    idx = np.arange(n)
    rc = np.where(fin, np.maximum(r, FLOOR), np.nan)
    if n > 20000:  # max-pool so the picture stays a picture
        pool = -(-n // 5000)
        pad = np.full(pool * (-(-n // pool)) - n, np.nan)
        rc = np.nanmax(np.concatenate([rc, pad]).reshape(-1, pool), axis=1)
        idx = np.arange(rc.size) * pool
    ms = 3.0 if rc.size <= 2000 else 1.2
    if b is not None:  # the faint bound series first; usually far below the floor: drawn above it only
        bfin = b[np.isfinite(b)]
        bc = np.where(np.isfinite(b) & (b >= FLOOR), b, np.nan)
        blab = f"oracle bound / tol (reference certainty), max {fmt(float(bfin.max()) if bfin.size else None)}"
        if not np.isfinite(bc).any():
            blab += f": below {FLOOR:g}, not drawn"
        ax.plot(np.arange(n), bc, color="0.55", lw=0.8, alpha=0.6, zorder=1, label=blab)
    ax.plot(idx, rc, color="#4a6fa5", lw=0.4, alpha=0.5, zorder=2)
    okm = np.isfinite(rc) & (rc <= 1) & (rc > FLOOR)
    ovm = np.isfinite(rc) & (rc > 1)
    lowm = np.isfinite(rc) & (rc <= FLOOR)
    pl = f" (max of {pool} {unit}s a point)" if pool > 1 else ""
    ax.plot(idx[okm], rc[okm], "o", ms=ms, color="#1f4e9c", zorder=3,
            label=f"err/tol <= 1: within budget ({count(fin & ~ov & ~low)}){pl}")
    ax.plot(idx[ovm], rc[ovm], "o", ms=ms + 1.5, color=OVER_COLOUR, zorder=4,
            label=f"err/tol > 1: OVER BUDGET ({count(ov)})")
    if low.any():
        ax.plot(idx[lowm], rc[lowm], "v", ms=ms + 1, color="0.35", zorder=3,
                label=f"err/tol < {FLOOR:g} or exactly 0, drawn at {FLOOR:g} ({count(low)})")
    ax.set_yscale("log")
    vals = np.concatenate([rc[np.isfinite(rc)], [1.0]])
    lo, hi = max(FLOOR, float(np.min(vals))), float(np.max(vals))
    ax.set_ylim(lo / 3, max(hi, 1.0) * (100 if inf.any() else 20))
    ax.axhspan(1.0, ax.get_ylim()[1], color=OVER_COLOUR, alpha=0.06, lw=0, zorder=0)
    ax.axhline(1.0, color="black", lw=1.6, ls="--", zorder=5)
    ax.text(1.005, 1.0, "budget\nerr/tol = 1", transform=ax.get_yaxis_transform(),
            va="center", ha="left", fontsize=8.5, fontweight="bold", clip_on=False)
    if inf.any():
        ytop = ax.get_ylim()[1] / 1.6
        ax.plot(np.arange(n)[inf], np.full(int(inf.sum()), ytop), "X", ms=ms + 4, color="#7b1fa2",
                zorder=6, clip_on=False, label=f"inf: non-finite result ({count(inf)}), drawn at the top")
    # the worst element, marked and named
    k = int(np.argmax(np.where(np.isfinite(r), r, np.inf)))
    ax.annotate(f"max {fmt(mx)} at {unit} {k}", xy=(k, ax.get_ylim()[1] / 1.6 if inf[k] else max(r[k], FLOOR)),
                xytext=(0, 14), textcoords="offset points", fontsize=8.5,
                ha="left" if k < 0.15 * n else "right" if k > 0.85 * n else "center",
                arrowprops=dict(arrowstyle="->", lw=0.8), zorder=7)
    ax.set_xlim(-0.5, max(n - 0.5, 0.5))
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    if out == "dw":
        ax.set_xlabel(f"columns j  (H = {e['cols']}; one dw element per column)")
    else:
        ax.set_xlabel(row_label(e) + "; one rstd element per row")
    ax.set_ylabel(f"{out} err/tol  (log)")
    ax.grid(True, which="major", axis="y", alpha=0.3)
    ax.legend(fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    titles(fig, ax, e, out, what, mx)
    return fig


def hist_max_text(c, up):
    """'<= X' for the largest non-empty bin of counts c (upper edges up)."""
    nz = np.nonzero(c)[0]
    if nz.size == 0:
        return "empty"
    k = int(nz[-1])
    if k == 0:
        return "all 0"
    if k == up.size - 1:
        return "max inf"
    if k == up.size - 2:
        return f"max > {up[-3]:g}"
    return f"max <= {up[k]:.3g}"


HIST_STYLE = {"y": "#1f77b4", "rstd": "#2ca02c", "dx": "#ff7f0e", "dw": "#d62728"}


def plot_hist(e):
    """err/tol histograms of the outputs the entry's window gates (log-log)."""
    outs = GATED[entry_op(e)]
    up = e["hist_upper"]
    nb = up.size
    edges = up[1:-2]  # upper edges of bins 1 .. nb-3, all finite
    lo_e, hi_e = edges[0], edges[-1]
    step = edges[-1] / edges[-2] if edges.size > 1 else 10.0  # one log bin
    d = math.log10(step)
    # Bin k in 2 .. nb-3 spans (up[k-1], up[k]] and is drawn there. The four
    # special bins get their own slots beyond the log range, separated by gaps:
    #   [exact 0] gap [(0, 1e-8]] | log bins | [(1e4, inf)] gap [inf/NaN]
    z0, z1 = lo_e / step ** 7, lo_e / step ** 5
    u0 = lo_e / step ** 3
    o1 = hi_e * step ** 3
    i0, i1 = hi_e * step ** 5, hi_e * step ** 7
    x = np.concatenate([[z0, z1, u0], edges, [o1, i0, i1]])
    fig, ax = plt.subplots(figsize=(9.5, 5.6), layout="constrained")
    ymax = 1
    special = []
    any_over = False
    for name in outs:
        c = e["hist"][f"hist_{name}"]
        n = int(c.sum())
        v = np.concatenate([[c[0], 0, c[1]], c[2:-2], [c[-2], 0, c[-1]]]).astype(float)
        ymax = max(ymax, int(c.max()) if c.size else 1)
        mr = e["max_ratio"][name]
        mtxt = f"max {fmt(mr)}" if mr is not None else hist_max_text(c, up)
        n_over = int(c[np.concatenate([[False], up[1:] > 1])].sum())  # bins entirely above 1
        any_over |= over(mr) or n_over > 0
        # y and dx often coincide: y wide and solid, dx dashed on top, so both show
        ax.stairs(v, x, color=HIST_STYLE[name], lw=2.6 if name == "y" else 1.5, baseline=None,
                  ls="--" if name == "dx" else "-", zorder=3 if name == "y" else 4,
                  label=f"{name}: n={n}, {mtxt}, {n_over} over budget")
        for k, what in ((0, "exactly 0"), (1, f"in (0, {lo_e:g}]"), (nb - 2, f"in ({hi_e:g}, inf)"),
                        (nb - 1, "inf/NaN")):
            if c[k]:
                special.append(f"{name}: {int(c[k])} {what}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(z0 / step, i1 * step)
    ax.set_ylim(0.7, ymax * 4)
    for a_, b_, lab in ((z0, z1, "=0"), (u0, lo_e, f"<={lo_e:g}"), (hi_e, o1, f">{hi_e:g}"), (i0, i1, "inf")):
        ax.axvspan(a_, b_, color="0.5", alpha=0.12, lw=0, zorder=0)
        ax.text(math.sqrt(a_ * b_), 0.985, lab, transform=ax.get_xaxis_transform(), ha="center",
                va="top", fontsize=7, color="0.3", rotation=90)
    ax.axvspan(1.0, hi_e, color=OVER_COLOUR, alpha=0.06, lw=0, zorder=0)
    ax.axvline(1.0, color="black", lw=1.6, ls="--", zorder=5)
    ax.text(1.0, 0.985, "budget err/tol = 1 ", transform=ax.get_xaxis_transform(), ha="right",
            va="top", fontsize=8.5, fontweight="bold")
    ax.text(1.0, 0.93, "  over budget", transform=ax.get_xaxis_transform(), ha="left",
            va="top", fontsize=8, color="#b71c1c")
    ticks = [10.0 ** k for k in range(int(math.ceil(math.log10(lo_e))), int(math.floor(math.log10(hi_e))) + 1, 2)]
    ax.set_xticks(ticks)
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xlabel(f"err/tol  (log bins of 10^{d:.2g}; grey slots: exact 0, (0, {lo_e:g}], ({hi_e:g}, inf), inf)")
    ax.set_ylabel("elements per bin (log)")
    ax.grid(True, which="major", alpha=0.25)
    handles, labels = ax.get_legend_handles_labels()
    handles.append(Line2D([], [], color="black", lw=1.6, ls="--"))
    labels.append("budget: err/tol = 1 (pass <= 1)")
    ax.legend(handles, labels, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16),
              ncol=2, frameon=False)
    if special:  # under the legend, never over the data
        txt = "\n".join(textwrap.wrap("special bins: " + "; ".join(special), 120))
        fig.text(0.5, 0.0, txt, ha="center", va="bottom", fontsize=7.5, color="0.25")
        fig.get_layout_engine().set(rect=(0, 0.035 * (txt.count("\n") + 1), 1, 1 - 0.035 * (txt.count("\n") + 1)))
    mx = max((e["max_ratio"][o] for o in outs if e["max_ratio"][o] is not None), default=None)
    titles(fig, ax, e, "/".join(outs), "histograms (the gated outputs)", mx)
    return fig


# --------------------------------------------------------------------------- the report


def report_candidates(w):
    """Cases a gate report names for a window (what export re-runs: worst per output, dw vs FP32)."""
    out = set()
    for o in (w.get("outputs") or {}).values():
        if isinstance(o, dict) and isinstance(o.get("worst_case"), str) and o["worst_case"]:
            out.add(o["worst_case"])
    d = w.get("dw_vs_fp32")
    if isinstance(d, dict) and isinstance(d.get("worst_case"), str) and d["worst_case"]:
        out.add(d["worst_case"])
    return out


def json_text(v, limit=40):
    """A JSON value as a short text for a message."""
    try:
        t = json.dumps(v, ensure_ascii=True)
    except (TypeError, ValueError, RecursionError):
        t = type(v).__name__
    return t if len(t) <= limit else t[:limit] + "..."


def window_problem(i, w):
    """Why windows[i] of a report is not a gate report's window (naming the field), or ''.
    The fields the index shows are checked, so that a wrong type is refused here and
    never reaches the drawing."""
    where = f"windows[{i}]"
    if not isinstance(w, dict):
        return f"{where} is {json_text(w)}, not an object"
    if not isinstance(w.get("window"), str):
        return f"{where}.window is {json_text(w.get('window'))}, not a string"
    for k in ("outputs", "dw_vs_fp32"):
        if not isinstance(w.get(k) or {}, dict):
            return f"{where}.{k} is {json_text(w[k])}, not an object"
    for k in ("route", "variant", "verdict", "op"):
        if w.get(k) is not None and not isinstance(w[k], str):
            return f"{where}.{k} is {json_text(w[k])}, not a string"
    for k in ("cases", "errors"):
        v = w.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            return f"{where}.{k} is {json_text(v)}, not an integer"
    if w.get("pass") is not None and not isinstance(w["pass"], bool):
        return f"{where}.pass is {json_text(w['pass'])}, not true or false"
    for o, v in (w.get("outputs") or {}).items():
        if not isinstance(v, dict):
            continue  # not drawn (as before)
        wc = v.get("worst_case")
        if wc is not None and not isinstance(wc, str):
            return f"{where}.outputs.{o}.worst_case is {json_text(wc)}, not a string"
        m = v.get("max_err_tol")
        if m is not None and not (isinstance(m, (int, float)) and not isinstance(m, bool)) \
                and m not in ("inf", "-inf", "nan"):
            return f"{where}.outputs.{o}.max_err_tol is {json_text(m)}, not a number"
    return ""


def load_report(explicit, source, maps_path, entries, source_sha256=""):
    """The gate report the maps were exported from: --report, else the file's /@source
    (as recorded, then beside the maps file). Returns (path, windows, note): windows is
    None when no matching gate report was found, and note says why. A report whose windows
    do not hold every entry (window label and case) is stale, and so is one whose bytes do
    not hash to the file's /@source_sha256 (when it records one: export writes the
    report's SHA-256 there): an error with --report, otherwise ignored."""
    if explicit:
        cands = [explicit]
    else:
        if not source:
            return None, None, "the file records no report (/@source)"
        cands = [source]
        if not os.path.isabs(source):
            cands.append(os.path.join(os.path.dirname(os.path.abspath(maps_path)), os.path.basename(source)))
    unread = ""  # why a recorded report could not be read (the note when none is found)
    for path in cands:
        if not os.path.isfile(path):
            if explicit and os.path.exists(path):  # a folder, a FIFO (never opened: it would block), a device
                raise Bad(f"{path}: not a regular file (give the gate's JSON report)")
            continue
        text = None
        try:
            with open(path, "rb") as fh:
                raw = fh.read()
            if source_sha256 and hashlib.sha256(raw).hexdigest() != source_sha256:
                why = (f"{path} is not the report these maps were exported from: its SHA-256 is "
                       f"{hashlib.sha256(raw).hexdigest()}, the file records {source_sha256} (/@source_sha256; "
                       "edited, or a newer report at the same path)")
                if explicit:
                    raise Bad(why)
                unread = why  # the next candidate (the copy beside the maps file) may be the one
                continue
            text = raw.decode("utf-8")
            rep = json.loads(text)
        except (OSError, ValueError, RecursionError) as err:
            why = "nested too deeply" if isinstance(err, RecursionError) else str(err).splitlines()[0] if str(err) \
                else type(err).__name__
            if explicit:
                if text_is_markdown(text):
                    raise Bad(f"{path}: not JSON: it is a Markdown report; give the JSON one (--report-json)")
                raise Bad(f"{path}: cannot read the report ({why})")
            unread = f"report {path} cannot be read ({why})"
            continue
        ws = rep.get("windows") if isinstance(rep, dict) else None
        if not isinstance(ws, list):
            why = (f"{path} is not a gate report (no 'windows' list of objects with a 'window' name and "
                   "'outputs' and 'dw_vs_fp32' objects)")
            if explicit:
                raise Bad(why)
            return None, None, why
        for i, w in enumerate(ws):
            problem = window_problem(i, w)
            if problem:
                why = f"{path} is not a well-formed gate report: {problem}"
                if explicit:
                    raise Bad(why)
                return None, None, why
        for e in entries:
            win, cid = e["prov"]["window"], e["prov"]["case_id"]
            if not any(w["window"] == win and cid in report_candidates(w) for w in ws):
                why = (f"{path} does not match the file (entry {e['key']}: window '{win}', case {cid} "
                       "not in it; a newer report at the same path?)")
                if explicit:
                    raise Bad(why)
                return None, None, why
        return path, ws, ""
    if explicit:
        raise Bad(f"{explicit}: no such report")
    return None, None, unread or f"report {source} not found"


VERDICTS = {"pass": ("PASS", "#1a7f37"), "fail": ("FAIL", "#c62828"),
            "inconclusive": ("INCONCLUSIVE", "#b26a00"), "unknown": ("UNKNOWN", "#6e7781")}


def groups_for(entries, windows):
    """Index sections in order: one per report window (every window, even one with no
    exported case), or, without a report, per window label (or implementation, when there
    is no window) in the file's order. Each: label, verdict, how the verdict is known,
    gated outputs, the report's max err/tol per output, entries."""
    groups = []
    if windows is not None:
        left = list(entries)
        for w in windows:
            cand = report_candidates(w)
            mine = [e for e in left if e["prov"]["window"] == w["window"] and e["prov"]["case_id"] in cand]
            left = [e for e in left if e not in mine]
            op = "fwd" if w.get("op") == "fwd" or w["window"].startswith("fwd") else "bwd"
            outs = {}
            for o, v in (w.get("outputs") or {}).items():
                if isinstance(v, dict) and "max_err_tol" in v:
                    outs[o] = v["max_err_tol"]
            v = str(w.get("verdict") or ("pass" if w.get("pass") is True else "fail" if w.get("pass") is False else "unknown"))
            src = "the gate report's window verdict"
            # The maps are what export measured: a window the report calls
            # anything but FAIL with an exported case over budget on a gated
            # output is shown as FAIL, and says why.
            gated = GATED[op]
            if v != "fail" and any(over(e["max_ratio"][o]) for e in mine for o in gated):
                src = (f"an exported case is over budget on a gated output, though the gate report says "
                       f"{VERDICTS.get(v, VERDICTS['unknown'])[0]}")
                v = "fail"
            groups.append({"label": w["window"], "route": w.get("route") or "", "variant": w.get("variant") or "",
                           "op": op, "verdict": v if v in VERDICTS else "unknown",
                           "verdict_src": src, "report_max": outs,
                           "cases": w.get("cases"), "errors": w.get("errors", 0), "entries": mine,
                           "worst_of": {o: v.get("worst_case") for o, v in (w.get("outputs") or {}).items()
                                        if isinstance(v, dict)}})
        return groups
    by = {}
    for e in entries:
        p = e["prov"]
        key = p["window"] or ("impl " + p["impl"])
        if key not in by:
            by[key] = {"label": p["window"] or f"implementation {p['impl']}", "route": "", "op": entry_op(e),
                       "variant": (p["fwd"] if entry_op(e) == "fwd" else p["impl"]), "report_max": {},
                       "cases": None, "errors": 0, "entries": [], "worst_of": {}}
            groups.append(by[key])
        by[key]["entries"].append(e)
    for g in groups:
        gated = GATED[g["op"]]
        if any(over(e["max_ratio"][o]) for e in g["entries"] for o in gated):
            g["verdict"], g["verdict_src"] = "fail", "an exported case is over budget on a gated output"
        elif g["label"].startswith("implementation"):  # no window: the cases' own verdicts are the verdict
            vs = [e["prov"]["verdict"] for e in g["entries"]]
            g["verdict"] = "fail" if "fail" in vs else "inconclusive" if "inconclusive" in vs else \
                "pass" if vs and all(v == "pass" for v in vs) else "unknown"
            g["verdict_src"] = "the verdict of the case(s) in the file"
        else:
            g["verdict"] = "unknown"
            g["verdict_src"] = ("no report: the maps file does not record window verdicts (the exported "
                                "worst cases are within budget on the gated outputs)")
    return groups


# --------------------------------------------------------------------------- the index

CSS = """
body { font-family: system-ui, sans-serif; margin: 1.2em; color: #1f2328; max-width: 1500px; }
h1 { font-size: 1.35em; margin-bottom: 0.2em; }
.meta { color: #57606a; font-size: 0.9em; }
table.toc { border-collapse: collapse; font-size: 0.9em; margin: 0.8em 0; }
table.toc td, table.toc th { border: 1px solid #d0d7de; padding: 3px 8px; text-align: left; }
table.toc td.num { text-align: right; font-variant-numeric: tabular-nums; }
.v { display: inline-block; min-width: 7.5em; text-align: center; color: white; font-weight: bold;
     border-radius: 4px; padding: 2px 6px; margin-right: 0.6em; }
section.window { border-top: 2px solid #d0d7de; margin-top: 1.4em; padding-top: 0.4em; }
section.window h2 { font-size: 1.15em; margin: 0.3em 0; }
.case { margin: 0.7em 0 0.3em 0; font-size: 0.92em; }
.pics { display: grid; grid-template-columns: repeat(auto-fill, minmax(430px, 1fr)); gap: 10px; }
.pics figure { margin: 0; }
.pics img { width: 100%; border: 1px solid #d0d7de; }
.pics figcaption { font-size: 0.82em; color: #57606a; }
.over { color: #c62828; font-weight: bold; }
.ok { color: #1a7f37; }
.note { color: #57606a; font-size: 0.88em; }
"""


def badge(v):
    text, col = VERDICTS.get(v, VERDICTS["unknown"])
    return f'<span class="v" style="background:{col}">{text}</span>'


def ratio_html(v):
    if v is None:
        return "-"
    try:
        v = float(v)
    except (TypeError, ValueError, OverflowError):
        return html.escape(str(v))  # a report writes inf as a string
    return f'<span class="{"over" if over(v) else "ok"}">{fmt(v)}</span>'


def write_index(staged, file_path, schema, report_path, note, groups, pics):
    """OUTDIR/index.html (staged: renamed into place, last, by commit): self-contained,
    relative links to the PNGs; windows in the report's order, each with its verdict
    first, then per exported case the pictures of the outputs the window gates. pics:
    entry key -> [(output label, file name)]."""
    esc = html.escape
    q = lambda name: urllib.parse.quote(name)  # noqa: E731  file names hold '=', ',' and '+'
    n_png = sum(len(v) for v in pics.values())
    h = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
         f"<title>normgate maps: {esc(os.path.basename(file_path))}</title>", f"<style>{CSS}</style></head><body>",
         f"<h1>normgate maps: {esc(os.path.basename(file_path))}</h1>",
         f'<p class="meta">{esc(schema)} file <code>{esc(file_path)}</code>; '
         + (f"report <code>{esc(report_path)}</code>" if report_path else f"no gate report ({esc(note)})")
         + f"; {sum(len(g['entries']) for g in groups)} exported case(s), {n_png} pictures.</p>"]
    counts = {}
    for g in groups:
        counts[g["verdict"]] = counts.get(g["verdict"], 0) + 1
    h.append('<p class="meta">' + " ".join(f"{badge(v)}{counts[v]}" for v in VERDICTS if v in counts) + "</p>")
    h.append('<p class="note">Every picture is err/tol (error over the budget\'s tolerance; pass &lt;= 1). '
             "Heatmaps share one fixed log colour scale (dark: far below budget, yellow: near it, red: over; "
             "cells over 1 outlined black, the worst cell outlined white). Forward windows gate y and rstd; "
             "backward windows gate y, rstd, dx and dw: their pictures are dx and dw (y and rstd too when over "
             "budget), the histogram shows all four. Click a picture for full size.</p>")
    # table of contents
    h.append('<table class="toc"><tr><th>verdict</th><th>window</th><th>variant</th>'
             + "".join(f"<th>{o}</th>" for o in OUTPUTS) + "<th>cases exported</th></tr>")
    for i, g in enumerate(groups):
        gated = GATED[g["op"]]
        cells = []
        for o in OUTPUTS:
            if o not in gated:
                cells.append('<td class="num note">not gated</td>')
                continue
            v = g["report_max"].get(o)
            if v is None and g["entries"]:  # no report: the exported cases' max
                vals = [e["max_ratio"][o] for e in g["entries"] if e["max_ratio"][o] is not None]
                v = max(vals) if vals else None
            cells.append(f'<td class="num">{ratio_html(v)}</td>')
        h.append(f'<tr><td>{badge(g["verdict"])}</td><td><a href="#w{i}">{esc(g["label"])}</a></td>'
                 f'<td>{esc(g["variant"])}</td>{"".join(cells)}<td class="num">{len(g["entries"])}</td></tr>')
    h.append("</table>")
    for i, g in enumerate(groups):
        gated = GATED[g["op"]]
        h.append(f'<section class="window" id="w{i}">')
        h.append(f'<h2>{badge(g["verdict"])}{esc(g["label"])} &rarr; {esc(g["variant"])}</h2>')
        bits = [f"verdict: {esc(g['verdict_src'])}"]
        if g["route"]:
            bits.append(f"route {esc(g['route'])}")
        if g["cases"] is not None:
            bits.append(f"{esc(str(g['cases']))} cases gated")
        if g["errors"]:
            bits.append(f'<span class="over">{esc(str(g["errors"]))} case(s) in error</span>')
        bits.append("gates " + ", ".join(gated)
                    + (": " + ", ".join(f"{o} max {ratio_html(g['report_max'][o])}" for o in gated
                                        if o in g["report_max"]) if g["report_max"] else ""))
        h.append(f'<p class="note">{"; ".join(bits)}</p>')
        if not g["entries"]:
            h.append('<p class="note">no case of this window in the file (nothing exported for it).</p>')
        for e in g["entries"]:
            p = e["prov"]
            worst = [o for o, c in g["worst_of"].items() if c == p["case_id"]]
            maxes = ", ".join(f"{o} {ratio_html(e['max_ratio'][o])}" for o in gated)
            h.append(f'<div class="case">case <code>{esc(p["case_id"])}</code>'
                     + (f" (the window's worst {', '.join(map(esc, worst))})" if worst else "")
                     + f"; max err/tol {maxes}; ran {esc(variant_text(e))} on {esc(p['backend'] or '?')}"
                     + f" [entry {esc(e['key'])}]</div>")
            h.append('<div class="pics">')
            for label, name in pics[e["key"]]:
                h.append(f'<figure><a href="{q(name)}"><img src="{q(name)}" alt="{esc(label)}" loading="lazy"></a>'
                         f"<figcaption>{esc(label)}: {esc(name)}</figcaption></figure>")
            h.append("</div>")
        h.append("</section>")
    h.append("</body></html>\n")
    text = "\n".join(h)
    staged.write("index.html", "w", lambda fh: fh.write(text))


# --------------------------------------------------------------------------- main


def main(argv):
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("file", metavar="FILE.h5")
    ap.add_argument("-o", "--outdir", required=True, metavar="OUTDIR")
    ap.add_argument("--dpi", type=int, default=120, metavar="N", help="PNG resolution (default 120)")
    ap.add_argument("--report", metavar="REPORT.json",
                    help="gate report the maps were exported from, for the index's window order and "
                         "verdicts (default: the file's /@source, when it is there and matches)")
    a = ap.parse_args(argv)
    staged = None  # this run's files, under temporary names until all are written
    made = False   # whether this run made OUTDIR

    def discard():
        # This run's files are removed, and the folder when this run made it:
        # the files of an earlier run stay as they were (no index without its
        # pictures, no pictures without an index).
        if staged is not None:
            staged.discard()
        if made and not (staged is not None and staged.committed):
            try:
                os.rmdir(a.outdir)
            except OSError:
                pass

    def interrupted(signum):
        discard()
        done = staged is not None and staged.committed  # the signal was held until every file was in place
        print(f"{PROG}: interrupted ({signal.Signals(signum).name}): "
              + ("everything was written" if done else "nothing of this run was left in " + a.outdir), file=sys.stderr)
        return 128 + int(signum)

    try:
        if not (20 <= a.dpi <= 1200):
            raise Bad(f"--dpi {a.dpi}: want 20..1200")
        schema, (source, source_sha256), entries = read_file(a.file)
        report_path, windows, note = load_report(a.report, source, a.file, entries, source_sha256)
        if note and source:
            print(f"{PROG}: note: {note}; the index shows no window verdicts it cannot know", file=sys.stderr)
        groups = groups_for(entries, windows)
        plan = []  # (entry, [(label, name, draw)])
        for e in entries:
            base = f"{e['key']}_{slug(e['prov']['case_id'], audited(e))}"
            todo = [(o, f"{base}_{PICTURE[o]}.png", (lambda e, o=o: plot_tiles(e, o)) if o in ("y", "dx")
                     else (lambda e, o=o: plot_series(e, o))) for o in pictured(e)]
            todo.append(("histogram " + "/".join(GATED[entry_op(e)]), f"{base}_hist.png", plot_hist))
            plan.append((e, todo))
        made = not os.path.exists(a.outdir)
        try:
            os.makedirs(a.outdir, exist_ok=True)
        except OSError as e:
            made = False
            raise Bad(f"{a.outdir}: cannot create output directory ({e.strerror})")
        if not os.access(a.outdir, os.W_OK):
            raise Bad(f"{a.outdir}: output directory is not writable")
        # A folder where a file goes (os.replace cannot replace it): refused
        # before any drawing (a write failure, exit 3, as one found later is).
        for name in [n for _, todo in plan for _, n, _ in todo] + ["index.html"]:
            final = os.path.join(a.outdir, name)
            if os.path.isdir(final) and not os.path.islink(final):
                raise Failed(f"{a.file}: cannot write {name} in {a.outdir}: a folder of that name is in the way")
        staged = Staged(a.outdir)
        pics = {}  # entry key -> [(label, name)]
        for e, todo in plan:
            pics[e["key"]] = []
            for label, name, fn in todo:
                fig = fn(e)
                try:
                    save(fig, staged, name, a.dpi)
                except OSError as err:
                    raise Failed(f"{a.file}: cannot write {name} in {a.outdir} ({err})")
                pics[e["key"]].append((label, name))
        try:
            write_index(staged, a.file, schema, report_path, note, groups, pics)
        except OSError as err:
            raise Failed(f"{a.file}: cannot write index.html in {a.outdir} ({err})")
        try:
            done = staged.commit()  # the pictures, then index.html
        except Failed as err:
            raise Failed(f"{a.file}: {err}")
        for out in done:
            print(f"wrote {out}")
    except Bad as err:
        discard()
        die(str(err))
    except (KeyboardInterrupt, Interrupted) as err:
        return interrupted(err.signum if isinstance(err, Interrupted) else signal.SIGINT)
    except Failed as err:
        if _received:  # the failure came from the interruption's unwinding: it is the interruption's
            return interrupted(_received[0])
        discard()
        die(str(err), 3)
    except Exception as err:  # a bug, not bad input: one line naming where, no traceback; nothing left
        if _received:
            return interrupted(_received[0])
        discard()
        tb = err.__traceback__
        while tb.tb_next is not None:
            tb = tb.tb_next
        die(f"{a.file}: internal error ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''} at "
            f"{os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno}); nothing of this run was left "
            f"in {a.outdir}", 3)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (KeyboardInterrupt, Interrupted) as _err:  # before main's own handling (argument parsing)
        _signum = _err.signum if isinstance(_err, Interrupted) else signal.SIGINT
        print(f"{PROG}: interrupted ({signal.Signals(_signum).name})", file=sys.stderr)
        sys.exit(128 + _signum)
