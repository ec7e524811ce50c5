# Session 17, call 3: why the CUPTI GPU test sees CUDA events of ~4.0 ms
# around a graph replay whose CUPTI span is ~255 us (calls 1-2). Per replay:
# events without the trace (graph captured before any start), then with the
# trace on (graph captured after start), for a 256 MB and a 1 MB graph, and a
# non-graph launch under the trace. From the repository root:
#   python3 docs/results/peers/cupti/cupti_events.py
import statistics
import sys
import torch
sys.path.insert(0, "python")
from normgate import _lib

s = torch.cuda.Stream()


def ops(x):
    x.mul_(1.0)
    x.add_(0.0)


def capture(x):
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        ops(x)
    torch.cuda.synchronize()
    return g


def events(fn, k):
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(k)]
    for a, b in ev:
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    return [a.elapsed_time(b) * 1e3 for a, b in ev]


def show(label, ev, spans=None):
    line = f"{label}: events us median {statistics.median(ev):.1f} [{', '.join(f'{v:.1f}' for v in ev)}]"
    if spans is not None:
        sp = [(e - st) / 1e3 for _, _, st, e in spans]
        gaps = [(spans[i + 1][2] - spans[i][2]) / 1e3 for i in range(len(spans) - 1)]
        line += f"; spans us [{', '.join(f'{v:.1f}' for v in sp)}]; start-to-start us [{', '.join(f'{v:.1f}' for v in gaps)}]"
    print(line, flush=True)


with torch.cuda.stream(s):
    big, small = torch.ones(64 << 20, device="cuda"), torch.ones(1 << 18, device="cuda")
    ops(big); ops(small); torch.cuda.synchronize()
    for name, x in (("256MB", big), ("1MB", small)):
        g = capture(x)
        g.replay(); torch.cuda.synchronize()
        show(f"no trace, graph {name}", events(g.replay, 6))
        show(f"no trace, eager {name}", events(lambda: ops(x), 6))
    _lib.graph_spans_start()
    try:
        for name, x in (("256MB", big), ("1MB", small)):
            g = capture(x)
            g.replay(); torch.cuda.synchronize()
            _lib.graph_spans_take(1 << 16)
            ev = events(g.replay, 6)
            show(f"trace on, graph {name}", ev, _lib.graph_spans_take(64))
            ev = events(lambda: ops(x), 6)
            show(f"trace on, eager {name}", ev, _lib.graph_spans_take(64))
            # Events on another stream than the replay's: does the extra time sit before the graph?
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); g.replay(); b.record(); torch.cuda.synchronize()
            c, d = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            c.record(); g.replay(); g.replay(); d.record(); torch.cuda.synchronize()
            print(f"trace on, graph {name}: 1 replay {a.elapsed_time(b) * 1e3:.1f} us, 2 replays back to back "
                  f"{c.elapsed_time(d) * 1e3:.1f} us; spans {[(e - st) / 1e3 for _, _, st, e in _lib.graph_spans_take(64)]}",
                  flush=True)
    finally:
        _lib.graph_spans_stop(1 << 16)
    g = capture(big)
    g.replay(); torch.cuda.synchronize()
    show("after stop, graph 256MB", events(g.replay, 6))
