#!/usr/bin/env python3
"""Run each implementation of bench/peers/impls.py alone, in its own process, on one
row: eager fwd+bwd twice, then graph capture and 5 replays of each op, each
followed by a synchronize. Finds which implementation faults (an illegal
address poisons the whole CUDA context, so one process per implementation).
Usage: python3 bench/peers_isolate.py H T w impl[,impl...]"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def child(H, T, w, name):
    sys.path.insert(0, HERE)
    from peers.impls import form_inputs, make_impls, op_fn
    from peers.matrix import OPS, case_id
    from peers.timing import Timer
    import torch
    import normgate
    errors = {}
    case = case_id("plain", H, T, w, "normal", 0)
    impls = make_impls(torch, {name}, normgate.case_info(case)["eps"], errors)
    if name not in impls:
        print(f"{name}: unavailable: {errors.get(name)}")
        return 3
    timer = Timer(torch)
    fwd, bwd = impls[name]
    with torch.cuda.stream(timer.stream):
        inp = form_inputs(torch, normgate.generate(case))
        for _ in range(2):
            outs, saved = fwd(inp)
            outs.update(bwd(inp, saved))
            torch.cuda.synchronize()
        print(f"{name}: eager ok (dx {outs['dx'].dtype}, dw {outs['dw'].dtype})", flush=True)
        for op in OPS:
            g = timer.capture(op_fn(impls[name], op, inp, saved))
            for _ in range(5):
                g.replay()
                torch.cuda.synchronize()
            print(f"{name}: {op} graph ok", flush=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--child":
        sys.exit(child(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]))
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    rc_all = 0
    for name in sys.argv[4].split(","):
        r = subprocess.run([sys.executable, __file__, "--child", *sys.argv[1:4], name],
                           capture_output=True, text=True, timeout=240)
        lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip() and "Warning" not in ln]
        print(f"== {name} rc={r.returncode}")
        print("\n".join(lines[-6:]))
        rc_all |= r.returncode != 0
    sys.exit(rc_all)
