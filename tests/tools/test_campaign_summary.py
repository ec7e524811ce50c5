"""tools/campaign_summary.py on stored H200 gate reports (no GPU, no torch):
one row per window, the latest report of a re-gated window wins, the values
are the report's, mixed kernel versions are flagged, a non-report exits 2 and
a failing window exits 1. Runs under pytest or as a script."""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TOOL = os.path.join(ROOT, "tools", "campaign_summary.py")
R = os.path.join(ROOT, "docs", "results")
V2_HEADS4 = os.path.join(R, "campaigns", "superseded", "forms-v2", "slice-3.json")   # heads4 on the kernels of 44a0781
V3_HEADS4 = os.path.join(R, "campaigns", "v3-forms", "slice-1.json")   # heads4 bf16, re-gated on 48e338b
V3_HEADS4F = os.path.join(R, "campaigns", "v3-forms", "slice-2.json")
V2_RES = os.path.join(R, "campaigns", "superseded", "forms-v2", "slice-1.json")


def run(*args):
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)


def row_of(md, window):
    return next(ln for ln in md.splitlines() if f"| {window} |" in ln)


def test_latest_report_wins_and_values_are_the_reports():
    r = run(V2_HEADS4, V3_HEADS4, V3_HEADS4F, V2_RES)
    assert r.returncode == 0, r.stderr
    md = r.stdout
    v3 = json.load(open(V3_HEADS4))
    w = next(x for x in v3["windows"] if x["window"].startswith("bwd det"))
    line = row_of(md, w["window"])
    assert "campaigns/v3-forms/slice-1.json" in line and w["source_sha256"][:12] in line
    assert f"| {w['outputs']['dw']['max_err_tol']:.3g} |" in line and f"| {w['cases']} |" in line
    # heads4 (6 windows, v3 wins) + res (6): 12 rows, the 6 older heads4 rows superseded.
    assert md.count("\n| sm90a.toml:") == 12
    assert md.count("in `" + V2_HEADS4) == 6
    # v2 res and v3 heads4 ran different kernels: flagged.
    assert "**Mixed kernel versions**: " in md and "bwd_det_chunked gated at" in md


def test_single_version_is_not_flagged_and_errors_exit_nonzero():
    r = run(V3_HEADS4, V3_HEADS4F)
    assert r.returncode == 0 and "Mixed kernel versions" not in r.stdout
    assert "Windows: 6 of 6 pass" in r.stdout
    with tempfile.TemporaryDirectory() as d:
        bad = os.path.join(d, "bad.json")
        json.dump({"rows": []}, open(bad, "w"))
        r = run(bad)
        assert r.returncode == 2 and "not a normgate gate report" in r.stderr
        failing = json.load(open(V3_HEADS4))
        failing["windows"][0]["pass"] = False
        failing["windows"][0]["verdict"] = "fail"
        f = os.path.join(d, "fail.json")
        json.dump(failing, open(f, "w"))
        out = os.path.join(d, "s.md")
        r = run(f, "--md", out)
        assert r.returncode == 1 and "Windows: 2 of 3 pass" in open(out).read()



def test_table_lists_the_routes_no_report_covers():
    if sys.version_info < (3, 11):  # tomllib
        r = run(V3_HEADS4, "--table", os.path.join(ROOT, "routes", "sm90a.toml"))
        assert r.returncode == 2 and "needs Python 3.11" in r.stderr
        return
    with tempfile.TemporaryDirectory() as d:
        # A table of three routes: the two heads4 bf16 ones the report gated and one it did not.
        t = os.path.join(d, "t.toml")
        open(t, "w").write(
            'arch = "sm90a"\nroute = [\n'
            '  { op = "fwd", H = 256, w = "bf16", form = "heads4", T = [1, 131072], variant = "fwd_rowwise" },\n'
            '  { op = "bwd", mode = "det", H = 256, w = "bf16", form = "heads4", T = [1, 131072], '
            'variant = "bwd_det_chunked" },\n'
            '  { op = "bwd", mode = "det", H = 512, w = "bf16", form = "plain", T = [1, 64], '
            'variant = "bwd_det_chunked" },\n]\n')
        r = run(V3_HEADS4, "--table", t)
        assert r.returncode == 1, r.stderr  # every gated window passes, one route is not gated
        line = row_of(r.stdout, "bwd det H=512 w=bf16 form=plain T=1..64")
        assert line.startswith("| t.toml:5 |") and "| not gated |" in line
        assert "**Not gated**: 1 of the table's 3 routes" in r.stdout
        # Without the uncovered route: exit 0, no 'not gated' row.
        kept = open(t).read().splitlines()[:4]
        open(t, "w").write("\n".join(kept) + "\n]\n")
        r = run(V3_HEADS4, "--table", t)
        assert r.returncode == 0 and "not gated" not in r.stdout, r.stdout + r.stderr
        open(t, "w").write("route = [ { op = ")
        r = run(V3_HEADS4, "--table", t)
        assert r.returncode == 2 and "t.toml" in r.stderr


def test_report_format_versions():
    # The committed reports predate "format" (version 0, accepted); a report
    # naming normgate-gate-report/1 or /2 reads the same; a newer major version, or
    # another kind of document, exits 2 naming the format.
    with tempfile.TemporaryDirectory() as d:
        rep = json.load(open(V3_HEADS4))
        assert "format" not in rep
        want = run(V3_HEADS4).stdout
        for fmt, code in (("normgate-gate-report/1", 0), ("normgate-gate-report/2", 0), ("normgate-gate-report/3", 2),
                          ("normgate-check-report/1", 2), ("normgate-gate-report", 2),
                          ("normgate-gate-report/2\n", 2)):  # as the C++ reader: no trailing newline
            rep["format"] = fmt
            p = os.path.join(d, "r.json")
            json.dump(rep, open(p, "w"))
            r = run(p)
            assert r.returncode == code, (fmt, r.returncode, r.stderr)
            if code == 0:
                assert r.stdout.replace(p, V3_HEADS4).replace("r.json", "slice-1.json") == want
            else:
                assert repr(fmt) in r.stderr and "normgate-gate-report/2" in r.stderr, r.stderr


def test_infinite_err_tol_inconclusive_and_bad_outputs():
    rep = json.load(open(V3_HEADS4))
    w = rep["windows"][0]
    # A kernel that returned NaN: the report spells err/tol "inf" (docs/schemas.md).
    w["outputs"]["y"]["max_err_tol"] = "inf"
    w["worst"] = dict(w.get("worst") or {}, err_tol="inf", output="y")
    w["pass"], w["verdict"] = False, "fail"
    # pass true beside verdict inconclusive: not a pass.
    rep["windows"][1]["pass"], rep["windows"][1]["verdict"] = True, "inconclusive"
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "r.json")
        json.dump(rep, open(p, "w"))
        r = run(p)
        assert r.returncode == 1, r.stderr
        assert "| inf |" in row_of(r.stdout, w["window"])
        assert "Worst over a budget: y err/tol inf" in r.stdout and "below it" not in r.stdout
        n = len(rep["windows"])
        assert f"Windows: {n - 2} of {n} pass" in r.stdout
        # --md: a folder, an input, and a report without window names: exit 2, nothing written.
        assert run(p, "--md", d).returncode == 2
        r = run(p, "--md", p)
        assert r.returncode == 2 and "is the input" in r.stderr, r.stderr
        r = run(p, "--md", "-")
        assert r.returncode == 2 and "give a file" in r.stderr and not os.path.exists("-"), r.stderr
        fifo = os.path.join(d, "fifo.md")
        os.mkfifo(fifo)
        r = run(p, "--md", fifo)
        assert r.returncode == 2 and "not a regular file" in r.stderr, r.stderr
        os.unlink(fifo)
        assert json.load(open(p))["windows"][0]["window"] == w["window"]
        bad = os.path.join(d, "bad.json")
        for edit, needle in ((lambda x: x["windows"].append({}), "has no window name"),
                             (lambda x: x.__setitem__("device", "H200"), "device 'H200' is not an object"),
                             (lambda x: x["windows"][0].__setitem__("outputs", {"y": 5}), "outputs or worst malformed"),
                             (lambda x: x["windows"][0].__setitem__("worst", 5), "outputs or worst malformed"),
                             (lambda x: x["windows"][0].__setitem__("cases", 1e400), "is not a count")):
            bad_rep = json.loads(json.dumps(rep))
            edit(bad_rep)
            open(bad, "w").write(json.dumps(bad_rep).replace("1e+400", "1e400").replace("Infinity", "1e400"))
            r = run(bad)
            assert r.returncode == 2 and needle in r.stderr, (needle, r.stderr)
        open(bad, "w").write("[" * 100000)
        r = run(bad)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-300:]
        # A written summary is readable by others (not mkstemp's 0600).
        out = os.path.join(d, "s.md")
        run(p, "--md", out)
        m = os.umask(0)
        os.umask(m)
        assert os.stat(out).st_mode & 0o777 == 0o666 & ~m
        # A NaN worst in the first window stays the worst whatever follows.
        w["worst"]["err_tol"] = "nan"
        json.dump(rep, open(p, "w"))
        r = run(p)
        assert "Worst over a budget: y err/tol nan" in r.stdout and "below it" not in r.stdout, r.stdout[-400:]

if __name__ == "__main__":
    test_report_format_versions()
    test_latest_report_wins_and_values_are_the_reports()
    test_single_version_is_not_flagged_and_errors_exit_nonzero()
    test_table_lists_the_routes_no_report_covers()
    test_infinite_err_tol_inconclusive_and_bad_outputs()
    print("test_campaign_summary: ok")
