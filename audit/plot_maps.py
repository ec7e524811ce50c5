#!/usr/bin/env python3
"""Render audit pictures from normgate HDF5 files (datasets/SCHEMA.md).

Reads a normgate-case/1 file (`normgate repro ... --save`, error maps in
/maps, provenance on /) or a normgate-maps/1 file (`normgate export`, one
entry per /cases/NNNN group) and writes, per entry, three PNGs into OUTDIR:

  NNNN_<slug>_dw.png        dw err/tol per column j (log y), budget line at 1
  NNNN_<slug>_dx_tiles.png  max dx err/tol per tile x tile block (log colours)
  NNNN_<slug>_hist.png      err/tol histograms of y, rstd, dx, dw (log-log)

NNNN is 0000 for a case file and the group name for a maps file; the slug is
made from case_id and impl. PNGs are written to a temporary name in OUTDIR and
renamed, so OUTDIR never holds a half-written picture.

Usage: scripts/plot_maps.py FILE.h5 -o OUTDIR [--dpi N]

Exit status: 0 all pictures written; 2 bad usage or an unreadable/malformed
file (one line on stderr naming the file and the dataset or attribute).
Needs python3 with h5py, numpy and matplotlib.
"""
import argparse
import hashlib
import math
import os
import re
import sys
import tempfile
import textwrap

PROG = "plot_maps.py"
CASE_SCHEMA = "normgate-case/1"
MAPS_SCHEMA = "normgate-maps/1"
FLOOR = 1e-8  # err/tol values below this (exact zeros included) are drawn at FLOOR
HIST_NAMES = ("hist_y", "hist_rstd", "hist_dx", "hist_dw")
PROV_KEYS = ("case_id", "impl", "backend", "verdict", "oracle", "date", "gpu", "window")


class Bad(Exception):
    """A problem with the input file or the command line: one line, exit 2."""


def die(msg):
    print(f"{PROG}: error: {msg}", file=sys.stderr)
    sys.exit(2)


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
    maps_max = {"y": ("y_tiles", (tr, tc)), "rstd": ("rstd_ratio", (rows,)), "dx": None, "dw": None}
    for o, src in maps_max.items():
        if e["max_ratio"][o] is not None:
            continue
        v = e["dx_tiles"] if o == "dx" else e["dw_ratio"] if o == "dw" else \
            dataset(path, maps, src[0], src[1]).astype(np.float64)
        e["max_ratio"][o] = exact_max(v)
    return e


def exact_max(v):
    """Largest err/tol of an array (inf when any is non-finite, as ratio() reports a NaN); None when empty."""
    if v.size == 0:
        return None
    return math.inf if not np.all(np.isfinite(v)) else float(np.max(v))


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
    if schema == CASE_SCHEMA:
        if "maps" not in f or not isinstance(f["maps"], h5py.Group):
            raise Bad(f"{path}: group /maps is missing")
        return schema, [read_entry(path, f, f["maps"], "0000")]
    if schema == MAPS_SCHEMA:
        n = attr_int(path, f, "entries")
        out = []
        for i in range(n):
            name = f"cases/{i:04d}"
            if name not in f or not isinstance(f[name], h5py.Group):
                raise Bad(f"{path}: group /{name} is missing ({n} entries recorded in /@entries)")
            g = f[name]
            out.append(read_entry(path, g, g, f"{i:04d}"))
        return schema, out
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


def title_for(e, what):
    p = e["prov"]
    verdict = p["verdict"] or "?"
    impl = p["impl"] + ("  (NEGATIVE CONTROL: built to fail dw on cancel)" if p["impl"].startswith("ctl_") else "")
    where = f"\nwindow {p['window']}" if p.get("window") else ""
    if p.get("window", "").startswith("fwd"):
        where += "  (gates y, rstd; dx, dw: the backward run that carried it)"
    return (f"{what}  [case verdict: {verdict}]\n{p['case_id']}\n"
            f"impl {impl}  backend {p['backend'] or '?'}{where}")


def fmt(v):
    if v is None:
        return "n/a"
    if math.isinf(v):
        return "inf"
    return f"{v:.3g}"


def save(fig, outdir, name, dpi):
    """Write fig to OUTDIR/name atomically; returns the final path."""
    final = os.path.join(outdir, name)
    fd, tmp = tempfile.mkstemp(prefix="." + name + ".", suffix=".tmp", dir=outdir)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; give the usual mode
        with os.fdopen(fd, "wb") as fh:
            fig.savefig(fh, format="png", dpi=dpi)
        os.replace(tmp, final)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    finally:
        plt.close(fig)
    return final


VERDICT_COLOUR = {"pass": "#1a7f37", "fail": "#c62828", "inconclusive": "#b26a00"}


def colour_title(ax, e, what):
    # Long lines (a tile's row range, a forward window's note) are wrapped to
    # the figure's width: ~11.5 characters an inch at 9.5 pt (they ran past
    # the right edge of the 8-inch heatmap).
    width = max(40, int(ax.figure.get_figwidth() * 11.5))
    text = "\n".join(textwrap.fill(line, width, subsequent_indent="  ")
                     for line in title_for(e, what).split("\n"))
    ax.set_title(text, fontsize=9.5, loc="left",
                 color=VERDICT_COLOUR.get(e["prov"]["verdict"], "black"))


# --------------------------------------------------------------------------- pictures


def plot_dw(e):
    r = e["dw_ratio"]
    b = e["dw_bound_over_tol"]
    H = e["cols"]
    j = np.arange(H)
    fig, ax = plt.subplots(figsize=(9, 4.8), layout="constrained")
    inf = ~np.isfinite(r)  # ratio() gives inf for a non-finite failure
    fin = ~inf
    low = fin & (r < FLOOR)
    over = fin & (r > 1)
    ok = fin & ~low & ~over
    rc = np.where(fin, np.maximum(r, FLOOR), np.nan)

    def cols(mask):
        k = int(mask.sum())
        return f"{k} col" + ("" if k == 1 else "s")

    ms = 3.0 if H <= 2000 else 1.2
    lw = 0.6 if H <= 2000 else 0.3
    # the faint bound series first, so the ratios draw over it
    # the bound is usually far below the floor: draw only the part above it
    bfin = b[np.isfinite(b)]
    bmax = float(bfin.max()) if bfin.size else float("nan")
    bc = np.where(np.isfinite(b) & (b >= FLOOR), b, np.nan)
    blab = f"oracle bound / tol (reference certainty), max {fmt(bmax)}"
    if not np.isfinite(bc).any():
        blab += f": below {FLOOR:g}, not drawn"
    ax.plot(j, bc, color="0.55", lw=0.8, alpha=0.6, zorder=1, label=blab)
    ax.plot(j, rc, color="#4a6fa5", lw=lw, alpha=0.5, zorder=2)
    ax.plot(j[ok], rc[ok], "o", ms=ms, color="#1f4e9c", zorder=3,
            label=f"err/tol <= 1: within budget ({cols(ok)})")
    ax.plot(j[over], rc[over], "o", ms=ms, color="#d62728", zorder=4,
            label=f"err/tol > 1: over budget ({cols(over)})")
    ax.plot(j[low], rc[low], "v", ms=ms + 1, color="0.35", zorder=3,
            label=f"err/tol < {FLOOR:g} or exactly 0, clipped to {FLOOR:g} ({cols(low)})")
    ax.set_yscale("log")
    finite_vals = np.concatenate([rc[fin], bc[np.isfinite(bc)], [1.0]])
    lo = max(FLOOR, np.nanmin(finite_vals)) if finite_vals.size else FLOOR
    hi = np.nanmax(finite_vals) if finite_vals.size else 1.0
    ax.set_ylim(lo / 3, hi * (30 if inf.any() else 4))
    ax.axhline(1.0, color="black", lw=1.6, ls="--", zorder=5)
    ax.text(1.0, 1.0, " budget\n err/tol = 1", transform=ax.get_yaxis_transform(),
            va="center", ha="left", fontsize=8.5, fontweight="bold", clip_on=False)
    handles, labels = ax.get_legend_handles_labels()
    handles.insert(0, Line2D([], [], color="black", lw=1.6, ls="--"))
    labels.insert(0, "budget: err/tol = 1 (pass <= 1)")
    if inf.any():
        ytop = ax.get_ylim()[1] / 1.6
        ax.plot(j[inf], np.full(int(inf.sum()), ytop), "X", ms=ms + 4, color="#7b1fa2", zorder=6,
                clip_on=False)
        handles.append(Line2D([], [], marker="X", ls="", color="#7b1fa2", ms=7))
        labels.append(f"inf: non-finite result ({cols(inf)}), drawn at the top")
    ax.set_xlim(-0.5 if H else 0, max(H - 0.5, 0.5))
    ax.set_xlabel("column j (dw element)")
    ax.set_ylabel("dw err/tol  (log)")
    ax.grid(True, which="major", axis="y", alpha=0.3)
    mx = np.max(r) if r.size else float("nan")
    jm = int(np.argmax(r)) if r.size else -1
    ax.legend(handles, labels, fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.13),
              ncol=2, frameon=False)
    colour_title(ax, e, f"dw err/tol per column: max {fmt(float(mx))} at col {jm}")
    return fig


def two_sided_cmap(norm):
    """Blues below err/tol = 1, reds above, the switch exactly at 1 on the log scale."""
    lv, hv = math.log10(norm.vmin), math.log10(norm.vmax)
    f = (0 - lv) / (hv - lv)  # position of 1 in [0, 1]
    n = 256
    nb = max(1, min(n - 1, int(round(f * n))))
    below = plt.get_cmap("Blues_r")(np.linspace(0.15, 0.85, nb))
    above = plt.get_cmap("Reds")(np.linspace(0.45, 1.0, n - nb))
    cm = mcolors.ListedColormap(np.vstack([below, above]), name="below_above_1")
    cm.set_bad("#6a1b9a")  # inf tiles
    return cm


def plot_dx_tiles(e):
    t = e["dx_tiles"]
    T, H, tile = e["rows"], e["cols"], e["tile"]
    tr, tc = t.shape
    fig, ax = plt.subplots(figsize=(8, 6), layout="constrained")
    if t.size == 0:
        ax.text(0.5, 0.5, "no dx tiles (T or H is 0)", ha="center", va="center", transform=ax.transAxes)
        colour_title(ax, e, "dx max err/tol per tile")
        return fig
    inf = ~np.isfinite(t)
    low = np.isfinite(t) & (t < FLOOR)
    tcl = np.where(inf, np.nan, np.maximum(t, FLOOR))
    fin = tcl[np.isfinite(tcl)]
    vmin = min(fin.min() if fin.size else 0.1, 0.1)
    vmax = max(fin.max() if fin.size else 10.0, 10.0)
    # keep 1 in range with at least one decade either side, so the colour switch shows
    norm = mcolors.LogNorm(vmin=vmin, vmax=vmax)
    cmap = two_sided_cmap(norm)
    redges = np.minimum(np.arange(tr + 1) * tile, T)
    cedges = np.minimum(np.arange(tc + 1) * tile, H)
    m = ax.pcolormesh(cedges, redges, np.ma.masked_invalid(tcl), cmap=cmap, norm=norm,
                      edgecolors="white" if tr * tc <= 400 else "face", linewidth=0.5)
    ax.set_xlim(0, H)
    ax.set_ylim(T, 0)  # row 0 at the top, as in the [T, H] tensor
    cb = fig.colorbar(m, ax=ax, extend="neither", pad=0.02)
    cb.set_label("dx err/tol (max over the tile; log)")
    cb.ax.axhline(1.0, color="black", lw=2)
    # outline every tile over budget
    n_over = 0
    for a in range(tr):
        for c in range(tc):
            v = t[a, c]
            if not (v <= 1):  # > 1, inf or NaN
                n_over += 1
                ax.add_patch(Rectangle((cedges[c], redges[a]), cedges[c + 1] - cedges[c],
                                       redges[a + 1] - redges[a], fill=False, ec="black",
                                       lw=2.0 if tr * tc <= 400 else 0.8, zorder=4))
    # values in the cells when the grid is small enough to read them
    if tr * tc <= 64:
        fs = 9 if tr * tc <= 24 else 7
        for a in range(tr):
            for c in range(tc):
                v = t[a, c]
                txt = "inf" if not np.isfinite(v) else ("0" if v == 0 else f"{v:.2g}")
                val = tcl[a, c]
                dark = (not np.isfinite(val)) or abs(math.log10(val)) > 0.5 * max(
                    -math.log10(vmin), math.log10(vmax))
                ax.text((cedges[c] + cedges[c + 1]) / 2, (redges[a] + redges[a + 1]) / 2, txt,
                        ha="center", va="center", fontsize=fs, color="white" if dark else "black")
    # ticks at tile edges when few, else let matplotlib choose
    if tc <= 16:
        ax.set_xticks(cedges)
    if tr <= 16:
        ax.set_yticks(redges)
    for lab in ax.get_xticklabels():
        lab.set_rotation(45 if tc > 8 else 0)
    notes = [f"tiles over budget (err/tol > 1, outlined black): {n_over} of {tr * tc}"]
    if inf.any():
        notes.append(f"purple = inf ({int(inf.sum())})")
    if low.any():
        notes.append(f"< {FLOOR:g} or 0 drawn at {FLOOR:g}")
    ax.set_xlabel(f"column j  (tile = {tile} columns; {tc} tile cols)\n" + "; ".join(notes))
    if e["heads"] > 1:  # per-head forms: one row per (token, head), token-major
        ax.set_ylabel(f"row r = token*{e['heads']} + head  (tile = {tile} rows; {tr} tile rows)")
    else:
        ax.set_ylabel(f"row r  (tile = {tile} rows; {tr} tile rows)")
    mx = exact_max(t)
    a_, c_ = np.unravel_index(int(np.argmax(np.where(np.isfinite(t), t, np.inf))), t.shape)
    colour_title(ax, e, f"dx max err/tol per {tile}x{tile} tile: max {fmt(mx)} in the tile of "
                 f"rows {redges[a_]}..{redges[a_ + 1] - 1}, cols {cedges[c_]}..{cedges[c_ + 1] - 1}")
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


def plot_hist(e):
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
    styles = {"hist_y": ("y", "#1f77b4"), "hist_rstd": ("rstd", "#2ca02c"),
              "hist_dx": ("dx", "#ff7f0e"), "hist_dw": ("dw", "#d62728")}
    ymax = 1
    special = []
    for h in HIST_NAMES:
        name, col = styles[h]
        c = e["hist"][h]
        n = int(c.sum())
        # values per drawn slot: exact0, gap, underflow, log bins, overflow, gap, inf
        v = np.concatenate([[c[0], 0, c[1]], c[2:-2], [c[-2], 0, c[-1]]]).astype(float)
        ymax = max(ymax, int(c.max()) if c.size else 1)
        mr = e["max_ratio"][name]
        mtxt = f"max {fmt(mr)}" if mr is not None else hist_max_text(c, up)
        over = int(c[np.concatenate([[False], up[1:] > 1])].sum())  # bins entirely above 1
        ax.stairs(v, x, color=col, lw=1.5, baseline=None,
                  label=f"{name}: n={n}, {mtxt}, {over} over budget")
        for k, what in ((0, "exactly 0"), (1, f"in (0, {lo_e:g}]"), (nb - 2, f"in ({hi_e:g}, inf)"),
                        (nb - 1, "inf/NaN")):
            if c[k]:
                special.append(f"{name}: {int(c[k])} {what}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(z0 / step, i1 * step)
    ax.set_ylim(0.7, ymax * 4)
    # special slots: grey background and a label each
    for a_, b_, lab in ((z0, z1, "=0"), (u0, lo_e, f"<={lo_e:g}"), (hi_e, o1, f">{hi_e:g}"),
                        (i0, i1, "inf")):
        ax.axvspan(a_, b_, color="0.5", alpha=0.12, lw=0, zorder=0)
        ax.text(math.sqrt(a_ * b_), 0.985, lab, transform=ax.get_xaxis_transform(), ha="center",
                va="top", fontsize=7, color="0.3", rotation=90)
    ax.axvspan(1.0, hi_e, color="#d62728", alpha=0.06, lw=0, zorder=0)
    ax.axvline(1.0, color="black", lw=1.6, ls="--", zorder=5)
    ax.text(1.0, 0.985, "budget err/tol = 1 ", transform=ax.get_xaxis_transform(), ha="right",
            va="top", fontsize=8.5, fontweight="bold")
    ax.text(1.0, 0.93, "  over budget", transform=ax.get_xaxis_transform(), ha="left",
            va="top", fontsize=8, color="#b71c1c")
    ticks = [10.0 ** k for k in range(int(math.ceil(math.log10(lo_e))), int(math.floor(math.log10(hi_e))) + 1, 2)]
    ax.set_xticks(ticks)
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xlabel(f"err/tol  (log bins of 10^{d:.2g}; grey slots: exact 0, (0, {lo_e:g}], "
                  f"({hi_e:g}, inf), inf)")
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
    colour_title(ax, e, "err/tol histograms per output")
    return fig


# --------------------------------------------------------------------------- main


def main(argv):
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("file", metavar="FILE.h5")
    ap.add_argument("-o", "--outdir", required=True, metavar="OUTDIR")
    ap.add_argument("--dpi", type=int, default=120, metavar="N", help="PNG resolution (default 120)")
    a = ap.parse_args(argv)
    try:
        if not (20 <= a.dpi <= 1200):
            raise Bad(f"--dpi {a.dpi}: want 20..1200")
        _, entries = read_file(a.file)
        try:
            os.makedirs(a.outdir, exist_ok=True)
        except OSError as e:
            raise Bad(f"{a.outdir}: cannot create output directory ({e.strerror})")
        if not os.access(a.outdir, os.W_OK):
            raise Bad(f"{a.outdir}: output directory is not writable")
        for e in entries:
            base = f"{e['key']}_{slug(e['prov']['case_id'], e['prov']['impl'])}"
            for suffix, fn in (("dw", plot_dw), ("dx_tiles", plot_dx_tiles), ("hist", plot_hist)):
                fig = fn(e)
                try:
                    out = save(fig, a.outdir, f"{base}_{suffix}.png", a.dpi)
                except OSError as err:
                    raise Bad(f"{a.file}: cannot write {base}_{suffix}.png in {a.outdir} ({err})")
                print(f"wrote {out}")
    except Bad as err:
        die(str(err))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
