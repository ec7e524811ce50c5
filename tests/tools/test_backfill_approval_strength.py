"""tools/backfill_approval_strength.py on the committed approvals and gate
reports: with the strength fields stripped from the 68 campaign approvals
(tests/data/routes/sm90a-backfilled.approvals.json),
the documented command gives the committed file back byte for byte; a record
no report approved, or two reports approving one record, refuses the whole
run (exit 1) and writes nothing; a file with strength is left as it is;
usage errors exit 2.
Runs under pytest or as `python3 tests/tools/test_backfill_approval_strength.py`."""
import glob
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TOOL = os.path.join(ROOT, "tools", "backfill_approval_strength.py")
# The 68 campaign approvals as the backfill left them (routes/sm90a.approvals.json
# has since gained the approvals of `normgate derive`, which carry their strength).
COMMITTED = os.path.join(ROOT, "tests", "data", "routes", "sm90a-backfilled.approvals.json")
REPORTS = sorted(glob.glob(os.path.join(ROOT, "docs", "results", "campaigns", "v3-*", "slice-*.json")))
# The re-keying of 7447ac2 (tools/rekey_approvals.py, comment-only changes).
REKEYED = ["--rekeyed", "7abc6c64958f=2c28615aaf93", "--rekeyed", "30bbf29d3fe5=b038934828f6",
           "--rekeyed", "052d641605ca=a9fe90a57109"]
STRENGTH = ("t_per_window", "dense_points", "dense_step", "dense_seeds", "fresh_factor", "fresh_seeds", "oracle",
            "dw_vs_fp32_worst")


def run(*args):
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)


def read(p):
    with open(p, encoding="utf-8", newline="") as f:
        return f.read()


def stripped_copy(d, edit=None):
    """The committed approvals without strength fields (as before the backfill), in d."""
    doc = json.loads(read(COMMITTED))
    for a in doc["approvals"]:
        for k in STRENGTH:
            a.pop(k, None)
    if edit:
        edit(doc)
    p = os.path.join(d, "a.approvals.json")
    with open(p, "w", encoding="utf-8", newline="") as f:
        f.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return p


def test_committed_backfill_is_reproduced_byte_for_byte():
    committed = json.loads(read(COMMITTED))
    assert len(committed["approvals"]) == 68
    # Every committed record carries strength; backward ones their dw vs FP32.
    for a in committed["approvals"]:
        assert a["t_per_window"] == 8 and a["dense_points"] == 16 and a["dense_step"] == 64, a["window"]
        assert a["fresh_factor"] == 2 and a["oracle"] == "auto" and a["dense_seeds"] == "worst", a["window"]
        assert a["fresh_seeds"].endswith(":16..47"), a["fresh_seeds"]
        assert ("dw_vs_fp32_worst" in a) == (a["window"]["op"] == "bwd"), a["window"]
    with tempfile.TemporaryDirectory() as d:
        p = stripped_copy(d)
        assert "t_per_window" not in read(p)
        r = run("--approvals", p, *REKEYED, *REPORTS)
        assert r.returncode == 0, r.stderr
        assert "68 records given their campaign strength, 0 already had it" in r.stdout, r.stdout
        assert read(p) == read(COMMITTED)
        # A second run finds nothing to do and leaves the bytes.
        r = run("--approvals", p, *REKEYED, *REPORTS)
        assert r.returncode == 0, r.stderr
        assert "0 records given their campaign strength, 68 already had it" in r.stdout, r.stdout
        assert read(p) == read(COMMITTED)


def test_unmatched_or_ambiguous_records_refuse_everything():
    with tempfile.TemporaryDirectory() as d:
        # Without the re-key pairs no source hash matches: refused, nothing written.
        p = stripped_copy(d)
        before = read(p)
        r = run("--approvals", p, *REPORTS)
        assert r.returncode == 1, r.stdout + r.stderr
        assert "no report window approved it" in r.stderr and "nothing written" in r.stderr, r.stderr
        assert read(p) == before

    def bump_cases(doc):  # one record's numbers differ from every report
        doc["approvals"][5]["cases"] += 1

    with tempfile.TemporaryDirectory() as d:
        p = stripped_copy(d, bump_cases)
        before = read(p)
        r = run("--approvals", p, *REKEYED, *REPORTS)
        assert r.returncode == 1, r.stdout + r.stderr
        assert r.stderr.count("no report window approved it") == 1, r.stderr
        assert read(p) == before  # the 67 matching records are not written either

    def late(doc):  # an approval written two hours after its report
        doc["approvals"][0]["date"] = "2026-12-01T05:03:23Z"

    with tempfile.TemporaryDirectory() as d:
        p = stripped_copy(d, late)
        r = run("--approvals", p, *REKEYED, *REPORTS)
        assert r.returncode == 1 and "no report window approved it" in r.stderr, r.stderr
        r = run("--approvals", p, "--max-delay-s", "7300", *REKEYED, *REPORTS)
        assert r.returncode == 0, r.stderr

    with tempfile.TemporaryDirectory() as d:
        # The same report twice: every record of it has two matches.
        p = stripped_copy(d)
        dup = os.path.join(d, "dup.json")
        with open(dup, "w") as f:
            f.write(read(REPORTS[0]))
        r = run("--approvals", p, *REKEYED, *REPORTS, dup)
        assert r.returncode == 1 and "several report windows match" in r.stderr, r.stderr


def test_files_not_in_normgate_form_and_usage_errors():
    with tempfile.TemporaryDirectory() as d:
        p = stripped_copy(d)
        doc = json.loads(read(p))
        with open(p, "w") as f:
            f.write(json.dumps(doc, indent=4, sort_keys=True) + "\n")
        before = read(p)
        r = run("--approvals", p, *REKEYED, *REPORTS)
        assert r.returncode == 1 and "not in the form normgate writes" in r.stderr, r.stderr
        assert read(p) == before
        assert run("--approvals", p, "--rekeyed", "abc=def", *REPORTS).returncode == 2
        assert run("--approvals", os.path.join(d, "missing.json"), *REPORTS).returncode == 2
        assert run("--approvals", p, os.path.join(d, "no-report.json")).returncode == 2
        assert run("--approvals", p).returncode == 2  # no reports


if __name__ == "__main__":
    test_committed_backfill_is_reproduced_byte_for_byte()
    test_unmatched_or_ambiguous_records_refuse_everything()
    test_files_not_in_normgate_form_and_usage_errors()
    print("test_backfill_approval_strength: ok")
