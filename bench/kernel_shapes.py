#!/usr/bin/env python3
"""Which kernels an implementation launches, and how (a look, not a timing).

For each implementation named (bench/peers/impls.py's make_impls: ours, det, TC,
TCd, eager, F.rms_norm, Liger), run fwd and bwd on one case, then once more
under torch.profiler, and print every CUDA kernel with its launch shape as the
profiler (CUPTI) records it: grid, block, registers per thread, shared memory,
estimated occupancy, duration. Duration here is one warm-L2 run, for reading
the shape only: bench/peers.py is the timing.

Usage: python3 bench/kernel_shapes.py [--case ID] [--impls TC,ours] [--trace DIR]
Run with TORCH_LOGS=output_code to get torch.compile's generated kernels too.

--ncu-window: instead of the profiler, after the warm-up run one fwd and one
bwd of each implementation between cudaProfilerStart and cudaProfilerStop,
for Nsight Compute's hardware counters on just those kernels (compilation
and autotuning stay outside):
  ncu --clock-control none --profile-from-start off --section SpeedOfLight \
      --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
      python3 bench/kernel_shapes.py --impls ours,TC --ncu-window
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", default="H=4096,T=131072,w=bf16,form=plain,family=normal,seed=0")
    ap.add_argument("--impls", default="TC,ours")
    ap.add_argument("--eps", type=float, default=1e-6)
    ap.add_argument("--trace", default=None, help="folder for the Chrome traces (optional)")
    ap.add_argument("--ncu-window", action="store_true",
                    help="run one fwd+bwd per implementation inside cudaProfilerStart/Stop (for ncu)")
    a = ap.parse_args(argv)
    import torch
    import normgate
    from peers.impls import form_inputs, make_impls

    names = [n for n in a.impls.split(",") if n]
    errors = {}
    impls = make_impls(torch, names, a.eps, errors)
    for n in names:
        if n not in impls:
            print(f"kernel_shapes: {n}: unavailable ({errors.get(n, 'unknown implementation')})", file=sys.stderr)
            return 2
    inp = form_inputs(torch, normgate.generate(a.case))
    print(f"case {a.case}; gpu {torch.cuda.get_device_name()}; torch {torch.__version__}")
    for n in names:
        fwd, bwd = impls[n]
        for _ in range(3):  # compile, autotune, warm
            _, saved = fwd(inp)
            bwd(inp, saved)
        torch.cuda.synchronize()
        if a.ncu_window:
            torch.cuda.profiler.start()
            _, saved = fwd(inp)
            bwd(inp, saved)
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
            print(f"{n}: one fwd and one bwd ran inside the profiler window")
            continue
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            _, saved = fwd(inp)
            torch.cuda.synchronize()
            bwd(inp, saved)
            torch.cuda.synchronize()
        path = os.path.join(a.trace or "/tmp", f"trace_{n}.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            ev = json.load(f)["traceEvents"]
        print(f"\n{n}:")
        print("| kernel | us | grid | block | regs | smem B | est. occupancy % |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for e in ev:
            if e.get("cat") != "kernel":
                continue
            g = e.get("args", {})
            print(f"| {e['name'][:70]} | {e.get('dur', 0):.1f} | {g.get('grid')} | {g.get('block')} | "
                  f"{g.get('registers per thread')} | {g.get('shared memory')} | {g.get('est. achieved occupancy %')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
