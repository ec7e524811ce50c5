"""tools/journal_summary.py on a stored campaign journal (no GPU, no torch):
the table, and bad input refused with exit 2 before anything is written: an
--md over the journal itself, an empty or truncated journal, a missing
value. Runs under pytest or as a script."""
import gzip
import os
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TOOL = os.path.join(ROOT, "tools", "journal_summary.py")
J = os.path.join(ROOT, "docs", "results", "campaigns", "v3-forms", "slice-1.jsonl.gz")


def run(*args):
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)


def test_table_and_case_count():
    r = run(J)
    assert r.returncode == 0, r.stderr
    lines = gzip.open(J, "rt").read().splitlines()
    assert f": {len(lines) - 1} case lines;" in r.stdout
    assert "| H | w | form | impl | cases |" in r.stdout
    with tempfile.TemporaryDirectory() as d:
        # A blank line is no case.
        p = os.path.join(d, "j.jsonl")
        open(p, "w").write("\n".join(lines[:3] + [""] + lines[3:]) + "\n")
        r = run(p)
        assert r.returncode == 0 and f": {len(lines) - 1} case lines;" in r.stdout, r.stdout[:300]
        out = os.path.join(d, "s.md")
        r = run(p, "--md", out)
        assert r.returncode == 0 and open(out).read() + "\n" == r.stdout


def test_bad_input_exits_2_and_writes_nothing():
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "j.jsonl")
        body = gzip.open(J, "rt").read()
        open(p, "w").write(body)
        r = run(p, "--md", p)  # the journal itself: refused, journal intact
        assert r.returncode == 2 and "is the journal itself" in r.stderr, r.stderr
        assert open(p).read() == body
        r = run(p, "--md", d)
        assert r.returncode == 2 and "is not a file name" in r.stderr, r.stderr
        r = run(p, "--md")
        assert r.returncode == 2 and "expected one argument" in r.stderr, r.stderr
        r = run(p, "extra")
        assert r.returncode == 2 and "unrecognized arguments" in r.stderr, r.stderr
        empty = os.path.join(d, "empty.jsonl")
        open(empty, "w").close()
        r = run(empty)
        assert r.returncode == 2 and "the file is empty" in r.stderr, r.stderr
        cut = os.path.join(d, "cut.jsonl.gz")
        open(cut, "wb").write(open(J, "rb").read()[:2000])
        r = run(cut)
        assert r.returncode == 2 and "cannot read journal" in r.stderr, r.stderr
        assert sorted(os.listdir(d)) == ["cut.jsonl.gz", "empty.jsonl", "j.jsonl"]


if __name__ == "__main__":
    test_table_and_case_count()
    test_bad_input_exits_2_and_writes_nothing()
    print("test_journal_summary: ok")
