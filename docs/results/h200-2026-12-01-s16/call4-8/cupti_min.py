# The reproduction run in calls 7-8 (session 16), from the repository root:
#   python3 -X faulthandler cupti_min.py MODE
# MODE "before" (call 7, the first version of this script): a graph captured,
# then ng_graph_spans_start, then its replay: SIGSEGV in the replay.
# kineto: torch.profiler around the replay (no normgate CUPTI): fine.
# plain: start, a non-graph kernel, stop: fine, no record.
# after: start, then capture and replay a graph: fine, one record (2.4 us).
import sys, torch
sys.path.insert(0, "python")
from normgate import _lib
mode = sys.argv[1]
x = torch.ones(1 << 20, device="cuda"); s = torch.cuda.Stream()
with torch.cuda.stream(s):
    x.mul_(1.0); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        x.mul_(1.0)
    torch.cuda.synchronize()
    if mode == "before":
        _lib.graph_spans_start(); g.replay(); torch.cuda.synchronize(); print(_lib.graph_spans_stop(16))
    elif mode == "kineto":
        from torch.profiler import profile, ProfilerActivity
        with profile(activities=[ProfilerActivity.CUDA]) as p:
            g.replay(); torch.cuda.synchronize()
        print("kineto ok", len(p.events()), flush=True)
    elif mode == "plain":
        _lib.graph_spans_start(); x.mul_(1.0); torch.cuda.synchronize(); print("plain kernel ok", _lib.graph_spans_stop(16), flush=True)
    elif mode == "after":
        _lib.graph_spans_start()
        g2 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g2, stream=s):
            x.add_(1.0)
        print("captured under trace", flush=True)
        g2.replay(); torch.cuda.synchronize(); print("after ok", _lib.graph_spans_stop(16), flush=True)
