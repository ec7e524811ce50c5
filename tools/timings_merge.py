#!/usr/bin/env python3
"""Merge derive timings: the groups of NEW replace those groups in BASE.

    tools/timings_merge.py BASE NEW OUT

BASE and NEW are `normgate derive --bench-only` timings
(normgate-timings/1, PREFIX.timings.json). Every point of BASE whose group
(op, H, w, form) has a point in NEW is dropped, NEW's points are added,
and OUT gets the result (written to a temp file, then renamed; an
existing OUT keeps its permission bits), with
"merged_from" recording both inputs' dates and commits. Use it when a
variant joins a few groups' candidates: time only those groups (a spec with
just them) and merge, instead of timing every group again. Exit 2 on a
usage or input error (naming the file), 0 otherwise.
"""
import json
import math
import os
import sys
import tempfile

FORMAT = "normgate-timings/1"
KEYS = ("op", "H", "w", "form", "T", "aa_variant", "aa_floor", "median_us", "rounds_us")
# Written by the bench since the A/A repeat is recorded round by round
# (docs/perf/routes.md D9); older points lack it.
OPTIONAL = ("aa_rounds_us",)


def die(msg):
    print(f"timings_merge: {msg}", file=sys.stderr)
    sys.exit(2)


def time(v):
    """A timed median: a finite number > 0 (not a bool)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


# The committed timings are a few MB; anything far larger is not one.
MAX_BYTES = 64 << 20


def shown(v, n=80):
    """repr(v) cut to n characters, for messages."""
    r = repr(v)
    return r if len(r) <= n else r[: n - 3] + "..."


def load(path):
    try:
        size = os.stat(path).st_size
        if size > MAX_BYTES:
            die(f"{path}: {size} bytes, more than a timings file has (at most {MAX_BYTES})")
        def no_twice(pairs):  # a key given twice: json keeps the last silently
            keys = [k for k, _ in pairs]
            twice = sorted({k for k in keys if keys.count(k) > 1})
            if twice:
                die(f"{path}: key {twice[0]!r} given twice in one object")
            return dict(pairs)

        with open(path, encoding="utf-8") as f:
            t = json.load(f, parse_constant=lambda c: die(f"{path}: {c} is not a number"), object_pairs_hook=no_twice)
        return check(path, t)
    except (OSError, UnicodeDecodeError, RecursionError, json.JSONDecodeError, ValueError, OverflowError,
            MemoryError) as e:
        die(f"{path}: {e}")


def check(path, t):
    if not isinstance(t, dict) or t.get("format") != FORMAT or not isinstance(t.get("points"), list):
        die(f"{path}: not a {FORMAT} file")
    for k in ("date", "normgate_commit", "gpu", "driver", "cuda"):
        if not isinstance(t.get(k), str):
            die(f"{path}: {k} must be a string, got {t.get(k)!r}")
    if not isinstance(t.get("merged_from", []), list) or not all(isinstance(m, dict) for m in t.get("merged_from", [])):
        die(f"{path}: merged_from must be a list of objects (each an input's date and commit)")
    for k in ("rounds", "reps"):
        if k in t and (not isinstance(t[k], int) or isinstance(t[k], bool) or t[k] < 1):
            die(f"{path}: {k} must be a whole number >= 1, got {t[k]!r}")
    seen = set()
    for i, p in enumerate(t["points"]):
        where = f"{path}: points[{i}]"
        # Exactly the keys derive writes and reads (routing/src/derive.cpp):
        # an extra key (a "mode", say) would be silently ignored by derive.
        if not isinstance(p, dict) or not set(KEYS) <= set(p) or not set(p) <= set(KEYS + OPTIONAL):
            die(f"{where}: not a timed point (exactly the keys {', '.join(KEYS)}, "
                f"and {', '.join(OPTIONAL)} where the A/A repeat was recorded per round)")
        if p["op"] not in ("fwd", "bwd") or p["w"] not in ("bf16", "fp32") or \
                p["form"] not in ("plain", "res", "heads24", "heads4"):
            die(f"{where}: op/w/form {p['op']!r}/{p['w']!r}/{p['form']!r} not fwd|bwd / bf16|fp32 / "
                f"plain|res|heads24|heads4")
        for k in ("H", "T"):
            if not (isinstance(p[k], int) and not isinstance(p[k], bool) and p[k] >= 1):
                die(f"{where}: {k} must be a whole number >= 1, got {p[k]!r}")
        if not (isinstance(p["aa_floor"], (int, float)) and not isinstance(p["aa_floor"], bool)
                and math.isfinite(p["aa_floor"]) and p["aa_floor"] >= 0):
            die(f"{where}: aa_floor must be a number >= 0, got {p['aa_floor']!r}")
        key = (p["op"], p["H"], p["w"], p["form"], p["T"])
        if key in seen:
            die(f"{where}: a second point of {key}")
        seen.add(key)
        med, rounds = p["median_us"], p["rounds_us"]
        if not isinstance(med, dict) or not med or not all(time(v) for v in med.values()):
            die(f"{where}: median_us must map each candidate to a time > 0")
        if not isinstance(rounds, dict) or set(rounds) != set(med) or not all(
                isinstance(r, list) and r and all(time(v) for v in r) for r in rounds.values()):
            die(f"{where}: rounds_us must map the candidates of median_us to lists of times > 0")
        if isinstance(t.get("rounds"), int) and any(len(r) != t["rounds"] for r in rounds.values()):
            die(f"{where}: rounds_us has {sorted({len(r) for r in rounds.values()})} rounds, the file says "
                f"rounds = {t['rounds']}")
        if not isinstance(p["aa_variant"], str) or not p["aa_variant"]:
            die(f"{where}: aa_variant must be a variant name, got {p['aa_variant']!r}")
        if "aa_rounds_us" in p:
            aa = p["aa_rounds_us"]
            if not isinstance(aa, list) or not all(time(v) for v in aa):
                die(f"{where}: aa_rounds_us must be a list of times > 0, got {shown(aa)}")
            if p["aa_variant"] not in rounds:
                die(f"{where}: aa_rounds_us given, but aa_variant {p['aa_variant']!r} has no rounds_us")
            for v, r in rounds.items():
                if len(r) != len(aa):
                    die(f"{where}: aa_rounds_us needs one value per round: {len(aa)} values, "
                        f"but {v} has {len(r)} rounds")
    return t


def group(p):
    return (p["op"], p["H"], p["w"], p["form"])


def main(argv):
    if len(argv) == 2 and argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0)
    if len(argv) != 4:
        print(__doc__.strip(), file=sys.stderr)
        die(f"needs BASE NEW OUT, got {len(argv) - 1} argument(s)")
    base, new, out = argv[1], argv[2], argv[3]
    real_out = os.path.realpath(out)
    if real_out in (os.path.realpath(base), os.path.realpath(new)):
        die(f"OUT {out} is one of the inputs")
    if not out or out.endswith(os.sep) or os.path.isdir(real_out):
        die(f"OUT '{out}' is a folder or empty")
    if out == "-":
        die("OUT '-': give a file (the merged timings do not go to stdout)")
    if os.path.exists(real_out) and not os.path.isfile(real_out):
        die(f"OUT '{out}' exists and is not a regular file (a device, FIFO or socket: the rename would replace it)")
    b, n = load(base), load(new)
    if (b.get("rounds"), b.get("reps")) != (n.get("rounds"), n.get("reps")):
        die(f"{new}: rounds/reps {n.get('rounds')}/{n.get('reps')} differ from {base}'s "
            f"{b.get('rounds')}/{b.get('reps')}")
    for k in ("gpu", "driver", "cuda"):
        if b.get(k) != n.get(k):
            die(f"{new}: {k} {n.get(k)!r} differs from {base}'s {b.get(k)!r} (timings of one machine only)")
    replaced = {group(p) for p in n["points"]}
    if not replaced:
        die(f"{new}: no points")
    # The T grid every group of BASE was timed at (the spec's grid; each
    # group's bisection points come on top): derive needs each at every
    # group, so a replaced group must have them all.
    groups_t = {}
    for p in b["points"]:
        groups_t.setdefault(group(p), set()).add(p["T"])
    grid = set.intersection(*groups_t.values()) if groups_t else set()
    # Each replaced group: NEW spans BASE's T range (its bisection points may
    # differ: crossovers move), with one set of candidates at every point.
    for g in replaced:
        old_t = {p["T"] for p in b["points"] if group(p) == g}
        new_t = {p["T"] for p in n["points"] if group(p) == g}
        ends = {min(old_t), max(old_t)} if old_t else set()
        if not ends <= new_t:
            die(f"{new}: group {g} lacks T = {sorted(ends - new_t)}, the ends of the T range {base} timed")
        if not grid <= new_t:
            die(f"{new}: group {g} lacks T = {sorted(grid - new_t)} of the T grid every group of {base} has")
        cands = {frozenset(p["median_us"]) for p in n["points"] if group(p) == g}
        if len(cands) != 1:
            die(f"{new}: group {g} times different candidates at different T")
        # One run times a group one way: with the per-round A/A repeats at
        # every point or at none (a mix is two runs spliced together).
        if len({"aa_rounds_us" in p for p in n["points"] if group(p) == g}) != 1:
            die(f"{new}: group {g} has points with aa_rounds_us and points without")
    kept = [p for p in b["points"] if group(p) not in replaced]
    merged = dict(b)
    merged["points"] = kept + n["points"]
    earlier = b.get("merged_from", []) + n.get("merged_from", [])
    merged["merged_from"] = earlier + [
        {"file": os.path.basename(base), "date": b.get("date"), "normgate_commit": b.get("normgate_commit"),
         "points": len(kept)},
        {"file": os.path.basename(new), "date": n.get("date"), "normgate_commit": n.get("normgate_commit"),
         "points": len(n["points"])},
    ]
    merged["date"] = max(b["date"], n["date"])
    merged["normgate_commit"] = n.get("normgate_commit")
    d = os.path.dirname(real_out)
    tmp = None
    try:
        # OUT keeps the mode of the file it replaces (as normgate's writers,
        # core::create_replacement), else 0644 less the umask.
        try:
            mode = os.stat(real_out).st_mode & 0o777
        except FileNotFoundError:
            mask = os.umask(0)
            os.umask(mask)
            mode = 0o644 & ~mask
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".timings_merge.")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(merged, f, indent=1, allow_nan=False)
            f.write("\n")
        os.chmod(tmp, mode)
        os.replace(tmp, real_out)
        tmp = None
    except (OSError, ValueError) as e:
        die(f"{out}: {e}")
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
    print(f"timings_merge: {len(kept)} points of {base} kept, {len(n['points'])} of {new} added "
          f"({len(replaced)} groups replaced) -> {out}")


if __name__ == "__main__":
    main(sys.argv)
