"""Accuracy at the budget: every implementation's outputs through normgate's
oracle and validators (identical outputs validated once), the verdicts per
op (in_budget), and a row's accuracy phase with its per-op ratios."""
from __future__ import annotations

import time
import traceback

from .impls import form_inputs
from .matrix import ALL_PEERS, bytes_moved, case_id

# The outputs an op must get right: the forward's y (and rstd when the
# implementation exposes it); the backward's dx and dw, and the step's all.
OP_OUTPUTS = {"fwd": ("y", "rstd", "h_new"), "bwd": ("dx", "dw"), "2xfwd+bwd": ("y", "rstd", "h_new", "dx", "dw")}


def in_budget(info, op):
    """Within the budget on every accuracy seed, for the outputs `op` produces
    (an output the implementation does not expose, e.g. F.rms_norm's rstd, is
    not counted; y, dx and dw must be there). An accuracy run that failed on
    any seed (acc_error) is never in budget: its pass_out covers fewer seeds."""
    if info.get("acc_error") or info.get("error"):
        return False
    ok = info.get("pass_out") or {}
    need = {"fwd": ("y",), "bwd": ("dx", "dw"), "2xfwd+bwd": ("y", "dx", "dw")}[op]
    if any(o not in ok for o in need):
        return False
    return all(ok[o] for o in OP_OUTPUTS[op] if o in ok)


def worst_output(info, op):
    """(name, err/tol) of the worst output `op` produces."""
    et = info.get("err_tol") or {}
    cand = [(o, et[o]) for o in OP_OUTPUTS[op] if o in et]
    return max(cand, key=lambda c: c[1]) if cand else (None, None)


CONTRACT = (("y", "bfloat16"), ("rstd", "float32"), ("h_new", "bfloat16"), ("dx", "bfloat16"), ("dw", "float32"))


def split_known(given, seen, same):
    """Which outputs need the oracle: (to_validate, reused). given maps output
    names to tensors; seen maps names to [(tensor, report entry)] of earlier
    implementations on the same inputs; same(a, b) is True only for bitwise
    identical tensors. An output identical to an earlier one has, by
    construction, the same element statistics (the validators see only its
    bits and the reference): its entry is reused, not recomputed."""
    to_validate, reused = {}, {}
    for name, t in given.items():
        hit = next((e for u, e in seen.get(name, []) if same(u, t)), None)
        if hit is None:
            to_validate[name] = t
        else:
            reused[name] = hit
    return to_validate, reused


def bitwise_same(torch, a, b):
    """True when tensors a and b hold the same bits (NaN payloads and signed
    zeros included): same shape and dtype, equal as integers of that width."""
    if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
        return False
    iv = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}.get(a.dtype)
    return iv is not None and bool(torch.equal(a.view(iv), b.view(iv)))


def accuracy_into(torch, impl, ins, orc, info, seen=None):
    """Run one implementation eagerly on a case's inputs, validate its outputs
    with the case's oracle, and fold the result into `info` (worst err/tol per
    output, per-output pass over all seeds, dtype conversions made).
    seen (a dict kept over the implementations of one seed's inputs, or None):
    outputs bitwise identical to an earlier implementation's reuse its report
    entry (split_known); info["reused"] counts them."""
    fwd, bwd = impl
    acc_s = info.setdefault("acc_s", {"run": 0.0, "validate": 0.0})
    t0 = time.time()
    try:
        outs, saved = fwd(ins)
        outs.update(bwd(ins, saved))
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        acc_s["run"] += time.time() - t0
        t0 = time.time()
        # The contract is y, dx, h_new BF16 and rstd, dw FP32: an output in
        # another dtype is converted (bf16 -> fp32 is exact) and the
        # conversion recorded against the implementation.
        given = {}
        for oname, dt in CONTRACT:
            t = outs.get(oname)
            if t is None:
                continue
            want = getattr(torch, dt)
            if t.dtype != want:
                info.setdefault("casts", {})[oname] = str(t.dtype).replace("torch.", "")
                t = t.to(want)
            given[oname] = t.reshape(-1)
        if seen is None:
            rep = orc.validate(**given)
        else:
            todo, reused = split_known(given, seen, lambda a, b: bitwise_same(torch, a, b))
            rep = orc.validate(**todo) if todo else {"outputs": {}}
            entries = {n: o for n, o in rep.get("outputs", {}).items() if n in todo}
            for n, t in todo.items():
                if n in entries:
                    seen.setdefault(n, []).append((t, entries[n]))
            entries.update(reused)
            rep = {"outputs": entries, "pass": all(bool(o.get("pass")) for o in entries.values()),
                   "reused": sorted(reused)}
            info["reused"] = info.get("reused", 0) + len(reused)
        acc_s["validate"] += time.time() - t0
    except Exception as e:  # noqa: BLE001
        # Not info["error"]: the timings stay valid and shown; in_budget() is False.
        info.setdefault("acc_error", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        return None
    acc = info.setdefault("err_tol", {})
    ok = info.setdefault("pass_out", {})
    for out, o in rep.get("outputs", {}).items():
        if not o.get("present", True):
            continue
        acc[out] = max(acc.get(out, 0.0), float(o["err_tol"]))
        ok[out] = ok.get(out, True) and bool(o.get("pass"))
    info["pass"] = info.get("pass", True) and bool(rep.get("pass"))
    if outs.get("dw") is not None:
        info["dw_dtype"] = str(outs["dw"].dtype).replace("torch.", "")
    return rep


def run_row_accuracy(torch, args, impls, row, live, log):
    """A timed row's accuracy phase (--seeds seeds, every live
    implementation's outputs through the oracle; the A/A copies take their
    originals' verdicts), then its per-op ratios (row["ops"]); returns row.
    Needs no graph of the timing phase: it may run after later rows' timing
    (--defer-accuracy)."""
    import normgate

    form, H, T, wname, heads = row["form"], row["H"], row["T"], row["w"], row["heads"]
    phase0 = time.time()

    # Accuracy on --seeds seeds, every implementation's outputs through the
    # oracle. A failure here (inputs, oracle) costs the row its in-budget
    # verdicts, not its timings.
    acc = [n for n in live if not n.endswith("#2")]
    for seed in range(args.seeds):
        c = case_id(form, H, T, wname, args.family, seed)
        ins = None
        try:
            t_seed = time.time()
            g = normgate.generate(c)  # device generator on a CUDA device
            torch.cuda.synchronize()
            row.setdefault("acc_generate_s", []).append(time.time() - t_seed)
            ins = form_inputs(torch, g)
            # The oracle takes these inputs (host copies, a sample checked
            # against the generator) instead of generating them again on the
            # host: the host generator ran twice per seed before (the open
            # 3.21 s against 0.43 s with the inputs given, [32768, 1536], dev
            # machine: docs/perf/peers.md, D6).
            with normgate.Oracle(c, inputs=g) as orc:
                # host copies of the inputs and the oracle's reference (to
                # plan the accuracy phase's cost per part)
                row.setdefault("acc_open_s", []).append(orc.seconds["copy"] + orc.seconds["open"])
                seen = {}  # this seed's distinct outputs: identical ones are validated once
                for n in acc:
                    accuracy_into(torch, impls[n], ins, orc, row["impls"][n], seen)
                seen = None
                tot = row.setdefault("acc_oracle_s", {})
                for k, v in orc.seconds.items():
                    tot[k] = tot.get(k, 0.0) + v
        except Exception as e:  # noqa: BLE001
            msg = f"seed {seed}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            log(f"  accuracy failed: {msg}")
            log(traceback.format_exc())
            row.setdefault("acc_errors", []).append(msg)
            for n in acc:
                row["impls"][n].setdefault("acc_error", msg)
        ins = None
        torch.cuda.empty_cache()
    row["phase_s"]["accuracy"] = time.time() - phase0
    for n in live:
        if n.endswith("#2"):
            base_info = row["impls"][n[:-2]]
            for key in ("pass", "err_tol", "pass_out", "acc_error"):
                if base_info.get(key) is not None:
                    row["impls"][n][key] = base_info.get(key)
            if n[:-2] not in acc:
                row["impls"][n]["acc_error"] = f"{n[:-2]} was not validated"

    # Bandwidth and ratios.
    wbytes = 2 if wname == "bf16" else 4
    row["ops"] = {}
    for op in args.ops:
        r = {"bytes": bytes_moved(op, T * heads, H, wbytes, form)}
        u = row["impls"]

        def us(n):
            return u.get(n, {}).get("us", {}).get(op)
        r["det_us"], r["ours_us"] = us("det"), us("ours")
        aa = [abs(1 - us(a) / us(b)) for a, b in (("det#2", "det"), ("ours#2", "ours")) if us(a) and us(b)]
        r["aa_floor"] = max(aa) if aa else None
        peers = [n for n in u if n in ALL_PEERS and us(n)]
        ok = [n for n in peers if in_budget(u[n], op)]
        r["sota"] = min(ok, key=us) if ok else None
        r["fastest_any"] = min(peers, key=us) if peers else None
        if r["sota"]:
            r["sota_us"] = us(r["sota"])  # also when ours failed: markdown() prints it
        if r["ours_us"]:
            r["ours_GBps"] = r["bytes"] / (r["ours_us"] * 1e-6) / 1e9
            if r["det_us"]:
                r["det_over_ours"] = r["det_us"] / r["ours_us"]
            if r["sota"]:
                r["sota_over_ours"] = r["sota_us"] / r["ours_us"]
            if r["fastest_any"]:
                r["fastest_any_over_ours"] = us(r["fastest_any"]) / r["ours_us"]
        row["ops"][op] = r
    return row


def acc_parts(row):
    """The accuracy phase's seconds by part, summed over the seeds: the
    device generator, the inputs' host copies + the oracle's reference (open),
    the Oracle's own split (host copies of inputs and outputs, reference,
    validators: normgate.Oracle.seconds), then per implementation its eager
    runs and its validation (host copies included)."""
    parts = [f"generate {sum(row.get('acc_generate_s', [])):.1f} s, inputs+oracle open {sum(row.get('acc_open_s', [])):.1f} s"]
    o = row.get("acc_oracle_s")
    if o:
        parts.append("of which, with the validations: " + ", ".join(f"{k} {v:.1f} s" for k, v in sorted(o.items())))
    for n, info in row["impls"].items():
        a = info.get("acc_s")
        if a:
            parts.append(f"{n} run {a['run']:.1f} + validate {a['validate']:.1f} s")
    return "; ".join(parts)
