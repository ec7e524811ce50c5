#!/usr/bin/env python3
"""Merge gate journals of one campaign into one journal.

Use: a slice's refinement split over two GPUs. Copy the slice's journal to
two new slices, run each with part of the windows (e.g. `form=heads24` and
`form=heads4`: windows never share refinement cases across those), then merge
the two journals back and resume the original slice with its own filter: the
gate finds every case journalled and runs none.

  tools/journal_merge.py OUT IN [IN ...]      (.gz read and written as gzip)

The inputs must share the header line (same campaign: table, seeds, oracle,
refinement options, backend, device, variant hashes); otherwise exit 2 naming
the file. Case lines are kept in input order, each distinct line once (the
lines the inputs inherited from one journal are identical copies). A case
journalled twice with different content (a nondeterministic variant run
twice) keeps both lines: the gate reads the first. A torn last line (a run
killed mid-write) is dropped, as the gate drops it. Writes OUT.tmp, then
renames. Exit 0 on success, 2 on bad input.

Two runs resumed from one journal (e.g. on two machines, both started
from the committed journal) journal the same cases again; their lines differ
only in "seconds", the case's wall time, which is no result. Such a line is
the same case: the first is kept, the other dropped and counted."""
import gzip
import json
import os
import sys


def read_lines(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        text = f.read()
    lines = text.split("\n")
    # Everything after the last newline is a torn line (or empty).
    return lines[:-1], lines[-1]


def main(argv):
    if len(argv) < 2 or argv[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    out, ins = argv[0], argv[1:]
    header, header_line = None, None
    seen = set()
    body = []
    timing_dups = 0
    body_lines = set()
    for path in ins:
        try:
            lines, torn = read_lines(path)
        except (OSError, EOFError, UnicodeDecodeError) as e:
            print(f"journal_merge: cannot read {path!r}: {e}", file=sys.stderr)
            return 2
        if not lines:
            print(f"journal_merge: {path!r} has no header line", file=sys.stderr)
            return 2
        try:
            h = json.loads(lines[0])
        except ValueError as e:
            print(f"journal_merge: {path!r} line 1 is not JSON ({e})", file=sys.stderr)
            return 2
        if not isinstance(h, dict) or h.get("normgate_journal") != 1 or "campaign" not in h:
            print(f"journal_merge: {path!r} is not a normgate gate journal (line 1: {lines[0][:80]!r})", file=sys.stderr)
            return 2
        if header is None:
            header, header_line = h, lines[0]
        elif h != header:
            diff = sorted(k for k in set(h["campaign"]) | set(header["campaign"])
                          if h["campaign"].get(k) != header["campaign"].get(k))
            print(f"journal_merge: {path!r} belongs to a different campaign than {ins[0]!r} "
                  f"(differing fields: {', '.join(diff) or 'header format'})", file=sys.stderr)
            return 2
        if torn:
            print(f"journal_merge: {path}: torn last line dropped ({len(torn)} bytes)", file=sys.stderr)
        for n, line in enumerate(lines[1:], start=2):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError as e:
                print(f"journal_merge: {path}:{n} is not JSON ({e})", file=sys.stderr)
                return 2
            if isinstance(rec, dict):
                # The case's content without its wall time: the identity of a line.
                rec.pop("seconds", None)
                key = json.dumps(rec, sort_keys=True)
            else:
                key = line
            if key in seen:
                if line not in body_lines:
                    timing_dups += 1
                continue
            seen.add(key)
            body_lines.add(line)
            body.append(line)
    tmp = out + ".tmp"
    opener = gzip.open if out.endswith(".gz") else open
    with opener(tmp, "wt", encoding="utf-8") as f:
        f.write(header_line + "\n")  # the first input's header, verbatim
        for line in body:
            f.write(line + "\n")
    os.replace(tmp, out)
    dropped = f"; {timing_dups} reruns of a case differing only in seconds dropped" if timing_dups else ""
    print(f"journal_merge: {out}: {len(body)} case lines from {len(ins)} journals{dropped}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
