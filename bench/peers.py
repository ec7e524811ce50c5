#!/usr/bin/env python3
"""normgate against its peers on one GPU, in one process, at one accuracy budget.

Method (from the seed PR, ../shared/seed/, and docs/perf.md):
  * latency = median over replays of ONE CUDA-graph replay of the op, the L2
    flushed before each replay (a read of a buffer larger than twice the L2,
    outside the timed span), timed by CUDA events around the replay alone
    (CUPTI is not used: torch's events are the fallback the issue allows);
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
Writes Markdown and JSON (atomically: temp file, then rename) and prints the
Markdown last. Exit 0 on a completed run (speed is never asserted), 2 on usage
errors, 1 when nothing could be measured.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

ALL_PEERS = ["eager", "TC", "TCd", "F.rms_norm", "Liger", "Q"]
OPS = ["fwd", "bwd", "2xfwd+bwd"]


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
            die_usage(f"bad value {tok!r} in --{name}")
    if not out:
        die_usage(f"--{name} is empty")
    return out


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--H", default="1536,2048,4096,5120,6144")
    p.add_argument("--T", default="4097,65537,98304,131072")
    p.add_argument("--w", default="bf16,fp32")
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--peers", default=",".join(ALL_PEERS))
    p.add_argument("--replays", type=int, default=201)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seeds", type=int, default=5, help="accuracy seeds per row (worst counts)")
    p.add_argument("--family", default="normal")
    p.add_argument("--eps", type=float, default=1e-6)
    p.add_argument("--deadline-s", type=float, default=0, help="start no new row after this many seconds (0: none)")
    p.add_argument("--json", default="")
    p.add_argument("--md", default="")
    a = p.parse_args(argv)
    a.H = parse_list(a.H, int, "H")
    a.T = parse_list(a.T, int, "T")
    a.w = parse_list(a.w, str, "w")
    a.ops = parse_list(a.ops, str, "ops")
    a.peers = parse_list(a.peers, str, "peers")
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
    if a.seeds < 1:
        die_usage(f"--seeds {a.seeds}: need >= 1")
    for h in a.H:
        if not 1 <= h <= 16384:
            die_usage(f"--H {h}: outside 1..16384")
    for t in a.T:
        if t < 1:
            die_usage(f"--T {t}: need >= 1")
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


def make_impls(torch, names, eps, errors):
    F = torch.nn.functional
    impls = {}

    import normgate

    def ng(deterministic):
        def fwd(x, w):
            y, rstd = normgate.rmsnorm_train_forward(x, w, eps)
            return y, rstd, rstd

        def bwd(dy, x, w, rstd):
            return normgate.rmsnorm_train_backward(dy, x, w, rstd, deterministic=deterministic)

        return fwd, bwd

    impls["det"] = ng(True)
    impls["det#2"] = ng(True)
    impls["ours"] = ng(False)
    impls["ours#2"] = ng(False)

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
        dw = (dy.float() * xhat).sum(0)
        return dx, dw

    def wrap_ref(f_fwd, f_bwd):
        def fwd(x, w):
            y, rstd = f_fwd(x, w)
            return y, rstd, rstd

        return fwd, f_bwd

    if "eager" in names:
        impls["eager"] = wrap_ref(ref_fwd, ref_bwd)
    if "TC" in names or "TCd" in names:
        import torch._inductor.config as icfg

        icfg.emulate_precision_casts = True
        if "TC" in names:
            impls["TC"] = wrap_ref(torch.compile(ref_fwd, mode="max-autotune-no-cudagraphs", dynamic=False),
                                   torch.compile(ref_bwd, mode="max-autotune-no-cudagraphs", dynamic=False))
        if "TCd" in names:
            impls["TCd"] = wrap_ref(torch.compile(ref_fwd, dynamic=False), torch.compile(ref_bwd, dynamic=False))
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

        impls["F.rms_norm"] = (fr_fwd, fr_bwd)
    if "Liger" in names:
        try:
            from liger_kernel.ops import rms_norm as lrms

            def li_fwd(x, w):
                Y, X, RSTD, BS, nw, cm = lrms.rms_norm_forward(x, w, eps, 0.0, "gemma", None)
                return Y, RSTD, (X, RSTD, BS, nw, cm)

            def li_bwd(dy, x, w, saved):
                X, RSTD, BS, nw, cm = saved
                return lrms.rms_norm_backward(dy, X, w, RSTD, 0.0, cm, BS, nw, False, None)

            impls["Liger"] = (li_fwd, li_bwd)
        except Exception as e:  # noqa: BLE001 - reported in the output
            errors["Liger"] = f"{type(e).__name__}: {e}"
    if "Q" in names:
        try:
            from quack.rmsnorm import rmsnorm_bwd as q_bwd_fn
            from quack.rmsnorm import rmsnorm_fwd as q_fwd_fn

            def q_fwd(x, w):
                out, _, rstd = q_fwd_fn(x, w, eps=eps, store_rstd=True)
                return out, rstd, rstd

            def q_bwd(dy, x, w, rstd):
                dx, dw, _, _ = q_bwd_fn(x, w, dy, rstd)
                return dx, dw

            impls["Q"] = (q_fwd, q_bwd)
        except Exception as e:  # noqa: BLE001
            errors["Q"] = f"{type(e).__name__}: {e}"
    return impls


# The outputs an op must get right: the forward's y (and rstd when the
# implementation exposes it); the backward's dx and dw, and the step's all.
OP_OUTPUTS = {"fwd": ("y", "rstd"), "bwd": ("dx", "dw"), "2xfwd+bwd": ("y", "rstd", "dx", "dw")}


def in_budget(info, op):
    """Within the budget on every accuracy seed, for the outputs `op` produces
    (an output the implementation does not expose, e.g. F.rms_norm's rstd, is
    not counted; y, dx and dw must be there)."""
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


def bytes_moved(op, T, H, wbytes):
    fwd = T * H * 2 * 2 + H * wbytes + T * 4          # x in, y out, w, rstd
    bwd = T * H * 2 * 3 + H * wbytes + T * 4 + H * 4  # dy, x in, dx out, w, rstd, dw
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
        # docs/perf.md. NG_PEERS_SHARED_POOL=1 restores the shared pool.
        self.pool = torch.cuda.graph_pool_handle() if os.environ.get("NG_PEERS_SHARED_POOL") == "1" else None
        # Everything (inputs, eager runs, warm-up, capture, replays) runs on
        # this one non-default stream: autograd runs a backward on the stream
        # of its forward, and the legacy default stream cannot join a capture.
        self.stream = torch.cuda.Stream()

    def flush(self):
        # A read of the whole buffer: only clean lines stay behind.
        self.torch.sum(self.flush_buf, dim=0, out=self.flush_out)

    def capture(self, fn):
        torch = self.torch
        assert torch.cuda.current_stream() == self.stream, "capture() must run on Timer.stream"
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(g, pool=self.pool, stream=self.stream):
                fn()
        except Exception:
            # A failed capture can leave its pool recording: later captures
            # get a fresh pool, so one implementation's failure stays its own.
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
        torch = self.torch
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
        g.replay()
        for s, e in ev:
            self.flush()
            s.record()
            g.replay()
            e.record()
        torch.cuda.synchronize()
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
    for name, fn in cands.items():
        g = timer.capture(fn)
        t = statistics.median(timer.time(g, reps))
        res[name] = {"us": t, "GBps": 2 * n / (t * 1e-6) / 1e9}
    best = max(res, key=lambda k: res[k]["GBps"])
    return {"GBps": res[best]["GBps"], "us": res[best]["us"], "by": best, "bytes": n, "candidates": res}


def run_row(torch, args, impls, errors, H, T, wname, timer, log):
    import normgate

    case = f"H={H},T={T},w={wname},form=plain,family={args.family},seed=0"
    inp = normgate.generate(case)
    x, w, dy = inp["x"], inp["w"], inp["dy"]
    names = [n for n in impls]
    row = {"H": H, "T": T, "w": wname, "form": "plain", "case": case, "impls": {}}

    # Graphs per (impl, op); a failure is recorded against the implementation.
    # A graph holds raw pointers, not references: every tensor a graph reads
    # that was made outside it (the eager forward's y, rstd, saved) must stay
    # referenced until the graph is gone, or the allocator hands its memory to
    # the next implementation (garbage inputs, or an illegal address).
    graphs = {}
    keep = []
    for name in names:
        fwd, bwd = impls[name]
        info = row["impls"].setdefault(name, {"us": {}, "error": None})
        try:
            t0 = time.time()
            y, rstd, saved = fwd(x, w)
            keep.append((y, rstd, saved))
            torch.cuda.synchronize()
            for op in args.ops:
                if op == "fwd":
                    fn = lambda fwd=fwd: fwd(x, w)  # noqa: E731
                elif op == "bwd":
                    fn = lambda bwd=bwd, saved=saved: bwd(dy, x, w, saved)  # noqa: E731
                else:
                    def fn(fwd=fwd, bwd=bwd):
                        fwd(x, w)
                        _, _, s2 = fwd(x, w)
                        return bwd(dy, x, w, s2)
                graphs[(name, op)] = timer.capture(fn)
            info["setup_s"] = time.time() - t0
        except Exception as e:  # noqa: BLE001
            info["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            log(f"  {name}: setup failed: {info['error']}")
            log(traceback.format_exc())

    # Timing: rounds interleaved, order rotated.
    live = [n for n in names if row["impls"][n]["error"] is None]
    per_round = [args.replays // args.rounds + (1 if r < args.replays % args.rounds else 0) for r in range(args.rounds)]
    samples = {(n, op): [] for n in live for op in args.ops}
    for r in range(args.rounds):
        k = r % max(1, len(live))
        order = live[k:] + live[:k]
        if r % 2 == 1:
            order = order[::-1]
        for n in order:
            for op in args.ops:
                samples[(n, op)] += timer.time(graphs[(n, op)], per_round[r])
    for (n, op), v in samples.items():
        row["impls"][n]["us"][op] = statistics.median(v)
        row["impls"][n].setdefault("p10_p90", {})[op] = [
            sorted(v)[len(v) // 10], sorted(v)[(len(v) * 9) // 10]]
    del graphs
    del keep
    torch.cuda.empty_cache()

    # Accuracy on --seeds seeds, every implementation's outputs through the oracle.
    for seed in range(args.seeds):
        c = f"H={H},T={T},w={wname},form=plain,family={args.family},seed={seed}"
        ins = normgate.generate(c)
        with normgate.Oracle(c) as orc:
            for n in live:
                if n.endswith("#2"):
                    continue
                fwd, bwd = impls[n]
                info = row["impls"][n]
                try:
                    y, rstd, saved = fwd(ins["x"], ins["w"])
                    dx, dw = bwd(ins["dy"], ins["x"], ins["w"], saved)
                    torch.cuda.synchronize()
                    # The contract is y, dx BF16 and rstd, dw FP32: an output in
                    # another dtype is converted (bf16 -> fp32 is exact) and the
                    # conversion recorded against the implementation.
                    outs = {}
                    for oname, t, dt in (("y", y, torch.bfloat16), ("rstd", rstd, torch.float32),
                                         ("dx", dx, torch.bfloat16), ("dw", dw, torch.float32)):
                        if t is None:
                            continue
                        if t.dtype != dt:
                            info.setdefault("casts", {})[oname] = str(t.dtype).replace("torch.", "")
                            t = t.to(dt)
                        outs[oname] = t.reshape(-1)
                    rep = orc.validate(**outs)
                except Exception as e:  # noqa: BLE001
                    info["error"] = f"accuracy run: {type(e).__name__}: {e}"
                    continue
                acc = info.setdefault("err_tol", {})
                ok = info.setdefault("pass_out", {})
                for out, o in rep.get("outputs", {}).items():
                    if not o.get("present", True):
                        continue
                    acc[out] = max(acc.get(out, 0.0), float(o["err_tol"]))
                    ok[out] = ok.get(out, True) and bool(o.get("pass"))
                info["pass"] = info.get("pass", True) and bool(rep.get("pass"))
                info["dw_dtype"] = str(dw.dtype).replace("torch.", "")
        del ins
        torch.cuda.empty_cache()
    for n in live:
        if n.endswith("#2"):
            base = row["impls"][n[:-2]]
            row["impls"][n]["pass"] = base.get("pass")
            row["impls"][n]["err_tol"] = base.get("err_tol")
            row["impls"][n]["pass_out"] = base.get("pass_out")

    # Bandwidth and ratios.
    wbytes = 2 if wname == "bf16" else 4
    row["ops"] = {}
    for op in args.ops:
        r = {"bytes": bytes_moved(op, T, H, wbytes)}
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
        if r["ours_us"]:
            r["ours_GBps"] = r["bytes"] / (r["ours_us"] * 1e-6) / 1e9
            if r["det_us"]:
                r["det_over_ours"] = r["det_us"] / r["ours_us"]
            if r["sota"]:
                r["sota_us"] = us(r["sota"])
                r["sota_over_ours"] = r["sota_us"] / r["ours_us"]
            if r["fastest_any"]:
                r["fastest_any_over_ours"] = us(r["fastest_any"]) / r["ours_us"]
        row["ops"][op] = r
    return row


def fmt(v, f="{:.2f}"):
    return "—" if v is None else f.format(v)


def markdown(meta, rows, copy):
    L = []
    L.append(f"# normgate vs peers on {meta['gpu']} ({meta['date']})\n")
    L.append(f"driver {meta['driver']}, CUDA {meta['cuda']}, torch {meta['torch']}, triton {meta.get('triton')}; "
             f"normgate {meta['normgate']}. Command: `{meta['command']}`.\n")
    L.append(f"Latency: median of {meta['replays']} CUDA-graph replays per implementation and op "
             f"({meta['rounds']} interleaved rounds, order rotated), L2 flushed before each, CUDA events. "
             f"Accuracy: worst of {meta['seeds']} seeds of family `{meta['family']}` through normgate's oracle. "
             f"det = normgate deterministic=True, ours = deterministic=False. "
             f"Copy ceiling (read + write, faster of normgate's 16-byte copy and a Triton copy: {copy.get('by')}): "
             f"{fmt(copy.get('GBps'), '{:.0f}')} GB/s; "
             + ", ".join(f"{k} {v['GBps']:.0f} GB/s" for k, v in copy.get('candidates', {}).items()) + ".\n")
    if meta["peer_errors"]:
        L.append("Peers that could not run: " + "; ".join(f"{k}: `{v}`" for k, v in meta["peer_errors"].items()) + "\n")
    L.append("| workload [T, H] w, form | op | det us | SOTA us (name) | ours us | det/ours | SOTA/ours | ours GB/s (of copy) | A/A floor |")
    L.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        for op, r in row["ops"].items():
            sota = "—"
            if r.get("sota"):
                sota = f"{r['sota_us']:.2f} {r['sota']}"
            elif r.get("fastest_any"):
                n = r["fastest_any"]
                wo, wv = worst_output(row["impls"][n], op)
                sota = f"! {row['impls'][n]['us'][op]:.2f} {n} ({wo} {fmt(wv, '{:.3g}')})"
            frac = ""
            if r.get("ours_GBps") and copy.get("GBps"):
                frac = f" ({r['ours_GBps'] / copy['GBps']:.2f})"
            L.append(f"| [{row['T']}, {row['H']}] w {row['w']}, plain | {op} | {fmt(r['det_us'])} | {sota} | "
                     f"{fmt(r['ours_us'])} | {fmt(r.get('det_over_ours'), '{:.3f}x')} | "
                     f"{fmt(r.get('sota_over_ours'), '{:.3f}x')} | {fmt(r.get('ours_GBps'), '{:.0f}')}{frac} | "
                     f"{fmt(r['aa_floor'], '{:.4f}')} |")
    L.append("\n! = no peer within the budget on every seed: the fastest peer is shown with "
             "its worst err/tol over the op's outputs; "
             "SOTA/ours is then left empty.\n")
    L.append("## Every implementation\n")
    L.append("| workload | impl | fwd us | bwd us | 2xfwd+bwd us | y | rstd | dx | dw | dw dtype | in budget for |")
    L.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        for n, i in row["impls"].items():
            if i.get("error"):
                L.append(f"| [{row['T']}, {row['H']}] {row['w']} | {n} | error: `{i['error'][:120]}` | | | | | | | | |")
                continue
            et = i.get("err_tol") or {}
            L.append(f"| [{row['T']}, {row['H']}] {row['w']} | {n} | " +
                     " | ".join(fmt(i['us'].get(op)) for op in OPS) + " | " +
                     " | ".join(fmt(et.get(o), '{:.3g}') for o in ("y", "rstd", "dx", "dw")) +
                     f" | {i.get('dw_dtype', '—')}" +
                     ("".join(f" ({k} was {v})" for k, v in (i.get("casts") or {}).items())) + " | " +
                     (", ".join(op for op in OPS if in_budget(i, op)) or "none") + " |")
    return "\n".join(L) + "\n"


def main(argv):
    args = parse_args(argv)
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
    impls = make_impls(torch, set(args.peers), args.eps, errors)
    timer = Timer(torch)
    props = torch.cuda.get_device_properties(0)
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
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
            "seeds": args.seeds, "family": args.family, "eps": args.eps, "peer_errors": errors,
            "method": "CUDA-graph replay, cold L2 (read flush), CUDA events, median; A/A copies of det and ours"}
    for k, v in errors.items():
        log(f"peer {k} unavailable: {v}")

    biggest = max(args.T) * max(args.H) * 2 * 2
    with torch.cuda.stream(timer.stream):
        copy = copy_ceiling(torch, timer, biggest, args.replays)
    log("copy ceiling: " + ", ".join(f"{k} {v['GBps']:.0f} GB/s ({v['us']:.1f} us)"
                                     for k, v in copy["candidates"].items()) + f" for {copy['bytes']} bytes")

    rows = []
    result = {"meta": meta, "copy": copy, "rows": rows}
    for H in args.H:
        for wname in args.w:
            for T in args.T:
                if args.deadline_s and time.time() - start > args.deadline_s:
                    log(f"deadline: row [{T}, {H}] {wname} and later rows skipped")
                    meta.setdefault("skipped", []).append([T, H, wname])
                    continue
                t0 = time.time()
                try:
                    with torch.cuda.stream(timer.stream):
                        row = run_row(torch, args, impls, errors, H, T, wname, timer, log)
                except Exception as e:  # noqa: BLE001
                    log(f"row [{T}, {H}] {wname} failed: {type(e).__name__}: {e}")
                    log(traceback.format_exc())
                    continue
                row["seconds"] = time.time() - t0
                rows.append(row)
                for op, r in row["ops"].items():
                    log(f"[{T}, {H}] {wname} {op}: det {fmt(r['det_us'])} ours {fmt(r['ours_us'])} "
                        f"sota {r.get('sota')} {fmt(r.get('sota_us'))} ({row['seconds']:.0f} s)")
                md = markdown(meta, rows, copy)
                atomic_write(args.json, json.dumps(result, indent=1))
                atomic_write(args.md, md)
    if not rows:
        print("peers.py: no row could be measured", file=sys.stderr)
        return 1
    print(markdown(meta, rows, copy))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
