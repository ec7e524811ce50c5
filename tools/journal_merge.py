#!/usr/bin/env python3
"""Merge gate journals of one campaign into one journal.

Use: a slice's refinement split over two GPUs. Copy the slice's journal to
two new slices, run each with part of the windows (e.g. `form=heads24` and
`form=heads4`: windows never share refinement cases across those), then merge
the two journals back and resume the original slice with its own filter: the
gate finds every case journalled and runs none.

  tools/journal_merge.py OUT IN [IN ...]      (.gz read and written as gzip)

The inputs must be journals of format 2 (every line carries the SHA-256 of
its bytes, gate/include/normgate/gate/journal.h) and share the header line
(same campaign: table, seeds, oracle, refinement options, backend, device,
variant hashes); otherwise exit 2 naming the file. A line whose digest
fails is an error naming FILE:LINE (exit 2): the gate would refuse it too.
Case lines are kept verbatim (their digests stay valid), in input order,
each distinct line once (the lines the inputs inherited from one journal
are identical copies). A torn last line (a run killed mid-write) is
dropped, as the gate drops it. Blank lines ending a journal (an editor's
newline) are ignored, as the gate ignores them; a blank line with records
after it is an error naming FILE:LINE (exit 2), as in the gate. Writes
OUT.tmp, then renames. Exit 0 on success, 2 on bad input.

Two runs resumed from one journal (e.g. on two machines, both started
from the committed journal) journal the same cases again; their lines differ
only in "seconds", the case's wall time, which is no result. Such a line is
the same case: the first is kept, the other dropped and counted. A case
journalled twice with different results for one implementation (a
nondeterministic variant run twice, an error on one machine) would stop
the gate's resume (contradicting records): the later line is dropped, the
first kept, and each such drop is named on stderr; a later line that also
holds implementations no earlier line has cannot be dropped without loss:
exit 2 naming both lines."""
import gzip
import hashlib
import json
import os
import re
import sys

# The digest member every journal line ends in (journal_line in gate/src/journal.cpp).
DIGEST = re.compile(r',"sha256":"([0-9a-f]{64})"\}$')


def verify(line):
    """The object of a journal line without its digest member, or None when
    the line's SHA-256 digest is missing or does not match its bytes."""
    m = DIGEST.search(line)
    if not m or m.start() < 2:
        return None
    body = line[:m.start()] + "}"
    if hashlib.sha256(body.encode("utf-8")).hexdigest() != m.group(1):
        return None
    try:
        obj = json.loads(body)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


# What the gate's journal reader counts as blank (kBlank in gate/src/journal.cpp).
BLANK = " \t\r\n"


def read_lines(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        text = f.read()
    # Blank lines (spaces, tabs, CRs) after the last newline-ended line are
    # formatting (an editor's or `echo >>`'s newline), not records: cut off,
    # as the gate's reader does. A blank line between records stays, and is
    # refused below as the gate refuses it.
    last = len(text.rstrip(BLANK))
    nl = text.find("\n", last)
    if last > 0 and nl != -1:
        text = text[:nl + 1]
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
    contradictions = 0
    body_lines = set()
    first = {}  # (case, impl) -> (where, its result or error)
    for path in ins:
        try:
            lines, torn = read_lines(path)
        except (OSError, EOFError, UnicodeDecodeError) as e:
            print(f"journal_merge: cannot read {path!r}: {e}", file=sys.stderr)
            return 2
        if torn and verify(torn) is not None:  # complete but for its newline: a line
            lines, torn = lines + [torn], ""
        if not lines:
            print(f"journal_merge: {path!r} has no header line", file=sys.stderr)
            return 2
        h = verify(lines[0])
        if h is None:
            try:
                old = json.loads(lines[0])
            except ValueError:
                old = None
            if isinstance(old, dict) and old.get("normgate_journal") == 1:
                print(f"journal_merge: {path!r} is a format-1 journal (no digests): it cannot be checked or merged",
                      file=sys.stderr)
            else:
                print(f"journal_merge: {path!r} is not a normgate gate journal (line 1: {lines[0][:80]!r})",
                      file=sys.stderr)
            return 2
        if h.get("normgate_journal") != 2 or "campaign" not in h:
            print(f"journal_merge: {path!r} is not a format-2 normgate gate journal (line 1: {lines[0][:80]!r})",
                  file=sys.stderr)
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
            if not line.strip(BLANK):
                print(f"journal_merge: {path}:{n} is blank and records follow it (blank lines may only end the "
                      f"file: changed after normgate wrote it?)", file=sys.stderr)
                return 2
            rec = verify(line)
            if rec is None or not isinstance(rec.get("impls"), list) or "case" not in rec:
                print(f"journal_merge: {path}:{n} fails its SHA-256 digest or is no record (changed after "
                      f"normgate wrote it?)", file=sys.stderr)
                return 2
            # The case's content without its wall time: the identity of a line.
            key = json.dumps({k: v for k, v in rec.items() if k != "seconds"}, sort_keys=True)
            if key in seen:
                if line not in body_lines:
                    timing_dups += 1
                continue
            # Per (case, implementation): its result, or the case's error.
            results = {r.get("impl"): r for r in rec.get("results", [])}
            new, clash = False, None
            for impl in rec["impls"]:
                what = {"error": rec["error"]} if "error" in rec else results.get(impl)
                where = (f"{path}:{n}", what)
                prev = first.setdefault((rec["case"], impl), where)
                if prev is where:
                    new = True
                elif prev[1] != what:
                    clash = (impl, prev[0])
            if clash and new:
                print(f"journal_merge: {path}:{n} contradicts {clash[1]} (case {rec['case']}, {clash[0]}) and holds "
                      f"implementations no earlier line has: cannot merge without losing one", file=sys.stderr)
                return 2
            if clash:
                contradictions += 1
                print(f"journal_merge: {path}:{n} dropped: contradicts {clash[1]} (case {rec['case']}, {clash[0]}); "
                      f"the first is kept", file=sys.stderr)
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
    if contradictions:
        dropped += f"; {contradictions} lines contradicting an earlier one dropped"
    print(f"journal_merge: {out}: {len(body)} case lines from {len(ins)} journals{dropped}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
