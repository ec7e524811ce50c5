"""Tests of the Python package normgate (python/normgate) over libnormgate_capi.so.

Run from the repository root after scripts/build:

    PYTHONPATH=python python3 -m pytest python/tests

Needs torch (skipped without it). Tests marked gpu also need a CUDA device
(skipped without one); the others run on the CPU: the generator, the oracle
(fed by an FP64 torch reference), and argument errors.
"""

import os

import pytest

torch = pytest.importorskip("torch")

import normgate  # noqa: E402
from normgate import _lib  # noqa: E402


pytestmark = pytest.mark.skipif(not _lib.loadable(), reason="libnormgate_capi.so not built (" + _lib.library_path() + ")")

gpu = pytest.mark.skipif(not torch.cuda.is_available() or not _lib.loadable() or not normgate.device_available(),
                         reason="no CUDA device (torch and normgate both need one)")


def reference(inp):
    """RMSNorm forward and backward in FP64 on any device, rounded once to the
    output dtypes: within every budget (what an exact kernel returns)."""
    f64 = torch.float64
    res = inp["form"] == "res"
    H = inp["H"]
    x = inp["h"] if res else inp["x"]
    if res:
        hn = (x.to(f64) + inp["u"].to(f64)).to(torch.float32).to(torch.bfloat16)  # exact sum, then rounded
        x = hn
    xr = x.reshape(-1, H).to(f64)
    dy = inp["dy"].reshape(-1, H).to(f64)
    w = inp["w"].to(f64)
    rstd = 1.0 / torch.sqrt((xr * xr).mean(dim=1) + inp["eps"])
    xhat = xr * rstd[:, None]
    y = xhat * w
    g = dy * w
    c = (g * xhat).mean(dim=1)
    dx = rstd[:, None] * (g - xhat * c[:, None])
    if res:
        dx = dx + inp["dh_new"].reshape(-1, H).to(f64)
    dw = (dy * xhat).sum(dim=0)
    out = {"y": y.to(torch.bfloat16), "rstd": rstd.to(torch.float32), "dx": dx.to(torch.bfloat16),
           "dw": dw.to(torch.float32)}
    if res:
        out["h_new"] = hn
    return out


# ---- CPU: generator, oracle, errors ------------------------------------------

def test_import_needs_no_gpu_and_names_the_library():
    assert normgate.version().startswith("normgate ")
    assert os.path.exists(normgate.library_path())
    info = normgate.case_info("seed=3,family=llm,w=fp32,form=heads4,T=7,H=256")
    assert info["case"] == "H=256,T=7,w=fp32,form=heads4,family=llm,seed=3"
    assert (info["T"], info["H"], info["heads"], info["rows"], info["form"], info["w"]) == (7, 256, 4, 28, "heads4", "fp32")
    with pytest.raises(ValueError, match="bf17"):
        normgate.case_info("H=64,T=10,w=bf17,form=plain,family=normal,seed=0")


def test_generate_shapes_dtypes_and_determinism():
    a = normgate.generate("H=256,T=5,w=fp32,form=heads24,family=cancel,seed=1", device="cpu")
    assert a["x"].shape == (5, 24, 256) and a["x"].dtype == torch.bfloat16 and a["x"].is_contiguous()
    assert a["dy"].shape == (5, 24, 256)
    assert a["w"].shape == (256,) and a["w"].dtype == torch.float32
    assert (a["form"], a["T"], a["H"], a["heads"], a["eps"]) == ("heads24", 5, 256, 24, 1e-6)
    b = normgate.generate("H=256,T=5,w=fp32,form=heads24,family=cancel,seed=1", device="cpu")
    assert torch.equal(a["x"].view(torch.int16), b["x"].view(torch.int16))
    c = normgate.generate("H=256,T=5,w=fp32,form=heads24,family=cancel,seed=2", device="cpu")
    assert not torch.equal(a["x"].view(torch.int16), c["x"].view(torch.int16))
    r = normgate.generate("H=64,T=3,w=bf16,form=res,family=normal,seed=0", device="cpu")
    assert set(r) >= {"h", "u", "dy", "dh_new", "w"} and "x" not in r
    assert r["w"].dtype == torch.bfloat16 and r["h"].shape == (3, 64)


@pytest.mark.parametrize("case", [
    "H=96,T=70,w=bf16,form=plain,family=llm,seed=2",
    "H=256,T=9,w=fp32,form=heads24,family=normal,seed=1",
    "H=256,T=11,w=bf16,form=heads4,family=normal,seed=3",
])
def test_oracle_passes_an_exact_reference_and_fails_a_perturbed_dx(case):
    inp = normgate.generate(case, device="cpu")
    out = reference(inp)
    with normgate.Oracle(case) as o:
        rep = o.validate(**out)
        assert rep["pass"] and rep["verdict"] == "pass", rep
        assert rep["absent"] == []
        assert all(rep["outputs"][k]["err_tol"] <= 1 for k in ("y", "rstd", "dx", "dw"))
        # One dx element far off: FAIL at that flat index.
        dx = out["dx"].clone().reshape(-1)
        dx[123] += 64
        rep = o.validate(**{**out, "dx": dx.reshape(out["dx"].shape)})
        assert not rep["pass"] and rep["verdict"] == "fail"
        assert rep["outputs"]["dx"]["worst"] == 123 and not rep["outputs"]["dx"]["pass"]
        # Forward only: backward outputs absent.
        rep = o.validate(y=out["y"], rstd=out["rstd"])
        assert rep["pass"] and rep["absent"] == ["dx", "dw"]
        assert rep["outputs"]["dw"] == {"present": False}
        with pytest.raises(ValueError, match="dw has dtype"):
            o.validate(dw=out["dw"].to(torch.float64))
        with pytest.raises(ValueError, match="no output given"):
            o.validate()


def test_check_runs_an_impl_against_the_oracle():
    rep = normgate.check(reference, "H=64,T=33,w=bf16,form=res,family=llm,seed=5", device="cpu")
    assert rep["pass"], rep
    assert rep["outputs"]["h_new"]["pass"]
    rep = normgate.check(lambda inp: {"dw": reference(inp)["dw"]}, "H=32,T=10,w=fp32,form=plain,family=normal,seed=0",
                         device="cpu")
    assert rep["pass"] and rep["absent"] == ["y", "rstd", "dx"]
    with pytest.raises(ValueError, match="unknown outputs"):
        normgate.check(lambda inp: {"z": inp["x"]}, "H=32,T=10,w=fp32,form=plain,family=normal,seed=0", device="cpu")


@pytest.mark.parametrize("case", [
    "H=96,T=70,w=bf16,form=plain,family=cancel,seed=2",
    "H=64,T=33,w=fp32,form=res,family=llm,seed=5",
])
def test_oracle_over_given_inputs_reports_as_its_own_generation(case):
    inp = normgate.generate(case, device="cpu")
    out = reference(inp)
    dx = out["dx"].clone().reshape(-1)
    dx[7] += 64 + 2 * dx[7].abs()  # far outside atol + rtol|ref| whatever the family
    out["dx"] = dx.reshape(out["dx"].shape)
    with normgate.Oracle(case) as own, normgate.Oracle(case, inputs=inp) as over:
        a, b = own.validate(**out), over.validate(**out)
    assert a == b and not b["outputs"]["dx"]["pass"] and b["outputs"]["y"]["pass"]
    # seconds by part (every part ran for the oracle over given inputs)
    assert set(over.seconds) == {"copy", "open", "validate"}
    assert over.seconds["open"] > 0 and over.seconds["validate"] > 0 and over.seconds["copy"] > 0
    other = normgate.generate(case.replace("seed=", "seed=1"), device="cpu")
    with pytest.raises(ValueError, match=r"is 0x.*the generator gives"):
        normgate.Oracle(case, inputs=other)
    with pytest.raises(ValueError, match="inputs must be the dict"):
        normgate.Oracle(case, inputs=[inp["dy"]])


@pytest.mark.parametrize("case", [
    "H=64,T=0,w=bf16,form=plain,family=normal,seed=0",
    "H=32,T=0,w=fp32,form=res,family=cancel,seed=1",
])
def test_an_empty_case_generates_and_validates(case):
    # T = 0: empty row tensors (address 0 in torch) reach the C ABI as empty,
    # not as missing; the outputs are present and pass, a nonzero dw fails.
    g = normgate.generate(case, device="cpu")
    assert g["dy"].numel() == 0 and g["w"].numel() == g["H"]
    out = {"y": torch.empty(0, dtype=torch.bfloat16), "rstd": torch.empty(0),
           "dx": torch.empty(0, dtype=torch.bfloat16), "dw": torch.zeros(g["H"])}
    if g["form"] == "res":
        out["h_new"] = torch.empty(0, dtype=torch.bfloat16)
    with normgate.Oracle(case, inputs=g) as o:
        r = o.validate(**out)
        assert r["pass"] and r["absent"] == [], r
        out["dw"][1] = 0.5
        assert not o.validate(**out)["outputs"]["dw"]["pass"]


def test_check_validates_against_the_inputs_before_impl_ran():
    case = "H=64,T=20,w=bf16,form=plain,family=normal,seed=4"

    def scribbler(inp):
        out = reference(inp)
        inp["x"].fill_(0)  # an impl writing into its inputs does not move the reference
        return out
    assert normgate.check(scribbler, case, device="cpu")["pass"]


@gpu
@pytest.mark.parametrize("case", [
    "H=2048,T=4097,w=bf16,form=plain,family=cancel,seed=0",
    "H=256,T=9,w=fp32,form=heads24,family=llm,seed=1",
    "H=48,T=21,w=bf16,form=res,family=normal,seed=8",
])
def test_generate_on_the_gpu_equals_the_host_generator(case):
    g, h = normgate.generate(case, device="cuda"), normgate.generate(case, device="cpu")
    for k, t in h.items():
        if isinstance(t, torch.Tensor):
            assert g[k].is_cuda and g[k].dtype == t.dtype and g[k].shape == t.shape, k
            iv = torch.int16 if t.dtype == torch.bfloat16 else torch.int32
            assert torch.equal(g[k].cpu().view(iv), t.view(iv)), k
    with normgate.Oracle(case, inputs=g) as o:  # the GPU's bits pass the oracle's sample check
        assert o.case == h["case"]


def test_argument_errors_name_the_bad_value_without_a_gpu():
    x = torch.zeros((4, 64), dtype=torch.bfloat16)
    w = torch.ones((64,), dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="x is on cpu"):
        normgate.rmsnorm_train_forward(x, w)
    with pytest.raises(ValueError, match="x must be a torch.Tensor"):
        normgate.rmsnorm_train_forward([1, 2], w)
    with pytest.raises(ValueError, match="unknown"):
        normgate.Oracle("H=64,T=10,w=bf16,form=plain,family=normal,seed=0,colour=red")
    with pytest.raises(ValueError, match="negative control"):
        _lib.bwd_workspace_bytes("ctl_fp32_seq", 10, 64)
    # The workspace rule (kernels/src/api.cpp, nondet_replicas.h): FP64 chunk
    # partials [num_chunks, H] for det, and for nondet when its chunks are
    # shorter than 128 rows (10 rows: one chunk, the same bytes as det);
    # 8 FP64 replicas per column when nondet uses atomics (131072 rows of
    # 4096: ~165 rows per chunk).
    det_10 = normgate.bwd_workspace_bytes(10, 64, deterministic=True)
    assert det_10 == 1 * 64 * 8
    assert normgate.bwd_workspace_bytes(10, 64, deterministic=False) == det_10
    assert normgate.bwd_workspace_bytes(131072, 4096, deterministic=False) == 8 * 4096 * 8
    assert normgate.bwd_workspace_bytes(131072, 4096, deterministic=True) > 100 * 4096 * 8


# ---- GPU: the kernels ---------------------------------------------------------

def _kernels(deterministic=True):
    def impl(inp):
        w, eps = inp["w"], inp["eps"]
        x0 = inp["h"] if inp["form"] == "res" else inp["x"]
        msq = torch.empty((x0.numel() // x0.shape[-1],), dtype=torch.float64, device=x0.device)
        if inp["form"] == "res":
            y, rstd, h_new = normgate.rmsnorm_train_forward(inp["h"], w, eps, residual=inp["u"], msq=msq)
            dx, dw = normgate.rmsnorm_train_backward(inp["dy"], h_new, w, rstd, dh_new=inp["dh_new"],
                                                     deterministic=deterministic, msq=msq)
            return {"y": y, "rstd": rstd, "dx": dx, "dw": dw, "h_new": h_new}
        y, rstd = normgate.rmsnorm_train_forward(inp["x"], w, eps, msq=msq)
        dx, dw = normgate.rmsnorm_train_backward(inp["dy"], inp["x"], w, rstd, deterministic=deterministic, msq=msq)
        return {"y": y, "rstd": rstd, "dx": dx, "dw": dw}
    return impl


@gpu
@pytest.mark.parametrize("deterministic", [True, False])
@pytest.mark.parametrize("case", [
    "H=2048,T=515,w=bf16,form=plain,family=cancel,seed=0",
    "H=4096,T=300,w=fp32,form=plain,family=llm,seed=1",
    "H=256,T=300,w=bf16,form=heads24,family=cancel,seed=2",
    "H=256,T=129,w=fp32,form=heads4,family=normal,seed=3",
    "H=6144,T=64,w=bf16,form=res,family=cancel,seed=4",
    "H=2048,T=0,w=bf16,form=plain,family=normal,seed=0",  # empty tensors (address 0) end to end
    "H=1536,T=1,w=fp32,form=res,family=cancel,seed=5",
])
def test_kernels_pass_the_oracle(case, deterministic):
    rep = normgate.check(_kernels(deterministic), case)
    assert rep["pass"], rep


@gpu
def test_strided_heads24_view_runs_without_a_copy(monkeypatch):
    inp = normgate.generate("H=256,T=200,w=bf16,form=heads24,family=llm,seed=7")
    x, dy, w = inp["x"], inp["dy"], inp["w"]
    packed = torch.zeros((200, 40, 256), dtype=torch.bfloat16, device="cuda")  # q, k, v heads of one row
    packed[:, :24] = x
    q = packed[:, :24, :]
    assert not q.is_contiguous() and q.stride() == (40 * 256, 256, 1)
    y_ref, rstd_ref = normgate.rmsnorm_train_forward(x, w)
    dx_ref, dw_ref = normgate.rmsnorm_train_backward(dy, x, w, rstd_ref)

    def no_copy(*a, **k):
        raise AssertionError("normgate copied a tensor")

    monkeypatch.setattr(torch.Tensor, "contiguous", no_copy)
    monkeypatch.setattr(torch.Tensor, "clone", no_copy)
    y, rstd = normgate.rmsnorm_train_forward(q, w)
    dx, dw = normgate.rmsnorm_train_backward(dy, q, w, rstd)
    monkeypatch.undo()
    torch.cuda.synchronize()
    assert torch.equal(y.view(torch.int16), y_ref.view(torch.int16))
    assert torch.equal(rstd, rstd_ref)
    assert torch.equal(dx.view(torch.int16), dx_ref.view(torch.int16))
    assert torch.equal(dw, dw_ref)
    assert torch.equal(packed[:, 24:], torch.zeros_like(packed[:, 24:]))  # nothing outside the view written
    with normgate.Oracle(inp["case"]) as o:
        assert o.validate(y=y, rstd=rstd, dx=dx, dw=dw)["pass"]
    # A view whose last dim is strided is refused, not copied.
    with pytest.raises(ValueError, match="last dim is not contiguous"):
        normgate.rmsnorm_train_forward(torch.zeros((200, 24, 512), dtype=torch.bfloat16, device="cuda")[:, :, ::2], w)


@gpu
def test_expanded_dy_and_preallocated_outputs():
    inp = normgate.generate("H=256,T=64,w=fp32,form=heads4,family=normal,seed=1")
    x, w = inp["x"], inp["w"]
    y, rstd = normgate.rmsnorm_train_forward(x, w)
    row = inp["dy"][0, 0]
    dy_exp = row.expand(64, 4, 256)  # strides (0, 0, 1)
    ws = torch.empty((normgate.bwd_workspace_bytes(64 * 4, 256),), dtype=torch.uint8, device="cuda")
    dx = torch.empty_like(x)
    dw = torch.empty((256,), dtype=torch.float32, device="cuda")
    dx2, dw2 = normgate.rmsnorm_train_backward(dy_exp, x, w, rstd, workspace=ws, dx=dx, dw=dw)
    assert dx2 is dx and dw2 is dw
    dx3, dw3 = normgate.rmsnorm_train_backward(dy_exp.contiguous(), x, w, rstd)
    assert torch.equal(dx.view(torch.int16), dx3.view(torch.int16)) and torch.equal(dw, dw3)
    out = torch.empty_like(x)
    y2, _ = normgate.rmsnorm_train_forward(x, w, out=out)
    assert y2 is out and torch.equal(out.view(torch.int16), y.view(torch.int16))
    with pytest.raises(ValueError, match="workspace has"):
        normgate.rmsnorm_train_backward(dy_exp, x, w, rstd, workspace=ws[:16])


@gpu
def test_nondet_dw_close_to_det():
    inp = normgate.generate("H=4096,T=4097,w=bf16,form=plain,family=llm,seed=3")
    x, dy, w = inp["x"], inp["dy"], inp["w"]
    _, rstd = normgate.rmsnorm_train_forward(x, w)
    dx_d, dw_d = normgate.rmsnorm_train_backward(dy, x, w, rstd, deterministic=True)
    dx_n, dw_n = normgate.rmsnorm_train_backward(dy, x, w, rstd, deterministic=False)
    assert torch.equal(dx_d.view(torch.int16), dx_n.view(torch.int16))  # same row code
    torch.testing.assert_close(dw_n, dw_d, rtol=1e-5, atol=1e-6)
    dx_d2, dw_d2 = normgate.rmsnorm_train_backward(dy, x, w, rstd, deterministic=True)
    assert torch.equal(dw_d, dw_d2)  # bitwise reproducible


@gpu
def test_value_errors_on_bad_dtype_shape_device():
    x = torch.zeros((8, 64), dtype=torch.float32, device="cuda")
    w = torch.ones((64,), dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="x has dtype torch.float32"):
        normgate.rmsnorm_train_forward(x, w)
    xb = x.to(torch.bfloat16)
    with pytest.raises(ValueError, match="w has shape"):
        normgate.rmsnorm_train_forward(xb, w[:32])
    with pytest.raises(ValueError, match="w has dtype"):
        normgate.rmsnorm_train_forward(xb, w.to(torch.float16))
    with pytest.raises(ValueError, match="w is on cpu"):
        normgate.rmsnorm_train_forward(xb, w.cpu())
    with pytest.raises(ValueError, match="per-head tensors"):
        normgate.rmsnorm_train_forward(torch.zeros((2, 8, 256), dtype=torch.bfloat16, device="cuda"), w)
    with pytest.raises(ValueError, match="H = 0|H=0|out of range"):
        normgate.rmsnorm_train_forward(torch.zeros((2, 0), dtype=torch.bfloat16, device="cuda"), w[:0])


@gpu
def test_autograd_rms_norm_matches_the_direct_calls():
    inp = normgate.generate("H=1024,T=256,w=bf16,form=plain,family=llm,seed=9")
    x = inp["x"].clone().requires_grad_(True)
    w = inp["w"].clone().requires_grad_(True)
    y = normgate.rms_norm(x, w, eps=inp["eps"])
    y.backward(inp["dy"])
    _, rstd = normgate.rmsnorm_train_forward(inp["x"], inp["w"], inp["eps"])
    dx, dw = normgate.rmsnorm_train_backward(inp["dy"], inp["x"], inp["w"], rstd)
    assert torch.equal(x.grad.view(torch.int16), dx.view(torch.int16))
    assert w.grad.dtype == torch.bfloat16 and torch.equal(w.grad, dw.to(torch.bfloat16))
    # y.sum() hands autograd an expanded all-stride-0 gradient: made contiguous, documented.
    x.grad = None
    normgate.rms_norm(x, w).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad.float()).all()


def test_default_threads_reads_omp_num_threads_as_libgomp_does(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert normgate.default_threads() == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "8,4")  # a list: the outer level's count
    assert normgate.default_threads() == 8
    monkeypatch.setenv("OMP_NUM_THREADS", "99999999999")
    with pytest.warns(RuntimeWarning, match="above MAX_THREADS"):
        assert normgate.default_threads() == normgate.MAX_THREADS
    monkeypatch.delenv("OMP_NUM_THREADS")
    ncpu = len(os.sched_getaffinity(0))
    assert normgate.default_threads() == ncpu
    for bad in ("two", "0", "\u00b2", "\u0663", ""):  # libgomp ignores these; so do we, loudly
        monkeypatch.setenv("OMP_NUM_THREADS", bad)
        with pytest.warns(RuntimeWarning, match="OMP_NUM_THREADS"):
            assert normgate.default_threads() == ncpu


def test_oracle_threads_default_is_not_torchs_count(monkeypatch):
    # torch's own libgomp.so.1 is the runtime this library gets, and torch
    # lowers its thread count: threads=0 must reach the C ABI as
    # default_threads(), not as 0 ("whatever the runtime was set to").
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    seen = []
    real = _lib.oracle_open_inputs

    def spy(case_id, inputs, threads=0):
        seen.append(threads)
        return real(case_id, inputs, threads)
    monkeypatch.setattr(_lib, "oracle_open_inputs", spy)
    case = "H=96,T=33,w=bf16,form=res,family=cancel,seed=2"
    inp = normgate.generate(case, device="cpu")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with normgate.Oracle(case, inputs=inp):
            pass
    finally:
        torch.set_num_threads(before)
    assert seen == [len(os.sched_getaffinity(0))]
    import numpy as np
    with normgate.Oracle(case, threads=np.int64(2), inputs=inp):
        pass
    assert seen[-1] == 2
    for bad in (-1, normgate.MAX_THREADS + 1, 2.0, True):
        with pytest.raises(ValueError, match=repr(bad) if isinstance(bad, (float, bool)) else str(bad)):
            normgate.Oracle(case, threads=bad, inputs=inp)


def test_oracle_reports_do_not_depend_on_the_thread_count():
    # A perturbed dx, so that the worst element and its err/tol are not
    # trivially zero.
    case = "H=96,T=33,w=bf16,form=res,family=cancel,seed=2"
    inp = normgate.generate(case, device="cpu")
    out = reference(inp)
    out["dx"] = (out["dx"].float() * 1.01).to(torch.bfloat16)
    reps = []
    for t in (1, 3):
        with normgate.Oracle(case, threads=t, inputs=inp) as o:
            reps.append(o.validate(**out))
    assert reps[0]["outputs"]["dx"]["err_tol"] > 0
    assert reps[0] == reps[1]


@gpu
def test_host_copies_of_cuda_tensors_are_pinned_complete_and_exact():
    t = torch.empty(3, 2000, device="cuda", dtype=torch.bfloat16)
    # A long kernel, then the fill on the same stream: a copy that did not
    # wait for the stream would see the fill's bits only by luck.
    torch.cuda._sleep(200_000_000)
    t.fill_(1.5)
    v = t[:, ::2]  # strided view
    h = normgate._host(v)
    assert h.device.type == "cpu" and h.is_pinned() and h.is_contiguous() and h.shape == (3, 1000)
    assert bool((h == 1.5).all())
    e = normgate._host(torch.empty(0, device="cuda", dtype=torch.bfloat16))
    assert e.numel() == 0 and e.device.type == "cpu"
    c = torch.arange(10, dtype=torch.float32)
    assert normgate._host(c).data_ptr() == c.data_ptr()  # contiguous CPU: read in place
    hc = normgate._host(c[::3])
    assert hc.is_contiguous() and torch.equal(hc, c[::3])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error")
def test_generate_and_check_on_a_machine_without_cuda_point_to_the_cpu_path():
    case = "H=64,T=3,w=bf16,form=plain,family=normal,seed=0"
    with pytest.raises(ValueError, match='device=\"cpu\"'):
        normgate.generate(case)
    with pytest.raises(ValueError, match='device=\"cpu\"'):
        normgate.check(lambda g: {}, case)
    rep = normgate.check(lambda g: {"rstd": torch.ones(3)}, case, device="cpu")  # rstd of 1: far off
    assert rep["outputs"]["rstd"]["err_tol"] > 1 and not rep["pass"]


@gpu
def test_cupti_graph_spans_time_each_replay_inside_its_events():
    # The trace goes on BEFORE the graph is captured (a graph instantiated
    # before it crashed the process at its first traced replay on the H200).
    try:
        _lib.graph_spans_start()
    except RuntimeError as e:
        pytest.skip(f"CUPTI unavailable here: {e}")
    try:
        x = torch.ones(64 << 20, device="cuda")  # 256 MB: ~100 us a pass on an H200
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            x.mul_(1.0)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=s):
                x.mul_(1.0)
                x.add_(0.0)
            torch.cuda.synchronize()
            # One replay first: a graph's first launch uploads it, which the
            # events would hold and its span would not; the timed blocks of
            # peers.py follow a warm-up replay too. (The 4 ms events against
            # a 254 us span that the H200 showed were the stall after a take,
            # below: docs/perf/peers.md, D5.)
            g.replay()
            torch.cuda.synchronize()
            _lib.graph_spans_take(1 << 16)  # nothing of the capture or the warm-up replay is kept
            for k in (5, 3):  # two blocks, each its own take
                # The first launch after a take stalls the host 0.7-6 ms
                # inside the launch on the H200 (docs/perf/peers.md, D5), which
                # events around it hold: one untimed replay first.
                g.replay()
                ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(k)]
                for a, b in ev:
                    a.record()
                    g.replay()
                    b.record()
                torch.cuda.synchronize()
                recs = _lib.graph_spans_take(64)
                assert len(recs) == k + 1 and len({r[0] for r in recs}) == 1, recs
                recs = recs[1:]
                assert [r[1] for r in recs] == sorted(r[1] for r in recs)
                for (a, b), (_, _, start, end) in zip(ev, recs):
                    span_us, ev_us = (end - start) / 1e3, a.elapsed_time(b) * 1e3
                    assert 0 < span_us <= ev_us + 2.0, (span_us, ev_us)  # inside the events (2 us: clock granularity)
                    assert span_us > 0.5 * ev_us, (span_us, ev_us)  # two 256 MB passes dwarf a launch
    finally:
        _lib.graph_spans_stop(1 << 16)
    with pytest.raises(RuntimeError, match="not recording"):
        _lib.graph_spans_take(1)


def test_graph_spans_refuse_to_start_under_torch_profiler():
    from torch.profiler import profile
    with profile():
        with pytest.raises(RuntimeError, match="torch.profiler is active"):
            _lib.graph_spans_start()


# ---- which kernel runs (route table and approvals) ----------------------------

@gpu
def test_a_python_call_runs_the_routed_variant(tmp_path):
    """Through tests/data/routes/dispatch.toml (python/tests/test_dispatch.py
    writes its approvals): the backward's variant changes at the window edge
    T = 100 / 101, last_variant() says so for the direct calls, the autograd
    Function (its backward runs on autograd's thread) and the module; a stale
    window raises RouteError before anything runs; a call outside every window
    warns once; variant= overrides."""
    import test_dispatch
    table = test_dispatch.make_table(str(tmp_path))
    normgate.load_routes(table)
    try:
        for T, want in ((100, "bwd_det_chunked"), (101, "bwd_nondet_atomic")):
            inp = normgate.generate("H=64,T=%d,w=bf16,form=plain,family=cancel,seed=1" % T)
            x, dy, w = inp["x"], inp["dy"], inp["w"]
            _, rstd = normgate.rmsnorm_train_forward(x, w)
            f = normgate.last_variant("fwd")
            assert (f["variant"], f["how"], f["approval"], f["window"]) == ("fwd_rowwise", "routed", "current",
                                                                            (1, 700)), f
            dx, dw = normgate.rmsnorm_train_backward(dy, x, w, rstd, deterministic=False)
            b = normgate.last_variant()
            assert (b["variant"], b["how"], b["op"]) == (want, "routed", "bwd"), b
            # The autograd Function and the module run the same routed variant.
            xg = x.clone().requires_grad_(True)
            normgate.rms_norm(xg, w.clone().requires_grad_(True), deterministic=False).backward(dy)
            assert normgate.last_variant("bwd")["variant"] == want
            assert torch.equal(xg.grad.view(torch.int16), dx.view(torch.int16))
            m = normgate.RMSNorm(64, dtype=torch.bfloat16, device="cuda", deterministic=False)
            m(x.clone().requires_grad_(True)).backward(dy)
            assert normgate.last_variant("bwd")["variant"] == want
        # Explicit override: the nondet window runs the det variant when told to.
        inp = normgate.generate("H=64,T=300,w=bf16,form=plain,family=llm,seed=2")
        x, dy, w = inp["x"], inp["dy"], inp["w"]
        _, rstd = normgate.rmsnorm_train_forward(x, w)
        normgate.rmsnorm_train_backward(dy, x, w, rstd, deterministic=False, variant="bwd_det_chunked")
        assert normgate.last_variant()["how"] == "explicit"
        assert normgate.last_variant()["variant"] == "bwd_det_chunked"
        normgate.rms_norm(x.clone().requires_grad_(True), w, deterministic=False,
                          variant={"bwd": "bwd_det_chunked"}).backward(dy)
        assert normgate.last_variant("bwd")["how"] == "explicit"
        assert normgate.last_variant("fwd")["how"] == "routed"
        # A stale window: RouteError naming it, nothing runs.
        w32 = w.float()
        before = normgate.last_variant()
        with pytest.raises(normgate.RouteError, match="window bwd det H=64 w=fp32 form=plain T=1..700"):
            normgate.rmsnorm_train_backward(dy, x, w32, rstd)
        assert normgate.last_variant() is before
        # Outside every window: the fallback runs, with one RouteWarning.
        inp = normgate.generate("H=128,T=7,w=bf16,form=plain,family=llm,seed=3")
        with pytest.warns(normgate.RouteWarning, match="outside every window"):
            normgate.rmsnorm_train_forward(inp["x"], inp["w"])
        assert normgate.last_variant("fwd")["how"] == "fallback"
    finally:
        normgate.load_routes()


@gpu
def test_the_shipping_table_routes_plain_calls_with_current_approvals():
    normgate.load_routes()
    inp = normgate.generate("H=2048,T=4097,w=bf16,form=plain,family=llm,seed=0")
    _, rstd = normgate.rmsnorm_train_forward(inp["x"], inp["w"])
    f = normgate.last_variant("fwd")
    assert (f["how"], f["approval"]) == ("routed", "current"), f
    for det in (True, False):
        normgate.rmsnorm_train_backward(inp["dy"], inp["x"], inp["w"], rstd, deterministic=det)
        b = normgate.last_variant("bwd")
        assert (b["how"], b["approval"]) == ("routed", "current"), b
        assert b["variant"] == normgate.route_for("bwd", 2048, 4097, "bf16", deterministic=det)["variant"]
