#!/usr/bin/env python3
"""tools/oracle_ab.py with stub builds (no GPU, seconds): its refusals (exit 2,
nothing created), the alternation and the table of each tool from the runs'
own outputs (oracle_scaling.sh and gate_throughput.sh run for real on stub
executables), a failing build (exit 3), and the deadline."""
import json
import os
import stat
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AB = os.path.join(ROOT, "tools", "oracle_ab.py")
fails = []


def check(cond, what):
    if not cond:
        fails.append(what)
        print("FAIL:", what)


def write_exe(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


# finish_bench's lines as oracle_scaling.sh reads them; CaseOracle ns per
# element = SCALE / threads, validation 3x that, times 1 + DRIFT after the
# build's first two calls (its first round); each call appends to CALLS.
FB = """#!/bin/sh
n=$(grep -cx "$BUILD_NAME" "{calls}" 2>/dev/null)
echo "$BUILD_NAME" >>"{calls}"
t=$4
co=$(awk -v s={scale} -v t="$t" -v n="$n" -v d={drift} 'BEGIN {{ printf "%.2f", s / t * (n >= 2 ? 1 + d : 1) }}')
cs=$(awk -v c="$co" 'BEGIN {{ printf "%.3f", c / 10 }}')
vs=$(awk -v c="$co" 'BEGIN {{ printf "%.3f", 3 * c / 10 }}')
echo "finish_bench $1, $2, $t threads (2 cores), min of 3"
echo "CaseOracle $cs s (pair+baseline $cs [alone: pair 0.1, baseline 0.1, ref 0.1, ideal 0.1]) | validation $vs s | total 1 s"
echo "ns per element: CaseOracle $co = pair+baseline $co + rest 0.00 (alone: pair 1, baseline 1, ref 1, ideal 1)"
echo "validation CPU $vs s, 1.0 cores busy, 6.0 CPU ns per element"
echo "reference CPU $cs s, 1.0 cores busy, 3.0 CPU ns per element"
exit {rc}
"""

# normgate as gate_throughput.sh calls it: case (check), gate --plan (check),
# --version, and the gate itself, which writes --stats-json.
NG = """#!/bin/sh
case "$1" in
  --version) echo "normgate stub"; exit 0 ;;
  case) exit 0 ;;
esac
stats=""
while [ $# -gt 0 ]; do
  case "$1" in
    --plan) exit 0 ;;
    --stats-json) stats="$2"; shift ;;
  esac
  shift
done
cat >"$stats" <<JSON
{{"cases": 99, "elements": 9.66e9, "devices": "0,0", "overlapped": true, "bytes_per_element": 8,
 "phases": {{"reference": {{"seconds": {ref}, "elements_per_second": 1e9}},
             "validation": {{"seconds": 8.0, "elements_per_second": 1.2e9}}}},
 "end_to_end": {{"seconds": 15.0, "elements_per_second": {e2e}}},
 "host_copy": {{"bytes_per_second": 7.6e10, "threads": 16}}, "end_to_end_fraction_of_host_copy": 0.07}}
JSON
exit 0
"""


def make_build(d, name, scale, calls, rc=0, ref=5.0, e2e=6e8, drift=0.0):
    write_exe(os.path.join(d, "bench", "finish_bench"),
              "#!/bin/sh\nBUILD_NAME=" + name + "\n" + FB.format(calls=calls, scale=scale, rc=rc, drift=drift).split("\n", 1)[1])
    write_exe(os.path.join(d, "apps", "normgate"), NG.format(ref=ref, e2e=e2e))
    return d


def run(args, env=None):
    e = dict(os.environ, NG_OS_THREADS="1 2", NG_OS_BLOCKS="auto", NG_OS_REPS="1")
    e.update(env or {})
    e.pop("OUT", None)
    p = subprocess.run([sys.executable, AB] + args, capture_output=True, text=True, env=e, timeout=300)
    return p.returncode, p.stdout + p.stderr


with tempfile.TemporaryDirectory() as t:
    calls = os.path.join(t, "calls.txt")
    a = make_build(os.path.join(t, "a"), "a", 4.0, calls, ref=5.0, e2e=6e8, drift=0.1)
    b = make_build(os.path.join(t, "b"), "b", 3.0, calls, ref=4.0, e2e=7.5e8)
    bad = make_build(os.path.join(t, "bad"), "bad", 1.0, calls, rc=1)
    afile = os.path.join(t, "afile")
    open(afile, "w").close()
    out = os.path.join(t, "out")

    # Refusals: exit 2 and nothing created.
    for args, msg in [
        (["--build", f"a={a}"], "at least two --build"),
        (["--build", f"a={a}", "--build", f"a={b}"], "given twice"),
        (["--build", f"a={a}", "--build", f"b={t}/none"], "is missing or not executable"),
        (["--build", f"a={a}", "--build", f"b/x={b}"], "is not NAME=DIR"),
        (["--build", f"a={a}", "--build", f"b={b}", "--rounds", "0"], "--rounds '0'"),
        (["--build", f"a={a}", "--build", f"b={b}", "--with", "speed"], "is not scaling or throughput"),
        (["--build", f"a={a}", "--build", f"b={b}", "--deadline-s", "1.5"], "whole number of seconds"),
        (["--build", f"a={a}", "--build", f"b={b}", "--out", afile], "exists and is not a folder"),
        (["--build", f"a={a}", "--build", f"b={b}", "--bogus"], "unknown argument '--bogus'"),
    ]:
        rc, text = run(args + (["--out", out] if "--out" not in args else []))
        check(rc == 2 and msg in text, f"refusal {args}: exit {rc}, wanted 2 and '{msg}': {text.strip()[-200:]}")
    check(not os.path.exists(out), "a refused run created its output folder")
    rc, text = run(["--help"])
    check(rc == 0 and "A/B of the oracle half" in text, "--help")

    # Scaling, two rounds: a, b then b, a; ratios of the best runs.
    rc, text = run(["--build", f"a={a}", "--build", f"b={b}", "--rounds", "2", "--out", out])
    check(rc == 0, f"scaling A/B exit {rc}: {text[-300:]}")
    order = [l.strip() for l in open(calls)]
    check(order == ["a"] * 2 + ["b"] * 2 + ["b"] * 2 + ["a"] * 2, f"run order {order}")
    md = open(os.path.join(out, "ab.md")).read()
    # a's second round is 10% slower: its range, and the ratio of the best runs.
    check("| 1 | auto | CaseOracle | 4.00-4.40 | 3.00 | 0.750 |" in md, "scaling row at 1 thread:\n" + md)
    check("| 2 | auto | CaseOracle | 2.00-2.20 | 1.50 | 0.750 |" in md, "scaling row at 2 threads")
    check("| 1 | auto | validation | 12.00-13.20 | 9.00 | 0.750 |" in md, "validation row at 1 thread")
    check(all(os.path.isdir(os.path.join(out, f"{n}-r{r}")) for n in "ab" for r in (1, 2)), "run folders")

    # A failing build: its runs fail, the table says so, exit 3; a's stale
    # round 2 folder from above is gone (earlier outputs removed first).
    rc, text = run(["--build", f"a={a}", "--build", f"bad={bad}", "--rounds", "1", "--out", out])
    check(rc == 3 and "1 run(s) failed" in text, f"failing build: exit {rc}: {text[-300:]}")
    check(not os.path.exists(os.path.join(out, "a-r2")), "stale a-r2 kept")
    check("bad-r1: exit 3" in open(os.path.join(out, "ab.md")).read(), "the failed run in ab.md")

    # Throughput: phases in seconds (best = minimum) and elements/s (best = maximum).
    out2 = os.path.join(t, "out2")
    rc, text = run(["--with", "throughput", "--build", f"a={a}", "--build", f"b={b}", "--rounds", "1",
                    "--out", out2], env={"NG_TP_BENCH_REPS": "1"})
    check(rc == 0, f"throughput A/B exit {rc}: {text[-400:]}")
    md = open(os.path.join(out2, "ab.md")).read() if os.path.exists(os.path.join(out2, "ab.md")) else ""
    check("| reference s | 5.00 | 4.00 | 0.800 |" in md, "throughput reference row:\n" + md)
    check("| end to end elements/s | 6e+08 | 7.5e+08 | 1.250 |" in md, "throughput end-to-end row")

    # The deadline: an 8-second budget runs a's first round (stubs: well
    # under a second, also on a loaded machine), then slow's (20 s) passes it
    # and the rounds stop, exit 3.
    slow = make_build(os.path.join(t, "slow"), "slow", 4.0, calls)
    write_exe(os.path.join(slow, "bench", "finish_bench"), "#!/bin/sh\nsleep 20\nexit 0\n")
    rc, text = run(["--build", f"a={a}", "--build", f"slow={slow}", "--rounds", "3", "--deadline-s", "8",
                    "--out", os.path.join(t, "out3")])
    check(rc == 3 and "the deadline stopped the rounds" in text, f"deadline: exit {rc}: {text[-300:]}")
    md = open(os.path.join(t, "out3", "ab.md")).read()
    check("a-r1: exit 0" in md and "a-r2" not in md and "(stopped by the deadline)" in md, "deadline runs:\n" + md)

    # --out holding what the tool did not make: a planned entry is refused
    # (exit 2, left as it was); an unplanned one survives a run; a link is
    # never followed; a build inside --out and --out / are refused.
    out4 = os.path.join(t, "out4")
    os.makedirs(os.path.join(out4, "a-r1"))
    open(os.path.join(out4, "a-r1", "keep.txt"), "w").close()
    os.makedirs(os.path.join(out4, "zzz-r1"))
    open(os.path.join(out4, "zzz-r1", "keep.txt"), "w").close()
    rc, text = run(["--build", f"a={a}", "--build", f"b={b}", "--rounds", "1", "--out", out4])
    check(rc == 2 and "oracle_ab did not make" in text, f"foreign a-r1: exit {rc}: {text[-200:]}")
    check(os.path.exists(os.path.join(out4, "a-r1", "keep.txt")), "foreign a-r1/keep.txt removed")
    os.rename(os.path.join(out4, "a-r1"), os.path.join(out4, "victim"))
    os.symlink(os.path.join(out4, "victim"), os.path.join(out4, "a-r1"))
    rc, text = run(["--build", f"a={a}", "--build", f"b={b}", "--rounds", "1", "--out", out4])
    check(rc == 2 and os.listdir(os.path.join(out4, "victim")) == ["keep.txt"], f"link a-r1: exit {rc}")
    os.unlink(os.path.join(out4, "a-r1"))
    rc, text = run(["--build", f"a={a}", "--build", f"b={b}", "--rounds", "1", "--out", out4])
    check(rc == 0 and os.path.exists(os.path.join(out4, "zzz-r1", "keep.txt")), f"unplanned zzz-r1: exit {rc}")
    rc, text = run(["--build", f"a={a}", "--build", f"b={out4}/zzz-r1", "--out", out4])
    check(rc == 2, f"a build inside --out: exit {rc}")
    for args, msg in [(["--out", "/"], "is / or the repository"),
                      (["--out", "/proc/oracle_ab_test"], "cannot be written"),
                      (["--rounds", "2", "--rounds", "3"], "--rounds is given 2 times"),
                      (["--rou", "2"], "unknown argument '--rou'")]:
        rc, text = run(["--build", f"a={a}", "--build", f"b={b}"] + args)
        check(rc == 2 and msg in text, f"{args}: exit {rc}, wanted 2 and '{msg}': {text.strip()[-200:]}")

    # A tool refusing its settings: exit 2 at the first run, the earlier
    # results (ab.md, b-r1) kept.
    before = open(os.path.join(out4, "ab.md")).read()
    rc, text = run(["--build", f"a={a}", "--build", f"b={b}", "--rounds", "3", "--out", out4],
                   env={"NG_OS_THREADS": "0"})
    check(rc == 2 and "refused its settings" in text, f"tool refusal: exit {rc}: {text[-200:]}")
    check(open(os.path.join(out4, "ab.md")).read().count("b-r1: exit 0") == 1
          and os.path.isdir(os.path.join(out4, "b-r1")), "earlier results lost on a refusal")
    del before

    # Malformed numbers: a stats.json that is not an object, and NaN lines.
    odd = make_build(os.path.join(t, "odd"), "odd", 4.0, calls)
    write_exe(os.path.join(odd, "apps", "normgate"),
              NG.format(ref=5.0, e2e=6e8).replace("cat >\"$stats\" <<JSON", "echo '[]' >\"$stats\"; exit 0\ncat <<JSON"))
    rc, text = run(["--with", "throughput", "--build", f"a={a}", "--build", f"odd={odd}", "--rounds", "1",
                    "--out", os.path.join(t, "out5")], env={"NG_TP_BENCH_REPS": "1"})
    check(rc == 3 and "odd-r1: exit 3" in text and "| reference s | 5.00 | - | - |" in text,
          f"malformed stats: exit {rc}: {text[-300:]}")
    # A run that exits 0 with no numbers (finish_bench printing nothing) counts as failed.
    write_exe(os.path.join(odd, "bench", "finish_bench"), "#!/bin/sh\necho nan\nexit 0\n")
    rc, text = run(["--build", f"a={a}", "--build", f"odd={odd}", "--rounds", "1", "--out", os.path.join(t, "out5")],
                   env={"NG_OS_THREADS": "1"})
    check(rc == 3 and "odd-r1: exit 3 (no numbers in its output)" in text, f"no numbers: exit {rc}: {text[-300:]}")

    # A signal stops the running tool's whole process group (the benchmark,
    # the spinners): TERM after a second, exit 143, nothing left behind.
    import signal as _signal
    import time as _time
    hang = make_build(os.path.join(t, "hang"), "hang", 4.0, calls)
    write_exe(os.path.join(hang, "bench", "finish_bench"), "#!/bin/sh\ntrap '' TERM\nsleep 37.123\n")
    e = dict(os.environ, NG_OS_THREADS="1", NG_OS_BLOCKS="auto", NG_OS_REPS="1", NG_OS_BUSY="1")
    p = subprocess.Popen([sys.executable, AB, "--build", f"hang={hang}", "--build", f"b={b}", "--rounds", "1",
                          "--out", os.path.join(t, "out6")], env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    _time.sleep(1.5)
    p.send_signal(_signal.SIGTERM)
    t1 = _time.monotonic()
    rc = p.wait(timeout=60)
    left = subprocess.run(["pgrep", "-f", "sleep 37.123"], capture_output=True, text=True).stdout.split()
    check(rc == 143 and _time.monotonic() - t1 < 15, f"TERM: exit {rc}")
    check(not left, f"TERM left processes behind: {left}")
    for pid in left:
        os.kill(int(pid), _signal.SIGKILL)

    # The deadline is honoured even by a child that ignores TERM (4 s: the
    # tool's own start, a second or two on a loaded machine, comes first).
    t1 = _time.monotonic()
    rc, text = run(["--build", f"hang={hang}", "--build", f"b={b}", "--rounds", "1", "--deadline-s", "4",
                    "--out", os.path.join(t, "out7")], env={"NG_OS_THREADS": "1"})
    took = _time.monotonic() - t1
    left = subprocess.run(["pgrep", "-f", "sleep 37.123"], capture_output=True, text=True).stdout.split()
    check(rc == 3 and took < 4 + 5 + 5 and "hang-r1: exit 124 (stopped by the deadline)" in text,
          f"deadline: exit {rc} after {took:.1f} s: {text[-600:]}")
    check(not left, f"the deadline left processes behind: {left}")
    for pid in left:
        os.kill(int(pid), _signal.SIGKILL)

if fails:
    print(f"test_oracle_ab: {len(fails)} failure(s)")
    sys.exit(1)
print("test_oracle_ab: ok")
