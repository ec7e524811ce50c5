#!/usr/bin/env python3
"""Merge gate journals of one campaign into one journal.

Use: a slice's refinement split over two GPUs. Copy the slice's journal to
two new slices, run each with part of the windows (e.g. `form=heads24` and
`form=heads4`: windows never share refinement cases across those), then merge
the two journals back and resume the original slice with its own filter: the
gate finds every case journalled and runs none.

  tools/journal_merge.py [--keep-first] OUT IN [IN ...]   (.gz read and written as gzip;
                                                           the gate reads only plain files)

The inputs must be journals of format 3 (every line carries the SHA-256 of
its bytes, or its HMAC-SHA256 under the key NORMGATE_JOURNAL_KEY_FILE
names, and every record line "prev", the seal of the line before it:
gate/include/normgate/gate/journal.h, tools/journal_seal.py) and share the
header line (same campaign: table, seeds, oracle, refinement options,
backend, device, variant hashes); otherwise exit 2 naming the file. A line
whose digest fails, or whose "prev" is not the seal of the line before it
(lines moved, repeated, left out or copied in from another journal), is an
error naming FILE:LINE (exit 2): the gate would refuse it too. OUT holds
the first input's header verbatim, then the case lines in input order,
each distinct line once (the lines the inputs inherited from one journal
are identical copies), each chained again: its "prev" set to the seal of
the line before it in OUT and its seal recomputed (under the key when one
is set), its other bytes unchanged. A torn last line (a run killed mid-write) is
dropped, as the gate drops it; a last line without its newline that ends in
its digest member but fails it is a change, an error naming FILE:LINE
(exit 2), as in the gate. Blank lines ending a journal (an editor's
newline) are ignored, as the gate ignores them; a blank line with records
after it is an error naming FILE:LINE (exit 2), as in the gate. Writes
a temporary file of its own beside OUT, then renames it over OUT. Exit 0 on success, 2 on bad input.

Two runs resumed from one journal (e.g. on two machines, both started
from the committed journal) journal the same cases again; their lines differ
only in "seconds", the case's wall time, which is no result. Such a line is
the same case: the first is kept, the other dropped and counted. Other
pairs of lines of one (case, implementation) follow the gate's rule
(resolve_duplicate below): an error and a later line are both kept (the
later attempt counts: `gate --retry-errors` appends so; not after a
"nondeterministic: " or "contract broken: " error, a finding that
stands), an error after a
result is kept too (the result counts), and a full result after a
forward-only one of the same y and rstd is kept. A case journalled twice
with different results for one implementation (a nondeterministic
variant run twice) would stop the gate's resume (contradicting records):
which one is right cannot be known, so nothing is merged (exit 2 naming
both lines) unless --keep-first is given: then the later line is dropped,
the first kept, and each such drop is named on stderr (a later line that
also holds implementations no earlier line has cannot be dropped without
loss: exit 2 naming both lines). A line whose "prev" is not written as the
gate writes it (escaped, or twice) is exit 2 too: OUT's chain could not
be rewritten. -h, --help: this text, exit 0."""
import gzip
import io
import json
import os
import sys
import tempfile
import zlib

import journal_seal



def nondeterministic_impl(error):
    """The implementation a case's error names as a finding about it
    (nondeterministic_impl, journal.h; parse_external_error,
    harness/external.h): the tag "nondeterministic: " or "contract
    broken: " first, then "external implementation NAME (ORIGIN) ...", each
    at its fixed place; "" for any other error. Untagged errors are never
    findings: ORIGIN (a plugin's path) or an implementation's own message
    may hold any wording."""
    if not isinstance(error, str):
        return ""
    tag = "external implementation "
    for t in ("nondeterministic: ", "contract broken: "):
        if error.startswith(t + tag):
            at = len(t) + len(tag)
            to = error.find(" (", at)
            return "" if to <= at else error[at:to]
    return ""


def resolve_duplicate(kept, nxt, impl=""):
    """The gate's rule for a second record of one (case, implementation)
    (resolve_duplicate, gate/include/normgate/gate/journal.h): "replace",
    "keep" or "contradict". An error is a failed attempt: any later record
    replaces it, and an error never displaces a result; two results are
    one when equal, a full one replaces a forward-only one with the same
    ran_on, y and rstd, and others contradict. An error that begins
    "nondeterministic: " (an implementation declared deterministic gave
    different bits on two runs, harness/external.h) or "contract broken: "
    (it broke the interface, e.g. wrote outside a view) is a finding, not a
    failed attempt, when it names `impl` itself: it is kept, and it replaces
    any record it follows."""
    if kept == nxt:
        return "keep"
    if impl and nondeterministic_impl(kept.get("error")) == impl:
        return "keep"
    if impl and nondeterministic_impl(nxt.get("error")) == impl:
        return "replace"
    if "error" in kept:
        return "replace"
    if "error" in nxt:
        return "keep"
    if kept == nxt:
        return "keep"
    if "dx" in kept and "dx" in nxt:
        return "contradict"
    if any(k not in kept or k not in nxt or kept[k] != nxt[k] for k in ("impl", "ran_on", "y", "rstd")):
        return "contradict"
    return "replace" if "dx" not in kept and "dx" in nxt else "keep"


def verify(line):
    """The object of a journal line without its seal member, or None when
    the seal (SHA-256, or HMAC-SHA256 under NORMGATE_JOURNAL_KEY_FILE's key:
    journal_seal.py) is missing or does not match its bytes."""
    body = journal_seal.body(line)
    if body is None:
        return None
    try:
        obj = json.loads(body)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def unchained(line):
    """A record line's JSON text without its seal member (its chain member
    still in it): the bytes a re-chained line keeps but for "prev"."""
    return journal_seal.unsealed(line)


def unplaced(line):
    """A record line's text without its seal and its chain member: what two
    copies of one record (from two journals) share whatever their place."""
    return journal_seal.CHAIN.sub('"prev":""', unchained(line), count=1)


# What the gate's journal reader counts as blank (kBlank in gate/src/journal.cpp).
BLANK = " \t\r\n"


def read_lines(path):
    """(lines, torn): the newline-ended lines of a journal and what follows
    the last newline, read as the gate's reader does (gate/src/journal.cpp):
    bytes, split at LF only (a CR is the line's own byte: a CRLF journal
    fails its digests, as in the gate), blank lines at the end cut off, a
    torn tail that is not UTF-8 dropped like any torn tail. Raises ValueError
    for damage the gate refuses too: a complete line followed by stray bytes
    where its newline belongs."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    # Blank lines (spaces, tabs, CRs) after the last newline-ended line are
    # formatting (an editor's or `echo >>`'s newline), not records: cut off,
    # as the gate's reader does. A blank line between records stays, and is
    # refused below as the gate refuses it.
    last = len(data.rstrip(BLANK.encode()))
    nl = data.find(b"\n", last)
    if last > 0 and nl != -1:
        data = data[:nl + 1]
    end = data.rfind(b"\n")
    keep, tail = data[:end + 1], data[end + 1:]
    lines = keep.decode("utf-8").split("\n")[:-1]  # UnicodeDecodeError: damage inside the records
    try:
        torn = tail.decode("utf-8")
    except UnicodeDecodeError:
        return lines, tail.decode("utf-8", "replace")  # a torn write cut inside a character: dropped
    if verify(torn) is None:
        # A last line that ends in its digest member is whole (a torn write
        # stops before the digest's end): its digest failing is a change, not
        # a tear, as the gate says (gate/src/journal.cpp); but a NUL (a crash
        # left a page unwritten) is a tear.
        if journal_seal.sealed_shape(torn) and "\0" not in torn:
            raise ValueError(f"line {len(lines) + 1}, the last (whole, without its newline): its SHA-256 digest does "
                             f"not match its content (changed after normgate wrote it)")
        # A torn write is a prefix of one line: a tail holding a whole line and
        # more (its newline turned into another byte, bytes glued on) is damage,
        # its digest right or not.
        p = torn.find('"}')
        while p != -1 and p + 2 < len(torn):
            whole = torn[:p + 2]
            if journal_seal.sealed_shape(whole) and "\0" not in whole and verify(whole) is None:
                raise ValueError(f"line {len(lines) + 1}: a whole line whose SHA-256 digest does not match its "
                                 f"content, followed by {len(torn) - p - 2} bytes where its newline belongs "
                                 f"(changed after normgate wrote it)")
            if verify(whole) is not None:
                raise ValueError(f"line {len(lines) + 1}: a complete line is followed by {len(torn) - p - 2} stray "
                                 f"bytes where its newline belongs (changed after normgate wrote it?)")
            p = torn.find('"}', p + 1)
    return lines, torn


def main(argv):
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return 0
    keep_first = "--keep-first" in argv
    argv = [a for a in argv if a != "--keep-first"]
    if len(argv) < 2 or argv[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    out, ins = argv[0], argv[1:]
    # OUT checked before any work: a file name in an existing folder.
    if not out or out.endswith(os.sep) or os.path.isdir(out):
        print(f"journal_merge: OUT {out!r} must be a file name (not empty, not a folder)", file=sys.stderr)
        return 2
    if not os.path.isdir(os.path.dirname(os.path.abspath(out))):
        print(f"journal_merge: OUT {out!r}: its folder {os.path.dirname(os.path.abspath(out))!r} does not exist",
              file=sys.stderr)
        return 2
    try:
        journal_seal.journal_key()
    except journal_seal.KeyError_ as e:
        print(f"journal_merge: {e}", file=sys.stderr)
        return 2
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
        except (OSError, EOFError, UnicodeDecodeError, zlib.error) as e:
            print(f"journal_merge: cannot read {path!r}: {e}", file=sys.stderr)
            return 2
        except ValueError as e:
            print(f"journal_merge: {path}: {e}", file=sys.stderr)
            return 2
        if torn and verify(torn) is not None:  # complete but for its newline: a line
            lines, torn = lines + [torn], ""
        if not lines:
            print(f"journal_merge: {path!r} has no header line", file=sys.stderr)
            return 2
        h = verify(lines[0])
        if h is None and lines[0].endswith("\r"):
            print(f"journal_merge: {path}:1 ends in CR (CRLF line ends: the file was rewritten after normgate "
                  f"wrote it; the gate refuses it too)", file=sys.stderr)
            return 2
        if h is None:
            try:
                old = json.loads(lines[0])
            except ValueError:
                old = None
            if isinstance(old, dict) and old.get("normgate_journal") == 1:
                print(f"journal_merge: {path!r} is a format-1 journal (no digests): it cannot be checked or merged",
                      file=sys.stderr)
            elif journal_seal.sealed_shape(lines[0]) and isinstance(old, dict) and "normgate_journal" in old:
                print(f"journal_merge: {path}:1: {journal_seal.why_not(lines[0])}", file=sys.stderr)
            else:
                print(f"journal_merge: {path!r} is not a normgate gate journal (line 1: {lines[0][:80]!r})",
                      file=sys.stderr)
            return 2
        if h.get("normgate_journal") == 2 and "campaign" in h:
            print(f"journal_merge: {path!r} is a format-2 journal (its lines are not chained); this tool and the "
                  f"gate read format {journal_seal.FORMAT}: run its cases again into a new journal", file=sys.stderr)
            return 2
        if h.get("normgate_journal") != journal_seal.FORMAT or "campaign" not in h:
            print(f"journal_merge: {path!r} is not a format-{journal_seal.FORMAT} normgate gate journal (line 1: "
                  f"{lines[0][:80]!r})", file=sys.stderr)
            return 2
        if header is None:
            header, header_line = h, lines[0]
        elif h != header:
            diff = sorted(k for k in set(h["campaign"]) | set(header["campaign"])
                          if h["campaign"].get(k) != header["campaign"].get(k))
            hint = ("; shard journals (--shard K/N) are merged by normgate gate TABLE --merge" if "shard" in diff
                    else "")
            print(f"journal_merge: {path!r} belongs to a different campaign than {ins[0]!r} "
                  f"(differing fields: {', '.join(diff) or 'header format'}){hint}", file=sys.stderr)
            return 2
        if torn:
            print(f"journal_merge: {path}: torn last line dropped ({len(torn)} bytes)", file=sys.stderr)
        before = journal_seal.seal_of(lines[0])
        for n, line in enumerate(lines[1:], start=2):
            if line.endswith("\r"):
                print(f"journal_merge: {path}:{n} ends in CR (CRLF line ends: the file was rewritten after normgate "
                      f"wrote it; the gate refuses it too)", file=sys.stderr)
                return 2
            if not line.strip(BLANK):
                print(f"journal_merge: {path}:{n} is blank and records follow it (blank lines may only end the "
                      f"file: changed after normgate wrote it?)", file=sys.stderr)
                return 2
            rec = verify(line)
            if rec is None or not isinstance(rec.get("impls"), list) or "case" not in rec:
                why = journal_seal.why_not(line) or "it is no record"
                print(f"journal_merge: {path}:{n} fails its seal or is no record: {why}", file=sys.stderr)
                return 2
            if rec.get("prev") != before:  # absent, or another line's seal
                print(f"journal_merge: {path}:{n}: its \"prev\" is not the seal of line {n - 1} (lines were moved, "
                      f"repeated or left out, or the line was copied in from another journal); the gate refuses "
                      f"it too", file=sys.stderr)
                return 2
            # The chain member once, as the gate writes it: what OUT's chain
            # rewrites (an escaped or repeated "prev" would survive it).
            literal = journal_seal.CHAIN.findall(unchained(line))
            if len(literal) != 1 or literal[0] != rec.get("prev"):
                print(f"journal_merge: {path}:{n}: its \"prev\" is not written as the gate writes it (one "
                      f"\"prev\":\"<64 hex>\" member): not merged", file=sys.stderr)
                return 2
            before = journal_seal.seal_of(line)
            # The case's content without its wall time and its place in the
            # chain: the identity of a line.
            key = json.dumps({k: v for k, v in rec.items() if k not in ("seconds", "prev")}, sort_keys=True)
            if key in seen:
                if unplaced(line) not in body_lines:
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
                    continue
                d = resolve_duplicate(prev[1], what, impl)
                if d == "replace":  # a result (or a retry) after an error; a full result after a forward-only one
                    first[(rec["case"], impl)] = where
                    new = True
                elif d == "contradict":
                    clash = (impl, prev[0])
            if clash and new:
                print(f"journal_merge: {path}:{n} contradicts {clash[1]} (case {rec['case']}, {clash[0]}) and holds "
                      f"implementations no earlier line has: cannot merge without losing one", file=sys.stderr)
                return 2
            if clash and not keep_first:
                print(f"journal_merge: {path}:{n} contradicts {clash[1]} (case {rec['case']}, {clash[0]}): which "
                      f"result is right cannot be known from the files; nothing merged (--keep-first keeps the first "
                      f"and drops the other, naming it)", file=sys.stderr)
                return 2
            if clash:
                contradictions += 1
                print(f"journal_merge: {path}:{n} dropped: contradicts {clash[1]} (case {rec['case']}, {clash[0]}); "
                      f"the first is kept (--keep-first)", file=sys.stderr)
                continue
            seen.add(key)
            body_lines.add(unplaced(line))
            body.append(line)
    tmp = None
    try:
        # A temporary of its own beside OUT (never a fixed name, which a link
        # or a folder could occupy), renamed over OUT once complete.
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(out)), prefix=".journal_merge.")
        mask = os.umask(0)
        os.umask(mask)
        os.fchmod(fd, 0o666 & ~mask)  # as open() would make it; mkstemp makes 0600
        raw = os.fdopen(fd, "wb")
        f = gzip.open(raw, "wt", encoding="utf-8", newline="\n") if out.endswith(".gz") else \
            io.TextIOWrapper(raw, encoding="utf-8", newline="\n")
        with f:
            f.write(header_line + "\n")  # the first input's header, verbatim
            before = journal_seal.seal_of(header_line)
            for line in body:
                line = journal_seal.seal(journal_seal.CHAIN.sub(f'"prev":"{before}"', unchained(line), count=1))
                f.write(line + "\n")
                before = journal_seal.seal_of(line)
        if out.endswith(".gz"):
            raw.close()  # gzip.open on a file object leaves it open
        os.replace(tmp, out)
    except OSError as e:
        if tmp is not None and os.path.exists(tmp):
            os.remove(tmp)
        print(f"journal_merge: cannot write {out!r}: {e}", file=sys.stderr)
        return 2
    dropped = f"; {timing_dups} reruns of a case differing only in seconds dropped" if timing_dups else ""
    if contradictions:
        dropped += f"; {contradictions} lines contradicting an earlier one dropped"
    print(f"journal_merge: {out}: {len(body)} case lines from {len(ins)} journals{dropped}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
