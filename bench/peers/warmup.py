"""Setup warm-up: child processes that compile the next rows' torch.compile
functions while a row's accuracy phase runs, and killing a child with every
process under it.

While a row's accuracy phase runs (host-bound: the oracle), child processes
(peers.py --warm-compile) run the next rows' torch.compile functions (TC,
TCd) once, so that those rows' setups find inductor's caches warm
(autotuning is most of a row's setup: 17-103 s cold, 0.6 s warm;
docs/perf/peers.md, D7).
When the next row is not warm, up to --warm-ahead (4) children start side by
side, one per upcoming row (fewer where their GPU memory would pass half the
free memory, or the deadline leaves no time for the rows); the next row
starts after all of them end, so no child ever overlaps a timing phase, and
the batch's later rows start without waiting (with one child per row,
rows waited 20-67 s for the next row's compile: D7). A row records it as
"prewarm": rc, the seconds the run waited, the child's per-function
seconds, the batch's rows. A child that is no longer
needed, or waited for too long, is killed with every process under it
(inductor's compile workers: kill_tree). The autotuning shares the GPU with
the accuracy phase's eager runs (short: the GPU is idle most of that phase).
--no-warm-next (or --warm-ahead 0) turns it off. --defer-accuracy times the
rows a batch warmed back to back and runs their accuracy phases together
beside the next batch's compiles, so that more of the compile is hidden than
one row's accuracy phase covers (without it the runs waited 517 of 1575 s
for compiles: D7)."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

from .impls import form_inputs, make_impls
from .matrix import case_id, die_usage, parse_spec, row_elements

# The child's command: this package run as a program (its __main__.py).
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))

class WarmAhead:
    """Warm-up children (see the module docstring): when the next row's
    TC/TCd are not warm, up to --warm-ahead children start together after a
    row's timing (the first batch: after the copy ceiling, before the first
    row), one per upcoming row, and all of them are waited for before the
    next row starts, so that none runs beside a timing phase. The compiles
    run side by side (a cold max-autotune setup takes 17-103 s, and
    side-by-side autotuning picked no worse: docs/perf/peers.md, D7), and
    the rows of a batch after the first start warm, without a child; the
    batch after it starts at the timing's end of the last row before a row
    that is not warm."""

    def __init__(self, args, log):
        self.args, self.log = args, log
        self.ahead = 0 if args.no_warm_next else args.warm_ahead
        self.enabled = self.ahead > 0 and any(n in ("TC", "TCd") for n in args.peers)
        self.procs = {}  # spec -> (Popen, log file): children running
        self.ready = {}  # spec -> record: children of a batch that ended, their rows not yet run
        self.batch = []

    def warm(self, spec):
        """Whether `spec` is being warmed or was warmed by a batch not yet used."""
        return spec in self.procs or spec in self.ready

    def drop(self, spec):
        """The row `spec` will not run: kill its child if it still runs
        (children of other rows go on) and forget its record."""
        if spec in self.procs:
            self._end(spec, 0.01)
            self.log(f"  warm-up of {spec}: row skipped, killed")
        self.ready.pop(spec, None)

    def start(self, specs, free_bytes=None):
        """Start one child per spec (at most --warm-ahead, nothing if children
        run). free_bytes (the GPU's free memory, or None): the batch keeps
        only as many rows as fit in half of it by row_bytes(), at least one."""
        if not self.enabled or self.procs:
            return
        specs = fit_batch([s for s in specs if s not in self.ready][:self.ahead], free_bytes)
        import tempfile
        for spec in specs:
            cmd = [sys.executable, PACKAGE_DIR, "--warm-compile", spec,
                   "--peers", ",".join(self.args.peers), "--family", self.args.family]
            logf = None
            try:
                logf = tempfile.TemporaryFile(mode="w+", errors="replace")
                self.procs[spec] = (subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=logf), logf)
            except OSError as e:  # the run goes on without (more) warm-ups
                if logf is not None:
                    logf.close()
                self.log(f"  warm-up of {spec} could not start ({e}); warm-ups off for this run")
                self.enabled = False
                break
        self.batch = list(self.procs)
        if len(self.batch) > 1:
            self.log(f"  warm-up batch of {len(self.batch)} rows: {'; '.join(self.batch)}")

    def _end(self, spec, timeout):
        # The child stays in self.procs until it is reaped: an exception in
        # the wait (Ctrl-C during a long one included) leaves it there for
        # the caller's finish(None, 0) to kill.
        p, logf = self.procs[spec]
        try:
            rc = p.wait(timeout=timeout)
            killed = False
        except subprocess.TimeoutExpired:
            kill_tree(p)
            rc, killed = p.wait(), True
        del self.procs[spec]
        logf.seek(0)
        text = logf.read()
        logf.close()
        return rc, killed, text

    def finish(self, spec, timeout):
        """Before the row `spec` starts: wait for every running child (kill
        those still running past timeout seconds) and return the row's record
        {"rc", "waited_s" (what the parent waited: the warm-up's cost to the
        run; 0 for a row warmed by an earlier row's wait), "child" (its lines:
        each compiled function's seconds), "batch" (the rows warmed together)};
        None when no child warmed that row. If `spec` is not among the running
        children (the plan moved on, or spec None at the end), they are killed;
        spec None also drops the ready records."""
        if spec is None or (self.procs and spec not in self.procs):
            for s in list(self.procs):
                self._end(s, 0.01)
                self.log(f"  warm-up of {s}: not needed, killed")
            if spec is None:
                self.ready.clear()
            return self.ready.pop(spec, None) if spec is not None else None
        w0 = time.time()
        for s in list(self.procs):
            rc, killed, text = self._end(s, max(1.0, timeout - (time.time() - w0)))
            if killed:
                self.log(f"  warm-up of {s}: killed after {timeout:.0f} s of waiting")
            elif rc != 0:
                self.log(f"  warm-up of {s} failed (rc {rc}); the row compiles as usual:\n{text[-2000:]}")
            self.ready[s] = {"rc": rc, "waited_s": 0.0, "batch": self.batch,
                             "child": [ln for ln in text.splitlines() if ln.startswith("warm-compile ")]}
        rec = self.ready.pop(spec, None)
        if rec is not None:
            rec["waited_s"] = time.time() - w0
        return rec


def warm_compile(args):
    """The warm-up child: run the row's TC and TCd (forward, then backward
    from its outputs) once on the row's inputs, as run_row's setup does, so
    that torch.compile's compilation and autotuning land in inductor's
    on-disk caches; exit 0, or 1 (the parent then compiles as usual)."""
    try:
        form, H, T, wname = parse_spec(args.warm_compile)
    except ValueError:
        die_usage(f"--warm-compile {args.warm_compile!r}: expected FORM,H,T,W")
    names = {n for n in args.peers if n in ("TC", "TCd")}
    if not names:
        return 0
    import torch
    import normgate
    case = case_id(form, H, T, wname, args.family, 0)
    errors = {}
    # CUDA as in the parent; the CPU only to test this function without a GPU.
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    impls = make_impls(torch, names, normgate.case_info(case)["eps"], errors, device=dev)
    inp = form_inputs(torch, normgate.generate(case, device=dev))
    rc = 0
    for n in sorted(names):
        if n not in impls:
            print(f"warm-compile {n}: unavailable: {errors.get(n)}", file=sys.stderr)
            rc = 1
            continue
        t0 = time.time()
        fwd, bwd = impls[n]
        outs, saved = fwd(inp)
        bwd(inp, saved)
        if dev == "cuda":
            torch.cuda.synchronize()
        print(f"warm-compile {n} {args.warm_compile}: {time.time() - t0:.1f} s", file=sys.stderr)
    return rc


def fit_batch(specs, free_bytes):
    """The leading specs whose row_bytes() sum stays within half of
    free_bytes (the GPU's free memory; None: no limit), at least one."""
    if free_bytes is None:
        return list(specs)
    keep, used = [], 0
    for s in specs:
        used += row_bytes(s)
        if keep and used > free_bytes // 2:
            break
        keep.append(s)
    return keep


def row_bytes(spec):
    """A crude bound on a warm-up child's GPU memory for row `spec`
    (FORM,H,T,W): eight FP32 tensors of the row's [T, width] (its inputs, the
    compiled functions' outputs and autotuning buffers)."""
    form, H, T, _ = parse_spec(spec)
    return row_elements(form, H, T) * 4 * 8


def proc_state_ppid(pid):
    """(state letter, parent PID) of process `pid` from /proc/<pid>/stat
    (proc(5): "pid (comm) state ppid ...", comm may hold spaces and
    parentheses); None when it cannot be read (gone, or not Linux)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    state, ppid = stat[stat.rindex(")") + 2:].split()[:2]
    return state, int(ppid)


def descendants(pid):
    """The PIDs of every process under `pid` (its children, theirs, ...),
    from their /proc stat's ppid (proc_state_ppid); [] where /proc cannot
    be read (not Linux) or pid is None."""
    kids = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for d in names:
        st = proc_state_ppid(d) if d.isdigit() else None
        if st is not None:  # None: not a process, or gone since the listing
            kids.setdefault(st[1], []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def kill_tree(p):
    """SIGKILL a warm-up child `p` (a subprocess.Popen) and every process
    under it: torch.compile's compile sidecar and workers, which would
    otherwise outlive a killed child (inductor's workers poll for a dead
    parent only once a minute) and compile on beside the next row. The child
    and each process found are stopped (SIGSTOP) before /proc is read again,
    until a read finds no new one, so none can start another unseen; then
    all get SIGKILL (in a finally: an exception or Ctrl-C in between leaves
    nothing stopped). A child that has already exited is only reaped: its
    PID may name another process by now, and its orphans are no longer
    under it. A process found but gone before its signal is skipped. The
    child stays in the caller's process group, so a kill of the whole run
    (the caller's timeout) still reaches it. Without SIGSTOP (not
    POSIX) or /proc (not Linux): the child alone."""
    if not hasattr(signal, "SIGSTOP"):
        p.kill()
        return
    p.send_signal(signal.SIGSTOP)  # Popen: polls first, nothing when the child has exited
    if p.returncode is not None:  # exited and reaped: p.pid is free for reuse
        return
    seen = []
    try:  # while stopped, the child is not reaped, so p.pid stays its own
        while True:
            new = [d for d in descendants(p.pid) if d not in seen]
            if not new:
                break
            for d in new:  # parents come before their children (descendants' order)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(d, signal.SIGSTOP)
                seen.append(d)
    finally:
        for d in seen:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(d, signal.SIGKILL)
        p.kill()
