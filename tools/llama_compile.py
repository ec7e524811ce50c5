#!/usr/bin/env python3
"""A small Llama-like model with torch.nn.RMSNorm against normgate.RMSNorm, under torch.compile.

    PYTHONPATH=python NORMGATE_LIB=build/capi/libnormgate_capi.so \\
        python3 tools/llama_compile.py --out out/llama --deadline-s 900

The model is plain torch (no transformers): token embedding, L blocks of
[RMSNorm, causal attention with rotary embeddings, RMSNorm, SwiGLU MLP] with
residual adds, a final RMSNorm and an LM head; cross-entropy loss on seeded
random tokens. 2L+1 RMSNorms (9 with the default 4 layers, hidden 2048, 16
heads, MLP 5632, vocab 32000, batch 4 x 512 tokens = 2048 rows per norm). One
seeded float32 model is built; every variant loads its state_dict (normgate's
module takes torch.nn.RMSNorm's weights unchanged).

Per mode (--modes): "bf16": every parameter bfloat16, no autocast; "autocast":
float32 parameters (float32 norm weights) under torch.autocast("cuda",
bfloat16), where normgate.RMSNorm casts its float32 input to bfloat16 and
torch's keeps its own policy. Per model in the mode: "stock" (torch.nn.RMSNorm),
"normgate" (normgate.RMSNorm in its place) and, in bf16 mode, "normgate-res"
(the residual adds fused into the norms: form "res" for all but the first norm;
H=2048 res is outside the shipped route table's windows, so the table's
fallback runs, with its RouteWarning, reported). For each:
  - graph breaks: torch._dynamo.explain over the loss function (the forward;
    the backward is traced by AOTAutograd, not dynamo). Then
    torch.compile(fullgraph=True) when there are none (else the default).
  - one compiled step: loss and the gradient of every RMSNorm weight, compared
    with the stock model of the same mode (relative error: ||g - g_stock|| /
    ||g_stock||, loss: |l - l_stock| / |l_stock|) and with an FP32 eager stock
    model (the same weights in float32, no autocast): how far each is from
    float32 arithmetic, so normgate's distance can be read against stock's.
  - step time (zero_grad, forward, backward; no optimizer) compiled and eager:
    --warmup steps, then --iters steps each timed with CUDA events; median and
    min in ms.
  - which kernel variants the normgate models ran (last_variant), and any
    RouteWarning.

Output: a table on stdout; with --out DIR, DIR/llama_compile.md and
DIR/llama_compile.json (written atomically, also when the deadline stops the
run: what finished). --deadline-s N: no new phase starts after N seconds from
the start (a phase is one model of one mode: compile, compare, time).
--dry-run: no GPU: a tiny model (2 layers, hidden 64) built on the CPU and on
the meta device, normgate's graph breaks counted by tracing on meta tensors,
the stock loss on the CPU, the summary written as on the GPU.

Exit: 0 done; 1 a normgate model has graph breaks (or a non-finite loss);
2 usage error (or no CUDA device without --dry-run); 3 the deadline stopped the
run before every phase ran (the summary says which did).
"""

import argparse
import json
import math
import os
import statistics
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="", help="write llama_compile.md and .json here (atomically)")
    ap.add_argument("--deadline-s", type=float, default=0.0, help="start no phase after this many seconds (0: none)")
    ap.add_argument("--modes", default="bf16,autocast", help="comma list of bf16, autocast")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--ffn", type=int, default=5632)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--no-res", action="store_true", help="skip the fused-residual normgate model")
    ap.add_argument("--dry-run", action="store_true", help="no GPU: a tiny model on the CPU and meta device")
    a = ap.parse_args(argv)
    modes = [m for m in a.modes.split(",") if m]
    bad = [m for m in modes if m not in ("bf16", "autocast")]
    if not modes or bad:
        ap.error("--modes: expected a comma list of bf16, autocast, got %r" % a.modes)
    a.modes = modes
    for name in ("layers", "hidden", "heads", "ffn", "vocab", "batch", "seq", "iters"):
        if getattr(a, name) < 1:
            ap.error("--%s must be >= 1, got %d" % (name, getattr(a, name)))
    if a.warmup < 0 or a.deadline_s < 0:
        ap.error("--warmup and --deadline-s must be >= 0")
    if a.dry_run:
        a.layers, a.hidden, a.heads, a.ffn, a.vocab, a.batch, a.seq = 2, 64, 4, 128, 97, 2, 8
    if a.hidden % a.heads or (a.hidden // a.heads) % 2:
        ap.error("--hidden %d must split into --heads %d heads of an even size" % (a.hidden, a.heads))
    return a


# ---- the model ----------------------------------------------------------------

def build_model_class(torch):
    nn, F = torch.nn, torch.nn.functional

    def rotary(seq, dim, device):
        inv = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, device=device, dtype=torch.float32) / dim))
        ang = torch.outer(torch.arange(seq, device=device, dtype=torch.float32), inv)
        return torch.cos(ang), torch.sin(ang)

    def rope(t, cos, sin):  # t [B, heads, S, d]
        a, b = t.float().chunk(2, dim=-1)
        return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1).to(t.dtype)

    class Block(nn.Module):
        def __init__(self, c, norm):
            super().__init__()
            self.heads = c.heads
            self.attn_norm = norm(0)
            self.wqkv = nn.Linear(c.hidden, 3 * c.hidden, bias=False)
            self.wo = nn.Linear(c.hidden, c.hidden, bias=False)
            self.mlp_norm = norm(1)
            self.w_gate_up = nn.Linear(c.hidden, 2 * c.ffn, bias=False)
            self.w_down = nn.Linear(c.ffn, c.hidden, bias=False)

        def attn(self, y, cos, sin):
            B, S, Hd = y.shape
            q, k, v = self.wqkv(y).view(B, S, 3, self.heads, Hd // self.heads).permute(2, 0, 3, 1, 4)
            o = F.scaled_dot_product_attention(rope(q, cos, sin), rope(k, cos, sin), v, is_causal=True)
            return self.wo(o.transpose(1, 2).reshape(B, S, Hd))

        def mlp(self, y):
            g, u = self.w_gate_up(y).chunk(2, dim=-1)
            return self.w_down(F.silu(g) * u)

    class Llama(nn.Module):
        """fused: the residual adds go into the norms (normgate form "res")."""

        def __init__(self, c, make_norm, fused=False):
            super().__init__()
            self.fused = fused
            self.embed = nn.Embedding(c.vocab, c.hidden)
            # Norm i of the model (0: the first block's attn_norm): fused models
            # use form "res" for every norm but the first.
            count = iter(range(2 * c.layers + 1))
            self.layers = nn.ModuleList(Block(c, lambda _k: make_norm(next(count))) for _ in range(c.layers))
            self.norm = make_norm(next(count))
            self.lm_head = nn.Linear(c.hidden, c.vocab, bias=False)
            self.head_dim = c.hidden // c.heads

        def forward(self, tokens, targets):
            cos, sin = rotary(tokens.shape[1], self.head_dim, tokens.device)
            h = self.embed(tokens)
            if not self.fused:
                for blk in self.layers:
                    h = h + blk.attn(blk.attn_norm(h), cos, sin)
                    h = h + blk.mlp(blk.mlp_norm(h))
                y = self.norm(h)
            else:
                a = self.layers[0].attn(self.layers[0].attn_norm(h), cos, sin)
                for i, blk in enumerate(self.layers):
                    y, h = blk.mlp_norm(a, residual=h)      # h = h + a, y = norm(h)
                    m = blk.mlp(y)
                    nxt = self.layers[i + 1].attn_norm if i + 1 < len(self.layers) else self.norm
                    y, h = nxt(m, residual=h)               # h = h + m
                    if i + 1 < len(self.layers):
                        a = self.layers[i + 1].attn(y, cos, sin)
            logits = self.lm_head(y).float()
            return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))

    return Llama


def norm_names(model):
    return [n for n, mod in model.named_modules() if n and type(mod).__name__ == "RMSNorm"]


# ---- helpers ------------------------------------------------------------------

def write_atomic(path, text):
    tmp = path + ".tmp%d" % os.getpid()
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def rel(a, b):
    """||a - b|| / ||b|| in float64 (0 when both are zero)."""
    a, b = a.double(), b.double()
    nb = float(b.norm())
    d = float((a - b).norm())
    return d / nb if nb > 0 else (0.0 if d == 0 else math.inf)


def explain_breaks(torch, fn, *args):
    import torch._dynamo
    torch._dynamo.reset()
    e = torch._dynamo.explain(fn)(*args)
    reasons = []
    for r in e.break_reasons:
        reasons.append(str(getattr(r, "reason", r)).splitlines()[0][:200])
    return e.graph_break_count, e.graph_count, reasons


def markdown(s):
    lines = ["# Llama-like model: torch.nn.RMSNorm vs normgate.RMSNorm under torch.compile", ""]
    c = s["config"]
    lines.append("%d layers, hidden %d, %d heads, MLP %d, vocab %d, batch %d x %d tokens, seed %d; %s; "
                 "%d RMSNorms; torch %s; %s." % (c["layers"], c["hidden"], c["heads"], c["ffn"], c["vocab"],
                                                c["batch"], c["seq"], c["seed"], s["device"], s["norms"],
                                                s["torch"], s["normgate"]))
    lines += ["", "| mode | model | graph breaks | graphs | loss | loss rel vs stock | loss rel vs fp32 | "
              "max dw rel vs stock | max dw rel vs fp32 | compiled step ms (median / min) | eager step ms (median) |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]

    def f(v, fmt="%.3g"):
        return "-" if v is None else fmt % v

    for r in s["runs"]:
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s / %s | %s |" % (
            r["mode"], r["model"], f(r.get("graph_breaks"), "%d"), f(r.get("graphs"), "%d"),
            f(r.get("loss"), "%.6f"), f(r.get("loss_rel_vs_stock")), f(r.get("loss_rel_vs_fp32")),
            f(r.get("max_dw_rel_vs_stock")), f(r.get("max_dw_rel_vs_fp32")),
            f(r.get("compiled_ms_median"), "%.2f"), f(r.get("compiled_ms_min"), "%.2f"),
            f(r.get("eager_ms_median"), "%.2f")))
    for r in s["runs"]:
        if r.get("dw_rel_vs_stock"):
            lines += ["", "%s %s: dw relative error per norm (vs stock / vs fp32):" % (r["mode"], r["model"]), ""]
            for n in r["dw_rel_vs_stock"]:
                lines.append("- `%s`: %.3g / %s" % (n, r["dw_rel_vs_stock"][n],
                                                    f(r.get("dw_rel_vs_fp32", {}).get(n))))
        for key in ("break_reasons", "variants", "route_warnings", "note"):
            if r.get(key):
                lines.append("")
                lines.append("%s %s %s: %s" % (r["mode"], r["model"], key.replace("_", " "),
                                               json.dumps(r[key])))
    lines += ["", "verdict: " + s["verdict"], ""]
    return "\n".join(lines)


# ---- the run ------------------------------------------------------------------

def main(argv=None):
    a = parse_args(argv)
    t_start = time.monotonic()
    import torch
    import normgate

    if not a.dry_run and not torch.cuda.is_available():
        print("llama_compile: no CUDA device (torch.cuda.is_available() is False); --dry-run runs the CPU "
              "parts", file=sys.stderr)
        return 2
    Llama = build_model_class(torch)
    dev = "cpu" if a.dry_run else "cuda"
    torch.manual_seed(a.seed)
    stock_norm = lambda _i: torch.nn.RMSNorm(a.hidden, eps=1e-6)  # noqa: E731
    base = Llama(a, stock_norm).to(dev)  # the seeded float32 weights every model loads
    with torch.no_grad():
        for n, p in base.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn_like(p))  # not all ones: dw then depends on them
    names = norm_names(base)
    g = torch.Generator(device=dev).manual_seed(a.seed + 1)
    tokens = torch.randint(0, a.vocab, (a.batch, a.seq), generator=g, device=dev)
    targets = torch.randint(0, a.vocab, (a.batch, a.seq), generator=g, device=dev)
    summary = {"config": {k: getattr(a, k) for k in ("layers", "hidden", "heads", "ffn", "vocab", "batch", "seq",
                                                       "seed", "warmup", "iters", "modes", "dry_run")},
               "device": "dry run (CPU and meta)" if a.dry_run else torch.cuda.get_device_name(),
               "torch": torch.__version__, "normgate": "", "norms": len(names), "runs": [], "verdict": ""}
    try:
        summary["normgate"] = normgate.version()
    except RuntimeError as e:
        summary["normgate"] = "library not loaded: %s" % str(e).splitlines()[0]

    def ng_norm(fused):
        def make(i):
            form = "res" if fused and i > 0 else "plain"
            return normgate.RMSNorm(a.hidden, eps=1e-6, form=form)
        return make

    def make(model, mode, device=dev):
        m = Llama(a, stock_norm if model == "stock" else ng_norm(model == "normgate-res"),
                  fused=(model == "normgate-res"))
        m.load_state_dict(base.state_dict())
        m = m.to(device)
        return m.to(torch.bfloat16) if mode == "bf16" else m

    def step_fn(m, mode):
        def step(tok, tgt):
            if mode == "autocast":
                with torch.autocast(tok.device.type, dtype=torch.bfloat16):
                    return m(tok, tgt)
            return m(tok, tgt)
        return step

    def grads(m):
        params = dict(m.named_parameters())
        return {n: params[n + ".weight"].grad.detach().double().clone() for n in names}

    def one_step(m, fn):
        m.zero_grad(set_to_none=True)
        loss = fn(tokens, targets)
        loss.backward()
        return float(loss.detach()), grads(m)

    def timed(m, fn):
        for _ in range(a.warmup):
            one_step(m, fn)
        times = []
        for _ in range(a.iters):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            m.zero_grad(set_to_none=True)
            fn(tokens, targets).backward()
            e1.record()
            e1.synchronize()
            times.append(e0.elapsed_time(e1))
        return statistics.median(times), min(times)

    models = ["stock", "normgate"] + ([] if a.no_res else ["normgate-res"])
    phases = [(mode, model) for mode in a.modes for model in models if not (model == "normgate-res" and mode != "bf16")]
    fail, cut = [], []

    def out(error=None):
        if error:
            summary["verdict"] = "ERROR: the run stopped on %s" % error
        elif fail:
            summary["verdict"] = "FAIL: " + "; ".join(fail)
        elif cut:
            summary["verdict"] = "INCOMPLETE: the deadline stopped the run before " + ", ".join(cut)
        else:
            summary["verdict"] = "PASS: no graph break in the normgate models"
        if a.out:
            os.makedirs(a.out, exist_ok=True)
            write_atomic(os.path.join(a.out, "llama_compile.json"), json.dumps(summary, indent=1) + "\n")
            write_atomic(os.path.join(a.out, "llama_compile.md"), markdown(summary))

    ref = None  # fp32 eager stock: loss, grads
    stock = {}  # mode -> (loss, grads)
    if a.dry_run:
        return dry_run(a, torch, normgate, make, step_fn, names, tokens, targets, summary, fail, out)
    try:
        m32 = make("stock", "fp32")
        ref = one_step(m32, m32.forward)
        del m32
        for mode, model in phases:
            if a.deadline_s and time.monotonic() - t_start > a.deadline_s:
                cut.append("%s %s" % (mode, model))
                continue
            r = {"mode": mode, "model": model}
            summary["runs"].append(r)
            m = make(model, mode)
            fn = step_fn(m, mode)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                r["graph_breaks"], r["graphs"], r["break_reasons"] = explain_breaks(torch, fn, tokens, targets)
                torch._dynamo.reset()
                cfn = torch.compile(fn, fullgraph=(r["graph_breaks"] == 0))
                loss, gr = one_step(m, cfn)
                r["compiled_ms_median"], r["compiled_ms_min"] = timed(m, cfn)
                r["eager_ms_median"], _ = timed(m, fn)
            r["route_warnings"] = sorted({str(w.message)[:300] for w in caught
                                          if issubclass(w.category, normgate.RouteWarning)})
            if model != "stock":
                r["variants"] = {op: (normgate.last_variant(op) or {}).get("variant") for op in ("fwd", "bwd")}
                r["variants"].update({op + "_how": (normgate.last_variant(op) or {}).get("how")
                                      for op in ("fwd", "bwd")})
            r["loss"] = loss
            r["loss_rel_vs_fp32"] = abs(loss - ref[0]) / abs(ref[0])
            r["dw_rel_vs_fp32"] = {n: rel(gr[n], ref[1][n]) for n in names}
            r["max_dw_rel_vs_fp32"] = max(r["dw_rel_vs_fp32"].values())
            if model == "stock":
                stock[mode] = (loss, gr)
            elif mode in stock:
                r["loss_rel_vs_stock"] = abs(loss - stock[mode][0]) / abs(stock[mode][0])
                r["dw_rel_vs_stock"] = {n: rel(gr[n], stock[mode][1][n]) for n in names}
                r["max_dw_rel_vs_stock"] = max(r["dw_rel_vs_stock"].values())
            if model != "stock" and r["graph_breaks"] > 0:
                fail.append("%s %s: %d graph breaks" % (mode, model, r["graph_breaks"]))
            if not math.isfinite(loss):
                fail.append("%s %s: loss %r" % (mode, model, loss))
            print("%-8s %-13s breaks %d  loss %.6f  compiled %.2f ms  eager %.2f ms  max dw rel vs stock %s"
                  % (mode, model, r["graph_breaks"], loss, r["compiled_ms_median"], r["eager_ms_median"],
                     "%.3g" % r["max_dw_rel_vs_stock"] if "max_dw_rel_vs_stock" in r else "-"), flush=True)
            del m, fn, cfn
            torch.cuda.empty_cache()
    except BaseException as e:
        out("%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else ""))
        raise
    out()
    print(summary["verdict"])
    if a.out:
        print("wrote %s/llama_compile.md and .json" % a.out)
    return 1 if fail else (3 if cut else 0)


def dry_run(a, torch, normgate, make, step_fn, names, tokens, targets, summary, fail, out):
    """The CPU-possible parts: models built and loaded, normgate's graph breaks
    on meta tensors, the stock loss on the CPU."""
    stock = make("stock", "bf16")
    with torch.no_grad():
        loss = float(step_fn(stock, "bf16")(tokens, targets))
    summary["runs"].append({"mode": "bf16", "model": "stock", "loss": loss})
    models = ["normgate"] + ([] if a.no_res else ["normgate-res"])
    for model in models:
        m = make(model, "bf16", device="meta")
        assert norm_names(m) == names, (norm_names(m), names)
        r = {"mode": "bf16", "model": model, "note": "traced on meta tensors (dry run): nothing ran"}
        r["graph_breaks"], r["graphs"], r["break_reasons"] = explain_breaks(
            torch, step_fn(m, "bf16"), tokens.to("meta"), targets.to("meta"))
        summary["runs"].append(r)
        if r["graph_breaks"]:
            fail.append("%s: %d graph breaks" % (model, r["graph_breaks"]))
        print("dry run  %-13s %d norms, graph breaks %d" % (model, len(names), r["graph_breaks"]))
    print("dry run  stock loss on the CPU %.6f (ln vocab = %.6f)" % (loss, math.log(a.vocab)))
    out()
    print(summary["verdict"])
    return 1 if fail else 0


if __name__ == "__main__":
    sys.exit(main())
