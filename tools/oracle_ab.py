#!/usr/bin/env python3
"""A/B of the oracle half between builds on this host: tools/oracle_scaling.sh
(--with scaling, the default) or tools/gate_throughput.sh (--with throughput)
run once per build per round, the builds alternated (every even round in the
reverse order, so a drift of the host's speed does not favour one build), then
one table, DIR/ab.md: for each row of the tool's own table (threads and block
rows; or the gate's phases), each build's range over the rounds and the ratio
of its best to the first build's best.

  tools/oracle_ab.py --build NAME=DIR --build NAME=DIR [...] [--with scaling|throughput]
                     [--rounds N] [--out DIR] [--deadline-s N]

  --build NAME=DIR  a build folder (what NORMGATE_BUILD names: DIR/bench/finish_bench,
                    and DIR/apps/normgate for throughput); at least two, names of
                    letters, digits, '.', '_' and '-', each once; the first is the
                    baseline of the ratios
  --with TOOL       scaling (default) or throughput
  --rounds N        rounds, 1..99 (default 3)
  --out DIR         the output folder (default: $OUT if set, else out/oracle-ab/ in
                    the repository): ab.md, and NAME-rK/ with each run's own output
                    (earlier ones removed first)
  --deadline-s N    seconds after the start after which no further run starts, and by
                    which a running one is stopped (default 0: none)

The tools' settings pass through the environment (NG_OS_THREADS, NG_OS_BUSY, ...,
NG_TP_BUSY, NG_TP_ARGS, ...; each tool's header). Exit 0 every run done; 2 a bad
argument (before any run); 3 a run failed or the deadline stopped the rounds.
E.g. NG_OS_THREADS="1 16" NG_OS_BUSY=2 tools/oracle_ab.py --build old=/b/old --build new=build
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = {"scaling": "oracle_scaling.sh", "throughput": "gate_throughput.sh"}
NEEDS = {"scaling": ["bench/finish_bench"], "throughput": ["bench/finish_bench", "apps/normgate"]}


def usage_error(msg):
    print(f"oracle_ab: {msg}", file=sys.stderr)
    sys.exit(2)


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="oracle_ab", add_help=True, description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter, usage=argparse.SUPPRESS)
    ap.add_argument("--build", action="append", default=[])
    ap.add_argument("--with", dest="tool", default="scaling")
    ap.add_argument("--rounds", default="3")
    ap.add_argument("--out", default=os.environ.get("OUT") or os.path.join(ROOT, "out", "oracle-ab"))
    ap.add_argument("--deadline-s", dest="deadline", default="0")
    a, extra = ap.parse_known_args(argv)
    if extra:
        usage_error(f"unknown argument '{extra[0]}' (see --help)")
    if a.tool not in TOOLS:
        usage_error(f"--with '{a.tool}' is not scaling or throughput")
    if not re.fullmatch(r"[1-9][0-9]?", a.rounds):
        usage_error(f"--rounds '{a.rounds}' is not a count in 1..99")
    if not re.fullmatch(r"[0-9]{1,9}", a.deadline):
        usage_error(f"--deadline-s '{a.deadline}' is not a whole number of seconds (at most 9 digits)")
    if not a.out:
        usage_error("--out needs a folder (not empty)")
    if os.path.exists(a.out) and not os.path.isdir(a.out):
        usage_error(f"--out '{a.out}' exists and is not a folder")
    builds = []
    for b in a.build:
        name, eq, path = b.partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z0-9._-]{1,40}", name) or name in (".", ".."):
            usage_error(f"--build '{b}' is not NAME=DIR (a name of letters, digits, '.', '_', '-')")
        if any(name == n for n, _ in builds):
            usage_error(f"--build name '{name}' is given twice")
        if not path:
            usage_error(f"--build '{b}' names no folder")
        path = os.path.abspath(path)
        for need in NEEDS[a.tool]:
            f = os.path.join(path, need)
            if not (os.path.isfile(f) and os.access(f, os.X_OK)):
                usage_error(f"--build {name}: {f} is missing or not executable")
        builds.append((name, path))
    if len(builds) < 2:
        usage_error("needs at least two --build NAME=DIR (an A/B compares builds)")
    return a.tool, int(a.rounds), os.path.abspath(a.out), int(a.deadline), builds


def run_one(tool, build, out, left):
    """One run of the tool for one build; returns its exit status (124: stopped at the deadline)."""
    env = dict(os.environ, NORMGATE_BUILD=build)
    cmd = ["bash", os.path.join(ROOT, "tools", TOOLS[tool]), "--out", out]
    if left is not None:
        cmd += ["--deadline-s", str(max(1, int(left)))]
    with open(out + ".log", "w") as log:
        p = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return p.wait(timeout=None if left is None else max(1.0, left) + 30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGTERM)  # the tools stop their children and spinners on TERM
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
            return 124


def scaling_rows(d):
    """(threads, block rows) -> (CaseOracle wall ns/elt, validation wall ns/elt) from DIR/scaling.md."""
    rows = {}
    p = os.path.join(d, "scaling.md")
    if not os.path.exists(p):
        return rows
    for line in open(p):
        c = [x.strip() for x in line.strip().strip("|").split("|")]
        if len(c) == 6 and re.fullmatch(r"[0-9]+", c[0]):
            def num(s):
                try:
                    return float(s)
                except ValueError:
                    return None
            rows[(c[0], c[1])] = (num(c[2]), num(c[3]))
    return rows


def throughput_rows(d):
    """phase -> seconds, and 'end to end' -> elements/s, from DIR/stats.json."""
    p = os.path.join(d, "stats.json")
    if not os.path.exists(p):
        return {}
    s = json.load(open(p))
    rows = {f"{k} s": v.get("seconds") for k, v in s.get("phases", {}).items()}
    rows["end to end elements/s"] = s.get("end_to_end", {}).get("elements_per_second")
    return rows


def span(vals):
    v = [x for x in vals if x is not None]
    if not v:
        return "-"
    lo, hi = min(v), max(v)
    f = (lambda x: f"{x:.3g}") if max(abs(lo), abs(hi)) >= 1000 else (lambda x: f"{x:.2f}")
    return f(lo) if lo == hi else f"{f(lo)}-{f(hi)}"


def table(tool, builds, results):
    """results[name] = list of the per-run row dicts; returns ab.md's lines."""
    names = [n for n, _ in builds]
    lines = []
    keys = []
    for n in names:
        for r in results[n]:
            for k in r:
                if k not in keys:
                    keys.append(k)
    ratio_head = " | ".join(f"{n}/{names[0]}" for n in names[1:])
    if tool == "scaling":
        lines.append("| threads | block rows | wall ns per element | " + " | ".join(names) + " | " + ratio_head + " |")
        lines.append("| --- " * (3 + 2 * len(names) - 1) + "|")
        for k in keys:
            for i, what in ((0, "CaseOracle"), (1, "validation")):
                per = [[r[k][i] for r in results[n] if k in r] for n in names]
                best = [min((x for x in v if x is not None), default=None) for v in per]
                ratios = [f"{b / best[0]:.3f}" if b is not None and best[0] else "-" for b in best[1:]]
                lines.append(f"| {k[0]} | {k[1]} | {what} | " + " | ".join(span(v) for v in per) + " | "
                             + " | ".join(ratios) + " |")
    else:
        lines.append("| gate | " + " | ".join(names) + " | " + ratio_head + " |")
        lines.append("| --- " * (1 + 2 * len(names) - 1) + "|")
        for k in keys:
            per = [[r.get(k) for r in results[n]] for n in names]
            rate = k.endswith("elements/s")  # higher is better: best is the maximum
            pick = max if rate else min
            best = [pick((x for x in v if x is not None), default=None) for v in per]
            ratios = [f"{b / best[0]:.3f}" if b is not None and best[0] else "-" for b in best[1:]]
            lines.append(f"| {k} | " + " | ".join(span(v) for v in per) + " | " + " | ".join(ratios) + " |")
    return lines


def main(argv):
    tool, rounds, out, deadline, builds = parse_args(argv)
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        print(f"oracle_ab: cannot create {out}: {e}", file=sys.stderr)
        return 3
    for name, _ in builds:  # this tool's earlier outputs only
        for r in range(1, 100):
            d = os.path.join(out, f"{name}-r{r}")
            shutil.rmtree(d, ignore_errors=True)
            if os.path.exists(d + ".log"):
                os.remove(d + ".log")
    if os.path.exists(os.path.join(out, "ab.md")):
        os.remove(os.path.join(out, "ab.md"))
    t0 = time.monotonic()
    results = {n: [] for n, _ in builds}
    runs, failed, stopped = [], 0, False
    for r in range(1, rounds + 1):
        order = builds if r % 2 == 1 else list(reversed(builds))
        for name, path in order:
            left = None if deadline == 0 else deadline - (time.monotonic() - t0)
            if left is not None and left < 1:
                stopped = True
                break
            d = os.path.join(out, f"{name}-r{r}")
            rc = run_one(tool, path, d, left)
            runs.append(f"{name}-r{r}: exit {rc}")
            print(f"oracle_ab: {name} round {r}: exit {rc}", flush=True)
            failed += rc != 0
            results[name].append(scaling_rows(d) if tool == "scaling" else throughput_rows(d))
        if stopped:
            break
    lines = [f"# Oracle A/B: tools/{TOOLS[tool]}, {rounds} round(s), builds alternated", ""]
    for name, path in builds:
        lines.append(f"    {name}: {path}")
    lines += ["", "    runs: " + ", ".join(runs) + (" (stopped by the deadline)" if stopped else ""), ""]
    lines += table(tool, builds, results)
    lines += ["", "Ranges over the rounds; ratios of the best runs (minimum seconds or ns per element, "
              "maximum elements/s) to the first build's."]
    tmp = os.path.join(out, "ab.md.tmp")
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, os.path.join(out, "ab.md"))
    print("\n".join(lines))
    if failed or stopped:
        print(f"oracle_ab: {failed} run(s) failed" + ("; the deadline stopped the rounds" if stopped else ""),
              file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
