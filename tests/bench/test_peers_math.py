"""Tests of bench/peers' CPU-checkable parts: every peer formulation it
times must compute the op it claims, on every form, as normgate's oracle sees
it; a wrong formulation (the public bug classes) must fail.

Run: python3 -m pytest tests/bench/test_peers_math.py
Needs torch (skipped without it) and libnormgate_capi.so; runs on the CPU
(torch's eager math and F.rms_norm; the GPU-only peers are the benchmark's).
"""

import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "python"))  # normgate from this checkout
import normgate  # noqa: E402
from normgate import _lib  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "bench"))
from peers.accuracy import accuracy_into, in_budget  # noqa: E402
from peers.cli import parse_args  # noqa: E402
from peers.impls import form_inputs, make_impls, op_fn  # noqa: E402
from peers.matrix import OPS, bytes_moved, case_id, row_spec  # noqa: E402
from peers.timing import (CuptiError, Timer, cupti_lines, cupti_time, is_oom, match_spans,  # noqa: E402
                          round_order, setup_row_graphs)
from peers.warmup import WarmAhead, fit_batch, row_bytes  # noqa: E402


pytestmark = pytest.mark.skipif(not _lib.loadable(), reason="libnormgate_capi.so not built (" + _lib.library_path() + ")")

SHAPES = [("plain", 64, 33), ("res", 96, 17), ("heads24", 256, 5), ("heads4", 256, 9)]


def _run(form, H, T, w, names, family="normal", seed=1, wrap=None):
    case = case_id(form, H, T, w, family, seed)
    eps = normgate.case_info(case)["eps"]
    impls = make_impls(torch, set(names), eps, {})
    inp = form_inputs(torch, normgate.generate(case, device="cpu"))
    out = {}
    with normgate.Oracle(case) as orc:
        for n in names:
            impl = wrap(impls[n]) if wrap else impls[n]
            info = {}
            rep = accuracy_into(torch, impl, inp, orc, info)
            assert rep is not None, info.get("acc_error")
            out[n] = info
    return inp, out


@pytest.mark.parametrize("w", ["bf16", "fp32"])
@pytest.mark.parametrize("form,H,T", SHAPES)
def test_peer_math_passes_the_oracle_on_every_form(form, H, T, w):
    inp, out = _run(form, H, T, w, ["eager", "F.rms_norm"])
    eager = out["eager"]
    assert eager["pass"], eager
    want = {"y", "rstd", "dx", "dw"} | ({"h_new"} if form == "res" else set())
    assert set(eager["err_tol"]) == want
    # Not vacuous: the outputs carry real rounding error (BF16 y, dx).
    assert 0.01 < eager["err_tol"]["y"] <= 1 and 0.01 < eager["err_tol"]["dx"] <= 1
    fr = out["F.rms_norm"]
    assert "rstd" not in fr["err_tol"]  # F.rms_norm does not expose rstd
    assert fr["pass_out"]["y"] and fr["pass_out"]["dx"]
    if form == "heads24":  # the timed layout: the q slice of a packed qkv buffer
        assert not inp["x"].is_contiguous() and inp["x"].stride(0) == 40 * 256


def test_res_gradient_added_before_the_norm_fails():
    """The public bug class: dh_new added to dy (before the norm backward)
    instead of to dx (after it)."""
    def wrap(impl):
        fwd, bwd = impl

        def bad_bwd(inp, saved):
            return bwd(dict(inp, dy=inp["dy"] + inp["dh_new"], dh_new=torch.zeros_like(inp["dh_new"])), saved)
        return fwd, bad_bwd
    _, out = _run("res", 96, 17, "bf16", ["eager"], wrap=wrap)
    assert not out["eager"]["pass_out"]["dx"]
    assert out["eager"]["err_tol"]["dx"] > 1


def test_bf16_dw_is_out_of_budget_and_recorded_as_a_cast():
    def wrap(impl):
        fwd, bwd = impl

        def bf16_dw(inp, saved):
            o = bwd(inp, saved)
            return dict(o, dw=o["dw"].to(torch.bfloat16))
        return fwd, bf16_dw
    _, out = _run("plain", 64, 600, "bf16", ["eager"], wrap=wrap)
    info = out["eager"]
    assert info["casts"] == {"dw": "bfloat16"}
    assert not info["pass_out"]["dw"] and info["err_tol"]["dw"] > 1
    assert in_budget(info, "fwd") and not in_budget(info, "bwd")
    assert not in_budget(info, "2xfwd+bwd")


def test_in_budget_needs_the_ops_outputs():
    ok = {"pass_out": {"y": True, "dx": True, "dw": True}}
    assert in_budget(ok, "fwd") and in_budget(ok, "bwd") and in_budget(ok, "2xfwd+bwd")
    assert not in_budget({"pass_out": {"y": True}}, "bwd")  # no dx/dw: not a backward
    assert not in_budget({"pass_out": {"y": True, "rstd": False}}, "fwd")  # an exposed rstd counts


def test_bytes_moved():
    # plain fwd: x in + y out (2 B each) + w + rstd
    assert bytes_moved("fwd", 10, 8, 2) == 10 * 8 * 2 * 2 + 8 * 2 + 10 * 4
    # res bwd: dy, h_new, dh_new in + dh out, w (fp32), rstd, dw
    assert bytes_moved("bwd", 10, 8, 4, "res") == 4 * 10 * 8 * 2 + 8 * 4 + 10 * 4 + 8 * 4
    assert bytes_moved("2xfwd+bwd", 3, 8, 2) == 2 * bytes_moved("fwd", 3, 8, 2) + bytes_moved("bwd", 3, 8, 2)


def test_in_budget_refuses_a_failed_accuracy_run():
    # seed 0 passed, a later seed's accuracy run failed: pass_out covers fewer seeds
    info = {"pass_out": {"y": True, "dx": True, "dw": True}, "acc_error": "seed 1: RuntimeError: x"}
    assert not any(in_budget(info, op) for op in OPS)
    assert not in_budget({"pass_out": {"y": True, "dx": True, "dw": True}, "error": "timing: x"}, "fwd")


def test_round_order_spreads_positions_and_keeps_everyone():
    base = list("abcdefghij")
    orders = [round_order(base, r, 3) for r in range(3)]
    assert all(sorted(o) == base for o in orders)
    assert orders[0] == base and orders[1] != orders[0][::-1]  # rotated, not only reversed
    # 'a' does not sit at the same end in every round
    assert len({o.index("a") for o in orders}) == 3
    assert round_order([], 1, 3) == [] and round_order(["a"], 1, 3) == ["a"]


def test_compiled_peers_get_a_recompile_limit_for_every_row():
    # dynamic=False compiles per shape; TC and TCd share a code object, so
    # dynamo's default limit (8) would turn TC into eager from the 5th row on.
    pytest.importorskip("torch._dynamo")
    make_impls(torch, {"TC", "TCd"}, 1e-6, {})
    cfg = torch._dynamo.config
    limit = getattr(cfg, "recompile_limit", None) or getattr(cfg, "cache_size_limit")
    assert limit >= 1000


def test_op_fn_runs_the_op_it_names():
    """The graph bodies: fwd, bwd from the eager forward's saved tensors, and
    the checkpointed step, whose backward output equals a plain bwd's."""
    case = case_id("res", 96, 17, "bf16", "normal", 1)
    impl = make_impls(torch, {"eager"}, normgate.case_info(case)["eps"], {})["eager"]
    inp = form_inputs(torch, normgate.generate(case, device="cpu"))
    outs, saved = impl[0](inp)
    y = op_fn(impl, "fwd", inp, saved)()[0]["y"]
    assert torch.equal(y, outs["y"])
    dx = op_fn(impl, "bwd", inp, saved)()["dx"]
    step = op_fn(impl, "2xfwd+bwd", inp, saved)()
    assert set(step) == {"dx", "dw"}
    assert torch.equal(step["dx"], dx) and torch.equal(step["dw"], impl[1](inp, saved)["dw"])


class _CountingOracle:
    """An Oracle that records which outputs each validate call was given."""

    def __init__(self, orc):
        self.orc, self.calls = orc, []

    def validate(self, **outs):
        self.calls.append(sorted(outs))
        return self.orc.validate(**outs)


@pytest.mark.parametrize("form", ["plain", "res"])
def test_identical_outputs_are_validated_once_with_the_same_result(form):
    H, T = (64, 33) if form == "plain" else (96, 17)
    case = case_id(form, H, T, "bf16", "normal", 2)
    eps = normgate.case_info(case)["eps"]
    impls = make_impls(torch, {"eager", "F.rms_norm"}, eps, {})
    inp = form_inputs(torch, normgate.generate(case, device="cpu"))
    fwd, bwd = impls["eager"]

    def bumped_dx(inp_, saved):  # eager with dx one BF16 ulp up at one element: must not be reused
        o = bwd(inp_, saved)
        dx = o["dx"].clone()
        flat = dx.view(-1).view(torch.int16)
        flat[3] += 1
        return dict(o, dx=dx)
    with normgate.Oracle(case) as orc:
        plain_infos = {}
        for n, impl in (("eager", impls["eager"]), ("twin", impls["eager"]), ("bumped", (fwd, bumped_dx))):
            plain_infos[n] = {}
            accuracy_into(torch, impl, inp, orc, plain_infos[n])
        counting, seen, infos = _CountingOracle(orc), {}, {}
        for n, impl in (("eager", impls["eager"]), ("twin", impls["eager"]), ("bumped", (fwd, bumped_dx))):
            infos[n] = {}
            accuracy_into(torch, impl, inp, counting, infos[n], seen)
    outs = ["dw", "dx", "rstd", "y"] + (["h_new"] if form == "res" else [])
    # eager: every output; twin: none (all reused, no call); bumped: only its dx.
    assert counting.calls == [sorted(outs), ["dx"]], counting.calls
    assert infos["twin"]["reused"] == len(outs) and infos["bumped"]["reused"] == len(outs) - 1
    for n in infos:  # same verdicts and err/tol with and without the reuse
        for k in ("err_tol", "pass_out", "pass"):
            assert infos[n][k] == plain_infos[n][k], (n, k)


def test_warm_ahead_children_compile_their_rows_side_by_side_and_stale_ones_are_killed():
    """The setup warm-up (WarmAhead): a batch of children, one per
    upcoming row, compiles each row's TC and TCd once (on the GPU when there
    is one; here possibly the CPU); the first row's finish waits for the whole
    batch, the batch's later rows then start warm without waiting; a child
    warming a row the run no longer needs is killed, not waited for."""
    args = parse_args(["--peers", "TC,TCd", "--warm-ahead", "2"])
    lines = []
    w = WarmAhead(args, lines.append)
    assert w.enabled
    a, b, c = (row_spec("plain", 64, t, "bf16") for t in (33, 34, 35))
    w.start([a, b, c])  # at most --warm-ahead children: c is left out
    assert sorted(w.procs) == sorted([a, b]) and w.warm(b) and not w.warm(c)
    w.start([c])  # children running: ignored
    assert c not in w.procs
    ra = w.finish(a, 600)
    assert not w.procs, "the first row's finish waits for the whole batch"
    assert ra is not None and ra["rc"] == 0 and ra["batch"] == [a, b], (ra, lines)
    assert [ln.split()[1] for ln in ra["child"]] == ["TC", "TCd"], ra
    assert all(b in ln for ln in w.ready[b]["child"])  # b's own lines, not a's
    rb = w.finish(b, 600)
    assert rb is not None and rb["rc"] == 0 and rb["waited_s"] < 0.5 and ra["waited_s"] > rb["waited_s"]
    assert w.finish(b, 1) is None  # used once
    w.start([c])
    assert w.finish(row_spec("plain", 64, 36, "bf16"), 600) is None  # another row's child: killed
    assert not w.procs and any("not needed, killed" in ln for ln in lines), lines
    # The memory guard keeps the first row and as many more as fit in half the free memory.
    big = [row_spec("res", 6144, 131072, "fp32")] * 3
    assert row_bytes(big[0]) == 131072 * 6144 * 32
    assert fit_batch(big[:1] + [a], 2 * row_bytes(big[0]) - 1) == big[:1]  # at least one
    assert fit_batch(big + [a], 4 * row_bytes(big[0])) == big[:2]
    assert fit_batch(big + [a], None) == big + [a]
    w.start([a], free_bytes=1 << 40)
    w.finish(None, 0)
    assert not w.procs and not w.ready
    assert not WarmAhead(parse_args(["--peers", "eager,Liger"]), lines.append).enabled
    assert not WarmAhead(parse_args(["--peers", "TC", "--no-warm-next"]), lines.append).enabled
    assert not WarmAhead(parse_args(["--peers", "TC", "--warm-ahead", "0"]), lines.append).enabled
    with pytest.raises(SystemExit) as e:
        parse_args(["--warm-ahead", "-1"])
    assert e.value.code == 2


def test_warm_ahead_child_interrupted_while_waited_for_is_still_killed_at_the_end():
    """A Ctrl-C (or any exception) while finish() waits for a child must not
    drop the child from WarmAhead's bookkeeping: main's finally
    (finish(None, 0)) kills it, so that no child outlives the run."""
    import tempfile

    class _Proc:
        def __init__(self):
            self.killed, self.waits = False, 0

        def wait(self, timeout=None):
            self.waits += 1
            if self.waits == 1:
                raise KeyboardInterrupt
            if not self.killed:
                raise subprocess.TimeoutExpired("warm", timeout)
            return -9

        pid, returncode = None, None  # no process: kill_tree finds nothing under it

        def send_signal(self, sig):
            pass

        def kill(self):
            self.killed = True

    w = WarmAhead(parse_args(["--peers", "TC"]), lambda s: None)
    spec = row_spec("plain", 64, 33, "bf16")
    p = _Proc()
    w.procs[spec] = (p, tempfile.TemporaryFile(mode="w+"))
    with pytest.raises(KeyboardInterrupt):
        w.finish(spec, 600)
    w.finish(None, 0)  # main's finally
    assert p.killed and not w.procs


class _FakeCuda:
    """torch.cuda on the CPU for setup_graphs and Timer.time: pools are
    counted objects; synchronize and event records are logged in order."""

    def __init__(self, calls):
        self.pools, self.calls = 0, calls

    def synchronize(self):
        self.calls.append("sync")

    def empty_cache(self):
        pass

    def memory_reserved(self):
        return 0

    def graph_pool_handle(self):
        self.pools += 1
        return ("pool", self.pools)

    def Event(self, enable_timing=True):  # noqa: N802 - torch's name
        calls = self.calls

        class E:
            def record(self):
                calls.append("event")

            def elapsed_time(self, other):
                return 0.001
        return E()


class _FakeTorch:
    def __init__(self):
        self.calls = []
        self.cuda = _FakeCuda(self.calls)


class _FakeTimer:
    """Timer.impl_pool's rule; capture() runs the op once and fails with a
    CUDA out-of-memory error for the implementations in `big` while the
    pools are private (pool None), as the H200 does once the row's private
    pools outgrow its memory."""

    def __init__(self, torch_, big, big_in_impl_mode=False):
        self.torch, self.pool_mode, self.pool, self.big = torch_, "", None, big
        self.big_in_impl_mode = big_in_impl_mode
        self.current = None
        self.captured = []

    impl_pool = Timer.impl_pool

    def capture(self, fn, pool="row"):
        fn()
        if self.current in self.big and (pool is None or self.big_in_impl_mode):
            raise RuntimeError("CUDA out of memory. Tried to allocate 12.00 GiB")  # torch.OutOfMemoryError's text
        self.captured.append((self.current, pool))
        return object()


def _fake_impls(timer, names):
    def make(n):
        def fwd(inp):
            timer.current = n
            return {"y": 1}, None

        def bwd(inp, saved):
            return {"dx": 1, "dw": 1}
        return fwd, bwd
    return {n: make(n) for n in names}


@pytest.mark.parametrize("still_too_big", [False, True])
def test_a_row_out_of_memory_in_private_pools_is_set_up_again_with_a_pool_per_implementation(still_too_big):
    ft = _FakeTorch()
    timer = _FakeTimer(ft, big={"eager"}, big_in_impl_mode=still_too_big)
    names = ["det", "TC", "eager"]
    impls = _fake_impls(timer, names)
    row = {"impls": {}}
    lines = []
    graphs, keep = setup_row_graphs(ft, impls, names, {}, timer, OPS, row, lines.append)
    assert any("out of GPU memory with a private pool per graph (eager" in s for s in lines), lines
    assert row["pool_mode"] == "impl (private pools ran out of memory at eager)"
    assert timer.pool_mode == ""  # the next row starts with private pools again
    # Second setup: every implementation in its own pool, shared by its ops.
    second = timer.captured[2 * len(OPS):]
    pools = {}
    for n, pool in second:
        assert pool is not None
        pools.setdefault(n, set()).add(pool)
    assert all(len(p) == 1 for p in pools.values()) and len({next(iter(p)) for p in pools.values()}) == len(pools)
    if still_too_big:
        assert is_oom(row["impls"]["eager"]["error"]) and "eager" not in keep
        assert set(pools) == {"det", "TC"} and len(graphs) == 2 * len(OPS)
    else:
        assert row["impls"]["eager"]["error"] is None and set(pools) == set(names)
        assert len(graphs) == len(names) * len(OPS)


def test_a_row_that_fits_keeps_private_pools_and_other_errors_do_not_retry():
    ft = _FakeTorch()
    timer = _FakeTimer(ft, big=set())
    names = ["det", "TC"]
    impls = _fake_impls(timer, names)

    def broken(inp):
        raise ValueError("Liger: unsupported dtype")
    impls["Liger"] = (broken, None)
    row = {"impls": {}}
    graphs, keep = setup_row_graphs(ft, impls, names + ["Liger"], {}, timer, OPS, row, lambda s: None)
    assert row["pool_mode"] == "private"
    assert all(pool is None for _, pool in timer.captured) and len(timer.captured) == 2 * len(OPS)
    assert "unsupported dtype" in row["impls"]["Liger"]["error"] and not is_oom(row["impls"]["Liger"]["error"])


class _SpanTimer:
    """timer.time() with CUPTI: spans of 0.9x the events, or a CUPTI failure
    on the first call."""

    def __init__(self, fail_first):
        self.cupti, self.spans, self.fail_first, self.calls = (lambda cap: []), None, fail_first, 0

    def time(self, g, n):
        self.calls += 1
        if self.cupti is not None and self.fail_first and self.calls == 1:
            raise CuptiError("CUPTI recorded 3 graph executions")
        us = [10.0 + i for i in range(n)]
        self.spans = [0.9 * u for u in us] if self.cupti is not None else None
        return us


def test_cupti_spans_ride_along_and_a_cupti_failure_keeps_the_events():
    t, spans, lines = _SpanTimer(fail_first=False), [], []
    assert cupti_time(t, None, 3, spans, lines.append) == [10.0, 11.0, 12.0]
    assert spans == pytest.approx([9.0, 9.9, 10.8]) and not lines
    t, spans = _SpanTimer(fail_first=True), []
    assert cupti_time(t, None, 3, spans, lines.append) == [10.0, 11.0, 12.0]  # timed again, events only
    assert spans == [] and t.cupti is None and "off for this run" in lines[0] and "3 graph" in t.cupti_off
    row = {"impls": {"ours": {"us": {"fwd": 12.0}, "cupti_us": {"fwd": 10.5}}, "TC": {"us": {"fwd": 11.0}}}}
    assert cupti_lines(row, ["fwd", "bwd"]) == ["  cupti/events us, fwd: ours 10.50/12.00"]


def test_a_cuda_error_in_a_replay_is_not_blamed_on_cupti():
    class Broken(_SpanTimer):
        def time(self, g, n):
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
    t = Broken(fail_first=False)
    with pytest.raises(RuntimeError, match="illegal memory"):
        cupti_time(t, None, 3, [], lambda s: None)
    assert t.cupti is not None  # still on: the implementation failed, not CUPTI


def test_match_spans_takes_exactly_the_replays_of_one_graph():
    recs = [(7, 10 + i, 1000 * i, 1000 * i + 2500) for i in range(3)]
    assert match_spans(recs, 3) == [2.5, 2.5, 2.5]
    for bad, why in ((recs[:2], "2 graph executions"), (recs + [(7, 20, 0, 900)], "4 graph"),
                     (recs[:2] + [(8, 30, 0, 900)], "graphs \\[7, 8\\]"),
                     (recs[:2] + [(7, 30, 0, 0)], "2 timed")):
        with pytest.raises(CuptiError, match=why):
            match_spans(bad, 3)


class _Graph:
    def __init__(self, calls, fail_at=None):
        self.calls, self.fail_at, self.n = calls, fail_at, 0

    def replay(self):
        self.n += 1
        if self.fail_at == self.n:
            raise RuntimeError("CUDA error: unspecified launch failure")
        self.calls.append("replay")


def _timer(ts, cupti):
    t = Timer.__new__(Timer)  # no GPU: only what time() uses
    t.torch, t.cupti, t.spans, t.cupti_off = ts, cupti, None, None
    t.flush = lambda: ts.calls.append("flush")
    return t


def test_timer_without_cupti_issues_the_events_only_sequence():
    ts = _FakeTorch()
    us = _timer(ts, None).time(_Graph(ts.calls), 2)
    assert us == [1.0, 1.0]
    assert ts.calls == ["replay"] + ["flush", "event", "replay", "event"] * 2 + ["sync"]


def test_timer_with_cupti_takes_the_blocks_records_and_blames_cupti_only_for_its_own():
    ts, takes = _FakeTorch(), []

    def take(cap):
        takes.append(len(ts.calls))
        # the first take (before the loop) drops the warm-up's record; the
        # second holds the untimed replay after it (99 us), then the block's
        return [(1, 0, 0, 500)] if len(takes) % 2 == 1 else [(1, 9, 0, 99000)] + [(1, i, 0, 2000) for i in range(1, 3)]
    t = _timer(ts, take)
    assert t.time(_Graph(ts.calls), 2) == [1.0, 1.0] and t.spans == [2.0, 2.0]
    # warm-up, sync, take, the untimed replay that takes the post-take stall, loop, take
    assert ts.calls[:4] == ["replay", "sync", "replay", "flush"] and len(takes) == 2
    assert takes[0] == 2 and ts.calls[2] == "replay"
    for extra in (0, 2):  # a record missing or one too many: the untimed replay is never taken as a sample
        def take_k(cap, extra=extra):
            takes.append(0)
            return [(1, 0, 0, 500)] if len(takes) % 2 == 1 else [(1, i, 0, 2000) for i in range(2 + extra)]
        with pytest.raises(CuptiError, match=f"recorded {1 + extra} graph"):
            _timer(_FakeTorch(), take_k).time(_Graph([]), 2)
    with pytest.raises(RuntimeError, match="launch failure") as e:
        t.time(_Graph(ts.calls, fail_at=3), 2)
    assert not isinstance(e.value, CuptiError)

    def broken(cap):
        raise RuntimeError("ng_graph_spans_take: CUPTI dropped 3 records")
    t = _timer(ts, broken)
    with pytest.raises(CuptiError, match="dropped"):
        t.time(_Graph(ts.calls), 2)
