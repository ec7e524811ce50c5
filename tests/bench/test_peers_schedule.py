"""bench/peers' row loop (cli.main) on a simulated clock, without a GPU or
torch: the phases of each row, the warm-up children's processes and the
time they take are fakes; the scheduling and WarmAhead are the package's own. Checks what no CPU test of the
parts can: no warm-up child runs beside a timing phase; --defer-accuracy
times warm rows back to back and waits less for compiles than the default,
with every row measured either way; --end-s skips a row predicted to outlast
the run but still measures a smaller one after it.
Runs under pytest or as `python3 tests/bench/test_peers_schedule.py`."""
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import types

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "bench"))
from peers import cli, matrix, warmup  # noqa: E402


def peers_modules():
    """Every module of the bench/peers package: a fake goes into each module
    that holds the name (a module's `from .x import name` is its own binding)."""
    return [m for n, m in sorted(sys.modules.items()) if n.startswith("peers.")]

# a warm-up child's TC/TCd compile (a cold setup took 17-103 s: docs/perf/peers.md, D7)
COMPILE_S = 90.0


def row_seconds(form, H, T):
    """(timing, accuracy) seconds of a row: the rows of
    docs/results/peers/run-s18-*.json scale about so."""
    e = matrix.row_elements(form, H, T) / 1e6
    return 1.0 + 0.05 * e, 1.0 + 0.09 * e


class Sim:
    """The fakes for one run of cli.main, sharing one clock and one event log."""

    def __init__(self, fail_timing_at=None, interrupt_accuracy_at=None):
        self.t = 1000.0
        self.events = []  # ("timing" | "accuracy" | "spawn", row label or warm-up spec, clock)
        self.violations = []  # timing phases with a warm-up child running (main catches what timing() raises)
        self.fail_timing_at = fail_timing_at  # a row whose timing fails with a sticky CUDA error
        self.interrupt_accuracy_at = interrupt_accuracy_at  # a row whose accuracy phase gets Ctrl-C
        self.context_broken = False

    # --- the clock (the `time` module of cli and warmup) ---
    def time(self):
        return self.t

    def run(self, s):
        self.t += s


def fake_child_class(sim):
    class FakeChild:
        """subprocess.Popen for WarmAhead's warm-up children on the simulated
        clock: each compiles for COMPILE_S from its start, side by side;
        wait(timeout) lets the clock run to its end or to the timeout."""

        def __init__(self, cmd, stdout=None, stderr=None):
            self.done_at, self.rc = sim.t + COMPILE_S, None
            sim.events.append(("spawn", cmd[cmd.index("--warm-compile") + 1], sim.t))

        def wait(self, timeout=None):
            if self.rc is None:
                if timeout is not None and sim.t + timeout < self.done_at:
                    sim.run(timeout)
                    raise subprocess.TimeoutExpired("warm-compile", timeout)
                sim.run(max(0.0, self.done_at - sim.t))
                self.rc = 0
            return self.rc

        pid = None  # no process: warmup.kill_tree finds nothing under it

        @property
        def returncode(self):
            return self.rc

        def send_signal(self, sig):
            pass

        def kill(self):
            if self.rc is None:
                self.rc = -9
    return FakeChild


def run_main(argv, sim, warm_holder):
    """cli.main(argv) with every GPU part faked; returns (rc, result
    JSON); rc is "interrupted" when main raised KeyboardInterrupt."""
    def synchronize():
        if sim.context_broken:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

    torch = types.SimpleNamespace(
        cuda=types.SimpleNamespace(is_available=lambda: True, get_device_properties=lambda i: types.SimpleNamespace(name="FakeGPU"),
                                   stream=lambda s: contextlib.nullcontext(), mem_get_info=lambda: (100 << 30, 140 << 30),
                                   synchronize=synchronize, empty_cache=lambda: None),
        version=types.SimpleNamespace(cuda="0"), __version__="fake", get_num_threads=lambda: 16)
    normgate = types.SimpleNamespace(case_info=lambda c: {"eps": 1e-6}, version=lambda: "fake", default_threads=lambda: 16)

    def timing(torch_, args, impls, errors, form, H, T, wname, timer, log):
        label = f"[{T}, {H}] {wname} {form}"
        if warm_holder[0].procs:
            sim.violations.append(label)
        if label == sim.fail_timing_at:
            sim.context_broken = True
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        ts, _ = row_seconds(form, H, T)
        sim.events.append(("timing", label, sim.t))
        sim.run(ts)
        row = {"H": H, "T": T, "w": wname, "form": form, "heads": 1, "impls": {}, "phase_s": {"setup": 0.0, "timing": ts}}
        return row, ["det", "ours"]

    def accuracy(torch_, args, impls, row, live, log):
        _, acc = row_seconds(row["form"], row["H"], row["T"])
        label = f"[{row['T']}, {row['H']}] {row['w']} {row['form']}"
        if label == sim.interrupt_accuracy_at:
            raise KeyboardInterrupt
        sim.events.append(("accuracy", label, sim.t))
        sim.run(acc)
        row["phase_s"]["accuracy"] = acc
        row["ops"] = {"fwd": {"det_us": 1.0, "ours_us": 1.0}}
        return row

    def warm_factory(args, log):  # the real WarmAhead, kept to see its children from timing()
        warm_holder[0] = real_warm(args, log)
        return warm_holder[0]

    real_warm = warmup.WarmAhead
    sp = subprocess  # the real module stays as it is for everyone else
    fakes = {"time": types.SimpleNamespace(time=sim.time),
             "subprocess": types.SimpleNamespace(Popen=fake_child_class(sim), TimeoutExpired=sp.TimeoutExpired,
                                                 DEVNULL=sp.DEVNULL, run=sp.run),
             "PROC_T0": sim.t,
             "make_impls": lambda torch_, names, eps, errors: {n: None for n in ("det", "ours", "TC", "TCd")},
             "Timer": lambda torch_: types.SimpleNamespace(stream=None, cupti=None, cupti_off=None),
             "copy_ceiling": lambda *a: {"GBps": 4000.0, "candidates": {}, "bytes": 1, "by": "fake"},
             "run_row_timing": timing, "run_row_accuracy": accuracy, "WarmAhead": warm_factory,
             "markdown": lambda *a: "", "acc_parts": lambda row: ""}
    saved = [(m, k, getattr(m, k)) for m in peers_modules() for k in fakes if hasattr(m, k)]
    mods = {k: sys.modules.get(k) for k in ("torch", "normgate", "triton")}
    try:
        for m, k, _ in saved:
            setattr(m, k, fakes[k])
        sys.modules["torch"], sys.modules["normgate"], sys.modules["triton"] = torch, normgate, None
        with tempfile.TemporaryDirectory() as d, open(os.devnull, "w") as null:
            out = os.path.join(d, "r.json")
            with contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):
                try:
                    rc = cli.main(argv + ["--json", out])
                except KeyboardInterrupt:
                    rc = "interrupted"
            with open(out) as f:
                return rc, json.load(f)
    finally:
        for m, k, v in saved:
            setattr(m, k, v)
        for k, v in mods.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


ROWS = ["--peers", "TC,TCd", "--forms", "plain", "--H", "1024,2048", "--T", "4097,65537,98304,131072", "--w", "bf16"]


def simulate(extra, rows=ROWS, **faults):
    sim, holder = Sim(**faults), [None]
    rc, res = run_main(rows + extra, sim, holder)
    assert not sim.violations, f"warm-up children ran beside the timing of {sim.violations}"
    return sim, rc, res


def waited(res):
    """Seconds the run waited for warm-up compiles (the rows' prewarm records)."""
    return sum(r["prewarm"]["waited_s"] for r in res["rows"] if r.get("prewarm"))


def plan_keys(res):
    """{(T, H, w, form)} of the rows measured, skipped and failed."""
    got = {(r["T"], r["H"], r["w"], r["form"]) for r in res["rows"]}
    skipped = {tuple(x[:4]) for x in res["meta"].get("skipped", [])}
    failed = {tuple(x[:4]) for x in res["meta"].get("failed_rows", [])}
    return got, skipped, failed


def test_every_row_measured_and_no_child_beside_a_timing_phase_in_both_modes():
    for extra in ([], ["--defer-accuracy"]):
        sim, rc, res = simulate(extra)  # timing() asserts the children rule at every row
        assert rc == 0 and len(res["rows"]) == 8, (extra, rc, len(res["rows"]))
        timed = [e[1] for e in sim.events if e[0] == "timing"]
        assert timed == sorted(set(timed), key=timed.index) and len(timed) == 8
        # Each row's accuracy phase after its own timing phase.
        for lab in timed:
            ev = [e[0] for e in sim.events if e[1] == lab]
            assert ev == ["timing", "accuracy"], (lab, ev)


def test_defer_accuracy_times_a_warm_batch_back_to_back_and_waits_less():
    plain, _, res_plain = simulate([])
    defer, _, res = simulate(["--defer-accuracy"])
    kinds = [e[0] for i, e in enumerate(defer.events)  # a batch's children: one "spawn"
             if e[0] != "spawn" or i == 0 or defer.events[i - 1][0] != "spawn"]
    # The first batch's 4 rows are timed back to back, then the next batch starts,
    # then their 4 accuracy phases run beside its compiles.
    assert kinds[:7] == ["spawn", "timing", "timing", "timing", "timing", "spawn", "accuracy"], kinds
    assert waited(res) < waited(res_plain), (waited(res), waited(res_plain))
    # Same rows, and each row's seconds are its own phases, not the rows timed between.
    for r in res["rows"]:
        ts, acc = row_seconds(r["form"], r["H"], r["T"])
        assert abs(r["seconds"] - (ts + acc)) < 1e-9


def test_end_s_skips_a_row_that_would_not_fit_and_measures_a_smaller_one_after_it():
    # Row order (--T 131072,4097): H=1024 at T=131072, 4097, then H=2048. End
    # the run where [131072, 2048] cannot fit but [4097, 2048] still can.
    full, _, _ = simulate([])
    end = full.t - 1000.0 - 150.0
    sim, rc, res = simulate(["--end-s", str(end), "--T", "131072,4097"])
    got = [(r["T"], r["H"]) for r in res["rows"]]
    skipped = [(x[0], x[1]) for x in res["meta"].get("skipped", [])]
    assert rc == 0 and sim.t - 1000.0 <= end, (sim.t - 1000.0, end)
    assert (131072, 2048) in skipped and (4097, 2048) in got, (got, skipped)


# The matrix's last rows (docs/results/peers/run-s19-*.json): res at H=5120/6144 and T >= 98304
# (row_seconds: ~40-75 s timing, ~70-135 s accuracy).
HEAVY = ["--peers", "TC,TCd", "--forms", "res", "--H", "5120,6144", "--T", "98304,131072", "--w", "bf16,fp32"]


def test_end_s_holds_with_deferred_accuracy():
    """Pending rows' accuracy phases count against --end-s: the run never
    ends after it (the caller's timeout would kill it with timed rows not
    written), and a deferred row is never lost."""
    for end in range(250, 1300, 50):
        sim, rc, res = simulate(["--defer-accuracy", "--end-s", str(end)], rows=HEAVY)
        assert sim.t - 1000.0 <= end, (end, sim.t - 1000.0)
        got, skipped, failed = plan_keys(res)
        assert len(got) + len(skipped) == 8 and not failed, (end, got, skipped)
    assert any(e[0] == "timing" and e[1] == "[131072, 5120] bf16 res" for e in sim.events)  # the last run: rows ran


def test_a_sticky_cuda_error_or_ctrl_c_lists_every_deferred_row():
    """Rows timed but not yet validated when the run stops go to skipped
    (so --done measures them again), never half-written and never lost."""
    plan = 8
    for extra in ([], ["--defer-accuracy"]):
        sim, rc, res = simulate(extra, fail_timing_at="[98304, 1024] bf16 plain")
        got, skipped, failed = plan_keys(res)
        assert (98304, 1024, "bf16", "plain") in failed and res["meta"]["stopped"], res["meta"]
        assert len(got) + len(skipped) + len(failed) == plan and not got & skipped, (extra, got, skipped)
        if extra:  # [4097, 1024] and [65537, 1024] were timed, waiting for the batch's last row
            assert {(4097, 1024, "bf16", "plain"), (65537, 1024, "bf16", "plain")} <= skipped
    sim, rc, res = simulate(["--defer-accuracy"], interrupt_accuracy_at="[65537, 1024] bf16 plain")
    got, skipped, failed = plan_keys(res)
    assert rc == "interrupted" and (4097, 1024, "bf16", "plain") in got, (rc, got)
    assert {(98304, 1024, "bf16", "plain"), (131072, 1024, "bf16", "plain")} <= skipped, skipped


def _alive(pid):
    """Whether pid is a process that has not exited (a zombie has)."""
    st = warmup.proc_state_ppid(pid)
    return st is not None and st[0] != "Z"


def test_a_killed_warm_up_child_takes_the_processes_under_it_along():
    """A warm-up child WarmAhead kills (row skipped, not needed, waited for
    too long) goes with every process under it - torch.compile's compile
    sidecar and workers in a real run, here a grandchild and its own child -
    not alone: left behind, they would compile on beside the next rows."""
    if not os.path.isdir("/proc/self"):
        print("test_peers_schedule: no /proc here, kill_tree test skipped")
        return
    # child -> grandchild -> great-grandchild, each sleeping; the child prints their PIDs.
    sleeper = "import time; time.sleep(120)"
    mid = ("import subprocess, sys, time; "
           f"g = subprocess.Popen([sys.executable, '-c', {sleeper!r}]); "
           "print(g.pid, flush=True); time.sleep(120)")
    top = ("import subprocess, sys, time; "
           f"m = subprocess.Popen([sys.executable, '-c', {mid!r}], stdout=subprocess.PIPE, text=True); "
           "print(m.pid, m.stdout.readline().strip(), flush=True); time.sleep(120)")
    child = subprocess.Popen([sys.executable, "-c", top], stdout=subprocess.PIPE, text=True)
    under = [int(x) for x in child.stdout.readline().split()]
    try:
        assert len(under) == 2 and all(_alive(x) for x in under), under
        assert sorted(warmup.descendants(child.pid)) == sorted(under)
        lines = []
        w = warmup.WarmAhead(cli.parse_args(["--peers", "TC"]), lines.append)
        spec = matrix.row_spec("plain", 64, 33, "bf16")
        w.procs[spec] = (child, tempfile.TemporaryFile(mode="w+"))
        w.drop(spec)
        assert child.returncode == -signal.SIGKILL and not w.procs, (child.returncode, lines)
        end = time.time() + 5
        while any(_alive(x) for x in under) and time.time() < end:
            time.sleep(0.05)
        assert not any(_alive(x) for x in under), f"left running after the child was killed: {under}"
    finally:
        child.kill()
        child.wait()
        for x in under:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(x, signal.SIGKILL)


def test_kill_tree_reads_again_until_no_new_process_shows_and_leaves_an_exited_child_alone():
    """kill_tree stops what it found and reads /proc again: a process that
    shows up only in the second read (started under the child meanwhile) is
    killed too, and the reads end with one that finds nothing new. A child
    that has already exited is only reaped: no read under its PID (which
    another process may hold by now). /proc's reads are faked here, the
    processes and signals are real."""
    sleep = [sys.executable, "-c", "import time; time.sleep(120)"]
    procs = [subprocess.Popen(sleep) for _ in range(3)]
    child, a, b = procs
    reads, real = [], warmup.descendants

    def fake_descendants(pid):
        reads.append(pid)
        return [a.pid] if len(reads) == 1 else [a.pid, b.pid]
    try:
        warmup.descendants = fake_descendants
        warmup.kill_tree(child)
        for q in procs:
            q.wait(timeout=5)
        assert [q.returncode for q in procs] == [-signal.SIGKILL] * 3, [q.returncode for q in procs]
        assert reads == [child.pid] * 3, reads  # [a], [a, b] (b new), [a, b] (nothing new)
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        end = time.time() + 10
        while _alive(gone.pid) and time.time() < end:  # exited, not yet reaped
            time.sleep(0.02)
        reads.clear()
        warmup.kill_tree(gone)
        assert gone.returncode == 0 and reads == [], (gone.returncode, reads)
    finally:
        warmup.descendants = real
        for q in procs:
            q.kill()
            q.wait()


if __name__ == "__main__":
    test_every_row_measured_and_no_child_beside_a_timing_phase_in_both_modes()
    test_defer_accuracy_times_a_warm_batch_back_to_back_and_waits_less()
    test_end_s_skips_a_row_that_would_not_fit_and_measures_a_smaller_one_after_it()
    test_end_s_holds_with_deferred_accuracy()
    test_a_sticky_cuda_error_or_ctrl_c_lists_every_deferred_row()
    test_a_killed_warm_up_child_takes_the_processes_under_it_along()
    test_kill_tree_reads_again_until_no_new_process_shows_and_leaves_an_exited_child_alone()
    print("test_peers_schedule: ok")
