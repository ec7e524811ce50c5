"""normgate's torch.library operators and normgate.RMSNorm (python/normgate/ops.py).

CPU tests (CI): shape and dtype propagation through the fake implementations
on meta tensors, what the module hands the operators (rows, views or copies,
eps, flags), argument errors, state_dict compatibility with torch.nn.RMSNorm,
torch.compile tracing with no graph break, torch.library.opcheck on meta
tensors. GPU tests (skipped without a CUDA device): opcheck on real tensors,
the module against the direct kernel calls (bitwise) and an FP64 reference,
torch.compile(fullgraph=True), autocast, the residual and per-head forms, and
dispatch (routes, RouteError, last_variant) through the operators.

    PYTHONPATH=python NORMGATE_LIB=build/capi/libnormgate_capi.so python3 -m pytest -q python/tests/test_ops.py
"""

import pytest

torch = pytest.importorskip("torch")

import normgate  # noqa: E402
from normgate import _lib  # noqa: E402
from normgate import ops  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

lib = pytest.mark.skipif(not _lib.loadable(), reason="libnormgate_capi.so not built (" + _lib.library_path() + ")")
gpu = pytest.mark.skipif(not torch.cuda.is_available() or not _lib.loadable() or not normgate.device_available(),
                         reason="no CUDA device (torch and normgate both need one)")

BF16, F32 = torch.bfloat16, torch.float32
META = "meta"


class Calls(TorchDispatchMode):
    """Records the normgate operators called (name, args) and runs them."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name
        if name.startswith("normgate::"):
            self.calls.append((name.split("::")[1], args))
        return func(*args, **(kwargs or {}))


def meta(*shape, dtype=BF16, grad=False):
    return torch.empty(shape, dtype=dtype, device=META, requires_grad=grad)


# ---- CPU: shapes through the fakes ------------------------------------------

@pytest.mark.parametrize("wdtype", [BF16, F32])
def test_module_on_meta_keeps_leading_dims_and_returns_bf16_and_w_dtype_grads(wdtype):
    m = normgate.RMSNorm(2048, device=META, dtype=wdtype)
    x = meta(2, 3, 5, 2048, grad=True)
    y = m(x)
    assert (tuple(y.shape), y.dtype) == ((2, 3, 5, 2048), BF16)
    y.float().sum().backward()
    assert (tuple(x.grad.shape), x.grad.dtype) == ((2, 3, 5, 2048), BF16)
    assert (tuple(m.weight.grad.shape), m.weight.grad.dtype) == ((2048,), wdtype)
    # A single row [H] works as in torch.nn.RMSNorm.
    assert tuple(m(meta(2048)).shape) == (2048,)


def test_op_fakes_give_rstd_msq_h_new_and_grad_shapes():
    x, w = meta(7, 2048), meta(2048, dtype=F32)
    y, rstd, msq = torch.ops.normgate.rms_norm_fwd(x, w, 1e-6)
    assert [(tuple(t.shape), t.dtype) for t in (y, rstd, msq)] == [((7, 2048), BF16), ((7,), F32),
                                                                   ((7,), torch.float64)]
    xh = meta(5, 4, 256)
    y, rstd, msq = torch.ops.normgate.rms_norm_fwd(xh, meta(256), 1e-6)
    assert [tuple(t.shape) for t in (y, rstd, msq)] == [(5, 4, 256), (5, 4), (20,)]
    y, h_new, rstd, msq = torch.ops.normgate.rms_norm_res_fwd(x, meta(7, 2048), w, 1e-6)
    assert [tuple(t.shape) for t in (y, h_new, rstd, msq)] == [(7, 2048), (7, 2048), (7,), (7,)]
    assert h_new.dtype == BF16
    dx, dw = torch.ops.normgate.rms_norm_bwd(meta(7, 2048), x, w, rstd, msq, None, False, None)
    assert [(tuple(t.shape), t.dtype) for t in (dx, dw)] == [((7, 2048), BF16), ((2048,), F32)]


def test_fakes_reject_what_the_kernels_reject():
    w = meta(2048)
    with pytest.raises(ValueError, match="x has dtype torch.float32"):
        torch.ops.normgate.rms_norm_fwd(meta(3, 2048, dtype=F32), w, 1e-6)
    with pytest.raises(ValueError, match=r"w has shape \(2048,\); expected \[1024\]"):
        torch.ops.normgate.rms_norm_fwd(meta(3, 1024), w, 1e-6)
    with pytest.raises(ValueError, match="per-head tensors"):
        torch.ops.normgate.rms_norm_fwd(meta(3, 8, 256), meta(256), 1e-6)
    with pytest.raises(ValueError, match="rows of H = 20000; the kernels take 1 <= H <= 16384"):
        torch.ops.normgate.rms_norm_fwd(meta(3, 20000), meta(20000), 1e-6)
    with pytest.raises(ValueError, match="rows of H = 0"):
        torch.ops.normgate.rms_norm_fwd(meta(3, 0), meta(0), 1e-6)
    with pytest.raises(ValueError, match="w has dtype torch.float16"):
        torch.ops.normgate.rms_norm_fwd(meta(3, 2048), meta(2048, dtype=torch.float16), 1e-6)
    with pytest.raises(ValueError, match=r"residual has shape \(3, 1024\)"):
        torch.ops.normgate.rms_norm_res_fwd(meta(3, 2048), meta(3, 1024), w, 1e-6)
    with pytest.raises(ValueError, match="dh_new is given but x has shape"):
        torch.ops.normgate.rms_norm_bwd(meta(3, 4, 256), meta(3, 4, 256), meta(256), meta(3, 4, dtype=F32),
                                        meta(12, dtype=torch.float64), meta(3, 4, 256), True, None)


# ---- CPU: what the module hands the operators --------------------------------

def _fwd_args(m, *inputs):
    with Calls() as c:
        out = m(*inputs)
    assert len(c.calls) == 1, c.calls
    return c.calls[0], out


def test_a_strided_q_view_reaches_the_operator_without_a_copy():
    m = normgate.RMSNorm(256, device=META, form="heads24")
    qkv = meta(2, 5, 32 * 256)
    q = qkv[..., : 24 * 256].view(2, 5, 24, 256)
    (name, args), y = _fwd_args(m, q)
    rows = args[0]
    assert name == "rms_norm_fwd"
    assert tuple(rows.shape) == (10, 24, 256) and rows.stride() == (32 * 256, 256, 1)  # a view of qkv
    assert tuple(y.shape) == (2, 5, 24, 256)
    # Plain rows of a wider buffer: also a view (row stride 8192).
    (_, args), _ = _fwd_args(normgate.RMSNorm(2048, device=META), qkv[..., :2048])
    assert tuple(args[0].shape) == (10, 2048) and args[0].stride() == (8192, 1)


def test_leading_dims_that_are_not_one_stride_are_copied_to_rows():
    m = normgate.RMSNorm(64, device=META)
    x = meta(5, 3, 64).transpose(0, 1)  # [3, 5, 64] with strides (64, 192, 1): no single row stride
    (_, args), y = _fwd_args(m, x)
    assert tuple(args[0].shape) == (15, 64) and args[0].stride() == (64, 1)
    assert tuple(y.shape) == (3, 5, 64)


def test_eps_none_is_what_torch_adds_for_bf16_inputs():
    (_, args), _ = _fwd_args(normgate.RMSNorm(64, device=META), meta(2, 64))
    assert args[2] == ops.DEFAULT_EPS == torch.finfo(torch.float32).eps
    # torch.nn.RMSNorm(eps=None) on bfloat16 rows of tiny values: the float32
    # epsilon, not finfo(bfloat16).eps (which would change these rows a lot).
    g = torch.Generator().manual_seed(0)
    x = (torch.randn((4, 64), generator=g) * 1e-3).to(BF16)
    stock = torch.nn.RMSNorm(64, dtype=BF16)(x)
    assert torch.equal(stock, torch.nn.RMSNorm(64, eps=ops.DEFAULT_EPS, dtype=BF16)(x))
    assert not torch.equal(stock, torch.nn.RMSNorm(64, eps=torch.finfo(BF16).eps, dtype=BF16)(x))
    (_, args), _ = _fwd_args(normgate.RMSNorm(64, eps=1e-5, device=META), meta(2, 64))
    assert args[2] == 1e-5


def test_residual_form_passes_rows_and_returns_y_and_h_new():
    m = normgate.RMSNorm(2048, device=META, form="res", deterministic=False)
    x, r = meta(2, 3, 2048, grad=True), meta(2, 3, 2048, grad=True)
    (name, args), (y, h_new) = _fwd_args(m, x, r)
    assert name == "rms_norm_res_fwd" and tuple(args[0].shape) == tuple(args[1].shape) == (6, 2048)
    assert args[4] is False  # deterministic, carried to the backward
    assert tuple(y.shape) == tuple(h_new.shape) == (2, 3, 2048) and h_new.dtype == BF16
    with Calls() as c:
        (y.float().sum() + h_new.float().sum()).backward()
    (bname, bargs), = c.calls
    assert bname == "rms_norm_bwd" and bargs[5] is not None and bargs[6] is False  # dh_new given, nondet
    assert tuple(x.grad.shape) == tuple(r.grad.shape) == (2, 3, 2048)


@lib
def test_variant_overrides_are_resolved_once_and_reach_both_operators():
    m = normgate.RMSNorm(64, device=META, variant={"fwd": "fwd_rowwise", "bwd": "bwd_det_chunked"})
    x = meta(4, 64, grad=True)
    with Calls() as c:
        m(x).float().sum().backward()
    (f, fargs), (b, bargs) = c.calls
    assert (f, fargs[4], fargs[5]) == ("rms_norm_fwd", "fwd_rowwise", "bwd_det_chunked")
    assert (b, bargs[7]) == ("rms_norm_bwd", "bwd_det_chunked")
    m.variant = "bwd_nondet_atomic"  # a backward name: the forward stays routed
    assert (m._fwd_variant, m._bwd_variant) == (None, "bwd_nondet_atomic")
    with pytest.raises(ValueError):
        normgate.RMSNorm(64, device=META, variant="no_such_variant")
    # A dict is checked whole at construction: names, and each for its own op.
    with pytest.raises(ValueError, match=r"variant\['fwd'\] must be a variant name or None, got 5"):
        normgate.RMSNorm(64, device=META, variant={"fwd": 5})
    with pytest.raises(ValueError, match=r"variant\['fwd'\] = 'bwd_det_chunked' is a bwd variant"):
        normgate.RMSNorm(64, device=META, variant={"fwd": "bwd_det_chunked"})
    with pytest.raises(ValueError, match=r"variant\['bwd'\] = 'fwd_rowwise' is a fwd variant"):
        normgate.RMSNorm(64, device=META, variant={"bwd": "fwd_rowwise"})
    with pytest.raises(ValueError, match="no_such"):
        normgate.RMSNorm(64, device=META, variant={"bwd": "no_such"})


# ---- CPU: argument errors -----------------------------------------------------

@pytest.mark.parametrize("kwargs,match", [
    (dict(normalized_shape=(4, 64)), r"normalized_shape must be an int H or a one-element shape.*\(4, 64\)"),
    (dict(normalized_shape=0), "normalized_shape = 0"),
    # The kernels' limit (capi.h: H 1..16384): refused at construction, not at the first call.
    (dict(normalized_shape=16385), r"normalized_shape = 16385; H must be in 1\.\.16384"),
    (dict(normalized_shape=[2 ** 40]), r"normalized_shape = 1099511627776; H must be in 1\.\.16384"),
    (dict(normalized_shape=True), "normalized_shape must be"),
    (dict(normalized_shape=64, form="heads8"), "form must be one of plain, res, heads24, heads4, got 'heads8'"),
    (dict(normalized_shape=128, form="heads4"), "form heads4 normalizes rows of 256; normalized_shape = 128"),
    (dict(normalized_shape=64, eps=-1e-6), r"eps = -1e-06 is outside 1.1754943508222875e-38\.\.3.40"),
    (dict(normalized_shape=64, eps=float("nan")), r"eps = nan is outside"),
    (dict(normalized_shape=64, eps=1e-50), r"eps = 1e-50 is outside .*float32\(eps\) \(0 there\)"),
    (dict(normalized_shape=64, eps=1e-45), r"eps = 1e-45 is outside .*\(a subnormal 1.401298464324817e-45 there\)"),
    (dict(normalized_shape=64, eps="1e-6"), r"eps must be a float, got '1e-6'"),
    (dict(normalized_shape=64, dtype=torch.float16), "dtype torch.float16: normgate's weights"),
    (dict(normalized_shape=64, deterministic=1), "deterministic must be True or False, got 1"),
])
def test_constructor_errors_name_the_value(kwargs, match):
    with pytest.raises(ValueError, match=match):
        normgate.RMSNorm(device=META, **kwargs)


def test_the_largest_h_is_accepted():
    assert normgate.RMSNorm(16384, device=META).normalized_shape == (16384,)


def test_forward_errors_name_the_value_before_any_work():
    m = normgate.RMSNorm(64, device=META)
    with pytest.raises(ValueError, match=r"x has dtype torch.float32; normgate's kernels take bfloat16: pass "
                                         r"x.bfloat16\(\) or run under torch.autocast"):
        m(meta(2, 64, dtype=F32))
    with pytest.raises(ValueError, match=r"x has shape \(2, 32\); its last dim must be normalized_shape 64"):
        m(meta(2, 32))
    with pytest.raises(ValueError, match="residual is given but form is 'plain'"):
        m(meta(2, 64), meta(2, 64))
    with pytest.raises(ValueError, match="x must be a torch.Tensor, got list"):
        m([1.0] * 64)
    mr = normgate.RMSNorm(64, device=META, form="res")
    with pytest.raises(ValueError, match=r"form \"res\" needs forward\(x, residual\)"):
        mr(meta(2, 64))
    with pytest.raises(ValueError, match=r"residual has shape \(3, 64\); expected x's shape \(2, 64\)"):
        mr(meta(2, 64), meta(3, 64))
    mh = normgate.RMSNorm(256, device=META, form="heads24")
    with pytest.raises(ValueError, match=r"x has shape \(2, 4, 256\); form heads24 takes \[..., 24, 256\]"):
        mh(meta(2, 4, 256))
    m16 = normgate.RMSNorm(64, device=META).half()
    with pytest.raises(ValueError, match="weight has dtype torch.float16"):
        m16(meta(2, 64))


def test_cpu_tensors_are_refused_naming_the_tensor():
    m = normgate.RMSNorm(64)
    with pytest.raises(ValueError, match="x is on cpu; normgate's kernels need a CUDA tensor"):
        m(torch.zeros((2, 64), dtype=BF16))
    with pytest.raises(ValueError, match="dy is on cpu"):
        torch.ops.normgate.rms_norm_bwd(torch.zeros((2, 64), dtype=BF16), torch.zeros((2, 64), dtype=BF16),
                                        torch.ones(64), torch.ones(2), torch.ones(2, dtype=torch.float64))


def test_autocast_on_the_cpu_does_not_cast():
    # Only CUDA autocast casts (the kernels run on CUDA); CPU autocast leaves x alone.
    m = normgate.RMSNorm(64, device=META)
    with torch.autocast("cpu", dtype=BF16):
        with pytest.raises(ValueError, match="x has dtype torch.float32"):
            m(meta(2, 64, dtype=F32))


# ---- CPU: state_dict ----------------------------------------------------------

def test_state_dict_round_trips_with_torch_rmsnorm():
    g = torch.Generator().manual_seed(3)
    stock = torch.nn.RMSNorm(64, eps=1e-5)
    with torch.no_grad():
        stock.weight.copy_(torch.randn(64, generator=g))
    ours = normgate.RMSNorm(64, eps=1e-5)
    ours.load_state_dict(stock.state_dict())
    assert torch.equal(ours.weight, stock.weight) and not torch.equal(ours.weight, torch.ones(64))
    assert (ours.normalized_shape, ours.eps, ours.elementwise_affine) == (stock.normalized_shape, stock.eps, True)
    back = torch.nn.RMSNorm([64])
    back.load_state_dict(ours.state_dict())
    assert torch.equal(back.weight, stock.weight)
    # Without a weight: both state_dicts are empty and load strictly into each other.
    na = normgate.RMSNorm(64, elementwise_affine=False)
    assert dict(na.state_dict()) == {} and na.weight is None
    na.load_state_dict(torch.nn.RMSNorm(64, elementwise_affine=False).state_dict())
    torch.nn.RMSNorm(64, elementwise_affine=False).load_state_dict(na.state_dict())
    # A bf16 module takes fp32 weights (load_state_dict copies into its dtype).
    b = normgate.RMSNorm(64, dtype=BF16)
    b.load_state_dict(stock.state_dict())
    assert b.weight.dtype == BF16 and torch.equal(b.weight, stock.weight.to(BF16))
    assert "form='plain'" in repr(b) and "eps=1e-05" in repr(ours)


# ---- CPU: tracing ---------------------------------------------------------------

def _explain(fn, *args):
    import torch._dynamo
    torch._dynamo.reset()
    return torch._dynamo.explain(fn)(*args)


@pytest.mark.parametrize("form", ["plain", "res", "heads4"])
def test_dynamo_traces_the_module_with_no_graph_break(form):
    H = 256 if form == "heads4" else 512
    m = normgate.RMSNorm(H, device=META, form=form, dtype=BF16)
    x = meta(2, 3, 4, 256) if form == "heads4" else meta(2, 3, H)
    args = (x, meta(2, 3, H)) if form == "res" else (x,)
    e = _explain(m, *args)
    assert (e.graph_break_count, e.graph_count) == (0, 1), e.break_reasons
    ops_in_graph = [n.target for g in e.graphs for n in g.graph.nodes if n.op == "call_function"]
    want = torch.ops.normgate.rms_norm_res_fwd.default if form == "res" else torch.ops.normgate.rms_norm_fwd.default
    assert want in ops_in_graph


def test_compiled_training_step_on_meta_runs_fwd_and_bwd_operators():
    import torch._dynamo
    torch._dynamo.reset()
    lin = torch.nn.Linear(64, 64, device=META, dtype=BF16)
    norm = normgate.RMSNorm(64, device=META, dtype=F32)

    def step(x):
        return norm(lin(x)).float().sum()

    c = torch.compile(step, fullgraph=True, backend="aot_eager")
    x = meta(3, 64, grad=True)
    with Calls() as calls:
        c(x).backward()
    assert [name for name, _ in calls.calls] == ["rms_norm_fwd", "rms_norm_bwd"]
    assert norm.weight.grad.dtype == F32 and tuple(x.grad.shape) == (3, 64)


@pytest.mark.parametrize("op,args", [
    ("rms_norm_fwd", lambda: (meta(6, 512), meta(512, dtype=F32), 1e-6, True, None, None)),
    ("rms_norm_fwd", lambda: (meta(20, 32 * 256)[:, :24 * 256].view(20, 24, 256), meta(256), 1e-6)),
    ("rms_norm_res_fwd", lambda: (meta(6, 512), meta(6, 512), meta(512), 1e-6, False, None, None)),
    ("rms_norm_bwd", lambda: (meta(6, 512), meta(6, 512), meta(512), meta(6, dtype=F32),
                              meta(6, dtype=torch.float64), None, True, None)),
])
def test_opcheck_on_meta(op, args):
    # The registrations (schema, autograd, fake, AOT dispatch); the GPU test
    # below repeats it on real tensors.
    torch.library.opcheck(getattr(torch.ops.normgate, op), args())


# ---- GPU ---------------------------------------------------------------------

def _reference(x, w, eps, dy):
    """FP64 RMSNorm over the last dim and its gradients (dx, dw)."""
    xd, wd, dyd = x.double(), w.double(), dy.double()
    rstd = torch.rsqrt((xd * xd).mean(-1, keepdim=True) + eps)
    xhat = xd * rstd
    g = dyd * wd
    dx = rstd * (g - xhat * (g * xhat).mean(-1, keepdim=True))
    dw = (dyd * xhat).reshape(-1, x.shape[-1]).sum(0)
    return xhat * wd, dx, dw


def _within(got, ref, atol, rtol):
    err = (got.double() - ref).abs()
    tol = atol + rtol * ref.abs()
    return float((err / tol).max())


def _data(*shape, seed=0, dtype=BF16):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(shape, generator=g, device="cuda").to(dtype)


@gpu
@pytest.mark.parametrize("op,make", [
    ("rms_norm_fwd", lambda: (_data(64, 2048, seed=1).requires_grad_(), _data(2048, seed=2, dtype=F32)
                              .requires_grad_(), 1e-6, True, None, None)),
    ("rms_norm_fwd", lambda: (_data(16, 32 * 256, seed=3)[:, :24 * 256].view(16, 24, 256).requires_grad_(),
                              _data(256, seed=4).requires_grad_(), 1e-6, False, None, None)),
    ("rms_norm_res_fwd", lambda: (_data(8, 6144, seed=5).requires_grad_(), _data(8, 6144, seed=6).requires_grad_(),
                                  _data(6144, seed=7).requires_grad_(), 1e-6, True, None, None)),
])
def test_opcheck_on_cuda(op, make):
    torch.library.opcheck(getattr(torch.ops.normgate, op), make())


@gpu
@pytest.mark.parametrize("wdtype", [BF16, F32])
def test_module_equals_the_direct_calls_and_the_fp64_reference(wdtype):
    B, S, H = 4, 32, 2048
    x = _data(B, S, H, seed=10).requires_grad_()
    dy = _data(B, S, H, seed=11)
    m = normgate.RMSNorm(H, eps=1e-6, device="cuda", dtype=wdtype)
    with torch.no_grad():
        m.weight.copy_(1 + 0.1 * _data(H, seed=12, dtype=F32))
    y = m(x)
    y.backward(dy)
    assert normgate.last_variant("bwd")["op"] == "bwd"
    # Bitwise the direct kernel calls on the rows (the same routed variants).
    x2, w = x.detach().reshape(-1, H), m.weight.detach()
    msq = torch.empty((B * S,), dtype=torch.float64, device="cuda")
    y2, rstd = normgate.rmsnorm_train_forward(x2, w, 1e-6, msq=msq)
    dx2, dw2 = normgate.rmsnorm_train_backward(dy.reshape(-1, H), x2, w, rstd, msq=msq)
    assert torch.equal(y.detach().reshape(-1, H).view(torch.int16), y2.view(torch.int16))
    assert torch.equal(x.grad.reshape(-1, H).view(torch.int16), dx2.view(torch.int16))
    assert m.weight.grad.dtype == wdtype and torch.equal(m.weight.grad, dw2.to(wdtype))
    # And within normgate's budgets of an FP64 reference on the same inputs.
    ry, rdx, rdw = _reference(x.detach(), w, 1e-6, dy)
    assert _within(y.detach(), ry, 1e-2, 1e-2) <= 1
    assert _within(x.grad, rdx, 1e-2, 1e-2) <= 1
    assert _within(dw2, rdw, 1e-4, 1e-4) <= 1


@gpu
def test_torch_compile_fullgraph_matches_eager_bitwise():
    import torch._dynamo
    torch._dynamo.reset()
    H = 2048
    block = torch.nn.Sequential(torch.nn.Linear(H, H, bias=False, device="cuda", dtype=BF16),
                                normgate.RMSNorm(H, device="cuda", dtype=BF16)).cuda()
    x = _data(2, 16, H, seed=20)
    e = _explain(block, x)
    assert e.graph_break_count == 0, e.break_reasons
    torch._dynamo.reset()
    compiled = torch.compile(block, fullgraph=True)
    norm_only = torch.compile(block[1], fullgraph=True)
    h = block[0](x).detach()
    hc, he = h.clone().requires_grad_(), h.clone().requires_grad_()
    yc, ye = norm_only(hc), block[1](he)
    assert torch.equal(yc.view(torch.int16), ye.view(torch.int16))  # the same kernels on the same rows
    dy = _data(2, 16, H, seed=21)
    block[1].weight.grad = None
    yc.backward(dy)
    gc = block[1].weight.grad.clone()
    block[1].weight.grad = None
    ye.backward(dy)
    assert torch.equal(hc.grad.view(torch.int16), he.grad.view(torch.int16))
    assert torch.equal(gc, block[1].weight.grad)
    loss = compiled(x).float().square().mean()
    loss.backward()
    assert torch.isfinite(loss) and block[0].weight.grad is not None


@gpu
def test_autocast_casts_float32_inputs_to_bf16():
    H = 2048
    m = normgate.RMSNorm(H, device="cuda")  # float32 weight
    x = torch.randn((3, 5, H), device="cuda", requires_grad=True)
    with torch.autocast("cuda", dtype=BF16):
        y = m(x)
    want = m(x.detach().to(BF16))
    assert y.dtype == BF16 and torch.equal(y.view(torch.int16), want.view(torch.int16))
    y.float().sum().backward()
    assert x.grad.dtype == F32 and m.weight.grad.dtype == F32
    with torch.autocast("cuda", dtype=torch.float16):
        with pytest.raises(ValueError, match="normgate's kernels are bfloat16 only"):
            m(x)
    with pytest.raises(ValueError, match="x has dtype torch.float32"):
        m(x)


@gpu
def test_residual_form_h_new_and_gradients():
    H = 6144
    x, r = _data(2, 4, H, seed=30).requires_grad_(), _data(2, 4, H, seed=31).requires_grad_()
    m = normgate.RMSNorm(H, eps=1e-6, form="res", device="cuda", dtype=BF16)
    y, h_new = m(x, r)
    want_h = (x.detach().double() + r.detach().double()).float().to(BF16)
    assert torch.equal(h_new.view(torch.int16), want_h.view(torch.int16))
    assert normgate.last_variant("fwd")["variant"] is not None
    dy, dh_new = _data(2, 4, H, seed=32), _data(2, 4, H, seed=33)
    torch.autograd.backward([y, h_new], [dy, dh_new])
    # The direct calls the operators make: the res forward, then the backward on h_new.
    msq = torch.empty((8,), dtype=torch.float64, device="cuda")
    _, rstd, rows = normgate.rmsnorm_train_forward(x.detach().reshape(-1, H), m.weight.detach(), 1e-6,
                                                   residual=r.detach().reshape(-1, H), msq=msq)
    assert torch.equal(rows.view(torch.int16), h_new.detach().reshape(-1, H).view(torch.int16))
    dh, dw = normgate.rmsnorm_train_backward(dy.reshape(-1, H), rows, m.weight.detach(), rstd,
                                             dh_new=dh_new.reshape(-1, H), msq=msq)
    assert torch.equal(x.grad.reshape(-1, H).view(torch.int16), dh.view(torch.int16))
    assert torch.equal(r.grad, x.grad)
    assert torch.equal(m.weight.grad, dw.to(BF16))
    # An unused h_new: its gradient is zero, dh = dx.
    x.grad = r.grad = None
    y, _ = m(x, r)
    y.backward(dy)
    _, rdx, _ = _reference(want_h, m.weight.detach(), 1e-6, dy)
    assert _within(x.grad, rdx, 1e-2, 1e-2) <= 1


@gpu
@pytest.mark.parametrize("heads", [24, 4])
def test_per_head_forms_on_a_strided_qkv_view(heads):
    T, n = 64, heads + 8
    qkv = _data(2, T // 2, n * 256, seed=40 + heads)
    q = qkv[..., : heads * 256].view(2, T // 2, heads, 256).detach().requires_grad_()
    m = normgate.RMSNorm(256, eps=1e-6, form="heads%d" % heads, device="cuda", dtype=F32)
    y = m(q)
    assert normgate.last_variant("fwd")["variant"] is not None
    dy = _data(2, T // 2, heads, 256, seed=50)
    y.backward(dy)
    ry, rdx, rdw = _reference(q.detach(), m.weight.detach(), 1e-6, dy)
    assert _within(y.detach(), ry, 1e-2, 1e-2) <= 1
    assert _within(q.grad, rdx, 1e-2, 1e-2) <= 1
    assert m.weight.grad.dtype == F32 and _within(m.weight.grad, rdw, 1e-4, 1e-4) <= 1
    e = _explain(m, q.detach())
    assert e.graph_break_count == 0, e.break_reasons


@gpu
def test_dispatch_through_the_operators(tmp_path):
    import test_dispatch
    normgate.load_routes(test_dispatch.make_table(str(tmp_path)))
    try:
        x = _data(300, 64, seed=60).requires_grad_()
        m = normgate.RMSNorm(64, device="cuda", dtype=BF16, deterministic=False)
        m(x).float().sum().backward()
        f, b = normgate.last_variant("fwd"), normgate.last_variant("bwd")
        assert (f["variant"], f["how"]) == ("fwd_rowwise", "routed")
        assert (b["variant"], b["how"]) == ("bwd_nondet_atomic", "routed")
        # The det fp32 window is stale: RouteError from inside the operator, unchanged.
        m32 = normgate.RMSNorm(64, device="cuda", dtype=F32)
        with pytest.warns(normgate.RouteWarning, match="outside every window"):  # no fwd fp32 route
            y = m32(x)
        assert normgate.last_variant("fwd")["how"] == "fallback"
        with pytest.raises(normgate.RouteError, match="window bwd det H=64 w=fp32 form=plain T=1..700"):
            y.float().sum().backward()
        # An explicit override runs it.
        m32.variant = {"bwd": "bwd_det_chunked"}
        m32(x).float().sum().backward()
        assert (normgate.last_variant("bwd")["how"], normgate.last_variant("bwd")["variant"]) == \
            ("explicit", "bwd_det_chunked")
    finally:
        normgate.load_routes()


# ---- tools/llama_compile.py, dry run (CPU) ---------------------------------------

def test_llama_compile_dry_run_traces_the_normgate_models_with_no_graph_break(tmp_path):
    import importlib.util
    import json
    import os
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "llama_compile.py")
    spec = importlib.util.spec_from_file_location("llama_compile", path)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    with pytest.raises(SystemExit) as e:
        tool.parse_args(["--modes", "fp16"])
    assert e.value.code == 2
    assert tool.main(["--dry-run", "--out", str(tmp_path)]) == 0
    s = json.loads((tmp_path / "llama_compile.json").read_text())
    assert s["norms"] == 5 and s["verdict"].startswith("PASS")  # 2 layers x 2 + the final norm
    runs = {r["model"]: r for r in s["runs"]}
    assert (runs["normgate"]["graph_breaks"], runs["normgate-res"]["graph_breaks"]) == (0, 0)
    assert runs["normgate"]["graphs"] == 1 and 0 < runs["stock"]["loss"] < 10
    assert "| bf16 | normgate | 0 | 1 |" in (tmp_path / "llama_compile.md").read_text()
