#!/usr/bin/env python3
"""Add the campaign strength to approval records written before approvals
carried it, from the committed gate reports that approved them.

Since the approval policy (routing/include/normgate/routing/policy.h) an
approval record says how strong the campaign behind it was: t_per_window,
dense_points, dense_step, dense_seeds, fresh_factor, fresh_seeds, oracle and,
for backward windows, dw_vs_fp32_worst (routing.h, Approval). Records written
earlier lack them; `normgate routes` cannot check them against the policy.
This tool finds, for each such record, the gate report (`normgate gate
--report-json`) window that approved it and copies those values in.

A report window approves a record when all of these hold:
  - the window (op, mode, H, w, form, T) and the variant are the record's;
  - the report's backend, seeds and normgate_commit are the record's
    seed_set, backend and normgate_commit;
  - the window passed, and its t_points, cases, worst case and per-output
    max err/tol (exact equality) are the record's;
  - the record's date is the report's or up to --max-delay-s later (an
    approval is written by `gate --approve`, which tools/campaign.sh runs
    once more after the report, resuming the complete journal: same
    numbers, a later date);
  - the window's source_sha256 is the record's, or re-keyed to it: an
    --rekeyed OLD=NEW pair (hash prefixes of at least 12 hex digits) says
    that tools/rekey_approvals.py moved the record from OLD to NEW after a
    comment-only change (its commit message lists the pairs).
Exactly one report window must match each record without strength; zero or
several refuse the whole run (exit 1, nothing written). Records that already
carry strength are left as they are.

Written: the record's new fields only. The file is rewritten as normgate
writes it (sorted keys, 2-space indentation, trailing newline; the tool first
checks that the file is in that form, so no other byte moves), then parsed
again and compared with the original: every other field must be unchanged.
All or nothing: the new text is staged in a temporary file beside the
original and renamed over it. Records without strength predate record
digests too (routing.h, "Validation"): `normgate approvals --seal FILE`
seals them afterwards.

Usage: tools/backfill_approval_strength.py [--approvals FILE] [--rekeyed OLD=NEW ...]
                                           [--max-delay-s N] [--dry-run] REPORT.json ...
Exit status: 0 written (or nothing to do), 1 refused (a record with no or
several matching report windows; the file not in normgate's form), 2 usage
error or unreadable input.

The committed backfill of routes/sm90a.approvals.json (68 records, from the
v3 campaigns; re-keyed at 7447ac2):

  tools/backfill_approval_strength.py \\
    --rekeyed 7abc6c64958f=2c28615aaf93 --rekeyed 30bbf29d3fe5=b038934828f6 \\
    --rekeyed 052d641605ca=a9fe90a57109 docs/results/campaigns/v3-*/slice-*.json
"""
import argparse
import copy
import datetime
import json
import os
import re
import sys
import tempfile

from report_format import format_version

STRENGTH_KEYS = ("t_per_window", "dense_points", "dense_step", "dense_seeds", "fresh_factor", "fresh_seeds",
                 "oracle")
WINDOW_KEYS = ("op", "H", "w", "form")


class Refused(Exception):
    """Exit 1."""


class Unusable(Exception):
    """Exit 2."""


def normgate_text(doc):
    """The approvals document as normgate writes it (nlohmann dump(2), keys sorted)."""
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def parse_date(s, where):
    try:
        return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    except (TypeError, ValueError):
        raise Unusable(f"{where}: date {s!r} is not YYYY-MM-DDTHH:MM:SSZ")


def num(v):
    """A JSON number of normgate (inf/nan as strings) as a float."""
    if isinstance(v, str) and v in ("inf", "-inf", "nan"):
        return float(v)
    return float(v)


def same_number(a, b):
    a, b = num(a), num(b)
    return a == b or (a != a and b != b)


def describe(rec):
    w = rec.get("window", {})
    mode = f" {w['mode']}" if "mode" in w else ""
    return (f"{w.get('op')}{mode} H={w.get('H')} w={w.get('w')} form={w.get('form')} "
            f"T={w.get('T', ['?', '?'])[0]}..{w.get('T', ['?', '?'])[1]} -> {rec.get('variant')}")


def hash_ok(rec_hash, win_hash, rekeyed):
    if rec_hash == win_hash:
        return True
    return any(win_hash.startswith(o) and rec_hash.startswith(n) for o, n in rekeyed)


def window_matches(rec, report, win, rekeyed, max_delay_s, where):
    """'' when `win` of `report` approved `rec`, else the first reason it did not."""
    rw = rec["window"]
    for k in WINDOW_KEYS:
        if win.get(k) != rw.get(k):
            return k
    if win.get("mode") != rw.get("mode") or list(win.get("T", [])) != list(rw.get("T", [])):
        return "window"
    if win.get("variant") != rec.get("variant"):
        return "variant"
    if report.get("backend") != rec.get("backend") or report.get("seeds") != rec.get("seed_set"):
        return "backend or seeds"
    if report.get("normgate_commit") != rec.get("normgate_commit"):
        return "commit"
    if not win.get("pass"):
        return "the window did not pass"
    if win.get("t_points") != rec.get("t_points") or win.get("cases") != rec.get("cases"):
        return "t_points or cases"
    outs = win.get("outputs", {})
    mt = rec.get("max_err_tol", {})
    if set(outs) != set(mt) or any(not same_number(outs[k]["max_err_tol"], mt[k]) for k in mt):
        return "max err/tol"
    if win.get("worst", {}).get("case") != rec.get("worst_case"):
        return "worst case"
    delay = (parse_date(rec.get("date"), describe(rec)) - parse_date(report.get("date"), where)).total_seconds()
    if not 0 <= delay <= max_delay_s:
        return "date"
    if not hash_ok(rec.get("source_sha256", ""), win.get("source_sha256", ""), rekeyed):
        return "source hash"
    return ""


def strength_of(report, win):
    s = {
        "t_per_window": report["t_per_window"],
        "dense_points": report["dense_points"],
        "dense_step": report["dense_step"],
        "dense_seeds": report.get("dense_seeds", "worst"),
        "fresh_factor": report["fresh_factor"],
        "fresh_seeds": win.get("fresh", {}).get("seeds", ""),
        "oracle": report["oracle"],
    }
    if win.get("op") == "bwd":
        s["dw_vs_fp32_worst"] = win["dw_vs_fp32"]["worst"]
    return s


def backfill(doc, reports, rekeyed, max_delay_s):
    """The backfilled document and [(record description, report path)]; Refused
    when a record without strength has no or several matching windows."""
    out = copy.deepcopy(doc)
    done, problems = [], []
    for rec, new in zip(doc["approvals"], out["approvals"]):
        if "t_per_window" in rec:
            continue
        found = []
        for path, rep in reports:
            for win in rep.get("windows", []):
                if window_matches(rec, rep, win, rekeyed, max_delay_s, path) == "":
                    found.append((path, rep, win))
        if len(found) != 1:
            problems.append(f"{describe(rec)} (date {rec.get('date')}, commit {rec.get('normgate_commit')}): "
                            + ("no report window approved it" if not found
                               else "several report windows match: " + ", ".join(p for p, _, _ in found)))
            continue
        path, rep, win = found[0]
        new.update(strength_of(rep, win))
        done.append((describe(rec), path))
    if problems:
        raise Refused("; ".join(problems))
    return out, done


def check_unchanged(old, new):
    """Every record keeps every field it had; the added ones are strength fields."""
    if set(old) != set(new) or len(old["approvals"]) != len(new["approvals"]):
        raise Refused("the document's shape changed")
    for a, b in zip(old["approvals"], new["approvals"]):
        if any(k not in b or b[k] != a[k] for k in a):
            raise Refused(f"{describe(a)}: a field other than the strength fields changed")
        extra = set(b) - set(a)
        if extra - set(STRENGTH_KEYS) - {"dw_vs_fp32_worst"}:
            raise Refused(f"{describe(a)}: unexpected new fields {sorted(extra)}")


def write_atomic(path, text):
    d = os.path.dirname(os.path.abspath(path))
    st = os.stat(path)
    fd, tmp = tempfile.mkstemp(prefix=".backfill-", dir=d)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, st.st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def parse_rekeyed(pairs):
    out = []
    for p in pairs or []:
        m = re.fullmatch(r"([0-9a-f]{12,64})=([0-9a-f]{12,64})", p)
        if not m:
            raise Unusable(f"--rekeyed {p!r}: expected OLD=NEW, hex hash prefixes of at least 12 digits")
        out.append((m.group(1), m.group(2)))
    return out


def main(argv):
    ap = argparse.ArgumentParser(prog="tools/backfill_approval_strength.py",
                                 description="Add campaign strength to old approval records from the gate "
                                             "reports that approved them (see the module docstring).")
    ap.add_argument("reports", nargs="+", metavar="REPORT.json", help="gate reports (normgate gate --report-json)")
    ap.add_argument("--approvals", metavar="FILE", help="approvals JSON (default: routes/sm90a.approvals.json "
                                                        "of this repository)")
    ap.add_argument("--rekeyed", action="append", metavar="OLD=NEW",
                    help="source hash OLD re-keyed to NEW by tools/rekey_approvals.py (repeatable)")
    ap.add_argument("--max-delay-s", type=float, default=3600.0,
                    help="latest approval date after the report's, seconds (default 3600)")
    ap.add_argument("--dry-run", action="store_true", help="check and print, write nothing")
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return 2 if e.code not in (0, None) else 0
    path = args.approvals or os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                           "routes", "sm90a.approvals.json"))
    try:
        rekeyed = parse_rekeyed(args.rekeyed)
        try:
            with open(path, encoding="utf-8", newline="") as f:
                text = f.read()
        except OSError as e:
            raise Unusable(f"--approvals {path}: {e.strerror}")
        try:
            doc = json.loads(text)
        except ValueError as e:
            raise Unusable(f"{path}: not JSON ({e})")
        if not isinstance(doc, dict) or doc.get("format") != "normgate-approvals/1" \
                or not isinstance(doc.get("approvals"), list):
            raise Unusable(f"{path}: not an approvals file (format normgate-approvals/1)")
        reports = []
        for p in args.reports:
            try:
                with open(p, encoding="utf-8") as f:
                    rep = json.load(f)
            except (OSError, ValueError) as e:
                raise Unusable(f"{p}: cannot read a gate report ({e})")
            try:
                format_version(rep, ("normgate-gate-report",))
            except ValueError as e:
                raise Unusable(f"{p}: {e}")
            if not isinstance(rep, dict) or not isinstance(rep.get("windows"), list):
                raise Unusable(f"{p}: not a gate report (no windows list)")
            reports.append((p, rep))
        if normgate_text(doc) != text:
            raise Refused(f"{path} is not in the form normgate writes (sorted keys, 2-space indentation): "
                          "rewriting it would move other bytes")
        new, done = backfill(doc, reports, rekeyed, args.max_delay_s)
        check_unchanged(doc, new)
    except Refused as e:
        print(f"backfill_approval_strength: refused: {e}; nothing written", file=sys.stderr)
        return 1
    except Unusable as e:
        print(f"backfill_approval_strength: {e}", file=sys.stderr)
        return 2
    kept = len(doc["approvals"]) - len(done)
    print(f"{path}: {len(done)} records given their campaign strength, {kept} already had it")
    for d, p in done:
        print(f"  {d}: from {p}")
    if args.dry_run or not done:
        if args.dry_run:
            print("dry run: nothing written")
        return 0
    try:
        write_atomic(path, normgate_text(new))
    except OSError as e:
        print(f"backfill_approval_strength: cannot write {path}: {e.strerror}; nothing written", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
