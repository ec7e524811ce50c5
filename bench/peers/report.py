"""The Markdown of a result (one run or a merge): header (GPU, versions,
method, copy ceiling), summary over all rows against issue 8's targets,
one table per form, and every implementation's times and err/tol."""
from __future__ import annotations

import math
import re

from .accuracy import in_budget, worst_output
from .matrix import FORMS, OPS, workload

def fmt(v, f="{:.2f}"):
    return "—" if v is None else f.format(v)


def markdown(meta, rows, copy):
    L = []
    runs = meta.get("runs") or []
    when, command = meta["date"], f"Command: `{meta['command']}`"
    if len(runs) > 1:  # a merge: its runs' dates as a range, their commands at the end
        dates = sorted(str(r["date"]) for r in runs)
        when, command = f"{len(runs)} runs, {dates[0]} to {dates[-1]}", f"Commands: the {len(runs)} runs' own, under Runs at the end"
    L.append(f"# normgate vs peers on {meta['gpu']} ({when})\n")
    L.append(f"driver {meta['driver']}, CUDA {meta['cuda']}, torch {meta['torch']}, triton {meta.get('triton')}; "
             f"{meta['normgate']}. {command}.\n")
    L.append(f"Latency: median of {meta['replays']} CUDA-graph replays per implementation and op "
             f"({meta['rounds']} interleaved rounds, order rotated), L2 flushed before each, CUDA events. "
             f"Accuracy: worst of {meta['seeds']} seeds of family `{meta['family']}` through normgate's oracle. "
             f"det = normgate deterministic=True, ours = deterministic=False. "
             f"Copy ceiling (read + write, the fastest copy the run timed: {copy.get('by')}): "
             f"{fmt(copy.get('GBps'), '{:.0f}')} GB/s"
             + "".join(f"; {k} {v['GBps']:.0f} GB/s" for k, v in copy.get('candidates', {}).items())
             + "".join(f"; {k} failed: `{v}`" for k, v in (copy.get("errors") or {}).items()) + "."
             + ("" if not copy.get("directions") else " One direction alone (not copies, not the ceiling): "
                + "; ".join(f"{k} {v['GBps']:.0f} GB/s" for k, v in copy["directions"].items()) + ".")
             + peak_sentence(meta["gpu"])
             + copy_note(rows, copy) + "\n")
    if meta.get("skipped") or meta.get("failed_rows") or meta.get("stopped"):
        L.append("**Incomplete run.** "
                 + (f"{meta['stopped']}: stopped. " if meta.get("stopped") else "")
                 + (f"Rows not started (--deadline-s, --end-s, or stopped) ({len(meta.get('skipped', []))}): "
                    + ", ".join(f"[{t}, {h}] {w} {f}" for t, h, w, f in meta.get("skipped", [])) + ". "
                    if meta.get("skipped") else "")
                 + ("Rows that failed: " + "; ".join(f"[{t}, {h}] {w} {f}: `{e[:160]}`"
                                                    for t, h, w, f, e in meta.get("failed_rows", [])) + "."
                    if meta.get("failed_rows") else "") + "\n")
    if meta["peer_errors"]:
        L.append("Peers that could not run: " + "; ".join(f"{k}: `{v}`" for k, v in meta["peer_errors"].items()) + "\n")
    L += summary_lines(rows)
    forms = [f for f in FORMS if any(row.get("form", "plain") == f for row in rows)]
    for form in forms:
        L.append(f"## Form {form}\n")
        L += form_table(copy, [row for row in rows if row.get("form", "plain") == form], meta["gpu"])
    gone = [f"{workload(row)}: {n} ({i.get('error') or 'accuracy: ' + i['acc_error']})"[:200]
            for row in rows for n, i in row["impls"].items() if i.get("error") or i.get("acc_error")]
    if gone:
        L.append("Implementations that failed in their row (setup, timing or accuracy run; not SOTA "
                 "candidates there; an out-of-memory at the largest rows shows here): " + "; ".join(gone) + ".\n")
    L.append("## Every implementation\n")
    L.append("| workload | impl | fwd us | bwd us | 2xfwd+bwd us | y | rstd | h_new | dx | dw | dw dtype | in budget for |")
    L.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        for n, i in row["impls"].items():
            if i.get("error"):
                L.append(f"| {workload(row)} | {n} | error: `{i['error'][:120]}` | | | | | | | | | |")
                continue
            et = i.get("err_tol") or {}
            L.append(f"| {workload(row)} | {n} | " +
                     " | ".join(fmt(i['us'].get(op)) for op in OPS) + " | " +
                     " | ".join(fmt(et.get(o), '{:.3g}') for o in ("y", "rstd", "h_new", "dx", "dw")) +
                     f" | {i.get('dw_dtype', '—')}" +
                     ("".join(f" ({k} was {v})" for k, v in (i.get("casts") or {}).items())) + " | " +
                     (", ".join(op for op in OPS if in_budget(i, op)) or "none") +
                     (f" (accuracy run failed: `{i['acc_error'][:100]}`)" if i.get("acc_error") else "") + " |")
    if len(runs) > 1:
        L.append("\n## Runs\n")
        L += [f"{k}. {r['file']} ({r['date']}): `{r['command']}`" for k, r in enumerate(runs, 1)]
    return "\n".join(L) + "\n"


# The HBM peak of each GPU the tables name, from NVIDIA's data sheets (H100:
# "NVIDIA H100 Tensor Core GPU" data sheet, GPU memory bandwidth: SXM 3.35
# TB/s, PCIe 2 TB/s, NVL 3.9 TB/s; H200: "NVIDIA H200 Tensor Core GPU" data
# sheet, SXM and NVL 4.8 TB/s), matched on torch's device name in this order
# (the more specific names first). The 'of peak' fraction uses it.
# Whole words only: "GH200" (a Grace Hopper module, other memory) is not an
# H200.
HBM_PEAKS = [(r"\bH100 NVL\b", 3900.0, "H100 NVL HBM3"), (r"\bH100 PCIe\b", 2000.0, "H100 PCIe HBM2e"),
             (r"\bH100\b", 3350.0, "H100 SXM HBM3"), (r"\bH200\b", 4800.0, "H200 HBM3e")]


def hbm_peak(gpu):
    """(GB/s, label) of the HBM peak of the GPU named `gpu` (torch's device
    name, e.g. "NVIDIA H200"; HBM_PEAKS), or None for a GPU not listed or a
    merge of runs on different GPUs ("A / B")."""
    name = str(gpu or "")
    if " / " in name:
        return None
    for pattern, gbps, label in HBM_PEAKS:
        if re.search(pattern, name):
            return gbps, label
    return None


def peak_sentence(gpu):
    """The header's sentence on the 'of peak' fraction."""
    p = hbm_peak(gpu)
    if p is None:
        return f" No HBM peak is listed for {gpu} (bench/peers/report.py, HBM_PEAKS): no 'of peak' fraction."
    return f" 'of peak' is the fraction of the HBM peak, {p[0]:.0f} GB/s ({p[1]}, NVIDIA's data sheet)."


def row_copy_GBps(row, copy):
    """The copy ceiling a row's "of copy" compares with: its own run's (a
    merge keeps each row's), else the result's."""
    return row.get("copy_GBps") or copy.get("GBps")


def copy_note(rows, copy):
    """A sentence for the header when an implementation moved more bytes per
    second than its row's copy ceiling (the op's bytes over its median time):
    then the copy kernels are not the HBM ceiling, and "of copy" above 1.0 is
    possible. Empty otherwise."""
    best = None
    for row in rows:
        ceil = row_copy_GBps(row, copy)
        for op, r in row.get("ops", {}).items():
            for n, i in row["impls"].items():
                us = (i.get("us") or {}).get(op)
                if ceil and us and r.get("bytes"):
                    q = r["bytes"] / us / 1e3 / ceil
                    if best is None or q > best[0]:
                        best = (q, n, workload(row), op)
    if best is None or best[0] <= 1.0:
        return ""
    q, n, w, op = best
    return (f" The copy kernels are not the HBM ceiling: {n} at {w} {op} moves {q:.2f}x its run's copy "
            f"bandwidth (the op's bytes over its median time), so 'of copy' compares with our copy, not a bound.")


def form_table(copy, rows, gpu=None):
    """One form's rows as the seed's table (one line per workload and op);
    'of peak' against hbm_peak(gpu), "—" when none is known."""
    peak = hbm_peak(gpu)
    L = ["| workload [T, H] w, form | op | det us | SOTA us (name) | ours us | det/ours | SOTA/ours | ours GB/s (of copy, of peak) | A/A floor |",
         "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        for op, r in row["ops"].items():
            sota = "—"
            if r.get("sota"):
                sota = f"{r['sota_us']:.2f} {r['sota']}"
                n = r.get("fastest_any")
                if n and n != r["sota"]:  # a faster peer missed the budget: name it, as the '!' rows do
                    sota += f" (faster, over budget: ! {row['impls'][n]['us'][op]:.2f} {n}, {why_out(row['impls'][n], op)})"
            elif r.get("fastest_any"):
                n = r["fastest_any"]
                sota = f"! {row['impls'][n]['us'][op]:.2f} {n} ({why_out(row['impls'][n], op)})"
            frac = ""
            row_copy = row_copy_GBps(row, copy)
            if r.get("ours_GBps") and row_copy:
                of_peak = f"{r['ours_GBps'] / peak[0]:.2f}" if peak else "—"
                frac = f" ({r['ours_GBps'] / row_copy:.2f}, {of_peak})"
            oob = {n: " (out of budget)" if r[f"{n}_us"] and not in_budget(row["impls"].get(n, {}), op) else ""
                   for n in ("det", "ours")}
            L.append(f"| {workload(row)} | {op} | {fmt(r['det_us'])}{oob['det']} | {sota} | "
                     f"{fmt(r['ours_us'])}{oob['ours']} | {fmt(r.get('det_over_ours'), '{:.3f}x')}{nd_mark(r)} | "
                     f"{fmt(r.get('sota_over_ours'), '{:.3f}x')} | {fmt(r.get('ours_GBps'), '{:.0f}')}{frac} | "
                     f"{fmt(r['aa_floor'], '{:.4f}')} |")
    L.append("")
    return L


def why_out(info, op):
    """Why a peer is not in budget for `op`, for the tables: its worst
    output and err/tol ("dw 1.16"), or "not validated" when its accuracy run
    gave no err/tol (it failed, so it is no SOTA candidate either)."""
    wo, wv = worst_output(info, op)
    return f"{wo} {fmt(wv, '{:.3g}')}" if wo else "not validated"


def nd_mark(r):
    """' +' / ' -' when det/ours is above / below 1 by more than the row's A/A floor."""
    q, floor = r.get("det_over_ours"), r.get("aa_floor")
    if q is None or floor is None:
        return ""
    return " +" if q - 1 > floor else " -" if 1 - q > floor else ""


def geomean(v):
    return math.exp(sum(math.log(x) for x in v) / len(v))


def summary_lines(rows):
    """The seed's summary over all rows (per op: det/ours and SOTA/ours
    geomean [min, max] and the rows below 1, from unrounded ratios), then
    issue 8's targets: SOTA/ours >= 1.0 on every bwd and 2xfwd+bwd row and
    1.1x geomean; deterministic=False not slower than True beyond the A/A
    floor. Rows without an in-budget SOTA (!) are left out of SOTA/ours;
    the last column, fastest peer/ours with the budget aside, counts them
    (and shows what a SOTA slower than an over-budget peer hides)."""
    L = [f"## Summary over all rows ({len(rows)} workloads x {len(OPS)} ops)\n",
         "| op | det/ours geomean [min, max] | det/ours < 1 | ours slower than det beyond the A/A floor | "
         "SOTA/ours geomean [min, max] | SOTA/ours < 1 | fastest peer/ours, budget aside |",
         "| --- | --- | --- | --- | --- | --- | --- |"]
    short, slower, gm, hidden = [], [], {}, {}
    for op in OPS:
        rs = [(row, row["ops"][op]) for row in rows if op in row.get("ops", {})]
        dq = [r["det_over_ours"] for _, r in rs if r.get("det_over_ours")]
        sq = [r["sota_over_ours"] for _, r in rs if r.get("sota_over_ours")]
        fq = [r["fastest_any_over_ours"] for _, r in rs if r.get("fastest_any_over_ours")]
        hidden[op] = ([r["sota_over_ours"] for _, r in rs
                       if r.get("sota_over_ours") and r.get("fastest_any") not in (None, r.get("sota"))],
                      [r["sota_over_ours"] for _, r in rs
                       if r.get("sota_over_ours") and r.get("fastest_any") in (None, r.get("sota"))])
        sl = [f"{workload(row)} {op} ({r['det_over_ours']:.3f}x, floor {r['aa_floor']:.4f})"
              for row, r in rs if nd_mark(r) == " -"]
        slower += sl
        if op != "fwd":
            short += [f"{workload(row)} {op} ({r['sota_over_ours']:.3f}x vs {r['sota']})"
                      for row, r in rs if r.get("sota_over_ours") is not None and r["sota_over_ours"] < 1]
            gm[op] = geomean(sq) if sq else None

        def span(v):
            return f"{geomean(v):.3f}x [{min(v):.2f}, {max(v):.2f}]" if v else "—"
        L.append(f"| {op} | {span(dq)} | {sum(q < 1 for q in dq)} of {len(dq)} | {len(sl)} of {len(dq)} | "
                 f"{span(sq)} | {sum(q < 1 for q in sq)} of {len(sq)} | {span(fq)} ({len(fq)} rows) |")
    L.append("")
    L.append("! = no peer within the budget on every seed: the fastest peer is shown with "
             "its worst err/tol over the op's outputs; "
             "SOTA/ours is then left empty. (faster, over budget: ! ...) after a SOTA = the fastest peer, "
             "which missed the budget, with its worst err/tol (other peers over budget: see Every implementation); "
             "SOTA/ours stays against the in-budget SOTA. (out of budget) = det or ours itself failed the budget "
             "(or its accuracy run) for that op. + / - after det/ours: ours (deterministic=False) faster / "
             "slower than det by more than the row's A/A floor (the larger |1 - A/A| of the det and ours "
             "copies); unmarked: within the floor. fastest peer/ours, budget aside: the fastest peer's time over "
             "ours whether it is within budget or not, over every row (the ! rows too).\n")
    if any(h for h, _ in hidden.values()):
        L.append("SOTA/ours counts the rows with an in-budget peer (those marked ! have none). On "
                 + ", ".join(f"{len(h)} {op}" for op, (h, _) in hidden.items() if h)
                 + " rows the SOTA is slower than a peer that missed the budget (named beside it in the "
                 "tables), so SOTA/ours there is above what the fastest peer gives (up to "
                 + f"{max(max(h) for h, _ in hidden.values() if h):.2f}x); SOTA/ours geomean without them: "
                 + "; ".join(f"{op} {geomean(c):.3f}x" if c else f"{op} — (no other row)"
                             for op, (h, c) in hidden.items() if h) + ".\n")
    ahead = [f"{workload(row)} {op} {row['ops'][op]['sota_over_ours']:.2f}x" for row in rows for op in OPS
             if (row.get("ops", {}).get(op) or {}).get("sota_over_ours", 0) >= 1]
    if ahead:
        L.append(f"Where ours is at least as fast as the in-budget SOTA ({len(ahead)} op-rows; SOTA/ours): "
                 + "; ".join(ahead) + ".\n")
    L.append("Targets (issue 8): SOTA/ours >= 1.0 on every bwd and 2xfwd+bwd row with an in-budget SOTA: "
             + (f"met ({sum(1 for row in rows for op in gm if row['ops'].get(op, {}).get('sota_over_ours'))} "
                f"rows with one)." if not short else f"**not met** on {len(short)} rows: " + "; ".join(short) + ".")
             + " Geomean >= 1.1: "
             + "; ".join(f"{op} {'—' if g is None else f'{g:.3f}x'} ({'met' if g is not None and g >= 1.1 else '**not met**'})"
                         for op, g in gm.items())
             + ". deterministic=False at least as fast as deterministic=True on every row (within the A/A floor): "
             + ("met." if not slower else f"**not met** on {len(slower)} rows: " + "; ".join(slower) + ".")
             + (f" {n_fwd} of them are fwd rows, where both modes run the same forward kernel: their det/ours is"
                " itself an A/A pair, so there the one-pair floor understates the noise."
                if (n_fwd := sum(1 for x in slower if " fwd (" in x)) else "") + "\n")
    return L
