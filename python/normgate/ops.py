"""normgate's kernels as PyTorch operators, so that torch.compile traces them.

Importing this module (needs torch; `normgate.RMSNorm`, `normgate.rms_norm`
and `normgate.ops` import it on first use) registers three operators with
torch.library in the namespace "normgate":

  torch.ops.normgate.rms_norm_fwd(x, w, eps, deterministic=True, fwd_variant=None, bwd_variant=None)
      -> (y, rstd, msq)
  torch.ops.normgate.rms_norm_res_fwd(x, residual, w, eps, deterministic=True, fwd_variant=None,
                                      bwd_variant=None)
      -> (y, h_new, rstd, msq)
  torch.ops.normgate.rms_norm_bwd(dy, x, w, rstd, msq, dh_new=None, deterministic=True, variant=None)
      -> (dx, dw)

Tensors (as normgate.rmsnorm_train_forward / _backward take them):
  x, residual, dy, dh_new: CUDA bfloat16 [T, H], or [T, heads, 256] with heads
      24 or 4 (per-head forms; not with residual). Any strides: a layout the
      kernels take (last dim of stride 1, rows of stride >= H for [T, H]) is
      used as it is (the q part of a packed qkv row needs no copy); any other
      is copied to a contiguous tensor first (torch.compile chooses the
      layouts of the gradients, so these operators accept any).
  w: CUDA [H] bfloat16 or float32, contiguous.
  eps: float, added to mean(x^2); the kernels use float32(eps).
  y: bfloat16, x's shape, contiguous. rstd: float32 [T] or [T, heads].
  msq: float64 [T*heads]: each row's mean(x^2) + eps in binary64, which the
      backward uses to refine rstd for dw (normgate.rmsnorm_train_forward).
  h_new (residual form): bfloat16 [T, H] = BF16(x + residual), one rounding;
      y normalizes h_new, and the backward's x is h_new.
  dx: bfloat16, x's shape (with dh_new: dh = BF16(dx + dh_new), the gradient
      reaching both x and residual). dw: float32 [H] whatever w's dtype.
  deterministic, bwd_variant: used only by the backward the forward's
      autograd formula runs (the forward carries them so that autograd can).
  fwd_variant / variant / bwd_variant: None runs the routed variant, a name
      runs that one (an explicit override; normgate.route_for, RouteError,
      last_variant: the package docstring).

Each call runs on torch's current CUDA stream and dispatches through the route
table exactly as rmsnorm_train_forward / _backward do (RouteError for a window
without a current approval, a RouteWarning for a fallback; last_variant()
says what ran). The fake (meta) implementations compute shapes and dtypes
only and never touch the library, so tracing (torch.compile, meta tensors)
needs no GPU and no route table. A CPU tensor is a ValueError naming it.
Autograd: rms_norm_fwd and rms_norm_res_fwd are differentiable in x,
residual and w (rstd and msq are not differentiable); their backward is
rms_norm_bwd, with dw cast to w's dtype.

`rms_norm` is the functional form over [T, H] / [T, heads, 256] rows;
`RMSNorm` is the module, a drop-in for torch.nn.RMSNorm (its docstring).
"""

import numbers
import math
from typing import Optional

import torch

from . import rmsnorm_train_backward, rmsnorm_train_forward, _check_eps, _variant_for

__all__ = ["rms_norm", "RMSNorm", "FORMS", "DEFAULT_EPS"]

FORMS = ("plain", "res", "heads24", "heads4")
_HEADS = {"heads24": 24, "heads4": 4}
HEAD_DIM = 256
MAX_H = 16384  # the kernels' largest row (capi.h)
# What torch.nn.functional.rms_norm adds when eps is None for bfloat16 and
# float32 inputs: the float32 machine epsilon (its C++ uses the epsilon of the
# input's compute type, float for both), not finfo(bfloat16).eps = 2^-7.
DEFAULT_EPS = float(torch.finfo(torch.float32).eps)


# ---- layout and metadata checks (no library, no data) ----------------------

def _rows_of(x):
    return x.shape[0] * (x.shape[1] if x.dim() == 3 else 1)


def _check_meta(x, w, residual=None, residual_name="residual"):
    """The checks a fake can make: dims, dtypes, shapes (ValueError naming the
    tensor). The real implementations check again, with the device."""
    if x.dtype != torch.bfloat16:
        raise ValueError("x has dtype %s; normgate's kernels take bfloat16" % (x.dtype,))
    if x.dim() == 3:
        if x.shape[1] not in (24, 4) or x.shape[2] != HEAD_DIM:
            raise ValueError("x has shape %s; per-head tensors are [T, 24, 256] or [T, 4, 256]"
                             % (tuple(x.shape),))
    elif x.dim() != 2:
        raise ValueError("x has %d dims; expected [T, H] or [T, heads, 256]" % x.dim())
    H = x.shape[-1]
    if not 1 <= H <= MAX_H:
        raise ValueError("x has rows of H = %d; the kernels take 1 <= H <= %d" % (H, MAX_H))
    if w.dim() != 1 or w.shape[0] != H:
        raise ValueError("w has shape %s; expected [%d]" % (tuple(w.shape), H))
    if w.dtype not in (torch.bfloat16, torch.float32):
        raise ValueError("w has dtype %s; expected torch.bfloat16 or torch.float32" % (w.dtype,))
    if residual is not None:
        if x.dim() != 2:
            raise ValueError("%s is given but x has shape %s; the fused residual add is for [T, H] rows"
                             % (residual_name, tuple(x.shape)))
        if tuple(residual.shape) != tuple(x.shape) or residual.dtype != torch.bfloat16:
            raise ValueError("%s has shape %s and dtype %s; expected x's shape %s, torch.bfloat16"
                             % (residual_name, tuple(residual.shape), residual.dtype, tuple(x.shape)))


def _kernel_layout(t):
    """t as it is when the kernels take its layout, else a contiguous copy."""
    if t is None or t.dim() == 0:
        return t
    H = t.shape[-1]
    ok = H <= 1 or t.stride(-1) == 1
    if ok and t.dim() == 2 and t.shape[0] > 1:
        ok = t.stride(0) >= H
    return t if ok else t.contiguous()


def _cpu_error(*tensors):
    for name, t in tensors:
        if isinstance(t, torch.Tensor) and t.device.type != "cuda":
            raise ValueError("%s is on %s; normgate's kernels need a CUDA tensor (a meta tensor traces only)"
                             % (name, t.device))
    raise ValueError("normgate's kernels need CUDA tensors")


# ---- rms_norm_fwd -----------------------------------------------------------

@torch.library.custom_op("normgate::rms_norm_fwd", mutates_args=(), device_types="cuda")
def rms_norm_fwd(x: torch.Tensor, w: torch.Tensor, eps: float, deterministic: bool = True,
                 fwd_variant: Optional[str] = None, bwd_variant: Optional[str] = None
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    msq = torch.empty((_rows_of(x),), dtype=torch.float64, device=x.device)
    y, rstd = rmsnorm_train_forward(_kernel_layout(x), w, eps, msq=msq, variant=fwd_variant)
    return y, rstd, msq


@rms_norm_fwd.register_fake
def _(x, w, eps, deterministic=True, fwd_variant=None, bwd_variant=None):
    _check_meta(x, w)
    rstd_shape = (x.shape[0],) if x.dim() == 2 else (x.shape[0], x.shape[1])
    return (x.new_empty(x.shape, dtype=torch.bfloat16), x.new_empty(rstd_shape, dtype=torch.float32),
            x.new_empty((_rows_of(x),), dtype=torch.float64))


@rms_norm_fwd.register_kernel("cpu")
def _(x, w, eps, deterministic=True, fwd_variant=None, bwd_variant=None):
    _cpu_error(("x", x), ("w", w))


def _fwd_setup(ctx, inputs, output):
    x, w, _eps, deterministic, _fv, bwd_variant = inputs
    _y, rstd, msq = output
    ctx.save_for_backward(x, w, rstd, msq)
    ctx.mark_non_differentiable(rstd, msq)
    ctx.deterministic, ctx.bwd_variant = deterministic, bwd_variant


def _fwd_backward(ctx, dy, _drstd, _dmsq):
    x, w, rstd, msq = ctx.saved_tensors
    dx, dw = rms_norm_bwd(dy, x, w, rstd, msq, None, ctx.deterministic, ctx.bwd_variant)
    return dx, dw.to(w.dtype), None, None, None, None


rms_norm_fwd.register_autograd(_fwd_backward, setup_context=_fwd_setup)


# ---- rms_norm_res_fwd -------------------------------------------------------

@torch.library.custom_op("normgate::rms_norm_res_fwd", mutates_args=(), device_types="cuda")
def rms_norm_res_fwd(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor, eps: float,
                     deterministic: bool = True, fwd_variant: Optional[str] = None,
                     bwd_variant: Optional[str] = None
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    msq = torch.empty((_rows_of(x),), dtype=torch.float64, device=x.device)
    y, rstd, h_new = rmsnorm_train_forward(_kernel_layout(x), w, eps, residual=_kernel_layout(residual),
                                           msq=msq, variant=fwd_variant)
    return y, h_new, rstd, msq


@rms_norm_res_fwd.register_fake
def _(x, residual, w, eps, deterministic=True, fwd_variant=None, bwd_variant=None):
    _check_meta(x, w, residual)
    T = x.shape[0]
    return (x.new_empty(x.shape, dtype=torch.bfloat16), x.new_empty(x.shape, dtype=torch.bfloat16),
            x.new_empty((T,), dtype=torch.float32), x.new_empty((T,), dtype=torch.float64))


@rms_norm_res_fwd.register_kernel("cpu")
def _(x, residual, w, eps, deterministic=True, fwd_variant=None, bwd_variant=None):
    _cpu_error(("x", x), ("residual", residual), ("w", w))


def _res_setup(ctx, inputs, output):
    _x, _res, w, _eps, deterministic, _fv, bwd_variant = inputs
    _y, h_new, rstd, msq = output
    ctx.save_for_backward(h_new, w, rstd, msq)
    ctx.mark_non_differentiable(rstd, msq)
    ctx.deterministic, ctx.bwd_variant = deterministic, bwd_variant


def _res_backward(ctx, dy, dh_new, _drstd, _dmsq):
    h_new, w, rstd, msq = ctx.saved_tensors
    # h_new = x + residual: both receive dh = dx + dh_new (the kernel adds it).
    # An unused h_new gets a zero gradient (autograd materializes it).
    dh, dw = rms_norm_bwd(dy, h_new, w, rstd, msq, dh_new, ctx.deterministic, ctx.bwd_variant)
    return dh, dh, dw.to(w.dtype), None, None, None, None


rms_norm_res_fwd.register_autograd(_res_backward, setup_context=_res_setup)


# ---- rms_norm_bwd -----------------------------------------------------------

@torch.library.custom_op("normgate::rms_norm_bwd", mutates_args=(), device_types="cuda")
def rms_norm_bwd(dy: torch.Tensor, x: torch.Tensor, w: torch.Tensor, rstd: torch.Tensor, msq: torch.Tensor,
                 dh_new: Optional[torch.Tensor] = None, deterministic: bool = True,
                 variant: Optional[str] = None) -> tuple[torch.Tensor, torch.Tensor]:
    return rmsnorm_train_backward(_kernel_layout(dy), _kernel_layout(x), w, rstd, dh_new=_kernel_layout(dh_new),
                                  deterministic=deterministic, msq=msq, variant=variant)


@rms_norm_bwd.register_fake
def _(dy, x, w, rstd, msq, dh_new=None, deterministic=True, variant=None):
    _check_meta(x, w, dh_new, "dh_new")
    if tuple(dy.shape) != tuple(x.shape) or dy.dtype != torch.bfloat16:
        raise ValueError("dy has shape %s and dtype %s; expected x's shape %s, torch.bfloat16"
                         % (tuple(dy.shape), dy.dtype, tuple(x.shape)))
    return x.new_empty(x.shape, dtype=torch.bfloat16), w.new_empty((x.shape[-1],), dtype=torch.float32)


@rms_norm_bwd.register_kernel("cpu")
def _(dy, x, w, rstd, msq, dh_new=None, deterministic=True, variant=None):
    _cpu_error(("dy", dy), ("x", x), ("w", w))


# ---- functional form --------------------------------------------------------

def rms_norm(x, w, eps=1e-6, deterministic=True, variant=None, residual=None):
    """y = x * rstd * w over rows, with autograd, through the operators above.

    x: bfloat16 [T, H] or [T, heads, 256] (heads 24 or 4) on CUDA (meta
    tensors trace). w: [H] bfloat16 or float32. eps: float (default 1e-6), in
    normgate.EPS_MIN..EPS_MAX (the normal float32 numbers), else ValueError.
    deterministic: the backward's mode. variant: None (routed), a variant name
    (used for its own op, the other routed) or {"fwd": name, "bwd": name}; a
    name is looked up in the library when rms_norm is called, so under
    torch.compile pass None or a dict, or use RMSNorm (which looks it up once).
    residual: bfloat16 [T, H] for the fused residual add: returns (y, h_new)
    with h_new = BF16(x + residual) and y its norm; else returns y.
    Gradients: dx bfloat16 (with residual: dh, for x and residual alike), dw
    in w's dtype (the kernel's float32 dw, rounded once for a bfloat16 w).
    """
    eps = _check_eps(eps)  # before tracing: a bad eps is named here, not inside an operator
    fv, bv = _variant_for(variant, "fwd"), _variant_for(variant, "bwd")
    if residual is None:
        return rms_norm_fwd(x, w, eps, bool(deterministic), fv, bv)[0]
    y, h_new, _, _ = rms_norm_res_fwd(x, residual, w, eps, bool(deterministic), fv, bv)
    return y, h_new


# ---- the module -------------------------------------------------------------

class RMSNorm(torch.nn.Module):
    """A drop-in for torch.nn.RMSNorm over normgate's kernels (routed, gated).

    RMSNorm(normalized_shape, eps=None, elementwise_affine=True, device=None,
            dtype=None, deterministic=True, variant=None, form="plain")

    normalized_shape: H, an int or a one-element tuple / list / torch.Size
        (normgate normalizes the last dim only; for the head forms, 256).
    eps: added to mean(x^2). None (as torch): DEFAULT_EPS, the float32
        machine epsilon 1.1920929e-07, which is what torch.nn.RMSNorm adds for
        bfloat16 and float32 inputs (its docs say finfo(x.dtype).eps, but its
        kernel uses the compute type's epsilon; finfo(bfloat16).eps would be
        2^-7). The kernels use float32(eps); eps must be in
        normgate.EPS_MIN..EPS_MAX (the normal float32 numbers), else ValueError.
    elementwise_affine: True: a weight [H] of ones, parameter "weight" (the
        state_dict of torch.nn.RMSNorm, loadable both ways). False: no
        parameter (state_dict empty, as torch's); the kernels get a
        non-persistent buffer of ones.
    device, dtype: of the weight; dtype torch.bfloat16 or torch.float32 (None:
        torch's default dtype, which must be one of them).
    deterministic: the backward's mode (True: bitwise reproducible dx, dw).
    variant: None (routed), a variant name (for its own op, the other routed)
        or {"fwd": name, "bwd": name}: explicit overrides, looked up here once.
    form: "plain": x [..., H], every leading dim flattened into rows.
        "res": forward(x, residual) adds the residual first (fused): returns
        (y, h_new) with h_new = BF16(x + residual) (one rounding; the next
        layer's residual stream) and y = RMSNorm(h_new); gradients reach x
        and residual alike. "heads24" / "heads4": x [..., 24|4, 256], each
        (token, head) row normalized with one shared weight[256]; strided
        views (the q part of a packed qkv row) run without a copy.
    Input: CUDA bfloat16. Inside torch.autocast("cuda", dtype=torch.bfloat16)
    a float32 (or other floating) x and residual are cast to bfloat16 (a
    differentiable cast: their gradients come back in their dtype). Outside
    autocast a non-bfloat16 input is a ValueError (normgate does not cast
    silently); under autocast with another dtype (float16) too: the kernels
    are bfloat16 only. Output: y bfloat16, x's shape; unlike torch's RMSNorm,
    which may return float32 for a float32 weight or under autocast, y is
    always bfloat16. Leading dims are flattened with reshape: a view when
    their strides allow (rows of one stride), else a copy.
    Weight gradient: the kernel's float32 dw, rounded once to the weight's
    dtype. Dispatch: every call runs the routed variant of its exact (H, T
    = rows, weight dtype, form) (RouteError, RouteWarning, last_variant():
    the package docstring). Under torch.compile the module traces into the
    torch.ops.normgate operators with no graph break.
    """

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None, dtype=None,
                 deterministic=True, variant=None, form="plain"):
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral) and not isinstance(normalized_shape, bool):
            shape = (int(normalized_shape),)
        elif isinstance(normalized_shape, (tuple, list, torch.Size)) and len(normalized_shape) == 1 \
                and isinstance(normalized_shape[0], numbers.Integral) and not isinstance(normalized_shape[0], bool):
            shape = (int(normalized_shape[0]),)
        else:
            raise ValueError("normalized_shape must be an int H or a one-element shape (normgate normalizes the "
                             "last dim only), got %r" % (normalized_shape,))
        if not 1 <= shape[0] <= MAX_H:  # the kernels' limit (capi.h): refused here, not at the first call
            raise ValueError("normalized_shape = %d; H must be in 1..%d" % (shape[0], MAX_H))
        if form not in FORMS:
            raise ValueError("form must be one of %s, got %r" % (", ".join(FORMS), form))
        if form in _HEADS and shape[0] != HEAD_DIM:
            raise ValueError("form %s normalizes rows of %d; normalized_shape = %d" % (form, HEAD_DIM, shape[0]))
        if eps is not None:
            _check_eps(eps)  # ValueError naming it: outside normgate.EPS_MIN..EPS_MAX
        if not isinstance(deterministic, bool):
            raise ValueError("deterministic must be True or False, got %r" % (deterministic,))
        wdtype = torch.get_default_dtype() if dtype is None else dtype
        if wdtype not in (torch.bfloat16, torch.float32):
            raise ValueError("dtype %s: normgate's weights are torch.bfloat16 or torch.float32" % (wdtype,))
        self.normalized_shape = shape
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        self.deterministic = deterministic
        self.form = form
        self.variant = variant  # the property below resolves it once
        if elementwise_affine:
            self.weight = torch.nn.Parameter(torch.empty(shape, device=device, dtype=wdtype))
        else:
            self.register_parameter("weight", None)
            self.register_buffer("_ones", torch.empty(shape, device=device, dtype=wdtype), persistent=False)
        self.reset_parameters()

    @property
    def variant(self):
        return self._variant

    @variant.setter
    def variant(self, v):
        self._fwd_variant, self._bwd_variant = _variant_for(v, "fwd"), _variant_for(v, "bwd")
        self._variant = v

    def reset_parameters(self):
        with torch.no_grad():
            (self.weight if self.weight is not None else self._ones).fill_(1.0)

    def _input(self, name, t):
        if not isinstance(t, torch.Tensor):
            raise ValueError("%s must be a torch.Tensor, got %s" % (name, type(t).__name__))
        if t.dtype != torch.bfloat16 and t.device.type == "cuda" and torch.is_autocast_enabled("cuda"):
            if torch.get_autocast_dtype("cuda") != torch.bfloat16:
                raise ValueError("%s has dtype %s under torch.autocast(\"cuda\", dtype=%s); normgate's kernels "
                                 "are bfloat16 only: use dtype=torch.bfloat16"
                                 % (name, t.dtype, torch.get_autocast_dtype("cuda")))
            if t.is_floating_point():
                t = t.to(torch.bfloat16)
        if t.dtype != torch.bfloat16:
            raise ValueError("%s has dtype %s; normgate's kernels take bfloat16: pass %s.bfloat16() or run "
                             "under torch.autocast(\"cuda\", dtype=torch.bfloat16)" % (name, t.dtype, name))
        H = self.normalized_shape[0]
        heads = _HEADS.get(self.form)
        if t.dim() < 1 or t.shape[-1] != H:
            raise ValueError("%s has shape %s; its last dim must be normalized_shape %d"
                             % (name, tuple(t.shape), H))
        if heads is not None and (t.dim() < 2 or t.shape[-2] != heads):
            raise ValueError("%s has shape %s; form %s takes [..., %d, %d]"
                             % (name, tuple(t.shape), self.form, heads, H))
        return t

    def forward(self, x, residual=None):
        """x: [..., H] (form heads24 / heads4: [..., heads, 256]). Returns y
        (x's shape, bfloat16), or (y, h_new) for form "res", which needs
        residual (x's shape)."""
        if residual is not None and self.form != "res":
            raise ValueError("residual is given but form is %r: construct RMSNorm(..., form=\"res\") for the "
                             "fused residual add" % (self.form,))
        if residual is None and self.form == "res":
            raise ValueError("form \"res\" needs forward(x, residual)")
        x = self._input("x", x)
        w = self.weight if self.weight is not None else self._ones
        if w.dtype not in (torch.bfloat16, torch.float32):
            raise ValueError("weight has dtype %s; normgate's weights are torch.bfloat16 or torch.float32"
                             % (w.dtype,))
        eps = DEFAULT_EPS if self.eps is None else float(self.eps)
        H = self.normalized_shape[0]
        shape = x.shape
        if self.form == "res":
            residual = self._input("residual", residual)
            if residual.shape != shape:
                raise ValueError("residual has shape %s; expected x's shape %s"
                                 % (tuple(residual.shape), tuple(shape)))
            y, h_new, _, _ = rms_norm_res_fwd(x.reshape(-1, H), residual.reshape(-1, H), w, eps,
                                              self.deterministic, self._fwd_variant, self._bwd_variant)
            return y.view(shape), h_new.view(shape)
        heads = _HEADS.get(self.form)
        rows = x.reshape(-1, H) if heads is None else x.reshape(-1, heads, H)
        y = rms_norm_fwd(rows, w, eps, self.deterministic, self._fwd_variant, self._bwd_variant)[0]
        return y.view(shape)

    def extra_repr(self):
        s = "{normalized_shape}, eps={eps}, elementwise_affine={elementwise_affine}".format(**self.__dict__)
        s += ", deterministic=%s, form=%r" % (self.deterministic, self.form)
        if self._variant is not None:
            s += ", variant=%r" % (self._variant,)
        return s
