"""A row's setup and timing phases: each implementation's eager run and one
CUDA graph per op (pools, a retry with one pool per implementation when the
private pools run out of memory), then interleaved rounds of replays with
a cold L2, timed by CUDA events (Timer), with CUPTI's graph spans (--cupti)
and the NVML counters (bench/gpu_state.py) beside them; and the copy
ceiling the tables compare with."""
from __future__ import annotations

import gc
import os
import statistics
import sys
import time
import traceback

import gpu_state  # NVML counters around timed blocks (bench/gpu_state.py)

from .impls import CAPTURE_ORDER, form_inputs, op_fn
from .matrix import case_id

class Timer:
    """CUDA-graph replays with a cold L2, timed by events around the replay."""

    def __init__(self, torch):
        self.torch = torch
        l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 << 20)
        n = max(2 * l2, 256 << 20) // 4
        self.flush_buf = torch.ones(n, dtype=torch.float32, device="cuda")
        self.flush_out = torch.empty((), dtype=torch.float32, device="cuda")
        # Each graph gets its own memory pool (pool None). A pool shared by
        # every graph of a row saved memory but faulted (illegal address) in
        # the full-peer run at [131072, 4096] w fp32 on the H200, although each
        # implementation alone replays cleanly (bench/peers_isolate.py):
        # docs/perf/peers.md, D1 and D8. NG_PEERS_SHARED_POOL=1 restores the
        # shared pool; NG_PEERS_SHARED_POOL=impl shares one pool among the
        # graphs of one implementation (its pools then hold the max, not the
        # sum, of its three graphs' memory: see run_row). The fault's cause
        # was found later (freed eager tensors, unmapped by the empty_cache()
        # that torch.cuda.graph runs before each capture), so sharing should
        # be safe now, but it has not been re-run on the H200.
        self.pool_mode = os.environ.get("NG_PEERS_SHARED_POOL", "")
        self.pool = torch.cuda.graph_pool_handle() if self.pool_mode == "1" else None
        # Everything (inputs, eager runs, warm-up, capture, replays) runs on
        # this one non-default stream: autograd runs a backward on the stream
        # of its forward, and the legacy default stream cannot join a capture.
        self.stream = torch.cuda.Stream()
        # NVML counters around each timed block (bench/gpu_state.py): None
        # where NVML is missing; then nothing is recorded.
        # Only by PCI bus id: NVML's index 0 may be another GPU than CUDA's
        # (NVML ignores CUDA_VISIBLE_DEVICES), so no bus id, no NVML.
        self.gpu = None
        # CUPTI graph spans (--cupti): normgate's graph_spans_take once the
        # trace is on, or None; spans holds the last time() call's spans in us.
        self.cupti = None
        self.spans = None
        self.cupti_off = None  # why CUPTI was turned off mid-run, if it was
        props = torch.cuda.get_device_properties(0)
        if hasattr(props, "pci_bus_id"):
            bus = f"{getattr(props, 'pci_domain_id', 0):08x}:{props.pci_bus_id:02x}:{getattr(props, 'pci_device_id', 0):02x}.0"
            self.gpu = gpu_state.GpuState.open(bus)

    def flush(self):
        # A read of the whole buffer: only clean lines stay behind.
        self.torch.sum(self.flush_buf, dim=0, out=self.flush_out)

    def impl_pool(self):
        """The pool for one implementation's graphs: a fresh shared one in
        mode 'impl', else the row-wide one (None: a private pool per graph)."""
        return self.torch.cuda.graph_pool_handle() if self.pool_mode == "impl" else self.pool

    def capture(self, fn, pool="row"):
        torch = self.torch
        assert torch.cuda.current_stream() == self.stream, "capture() must run on Timer.stream"
        if pool == "row":
            pool = self.pool
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(g, pool=pool, stream=self.stream):
                fn()
        except Exception:
            # A failed capture can leave its pool recording: later captures
            # get a fresh pool, so one implementation's failure stays its own
            # (run_row drops the failed implementation's pool with its graphs).
            if self.pool is not None:
                self.pool = torch.cuda.graph_pool_handle()
            try:
                torch.cuda.synchronize()
            except Exception:  # noqa: BLE001
                pass
            raise
        torch.cuda.synchronize()
        return g

    def time(self, g, n):
        """n replays of graph g, each after an L2 flush: the CUDA-event
        elapsed times in us. With CUPTI on (self.cupti: normgate's
        graph_spans_take, its trace enabled once before any graph was
        captured, see main), self.spans
        gets the same n replays' spans in us from its graph-level trace
        (match_spans); CUPTI's failures raise CuptiError. Without CUPTI the
        calls are those of the events-only timer; with it, one more
        synchronize (after the warm-up replay), two takes, one more untimed
        replay after the first take, and CUPTI's trace of every launch."""
        torch = self.torch
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]

        def replays():
            for s, e in ev:
                self.flush()
                s.record()
                g.replay()
                e.record()
            torch.cuda.synchronize()
        g.replay()
        self.spans = None
        if self.cupti is None:
            replays()
            return [s.elapsed_time(e) * 1e3 for s, e in ev]  # us

        def take(cap):
            try:
                return self.cupti(cap)
            except (RuntimeError, ValueError) as e:
                raise CuptiError(str(e)) from None
        torch.cuda.synchronize()  # the warm-up replay's record goes with the take below
        take(1 << 20)  # the trace has been on since before any capture: drop what came before
        # The first graph launch after a take stalls the host inside the
        # launch for 0.7-6 ms on the H200 (docs/perf/peers.md, D5; the probe:
        # docs/results/peers/cupti/cupti_events.txt), which the
        # events around it would hold: one more untimed replay takes it.
        g.replay()
        replays()
        recs = take(2 * n + 16)
        # recs[0] is the untimed replay's (no L2 flush before it): never a
        # sample; match_spans then wants exactly the n timed replays.
        self.spans = match_spans(recs[1:], n)
        return [s.elapsed_time(e) * 1e3 for s, e in ev]  # us


class CuptiError(RuntimeError):
    """CUPTI's graph spans failed (start, stop, or records that do not match
    the replays); the events' timing is not at fault."""


def match_spans(recs, n):
    """The spans in us of n replays of one graph from CUPTI's records
    [(graph_id, correlation_id, start_ns, end_ns)] of one recording (the
    L2 flush is not a graph: nothing else launches a graph between start and
    stop). CuptiError unless there are exactly n records, all of one graph,
    each with end > start (0/0: CUPTI could not time it)."""
    graphs = sorted({r[0] for r in recs})
    spans = [(end - start) / 1e3 for _, _, start, end in recs if end > start]
    if len(recs) != n or len(spans) != n or len(graphs) != 1:
        raise CuptiError(f"CUPTI recorded {len(recs)} graph executions ({len(spans)} timed, graphs {graphs}) "
                         f"for {n} replays of one graph")
    return spans


def cupti_time(timer, g, n, spans, log):
    """timer.time(g, n), appending CUPTI's spans of the same replays to
    `spans` when CUPTI is on; a CUPTI failure (CuptiError only: a CUDA error
    of the replays is the implementation's) turns CUPTI off for the run
    (logged, timer.cupti_off says why) and never costs the events' timing,
    which is redone without CUPTI."""
    try:
        us = timer.time(g, n)
    except CuptiError as e:
        log(f"  CUPTI graph spans failed ({e}); off for this run")
        timer.cupti = None
        timer.cupti_off = str(e)
        return timer.time(g, n)
    if timer.spans is not None:
        spans += timer.spans
    return us


def cupti_lines(row, ops):
    """One log line per op of a row timed with --cupti: each implementation's
    CUPTI span median and its CUDA-event median, in us (the difference: the
    launch latency the events include)."""
    out = []
    for op in ops:
        parts = []
        for n, info in row["impls"].items():
            c, e = info.get("cupti_us", {}).get(op), info.get("us", {}).get(op)
            if c and e:
                parts.append(f"{n} {c:.2f}/{e:.2f}")
        if parts:
            out.append(f"  cupti/events us, {op}: " + ", ".join(parts))
    return out


def gpu_sample(timer, log):
    """The NVML sample around a timed block (bench/gpu_state.py), or None; an
    NVML failure turns the sampling off for the run, never costs a timing."""
    if timer.gpu is None:
        return None
    try:
        return timer.gpu.sample()
    except Exception as e:  # noqa: BLE001
        log(f"  NVML sampling failed ({type(e).__name__}: {e}); off for this run")
        timer.gpu = None
        return None


def triton_copy(torch):
    """A Triton copy (8192 BF16 per program, 8 warps: 8 x 16-byte vectors per
    thread), a second candidate for the copy ceiling; None without Triton."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def _copy(dst, src, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(dst + offs, tl.load(src + offs, mask=m), mask=m)

    def run(dst, src):
        n = src.numel()
        _copy[(triton.cdiv(n, 8192),)](dst, src, n, BLOCK=8192, num_warps=8)

    return run


def copy_ceiling(torch, timer, nbytes, reps):
    """The copy ceiling: bandwidth (bytes read + written, GB/s) of the fastest
    of normgate's ceiling copies (normgate.CEILING_KINDS: 16-byte vector copies
    of several shapes, cudaMemcpyAsync, Hopper bulk copies) and a Triton copy,
    same buffers, each timed like a row. The one-direction streams read_only
    and write_only (bandwidth = bytes / time) are timed too and reported under
    "directions": they are not copies and never the ceiling, but say how far
    the mixed read/write traffic of a copy is from each direction alone."""
    import normgate

    n = (nbytes // 16) * 16
    src = torch.ones(n // 2, dtype=torch.bfloat16, device="cuda")
    dst = torch.empty_like(src)
    kinds = getattr(normgate, "CEILING_KINDS", ())
    cands = {"normgate copy_vec16": (lambda: normgate.copy_vec16(dst, src), 2)}
    for k in kinds:
        if k == "vec16_grid4":  # the same kernel as copy_vec16
            continue
        copy = k not in ("read_only", "write_only")
        cands[f"normgate {k}"] = ((lambda k=k: normgate.ceiling_stream(k, None if k == "read_only" else dst,
                                                                        None if k == "write_only" else src)),
                                  2 if copy else 1)
    tc = triton_copy(torch)
    if tc is not None:
        cands["triton copy"] = (lambda: tc(dst, src), 2)
    res, dirs, errs = {}, {}, {}
    for name, (fn, ways) in cands.items():
        # One failing candidate (a Triton or library error) must not end the run.
        try:
            g = timer.capture(fn)
            # cupti_time: a CUPTI failure turns CUPTI off, never costs the candidate
            t = statistics.median(cupti_time(timer, g, reps, [], lambda s: print(s, file=sys.stderr, flush=True)))
            (res if ways == 2 else dirs)[name] = {"us": t, "GBps": ways * n / (t * 1e-6) / 1e9}
        except Exception as e:  # noqa: BLE001 - reported in the output
            errs[name] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        g = None
    if not res:
        return {"GBps": None, "us": None, "by": None, "bytes": n, "candidates": {}, "directions": dirs,
                "errors": errs}
    best = max(res, key=lambda k: res[k]["GBps"])
    return {"GBps": res[best]["GBps"], "us": res[best]["us"], "by": best, "bytes": n, "candidates": res,
            "directions": dirs, "errors": errs}


def round_order(base, r, rounds):
    """Timing order of round r of `rounds`: `base` rotated by r * len / rounds
    (spread over the list, not by one place a round), reversed on odd rounds."""
    if not base:
        return []
    k = (r * len(base)) // rounds % len(base)
    order = base[k:] + base[:k]
    return order[::-1] if r % 2 == 1 else order


def is_oom(error):
    """True for a recorded setup error that is CUDA running out of memory
    (torch.cuda.OutOfMemoryError, or a CUDA/cuBLAS "out of memory")."""
    return bool(error) and ("OutOfMemoryError" in error or "out of memory" in error.lower()
                            or "CUBLAS_STATUS_ALLOC_FAILED" in error)


def setup_graphs(torch, impls, names, inp, timer, ops, row, log):
    """Each implementation's eager run on the row's inputs, then one CUDA
    graph per op captured on timer.stream (in the pool timer.impl_pool()
    gives). Returns (graphs {(name, op): graph}, keep {name: (outs, saved)}).
    A failure is recorded against the implementation (row["impls"][name]
    ["error"]) and frees what it held, so the implementations after it still
    run; setup_s and reserved_GiB are recorded for the others.
    A graph holds raw pointers, not references: every tensor a graph reads
    that was made outside it (the eager forward's outputs and saved tensors)
    must stay referenced until the graph is gone (keep), or the allocator
    hands its memory to the next implementation (garbage inputs, or an
    illegal address: seen on the H200, docs/perf/peers.md, D1)."""
    graphs = {}
    keep = {}
    for name in names:
        fwd, bwd = impls[name]
        info = row["impls"].setdefault(name, {"us": {}, "error": None})
        try:
            t0 = time.time()
            pool = timer.impl_pool()
            outs, saved = fwd(inp)
            keep[name] = (outs, saved)
            torch.cuda.synchronize()
            for op in ops:
                graphs[(name, op)] = timer.capture(op_fn(impls[name], op, inp, saved), pool)
            info["setup_s"] = time.time() - t0
            info["reserved_GiB"] = torch.cuda.memory_reserved() / 2**30
            log(f"  {name}: set up in {info['setup_s']:.1f} s; {info['reserved_GiB']:.1f} GiB reserved")
        except Exception as e:  # noqa: BLE001
            info["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            log(f"  {name}: setup failed: {info['error']}")
            log(traceback.format_exc())
            # Free what the failed implementation holds (graphs of its other
            # ops, its eager outputs) for the implementations after it.
            for op in ops:
                graphs.pop((name, op), None)
            keep.pop(name, None)
            outs = saved = pool = None
            gc.collect()
    return graphs, keep


def setup_row_graphs(torch, impls, names, inp, timer, ops, row, log):
    """setup_graphs for a row, in the timer's pool mode; if that is a private
    pool per graph (the default) and an implementation ran out of GPU memory,
    the whole row again with one pool per implementation (recorded in
    row["pool_mode"]; "private" or the NG_PEERS_SHARED_POOL mode otherwise).
    At [65537, 6144] w fp32 res the nine implementations' private pools held
    102 GiB, so rows at T >= 98304 outgrow the H200's 139 GiB
    (docs/perf/peers.md, D8). An implementation that fails in both modes
    keeps its error. Returns setup_graphs' (graphs, keep)."""
    graphs, keep = setup_graphs(torch, impls, names, inp, timer, ops, row, log)
    failed = [n for n in names if is_oom(row["impls"][n]["error"])]
    if timer.pool_mode == "" and failed:
        # Private pools (one per graph) hold the sum of an implementation's
        # three graphs; one pool per implementation holds about the largest
        # (the captures free their temporaries before the next begins). The
        # whole row is set up again that way, so that its implementations
        # share one pool mode (recorded as the row's "pool_mode").
        log(f"  out of GPU memory with a private pool per graph ({', '.join(failed)}, "
            f"{torch.cuda.memory_reserved() / 2**30:.1f} GiB reserved): the row again with one pool per implementation")
        del graphs, keep
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        row["impls"] = {}
        timer.pool_mode = "impl"
        try:
            graphs, keep = setup_graphs(torch, impls, names, inp, timer, ops, row, log)
        finally:
            timer.pool_mode = ""
        row["pool_mode"] = "impl (private pools ran out of memory at " + ", ".join(failed) + ")"
    else:
        row["pool_mode"] = timer.pool_mode or "private"
    return graphs, keep


def run_row_timing(torch, args, impls, errors, form, H, T, wname, timer, log):
    """A row's setup and timing phases: (row with every implementation's
    "us", "p10_p90", "round_us" and phase_s setup/timing, the live
    implementations' names). The graphs are freed before it returns."""
    import normgate

    case = case_id(form, H, T, wname, args.family, 0)
    inp = form_inputs(torch, normgate.generate(case))
    heads = inp["heads"]
    # Capture (and table) order: normgate and its A/A copies first, then the
    # peers likeliest to be SOTA, the memory-hungry torch formulations (eager:
    # ~25 tensor-sizes of graph pools, F.rms_norm without its fused kernel:
    # ~34) last, so that an out-of-memory at the largest rows costs those
    # and not a SOTA candidate.
    names = [n for n in CAPTURE_ORDER if n in impls] + [n for n in impls if n not in CAPTURE_ORDER]
    row = {"H": H, "T": T, "w": wname, "form": form, "heads": heads, "case": case, "impls": {}}

    phase0 = time.time()
    graphs, keep = setup_row_graphs(torch, impls, names, inp, timer, args.ops, row, log)
    # Wall seconds of the row's phases (setup: eager run + graph captures,
    # torch.compile's autotuning included; timing; accuracy: every seed's
    # generation, eager runs and oracle), to plan device time.
    row["phase_s"] = {"setup": time.time() - phase0}
    phase0 = time.time()

    # Timing: rounds interleaved, order rotated (the A/A copies at the far
    # end of the base order from their originals).
    live = [n for n in names if row["impls"][n]["error"] is None]
    base = [n for n in live if not n.endswith("#2")] + [n for n in live if n.endswith("#2")]
    per_round = [args.replays // args.rounds + (1 if r < args.replays % args.rounds else 0) for r in range(args.rounds)]
    samples = {(n, op): [] for n in live for op in args.ops}
    spans = {(n, op): [] for n in live for op in args.ops}  # CUPTI's, with --cupti
    rounds_us = {(n, op): [] for n in live for op in args.ops}
    for r in range(args.rounds):
        for n in round_order([m for m in base if m in live], r, args.rounds):
            try:
                s0 = gpu_sample(timer, log)
                got = []
                for op in args.ops:
                    got.append((op, cupti_time(timer, graphs[(n, op)], per_round[r], spans[(n, op)], log)))
                s1 = gpu_sample(timer, log)
                if s0 is not None and s1 is not None:
                    gpu_state.accumulate(row["impls"][n].setdefault("gpu_state", {}), s0, s1)
            except Exception as e:  # noqa: BLE001
                row["impls"][n]["error"] = f"timing: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                log(f"  {n}: {row['impls'][n]['error']}")
                live.remove(n)
                for op in args.ops:
                    samples.pop((n, op), None)
                torch.cuda.synchronize()  # a broken CUDA context fails the row here
                continue
            for op, v in got:
                samples[(n, op)] += v
                rounds_us[(n, op)].append(statistics.median(v))
    for (n, op), v in samples.items():
        row["impls"][n]["us"][op] = statistics.median(v)
        row["impls"][n].setdefault("p10_p90", {})[op] = [
            sorted(v)[len(v) // 10], sorted(v)[(len(v) * 9) // 10]]
        # Per-round medians (in round order): a slow block shows as one
        # round apart from the others; gpu_state says whether the GPU was
        # capped while it ran.
        row["impls"][n].setdefault("round_us", {})[op] = rounds_us[(n, op)]
        sp = spans.get((n, op))
        if sp and len(sp) == len(v):  # every replay of the op also timed by CUPTI
            row["impls"][n].setdefault("cupti_us", {})[op] = statistics.median(sp)
    for line in spread_lines(row, args.ops):
        log(line)
    for line in cupti_lines(row, args.ops):
        log(line)
    del graphs
    del keep
    torch.cuda.empty_cache()
    row["phase_s"]["timing"] = time.time() - phase0
    return row, live


def spread_lines(row, ops, limit=1.03):
    """Log lines for the implementations of a timed row whose p90/p10 over
    the replays exceeds `limit`, with their per-round medians and the NVML
    throttle counters of their blocks (where recorded)."""
    out = []
    for n, info in row["impls"].items():
        for op in ops:
            p = info.get("p10_p90", {}).get(op)
            if not p or not p[0] or p[1] / p[0] <= limit:
                continue
            rounds = "/".join(f"{v:.1f}" for v in info.get("round_us", {}).get(op, []))
            g = info.get("gpu_state") or {}
            gs = ""
            if g:
                gs = (f"; blocks' power-cap {g.get('power_violation_ms', 0):.1f} ms, thermal {g.get('thermal_violation_ms', 0):.1f} ms, "
                      f"SM {g.get('sm_mhz_min')}-{g.get('sm_mhz_max')} MHz, reasons 0x{g.get('reasons_or', 0):x}")
            out.append(f"  spread: {n} {op} p90/p10 {p[1] / p[0]:.3f} (round medians {rounds} us{gs})")
    return out
