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
                    the repository; not / nor the repository itself): ab.md, and
                    NAME-rK/ and NAME-rK.log with each run's own output. It removes
                    only what it made there before (listed in DIR/.oracle_ab.json),
                    once its first run has not refused its settings; a NAME-rK it did
                    not make is refused, as is a build inside DIR
  --deadline-s N    seconds after the start by which every run is stopped (its
                    process group killed); no run starts after it (default 0: none)

The tools' settings pass through the environment (NG_OS_THREADS, NG_OS_BUSY, ...,
NG_TP_BUSY, NG_TP_ARGS, ...; each tool's header). Exit 0 every run done; 2 a bad
argument (before any run), or a tool refused its settings (its exit 2, at the
first run); 3 a run failed or gave no numbers, or the deadline stopped a run or
the rounds; 128 + N on signal N (INT, TERM, HUP), the running tool's process
group (its benchmark, its spinning processes) killed first.
E.g. NG_OS_THREADS="1 16" NG_OS_BUSY=2 tools/oracle_ab.py --build old=/b/old --build new=build
"""
import argparse
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = {"scaling": "oracle_scaling.sh", "throughput": "gate_throughput.sh"}
NEEDS = {"scaling": ["bench/finish_bench"], "throughput": ["bench/finish_bench", "apps/normgate"]}
MANIFEST = ".oracle_ab.json"  # what this tool made in --out (the only things it removes)
GRACE = 5.0                   # seconds a stopped tool gets to stop its children itself


def usage_error(msg):
    print(f"oracle_ab: {msg}", file=sys.stderr)
    sys.exit(2)


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="oracle_ab", description=__doc__, allow_abbrev=False,
                                 formatter_class=argparse.RawDescriptionHelpFormatter, usage=argparse.SUPPRESS)
    ap.add_argument("--build", action="append", default=[])
    ap.add_argument("--with", dest="tool", action="append")
    ap.add_argument("--rounds", action="append")
    ap.add_argument("--out", action="append")
    ap.add_argument("--deadline-s", dest="deadline", action="append")
    a, extra = ap.parse_known_args(argv)
    if extra:
        usage_error(f"unknown argument '{extra[0]}' (see --help)")
    for opt, v in (("--with", a.tool), ("--rounds", a.rounds), ("--out", a.out), ("--deadline-s", a.deadline)):
        if v is not None and len(v) > 1:
            usage_error(f"{opt} is given {len(v)} times")
    tool = a.tool[0] if a.tool else "scaling"
    rounds = a.rounds[0] if a.rounds else "3"
    deadline = a.deadline[0] if a.deadline else "0"
    out = a.out[0] if a.out else (os.environ.get("OUT") or os.path.join(ROOT, "out", "oracle-ab"))
    if tool not in TOOLS:
        usage_error(f"--with '{tool}' is not scaling or throughput")
    if not re.fullmatch(r"[1-9][0-9]?", rounds):
        usage_error(f"--rounds '{rounds}' is not a count in 1..99")
    if not re.fullmatch(r"[0-9]{1,9}", deadline):
        usage_error(f"--deadline-s '{deadline}' is not a whole number of seconds (at most 9 digits)")
    if not out:
        usage_error("--out needs a folder (not empty)")
    out = os.path.abspath(out)
    if os.path.realpath(out) in ("/", os.path.realpath(ROOT)):
        usage_error(f"--out '{out}' is / or the repository: give a folder of its own")
    if os.path.lexists(out) and not os.path.isdir(out):
        usage_error(f"--out '{out}' exists and is not a folder")
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
        for need in NEEDS[tool]:
            f = os.path.join(path, need)
            if not (os.path.isfile(f) and os.access(f, os.X_OK)):
                usage_error(f"--build {name}: {f} is missing or not executable")
        rp, ro = os.path.realpath(path), os.path.realpath(out)
        if rp == ro or rp.startswith(ro + os.sep):
            usage_error(f"--build {name}: {path} is inside --out '{out}'")
        builds.append((name, path))
    if len(builds) < 2:
        usage_error("needs at least two --build NAME=DIR (an A/B compares builds)")
    return tool, int(rounds), out, int(deadline), builds


def load_manifest(out):
    try:
        with open(os.path.join(out, MANIFEST)) as f:
            m = json.load(f)
        return set(x for x in m if isinstance(x, str) and re.fullmatch(r"[A-Za-z0-9._-]+", x))
    except (OSError, ValueError, TypeError):
        return set()


def save_manifest(out, names):
    fd, tmp = tempfile.mkstemp(dir=out, prefix=MANIFEST + ".")
    with os.fdopen(fd, "w") as f:
        json.dump(sorted(names), f)
    os.replace(tmp, os.path.join(out, MANIFEST))


def remove(path):
    """Removes a file, a link (not what it points to) or a folder this tool made."""
    if os.path.islink(path) or os.path.isfile(path):
        os.unlink(path)
    elif os.path.isdir(path):
        for dirpath, dirnames, filenames in os.walk(path, topdown=False):
            for n in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
                os.unlink(os.path.join(dirpath, n))
            for d in dirnames:
                if not os.path.islink(os.path.join(dirpath, d)):
                    os.rmdir(os.path.join(dirpath, d))
        os.rmdir(path)


def prepare_out(out, planned):
    """Creates --out, checks it is writable and that no planned entry is
    someone else's; returns the manifest (what this tool made before)."""
    try:
        os.makedirs(out, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=out, prefix=".oracle_ab-probe.")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        usage_error(f"--out '{out}' cannot be written: {e.strerror or e}")
    made = load_manifest(out)
    for n in planned:
        if os.path.lexists(os.path.join(out, n)) and n not in made:
            usage_error(f"--out '{out}' holds {n}, which oracle_ab did not make: move it, or give another --out")
    return made


def kill_group(pid, grace):
    """TERM to process group pid (the tools stop their children and spinners
    on it), up to `grace` seconds for its leader to end, then KILL to whatever
    of the group is left (a child that ignored TERM). os-level calls only, so
    that a signal handler may call it while the interrupted code is inside
    Popen.wait, holding its lock (not reentrant)."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    end = time.monotonic() + grace
    while time.monotonic() < end:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                break
        except ChildProcessError:  # already reaped
            break
        time.sleep(0.05)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class Runner:
    """The running tool, whose process group a signal or the deadline kills."""

    def __init__(self):
        self.proc = None

    def run(self, tool, build, out, left):
        """One run; returns (exit status, stopped by the deadline)."""
        env = dict(os.environ, NORMGATE_BUILD=build)
        cmd = ["bash", os.path.join(ROOT, "tools", TOOLS[tool]), "--out", out]
        if left is not None:  # rounded up: bash's SECONDS counts whole seconds from a fraction in
            cmd += ["--deadline-s", str(max(1, math.ceil(left)))]  # (the hard stop below is at `left`)
        with open(out + ".log", "w") as log:
            self.proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                rc, stopped = self.proc.wait(timeout=None if left is None else max(0.1, left)), False
            except subprocess.TimeoutExpired:
                rc, stopped = 124, True
            kill_group(self.proc.pid, GRACE if stopped else 0.0)  # after a normal exit: only stragglers
            self.proc.poll()  # the leader's status, if kill_group reaped it
            self.proc = None
        return rc, stopped


def finite(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def scaling_rows(d):
    """(threads, block rows, 'CaseOracle' or 'validation') -> wall ns per element, from DIR/scaling.md."""
    rows = {}
    try:
        lines = open(os.path.join(d, "scaling.md")).read().splitlines()
    except OSError:
        return rows
    for line in lines:
        c = [x.strip() for x in line.strip().strip("|").split("|")]
        if len(c) == 6 and re.fullmatch(r"[0-9]+", c[0]):
            for what, cell in (("CaseOracle", c[2]), ("validation", c[3])):
                if re.fullmatch(r"[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?", cell) and math.isfinite(float(cell)):
                    rows[(c[0], c[1], what)] = float(cell)
    return rows


def throughput_rows(d):
    """('<phase> s',) -> seconds and ('end to end elements/s',) -> elements/s, from
    DIR/stats.json ({} when missing or malformed: the run counts as failed)."""
    try:
        with open(os.path.join(d, "stats.json")) as f:
            s = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(s, dict):
        return {}
    rows = {}
    phases = s.get("phases")
    for k, v in (phases.items() if isinstance(phases, dict) else []):
        if isinstance(v, dict) and finite(v.get("seconds")):
            rows[(f"{k} s",)] = float(v["seconds"])
    e = s.get("end_to_end")
    if isinstance(e, dict) and finite(e.get("elements_per_second")):
        rows[("end to end elements/s",)] = float(e["elements_per_second"])
    return rows


def span(vals):
    v = [x for x in vals if finite(x)]
    if not v:
        return "-"
    lo, hi = min(v), max(v)
    f = (lambda x: f"{x:.3g}") if max(abs(lo), abs(hi)) >= 1000 else (lambda x: f"{x:.2f}")
    return f(lo) if lo == hi else f"{f(lo)}-{f(hi)}"


def ratios(best):
    return [f"{b / best[0]:.3f}" if finite(b) and finite(best[0]) and best[0] != 0 else "-" for b in best[1:]]


def table(tool, builds, results):
    """results[name] = list of the per-run row dicts (key tuple -> number); returns
    ab.md's table lines: a row per key, each build's range and the ratios of the best."""
    names = [n for n, _ in builds]
    keys = []
    for n in names:
        for r in results[n]:
            keys += [k for k in r if k not in keys]
    head = "threads | block rows | wall ns per element" if tool == "scaling" else "gate"
    cols = head.count("|") + 1
    lines = ["| " + head + " | " + " | ".join(names) + " | " + " | ".join(f"{n}/{names[0]}" for n in names[1:]) + " |",
             "| --- " * (cols + 2 * len(names) - 1) + "|"]
    for k in keys:
        per = [[r.get(k) for r in results[n]] for n in names]
        pick = max if k[-1].endswith("elements/s") else min  # rates: higher is better
        best = [pick((x for x in v if finite(x)), default=None) for v in per]
        lines.append("| " + " | ".join(k) + " | " + " | ".join(span(v) for v in per) + " | "
                     + " | ".join(ratios(best)) + " |")
    return lines


def main(argv):
    tool, rounds, out, deadline, builds = parse_args(argv)
    planned = [f"{n}-r{r}{ext}" for n, _ in builds for r in range(1, rounds + 1) for ext in ("", ".log")]
    made = prepare_out(out, planned + ["ab.md"])
    runner = Runner()

    def on_signal(signum, _frame):
        if runner.proc is not None:
            kill_group(runner.proc.pid, GRACE)
        print(f"oracle_ab: stopped by signal {signum}", file=sys.stderr)
        os._exit(128 + signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    stale = set(made) - {"ab.md"}  # earlier runs' outputs: removed once the first run shows the settings work
    t0 = time.monotonic()
    results = {n: [] for n, _ in builds}
    runs, failed, stopped, refused = [], 0, False, None
    for r in range(1, rounds + 1):
        order = builds if r % 2 == 1 else list(reversed(builds))
        for name, path in order:
            left = None if deadline == 0 else deadline - (time.monotonic() - t0)
            if left is not None and left <= 0:
                stopped = True
                break
            d = os.path.join(out, f"{name}-r{r}")
            # An earlier run's folder of this name is the tool's to clean (it
            # removes its own outputs after checking its settings); a link
            # there is removed, never followed.
            for x in (d, d + ".log"):
                if os.path.islink(x):
                    os.unlink(x)
            made |= {os.path.basename(d), os.path.basename(d) + ".log"}
            save_manifest(out, made)
            rc, cut = runner.run(tool, path, d, left)
            rows = scaling_rows(d) if tool == "scaling" else throughput_rows(d)
            late = deadline > 0 and time.monotonic() - t0 >= deadline
            note = " (stopped by the deadline)" if cut else ""
            if rc == 0 and not rows:  # rows hold finite numbers only
                rc, note = 3, " (no numbers in its output)"
            runs.append(f"{name}-r{r}: exit {rc}{note}")
            print(f"oracle_ab: {name} round {r}: exit {rc}{note}", flush=True)
            results[name].append(rows)
            failed += rc != 0
            stopped = stopped or cut or late
            if rc == 2:
                refused = f"{name}-r{r}.log"
                break
            for x in stale - {os.path.basename(d), os.path.basename(d) + ".log"}:
                if os.path.lexists(os.path.join(out, x)):
                    remove(os.path.join(out, x))
                made.discard(x)
            stale = set()
            save_manifest(out, made)
            if stopped:
                break
        if stopped or refused:
            break
    if refused:  # nothing measured: the earlier ab.md and runs stay as they were
        print(f"oracle_ab: tools/{TOOLS[tool]} refused its settings (exit 2; see {os.path.join(out, refused)})",
              file=sys.stderr)
        return 2
    lines = [f"# Oracle A/B: tools/{TOOLS[tool]}, {rounds} round(s), builds alternated", ""]
    for name, path in builds:
        lines.append(f"    {name}: {path}")
    lines += ["", "    runs: " + ", ".join(runs) + (" (the deadline stopped the rounds)" if stopped else ""), ""]
    lines += table(tool, builds, results)
    lines += ["", "Ranges over the rounds; ratios of the best runs (minimum seconds or ns per element, "
              "maximum elements/s) to the first build's."]
    made.add("ab.md")
    save_manifest(out, made)
    fd, tmp = tempfile.mkstemp(dir=out, prefix="ab.md.")
    with os.fdopen(fd, "w") as f:
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
