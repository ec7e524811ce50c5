"""tools/grid_summary.py on a small synthetic log (no GPU): the table, a NaN
dw ranked worst, malformed case lines skipped and counted, unreadable logs
exit 2 naming them. Runs under pytest or as a script."""
import os
import subprocess
import sys
import tempfile

TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "grid_summary.py")
LOG = ("[1/4 0.5s] H=64,T=3,w=bf16,form=plain,family=normal,seed=0  bwd_det_chunked:pass(dw 0.155)\n"
       "[2/4 0.5s] H=64,T=3,w=bf16,form=plain,family=normal,seed=1  bwd_det_chunked:FAIL(dw nan)\n"
       "[3/4 0.5s] H=64,T=3,w=bf16,form=plain,family=cancel,seed=0  bwd_det_chunked:pass(dw 0.25)\n"
       "[4/4 0.5s] H=64,T=3  bwd_det_chunked:pass(dw 0.1)\n"
       "[4/4 0.5s] H=64,family=llm  x:pass(dw abc)\n"
       "[4/4 1.2.3s] H=64,T=3,w=bf16,form=plain,family=llm,seed=0  x:pass(dw 0.1)\n"
       "not a case line\n")


def run(*args):
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)


def test_table_nan_and_bad_lines():
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "g.log")
        open(p, "w").write(LOG)
        r = run(p)
        assert r.returncode == 0, r.stderr
        assert "| bwd_det_chunked | normal | 2 | 1 | nan | H=64,T=3,w=bf16,form=plain,family=normal,seed=1 |" \
            in r.stdout, r.stdout
        assert "| bwd_det_chunked | cancel | 1 | 0 | 0.25 |" in r.stdout
        assert "3 malformed case line(s) skipped (no family=, or a dw or time that is not a number)" in r.stderr
        for bad in (os.path.join(d, "none.log"), d):
            r = run(bad)
            assert r.returncode == 2 and f"cannot read {bad!r}" in r.stderr, r.stderr
        assert run().returncode == 2


if __name__ == "__main__":
    test_table_nan_and_bad_lines()
    print("test_grid_summary: ok")
