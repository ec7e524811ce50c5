"""The command line: options, and the row loop (main) that sets up, times
and validates each row of the matrix and writes the result.

Usage (on a CUDA machine; the normgate library must be built, NORMGATE_LIB
may name it):
  python3 bench/peers.py --H 4096 --T 65537,131072 --w bf16,fp32 \
      --json out/peers.json --md out/peers.md
Writes Markdown and JSON (atomically: temp file, then rename) and prints the
Markdown last. Exit 0 on a completed run (speed is never asserted), 2 on usage
errors, 1 when nothing could be measured. --merge: merge.py; warm-up
children: warmup.py; time limits: schedule.py."""
from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
import traceback

from .accuracy import acc_parts, run_row_accuracy
from .impls import make_impls
from .matrix import (ALL_PEERS, FAMILIES, FORMS, OPS, atomic_write, case_id, die_usage, parse_spec, plan_rows,
                     row_elements, row_spec)
from .merge import done_files, done_rows, load_result, merge
from .report import fmt, markdown
from .schedule import END_TAIL_S, end_skip, measured_for_end, predict_row_s
from .timing import Timer, copy_ceiling, run_row_timing
from .warmup import WarmAhead, warm_compile

PROC_T0 = time.time()  # --end-s counts from here: the caller's timeout started with the process


def parse_list(s, conv, name):
    out = []
    for tok in s.split(","):
        tok = tok.strip()
        if not tok:
            continue
        try:
            out.append(conv(tok))
        except ValueError:
            die_usage(f"bad value {tok!r} in --{name} (want {getattr(conv, '__name__', 'a value')}s, comma-separated)")
    if not out:
        die_usage(f"--{name} is empty")
    for i, v in enumerate(out):  # a repeated value would plan a row twice (and --merge refuses such runs)
        if v in out[:i]:
            die_usage(f"--{name}: {v!r} given twice")
    return out


class DefaultsShown(argparse.HelpFormatter):
    """--help with each option's default, where it has one worth showing
    (not for flags or empty values)."""

    def _get_help_string(self, action):
        h = action.help or ""
        d = action.default
        if not (d is None or d is False or d == "" or d is argparse.SUPPRESS) and "%(default)" not in h \
                and action.option_strings:
            h += " (default: %(default)s)"
        return h


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=sys.modules[__package__].__doc__.split("\n")[0], formatter_class=DefaultsShown,
        epilog="Merge runs into one table (no GPU): peers.py --merge A.json B.json ... --json OUT --md OUT")
    p.add_argument("--H", default="1536,2048,4096,5120,6144", help="hidden sizes of plain and res rows (comma list)")
    p.add_argument("--T", default="4097,65537,98304,131072", help="tokens T (comma list; per-head forms: T tokens of 24 or 4 heads)")
    p.add_argument("--w", default="bf16,fp32", help="weight dtypes: bf16, fp32")
    p.add_argument("--ops", default=",".join(OPS), help="ops timed: " + ", ".join(OPS))
    p.add_argument("--peers", default=",".join(ALL_PEERS),
                   help="peers beside normgate (Q is QuACK: it needs nvidia-cutlass-dsl 4.7 with its cu13 libs, "
                        "docs/perf/peers.md D3; the committed matrix ran eager,TC,TCd,F.rms_norm,Liger)")
    p.add_argument("--replays", type=int, default=201, help="timed graph replays per implementation and op (>= 201 for tables)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds the replays are split over (order rotated)")
    p.add_argument("--seeds", type=int, default=5, help="accuracy seeds per row (worst counts)")
    p.add_argument("--family", default="normal", help="input family of the accuracy seeds: " + ", ".join(FAMILIES))
    p.add_argument("--forms", default="plain",
                   help="plain, res (at each --H), heads24, heads4 (H = 256, T tokens)")
    p.add_argument("--deadline-s", type=float, default=0,
                   help="start no new row after this many seconds, counted from after torch's import (a hard cut, "
                        "no prediction; with --end-s both apply; 0: none)")
    p.add_argument("--end-s", type=float, default=0,
                   help="the caller stops the run this many seconds after the process started (tools/peers.sh "
                        "passes its timeout; peers.py does not stop itself): a row predicted to end later, with the "
                        "pending deferred accuracy phases, is not started, a smaller one may still be (prediction: "
                        "this run's rows' timing + accuracy scaled by element count, x1.3, +10 s, +100 s without a "
                        "warm-up; 0: none)")
    p.add_argument("--defer-accuracy", action="store_true",
                   help="time the rows a warm-up batch warmed back to back and run their accuracy phases "
                        "together, beside the next batch's compiles (more of the compile hidden than behind one "
                        "row's accuracy phase); same measurements, rows written when their accuracy ends. Needs "
                        "warm-ups (nothing is deferred with --no-warm-next); with --end-s the first row's accuracy "
                        "is not deferred; rows timed but not validated when the run stops are listed as skipped")
    p.add_argument("--done", default="",
                   help="comma-separated peers.py result JSONs (glob patterns allowed): rows already in them are "
                        "skipped, so a matrix spread over several calls continues where it stopped; a file counts "
                        "only if it was measured with the same --seeds, --family, --replays, --rounds and every "
                        "peer of --peers")
    p.add_argument("--plan", action="store_true",
                   help="print the rows this run would measure (after --done) and exit; needs no GPU or torch")
    p.add_argument("--gpu", default=None,
                   help="with --plan: count only --done results measured on the GPU of this name (as torch and "
                        "nvidia-smi spell it, e.g. 'NVIDIA H200'), as a run does with its own device's name")
    p.add_argument("--cupti", action="store_true",
                   help="also record each timed replay's span from CUPTI's graph-level trace (GPU timestamps of the "
                        "graph's first and last node, no launch latency) beside the CUDA events; the tables stay "
                        "on events, the JSON gets cupti_us and the log compares the two")
    p.add_argument("--no-warm-next", action="store_true",
                   help="do not compile the next rows' TC/TCd in child processes during a row's accuracy phase")
    p.add_argument("--warm-ahead", type=int, default=4, metavar="K",
                   help="when the next row's TC/TCd are not compiled yet (inductor's caches cold), compile the "
                        "next K rows' side by side, one child each (0..16; fewer where their GPU memory would pass half the free memory or "
                        "--deadline-s / --end-s leaves no time for the rows; 0: no warm-up children, as --no-warm-next, which wins over K)")
    p.add_argument("--warm-compile", default="", metavar="FORM,H,T,W",
                   help=argparse.SUPPRESS)  # internal: the child of the warm-up (compile one row's TC/TCd, exit)
    p.add_argument("--json", default="", help="write the result JSON here (atomically; after every row)")
    p.add_argument("--md", default="", help="write the Markdown tables here (atomically; after every row)")
    a = p.parse_args(argv)
    a.H = parse_list(a.H, int, "H")
    a.T = parse_list(a.T, int, "T")
    a.w = parse_list(a.w, str, "w")
    a.ops = parse_list(a.ops, str, "ops")
    a.peers = parse_list(a.peers, str, "peers")
    a.forms = parse_list(a.forms, str, "forms")
    for f in a.forms:
        if f not in FORMS:
            die_usage(f"--forms: unknown form {f!r} ({', '.join(FORMS)})")
    for w in a.w:
        if w not in ("bf16", "fp32"):
            die_usage(f"--w: unknown weight dtype {w!r} (bf16, fp32)")
    for op in a.ops:
        if op not in OPS:
            die_usage(f"--ops: unknown op {op!r} ({', '.join(OPS)})")
    for peer in a.peers:
        if peer not in ALL_PEERS:
            die_usage(f"--peers: unknown peer {peer!r} ({', '.join(ALL_PEERS)})")
    if a.replays < 3 or a.rounds < 1 or a.replays < a.rounds:
        die_usage(f"--replays {a.replays} / --rounds {a.rounds}: need replays >= rounds >= 1, replays >= 3")
    if a.deadline_s < 0:
        die_usage(f"--deadline-s {a.deadline_s}: need >= 0 (0: no deadline)")
    if a.end_s < 0:
        die_usage(f"--end-s {a.end_s}: need >= 0 (0: no prediction)")
    if not 0 <= a.warm_ahead <= 16:
        die_usage(f"--warm-ahead {a.warm_ahead}: need 0..16 (0: no warm-up children)")
    if a.seeds < 1:
        die_usage(f"--seeds {a.seeds}: need >= 1")
    if a.family not in FAMILIES:
        die_usage(f"--family {a.family!r}: unknown family ({', '.join(FAMILIES)})")
    for h in a.H:
        if not 1 <= h <= 16384:
            die_usage(f"--H {h}: outside 1..16384")
    for t in a.T:
        if not 1 <= t <= 2**31:
            die_usage(f"--T {t}: outside 1..2^31 (case ids' range)")
    return a


def run_row(torch, args, impls, errors, form, H, T, wname, timer, log, after_timing=None):
    """One row of the matrix: its timing phase (setup, graph captures,
    interleaved rounds), then after_timing() (where a warm-up batch may
    start: never beside a timing phase), then its accuracy phase; the result
    row (see run_row_timing and run_row_accuracy)."""
    row, live = run_row_timing(torch, args, impls, errors, form, H, T, wname, timer, log)
    if after_timing is not None:
        after_timing()
    return run_row_accuracy(torch, args, impls, row, live, log)


def main(argv):
    if argv[:1] == ["--merge"]:
        return merge(argv[1:])
    for opt in ("--done", "--gpu", "--json", "--md"):  # argparse keeps the last: a second one would drop the first
        if sum(a == opt or a.startswith(opt + "=") for a in argv) > 1:
            die_usage(f"{opt} given twice (--done takes comma-separated patterns)" if opt == "--done"
                      else f"{opt} given twice")
    if "--merge" in argv:
        die_usage("--merge must come first: peers.py --merge A.json B.json ... [--json OUT] [--md OUT]")
    args = parse_args(argv)
    if args.warm_compile:
        return warm_compile(args)
    if args.gpu is not None and not args.plan:
        die_usage(f"--gpu {args.gpu!r} is for --plan (a run counts the --done results of its own GPU)")
    every = plan_rows(args)
    if args.plan:
        if args.gpu is None:  # a run counts only its own GPU's results: a plan over several needs --gpu
            gpus = sorted({str(load_result(f, "--done")["meta"].get("gpu"))
                           for _, fs in done_files(args.done) for f in fs})
            if len(gpus) > 1:
                die_usage(f"--plan: the --done results ran on {len(gpus)} GPUs ({', '.join(map(repr, gpus))}); "
                          "a run counts only its own GPU's: give --gpu NAME")
        done = done_rows(args.done, args, gpu=args.gpu)
        plan = [r for r in every if r not in done]
        for form, H, wname, T in plan:
            print(f"[{T}, {H}] {wname} {form}")
        # Without --gpu every result counts; a run counts only its own GPU's.
        n_read = len({f for _, fs in done_files(args.done) for f in fs})
        n_used = len(set(done.values()))
        print(f"{len(plan)} rows to measure, {len(every) - len(plan)} already done "
              f"(in {n_used} of {n_read} --done files"
              + (f"; {n_read - n_used} counted no row here: other rows, another method, or a peer of --peers "
                 f"missing there, see the --done lines above)" if n_used < n_read else ")"))
        return 0
    try:
        import torch
    except ImportError as e:
        print(f"peers.py: torch is required: {e}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("peers.py: no CUDA device: nothing to measure", file=sys.stderr)
        return 2
    # Only results of this GPU count (D11: a matrix per kind of GPU), so the
    # rows are known once the device is: a row another GPU measured is
    # measured again here.
    done = done_rows(args.done, args, gpu=torch.cuda.get_device_properties(0).name)
    plan = [r for r in every if r not in done]
    if not plan:  # e.g. a shard whose rows an earlier call measured: no GPU time, no empty result
        print("peers.py: nothing to measure: every row of this run is in --done (no result written)", file=sys.stderr)
        return 0
    import normgate

    start = time.time()
    log_lines = []

    def log(s):
        log_lines.append(s)
        print(s, file=sys.stderr, flush=True)

    errors = {}
    # eps is the cases' (every case id here uses the default eps).
    try:
        eps = normgate.case_info(case_id("plain", args.H[0], args.T[0], args.w[0], args.family, 0))["eps"]
    except ValueError as e:
        die_usage(f"--family {args.family!r} / --H / --T: {e}")
    impls = make_impls(torch, set(args.peers), eps, errors)
    timer = Timer(torch)
    if args.cupti:
        from normgate import _lib as nglib
        # On from here to the end, before any graph is captured: a graph
        # instantiated before the trace was enabled crashed the process at
        # its first replay under it (H200; docs/perf/peers.md, D5). Never
        # disabled during the run (not even after a CuptiError), for the same
        # reason.
        try:
            nglib.graph_spans_start()
            nglib.graph_spans_take(1 << 16)
            timer.cupti = nglib.graph_spans_take
            log("CUPTI graph spans on (--cupti): recorded beside the CUDA events")
        except (RuntimeError, ValueError) as e:
            log(f"--cupti: CUPTI graph spans unavailable ({e}); CUDA events only")
    props = torch.cuda.get_device_properties(0)
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
        smi = smi.splitlines()[0] if smi else "unknown"  # one line per GPU; one driver
    except Exception:  # noqa: BLE001
        smi = "unknown"
    try:
        import triton
        tv = triton.__version__
    except Exception:  # noqa: BLE001
        tv = None
    meta = {"gpu": props.name, "driver": smi, "cuda": torch.version.cuda, "torch": torch.__version__,
            "triton": tv, "normgate": normgate.version(), "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "command": "python3 bench/peers.py " + " ".join(argv), "replays": args.replays, "rounds": args.rounds,
            "seeds": args.seeds, "family": args.family, "eps": eps, "peer_errors": errors,
            "method": "CUDA-graph replay, cold L2 (read flush), CUDA events, median; A/A copies of det and ours"}
    # cupti_us beside the events' us (tables: events); the events of a run
    # with CUPTI on are measured under its trace (one more synchronize per
    # block, a trace record per launch).
    meta["cupti"] = timer.cupti is not None
    # The accuracy phase's host threads (normgate.default_threads(), not the
    # OpenMP runtime's default that torch lowers; docs/perf/peers.md, D6).
    meta["threads"] = {"torch": torch.get_num_threads(), "oracle": normgate.default_threads()}
    log(f"host threads: torch {meta['threads']['torch']}, oracle and validators {meta['threads']['oracle']}")
    for k, v in errors.items():
        log(f"peer {k} unavailable: {v}")

    biggest = max(row_elements(form, H, T) for form, H, _, T in every) * 2 * 2
    with torch.cuda.stream(timer.stream):
        copy = copy_ceiling(torch, timer, biggest, args.replays)
    log("copy ceiling: " + ", ".join(f"{k} {v['GBps']:.0f} GB/s ({v['us']:.1f} us)"
                                     for k, v in copy["candidates"].items()) + f" for {copy['bytes']} bytes"
        + "".join(f"; {k} failed: {v}" for k, v in copy.get("errors", {}).items()))

    rows = []
    result = {"meta": meta, "copy": copy, "rows": rows}
    for form, H, wname, T in every:
        if (form, H, wname, T) in done:
            log(f"row [{T}, {H}] {wname} {form}: done in {done[(form, H, wname, T)]}, skipped")
    warm = WarmAhead(args, log)
    specs = [row_spec(form, H, T, wname) for form, H, wname, T in plan]  # plan's rows as warm-up specs

    def past_deadline():
        return bool(args.deadline_s) and time.time() - start > args.deadline_s

    pending = []  # --defer-accuracy: (row, live, label, prewarm) of rows timed, accuracy not yet run

    def owed_s():
        """Seconds the pending rows' accuracy phases are predicted to take
        (each row's predicted whole time less its timing already done)."""
        m = measured_for_end(rows)
        return sum(max(0.0, (predict_row_s(m, row_elements(p[0]["form"], p[0]["H"], p[0]["T"])) or 0)
                       - p[0]["phase_s"].get("setup", 0) - p[0]["phase_s"].get("timing", 0)) for p in pending)

    def start_batch(ups):
        """Warm-ups for the rows `ups` (WarmAhead.start keeps --warm-ahead of
        them), no more than the deadline leaves time for (~60 s a row). No
        child for a row the deadline will skip (it would only take cores from
        the accuracy phase, the oracle's), none if the next row is warm
        already; a failure here turns warm-ups off, never costs a row."""
        if not warm.enabled or not ups or past_deadline():
            return
        if args.end_s:  # no child for a row --end-s will skip; the first left is the next to run
            ups = [u for u in ups if not end_skip(args.end_s, time.time() - PROC_T0 + owed_s(), rows,
                                                  *parse_spec(u)[:3], warm=True)]
        if not ups or warm.warm(ups[0]):
            return
        if args.deadline_s:
            ups = ups[:max(1, int((args.deadline_s - (time.time() - start)) // 60))]
        try:
            warm.start(ups, torch.cuda.mem_get_info()[0])
        except Exception as e:  # noqa: BLE001
            log(f"  warm-up start failed ({type(e).__name__}: {e}); warm-ups off for this run")
            warm.enabled = False
            warm.finish(None, 0)
    start_batch(specs)  # the first rows compile side by side too (after the copy ceiling's timing, before any row's)

    def finish_row(row, label, prewarm):
        """A measured row into the result: logged, written (JSON and Markdown, atomically)."""
        if prewarm is not None:  # the child that compiled this row's TC/TCd during the previous row
            row["prewarm"] = prewarm
        row["copy_GBps"] = copy.get("GBps")
        rows.append(row)
        for op, r in row["ops"].items():
            log(f"{label} {op}: det {fmt(r['det_us'])} ours {fmt(r['ours_us'])} "
                f"sota {r.get('sota')} {fmt(r.get('sota_us'))} ({row['seconds']:.0f} s)")
        log(f"{label} phases: " + ", ".join(f"{k} {v:.1f} s" for k, v in row.get("phase_s", {}).items())
            + (f"; warm-up waited {prewarm['waited_s']:.1f} s (rc {prewarm['rc']})" if prewarm else ""))
        atomic_write(args.json, json.dumps(result, indent=1))
        atomic_write(args.md, markdown(meta, rows, copy))
        try:
            log(f"{label} accuracy parts: " + acc_parts(row))
        except Exception as e:  # noqa: BLE001 - a log line never costs the run
            log(f"{label} accuracy parts: not available ({type(e).__name__}: {e})")

    def flush():
        """--defer-accuracy: the pending rows' accuracy phases, in order;
        each row is written when its own ends. A row whose accuracy phase
        fails outside its seeds (each seed's failure is recorded in the row)
        goes to failed_rows."""
        while pending:
            row, live, label, prewarm = pending.pop(0)
            try:
                with torch.cuda.stream(timer.stream):  # as run_row's accuracy phase
                    run_row_accuracy(torch, args, impls, row, live, log)
            except Exception as e:  # noqa: BLE001
                log(f"row {label} failed in its accuracy phase: {type(e).__name__}: {e}")
                log(traceback.format_exc())
                meta.setdefault("failed_rows", []).append([row["T"], row["H"], row["w"], row["form"],
                                                           f"accuracy: {type(e).__name__}: {e}"])
                try:
                    torch.cuda.synchronize()
                except Exception as e2:  # noqa: BLE001 - a sticky CUDA error: no later row can run
                    log(f"CUDA context unusable after row {label}'s accuracy phase ({type(e2).__name__}): stopping")
                    meta["stopped"] = f"CUDA context unusable after row {label}'s accuracy phase"
                    unpend("accuracy not run: CUDA context unusable")
                    return False
                continue
            # Its own phases (not the rows timed between): the default path's wall
            # seconds less the seed-0 input generation before its timing.
            row["seconds"] = sum(row["phase_s"].values())
            finish_row(row, label, prewarm)
        return True

    def skip_rest(k):
        """The plan's rows after the k-th into meta["skipped"] (the run stops)."""
        for f2, h2, w2, t2 in plan[k + 1:]:
            meta.setdefault("skipped", []).append([t2, h2, w2, f2])

    def unpend(why):
        """Pending rows that will not get their accuracy phase go to
        meta["skipped"] (a later run with --done measures them again)."""
        while pending:
            row, _, label, _ = pending.pop(0)
            log(f"row {label}: timed, {why}: not written (skipped)")
            meta.setdefault("skipped", []).append([row["T"], row["H"], row["w"], row["form"]])

    try:
        for k, (form, H, wname, T) in enumerate(plan):
            label = f"[{T}, {H}] {wname} {form}"
            prewarm = None
            # --end-s: a row that would not fit even warm is skipped before any wait for its
            # warm-up; rows timed with their accuracy still pending owe its predicted share.
            owed = owed_s()
            why = end_skip(args.end_s, time.time() - PROC_T0 + owed, rows, form, H, T, warm=True)
            if not why and not past_deadline():
                left = args.deadline_s - (time.time() - start) if args.deadline_s else 900
                if args.end_s:  # wait no longer than leaves the row (warm) its predicted time
                    est = predict_row_s(measured_for_end(rows), row_elements(form, H, T)) or 0
                    left = min(left, max(0.0, args.end_s - (time.time() - PROC_T0) - owed - est - END_TAIL_S))
                try:
                    prewarm = warm.finish(specs[k], left)
                except Exception as e:  # noqa: BLE001 - the warm-up never costs the run
                    log(f"  warm-up bookkeeping failed ({type(e).__name__}: {e}); row compiles as usual")
                    prewarm, warm.enabled = None, False
                    warm.finish(None, 0)
            if past_deadline():  # already at the row's start, or after waiting for its warm-up
                warm.finish(None, 0)  # a child warming a row that will not run
                log(f"deadline (after {prewarm['waited_s']:.0f} s waiting for the warm-up): row {label} skipped"
                    if prewarm else f"deadline: row {label} skipped")
                meta.setdefault("skipped", []).append([T, H, wname, form])
                continue
            if not why:  # again, after the wait, knowing whether the row is warm
                compiles = any(n in impls for n in ("TC", "TCd"))
                why = end_skip(args.end_s, time.time() - PROC_T0 + owed, rows, form, H, T,
                               warm=not compiles or (prewarm is not None and prewarm.get("rc") == 0))
            if why:
                log(f"end: row {label} skipped ({why})")
                meta.setdefault("skipped", []).append([T, H, wname, form])
                warm.drop(specs[k])  # its own warm-up, if still running; children of later rows go on
                start_batch(specs[k + 1:])  # a smaller row after it may still fit: warm it
                if not flush():  # the pending accuracy phases beside that batch
                    skip_rest(k)
                    break
                continue

            def after(ups=specs[k + 1:]):
                start_batch(ups)  # after this row's timing
            t0 = time.time()
            try:
                with torch.cuda.stream(timer.stream):
                    if args.defer_accuracy:
                        row, live = run_row_timing(torch, args, impls, errors, form, H, T, wname, timer, log)
                    else:
                        row = run_row(torch, args, impls, errors, form, H, T, wname, timer, log, after_timing=after)
            except Exception as e:  # noqa: BLE001
                log(f"row {label} failed: {type(e).__name__}: {e}")
                log(traceback.format_exc())
                meta.setdefault("failed_rows", []).append([T, H, wname, form, f"{type(e).__name__}: {e}"])
                try:
                    torch.cuda.synchronize()
                except Exception as e2:  # noqa: BLE001 - a sticky CUDA error: every later row would fail
                    log(f"CUDA context unusable after row {label} ({type(e2).__name__}): stopping")
                    meta["stopped"] = f"CUDA context unusable after row {label}"
                    skip_rest(k)
                    unpend("accuracy not run: CUDA context unusable")
                    break
                continue
            if timer.cupti_off and not meta.get("cupti_off"):
                meta["cupti_off"] = {"at_row": label, "why": timer.cupti_off}  # rows from there: events only
            if not args.defer_accuracy:
                row["seconds"] = time.time() - t0
                finish_row(row, label, prewarm)
                continue
            pending.append((row, live, label, prewarm))
            nxt = specs[k + 1] if k + 1 < len(specs) else None
            # Deferred only while --end-s can predict (a measured row: the first row's accuracy runs at once).
            if nxt is not None and nxt in warm.ready and not warm.procs and not past_deadline() \
                    and (rows or not args.end_s):
                log(f"{label}: accuracy deferred (the next row is warm: timed first)")
                continue
            start_batch(specs[k + 1:])  # the next rows compile beside the pending accuracy phases
            if not flush():
                skip_rest(k)
                break
        flush()  # rows timed before a deadline or end skip
    finally:
        warm.finish(None, 0)  # no child outlives the run (an exception or Ctrl-C included)
        if pending:  # an exception or Ctrl-C with rows timed but not validated: listed, never written
            unpend("run interrupted before its accuracy phase")
            atomic_write(args.json, json.dumps(result, indent=1))
            atomic_write(args.md, markdown(meta, rows, copy))
    # Again at the end: rows skipped or failed after the last measured row
    # are recorded only here.
    atomic_write(args.json, json.dumps(result, indent=1))
    atomic_write(args.md, markdown(meta, rows, copy))
    if not rows:
        print("peers.py: no row could be measured", file=sys.stderr)
        return 1
    print(markdown(meta, rows, copy))
    return 0
