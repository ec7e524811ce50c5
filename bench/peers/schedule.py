"""Which rows still fit before the run is stopped (--end-s).

--deadline-s starts no row after it; --end-s (tools/peers.sh passes its
timeout) starts no row predicted to end after it (predict_row_s: this run's
rows' timing + accuracy scaled by element count, x1.3, +10 s, +100 s for a
row without a warm-up; 15 s kept for the end), waits for a warm-up no longer
than leaves the row its time, and warms no row it will skip; a smaller row
may still start after a skipped one. So a large row late in a run is
skipped, not killed halfway (docs/perf/peers.md, D7; a fixed margin per
call, which left ~140 s idle, is under "Tried and rejected" there). The row
loop that applies both is cli.main."""
from __future__ import annotations

from .matrix import row_elements

def predict_row_s(measured, elements, warm=True):
    """Seconds a row of `elements` is predicted to take, from this run's
    measured rows [(elements, timing + accuracy seconds), ...]: the largest
    of seconds * elements / elements_i over the rows at least half as big
    (their fixed costs are a small part), else the biggest row scaled; x1.3,
    +10 s of setup, +100 s when the row has no warm-up (its torch.compile
    peers then compile in its setup: 17-103 s cold on the H200,
    docs/perf/peers.md, D7). Setup is left out of the scaling: a row that
    compiled in its setup would otherwise predict its compile times the
    element ratio. Replayed over 50 stored rows of the matrix (D7): at worst
    8 s short ([131072, 4096] fp32 res, 101 s for 110 s), at most 4.2x
    over. None without a measured row."""
    if not measured:
        return None
    near = [(e, s) for e, s in measured if e >= elements / 2]
    base = max(s * elements / e for e, s in near) if near else \
        (lambda e, s: s * elements / e)(*max(measured))
    return 1.3 * base + 10 + (0 if warm else 100)


END_TAIL_S = 15  # what a run needs after its last row (JSON and Markdown written, children ended)


def measured_for_end(rows):
    """[(elements, timing + accuracy seconds)] of result rows, for predict_row_s."""
    out = []
    for r in rows:
        ph = r.get("phase_s") or {}
        sec = ph["timing"] + ph["accuracy"] if "timing" in ph and "accuracy" in ph else r["seconds"]
        out.append((row_elements(r.get("form", "plain"), r["H"], r["T"]), sec))
    return out


def end_skip(end_s, elapsed, rows, form, H, T, warm):
    """Why the row (form, H, T) must not start, elapsed seconds into a run
    that is stopped at end_s (--end-s; 0: never), given the result rows this
    run measured (each with "form", "H", "T", "phase_s" or "seconds"):
    "predicted X s, Y s left before --end-s" (the prediction plus
    END_TAIL_S does not fit), "no time left before --end-s", or "" when it
    may start (no end, no measured row to predict from, or it fits)."""
    if not end_s:
        return ""
    if elapsed + END_TAIL_S >= end_s:
        return "no time left before --end-s"
    est = predict_row_s(measured_for_end(rows), row_elements(form, H, T), warm=warm)
    if est is None or elapsed + est + END_TAIL_S <= end_s:
        return ""
    return f"predicted {est:.0f} s, {end_s - elapsed:.0f} s left before --end-s"
