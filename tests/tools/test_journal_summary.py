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
        assert r.returncode == 2 and "is the input" in r.stderr, r.stderr
        assert open(p).read() == body
        r = run(p, "--md", d)
        assert r.returncode == 2 and "is a folder" in r.stderr, r.stderr
        for bad in ("-", ""):
            r = run(p, "--md", bad)
            assert r.returncode == 2 and "give a file" in r.stderr, r.stderr
        fifo = os.path.join(d, "fifo.md")
        os.mkfifo(fifo)
        r = run(p, "--md", fifo)
        assert r.returncode == 2 and "not a regular file" in r.stderr, r.stderr
        os.unlink(fifo)
        # A link is written through (its target made), never replaced.
        os.symlink(os.path.join(d, "target.md"), os.path.join(d, "link.md"))
        assert run(p, "--md", os.path.join(d, "link.md")).returncode == 0
        assert os.path.islink(os.path.join(d, "link.md")) and os.path.isfile(os.path.join(d, "target.md"))
        os.unlink(os.path.join(d, "link.md"))
        os.unlink(os.path.join(d, "target.md"))
        # Malformed records (a format-1 journal: no digests) are skipped and named, never a traceback.
        f1 = os.path.join(d, "f1.jsonl")
        head = '{"normgate_journal": 1, "campaign": 5}'
        rec = '{"case": "H=64,T=3,w=bf16,form=plain,family=normal,seed=0", "impls": ["v"], "results": %s}'
        open(f1, "w").write("\n".join([head, rec % '"zz"', rec % '[{"impl": "v", "y": null}]',
                                        rec % '[{"impl": "v"}]', "[" * 100000]) + "\n")
        r = run(f1)
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-500:]
        assert r.stderr.count("malformed results skipped") == 3 and "f1.jsonl:5: torn or bad line" in r.stderr
        os.unlink(f1)
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
        assert sorted(os.listdir(d)) == ["cut.jsonl.gz", "empty.jsonl", "j.jsonl"], os.listdir(d)


def test_format3_chain():
    """Format 3: each record's "prev" is the seal of the line before it; a
    record repeated or moved keeps its own seal but is skipped and named."""
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import journal_seal
    os.environ.pop(journal_seal.ENV, None)
    lines = [journal_seal.seal('{"campaign":{"seeds":"normal:0..2"},"normgate_journal":3}')]
    for seed in range(3):
        rec = ('{"case":"H=64,T=3,w=bf16,form=plain,family=normal,seed=%d","impls":["v"],"prev":"%s",'
               '"results":[{"impl":"v","ran_on":"cpu model","y":%s,"rstd":%s,"dx":%s,"dw":%s}],"seconds":0.5}'
               % (seed, journal_seal.seal_of(lines[-1]), *(["[0.25,7,0,0.125,true]"] * 4)))
        lines.append(journal_seal.seal(rec))
    assert all(journal_seal.body(x) for x in lines)
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "j3.jsonl")
        open(p, "w").write("\n".join(lines) + "\n")
        r = run(p)
        assert r.returncode == 0 and "| 64 | bf16 | plain | v | 3 | 0 | 0 |" in r.stdout and not r.stderr, r
        # The last record repeated: left out, exit 1 (the gate refuses the journal).
        open(p, "w").write("\n".join(lines + [lines[-1]]) + "\n")
        r = run(p)
        assert r.returncode == 1 and "| 64 | bf16 | plain | v | 3 | 0 | 0 |" in r.stdout, r
        assert "j3.jsonl:5: its \"prev\" is not the seal of line 4" in r.stderr, r.stderr
        assert "4 case lines (1 left out: a failed seal or chain)" in r.stdout, r.stdout
        # Two swapped: the chain ends at line 2; nothing after it counts, not
        # even the later lines that chain onto the swapped ones.
        open(p, "w").write("\n".join([lines[0], lines[2], lines[3], lines[1]]) + "\n")
        r = run(p)
        assert r.returncode == 1 and r.stderr.count('its "prev" is not the seal') == 1, r.stderr
        assert "j3.jsonl:2:" in r.stderr and "| 64 |" not in r.stdout, r
        # A changed record: the chain ends there, the lines after it are not
        # counted though they chain onto it as written.
        changed = lines[:2] + [lines[2].replace("0.25,7", "0.5,7", 1)] + lines[3:]
        open(p, "w").write("\n".join(changed) + "\n")
        r = run(p)
        assert r.returncode == 1 and "j3.jsonl:3: torn or bad line" in r.stderr, r.stderr
        assert "| 64 | bf16 | plain | v | 1 | 0 | 0 |" in r.stdout, r.stdout
        # A torn last line (no seal yet) is a run cut mid-write: left out, exit 0,
        # also when the cut falls inside a UTF-8 character.
        open(p, "w").write("\n".join(lines) + "\n" + lines[3][:40])
        r = run(p)
        assert r.returncode == 0 and "a torn last line" in r.stderr and "| v | 3 |" in r.stdout, r
        open(p, "wb").write(("\n".join(lines) + "\n").encode() + b'{"case":"caf\xc3')
        r = run(p)
        assert r.returncode == 0 and "a torn last line" in r.stderr and "| v | 3 |" in r.stdout, r
        # A whole last line with bytes glued on where its newline belongs (or
        # NULs) is not a torn write: exit 1, as the gate refuses it; the same
        # with a changed digest is named as such.
        for glue in ("xyz", "\0\0"):
            open(p, "w").write("\n".join(lines) + glue)
            r = run(p)
            assert r.returncode == 1 and "j3.jsonl:4: a complete line is followed by" in r.stderr, (glue, r)
            assert "a torn last line" not in r.stderr, r.stderr
        open(p, "w").write("\n".join(lines[:3] + [lines[3].replace("0.25,7", "0.5,7", 1)]) + "xyz")
        r = run(p)
        assert r.returncode == 1 and "j3.jsonl:4: a whole line whose digest does not match" in r.stderr, r
        # The same bytes with their newline are a whole line that fails: exit 1.
        open(p, "w").write("\n".join(lines) + "\n" + lines[3][:40] + "\n")
        r = run(p)
        assert r.returncode == 1 and "j3.jsonl:5: torn or bad line" in r.stderr, r.stderr
        # A blank (or form-feed) line with records after it ends the chain, as
        # the gate refuses it; blank lines at the end are formatting.
        for blank in ("", "\f"):
            open(p, "w").write("\n".join(lines[:2] + [blank] + lines[2:]) + "\n")
            r = run(p)
            assert r.returncode == 1 and "j3.jsonl:3:" in r.stderr and "| v | 1 |" in r.stdout, (blank, r)
        open(p, "w").write("\n".join(lines) + "\n\n \t\n")
        r = run(p)
        assert r.returncode == 0 and "| v | 3 |" in r.stdout and not r.stderr, r
        # Forward-only records (no dx, dw) are counted, their dx and dw "-".
        fwd = [lines[0]]
        for seed in range(2):
            rec = ('{"case":"H=64,T=3,w=bf16,form=plain,family=normal,seed=%d","impls":["v"],"outputs":"fwd",'
                   '"prev":"%s","results":[{"impl":"v","ran_on":"cpu model","y":[0.5,1,0,0.5,true],'
                   '"rstd":[0.25,0,0,0.25,true]}],"seconds":0.5}' % (seed, journal_seal.seal_of(fwd[-1])))
            fwd.append(journal_seal.seal(rec))
        open(p, "w").write("\n".join(fwd) + "\n")
        r = run(p)
        assert r.returncode == 0 and "| 64 | bf16 | plain | v | 2 | 0 | 0 | 3..3 | 0.5 | 0.25 | - | - | - |" in r.stdout, r


def test_worst_dw_case_is_a_full_case_id():
    """The "worst dw case" column holds a whole case id, H= first, as
    `normgate check --case` and `repro` take it (it once dropped the H= term);
    a record without form= gets form=plain."""
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "f1.jsonl")
        rec = '{"case": "%s", "impls": ["v"], "results": [{"impl": "v", "y": [0.5,1,0,0.5,true], ' \
              '"rstd": [0.25,0,0,0.25,true], "dx": [0.5,1,0,0.5,true], "dw": [%s,1,0,0.5,true]}]}'
        open(p, "w").write("\n".join([
            '{"normgate_journal": 1, "campaign": {}}',
            rec % ("H=64,T=3,w=bf16,form=plain,family=normal,seed=0", "0.125"),
            rec % ("H=64,T=383,w=bf16,form=plain,family=cancel,seed=2,kappa=100", "0.5"),
            rec % ("H=128,T=5,w=fp32,family=llm,seed=1", "0.25")]) + "\n")
        r = run(p)
        assert r.returncode == 0 and not r.stderr, r
        rows = [x for x in r.stdout.splitlines() if x.startswith("| 64 |") or x.startswith("| 128 |")]
        assert len(rows) == 2, r.stdout
        assert rows[0].endswith(" | H=64,T=383,w=bf16,form=plain,family=cancel,seed=2,kappa=100 |"), rows
        assert rows[1].endswith(" | H=128,T=5,w=fp32,form=plain,family=llm,seed=1 |"), rows
    # A stored campaign: every worst dw case names H, T, w, form, family and seed.
    r = run(J)
    assert r.returncode == 0, r.stderr
    cells = [x.rstrip(" |").rsplit(" | ", 1)[1] for x in r.stdout.splitlines() if x.startswith("| ") and "---" not in x]
    cells = [c for c in cells[1:] if c != "-"]  # [0]: the header
    assert cells, r.stdout
    for c in cells:
        keys = [kv.split("=", 1)[0] for kv in c.split(",")]
        assert keys[:6] == ["H", "T", "w", "form", "family", "seed"], c


if __name__ == "__main__":
    test_table_and_case_count()
    test_bad_input_exits_2_and_writes_nothing()
    test_format3_chain()
    test_worst_dw_case_is_a_full_case_id()
    print("test_journal_summary: ok")
