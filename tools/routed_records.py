#!/usr/bin/env python3
"""The approvals a route table reads, for a carry across a kernel change.

Before a change of shared kernel sources, `normgate digest` runs the campaign
of every record it is given, twice (OLD and NEW builds), and `normgate
approvals --carry` moves the records whose outputs agree bit for bit
(docs/perf/routes.md D19 and D21). Digesting only what a route reads, and
leaving out the records whose bits the change is known to move, saves device
time (at fb468e9 for the chunk cap at H = 1537-2048: 235 of 331 records,
about two thirds of the recorded cases). This tool writes that subset. Run
it on the tree the records were approved on (OLD's, or --repo pointing at
it): after the kernels are edited every record reads as stale.

  a record is KEPT when
    - its variant's source hash is the working tree's (kernels/CMakeLists.txt,
      computed as CMake does; a stale record cannot be carried anyway),
    - a route of --table has the record's variant and the record's op, H, w
      and form, and T ranges that overlap; for the backward the modes match,
      or the route is nondet and the record det (a det record of a
      deterministic variant answers for its nondet window: routes.md D21),
    - and it is not excluded: --skip-variant V drops every record of V (e.g.
      bwd_nondet_atomic, whose FP64 atomics may round differently run to
      run), and --moved "op=bwd,H=A..B,T>N" drops the records of that op and
      H range whose window reaches past T = N (where the change moves bits;
      they are gated again instead).

Records are copied as parsed (every value equal, written again with sorted
keys: their seals still hold, and a carry matches them by record_sha256). The output is an approvals file of the
input's format, written whole (temporary file, then rename).

Usage: tools/routed_records.py --table TOML --approvals FILE --out FILE
                               [--op fwd|bwd] [--skip-variant V ...]
                               [--moved SPEC ...] [--repo DIR]
  --op           keep only records of this op (e.g. one file per digest run)
Prints one line per kept op and variant, and the dropped counts by reason
(each record under the first reason that applies, in the order above:
--op, --skip-variant, stale, --moved, read by no route).
Exit status: 0 written, 2 usage or input error (naming the file or value;
nothing written).
"""
import argparse
import json
import os
import re
import sys
import tempfile
import tomllib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rekey_approvals as rk  # noqa: E402


class Bad(Exception):
    """Exit 2."""


def parse_moved(spec):
    """"op=bwd,H=1537..2048,T>8448" -> (op, h_lo, h_hi, t_after)."""
    m = re.fullmatch(r"op=(fwd|bwd),H=(\d+)\.\.(\d+),T>(\d+)", spec)
    if not m:
        raise Bad(f"--moved {spec!r}: expected op=fwd|bwd,H=A..B,T>N (e.g. op=bwd,H=1537..2048,T>8448)")
    op, lo, hi, t = m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4))
    if lo > hi:
        raise Bad(f"--moved {spec!r}: H range {lo}..{hi} is empty")
    return op, lo, hi, t


def current_hashes(repo):
    """{variant: source hash} of the working tree, as kernels/CMakeLists.txt computes them."""
    cm = rk.read_at(repo, None, os.path.join(rk.KERNELS, "CMakeLists.txt"))
    if cm is None:
        raise Bad(f"--repo {repo}: no kernels/CMakeLists.txt")
    lists = rk.variant_files(cm.decode(), "kernels/CMakeLists.txt")
    contents = {}
    for fs in lists.values():
        for f in fs:
            if f not in contents:
                b = rk.read_at(repo, None, rk.repo_path(f))
                if b is None:
                    raise Bad(f"--repo {repo}: {rk.repo_path(f)} is missing")
                contents[f] = b
    return {v: rk.manifest_hash(fs, contents) for v, fs in lists.items()}


def read_routes(path):
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except OSError as e:
        raise Bad(f"--table {path}: {e.strerror}")
    except tomllib.TOMLDecodeError as e:
        raise Bad(f"--table {path}: not TOML ({e})")
    routes = doc.get("route")
    if not isinstance(routes, list) or not all(isinstance(r, dict) for r in routes):
        raise Bad(f"--table {path}: no [[route]] list (routing.h)")
    for r in routes:
        t = r.get("T")
        if not (isinstance(t, list) and len(t) == 2 and all(isinstance(x, int) for x in t)) or "variant" not in r:
            raise Bad(f"--table {path}: a route without T = [lo, hi] or variant: {r}")
    return routes


def reads(route, rec):
    """Whether `route` reads record `rec` (see the module docstring)."""
    w = rec["window"]
    if route["variant"] != rec["variant"]:
        return False
    for k in ("op", "H", "w", "form"):
        if route.get(k) != w.get(k):
            return False
    if w.get("op") == "bwd" and route.get("mode") != w.get("mode"):
        if not (route.get("mode") == "nondet" and w.get("mode") == "det"):
            return False
    return route["T"][0] <= w["T"][1] and w["T"][0] <= route["T"][1]


def select(records, routes, hashes, op=None, skip=(), moved=()):
    """(kept records, {reason: count} of the dropped)."""
    kept, dropped = [], {}

    def drop(why):
        dropped[why] = dropped.get(why, 0) + 1

    for r in records:
        w = r.get("window") or {}
        if op and w.get("op") != op:
            drop("another op")
        elif r.get("variant") in skip:
            drop(f"--skip-variant {r.get('variant')}")
        elif hashes.get(r.get("variant")) != r.get("source_sha256"):
            drop("stale (another source hash)")
        elif any(w.get("op") == o and lo <= w.get("H", 0) <= hi and w["T"][1] > t for o, lo, hi, t in moved):
            drop("--moved")
        elif not any(reads(q, r) for q in routes):
            drop("read by no route")
        else:
            kept.append(r)
    return kept, dropped


def main(argv):
    ap = argparse.ArgumentParser(prog="tools/routed_records.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--table", required=True, help="the route table (TOML) whose routes read the records")
    ap.add_argument("--approvals", required=True, help="the approvals file to take records from")
    ap.add_argument("--out", required=True, help="the approvals file to write (its folder must exist)")
    ap.add_argument("--op", choices=("fwd", "bwd"), help="keep only records of this op")
    ap.add_argument("--skip-variant", action="append", default=[], metavar="V",
                    help="drop every record of V (repeatable)")
    ap.add_argument("--moved", action="append", default=[], metavar="SPEC",
                    help='drop records a change moves: "op=bwd,H=A..B,T>N" (repeatable)')
    ap.add_argument("--repo", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."),
                    help="the repository whose kernels/CMakeLists.txt gives the current hashes (default: this one)")
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return 2 if e.code not in (0, None) else 0
    try:
        moved = [parse_moved(s) for s in args.moved]
        routes = read_routes(args.table)
        try:
            with open(args.approvals, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise Bad(f"--approvals {args.approvals}: {getattr(e, 'strerror', None) or e}")
        try:
            doc = rk.parse_records(args.approvals, text, "approvals")
        except rk.Unusable as e:
            raise Bad(str(e))
        for r in doc["approvals"]:
            w = r.get("window")
            if not (isinstance(w, dict) and isinstance(w.get("T"), list) and len(w["T"]) == 2):
                raise Bad(f"--approvals {args.approvals}: a record without window.T: {rk.describe(r)}")
        hashes = current_hashes(args.repo)
        unknown = [v for v in args.skip_variant if v not in hashes]
        if unknown:
            raise Bad(f"--skip-variant {unknown[0]!r}: no such variant in kernels/CMakeLists.txt")
        out_dir = os.path.dirname(os.path.abspath(args.out))
        if not os.path.isdir(out_dir):
            raise Bad(f"--out {args.out}: no folder {out_dir}")
    except Bad as e:
        print(f"routed_records: {e}", file=sys.stderr)
        return 2
    kept, dropped = select(doc["approvals"], routes, hashes, args.op, set(args.skip_variant), moved)
    out = {k: v for k, v in doc.items() if k != "approvals"}
    out["approvals"] = kept
    fd, tmp = tempfile.mkstemp(prefix=".routed-", dir=out_dir)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(out, indent=1, sort_keys=True) + "\n")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as open() would make it, not mkstemp's 0600
        os.replace(tmp, args.out)
    except OSError as e:
        os.unlink(tmp) if os.path.exists(tmp) else None
        print(f"routed_records: --out {args.out}: {e.strerror}; nothing written", file=sys.stderr)
        return 2
    by = {}
    for r in kept:
        key = (r["window"]["op"], r["variant"])
        by[key] = by.get(key, [0, 0])
        by[key][0] += 1
        by[key][1] += int(r.get("cases", 0))
    for (o, v), (n, c) in sorted(by.items()):
        print(f"kept     {o} {v}: {n} records, {c} cases on record")
    for why, n in sorted(dropped.items()):
        print(f"dropped  {n}: {why}")
    print(f"wrote    {args.out}: {len(kept)} of {len(doc['approvals'])} records")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
