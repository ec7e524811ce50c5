#!/usr/bin/env python3
"""Merge derive timings: the groups of NEW replace those groups in BASE.

    tools/timings_merge.py BASE NEW OUT

BASE and NEW are `normgate derive --bench-only` timings
(normgate-timings/1, PREFIX.timings.json). Every point of BASE whose group
(op, mode, H, w, form) has a point in NEW is dropped, NEW's points are added,
and OUT gets the result (written to a temp file, then renamed), with
"merged_from" recording both inputs' dates and commits. Use it when a
variant joins a few groups' candidates: time only those groups (a spec with
just them) and merge, instead of timing every group again. Exit 2 on a
usage or input error (naming the file), 0 otherwise.
"""
import json
import os
import sys
import tempfile

FORMAT = "normgate-timings/1"


def die(msg):
    print(f"timings_merge: {msg}", file=sys.stderr)
    sys.exit(2)


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            t = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        die(f"{path}: {e}")
    if not isinstance(t, dict) or t.get("format") != FORMAT or not isinstance(t.get("points"), list):
        die(f"{path}: not a {FORMAT} file")
    return t


def group(p):
    return (p.get("op"), p.get("mode"), p.get("H"), p.get("w"), p.get("form"))


def main(argv):
    if len(argv) == 2 and argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0)
    if len(argv) != 4:
        print(__doc__.strip(), file=sys.stderr)
        die(f"needs BASE NEW OUT, got {len(argv) - 1} argument(s)")
    base, new, out = argv[1], argv[2], argv[3]
    if os.path.abspath(out) in (os.path.abspath(base), os.path.abspath(new)):
        die(f"OUT {out} is one of the inputs")
    b, n = load(base), load(new)
    if (b.get("rounds"), b.get("reps")) != (n.get("rounds"), n.get("reps")):
        die(f"{new}: rounds/reps {n.get('rounds')}/{n.get('reps')} differ from {base}'s "
            f"{b.get('rounds')}/{b.get('reps')}")
    replaced = {group(p) for p in n["points"]}
    if not replaced:
        die(f"{new}: no points")
    kept = [p for p in b["points"] if group(p) not in replaced]
    merged = dict(b)
    merged["points"] = kept + n["points"]
    merged["merged_from"] = [
        {"file": os.path.basename(base), "date": b.get("date"), "normgate_commit": b.get("normgate_commit"),
         "points": len(kept)},
        {"file": os.path.basename(new), "date": n.get("date"), "normgate_commit": n.get("normgate_commit"),
         "points": len(n["points"])},
    ]
    merged["date"] = max(str(b.get("date")), str(n.get("date")))
    merged["normgate_commit"] = n.get("normgate_commit")
    d = os.path.dirname(os.path.abspath(out))
    try:
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".timings_merge.")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(merged, f, indent=1)
            f.write("\n")
        os.replace(tmp, out)
    except OSError as e:
        die(f"{out}: {e}")
    print(f"timings_merge: {len(kept)} points of {base} kept, {len(n['points'])} of {new} added "
          f"({len(replaced)} groups replaced) -> {out}")


if __name__ == "__main__":
    main(sys.argv)
