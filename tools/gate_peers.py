#!/usr/bin/env python3
"""Gate other projects' RMSNorm kernels with normgate.gate, on a CUDA machine.

Each peer is wrapped as a normgate.Implementation (one training step on the
case's tensors: forward, then backward) and gated over the same windows, one
normgate.gate call per peer (a route table routes a window to one
implementation):

  torch.compile   the explicit FP32-statistics math (bench/peers/impls.py's
                  formulation) compiled with dynamic shapes, forward and
                  backward in one compiled function
  liger           Liger-Kernel's rms_norm_forward / rms_norm_backward
                  (casting mode "gemma", offset 0)
  quack           QuACK's rmsnorm_fwd(store_rstd=True) / rmsnorm_bwd

A peer whose package does not import is reported and left out. The gate's
reports (PEER-gate.md, PEER-gate.json), table and journal go to --out, with
peers-summary.json; the journals make a re-run with the same options resume.

Usage: tools/gate_peers.py --out DIR [--deadline-s N] [--peers torch.compile,liger,quack]
           [--windows "H=2048,T=1..8192;H=4096,T=1..8192"] [--seeds 3x4]
           [--t-per-window 4] [--dense-points 4] [--fresh-factor 1] [--site DIR]
Exit: 0 the gate ran (whatever its verdict: peers are expected to fail
budgets), 2 usage error, 3 no peer could run or the gate raised.
"""
import argparse
import importlib
import json
import math
import os
import signal
import site
import sys
import time

EPS = 1e-6
ALL = ("torch.compile", "liger", "quack")


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output folder (created)")
    ap.add_argument("--deadline-s", type=float, default=0, help="stop the gate after this many seconds (0: none)")
    ap.add_argument("--peers", default=",".join(ALL), help="comma list of %s" % ", ".join(ALL))
    ap.add_argument("--windows", default="H=2048,T=1..8192;H=4096,T=1..8192",
                    help="';'-separated windows (normgate.gate's string form)")
    ap.add_argument("--seeds", default="3x4")
    ap.add_argument("--t-per-window", type=int, default=4)
    ap.add_argument("--dense-points", type=int, default=4)
    ap.add_argument("--fresh-factor", type=int, default=1)
    ap.add_argument("--site", default=None, help="a folder of extra packages (site.addsitedir) tried first")
    a = ap.parse_args(argv)
    peers = [p for p in a.peers.split(",") if p]
    bad = [p for p in peers if p not in ALL]
    if bad or not peers:
        ap.error("--peers: unknown %s (known: %s)" % (bad or "(empty)", ", ".join(ALL)))
    if a.deadline_s < 0:
        ap.error("--deadline-s must be >= 0, got %s" % a.deadline_s)
    if a.site is not None and not os.path.isdir(a.site):
        ap.error("--site %r is not a folder" % a.site)
    a.peers = peers
    a.window_list = [w for w in a.windows.split(";") if w]
    if not a.window_list:
        ap.error("--windows is empty")
    return a


def make_steps(torch, peers, errors):
    """name -> (step, module whose source identifies it)."""
    steps = {}

    def math(x, w, dy):
        xf = x.float()
        rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)
        y = (xf * rstd * w.float()).to(torch.bfloat16)
        xhat = xf * rstd
        g = dy.float() * w.float()
        c = (g * xhat).mean(-1, keepdim=True)
        dx = ((g - xhat * c) * rstd).to(torch.bfloat16)
        dw = (dy.float() * xhat).sum(dim=tuple(range(x.dim() - 1)))
        return y, rstd.squeeze(-1), dx, dw

    if "torch.compile" in peers:
        tc = torch.compile(math, dynamic=True)

        def tc_step(g):
            y, rstd, dx, dw = tc(g["x"], g["w"], g["dy"])
            return {"y": y, "rstd": rstd.flatten(), "dx": dx, "dw": dw}

        steps["torch.compile"] = (tc_step, [math, torch])
    if "liger" in peers:
        try:
            lrms = importlib.import_module("liger_kernel.ops.rms_norm")

            def li_step(g):
                x2 = g["x"].reshape(-1, g["x"].shape[-1]).contiguous()
                Y, X, RSTD, BS, nw, cm = lrms.rms_norm_forward(x2, g["w"], EPS, 0.0, "gemma", None)
                dy2 = g["dy"].reshape(-1, g["dy"].shape[-1]).contiguous()
                dx, dw = lrms.rms_norm_backward(dy2, X, g["w"], RSTD, 0.0, cm, BS, nw, False, None)
                return {"y": Y, "rstd": RSTD.float().flatten(), "dx": dx, "dw": dw.float()}

            steps["liger"] = (li_step, [lrms])
        except Exception as e:  # noqa: BLE001 - reported
            errors["liger"] = "%s: %s" % (type(e).__name__, e)
    if "quack" in peers:
        try:
            q = importlib.import_module("quack.rmsnorm")

            def q_step(g):
                x2 = g["x"].reshape(-1, g["x"].shape[-1])
                out, _, rstd = q.rmsnorm_fwd(x2, g["w"], eps=EPS, store_rstd=True)
                dx, dw, _, _ = q.rmsnorm_bwd(x2, g["w"], g["dy"].reshape(-1, g["dy"].shape[-1]), rstd)
                return {"y": out, "rstd": rstd.float().flatten(), "dx": dx, "dw": dw.float()}

            steps["quack"] = (q_step, [q])
        except Exception as e:  # noqa: BLE001
            errors["quack"] = "%s: %s" % (type(e).__name__, e)
    return steps


def as_report_numbers(o):
    """o with each non-finite float as the reports' string "inf", "-inf" or "nan"."""
    if isinstance(o, dict):
        return {k: as_report_numbers(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [as_report_numbers(v) for v in o]
    if isinstance(o, float) and not math.isfinite(o):
        return "nan" if math.isnan(o) else ("inf" if o > 0 else "-inf")
    return o


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    if a.site:
        site.addsitedir(a.site)
        sys.path.insert(0, sys.path.pop())  # tried first
    os.makedirs(a.out, exist_ok=True)
    import torch

    import normgate

    if not torch.cuda.is_available():
        print("gate_peers: no CUDA device: the peers run on the GPU", file=sys.stderr)
        return 2
    errors = {}
    steps = make_steps(torch, a.peers, errors)
    for n, e in errors.items():
        print("peer     %s: NOT RUN (%s)" % (n, e))
    if not steps:
        return 3
    impls = []
    for n, (fn, src) in steps.items():
        # Peers keep their own eps; every case of these families has eps = 1e-6.
        def guarded(g, fn=fn, n=n):
            if abs(float(g["eps"]) - EPS) > 0:
                raise ValueError("%s is wrapped for eps %g, the case has %g" % (n, EPS, g["eps"]))
            return fn(g)

        impls.append(normgate.Implementation(n.replace(".", "_"), guarded, op="bwd", deterministic=True,
                                             sources=src, forms=["plain"],
                                             description="%s (tools/gate_peers.py, one step: fwd then bwd)" % n))
    if a.deadline_s > 0:
        def on_alarm(signum, frame):
            raise KeyboardInterrupt
        signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, a.deadline_s)
    t0 = time.time()
    stopped = None
    results = {}
    # One gate per peer: a route table routes each window to one
    # implementation, so each peer has its own table, journal and reports.
    for impl in impls:
        try:
            rep = normgate.gate(impl, windows=a.window_list, seeds=a.seeds, t_per_window=a.t_per_window,
                                dense_points=a.dense_points, fresh_factor=a.fresh_factor,
                                journal=os.path.join(a.out, impl.name + ".journal"),
                                report_md=os.path.join(a.out, impl.name + "-gate.md"),
                                report_json=os.path.join(a.out, impl.name + "-gate.json"),
                                table_out=os.path.join(a.out, impl.name + "-gate.toml"), progress=False)
        except KeyboardInterrupt:
            stopped = "deadline reached in %s: the journal keeps the finished cases (same command resumes)" % impl.name
            break
        results[impl.name] = {"verdict": rep.get("verdict"),
                              "windows": [{k: w.get(k) for k in ("window", "variant", "verdict", "worst",
                                                                 "worst_output", "worst_case", "cases")}
                                          for w in rep.get("windows", [])]}
        print("peer     %s: %s" % (impl.name, rep.get("verdict")))
    signal.setitimer(signal.ITIMER_REAL, 0)
    summary = {"peers": list(steps), "not_run": errors, "seconds": round(time.time() - t0, 1),
               "stopped": stopped, "torch": torch.__version__,
               "device": torch.cuda.get_device_name(0), "args": vars(a), "results": results}
    # normgate.gate returns non-finite err/tol as floats; the summary spells
    # them as the reports do ("inf", "nan": docs/schemas.md), so that it
    # stays JSON (json.dump would write Infinity, which JSON lacks).
    summary = as_report_numbers(summary)
    tmp = os.path.join(a.out, "peers-summary.json.tmp")
    with open(tmp, "w") as f:
        json.dump(summary, f, indent=1, default=str, allow_nan=False)
    os.replace(tmp, os.path.join(a.out, "peers-summary.json"))
    print(json.dumps(summary, indent=1, default=str)[:4000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
