"""The implementations a row times and validates, over a case's inputs in
every form: normgate (det, ours and their A/A copies) and each peer (eager,
TC, TCd, F.rms_norm, Liger, Q: the package docstring says what each is);
the timed layout of the inputs; the callable that one op's graph captures."""
from __future__ import annotations

def make_impls(torch, names, eps, errors, device="cuda"):
    """name -> (fwd, bwd) over a case's inputs `inp` (normgate.generate's dict,
    x possibly a strided view):
        fwd(inp)        -> (outs, saved)  outs: y, rstd (None if not exposed), h_new (res)
        bwd(inp, saved) -> outs           outs: dx (form res: dh = dx + dh_new), dw
    Every form: plain [T, H]; heads24/heads4 [T, nh, 256] (rows of 256, one w
    shared by all heads, dw summed over T and heads); res (h_new = h + u in
    BF16, then the norm; backward dh = dx + dh_new). Peers get the form the way
    a user would write it: torch math on the [..., H] tensor, and for res a
    torch add around the peer's norm (torch.compile fuses its own adds)."""
    F = torch.nn.functional
    impls = {}

    def ng(deterministic):
        import normgate

        def fwd(inp):
            x0 = inp["h"] if inp["form"] == "res" else inp["x"]
            msq = torch.empty((x0.numel() // x0.shape[-1],), dtype=torch.float64, device=x0.device)
            if inp["form"] == "res":
                y, rstd, h_new = normgate.rmsnorm_train_forward(inp["h"], inp["w"], eps, residual=inp["u"], msq=msq)
                return {"y": y, "rstd": rstd, "h_new": h_new}, (h_new, rstd, msq)
            y, rstd = normgate.rmsnorm_train_forward(inp["x"], inp["w"], eps, msq=msq)
            return {"y": y, "rstd": rstd}, (inp["x"], rstd, msq)

        def bwd(inp, saved):
            xs, rstd, msq = saved
            dx, dw = normgate.rmsnorm_train_backward(inp["dy"], xs, inp["w"], rstd, dh_new=inp.get("dh_new"),
                                                     deterministic=deterministic, msq=msq)
            return {"dx": dx, "dw": dw}

        return fwd, bwd

    impls["det"] = ng(True)
    impls["det#2"] = ng(True)
    impls["ours"] = ng(False)
    impls["ours#2"] = ng(False)

    # The explicit FP32-statistics math (eager, TC, TCd), on [..., H].
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
        dw = (dy.float() * xhat).sum(dim=tuple(range(x.dim() - 1)))
        return dx, dw

    def ref_fwd_res(h, u, w):
        h_new = (h.float() + u.float()).to(torch.bfloat16)
        y, rstd = ref_fwd(h_new, w)
        return y, rstd, h_new

    def ref_bwd_res(dy, dh_new, h_new, w, rstd):
        r = rstd.unsqueeze(-1)
        xhat = h_new.float() * r
        g = dy.float() * w.float()
        c = (g * xhat).mean(-1, keepdim=True)
        dh = ((g - xhat * c) * r + dh_new.float()).to(torch.bfloat16)
        dw = (dy.float() * xhat).sum(dim=tuple(range(h_new.dim() - 1)))
        return dh, dw

    def math_impl(f_fwd, f_bwd, f_fwd_res, f_bwd_res):
        def fwd(inp):
            if inp["form"] == "res":
                y, rstd, h_new = f_fwd_res(inp["h"], inp["u"], inp["w"])
                return {"y": y, "rstd": rstd, "h_new": h_new}, (h_new, rstd)
            y, rstd = f_fwd(inp["x"], inp["w"])
            return {"y": y, "rstd": rstd}, (inp["x"], rstd)

        def bwd(inp, saved):
            xs, rstd = saved
            if inp["form"] == "res":
                dx, dw = f_bwd_res(inp["dy"], inp["dh_new"], xs, inp["w"], rstd)
            else:
                dx, dw = f_bwd(inp["dy"], xs, inp["w"], rstd)
            return {"dx": dx, "dw": dw}

        return fwd, bwd

    def core_impl(c_fwd, c_bwd):
        """A peer's norm on [..., H] (c_fwd(x, w) -> (y, rstd|None, saved);
        c_bwd(dy, x, w, saved) -> (dx, dw)) lifted to every form; res adds
        with torch around it (as a user of the peer would)."""
        def fwd(inp):
            if inp["form"] == "res":
                h_new = inp["h"] + inp["u"]
                y, rstd, sv = c_fwd(h_new, inp["w"])
                return {"y": y, "rstd": rstd, "h_new": h_new}, (h_new, sv)
            y, rstd, sv = c_fwd(inp["x"], inp["w"])
            return {"y": y, "rstd": rstd}, (inp["x"], sv)

        def bwd(inp, saved):
            xs, sv = saved
            dx, dw = c_bwd(inp["dy"], xs, inp["w"], sv)
            if inp["form"] == "res":
                dx = dx + inp["dh_new"]
            return {"dx": dx, "dw": dw}

        return fwd, bwd

    if "eager" in names:
        impls["eager"] = math_impl(ref_fwd, ref_bwd, ref_fwd_res, ref_bwd_res)
    if "TC" in names or "TCd" in names:
        import torch._inductor.config as icfg

        icfg.emulate_precision_casts = True
        # dynamic=False compiles once per (shape, w dtype, layout), and TC and
        # TCd share each function's code object: past dynamo's recompile limit
        # (8 per code object: the 5th row) the function would silently run
        # EAGER under the name TC. Raise the limits, and fail loudly if hit.
        import torch._dynamo.config as dcfg

        for k in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                  "accumulated_cache_size_limit"):
            if hasattr(dcfg, k):
                setattr(dcfg, k, max(getattr(dcfg, k), 1 << 16))
        for k in ("fail_on_recompile_limit_hit", "fail_on_cache_limit_hit"):
            if hasattr(dcfg, k):
                setattr(dcfg, k, True)
        for nm, kw in (("TC", {"mode": "max-autotune-no-cudagraphs"}), ("TCd", {})):
            if nm in names:
                impls[nm] = math_impl(*(torch.compile(f, dynamic=False, **kw)
                                        for f in (ref_fwd, ref_bwd, ref_fwd_res, ref_bwd_res)))
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

        impls["F.rms_norm"] = core_impl(fr_fwd, fr_bwd)
    if "Liger" in names:
        try:
            from liger_kernel.ops import rms_norm as lrms

            def li_fwd(x, w):
                # Liger takes 2-D rows; a strided per-head view is copied first
                # (inside the span: what a Liger user pays).
                x2 = x.reshape(-1, x.shape[-1]).contiguous()
                Y, X, RSTD, BS, nw, cm = lrms.rms_norm_forward(x2, w, eps, 0.0, "gemma", None)
                return Y.view(x.shape), RSTD, (X, RSTD, BS, nw, cm)

            def li_bwd(dy, x, w, saved):
                X, RSTD, BS, nw, cm = saved
                dy2 = dy.reshape(-1, dy.shape[-1]).contiguous()
                dx, dw = lrms.rms_norm_backward(dy2, X, w, RSTD, 0.0, cm, BS, nw, False, None)
                return dx.view(dy.shape), dw

            impls["Liger"] = core_impl(li_fwd, li_bwd)
        except Exception as e:  # noqa: BLE001 - reported in the output
            errors["Liger"] = f"{type(e).__name__}: {e}"
    if "Q" in names:
        try:
            from quack.rmsnorm import rmsnorm_bwd as q_bwd_fn
            from quack.rmsnorm import rmsnorm_fwd as q_fwd_fn

            import sys
            per_head_ok = [True]

            def q_fwd(x, w):
                # A strided per-head view (heads24's q slice): QuACK's own
                # per-head path (x [T, heads, N] as it is, one weight row per
                # head, [heads, N]: the shared w repeated, inside the span);
                # if QuACK refuses the view, 2-D rows (as QuACK's autograd
                # wrapper reshapes: the view is copied, in the span), said
                # once on stderr. A contiguous one (heads4) as 2-D rows, a
                # free view, which measured faster there (docs/results/peers/
                # quack-2026-12-02: 132.7 against 147.4 us at T = 131072).
                if x.dim() == 3 and not x.is_contiguous() and per_head_ok[0]:
                    w2 = w.unsqueeze(0).expand(x.shape[1], -1).contiguous()
                    try:
                        out, _, rstd = q_fwd_fn(x, w2, eps=eps, store_rstd=True)
                        return out, rstd, (x, rstd, w2)
                    except Exception as e:  # noqa: BLE001 - reported, then the 2-D path
                        per_head_ok[0] = False
                        print(f"Q: per-head path refused ({type(e).__name__}: {e}); 2-D rows from here on",
                              file=sys.stderr)
                x2 = x.reshape(-1, x.shape[-1])
                out, _, rstd = q_fwd_fn(x2, w, eps=eps, store_rstd=True)
                return out.view(x.shape), rstd, (x2, rstd, None)

            def q_bwd(dy, x, w, saved):
                xs, rstd, w2 = saved
                if w2 is not None:  # per-head: dw [heads, N] summed over the heads
                    dx, dw, _, _ = q_bwd_fn(xs, w2, dy, rstd)
                    return dx, dw.sum(0)
                dx, dw, _, _ = q_bwd_fn(xs, w, dy.reshape(-1, dy.shape[-1]), rstd)
                return dx.view(dy.shape), dw

            impls["Q"] = core_impl(q_fwd, q_bwd)
        except Exception as e:  # noqa: BLE001
            errors["Q"] = f"{type(e).__name__}: {e}"
    return impls


def form_inputs(torch, inp):
    """The timed layout of a case's inputs: heads24's x as the q slice of a
    packed qkv buffer [T, 24+8+8, 256] (a strided view, as in training);
    every other tensor as generated (contiguous)."""
    if inp["form"] == "heads24":
        T, nh, H = inp["x"].shape
        buf = torch.empty((T, nh + 16, H), dtype=inp["x"].dtype, device=inp["x"].device)
        buf.normal_()
        buf[:, :nh, :] = inp["x"]
        inp = dict(inp, x=buf[:, :nh, :], qkv=buf)
    return inp


CAPTURE_ORDER = ["det", "ours", "det#2", "ours#2", "TC", "TCd", "Q", "Liger", "F.rms_norm", "eager"]


def op_fn(impl, op, inp, saved):
    """The callable one graph of `op` captures: fwd; bwd from the eager
    forward's `saved` (kept referenced by the caller); or the checkpointed
    step 2xfwd+bwd (forward, forward recompute, backward of the recompute)."""
    fwd, bwd = impl
    if op == "fwd":
        return lambda: fwd(inp)
    if op == "bwd":
        return lambda: bwd(inp, saved)

    def step():
        fwd(inp)
        _, s2 = fwd(inp)
        return bwd(inp, s2)
    return step
