"""The peer matrix's vocabulary, shared by every module: the peers, ops,
forms and input families; a row's case id, key (form, H, w, T), warm-up
spec, element count and the bytes an op must move; the run's rows in order;
and the two helpers of every entry point (usage errors, atomic writes)."""
from __future__ import annotations

import os
import sys

ALL_PEERS = ["eager", "TC", "TCd", "F.rms_norm", "Liger", "Q"]
OPS = ["fwd", "bwd", "2xfwd+bwd"]
FORMS = ["plain", "res", "heads24", "heads4"]
# The input families of a case id (seeds/include/normgate/seeds/case_id.h's
# enum Family, in its order; a CPU test keeps the two lists equal).
FAMILIES = ["normal", "llm", "cancel", "zeros", "tiny", "huge", "specials", "epsnear"]
# Method settings two results must share to sit in one table (--merge) or to
# stand for each other's rows (--done).
SAME_METHOD = ("replays", "rounds", "seeds", "family")


def case_id(form, H, T, wname, family, seed):
    return f"H={H},T={T},w={wname},form={form},family={family},seed={seed}"


def row_key(row):
    """A result row's identity in a matrix, as plan_rows spells it: (form, H,
    w, T) (what --merge and --done compare)."""
    return (row.get("form", "plain"), int(row["H"]), row["w"], int(row["T"]))


def plan_rows(args):
    """The rows of this run, in run order: (form, H, w, T) for each form, H
    (256 for the per-head forms), weight dtype and T (row_key's spelling)."""
    return [(form, H, wname, T) for form in args.forms for H in (args.H if form in ("plain", "res") else [256])
            for wname in args.w for T in args.T]


def row_elements(form, H, T):
    """Normalized elements of a matrix row: T * heads * H (heads: 24 or 4
    for the per-head forms, 1 otherwise)."""
    return T * H * {"heads24": 24, "heads4": 4}.get(form, 1)


def row_spec(form, H, T, wname):
    """The --warm-compile argument of a row."""
    return f"{form},{H},{T},{wname}"


def parse_spec(spec):
    """row_spec's inverse: (form, H, T, wname), H and T ints; ValueError
    when spec is not FORM,H,T,W."""
    form, H, T, wname = spec.split(",")
    return form, int(H), int(T), wname


def bytes_moved(op, rows, H, wbytes, form="plain"):
    """The fewest bytes an op must move (each input read once, each output
    written once): rows = T * heads normalized rows of H."""
    e = rows * H * 2
    if form == "res":
        fwd = 4 * e + H * wbytes + rows * 4          # h, u in; h_new, y out; w; rstd
        bwd = 4 * e + H * wbytes + rows * 4 + H * 4  # dy, h_new, dh_new in; dh out; w; rstd; dw
    else:
        fwd = 2 * e + H * wbytes + rows * 4          # x in, y out, w, rstd
        bwd = 3 * e + H * wbytes + rows * 4 + H * 4  # dy, x in, dx out, w, rstd, dw
    return {"fwd": fwd, "bwd": bwd, "2xfwd+bwd": 2 * fwd + bwd}[op]


def workload(row):
    """The seed's workload label: [T, H] for plain/res, [T, nh, 256] per head."""
    h = row.get("heads", 1)
    shape = f"[{row['T']}, {row['H']}]" if h == 1 else f"[{row['T']}, {h}, {row['H']}]"
    return f"{shape} w {row['w']}, {row.get('form', 'plain')}"


def die_usage(msg):
    print(f"peers.py: {msg}", file=sys.stderr)
    sys.exit(2)


def atomic_write(path, text):
    """Write `text` to `path` through a temp file and a rename, so that a
    crash leaves the old file or the new one. A path that exists and is not
    a regular file (/dev/null, a FIFO, /dev/stdout) is written in place: a
    rename would replace the device with a file (it did: /dev/null became a
    regular file under root)."""
    if not path:
        return
    if os.path.exists(path) and not os.path.isfile(path):
        with open(path, "w") as f:
            f.write(text)
        return
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
