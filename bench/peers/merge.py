"""Results joined: --merge, and --done (the rows earlier results measured).

  python3 bench/peers.py --merge A.json B.json ... --json all.json --md all.md
merges runs (shards of one matrix on several GPUs, or slices run in several
sessions; no GPU or torch needed): rows in the order given, each keeping the
copy ceiling of its own run for its "of copy" column; the title gives the
runs' date range, the header every run's GPU, driver and versions, and "Runs"
at the end each run's file, date and command; stdout gets the table, or with --md
one line naming the files written. Exit 2 when a file is not a peers.py
result or two runs hold the same row.

The order: files as given; a quoted glob pattern (as --done takes) gives its
matches in natural order, numbers as numbers (run-2 before run-10), so a
matrix's run-N.json files merge in the order they ran (an unquoted pattern
is expanded by the shell, in its own order). The order sets the order of the
rows and of "Runs", and of the values each header field joins; no row is
chosen by it (a row in two runs is refused), and where runs name the same peer
in meta.peer_errors the later run's message is kept."""
from __future__ import annotations

import json
import os
import sys

from .matrix import SAME_METHOD, atomic_write, die_usage, row_key, workload
from .report import markdown

def merge(argv):
    """--merge J1 J2 ... [--json OUT] [--md OUT]: see the module docstring."""
    files, out_json, out_md, i = [], "", "", 0
    while i < len(argv):
        if argv[i] in ("--json", "--md"):
            if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
                die_usage(f"--merge: {argv[i]} needs a file name"
                          + (f" (got {argv[i + 1]!r})" if i + 1 < len(argv) else ""))
            if argv[i] == "--json":
                out_json = argv[i + 1]
            else:
                out_md = argv[i + 1]
            i += 2
        elif argv[i] in ("-h", "--help"):
            print("usage: peers.py --merge RESULT.json [RESULT.json ...] [--json OUT] [--md OUT]\n"
                  "Merges peers.py results (shards of one matrix, or runs of several sessions) into one table:\n"
                  "rows in the order given, each with its own run's copy ceiling; a row in two runs is an error.\n"
                  "A quoted glob pattern gives its files in natural order (run-2 before run-10).\n"
                  "Prints the Markdown table, or with --md one line saying what went where.")
            sys.exit(0)
        elif argv[i].startswith("--"):
            die_usage(f"--merge: unknown option {argv[i]!r} (files, --json OUT, --md OUT)")
        else:  # a quoted glob pattern works as with --done; it must match something
            hits = expand_pattern(argv[i])
            if not hits:
                die_usage(f"--merge: {argv[i]!r} matches no file")
            files += hits
            i += 1
    if not files:
        die_usage("--merge needs at least one result JSON")
    check_outputs(files, out_json, out_md)
    runs = []
    for f in files:
        runs.append((f, load_result(f, "--merge")))
    rows, seen = [], {}
    for f, r in runs:
        for row in r["rows"]:
            key = row_key(row)
            if key in seen:
                die_usage(f"--merge: row {workload(row)} is in both {seen[key]} and {f}")
            seen[key] = f
            row = dict(row)
            row.setdefault("copy_GBps", r["copy"].get("GBps"))
            rows.append(row)
    m0 = runs[0][1]["meta"]
    # Timings compare only on one kind of card (docs/perf/peers.md, D11): a
    # merge of runs on different GPUs would put rows of both in one table.
    for f, r in runs[1:]:
        if str(r["meta"].get("gpu")) != str(m0.get("gpu")):
            die_usage(f"--merge: {f} ran on {r['meta'].get('gpu')!r}, {runs[0][0]} on {m0.get('gpu')!r}: "
                      "merge each GPU's runs on their own")
    meta = dict(m0)
    for k in ("gpu", "driver", "cuda", "torch", "triton", "normgate", "date", "command"):
        vals = []
        for _, r in runs:
            v = str(r["meta"].get(k))
            if k == "driver":
                v = v.splitlines()[0] if v.strip() else v  # older results: one line per GPU
            if v not in vals:
                vals.append(v)
        meta[k] = " / ".join(vals) if k != "command" else "; ".join(vals)
    for k in SAME_METHOD:
        if any(r["meta"].get(k) != m0.get(k) for _, r in runs):
            die_usage(f"--merge: runs differ in {k} ({', '.join(str(r['meta'].get(k)) for _, r in runs)})")
    meta["peer_errors"] = {}
    for _, r in runs:
        meta["peer_errors"].update(r["meta"].get("peer_errors") or {})
    # A row one run skipped (deadline) or failed may be measured by another:
    # the merged table lists as missing only rows no run measured, each once.
    for k in ("skipped", "failed_rows"):
        meta[k], listed = [], set()
        for _, r in runs:
            for x in r["meta"].get(k, []):  # [T, H, w, form(, error)]
                key = row_key({"T": x[0], "H": x[1], "w": x[2], "form": x[3]})
                if key not in seen and key not in listed:
                    listed.add(key)
                    meta[k].append(x)
    meta["stopped"] = "; ".join(r["meta"]["stopped"] for _, r in runs if r["meta"].get("stopped"))
    meta["merged_from"] = files
    # markdown: the dates as a range in the title, each run's command under "Runs" at the end
    meta["runs"] = [{"file": os.path.basename(f), "date": r["meta"].get("date"), "command": r["meta"].get("command")}
                    for f, r in runs]
    # The header's copy ceiling: the lowest of the runs' (each row's column uses its own).
    copies = [r["copy"] for _, r in runs if r["copy"].get("GBps")]
    copy = dict(min(copies, key=lambda c: c["GBps"])) if copies else dict(runs[0][1]["copy"])
    copy["by"] = f"{copy.get('by')}, lowest of {len(runs)} runs; each row's 'of copy' uses its own run's"
    result = {"meta": meta, "copy": copy, "rows": rows}
    # Both outputs made before either is written: a result markdown() cannot
    # render leaves no JSON behind without its table.
    try:
        md = markdown(meta, rows, copy)
        text = json.dumps(result, indent=1, allow_nan=False)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        die_usage(f"--merge: a result of {', '.join(files)} is malformed ({type(e).__name__}: {e}); nothing written")
    atomic_write(out_json, text)
    atomic_write(out_md, md)
    if out_md:  # the table is in the file: say what was merged, not the whole table again
        print(f"merged {len(rows)} rows from {len(files)} runs into {out_md}" + (f" and {out_json}" if out_json else ""))
    else:
        print(md)
    return 0


def load_result(path, what):
    """A peers.py result JSON, or a usage error (exit 2) naming the file: not
    JSON (NaN and Infinity included, which JSON does not have), or not the
    shape a result has (result_problem)."""
    def no_constant(name):
        raise ValueError(f"{name} is not JSON")

    try:
        if os.path.isdir(path):
            raise ValueError("is a directory")
        if os.path.exists(path) and not os.path.isfile(path):
            raise ValueError("not a regular file (a FIFO or device would block or never end)")
        with open(path) as fh:
            r = json.load(fh, parse_constant=no_constant)
        problem = result_problem(r)
        if problem:
            raise ValueError(f"not a peers.py result: {problem}")
    except json.JSONDecodeError as e:
        die_usage(f"{what}: {path}: not valid JSON ({e})")
    except (OSError, ValueError) as e:
        die_usage(f"{what}: {path}: {e}")
    return r


def result_problem(r):
    """What keeps `r` from being a peers.py result, or "" when nothing does:
    an object with meta and copy objects and a list of rows, each an object
    with T and H (integers), w and form (strings) and impls and ops objects
    where present; meta's skipped and failed_rows lists of [T, H, w, form,
    ...] lists where present."""
    if not isinstance(r, dict) or not {"meta", "copy", "rows"} <= r.keys():
        return "no meta/copy/rows"
    if not isinstance(r["meta"], dict) or not isinstance(r["copy"], dict):
        return "meta or copy is not an object"
    if not isinstance(r["rows"], list):
        return "rows is not a list"
    for i, row in enumerate(r["rows"]):
        if not isinstance(row, dict):
            return f"rows[{i}] is not an object"
        for k, typ in (("T", int), ("H", int), ("w", str)):
            if not isinstance(row.get(k), typ) or isinstance(row.get(k), bool):
                return f"rows[{i}].{k} is missing or not {'an integer' if typ is int else 'a string'}"
        if not isinstance(row.get("form", "plain"), str):
            return f"rows[{i}].form is not a string"
        for k in ("impls", "ops"):
            if k in row and not isinstance(row[k], dict):
                return f"rows[{i}].{k} is not an object"
    for k in ("skipped", "failed_rows"):
        xs = r["meta"].get(k, [])
        if not isinstance(xs, list) or not all(
                isinstance(x, list) and len(x) >= 4 and all(isinstance(v, int) and not isinstance(v, bool)
                                                            for v in x[:2])
                and isinstance(x[2], str) and isinstance(x[3], str) for x in xs):
            return f"meta.{k} is not a list of [T, H, w, form, ...] lists"
    m = r["meta"]
    if not isinstance(m.get("stopped", ""), (str, type(None))):
        return "meta.stopped is not a string"
    if not isinstance(m.get("peer_errors", {}), (dict, type(None))):
        return "meta.peer_errors is not an object"
    g = r["copy"].get("GBps")
    if g is not None and (not isinstance(g, (int, float)) or isinstance(g, bool)):
        return "copy.GBps is not a number"
    return ""


def check_outputs(inputs, out_json, out_md):
    """Before anything is read or written: --json and --md name different
    files, neither one of the inputs nor a directory, each in a folder that
    exists (a usage error, exit 2, naming the path)."""
    def same(a, b):
        try:
            return os.path.samefile(a, b)
        except OSError:
            return os.path.abspath(a) == os.path.abspath(b)

    outs = [(o, p) for o, p in (("--json", out_json), ("--md", out_md)) if p]
    for opt, p in outs:
        if os.path.isdir(p):
            die_usage(f"--merge: {opt} {p!r} is a directory")
        folder = os.path.dirname(os.path.abspath(p))
        if not os.path.isdir(folder):
            die_usage(f"--merge: {opt} {p!r}: no folder {folder!r}")
        if not os.access(folder, os.W_OK | os.X_OK):
            die_usage(f"--merge: {opt} {p!r}: the folder {folder!r} cannot be written")
        for f in inputs:
            if os.path.exists(p) and same(p, f):
                die_usage(f"--merge: {opt} {p!r} is the input {f!r}: write the merge elsewhere")
    if len(outs) == 2 and same(out_json, out_md):
        die_usage(f"--merge: --json and --md name one file ({out_json!r})")


def done_rows(spec, args=None, gpu=None):
    """{row key: file} of the rows in the --done results. A pattern with glob
    characters may match nothing (the first call of a matrix); a plain path
    must exist. With args, a result counts only if it measured what this run
    would: the same seeds, family, replays and rounds (else --merge refuses
    to join them), and every peer of --peers available (its meta.peer_errors
    names none of them, and every row has each of them: rows measured without
    a peer, because it could not run or was not asked for, are measured again
    once the peer runs; leave a peer that cannot run out of --peers). With
    gpu (the device name of the run), only results measured on that GPU
    count (--merge refuses a merge across GPUs; docs/perf/peers.md, D11)."""
    done = {}
    for pat, files in done_files(spec):
        print(f"--done: {pat}: {len(files)} files", file=sys.stderr)
        for f in files:
            r = load_result(f, "--done")
            if args is not None:
                m = r["meta"]
                differ = [k for k in SAME_METHOD if m.get(k) != getattr(args, k)]
                missing = sorted(set(m.get("peer_errors") or {}) & set(args.peers))
                other_gpu = gpu is not None and str(m.get("gpu")) != gpu
                if differ or missing or other_gpu:
                    print(f"--done: {f}: not counted ("
                          + ", ".join([f"{k} {m.get(k)} vs {getattr(args, k)}" for k in differ]
                                      + [f"peer {p} could not run there" for p in missing]
                                      + ([f"measured on {m.get('gpu')!r}, this run on {gpu!r}"] if other_gpu else []))
                          + ")", file=sys.stderr)
                    continue
            unmeasured = set()
            for row in r["rows"]:
                # A run that was not asked for a peer of --peers has no
                # error for it either: its rows lack that peer's numbers.
                lack = sorted(set(args.peers) - set(row.get("impls", {}))) if args is not None else []
                if lack:
                    unmeasured.update(lack)
                    continue
                done.setdefault(row_key(row), f)
            if unmeasured:
                print(f"--done: {f}: rows without peer {', '.join(sorted(unmeasured))} (not asked for there) not counted",
                      file=sys.stderr)
    return done


def expand_pattern(pat):
    """The files of a --done or --merge argument: a pattern with glob
    characters gives what it matches (maybe nothing) in natural order,
    digit runs compared as numbers (run-2 before run-10: the order a
    matrix's run-N.json files ran in), a plain path itself."""
    import glob
    import re

    def natural(p):  # re.split with a group: text at even indices, digits at odd ones
        return [int(t) if i % 2 else t for i, t in enumerate(re.split(r"(\d+)", p))], p
    return sorted(glob.glob(pat), key=natural) if glob.has_magic(pat) else [pat]


def done_files(spec):
    """[(pattern, its files)] of a --done value (comma-separated patterns)."""
    return [(pat, expand_pattern(pat)) for pat in [t.strip() for t in spec.split(",") if t.strip()]]
