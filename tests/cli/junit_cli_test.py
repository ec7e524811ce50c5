"""`normgate gate --report-junit` and reports to stdout, as a user runs them
(CPU models, a table whose path needs XML escaping, a negative control so
that a <failure> is really produced): the JUnit XML parses (xml.etree) and
agrees with the JSON report; `--report-json -` leaves stdout pure JSON with
the human output on stderr; two reports to stdout, or an unwritable report
path, are refused before any work (exit 2); `repro --from-report` accepts the
versioned report, notes an unversioned one and refuses an unknown major
version.

Usage: junit_cli_test.py NORMGATE (ctest's junit_cli). Prints "ok" or fails
with an assertion."""
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

NG = sys.argv[1] if len(sys.argv) > 1 else "build/apps/normgate"
FAST = ["--backend", "cpu", "--threads", "1", "--seeds", "3x1", "--t-per-window", "4", "--dense-points", "2",
        "--allow-controls"]
TABLE = """arch = "sm90a"
route = [
  { op = "bwd", mode = "det", H = 64, w = "bf16", form = "plain", T = [1, 600], variant = "ctl_fp32_seq" },
  { op = "bwd", mode = "nondet", H = 64, w = "bf16", form = "plain", T = [1, 600], variant = "bwd_nondet_atomic" },
  { op = "fwd", H = 64, w = "bf16", form = "plain", T = [1, 600], variant = "fwd_rowwise" },
]
"""


def run(*args):
    return subprocess.run([NG, *args], capture_output=True, text=True)


def main():
    with tempfile.TemporaryDirectory() as d:
        table = os.path.join(d, "r&d <ctl> 'x'.toml")
        with open(table, "w") as f:
            f.write(TABLE)
        junit, journal = os.path.join(d, "j.xml"), os.path.join(d, "j.jsonl")

        # Refused before any work: two reports to stdout; a report in a missing folder.
        r = run("gate", table, *FAST, "--report-json", "-", "--report-junit", "-")
        assert r.returncode == 2 and "--report-json - and --report-junit - : only one report" in r.stderr, r.stderr
        assert r.stdout == "" and "gate " not in r.stderr, (r.stdout, r.stderr)
        r = run("gate", table, *FAST, "--report-junit", os.path.join(d, "no", "j.xml"))
        assert r.returncode == 2 and "no/j.xml" in r.stderr and "does not exist" in r.stderr, r.stderr
        # Two outputs on one file (a report over the journal would lose the
        # resume), a folder as a report or journal: refused before any work.
        r = run("gate", table, *FAST, "--journal", journal, "--report-json", journal)
        assert r.returncode == 2 and "--journal '%s' and --report-json '%s' name one file" % (journal, journal) in r.stderr, r.stderr
        r = run("gate", table, *FAST, "--report-md", junit, "--report-junit", junit)
        assert r.returncode == 2 and "--report-md '%s' and --report-junit '%s' name one file" % (junit, junit) in r.stderr, r.stderr
        for opt in ("--report-json", "--journal"):
            r = run("gate", table, *FAST, opt, d)
            assert r.returncode == 2 and "it is a folder" in r.stderr, (opt, r.stderr)
        assert not os.path.exists(journal) and not os.path.exists(junit)

        r = run("gate", table, *FAST, "--journal", journal, "--report-junit", junit, "--report-json", "-")
        assert r.returncode == 1, (r.returncode, r.stderr)
        rep = json.loads(r.stdout)  # stdout is the JSON report alone
        assert rep["format"] == "normgate-gate-report/2"
        assert "verdict  FAIL: 2 of 3 windows pass (backend cpu-model)" in r.stderr, r.stderr
        assert "| window | variant |" in r.stderr  # the Markdown report, on stderr

        root = ET.parse(junit).getroot()
        assert root.tag == "testsuites"
        suites = root.findall("testsuite")
        assert len(suites) == 1 and suites[0].get("name") == table, [s.get("name") for s in suites]
        s = suites[0]
        for e in (root, s):
            assert (e.get("tests"), e.get("failures"), e.get("errors"), e.get("skipped")) == ("3", "1", "0", "0")
            assert float(e.get("time")) > 0
        props = {p.get("name"): p.get("value") for p in s.find("properties")}
        assert props["backend"] == "cpu-model" and props["seeds"] == rep["seeds"], props
        cases = s.findall("testcase")
        assert [c.get("classname") for c in cases] == ["normgate.bwd.det", "normgate.bwd.nondet", "normgate.fwd"]
        total = 0.0
        for c, w in zip(cases, rep["windows"]):
            assert c.get("name") == w["window"] + " -> " + w["variant"], (c.get("name"), w["window"])
            assert c.get("file") == w["route"], (c.get("file"), w["route"])
            total += float(c.get("time"))
            assert (c.find("failure") is None) == w["pass"], (c.get("name"), w["pass"])
            assert c.find("error") is None
        assert abs(total - float(s.get("time"))) < 0.01, (total, s.get("time"))
        fail = cases[0].find("failure")
        w = rep["windows"][0]
        assert w["variant"] == "ctl_fp32_seq" and not w["pass"]
        assert fail.get("type") == "over budget"
        want = "%s err/tol %.4g > 1 in case %s" % (w["worst"]["output"], w["worst"]["err_tol"], w["worst"]["case"])
        assert fail.get("message").startswith(want), (fail.get("message"), want)
        assert "family=cancel" in w["worst"]["case"] and w["worst"]["err_tol"] > 1
        assert "repro: normgate repro '%s' --variant ctl_fp32_seq" % w["worst"]["case"] in fail.text, fail.text

        # Resumed from the journal, the JUnit report to stdout: pure XML, same verdicts.
        r = run("gate", table, *FAST, "--journal", journal, "--report-junit", "-", "--quiet")
        assert r.returncode == 1, r.stderr
        again = ET.fromstring(r.stdout)
        assert [c.find("failure") is not None for c in again.iter("testcase")] == [True, False, False]
        assert "verdict  FAIL" in r.stderr

        # repro --from-report: versioned report read; unversioned noted; /3 refused.
        p = os.path.join(d, "rep.json")
        for fmt, code, text in ((None, 0, "has no \"format\" field"), ("normgate-gate-report/3", 2,
                                "\"normgate-gate-report/3\": major version 3 is unknown")):
            doc = dict(rep)
            if fmt is None:
                del doc["format"]
            else:
                doc["format"] = fmt
            with open(p, "w") as f:
                json.dump(doc, f)
            r = run("repro", "--from-report", p, "--window", "1", "--backend", "cpu", "--k", "1")
            assert r.returncode == code, (fmt, r.returncode, r.stdout, r.stderr)
            assert text in r.stdout + r.stderr, (fmt, r.stdout, r.stderr)
    print("ok")


if __name__ == "__main__":
    main()
