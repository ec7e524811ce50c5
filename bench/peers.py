#!/usr/bin/env python3
"""normgate against its peers on one GPU, in one process, at one accuracy budget.

Method (from the seed PR, ../shared/seed/, and docs/perf.md):
  * latency = median over replays of ONE CUDA-graph replay of the op, the L2
    flushed before each replay (a read of a buffer larger than twice the L2,
    outside the timed span), timed by CUDA events around the replay alone
    (the tables' numbers; --cupti adds each replay's span from CUPTI's
    graph trace beside them, which the tables do not use because the trace
    itself lengthens the events: docs/perf.md, session 17);
  * each implementation's own setup, reduction, cast and copy kernels are
    inside the graph, hence inside the span;
  * --replays replays per implementation and op (>= 201), split over --rounds
    interleaved rounds; the implementation order rotates between rounds;
  * A/A: a second, separately captured copy of `det` (deterministic=True) and
    of `ours` (deterministic=False) gives the noise floor of the row;
  * ratios from unrounded medians;
  * accuracy at the same budget: every implementation's outputs for the timed
    shape go through normgate's FP64 oracle and validators (dx atol = rtol =
    1e-2, dw atol 1e-4 + rtol 1e-4, y as normgate's budgets) on --seeds seeds
    of --family; SOTA = the fastest peer that is within budget on every seed.

Implementations (names as in the tables):
  det, det#2    normgate, deterministic=True (bwd_det_chunked), and its A/A copy
  ours, ours#2  normgate, deterministic=False (bwd_nondet_atomic), and its A/A copy
  eager         torch eager, explicit FP32-statistics math (y BF16, rstd/dw FP32)
  TC            torch.compile(mode="max-autotune-no-cudagraphs") of that math,
                inductor emulate_precision_casts=True
  TCd           the same, inductor default mode
  F.rms_norm    torch.nn.functional.rms_norm + autograd (no rstd output)
  Liger         Liger-Kernel rms_norm_forward/backward, casting_mode "gemma", offset 0
  Q             QuACK rmsnorm_fwd(store_rstd=True)/rmsnorm_bwd, heuristic config

Usage (on the H200; the normgate library must be built, NORMGATE_LIB may name it):
  python3 bench/peers.py --H 4096 --T 65537,131072 --w bf16,fp32 \
      --json out/peers.json --md out/peers.md
Setup warm-up: while a row's accuracy phase runs (host-bound: the oracle),
child processes (peers.py --warm-compile) run the next rows' torch.compile
functions (TC, TCd) once, so that those rows' setups find inductor's caches
warm (autotuning is most of a row's setup: 17-103 s in session 13, 0.6 s
warm). When the next row is not warm, up to --warm-ahead (4) children start
side by side, one per upcoming row (fewer where their GPU memory would pass
half the free memory, or the deadline leaves no time for the rows); the next
row starts after all of them end, so no child ever overlaps a timing phase,
and the batch's later rows start without waiting (session 17: with one child,
rows waited 20-67 s for the next row's compile while the cores were mostly
idle). A row records it as "prewarm": rc, the seconds the run waited, the
child's per-function seconds, the batch's rows. A child that is no longer
needed, or waited for too long, is killed with every process under it
(inductor's compile workers: kill_tree). The autotuning shares the GPU
with the accuracy phase's eager runs (short: the GPU is idle most of that
phase). --no-warm-next (or --warm-ahead 0) turns it off. --defer-accuracy
times the rows a batch warmed back to back and runs their accuracy phases
together beside the next batch's compiles, so that more of the compile is
hidden than one row's accuracy phase covers (session 18: the runs waited
517 of 1575 s for compiles).
Time limits: --deadline-s starts no row after it; --end-s (scripts/peers.sh
passes its timeout) starts no row predicted to end after it (predict_row_s:
this run's rows' timing + accuracy scaled by element count, x1.3, +10 s,
+100 s for a row without a warm-up; 15 s kept for the end), waits for a
warm-up no longer than leaves the row its time, and warms no row it will
skip; a smaller row may still start after a skipped one. So a large row late
in a call is skipped, not killed halfway (session 18: rows of 52-110 s, and a
fixed margin that left 140 s idle).
Writes Markdown and JSON (atomically: temp file, then rename) and prints the
Markdown last. Exit 0 on a completed run (speed is never asserted), 2 on usage
errors, 1 when nothing could be measured.

  python3 bench/peers.py --merge A.json B.json ... --json all.json --md all.md
merges runs (shards of one matrix on several GPUs, or slices run in several
sessions; no GPU or torch needed): rows in the order given, each keeping the
copy ceiling of its own run for its "of copy" column; the title gives the
runs' date range, the header every run's GPU, driver and versions, and "Runs"
at the end each run's file, date and command; stdout gets the table, or with --md
one line naming the files written. Exit 2 when a file is not a peers.py
result or two runs hold the same row.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
import traceback

PROC_T0 = time.time()  # --end-s counts from here: the caller's timeout started with the process

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
import gpu_state  # noqa: E402 - NVML counters around timed blocks (bench/gpu_state.py)

ALL_PEERS = ["eager", "TC", "TCd", "F.rms_norm", "Liger", "Q"]
OPS = ["fwd", "bwd", "2xfwd+bwd"]
FORMS = ["plain", "res", "heads24", "heads4"]
# The input families of a case id (seeds/include/normgate/seeds/case_id.h's
# enum Family, in its order; a CPU test keeps the two lists equal).
FAMILIES = ["normal", "llm", "cancel", "zeros", "tiny", "huge", "specials"]
# Method settings two results must share to sit in one table (--merge) or to
# stand for each other's rows (--done).
SAME_METHOD = ("replays", "rounds", "seeds", "family")


def die_usage(msg):
    print(f"peers.py: {msg}", file=sys.stderr)
    sys.exit(2)


def parse_list(s, conv, name):
    out = []
    for tok in s.split(","):
        tok = tok.strip()
        if not tok:
            continue
        try:
            out.append(conv(tok))
        except ValueError:
            die_usage(f"bad value {tok!r} in --{name} (want {getattr(conv, '__name__', 'a value')}s, comma-separated)")
    if not out:
        die_usage(f"--{name} is empty")
    return out


class DefaultsShown(argparse.HelpFormatter):
    """--help with each option's default, where it has one worth showing
    (not for flags or empty values)."""

    def _get_help_string(self, action):
        h = action.help or ""
        d = action.default
        if not (d is None or d is False or d == "" or d is argparse.SUPPRESS) and "%(default)" not in h \
                and action.option_strings:
            h += " (default: %(default)s)"
        return h


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=DefaultsShown,
        epilog="Merge runs into one table (no GPU): peers.py --merge A.json B.json ... --json OUT --md OUT")
    p.add_argument("--H", default="1536,2048,4096,5120,6144", help="hidden sizes of plain and res rows (comma list)")
    p.add_argument("--T", default="4097,65537,98304,131072", help="tokens T (comma list; per-head forms: T tokens of 24 or 4 heads)")
    p.add_argument("--w", default="bf16,fp32", help="weight dtypes: bf16, fp32")
    p.add_argument("--ops", default=",".join(OPS), help="ops timed: " + ", ".join(OPS))
    p.add_argument("--peers", default=",".join(ALL_PEERS),
                   help="peers beside normgate (Q is QuACK, which cannot run on the H200 machine: the matrix uses "
                        "eager,TC,TCd,F.rms_norm,Liger)")
    p.add_argument("--replays", type=int, default=201, help="timed graph replays per implementation and op (>= 201 for tables)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds the replays are split over (order rotated)")
    p.add_argument("--seeds", type=int, default=5, help="accuracy seeds per row (worst counts)")
    p.add_argument("--family", default="normal", help="input family of the accuracy seeds: " + ", ".join(FAMILIES))
    p.add_argument("--forms", default="plain",
                   help="plain, res (at each --H), heads24, heads4 (H = 256, T tokens)")
    p.add_argument("--deadline-s", type=float, default=0,
                   help="start no new row after this many seconds, counted from after torch's import (a hard cut, "
                        "no prediction; with --end-s both apply; 0: none)")
    p.add_argument("--end-s", type=float, default=0,
                   help="the caller stops the run this many seconds after the process started (scripts/peers.sh "
                        "passes its timeout; peers.py does not stop itself): a row predicted to end later, with the "
                        "pending deferred accuracy phases, is not started, a smaller one may still be (prediction: "
                        "this run's rows' timing + accuracy scaled by element count, x1.3, +10 s, +100 s without a "
                        "warm-up; 0: none)")
    p.add_argument("--defer-accuracy", action="store_true",
                   help="time the rows a warm-up batch warmed back to back and run their accuracy phases "
                        "together, beside the next batch's compiles (more of the compile hidden than behind one "
                        "row's accuracy phase); same measurements, rows written when their accuracy ends. Needs "
                        "warm-ups (nothing is deferred with --no-warm-next); with --end-s the first row's accuracy "
                        "is not deferred; rows timed but not validated when the run stops are listed as skipped")
    p.add_argument("--done", default="",
                   help="comma-separated peers.py result JSONs (glob patterns allowed): rows already in them are "
                        "skipped, so a matrix spread over several calls continues where it stopped; a file counts "
                        "only if it was measured with the same --seeds, --family, --replays, --rounds and every "
                        "peer of --peers")
    p.add_argument("--plan", action="store_true",
                   help="print the rows this run would measure (after --done) and exit; needs no GPU or torch")
    p.add_argument("--cupti", action="store_true",
                   help="also record each timed replay's span from CUPTI's graph-level trace (GPU timestamps of the "
                        "graph's first and last node, no launch latency) beside the CUDA events; the tables stay "
                        "on events, the JSON gets cupti_us and the log compares the two")
    p.add_argument("--no-warm-next", action="store_true",
                   help="do not compile the next rows' TC/TCd in child processes during a row's accuracy phase")
    p.add_argument("--warm-ahead", type=int, default=4, metavar="K",
                   help="when the next row's TC/TCd are not compiled yet (inductor's caches cold), compile the "
                        "next K rows' side by side, one child each (0..16; fewer where their GPU memory would pass half the free memory or "
                        "--deadline-s / --end-s leaves no time for the rows; 0: no warm-up children, as --no-warm-next, which wins over K)")
    p.add_argument("--warm-compile", default="", metavar="FORM,H,T,W",
                   help=argparse.SUPPRESS)  # internal: the child of the warm-up (compile one row's TC/TCd, exit)
    p.add_argument("--json", default="", help="write the result JSON here (atomically; after every row)")
    p.add_argument("--md", default="", help="write the Markdown tables here (atomically; after every row)")
    a = p.parse_args(argv)
    a.H = parse_list(a.H, int, "H")
    a.T = parse_list(a.T, int, "T")
    a.w = parse_list(a.w, str, "w")
    a.ops = parse_list(a.ops, str, "ops")
    a.peers = parse_list(a.peers, str, "peers")
    a.forms = parse_list(a.forms, str, "forms")
    for f in a.forms:
        if f not in FORMS:
            die_usage(f"--forms: unknown form {f!r} ({', '.join(FORMS)})")
    for w in a.w:
        if w not in ("bf16", "fp32"):
            die_usage(f"--w: unknown weight dtype {w!r} (bf16, fp32)")
    for op in a.ops:
        if op not in OPS:
            die_usage(f"--ops: unknown op {op!r} ({', '.join(OPS)})")
    for peer in a.peers:
        if peer not in ALL_PEERS:
            die_usage(f"--peers: unknown peer {peer!r} ({', '.join(ALL_PEERS)})")
    if a.replays < 3 or a.rounds < 1 or a.replays < a.rounds:
        die_usage(f"--replays {a.replays} / --rounds {a.rounds}: need replays >= rounds >= 1, replays >= 3")
    if a.deadline_s < 0:
        die_usage(f"--deadline-s {a.deadline_s}: need >= 0 (0: no deadline)")
    if a.end_s < 0:
        die_usage(f"--end-s {a.end_s}: need >= 0 (0: no prediction)")
    if not 0 <= a.warm_ahead <= 16:
        die_usage(f"--warm-ahead {a.warm_ahead}: need 0..16 (0: no warm-up children)")
    if a.seeds < 1:
        die_usage(f"--seeds {a.seeds}: need >= 1")
    if a.family not in FAMILIES:
        die_usage(f"--family {a.family!r}: unknown family ({', '.join(FAMILIES)})")
    for h in a.H:
        if not 1 <= h <= 16384:
            die_usage(f"--H {h}: outside 1..16384")
    for t in a.T:
        if not 1 <= t <= 2**31:
            die_usage(f"--T {t}: outside 1..2^31 (case ids' range)")
    return a


def atomic_write(path, text):
    if not path:
        return
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# ----------------------------------------------------------------------------
# Implementations: fwd(x, w) -> (y, rstd_or_None, saved); bwd(dy, x, w, saved) -> (dx, dw)


def make_impls(torch, names, eps, errors, device="cuda"):
    """name -> (fwd, bwd) over a case's inputs `inp` (normgate.generate's dict,
    x possibly a strided view):
        fwd(inp)        -> (outs, saved)  outs: y, rstd (None if not exposed), h_new (res)
        bwd(inp, saved) -> outs           outs: dx (form res: dh = dx + dh_new), dw
    Every form: plain [T, H]; heads24/heads4 [T, nh, 256] (rows of 256, one w
    shared by all heads, dw summed over T and heads); res (h_new = h + u in
    BF16, then the norm; backward dh = dx + dh_new). Peers get the form the way
    a user would write it: torch math on the [..., H] tensor, and for res a
    torch add around the peer's norm (torch.compile fuses its own adds)."""
    F = torch.nn.functional
    impls = {}

    def ng(deterministic):
        import normgate

        def fwd(inp):
            x0 = inp["h"] if inp["form"] == "res" else inp["x"]
            msq = torch.empty((x0.numel() // x0.shape[-1],), dtype=torch.float64, device=x0.device)
            if inp["form"] == "res":
                y, rstd, h_new = normgate.rmsnorm_train_forward(inp["h"], inp["w"], eps, residual=inp["u"], msq=msq)
                return {"y": y, "rstd": rstd, "h_new": h_new}, (h_new, rstd, msq)
            y, rstd = normgate.rmsnorm_train_forward(inp["x"], inp["w"], eps, msq=msq)
            return {"y": y, "rstd": rstd}, (inp["x"], rstd, msq)

        def bwd(inp, saved):
            xs, rstd, msq = saved
            dx, dw = normgate.rmsnorm_train_backward(inp["dy"], xs, inp["w"], rstd, dh_new=inp.get("dh_new"),
                                                     deterministic=deterministic, msq=msq)
            return {"dx": dx, "dw": dw}

        return fwd, bwd

    impls["det"] = ng(True)
    impls["det#2"] = ng(True)
    impls["ours"] = ng(False)
    impls["ours#2"] = ng(False)

    # The explicit FP32-statistics math (eager, TC, TCd), on [..., H].
    def ref_fwd(x, w):
        xf = x.float()
        rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        y = (xf * rstd * w.float()).to(torch.bfloat16)
        return y, rstd.squeeze(-1)

    def ref_bwd(dy, x, w, rstd):
        r = rstd.unsqueeze(-1)
        xhat = x.float() * r
        g = dy.float() * w.float()
        c = (g * xhat).mean(-1, keepdim=True)
        dx = ((g - xhat * c) * r).to(torch.bfloat16)
        dw = (dy.float() * xhat).sum(dim=tuple(range(x.dim() - 1)))
        return dx, dw

    def ref_fwd_res(h, u, w):
        h_new = (h.float() + u.float()).to(torch.bfloat16)
        y, rstd = ref_fwd(h_new, w)
        return y, rstd, h_new

    def ref_bwd_res(dy, dh_new, h_new, w, rstd):
        r = rstd.unsqueeze(-1)
        xhat = h_new.float() * r
        g = dy.float() * w.float()
        c = (g * xhat).mean(-1, keepdim=True)
        dh = ((g - xhat * c) * r + dh_new.float()).to(torch.bfloat16)
        dw = (dy.float() * xhat).sum(dim=tuple(range(h_new.dim() - 1)))
        return dh, dw

    def math_impl(f_fwd, f_bwd, f_fwd_res, f_bwd_res):
        def fwd(inp):
            if inp["form"] == "res":
                y, rstd, h_new = f_fwd_res(inp["h"], inp["u"], inp["w"])
                return {"y": y, "rstd": rstd, "h_new": h_new}, (h_new, rstd)
            y, rstd = f_fwd(inp["x"], inp["w"])
            return {"y": y, "rstd": rstd}, (inp["x"], rstd)

        def bwd(inp, saved):
            xs, rstd = saved
            if inp["form"] == "res":
                dx, dw = f_bwd_res(inp["dy"], inp["dh_new"], xs, inp["w"], rstd)
            else:
                dx, dw = f_bwd(inp["dy"], xs, inp["w"], rstd)
            return {"dx": dx, "dw": dw}

        return fwd, bwd

    def core_impl(c_fwd, c_bwd):
        """A peer's norm on [..., H] (c_fwd(x, w) -> (y, rstd|None, saved);
        c_bwd(dy, x, w, saved) -> (dx, dw)) lifted to every form; res adds
        with torch around it (as a user of the peer would)."""
        def fwd(inp):
            if inp["form"] == "res":
                h_new = inp["h"] + inp["u"]
                y, rstd, sv = c_fwd(h_new, inp["w"])
                return {"y": y, "rstd": rstd, "h_new": h_new}, (h_new, sv)
            y, rstd, sv = c_fwd(inp["x"], inp["w"])
            return {"y": y, "rstd": rstd}, (inp["x"], sv)

        def bwd(inp, saved):
            xs, sv = saved
            dx, dw = c_bwd(inp["dy"], xs, inp["w"], sv)
            if inp["form"] == "res":
                dx = dx + inp["dh_new"]
            return {"dx": dx, "dw": dw}

        return fwd, bwd

    if "eager" in names:
        impls["eager"] = math_impl(ref_fwd, ref_bwd, ref_fwd_res, ref_bwd_res)
    if "TC" in names or "TCd" in names:
        import torch._inductor.config as icfg

        icfg.emulate_precision_casts = True
        # dynamic=False compiles once per (shape, w dtype, layout), and TC and
        # TCd share each function's code object: past dynamo's recompile limit
        # (8 per code object: the 5th row) the function would silently run
        # EAGER under the name TC. Raise the limits, and fail loudly if hit.
        import torch._dynamo.config as dcfg

        for k in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                  "accumulated_cache_size_limit"):
            if hasattr(dcfg, k):
                setattr(dcfg, k, max(getattr(dcfg, k), 1 << 16))
        for k in ("fail_on_recompile_limit_hit", "fail_on_cache_limit_hit"):
            if hasattr(dcfg, k):
                setattr(dcfg, k, True)
        for nm, kw in (("TC", {"mode": "max-autotune-no-cudagraphs"}), ("TCd", {})):
            if nm in names:
                impls[nm] = math_impl(*(torch.compile(f, dynamic=False, **kw)
                                        for f in (ref_fwd, ref_bwd, ref_fwd_res, ref_bwd_res)))
    if "F.rms_norm" in names:
        def fr_fwd(x, w):
            xg = x.detach().requires_grad_(True)
            wg = w.detach().requires_grad_(True)
            y = F.rms_norm(xg, (x.shape[-1],), wg, eps)
            return y.detach(), None, (xg, wg, y)

        def fr_bwd(dy, x, w, saved):
            xg, wg, y = saved
            dx, dw = torch.autograd.grad(y, (xg, wg), dy, retain_graph=True)
            return dx, dw

        impls["F.rms_norm"] = core_impl(fr_fwd, fr_bwd)
    if "Liger" in names:
        try:
            from liger_kernel.ops import rms_norm as lrms

            def li_fwd(x, w):
                # Liger takes 2-D rows; a strided per-head view is copied first
                # (inside the span: what a Liger user pays).
                x2 = x.reshape(-1, x.shape[-1]).contiguous()
                Y, X, RSTD, BS, nw, cm = lrms.rms_norm_forward(x2, w, eps, 0.0, "gemma", None)
                return Y.view(x.shape), RSTD, (X, RSTD, BS, nw, cm)

            def li_bwd(dy, x, w, saved):
                X, RSTD, BS, nw, cm = saved
                dy2 = dy.reshape(-1, dy.shape[-1]).contiguous()
                dx, dw = lrms.rms_norm_backward(dy2, X, w, RSTD, 0.0, cm, BS, nw, False, None)
                return dx.view(dy.shape), dw

            impls["Liger"] = core_impl(li_fwd, li_bwd)
        except Exception as e:  # noqa: BLE001 - reported in the output
            errors["Liger"] = f"{type(e).__name__}: {e}"
    if "Q" in names:
        try:
            from quack.rmsnorm import rmsnorm_bwd as q_bwd_fn
            from quack.rmsnorm import rmsnorm_fwd as q_fwd_fn

            def q_fwd(x, w):
                # QuACK takes 2-D rows (as QuACK's own autograd wrapper
                # reshapes): a strided per-head view is copied (in the span).
                x2 = x.reshape(-1, x.shape[-1])
                out, _, rstd = q_fwd_fn(x2, w, eps=eps, store_rstd=True)
                return out.view(x.shape), rstd, (x2, rstd)

            def q_bwd(dy, x, w, saved):
                x2, rstd = saved
                dx, dw, _, _ = q_bwd_fn(x2, w, dy.reshape(-1, dy.shape[-1]), rstd)
                return dx.view(dy.shape), dw

            impls["Q"] = core_impl(q_fwd, q_bwd)
        except Exception as e:  # noqa: BLE001
            errors["Q"] = f"{type(e).__name__}: {e}"
    return impls


def form_inputs(torch, inp):
    """The timed layout of a case's inputs: heads24's x as the q slice of a
    packed qkv buffer [T, 24+8+8, 256] (a strided view, as in training);
    every other tensor as generated (contiguous)."""
    if inp["form"] == "heads24":
        T, nh, H = inp["x"].shape
        buf = torch.empty((T, nh + 16, H), dtype=inp["x"].dtype, device=inp["x"].device)
        buf.normal_()
        buf[:, :nh, :] = inp["x"]
        inp = dict(inp, x=buf[:, :nh, :], qkv=buf)
    return inp


# The outputs an op must get right: the forward's y (and rstd when the
# implementation exposes it); the backward's dx and dw, and the step's all.
OP_OUTPUTS = {"fwd": ("y", "rstd", "h_new"), "bwd": ("dx", "dw"), "2xfwd+bwd": ("y", "rstd", "h_new", "dx", "dw")}


def in_budget(info, op):
    """Within the budget on every accuracy seed, for the outputs `op` produces
    (an output the implementation does not expose, e.g. F.rms_norm's rstd, is
    not counted; y, dx and dw must be there). An accuracy run that failed on
    any seed (acc_error) is never in budget: its pass_out covers fewer seeds."""
    if info.get("acc_error") or info.get("error"):
        return False
    ok = info.get("pass_out") or {}
    need = {"fwd": ("y",), "bwd": ("dx", "dw"), "2xfwd+bwd": ("y", "dx", "dw")}[op]
    if any(o not in ok for o in need):
        return False
    return all(ok[o] for o in OP_OUTPUTS[op] if o in ok)


def worst_output(info, op):
    """(name, err/tol) of the worst output `op` produces."""
    et = info.get("err_tol") or {}
    cand = [(o, et[o]) for o in OP_OUTPUTS[op] if o in et]
    return max(cand, key=lambda c: c[1]) if cand else (None, None)


def why_out(info, op):
    """Why a peer is not in budget for `op`, for the tables: its worst
    output and err/tol ("dw 1.16"), or "not validated" when its accuracy run
    gave no err/tol (it failed, so it is no SOTA candidate either)."""
    wo, wv = worst_output(info, op)
    return f"{wo} {fmt(wv, '{:.3g}')}" if wo else "not validated"


def bytes_moved(op, rows, H, wbytes, form="plain"):
    """The fewest bytes an op must move (each input read once, each output
    written once): rows = T * heads normalized rows of H."""
    e = rows * H * 2
    if form == "res":
        fwd = 4 * e + H * wbytes + rows * 4          # h, u in; h_new, y out; w; rstd
        bwd = 4 * e + H * wbytes + rows * 4 + H * 4  # dy, h_new, dh_new in; dh out; w; rstd; dw
    else:
        fwd = 2 * e + H * wbytes + rows * 4          # x in, y out, w, rstd
        bwd = 3 * e + H * wbytes + rows * 4 + H * 4  # dy, x in, dx out, w, rstd, dw
    return {"fwd": fwd, "bwd": bwd, "2xfwd+bwd": 2 * fwd + bwd}[op]


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
        # docs/perf.md. NG_PEERS_SHARED_POOL=1 restores the shared pool;
        # NG_PEERS_SHARED_POOL=impl shares one pool among the graphs of one
        # implementation (its pools then hold the max, not the sum, of its
        # three graphs' memory: see run_row). The fault's cause was found later
        # (freed eager tensors, unmapped by the empty_cache() that
        # torch.cuda.graph runs before each capture), so sharing should be
        # safe now, but it has not been re-run on the H200.
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
        # launch for 0.7-6 ms on the H200 (session 17, call 3:
        # docs/results/h200-2026-12-01-s17/cupti_events.txt), which the
        # events around it would hold: one more untimed replay takes it.
        g.replay()
        replays()
        recs = take(2 * n + 16)
        # recs[0] is the untimed replay's (no L2 flush before it): never a
        # sample; match_spans then wants exactly the n timed replays.
        self.spans = match_spans(recs[1:], n)
        return [s.elapsed_time(e) * 1e3 for s, e in ev]  # us


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
    """The copy ceiling: bandwidth (bytes read + written, GB/s) of the faster of
    normgate's 16-byte vectorized copy and a Triton copy, same buffers."""
    import normgate

    n = (nbytes // 16) * 16
    src = torch.ones(n // 2, dtype=torch.bfloat16, device="cuda")
    dst = torch.empty_like(src)
    res = {}
    cands = {"normgate copy_vec16": lambda: normgate.copy_vec16(dst, src)}
    tc = triton_copy(torch)
    if tc is not None:
        cands["triton copy"] = lambda: tc(dst, src)
    errs = {}
    for name, fn in cands.items():
        # One failing candidate (a Triton or library error) must not end the run.
        try:
            g = timer.capture(fn)
            # cupti_time: a CUPTI failure turns CUPTI off, never costs the candidate
            t = statistics.median(cupti_time(timer, g, reps, [], lambda s: print(s, file=sys.stderr, flush=True)))
            res[name] = {"us": t, "GBps": 2 * n / (t * 1e-6) / 1e9}
        except Exception as e:  # noqa: BLE001 - reported in the output
            errs[name] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        g = None
    if not res:
        return {"GBps": None, "us": None, "by": None, "bytes": n, "candidates": {}, "errors": errs}
    best = max(res, key=lambda k: res[k]["GBps"])
    return {"GBps": res[best]["GBps"], "us": res[best]["us"], "by": best, "bytes": n, "candidates": res,
            "errors": errs}


CAPTURE_ORDER = ["det", "ours", "det#2", "ours#2", "TC", "TCd", "Q", "Liger", "F.rms_norm", "eager"]


def round_order(base, r, rounds):
    """Timing order of round r of `rounds`: `base` rotated by r * len / rounds
    (spread over the list, not by one place a round), reversed on odd rounds."""
    if not base:
        return []
    k = (r * len(base)) // rounds % len(base)
    order = base[k:] + base[:k]
    return order[::-1] if r % 2 == 1 else order


def op_fn(impl, op, inp, saved):
    """The callable one graph of `op` captures: fwd; bwd from the eager
    forward's `saved` (kept referenced by the caller); or the checkpointed
    step 2xfwd+bwd (forward, forward recompute, backward of the recompute)."""
    fwd, bwd = impl
    if op == "fwd":
        return lambda: fwd(inp)
    if op == "bwd":
        return lambda: bwd(inp, saved)

    def step():
        fwd(inp)
        _, s2 = fwd(inp)
        return bwd(inp, s2)
    return step


def case_id(form, H, T, wname, family, seed):
    return f"H={H},T={T},w={wname},form={form},family={family},seed={seed}"


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
    illegal address: seen on the H200, docs/perf.md)."""
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
    102 GiB, so rows at T >= 98304 outgrow the H200's 139 GiB (docs/perf.md,
    session 16). An implementation that fails in both modes keeps its error.
    Returns setup_graphs' (graphs, keep)."""
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


def run_row(torch, args, impls, errors, form, H, T, wname, timer, log, after_timing=None):
    """One row of the matrix: its timing phase (setup, graph captures,
    interleaved rounds), then after_timing() (where a warm-up batch may
    start: never beside a timing phase), then its accuracy phase; the result
    row (see run_row_timing and run_row_accuracy)."""
    row, live = run_row_timing(torch, args, impls, errors, form, H, T, wname, timer, log)
    if after_timing is not None:
        after_timing()
    return run_row_accuracy(torch, args, impls, row, live, log)


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


def run_row_accuracy(torch, args, impls, row, live, log):
    """A timed row's accuracy phase (--seeds seeds, every live
    implementation's outputs through the oracle; the A/A copies take their
    originals' verdicts), then its per-op ratios (row["ops"]); returns row.
    Needs no graph of the timing phase: it may run after later rows' timing
    (--defer-accuracy)."""
    import normgate

    form, H, T, wname, heads = row["form"], row["H"], row["T"], row["w"], row["heads"]
    phase0 = time.time()

    # Accuracy on --seeds seeds, every implementation's outputs through the
    # oracle. A failure here (inputs, oracle) costs the row its in-budget
    # verdicts, not its timings.
    acc = [n for n in live if not n.endswith("#2")]
    for seed in range(args.seeds):
        c = case_id(form, H, T, wname, args.family, seed)
        ins = None
        try:
            t_seed = time.time()
            g = normgate.generate(c)  # device generator on a CUDA device
            torch.cuda.synchronize()
            row.setdefault("acc_generate_s", []).append(time.time() - t_seed)
            ins = form_inputs(torch, g)
            # The oracle takes these inputs (host copies, a sample checked
            # against the generator) instead of generating them again on the
            # host: session 13's rows spent about half their accuracy phase
            # in the two host generations (docs/perf.md, session 14).
            with normgate.Oracle(c, inputs=g) as orc:
                # host copies of the inputs and the oracle's reference (to
                # plan the accuracy phase's cost per part)
                row.setdefault("acc_open_s", []).append(orc.seconds["copy"] + orc.seconds["open"])
                seen = {}  # this seed's distinct outputs: identical ones are validated once
                for n in acc:
                    accuracy_into(torch, impls[n], ins, orc, row["impls"][n], seen)
                seen = None
                tot = row.setdefault("acc_oracle_s", {})
                for k, v in orc.seconds.items():
                    tot[k] = tot.get(k, 0.0) + v
        except Exception as e:  # noqa: BLE001
            msg = f"seed {seed}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            log(f"  accuracy failed: {msg}")
            log(traceback.format_exc())
            row.setdefault("acc_errors", []).append(msg)
            for n in acc:
                row["impls"][n].setdefault("acc_error", msg)
        ins = None
        torch.cuda.empty_cache()
    row["phase_s"]["accuracy"] = time.time() - phase0
    for n in live:
        if n.endswith("#2"):
            base_info = row["impls"][n[:-2]]
            for key in ("pass", "err_tol", "pass_out", "acc_error"):
                if base_info.get(key) is not None:
                    row["impls"][n][key] = base_info.get(key)
            if n[:-2] not in acc:
                row["impls"][n]["acc_error"] = f"{n[:-2]} was not validated"

    # Bandwidth and ratios.
    wbytes = 2 if wname == "bf16" else 4
    row["ops"] = {}
    for op in args.ops:
        r = {"bytes": bytes_moved(op, T * heads, H, wbytes, form)}
        u = row["impls"]

        def us(n):
            return u.get(n, {}).get("us", {}).get(op)
        r["det_us"], r["ours_us"] = us("det"), us("ours")
        aa = [abs(1 - us(a) / us(b)) for a, b in (("det#2", "det"), ("ours#2", "ours")) if us(a) and us(b)]
        r["aa_floor"] = max(aa) if aa else None
        peers = [n for n in u if n in ALL_PEERS and us(n)]
        ok = [n for n in peers if in_budget(u[n], op)]
        r["sota"] = min(ok, key=us) if ok else None
        r["fastest_any"] = min(peers, key=us) if peers else None
        if r["sota"]:
            r["sota_us"] = us(r["sota"])  # also when ours failed: markdown() prints it
        if r["ours_us"]:
            r["ours_GBps"] = r["bytes"] / (r["ours_us"] * 1e-6) / 1e9
            if r["det_us"]:
                r["det_over_ours"] = r["det_us"] / r["ours_us"]
            if r["sota"]:
                r["sota_over_ours"] = r["sota_us"] / r["ours_us"]
            if r["fastest_any"]:
                r["fastest_any_over_ours"] = us(r["fastest_any"]) / r["ours_us"]
        row["ops"][op] = r
    return row


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


def acc_parts(row):
    """The accuracy phase's seconds by part, summed over the seeds: the
    device generator, the inputs' host copies + the oracle's reference (open),
    the Oracle's own split (host copies of inputs and outputs, reference,
    validators: normgate.Oracle.seconds), then per implementation its eager
    runs and its validation (host copies included)."""
    parts = [f"generate {sum(row.get('acc_generate_s', [])):.1f} s, inputs+oracle open {sum(row.get('acc_open_s', [])):.1f} s"]
    o = row.get("acc_oracle_s")
    if o:
        parts.append("of which, with the validations: " + ", ".join(f"{k} {v:.1f} s" for k, v in sorted(o.items())))
    for n, info in row["impls"].items():
        a = info.get("acc_s")
        if a:
            parts.append(f"{n} run {a['run']:.1f} + validate {a['validate']:.1f} s")
    return "; ".join(parts)


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


CONTRACT = (("y", "bfloat16"), ("rstd", "float32"), ("h_new", "bfloat16"), ("dx", "bfloat16"), ("dw", "float32"))


def split_known(given, seen, same):
    """Which outputs need the oracle: (to_validate, reused). given maps output
    names to tensors; seen maps names to [(tensor, report entry)] of earlier
    implementations on the same inputs; same(a, b) is True only for bitwise
    identical tensors. An output identical to an earlier one has, by
    construction, the same element statistics (the validators see only its
    bits and the reference): its entry is reused, not recomputed."""
    to_validate, reused = {}, {}
    for name, t in given.items():
        hit = next((e for u, e in seen.get(name, []) if same(u, t)), None)
        if hit is None:
            to_validate[name] = t
        else:
            reused[name] = hit
    return to_validate, reused


def bitwise_same(torch, a, b):
    """True when tensors a and b hold the same bits (NaN payloads and signed
    zeros included): same shape and dtype, equal as integers of that width."""
    if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
        return False
    iv = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}.get(a.dtype)
    return iv is not None and bool(torch.equal(a.view(iv), b.view(iv)))


def accuracy_into(torch, impl, ins, orc, info, seen=None):
    """Run one implementation eagerly on a case's inputs, validate its outputs
    with the case's oracle, and fold the result into `info` (worst err/tol per
    output, per-output pass over all seeds, dtype conversions made).
    seen (a dict kept over the implementations of one seed's inputs, or None):
    outputs bitwise identical to an earlier implementation's reuse its report
    entry (split_known); info["reused"] counts them."""
    fwd, bwd = impl
    acc_s = info.setdefault("acc_s", {"run": 0.0, "validate": 0.0})
    t0 = time.time()
    try:
        outs, saved = fwd(ins)
        outs.update(bwd(ins, saved))
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        acc_s["run"] += time.time() - t0
        t0 = time.time()
        # The contract is y, dx, h_new BF16 and rstd, dw FP32: an output in
        # another dtype is converted (bf16 -> fp32 is exact) and the
        # conversion recorded against the implementation.
        given = {}
        for oname, dt in CONTRACT:
            t = outs.get(oname)
            if t is None:
                continue
            want = getattr(torch, dt)
            if t.dtype != want:
                info.setdefault("casts", {})[oname] = str(t.dtype).replace("torch.", "")
                t = t.to(want)
            given[oname] = t.reshape(-1)
        if seen is None:
            rep = orc.validate(**given)
        else:
            todo, reused = split_known(given, seen, lambda a, b: bitwise_same(torch, a, b))
            rep = orc.validate(**todo) if todo else {"outputs": {}}
            entries = {n: o for n, o in rep.get("outputs", {}).items() if n in todo}
            for n, t in todo.items():
                if n in entries:
                    seen.setdefault(n, []).append((t, entries[n]))
            entries.update(reused)
            rep = {"outputs": entries, "pass": all(bool(o.get("pass")) for o in entries.values()),
                   "reused": sorted(reused)}
            info["reused"] = info.get("reused", 0) + len(reused)
        acc_s["validate"] += time.time() - t0
    except Exception as e:  # noqa: BLE001
        # Not info["error"]: the timings stay valid and shown; in_budget() is False.
        info.setdefault("acc_error", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        return None
    acc = info.setdefault("err_tol", {})
    ok = info.setdefault("pass_out", {})
    for out, o in rep.get("outputs", {}).items():
        if not o.get("present", True):
            continue
        acc[out] = max(acc.get(out, 0.0), float(o["err_tol"]))
        ok[out] = ok.get(out, True) and bool(o.get("pass"))
    info["pass"] = info.get("pass", True) and bool(rep.get("pass"))
    if outs.get("dw") is not None:
        info["dw_dtype"] = str(outs["dw"].dtype).replace("torch.", "")
    return rep


def workload(row):
    """The seed's workload label: [T, H] for plain/res, [T, nh, 256] per head."""
    h = row.get("heads", 1)
    shape = f"[{row['T']}, {row['H']}]" if h == 1 else f"[{row['T']}, {h}, {row['H']}]"
    return f"{shape} w {row['w']}, {row.get('form', 'plain')}"


def fmt(v, f="{:.2f}"):
    return "—" if v is None else f.format(v)


def markdown(meta, rows, copy):
    L = []
    runs = meta.get("runs") or []
    when, command = meta["date"], f"Command: `{meta['command']}`"
    if len(runs) > 1:  # a merge: its runs' dates as a range, their commands at the end
        dates = sorted(str(r["date"]) for r in runs)
        when, command = f"{len(runs)} runs, {dates[0]} to {dates[-1]}", f"Commands: the {len(runs)} runs' own, under Runs at the end"
    L.append(f"# normgate vs peers on {meta['gpu']} ({when})\n")
    L.append(f"driver {meta['driver']}, CUDA {meta['cuda']}, torch {meta['torch']}, triton {meta.get('triton')}; "
             f"{meta['normgate']}. {command}.\n")
    L.append(f"Latency: median of {meta['replays']} CUDA-graph replays per implementation and op "
             f"({meta['rounds']} interleaved rounds, order rotated), L2 flushed before each, CUDA events. "
             f"Accuracy: worst of {meta['seeds']} seeds of family `{meta['family']}` through normgate's oracle. "
             f"det = normgate deterministic=True, ours = deterministic=False. "
             f"Copy ceiling (read + write, faster of normgate's 16-byte copy and a Triton copy: {copy.get('by')}): "
             f"{fmt(copy.get('GBps'), '{:.0f}')} GB/s"
             + "".join(f"; {k} {v['GBps']:.0f} GB/s" for k, v in copy.get('candidates', {}).items())
             + "".join(f"; {k} failed: `{v}`" for k, v in (copy.get("errors") or {}).items()) + "."
             + copy_note(rows, copy) + "\n")
    if meta.get("skipped") or meta.get("failed_rows") or meta.get("stopped"):
        L.append("**Incomplete run.** "
                 + (f"{meta['stopped']}: stopped. " if meta.get("stopped") else "")
                 + (f"Rows not started (--deadline-s, --end-s, or stopped) ({len(meta.get('skipped', []))}): "
                    + ", ".join(f"[{t}, {h}] {w} {f}" for t, h, w, f in meta.get("skipped", [])) + ". "
                    if meta.get("skipped") else "")
                 + ("Rows that failed: " + "; ".join(f"[{t}, {h}] {w} {f}: `{e[:160]}`"
                                                    for t, h, w, f, e in meta.get("failed_rows", [])) + "."
                    if meta.get("failed_rows") else "") + "\n")
    if meta["peer_errors"]:
        L.append("Peers that could not run: " + "; ".join(f"{k}: `{v}`" for k, v in meta["peer_errors"].items()) + "\n")
    L += summary_lines(rows)
    forms = [f for f in FORMS if any(row.get("form", "plain") == f for row in rows)]
    for form in forms:
        L.append(f"## Form {form}\n")
        L += form_table(copy, [row for row in rows if row.get("form", "plain") == form])
    gone = [f"{workload(row)}: {n} ({i.get('error') or 'accuracy: ' + i['acc_error']})"[:200]
            for row in rows for n, i in row["impls"].items() if i.get("error") or i.get("acc_error")]
    if gone:
        L.append("Implementations that failed in their row (setup, timing or accuracy run; not SOTA "
                 "candidates there; an out-of-memory at the largest rows shows here): " + "; ".join(gone) + ".\n")
    L.append("## Every implementation\n")
    L.append("| workload | impl | fwd us | bwd us | 2xfwd+bwd us | y | rstd | h_new | dx | dw | dw dtype | in budget for |")
    L.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        for n, i in row["impls"].items():
            if i.get("error"):
                L.append(f"| {workload(row)} | {n} | error: `{i['error'][:120]}` | | | | | | | | | |")
                continue
            et = i.get("err_tol") or {}
            L.append(f"| {workload(row)} | {n} | " +
                     " | ".join(fmt(i['us'].get(op)) for op in OPS) + " | " +
                     " | ".join(fmt(et.get(o), '{:.3g}') for o in ("y", "rstd", "h_new", "dx", "dw")) +
                     f" | {i.get('dw_dtype', '—')}" +
                     ("".join(f" ({k} was {v})" for k, v in (i.get("casts") or {}).items())) + " | " +
                     (", ".join(op for op in OPS if in_budget(i, op)) or "none") +
                     (f" (accuracy run failed: `{i['acc_error'][:100]}`)" if i.get("acc_error") else "") + " |")
    if len(runs) > 1:
        L.append("\n## Runs\n")
        L += [f"{k}. {r['file']} ({r['date']}): `{r['command']}`" for k, r in enumerate(runs, 1)]
    return "\n".join(L) + "\n"


def row_copy_GBps(row, copy):
    """The copy ceiling a row's "of copy" compares with: its own run's (a
    merge keeps each row's), else the result's."""
    return row.get("copy_GBps") or copy.get("GBps")


def copy_note(rows, copy):
    """A sentence for the header when an implementation moved more bytes per
    second than its row's copy ceiling (the op's bytes over its median time):
    then the copy kernels are not the HBM ceiling, and "of copy" above 1.0 is
    possible. Empty otherwise."""
    best = None
    for row in rows:
        ceil = row_copy_GBps(row, copy)
        for op, r in row.get("ops", {}).items():
            for n, i in row["impls"].items():
                us = (i.get("us") or {}).get(op)
                if ceil and us and r.get("bytes"):
                    q = r["bytes"] / us / 1e3 / ceil
                    if best is None or q > best[0]:
                        best = (q, n, workload(row), op)
    if best is None or best[0] <= 1.0:
        return ""
    q, n, w, op = best
    return (f" The copy kernels are not the HBM ceiling: {n} at {w} {op} moves {q:.2f}x its run's copy "
            f"bandwidth (the op's bytes over its median time), so 'of copy' compares with our copy, not a bound.")


def form_table(copy, rows):
    """One form's rows as the seed's table (one line per workload and op)."""
    L = ["| workload [T, H] w, form | op | det us | SOTA us (name) | ours us | det/ours | SOTA/ours | ours GB/s (of copy) | A/A floor |",
         "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        for op, r in row["ops"].items():
            sota = "—"
            if r.get("sota"):
                sota = f"{r['sota_us']:.2f} {r['sota']}"
                n = r.get("fastest_any")
                if n and n != r["sota"]:  # a faster peer missed the budget: name it, as the '!' rows do
                    sota += f" (faster, over budget: ! {row['impls'][n]['us'][op]:.2f} {n}, {why_out(row['impls'][n], op)})"
            elif r.get("fastest_any"):
                n = r["fastest_any"]
                sota = f"! {row['impls'][n]['us'][op]:.2f} {n} ({why_out(row['impls'][n], op)})"
            frac = ""
            row_copy = row_copy_GBps(row, copy)
            if r.get("ours_GBps") and row_copy:
                frac = f" ({r['ours_GBps'] / row_copy:.2f})"
            oob = {n: " (out of budget)" if r[f"{n}_us"] and not in_budget(row["impls"].get(n, {}), op) else ""
                   for n in ("det", "ours")}
            L.append(f"| {workload(row)} | {op} | {fmt(r['det_us'])}{oob['det']} | {sota} | "
                     f"{fmt(r['ours_us'])}{oob['ours']} | {fmt(r.get('det_over_ours'), '{:.3f}x')}{nd_mark(r)} | "
                     f"{fmt(r.get('sota_over_ours'), '{:.3f}x')} | {fmt(r.get('ours_GBps'), '{:.0f}')}{frac} | "
                     f"{fmt(r['aa_floor'], '{:.4f}')} |")
    L.append("")
    return L


def nd_mark(r):
    """' +' / ' -' when det/ours is above / below 1 by more than the row's A/A floor."""
    q, floor = r.get("det_over_ours"), r.get("aa_floor")
    if q is None or floor is None:
        return ""
    return " +" if q - 1 > floor else " -" if 1 - q > floor else ""


def geomean(v):
    return math.exp(sum(math.log(x) for x in v) / len(v))


def summary_lines(rows):
    """The seed's summary over all rows (per op: det/ours and SOTA/ours
    geomean [min, max] and the rows below 1, from unrounded ratios), then
    issue 8's targets: SOTA/ours >= 1.0 on every bwd and 2xfwd+bwd row and
    1.1x geomean; deterministic=False not slower than True beyond the A/A
    floor. Rows without an in-budget SOTA (!) are left out of SOTA/ours;
    the last column, fastest peer/ours with the budget aside, counts them
    (and shows what a SOTA slower than an over-budget peer hides)."""
    L = [f"## Summary over all rows ({len(rows)} workloads x {len(OPS)} ops)\n",
         "| op | det/ours geomean [min, max] | det/ours < 1 | ours slower than det beyond the A/A floor | "
         "SOTA/ours geomean [min, max] | SOTA/ours < 1 | fastest peer/ours, budget aside |",
         "| --- | --- | --- | --- | --- | --- | --- |"]
    short, slower, gm, hidden = [], [], {}, {}
    for op in OPS:
        rs = [(row, row["ops"][op]) for row in rows if op in row.get("ops", {})]
        dq = [r["det_over_ours"] for _, r in rs if r.get("det_over_ours")]
        sq = [r["sota_over_ours"] for _, r in rs if r.get("sota_over_ours")]
        fq = [r["fastest_any_over_ours"] for _, r in rs if r.get("fastest_any_over_ours")]
        hidden[op] = ([r["sota_over_ours"] for _, r in rs
                       if r.get("sota_over_ours") and r.get("fastest_any") not in (None, r.get("sota"))],
                      [r["sota_over_ours"] for _, r in rs
                       if r.get("sota_over_ours") and r.get("fastest_any") in (None, r.get("sota"))])
        sl = [f"{workload(row)} {op} ({r['det_over_ours']:.3f}x, floor {r['aa_floor']:.4f})"
              for row, r in rs if nd_mark(r) == " -"]
        slower += sl
        if op != "fwd":
            short += [f"{workload(row)} {op} ({r['sota_over_ours']:.3f}x vs {r['sota']})"
                      for row, r in rs if r.get("sota_over_ours") is not None and r["sota_over_ours"] < 1]
            gm[op] = geomean(sq) if sq else None

        def span(v):
            return f"{geomean(v):.3f}x [{min(v):.2f}, {max(v):.2f}]" if v else "—"
        L.append(f"| {op} | {span(dq)} | {sum(q < 1 for q in dq)} of {len(dq)} | {len(sl)} of {len(dq)} | "
                 f"{span(sq)} | {sum(q < 1 for q in sq)} of {len(sq)} | {span(fq)} ({len(fq)} rows) |")
    L.append("")
    L.append("! = no peer within the budget on every seed: the fastest peer is shown with "
             "its worst err/tol over the op's outputs; "
             "SOTA/ours is then left empty. (faster, over budget: ! ...) after a SOTA = the fastest peer, "
             "which missed the budget, with its worst err/tol (other peers over budget: see Every implementation); "
             "SOTA/ours stays against the in-budget SOTA. (out of budget) = det or ours itself failed the budget "
             "(or its accuracy run) for that op. + / - after det/ours: ours (deterministic=False) faster / "
             "slower than det by more than the row's A/A floor (the larger |1 - A/A| of the det and ours "
             "copies); unmarked: within the floor. fastest peer/ours, budget aside: the fastest peer's time over "
             "ours whether it is within budget or not, over every row (the ! rows too).\n")
    if any(h for h, _ in hidden.values()):
        L.append("SOTA/ours counts the rows with an in-budget peer (those marked ! have none). On "
                 + ", ".join(f"{len(h)} {op}" for op, (h, _) in hidden.items() if h)
                 + " rows the SOTA is slower than a peer that missed the budget (named beside it in the "
                 "tables), so SOTA/ours there is above what the fastest peer gives (up to "
                 + f"{max(max(h) for h, _ in hidden.values() if h):.2f}x); SOTA/ours geomean without them: "
                 + "; ".join(f"{op} {geomean(c):.3f}x" if c else f"{op} — (no other row)"
                             for op, (h, c) in hidden.items() if h) + ".\n")
    ahead = [f"{workload(row)} {op} {row['ops'][op]['sota_over_ours']:.2f}x" for row in rows for op in OPS
             if (row.get("ops", {}).get(op) or {}).get("sota_over_ours", 0) >= 1]
    if ahead:
        L.append(f"Where ours is at least as fast as the in-budget SOTA ({len(ahead)} op-rows; SOTA/ours): "
                 + "; ".join(ahead) + ".\n")
    L.append("Targets (issue 8): SOTA/ours >= 1.0 on every bwd and 2xfwd+bwd row with an in-budget SOTA: "
             + (f"met ({sum(1 for row in rows for op in gm if row['ops'].get(op, {}).get('sota_over_ours'))} "
                f"rows with one)." if not short else f"**not met** on {len(short)} rows: " + "; ".join(short) + ".")
             + " Geomean >= 1.1: "
             + "; ".join(f"{op} {'—' if g is None else f'{g:.3f}x'} ({'met' if g is not None and g >= 1.1 else '**not met**'})"
                         for op, g in gm.items())
             + ". deterministic=False at least as fast as deterministic=True on every row (within the A/A floor): "
             + ("met." if not slower else f"**not met** on {len(slower)} rows: " + "; ".join(slower) + ".")
             + (f" {n_fwd} of them are fwd rows, where both modes run the same forward kernel: their det/ours is"
                " itself an A/A pair, so there the one-pair floor understates the noise."
                if (n_fwd := sum(1 for x in slower if " fwd (" in x)) else "") + "\n")
    return L


def merge(argv):
    """--merge J1 J2 ... [--json OUT] [--md OUT]: see the module docstring."""
    files, out_json, out_md, i = [], "", "", 0
    while i < len(argv):
        if argv[i] in ("--json", "--md"):
            if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
                die_usage(f"--merge: {argv[i]} needs a file name"
                          + (f" (got {argv[i + 1]!r})" if i + 1 < len(argv) else ""))
            if argv[i] == "--json":
                out_json = argv[i + 1]
            else:
                out_md = argv[i + 1]
            i += 2
        elif argv[i] in ("-h", "--help"):
            print("usage: peers.py --merge RESULT.json [RESULT.json ...] [--json OUT] [--md OUT]\n"
                  "Merges peers.py results (shards of one matrix, or runs of several sessions) into one table:\n"
                  "rows in the order given, each with its own run's copy ceiling; a row in two runs is an error.\n"
                  "Prints the Markdown table, or with --md one line saying what went where.")
            sys.exit(0)
        elif argv[i].startswith("--"):
            die_usage(f"--merge: unknown option {argv[i]!r} (files, --json OUT, --md OUT)")
        else:  # a quoted glob pattern works as with --done; it must match something
            hits = expand_pattern(argv[i])
            if not hits:
                die_usage(f"--merge: {argv[i]!r} matches no file")
            files += hits
            i += 1
    if not files:
        die_usage("--merge needs at least one result JSON")
    runs = []
    for f in files:
        runs.append((f, load_result(f, "--merge")))
    rows, seen = [], {}
    for f, r in runs:
        for row in r["rows"]:
            key = row_key(row)
            if key in seen:
                die_usage(f"--merge: row {workload(row)} is in both {seen[key]} and {f}")
            seen[key] = f
            row = dict(row)
            row.setdefault("copy_GBps", r["copy"].get("GBps"))
            rows.append(row)
    m0 = runs[0][1]["meta"]
    meta = dict(m0)
    for k in ("gpu", "driver", "cuda", "torch", "triton", "normgate", "date", "command"):
        vals = []
        for _, r in runs:
            v = str(r["meta"].get(k))
            if k == "driver":
                v = v.splitlines()[0] if v.strip() else v  # older results: one line per GPU
            if v not in vals:
                vals.append(v)
        meta[k] = " / ".join(vals) if k != "command" else "; ".join(vals)
    for k in SAME_METHOD:
        if any(r["meta"].get(k) != m0.get(k) for _, r in runs):
            die_usage(f"--merge: runs differ in {k} ({', '.join(str(r['meta'].get(k)) for _, r in runs)})")
    meta["peer_errors"] = {}
    for _, r in runs:
        meta["peer_errors"].update(r["meta"].get("peer_errors") or {})
    # A row one run skipped (deadline) or failed may be measured by another:
    # the merged table lists as missing only rows no run measured, each once.
    for k in ("skipped", "failed_rows"):
        meta[k], listed = [], set()
        for _, r in runs:
            for x in r["meta"].get(k, []):  # [T, H, w, form(, error)]
                key = row_key({"T": x[0], "H": x[1], "w": x[2], "form": x[3]})
                if key not in seen and key not in listed:
                    listed.add(key)
                    meta[k].append(x)
    meta["stopped"] = "; ".join(r["meta"]["stopped"] for _, r in runs if r["meta"].get("stopped"))
    meta["merged_from"] = files
    # markdown: the dates as a range in the title, each run's command under "Runs" at the end
    meta["runs"] = [{"file": os.path.basename(f), "date": r["meta"].get("date"), "command": r["meta"].get("command")}
                    for f, r in runs]
    # The header's copy ceiling: the lowest of the runs' (each row's column uses its own).
    copies = [r["copy"] for _, r in runs if r["copy"].get("GBps")]
    copy = dict(min(copies, key=lambda c: c["GBps"])) if copies else dict(runs[0][1]["copy"])
    copy["by"] = f"{copy.get('by')}, lowest of {len(runs)} runs; each row's 'of copy' uses its own run's"
    result = {"meta": meta, "copy": copy, "rows": rows}
    atomic_write(out_json, json.dumps(result, indent=1))
    md = markdown(meta, rows, copy)
    atomic_write(out_md, md)
    if out_md:  # the table is in the file: say what was merged, not the whole table again
        print(f"merged {len(rows)} rows from {len(files)} runs into {out_md}" + (f" and {out_json}" if out_json else ""))
    else:
        print(md)
    return 0


def row_key(row):
    """A result row's identity in a matrix, as plan_rows spells it: (form, H,
    w, T) (what --merge and --done compare)."""
    return (row.get("form", "plain"), int(row["H"]), row["w"], int(row["T"]))


def load_result(path, what):
    """A peers.py result JSON, or a usage error (exit 2) naming the file."""
    try:
        with open(path) as fh:
            r = json.load(fh)
        if not isinstance(r, dict) or not {"meta", "copy", "rows"} <= r.keys():
            raise ValueError("no meta/copy/rows: not a peers.py result")
    except json.JSONDecodeError as e:
        die_usage(f"{what}: {path}: not valid JSON ({e})")
    except (OSError, ValueError) as e:
        die_usage(f"{what}: {path}: {e}")
    return r


def done_rows(spec, args=None):
    """{row key: file} of the rows in the --done results. A pattern with glob
    characters may match nothing (the first call of a matrix); a plain path
    must exist. With args, a result counts only if it measured what this run
    would: the same seeds, family, replays and rounds (else --merge refuses
    to join them), and every peer of --peers available (its meta.peer_errors
    names none of them, and every row has each of them: rows measured without
    a peer, because it could not run or was not asked for, are measured again
    once the peer runs; leave a peer that cannot run out of --peers)."""
    done = {}
    for pat, files in done_files(spec):
        print(f"--done: {pat}: {len(files)} files", file=sys.stderr)
        for f in files:
            r = load_result(f, "--done")
            if args is not None:
                m = r["meta"]
                differ = [k for k in SAME_METHOD if m.get(k) != getattr(args, k)]
                missing = sorted(set(m.get("peer_errors") or {}) & set(args.peers))
                if differ or missing:
                    print(f"--done: {f}: not counted ("
                          + ", ".join([f"{k} {m.get(k)} vs {getattr(args, k)}" for k in differ]
                                      + [f"peer {p} could not run there" for p in missing]) + ")", file=sys.stderr)
                    continue
            unmeasured = set()
            for row in r["rows"]:
                # A run that was not asked for a peer of --peers has no
                # error for it either: its rows lack that peer's numbers.
                lack = sorted(set(args.peers) - set(row.get("impls", {}))) if args is not None else []
                if lack:
                    unmeasured.update(lack)
                    continue
                done.setdefault(row_key(row), f)
            if unmeasured:
                print(f"--done: {f}: rows without peer {', '.join(sorted(unmeasured))} (not asked for there) not counted",
                      file=sys.stderr)
    return done


def expand_pattern(pat):
    """The files of a --done or --merge argument: a pattern with glob
    characters gives what it matches (sorted, maybe nothing), a plain path
    itself."""
    import glob
    return sorted(glob.glob(pat)) if glob.has_magic(pat) else [pat]


def done_files(spec):
    """[(pattern, its files)] of a --done value (comma-separated patterns)."""
    return [(pat, expand_pattern(pat)) for pat in [t.strip() for t in spec.split(",") if t.strip()]]


def plan_rows(args):
    """The rows of this run, in run order: (form, H, w, T) for each form, H
    (256 for the per-head forms), weight dtype and T (row_key's spelling)."""
    return [(form, H, wname, T) for form in args.forms for H in (args.H if form in ("plain", "res") else [256])
            for wname in args.w for T in args.T]


def row_elements(form, H, T):
    """Normalized elements of a matrix row: T * heads * H (heads: 24 or 4
    for the per-head forms, 1 otherwise)."""
    return T * H * {"heads24": 24, "heads4": 4}.get(form, 1)


def predict_row_s(measured, elements, warm=True):
    """Seconds a row of `elements` is predicted to take, from this run's
    measured rows [(elements, timing + accuracy seconds), ...]: the largest
    of seconds * elements / elements_i over the rows at least half as big
    (their fixed costs are a small part), else the biggest row scaled; x1.3,
    +10 s of setup, +100 s when the row has no warm-up (its torch.compile
    peers then compile in its setup: 40-100 s on the H200, docs/perf.md
    session 17). Setup is left out of the scaling: a row that compiled in
    its setup would otherwise predict its compile times the element ratio.
    Replayed on sessions 16-18's 50 rows: at worst 8 s short ([131072, 4096]
    fp32 res, 101 s for 110 s), at most 4.2x over. None without a measured
    row."""
    if not measured:
        return None
    near = [(e, s) for e, s in measured if e >= elements / 2]
    base = max(s * elements / e for e, s in near) if near else \
        (lambda e, s: s * elements / e)(*max(measured))
    return 1.3 * base + 10 + (0 if warm else 100)


END_TAIL_S = 15  # what a run needs after its last row (JSON and Markdown written, children ended)


def measured_for_end(rows):
    """[(elements, timing + accuracy seconds)] of result rows, for predict_row_s."""
    out = []
    for r in rows:
        ph = r.get("phase_s") or {}
        sec = ph["timing"] + ph["accuracy"] if "timing" in ph and "accuracy" in ph else r["seconds"]
        out.append((row_elements(r.get("form", "plain"), r["H"], r["T"]), sec))
    return out


def end_skip(end_s, elapsed, rows, form, H, T, warm):
    """Why the row (form, H, T) must not start, elapsed seconds into a run
    that is stopped at end_s (--end-s; 0: never), given the result rows this
    run measured (each with "form", "H", "T", "phase_s" or "seconds"):
    "predicted X s, Y s left before --end-s" (the prediction plus
    END_TAIL_S does not fit), "no time left before --end-s", or "" when it
    may start (no end, no measured row to predict from, or it fits)."""
    if not end_s:
        return ""
    if elapsed + END_TAIL_S >= end_s:
        return "no time left before --end-s"
    est = predict_row_s(measured_for_end(rows), row_elements(form, H, T), warm=warm)
    if est is None or elapsed + est + END_TAIL_S <= end_s:
        return ""
    return f"predicted {est:.0f} s, {end_s - elapsed:.0f} s left before --end-s"


def row_spec(form, H, T, wname):
    """The --warm-compile argument of a row."""
    return f"{form},{H},{T},{wname}"


def parse_spec(spec):
    """row_spec's inverse: (form, H, T, wname), H and T ints; ValueError
    when spec is not FORM,H,T,W."""
    form, H, T, wname = spec.split(",")
    return form, int(H), int(T), wname


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


class WarmAhead:
    """Warm-up children (see the module docstring): when the next row's
    TC/TCd are not warm, up to --warm-ahead children start together after a
    row's timing (the first batch: after the copy ceiling, before the first
    row), one per upcoming row, and all of them are waited for before the
    next row starts, so that none runs beside a timing phase. The compiles
    run side by side (session 17: one row's max-autotune compile took 25-100
    s while the cores were mostly idle), and the rows of a batch after the
    first start warm, without a child; the batch after it starts at the
    timing's end of the last row before a row that is not warm."""

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
            cmd = [sys.executable, os.path.abspath(__file__), "--warm-compile", spec,
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
    (the device call's timeout) still reaches it. Without SIGSTOP (not
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


def main(argv):
    if argv[:1] == ["--merge"]:
        return merge(argv[1:])
    if "--merge" in argv:
        die_usage("--merge must come first: peers.py --merge A.json B.json ... [--json OUT] [--md OUT]")
    args = parse_args(argv)
    if args.warm_compile:
        return warm_compile(args)
    done = done_rows(args.done, args)
    every = plan_rows(args)
    plan = [r for r in every if r not in done]
    if args.plan:
        for form, H, wname, T in plan:
            print(f"[{T}, {H}] {wname} {form}")
        n_read = len({f for _, fs in done_files(args.done) for f in fs})
        n_used = len(set(done.values()))
        print(f"{len(plan)} rows to measure, {len(every) - len(plan)} already done "
              f"(in {n_used} of {n_read} --done files"
              + (f"; {n_read - n_used} counted no row here: other rows, another method, or a peer of --peers "
                 f"missing there, see the --done lines above)" if n_used < n_read else ")"))
        return 0
    if not plan:  # e.g. a shard whose rows an earlier call measured: no GPU time, no empty result
        print("peers.py: nothing to measure: every row of this run is in --done (no result written)", file=sys.stderr)
        return 0
    try:
        import torch
    except ImportError as e:
        print(f"peers.py: torch is required: {e}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("peers.py: no CUDA device: nothing to measure", file=sys.stderr)
        return 2
    import normgate

    start = time.time()
    log_lines = []

    def log(s):
        log_lines.append(s)
        print(s, file=sys.stderr, flush=True)

    errors = {}
    # eps is the cases' (every case id here uses the default eps).
    try:
        eps = normgate.case_info(case_id("plain", args.H[0], args.T[0], args.w[0], args.family, 0))["eps"]
    except ValueError as e:
        die_usage(f"--family {args.family!r} / --H / --T: {e}")
    impls = make_impls(torch, set(args.peers), eps, errors)
    timer = Timer(torch)
    if args.cupti:
        from normgate import _lib as nglib
        # On from here to the end, before any graph is captured: a graph
        # instantiated before the trace was enabled crashed the process at
        # its first replay under it (H200, session 16). Never disabled during
        # the run (not even after a CuptiError), for the same reason.
        try:
            nglib.graph_spans_start()
            nglib.graph_spans_take(1 << 16)
            timer.cupti = nglib.graph_spans_take
            log("CUPTI graph spans on (--cupti): recorded beside the CUDA events")
        except (RuntimeError, ValueError) as e:
            log(f"--cupti: CUPTI graph spans unavailable ({e}); CUDA events only")
    props = torch.cuda.get_device_properties(0)
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
        smi = smi.splitlines()[0] if smi else "unknown"  # one line per GPU; one driver
    except Exception:  # noqa: BLE001
        smi = "unknown"
    try:
        import triton
        tv = triton.__version__
    except Exception:  # noqa: BLE001
        tv = None
    meta = {"gpu": props.name, "driver": smi, "cuda": torch.version.cuda, "torch": torch.__version__,
            "triton": tv, "normgate": normgate.version(), "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "command": "python3 bench/peers.py " + " ".join(argv), "replays": args.replays, "rounds": args.rounds,
            "seeds": args.seeds, "family": args.family, "eps": eps, "peer_errors": errors,
            "method": "CUDA-graph replay, cold L2 (read flush), CUDA events, median; A/A copies of det and ours"}
    # cupti_us beside the events' us (tables: events); the events of a run
    # with CUPTI on are measured under its trace (one more synchronize per
    # block, a trace record per launch).
    meta["cupti"] = timer.cupti is not None
    # The accuracy phase's host threads (normgate.default_threads(), not the
    # OpenMP runtime's default that torch lowers; docs/perf.md, session 16).
    meta["threads"] = {"torch": torch.get_num_threads(), "oracle": normgate.default_threads()}
    log(f"host threads: torch {meta['threads']['torch']}, oracle and validators {meta['threads']['oracle']}")
    for k, v in errors.items():
        log(f"peer {k} unavailable: {v}")

    biggest = max(row_elements(form, H, T) for form, H, _, T in every) * 2 * 2
    with torch.cuda.stream(timer.stream):
        copy = copy_ceiling(torch, timer, biggest, args.replays)
    log("copy ceiling: " + ", ".join(f"{k} {v['GBps']:.0f} GB/s ({v['us']:.1f} us)"
                                     for k, v in copy["candidates"].items()) + f" for {copy['bytes']} bytes"
        + "".join(f"; {k} failed: {v}" for k, v in copy.get("errors", {}).items()))

    rows = []
    result = {"meta": meta, "copy": copy, "rows": rows}
    for form, H, wname, T in every:
        if (form, H, wname, T) in done:
            log(f"row [{T}, {H}] {wname} {form}: done in {done[(form, H, wname, T)]}, skipped")
    warm = WarmAhead(args, log)
    specs = [row_spec(form, H, T, wname) for form, H, wname, T in plan]  # plan's rows as warm-up specs

    def past_deadline():
        return bool(args.deadline_s) and time.time() - start > args.deadline_s

    pending = []  # --defer-accuracy: (row, live, label, prewarm) of rows timed, accuracy not yet run

    def owed_s():
        """Seconds the pending rows' accuracy phases are predicted to take
        (each row's predicted whole time less its timing already done)."""
        m = measured_for_end(rows)
        return sum(max(0.0, (predict_row_s(m, row_elements(p[0]["form"], p[0]["H"], p[0]["T"])) or 0)
                       - p[0]["phase_s"].get("setup", 0) - p[0]["phase_s"].get("timing", 0)) for p in pending)

    def start_batch(ups):
        """Warm-ups for the rows `ups` (WarmAhead.start keeps --warm-ahead of
        them), no more than the deadline leaves time for (~60 s a row). No
        child for a row the deadline will skip (it would only take cores from
        the accuracy phase, the oracle's), none if the next row is warm
        already; a failure here turns warm-ups off, never costs a row."""
        if not warm.enabled or not ups or past_deadline():
            return
        if args.end_s:  # no child for a row --end-s will skip; the first left is the next to run
            ups = [u for u in ups if not end_skip(args.end_s, time.time() - PROC_T0 + owed_s(), rows,
                                                  *parse_spec(u)[:3], warm=True)]
        if not ups or warm.warm(ups[0]):
            return
        if args.deadline_s:
            ups = ups[:max(1, int((args.deadline_s - (time.time() - start)) // 60))]
        try:
            warm.start(ups, torch.cuda.mem_get_info()[0])
        except Exception as e:  # noqa: BLE001
            log(f"  warm-up start failed ({type(e).__name__}: {e}); warm-ups off for this run")
            warm.enabled = False
            warm.finish(None, 0)
    start_batch(specs)  # the first rows compile side by side too (after the copy ceiling's timing, before any row's)

    def finish_row(row, label, prewarm):
        """A measured row into the result: logged, written (JSON and Markdown, atomically)."""
        if prewarm is not None:  # the child that compiled this row's TC/TCd during the previous row
            row["prewarm"] = prewarm
        row["copy_GBps"] = copy.get("GBps")
        rows.append(row)
        for op, r in row["ops"].items():
            log(f"{label} {op}: det {fmt(r['det_us'])} ours {fmt(r['ours_us'])} "
                f"sota {r.get('sota')} {fmt(r.get('sota_us'))} ({row['seconds']:.0f} s)")
        log(f"{label} phases: " + ", ".join(f"{k} {v:.1f} s" for k, v in row.get("phase_s", {}).items())
            + (f"; warm-up waited {prewarm['waited_s']:.1f} s (rc {prewarm['rc']})" if prewarm else ""))
        atomic_write(args.json, json.dumps(result, indent=1))
        atomic_write(args.md, markdown(meta, rows, copy))
        try:
            log(f"{label} accuracy parts: " + acc_parts(row))
        except Exception as e:  # noqa: BLE001 - a log line never costs the run
            log(f"{label} accuracy parts: not available ({type(e).__name__}: {e})")

    def flush():
        """--defer-accuracy: the pending rows' accuracy phases, in order;
        each row is written when its own ends. A row whose accuracy phase
        fails outside its seeds (each seed's failure is recorded in the row)
        goes to failed_rows."""
        while pending:
            row, live, label, prewarm = pending.pop(0)
            try:
                with torch.cuda.stream(timer.stream):  # as run_row's accuracy phase
                    run_row_accuracy(torch, args, impls, row, live, log)
            except Exception as e:  # noqa: BLE001
                log(f"row {label} failed in its accuracy phase: {type(e).__name__}: {e}")
                log(traceback.format_exc())
                meta.setdefault("failed_rows", []).append([row["T"], row["H"], row["w"], row["form"],
                                                           f"accuracy: {type(e).__name__}: {e}"])
                try:
                    torch.cuda.synchronize()
                except Exception as e2:  # noqa: BLE001 - a sticky CUDA error: no later row can run
                    log(f"CUDA context unusable after row {label}'s accuracy phase ({type(e2).__name__}): stopping")
                    meta["stopped"] = f"CUDA context unusable after row {label}'s accuracy phase"
                    unpend("accuracy not run: CUDA context unusable")
                    return False
                continue
            # Its own phases (not the rows timed between): the default path's wall
            # seconds less the seed-0 input generation before its timing.
            row["seconds"] = sum(row["phase_s"].values())
            finish_row(row, label, prewarm)
        return True

    def skip_rest(k):
        """The plan's rows after the k-th into meta["skipped"] (the run stops)."""
        for f2, h2, w2, t2 in plan[k + 1:]:
            meta.setdefault("skipped", []).append([t2, h2, w2, f2])

    def unpend(why):
        """Pending rows that will not get their accuracy phase go to
        meta["skipped"] (a later run with --done measures them again)."""
        while pending:
            row, _, label, _ = pending.pop(0)
            log(f"row {label}: timed, {why}: not written (skipped)")
            meta.setdefault("skipped", []).append([row["T"], row["H"], row["w"], row["form"]])

    try:
        for k, (form, H, wname, T) in enumerate(plan):
            label = f"[{T}, {H}] {wname} {form}"
            prewarm = None
            # --end-s: a row that would not fit even warm is skipped before any wait for its
            # warm-up; rows timed with their accuracy still pending owe its predicted share.
            owed = owed_s()
            why = end_skip(args.end_s, time.time() - PROC_T0 + owed, rows, form, H, T, warm=True)
            if not why and not past_deadline():
                left = args.deadline_s - (time.time() - start) if args.deadline_s else 900
                if args.end_s:  # wait no longer than leaves the row (warm) its predicted time
                    est = predict_row_s(measured_for_end(rows), row_elements(form, H, T)) or 0
                    left = min(left, max(0.0, args.end_s - (time.time() - PROC_T0) - owed - est - END_TAIL_S))
                try:
                    prewarm = warm.finish(specs[k], left)
                except Exception as e:  # noqa: BLE001 - the warm-up never costs the run
                    log(f"  warm-up bookkeeping failed ({type(e).__name__}: {e}); row compiles as usual")
                    prewarm, warm.enabled = None, False
                    warm.finish(None, 0)
            if past_deadline():  # already at the row's start, or after waiting for its warm-up
                warm.finish(None, 0)  # a child warming a row that will not run
                log(f"deadline (after {prewarm['waited_s']:.0f} s waiting for the warm-up): row {label} skipped"
                    if prewarm else f"deadline: row {label} skipped")
                meta.setdefault("skipped", []).append([T, H, wname, form])
                continue
            if not why:  # again, after the wait, knowing whether the row is warm
                compiles = any(n in impls for n in ("TC", "TCd"))
                why = end_skip(args.end_s, time.time() - PROC_T0 + owed, rows, form, H, T,
                               warm=not compiles or (prewarm is not None and prewarm.get("rc") == 0))
            if why:
                log(f"end: row {label} skipped ({why})")
                meta.setdefault("skipped", []).append([T, H, wname, form])
                warm.drop(specs[k])  # its own warm-up, if still running; children of later rows go on
                start_batch(specs[k + 1:])  # a smaller row after it may still fit: warm it
                if not flush():  # the pending accuracy phases beside that batch
                    skip_rest(k)
                    break
                continue

            def after(ups=specs[k + 1:]):
                start_batch(ups)  # after this row's timing
            t0 = time.time()
            try:
                with torch.cuda.stream(timer.stream):
                    if args.defer_accuracy:
                        row, live = run_row_timing(torch, args, impls, errors, form, H, T, wname, timer, log)
                    else:
                        row = run_row(torch, args, impls, errors, form, H, T, wname, timer, log, after_timing=after)
            except Exception as e:  # noqa: BLE001
                log(f"row {label} failed: {type(e).__name__}: {e}")
                log(traceback.format_exc())
                meta.setdefault("failed_rows", []).append([T, H, wname, form, f"{type(e).__name__}: {e}"])
                try:
                    torch.cuda.synchronize()
                except Exception as e2:  # noqa: BLE001 - a sticky CUDA error: every later row would fail
                    log(f"CUDA context unusable after row {label} ({type(e2).__name__}): stopping")
                    meta["stopped"] = f"CUDA context unusable after row {label}"
                    skip_rest(k)
                    unpend("accuracy not run: CUDA context unusable")
                    break
                continue
            if timer.cupti_off and not meta.get("cupti_off"):
                meta["cupti_off"] = {"at_row": label, "why": timer.cupti_off}  # rows from there: events only
            if not args.defer_accuracy:
                row["seconds"] = time.time() - t0
                finish_row(row, label, prewarm)
                continue
            pending.append((row, live, label, prewarm))
            nxt = specs[k + 1] if k + 1 < len(specs) else None
            # Deferred only while --end-s can predict (a measured row: the first row's accuracy runs at once).
            if nxt is not None and nxt in warm.ready and not warm.procs and not past_deadline() \
                    and (rows or not args.end_s):
                log(f"{label}: accuracy deferred (the next row is warm: timed first)")
                continue
            start_batch(specs[k + 1:])  # the next rows compile beside the pending accuracy phases
            if not flush():
                skip_rest(k)
                break
        flush()  # rows timed before a deadline or end skip
    finally:
        warm.finish(None, 0)  # no child outlives the run (an exception or Ctrl-C included)
        if pending:  # an exception or Ctrl-C with rows timed but not validated: listed, never written
            unpend("run interrupted before its accuracy phase")
            atomic_write(args.json, json.dumps(result, indent=1))
            atomic_write(args.md, markdown(meta, rows, copy))
    # Again at the end: rows skipped or failed after the last measured row
    # are recorded only here.
    atomic_write(args.json, json.dumps(result, indent=1))
    atomic_write(args.md, markdown(meta, rows, copy))
    if not rows:
        print("peers.py: no row could be measured", file=sys.stderr)
        return 1
    print(markdown(meta, rows, copy))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
