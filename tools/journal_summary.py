#!/usr/bin/env python3
"""Summarize a gate journal (JSON lines, format 3; formats 1, without
digests, and 2, without the chain, as stored by older campaigns, are read
too) without the gate:
per (H, w, form) and implementation, the cases journalled, failed and
errored, the T range, and the worst err/tol per output with its case.

For a campaign that has not finished (no gate report yet): it says what the
journalled cases show, never a window verdict (refinement may be missing).
A format-2 line whose seal fails (its SHA-256, or its HMAC-SHA256 under the
key NORMGATE_JOURNAL_KEY_FILE names: tools/journal_seal.py) is skipped and
named on stderr. In format 3 the records are a chain (each "prev" the seal
of the line before it): the first line whose seal fails or whose "prev" is
not the seal of the last record read ends what is counted (the lines from
there on are named on stderr and left out: moved, repeated, changed or
copied in from another journal), as the gate would refuse the journal
there. Either way the exit code is 1 and the table covers only the lines
before; a journal sealed otherwise than the key setting says (keyed
lines without the key, plain ones with it) is exit 2.
Usage: tools/journal_summary.py JOURNAL [--md OUT.md]   (JOURNAL may be .jsonl.gz)
Exit 0; 1 when a format-2 or 3 line failed its seal or the chain (the table
leaves it out; the gate would refuse the journal); 2 on a usage error or a
missing, unreadable or empty journal, a journal sealed otherwise than the
key setting says, or an OUT that is the journal itself (nothing written); 3
when OUT cannot be written (nothing left at OUT)."""
import argparse
import gzip
import json
import os
import re
import sys

import journal_seal
from out_file import check_out, write_text

OUTS = ("y", "rstd", "dx", "dw")


def signed(line):
    """True when a format-2 or 3 line's seal matches its bytes (SHA-256, or
    HMAC-SHA256 under NORMGATE_JOURNAL_KEY_FILE's key: journal_seal.py)."""
    return journal_seal.body(line) is not None


def glued_whole_line(line):
    """Why a last line without its newline is not a torn write, or None: it
    starts with a whole line (ending in its seal member) followed by more
    bytes; the message the gate gives for it."""
    p = line.find('"}')
    while p != -1 and p + 2 < len(line):
        whole, rest = line[:p + 2], len(line[p + 2:].encode("utf-8", "surrogateescape"))
        if signed(whole):
            return (f"a complete line is followed by {rest} stray bytes where its newline belongs (the file was "
                    f"changed after normgate wrote it)")
        if journal_seal.sealed_shape(whole) and "\0" not in whole:
            return (f"a whole line whose digest does not match its content, followed by {rest} bytes where its "
                    f"newline belongs (the file was changed after normgate wrote it)")
        p = line.find('"}', p + 1)
    return None


def main(argv):
    ap = argparse.ArgumentParser(prog="journal_summary.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("journal", metavar="JOURNAL", help="a gate journal (.jsonl, or .jsonl.gz)")
    ap.add_argument("--md", metavar="OUT.md", default=None, help="also write the table here (atomically)")
    a = ap.parse_args(argv)  # a usage error: exit 2
    path, md_out = a.journal, a.md
    if md_out is not None:
        md_out = check_out("journal_summary", md_out, [path])  # exit 2 naming it
    try:
        opener = gzip.open if path.endswith(".gz") else open  # campaigns store .jsonl.gz
        with opener(path, "rb") as f:
            data = f.read()
        # As the gate reads a journal (gate/src/journal.cpp): lines end at LF
        # only (a CR stays part of the line and fails its seal; U+2028 in a
        # string is no end); blank lines (spaces, tabs, CRs) after the last
        # newline-ended line are formatting; what follows the last newline
        # is a torn write (it may end inside a UTF-8 character).
        last = len(data.rstrip(b" \t\r\n"))
        nl = data.find(b"\n", last)
        if last > 0 and nl != -1:
            data = data[:nl + 1]
        end = data.rfind(b"\n")
        lines = data[:end + 1].decode("utf-8").split("\n")[:-1]
        tail = data[end + 1:].decode("utf-8", "replace")
        if tail:
            lines.append(tail)
        if not lines:
            raise ValueError("the file is empty")
        head = json.loads(lines[0])
    except (OSError, ValueError, EOFError, RecursionError) as e:  # EOFError: a truncated .gz
        print(f"journal_summary: cannot read journal {path!r}: {e}", file=sys.stderr)
        return 2
    fmt = head.get("normgate_journal") if isinstance(head, dict) else None
    try:
        key = journal_seal.journal_key()
    except journal_seal.KeyError_ as e:
        print(f"journal_summary: {e}", file=sys.stderr)
        return 2
    seal = journal_seal.SEAL.search(lines[0])
    if fmt in (2, 3) and seal and (seal.group(1) == "hmac_sha256") != bool(key):
        print(f"journal_summary: {path!r}: its lines are sealed " +
              ("with a journal key: set NORMGATE_JOURNAL_KEY_FILE to the key's file" if not key else
               f"with a plain SHA-256, and {journal_seal.ENV} is set: only keyed lines are trusted then"),
              file=sys.stderr)
        return 2
    if fmt in (2, 3) and seal and key and not signed(lines[0]):
        print(f"journal_summary: {path!r} line 1: {journal_seal.why_not(lines[0])}", file=sys.stderr)
        return 2
    if fmt not in (1, 2, 3) or (fmt in (2, 3) and not signed(lines[0])):
        print(f"journal_summary: {path!r} is not a normgate journal (line 1: {lines[0][:80]!r})", file=sys.stderr)
        return 2
    torn_at = len(lines) if tail else 0  # the line number of a last line without its newline
    groups = {}
    before = journal_seal.seal_of(lines[0])  # the chain: the seal of the last record read (format 3)
    broken = 0  # format 2 or 3 lines left out for a failed seal or the chain

    def left_out(n, why):
        """Name line n's failure; in format 3 the chain ends there (True: stop
        reading), in format 2 only the line is left out."""
        nonlocal broken
        print(f"journal_summary: {path}:{n}: {why}", file=sys.stderr)
        if fmt == 3:
            broken += len(lines) - n + 1
            print(f"journal_summary: {path}: the chain ends at line {n}: lines {n}..{len(lines)} are not counted",
                  file=sys.stderr)
            return True
        broken += fmt == 2
        return False

    for n, line in enumerate(lines[1:], start=2):
        if not line.strip(" \t\r"):
            # The gate refuses a blank line with records after it.
            if fmt in (2, 3) and left_out(n, "a blank line with records after it"):
                break
            continue
        try:
            rec = json.loads(line)
            if fmt in (2, 3) and not signed(line):
                raise ValueError("digest")
        except (ValueError, RecursionError):
            # A torn write is a prefix of one line: a last line holding a
            # whole line and more (its newline turned into another byte, bytes
            # glued on) is damage, as the gate says (gate/src/journal.cpp).
            glued = glued_whole_line(line) if fmt in (2, 3) and n == torn_at else None
            if glued:
                if left_out(n, glued):
                    break
                continue
            if fmt in (2, 3) and n == torn_at and not journal_seal.sealed_shape(line):
                print(f"journal_summary: {path}:{n}: a torn last line (a run cut mid-write) left out", file=sys.stderr)
                continue
            if left_out(n, "torn or bad line (or failed digest) skipped"):
                break
            continue
        if fmt == 3 and not (isinstance(rec, dict) and rec.get("prev") == before):
            left_out(n, f"its \"prev\" is not the seal of line {n - 1} (moved, repeated or copied in from another "
                        f"journal)")
            break
        before = journal_seal.seal_of(line)
        try:
            case = rec["case"]
            kv = dict(p.split("=", 1) for p in case.split(","))
            T = int(kv["T"])
            key = (int(kv["H"]), kv["w"], kv.get("form", "plain"))
        except (KeyError, TypeError, ValueError, AttributeError):
            print(f"journal_summary: {path}:{n}: a record without a readable case id skipped", file=sys.stderr)
            continue
        try:
            add_record(groups, rec, case, key, T)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError):
            print(f"journal_summary: {path}:{n}: a record with malformed results skipped", file=sys.stderr)
    rc = finish(path, lines, head, groups, md_out, broken)
    if rc == 0 and broken:
        print(f"journal_summary: {path}: {broken} lines failed their seal or the chain and are not in the table; the "
              f"gate would refuse this journal", file=sys.stderr)
        return 1
    return rc


def add_record(groups, rec, case, key, T):
    """Count one record's results into groups. Every result is read first, so
    a malformed record raises before it changes anything."""
    results = rec.get("results", []) or [{"impl": i, "error": rec.get("error")} for i in rec.get("impls", [])]
    parsed = []  # (impl, error?, [(output, ratio)], ok)
    for res in results:
        impl = res["impl"]
        if not isinstance(impl, str):
            raise TypeError("impl")
        if rec.get("error"):
            parsed.append((impl, True, [], False))
            continue
        ratios, ok = [], True
        for o in OUTS:
            if rec.get("outputs") == "fwd" and o in ("dx", "dw"):
                continue  # a forward-only record (no backward window covered the case): y and rstd only
            v = res[o]
            ratios.append((o, float(v[0]) if not isinstance(v[0], str) else float(v[0].replace("inf", "Infinity"))))
            ok = ok and bool(v[4])
        if "h_new" in res:  # form res: bitwise exact
            ok = ok and bool(res["h_new"][4])
        elif ",form=res," in case + ",":  # a res record without h_new: not checked (journal.h ImplRecord)
            ok = False
        parsed.append((impl, False, ratios, ok))
    for impl, error, ratios, ok in parsed:
        g = groups.setdefault(key + (impl,), {"cases": 0, "failed": 0, "errors": 0, "T": [T, T],
                                              "worst": {o: (0.0, "") for o in OUTS}})
        g["cases"] += 1
        g["T"] = [min(g["T"][0], T), max(g["T"][1], T)]
        if error:
            g["errors"] += 1
            continue
        for o, ratio in ratios:
            if ratio > g["worst"][o][0] or not g["worst"][o][1]:
                g["worst"][o] = (ratio, case)
        g["failed"] += 0 if ok else 1


def full_case(case):
    """The case id as `normgate check --case` and `repro` take it, whole
    (H=...,T=...,w=...,form=...,family=...,seed=...[,kappa=...|eps=...]):
    the journal's own, with form=plain put after w where it has no form."""
    if not case or re.search(r"(^|,)form=", case):
        return case
    return re.sub(r"(^|,)(w=[^,]*)", r"\1\2,form=plain", case, count=1)


def finish(path, lines, head, groups, md_out, broken=0):
    """The table (and --md)."""
    camp = head.get("campaign") if isinstance(head.get("campaign"), dict) else {}
    n_cases = sum(1 for line in lines[1:] if line.strip())
    left_out = f" ({broken} left out: a failed seal or chain)" if broken else ""
    L = [f"Journal `{path}`: {n_cases} case lines{left_out}; campaign seeds {camp.get('seeds')}, backend "
         f"{camp.get('backend')}, device {camp.get('device')}, oracle {camp.get('oracle')}, table sha256 "
         f"{str(camp.get('table_sha256'))[:12]}.", "",
         "| H | w | form | impl | cases | failed | errors | T range | y | rstd | dx | dw | worst dw case |",
         "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for key in sorted(groups):
        g = groups[key]
        H, w, form, impl = key
        L.append(f"| {H} | {w} | {form} | {impl} | {g['cases']} | {g['failed']} | {g['errors']} | "
                 f"{g['T'][0]}..{g['T'][1]} | " +
                 " | ".join(f"{g['worst'][o][0]:.3g}" if g['worst'][o][1] else "-" for o in OUTS) +
                 f" | {full_case(g['worst']['dw'][1]) or '-'} |")
    text = "\n".join(L) + "\n"
    if md_out:
        write_text("journal_summary", md_out, text)  # exit 3 naming it when it fails
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
