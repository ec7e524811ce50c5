"""bench/peers.py --merge on stored H200 results (no GPU, no torch): rows of
every run in order (a quoted pattern's files in natural order: run-2 before
run-10), each row's "of copy" from its own run's ceiling, every
run's command in the header, and a row present in two runs refused (exit 2);
--plan with --done: the rows of earlier results are skipped.
Runs under pytest or as `python3 tests/bench/test_peers_merge.py`."""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
PEERS = os.path.join(ROOT, "bench", "peers.py")
A = os.path.join(ROOT, "docs", "results", "peers", "earlier", "2026-11-30", "peers.json")
B = os.path.join(ROOT, "docs", "results", "peers", "earlier", "2026-11-29", "peers.json")


def run(*args):
    return subprocess.run([sys.executable, PEERS, "--merge", *args], capture_output=True, text=True)


def table_of_files(*paths):
    """The Markdown that --merge writes for the given result files or patterns."""
    with tempfile.TemporaryDirectory() as d:
        out_m = os.path.join(d, "m.md")
        r = run(*paths, "--md", out_m)
        assert r.returncode == 0, r.stderr
        return open(out_m).read()


def table_of(result):
    """The Markdown that --merge writes for one (edited) result."""
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "s.json")
        with open(src, "w") as f:
            json.dump(result, f)
        return table_of_files(src)


def test_merge_keeps_every_row_and_its_own_copy_ceiling():
    with tempfile.TemporaryDirectory() as d:
        out_j, out_m = os.path.join(d, "m.json"), os.path.join(d, "m.md")
        r = run(A, B, "--json", out_j, "--md", out_m)
        assert r.returncode == 0, r.stderr
        m = json.load(open(out_j))
        a, b = json.load(open(A)), json.load(open(B))
        assert len(m["rows"]) == len(a["rows"]) + len(b["rows"])
        assert [x["T"] for x in m["rows"]] == [x["T"] for x in a["rows"]] + [x["T"] for x in b["rows"]]
        assert m["rows"][0]["copy_GBps"] == a["copy"]["GBps"]
        assert m["rows"][-1]["copy_GBps"] == b["copy"]["GBps"]
        md = open(out_m).read()
        # A merge: the title gives its runs' date range, the header no command; each run's
        # command is listed under Runs at the end, with its file and date, in the order given.
        d0, d1 = sorted([a["meta"]["date"], b["meta"]["date"]])
        assert md.startswith(f"# normgate vs peers on {a['meta']['gpu']} (2 runs, {d0} to {d1})\n"), md[:200]
        runs = md[md.index("\n## Runs\n"):]
        assert "Commands: the 2 runs' own, under Runs at the end." in md and md.index("Commands:") < md.index("## Summary")
        assert (f"1. peers.json ({a['meta']['date']}): `{a['meta']['command']}`\n"
                f"2. peers.json ({b['meta']['date']}): `{b['meta']['command']}`\n") in runs, runs
        # With --md the table goes to the file only; stdout says what was merged.
        n = len(a["rows"]) + len(b["rows"])
        assert r.stdout.strip() == f"merged {n} rows from 2 runs into {out_m} and {out_j}", r.stdout
        r = run(A, B)  # no --md: the table on stdout
        assert r.returncode == 0 and r.stdout.strip() == md.strip()
        # The first row's "of copy" is ours GB/s over its own run's ceiling.
        r0 = a["rows"][0]["ops"]["fwd"]
        assert f"({r0['ours_GBps'] / a['copy']['GBps']:.2f}, {r0['ours_GBps'] / 4800:.2f})" in md


def test_merge_refuses_a_row_in_two_runs_and_a_non_result():
    r = run(A, A, "--json", os.devnull)
    assert r.returncode == 2 and "is in both" in r.stderr
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        f.write('{"rows": []}')
    r = run(f.name)
    os.unlink(f.name)
    assert r.returncode == 2 and "not a peers.py result" in r.stderr


def test_summary_and_tables_per_form():
    import math
    import re
    with tempfile.TemporaryDirectory() as d:
        out_j, out_m = os.path.join(d, "m.json"), os.path.join(d, "m.md")
        assert run(A, B, "--json", out_j, "--md", out_m).returncode == 0
        rows = json.load(open(out_j))["rows"]
        md = open(out_m).read()
    # One table per form present, in FORMS order.
    assert md.index("## Form plain") < md.index("## Form res") and "## Form heads4" not in md
    # The summary's bwd SOTA/ours geomean, recomputed here from the rows.
    q = [r["ops"]["bwd"]["sota_over_ours"] for r in rows if r["ops"]["bwd"].get("sota_over_ours")]
    g = math.exp(sum(map(math.log, q)) / len(q))
    line = next(ln for ln in md.splitlines() if ln.startswith("| bwd |"))
    assert f"{g:.3f}x [{min(q):.2f}, {max(q):.2f}]" in line, line
    f = [r["ops"]["bwd"]["fastest_any_over_ours"] for r in rows if r["ops"]["bwd"].get("fastest_any_over_ours")]
    gf = math.exp(sum(map(math.log, f)) / len(f))
    assert line.endswith(f"| {sum(x < 1 for x in q)} of {len(q)} | {gf:.3f}x [{min(f):.2f}, {max(f):.2f}] ({len(f)} rows) |"), line
    # Every bwd row below 1.0 against an in-budget SOTA is named as a shortfall.
    short = re.search(r"Targets \(issue 8\): .*?\*\*not met\*\* on (\d+) rows", md)
    n = sum(1 for r in rows for op in ("bwd", "2xfwd+bwd") if (r["ops"][op].get("sota_over_ours") or 2) < 1)
    assert short and int(short.group(1)) == n
    # The + / - marks: a det/ours above 1 by more than the row's floor is '+'.
    for r in rows:
        o = r["ops"]["bwd"]
        cell = f"{o['det_over_ours']:.3f}x"
        mark = " +" if o["det_over_ours"] - 1 > o["aa_floor"] else " -" if 1 - o["det_over_ours"] > o["aa_floor"] else " |"
        assert cell + mark in md, (cell, mark)


def test_merge_lists_as_missing_only_rows_no_run_measured():
    """Runs of several calls: a row one run skipped at its deadline and a later
    run measured is not missing; a row skipped by two runs is listed once."""
    a = json.load(open(A))
    r1, r2 = dict(a), dict(a)
    r1["rows"], r2["rows"] = a["rows"][:1], a["rows"][1:2]
    t0, t1 = a["rows"][0], a["rows"][1]
    spell = lambda row: [row["T"], row["H"], row["w"], row.get("form", "plain")]  # noqa: E731
    r1["meta"] = dict(a["meta"], skipped=[spell(t1), [99999, 4096, "bf16", "plain"]])
    r2["meta"] = dict(a["meta"], skipped=[[99999, 4096, "bf16", "plain"]],
                      failed_rows=[spell(t0) + ["CUDA error: out of memory"]])
    with tempfile.TemporaryDirectory() as d:
        p1, p2, out_j = os.path.join(d, "1.json"), os.path.join(d, "2.json"), os.path.join(d, "m.json")
        json.dump(r1, open(p1, "w"))
        json.dump(r2, open(p2, "w"))
        r = run(p1, p2, "--json", out_j, "--md", os.devnull)
        assert r.returncode == 0, r.stderr
        m = json.load(open(out_j))
    # Writing to /dev/null leaves it the device (a rename over it made it a
    # regular file when the tests ran as root).
    assert not os.path.isfile(os.devnull), "the merge replaced /dev/null with a file"
    assert m["meta"]["skipped"] == [[99999, 4096, "bf16", "plain"]]
    assert m["meta"]["failed_rows"] == []


def test_a_quoted_pattern_merges_run_files_in_natural_order():
    """A matrix's runs, run-1, run-2, ..., run-10, merged by the quoted pattern
    run-*.json come in the order they ran (run-2 before run-10, not the name
    order run-1, run-10, run-2): the rows, "Runs" and merged_from in that order,
    and where two runs name the same peer in peer_errors the later one's
    message is kept. Files named one by one keep the order given."""
    a = json.load(open(A))
    assert len(a["rows"]) >= 3
    names = ["run-1", "run-2", "run-10"]  # name order: run-1, run-10, run-2
    with tempfile.TemporaryDirectory() as d:
        for i, n in enumerate(names):
            r = dict(a, rows=[a["rows"][i]])
            r["meta"] = dict(a["meta"], date=f"2026-12-0{i + 1}", command=f"peers.py # {n}",
                             peer_errors={"Q": f"no QuACK in {n}"})
            json.dump(r, open(os.path.join(d, n + ".json"), "w"))
        out_j, out_m = os.path.join(d, "m.json"), os.path.join(d, "m.md")
        r = run(os.path.join(d, "run-*.json"), "--json", out_j, "--md", out_m)
        assert r.returncode == 0, r.stderr
        m, md = json.load(open(out_j)), open(out_m).read()
        assert [os.path.basename(f) for f in m["meta"]["merged_from"]] == ["run-1.json", "run-2.json", "run-10.json"]
        assert [x["file"] for x in m["meta"]["runs"]] == ["run-1.json", "run-2.json", "run-10.json"]
        assert [(x["T"], x["H"], x["w"], x.get("form")) for x in m["rows"]] == \
            [(x["T"], x["H"], x["w"], x.get("form")) for x in a["rows"][:3]]
        assert m["meta"]["command"] == "peers.py # run-1; peers.py # run-2; peers.py # run-10"
        assert m["meta"]["peer_errors"] == {"Q": "no QuACK in run-10"}  # the last run's
        runs = md[md.index("\n## Runs\n"):]
        assert ("1. run-1.json (2026-12-01): `peers.py # run-1`\n"
                "2. run-2.json (2026-12-02): `peers.py # run-2`\n"
                "3. run-10.json (2026-12-03): `peers.py # run-10`\n") in runs, runs
        # Named one by one, the files keep the order given.
        r = run(*[os.path.join(d, n + ".json") for n in ("run-10", "run-1", "run-2")], "--json", out_j, "--md", out_m)
        assert r.returncode == 0, r.stderr
        m = json.load(open(out_j))
        assert [x["file"] for x in m["meta"]["runs"]] == ["run-10.json", "run-1.json", "run-2.json"]
        assert m["meta"]["peer_errors"] == {"Q": "no QuACK in run-2"}


def test_summary_thresholds_on_synthetic_rows():
    """Ratios on both sides of 1 and of the floor, which the stored rows lack."""
    a = json.load(open(A))
    row = a["rows"][0]
    for op, o in row["ops"].items():
        o["aa_floor"] = 0.01
    row["ops"]["bwd"].update(det_over_ours=0.995, sota_over_ours=1.25)        # within the floor, SOTA met
    row["ops"]["2xfwd+bwd"].update(det_over_ours=1.005, sota_over_ours=1.05)
    a["rows"] = [row]
    md = table_of(a)
    assert "0.995x |" in md and "0.995x -" not in md           # floor honoured
    assert "| bwd | 0.995x [0.99, 0.99] | 1 of 1 | 0 of 1 | 1.250x [1.25, 1.25] | 0 of 1 |" in md
    assert "| 2xfwd+bwd | 1.005x [1.00, 1.00] | 0 of 1 | 0 of 1 | 1.050x [1.05, 1.05] | 0 of 1 |" in md
    assert "SOTA is slower than a peer that missed" not in md  # the stored row's SOTA is its fastest peer
    # The same row with a faster peer over budget on bwd (fastest peer/ours 0.9): the last column
    # shows it, and the line says SOTA/ours there is above what the fastest peer gives.
    other = next(n for n in row["impls"] if n not in ("det", "ours", "det#2", "ours#2", row["ops"]["bwd"]["sota"]))
    row["ops"]["bwd"].update(fastest_any=other, fastest_any_over_ours=0.9)
    md = table_of(a)
    line = next(ln for ln in md.splitlines() if ln.startswith("| bwd |"))
    assert line.endswith("| 1.250x [1.25, 1.25] | 0 of 1 | 0.900x [0.90, 0.90] (1 rows) |"), line
    assert ("On 1 bwd rows the SOTA is slower than a peer that missed the budget" in md
            and "(up to 1.25x); SOTA/ours geomean without them: bwd — (no other row)." in md), md
    assert md.index("## Summary") < md.index("! = no peer within the budget") < md.index("## Form ")  # legend under the summary
    assert "with an in-budget SOTA: met" in md and "bwd 1.250x (met); 2xfwd+bwd 1.050x (**not met**)" in md
    assert "## Every implementation" in md
    # The op-rows where ours is at least as fast as the SOTA, listed (fwd, below 1, is not).
    w = next(ln for ln in md.splitlines() if ln.startswith("| [")).split(" | ")[0][2:]
    assert (f"Where ours is at least as fast as the in-budget SOTA (2 op-rows; SOTA/ours): {w} bwd 1.25x; "
            f"{w} 2xfwd+bwd 1.05x.") in md, md
    row["ops"]["bwd"]["sota_over_ours"] = 0.999
    row["ops"]["2xfwd+bwd"]["sota_over_ours"] = 0.5
    assert "Where ours is at least" not in table_of(a)
    # The header says when an implementation moved more bytes per second than the copy ceiling.
    a["copy"]["GBps"] = 1e9
    assert "not the HBM ceiling" not in table_of(a)
    rates = sorted(((row["ops"][op]["bytes"] / i["us"][op] / 1e3, n, op)
                    for n, i in row["impls"].items() if not i.get("error") for op in i["us"]), reverse=True)
    top, n, op = rates[0]
    a["copy"]["GBps"] = (top + rates[1][0]) / 2  # only the fastest exceeds it
    md = table_of(a)
    assert (f"The copy kernels are not the HBM ceiling: {n} at {w} {op} moves "
            f"{top / a['copy']['GBps']:.2f}x its run's copy bandwidth") in md, md[:1500]


def test_merge_usage_errors_name_the_bad_value_and_a_quoted_pattern_is_expanded():
    r = run(A, "--json")
    assert r.returncode == 2 and "--json needs a file name" in r.stderr, r.stderr
    r = run(A, "--json", "--md", os.devnull)  # --md is not a file name for --json
    assert r.returncode == 2 and "--json needs a file name (got '--md')" in r.stderr, r.stderr
    r = subprocess.run([sys.executable, PEERS, "--json", os.devnull, "--merge", A], capture_output=True, text=True)
    assert r.returncode == 2 and "--merge must come first" in r.stderr, r.stderr
    r = run(os.path.join(ROOT, "no-such-dir", "run-*.json"))
    assert r.returncode == 2 and "matches no file" in r.stderr, r.stderr
    with tempfile.TemporaryDirectory() as d:
        bad = os.path.join(d, "bad.json")
        open(bad, "w").write("{")
        r = run(bad)
        assert r.returncode == 2 and f"{bad}: not valid JSON" in r.stderr, r.stderr
        # The matrix's own pattern, quoted: every run file, as the shell would list them.
        pat = os.path.join(ROOT, "docs", "results", "peers", "run-s18-*.json")
        out_m = os.path.join(d, "m.md")
        r = run(pat, "--md", out_m)
        import glob
        n = sum(len(json.load(open(f))["rows"]) for f in glob.glob(pat))
        assert r.returncode == 0 and r.stdout.startswith(f"merged {n} rows from {len(glob.glob(pat))} runs"), r.stdout
    r = plan("--T", "4097,abc")
    assert r.returncode == 2 and "bad value 'abc' in --T" in r.stderr
    r = plan("--T", str(2**31 + 1))
    assert r.returncode == 2 and "outside 1..2^31" in r.stderr


def test_a_faster_peer_over_budget_is_named_beside_the_sota():
    """[98304, 2048] fp32 res bwd (run-s18-c2-1.json; docs/perf/peers.md, D4):
    TC is fastest but its dw is over budget, so SOTA is F.rms_norm (13.3x
    slower than ours); the cell must say TC was faster and why it is not
    SOTA."""
    src = os.path.join(ROOT, "docs", "results", "peers", "run-s18-c2-1.json")
    a = json.load(open(src))
    row = next(r for r in a["rows"] if (r["T"], r["H"], r["w"], r["form"]) == (98304, 2048, "fp32", "res"))
    b = row["ops"]["bwd"]
    assert (b["sota"], b["fastest_any"]) == ("F.rms_norm", "TC")
    tc = row["impls"]["TC"]
    a["rows"] = [row]
    md = table_of(a)
    line = next(x for x in md.splitlines() if x.startswith("| [98304, 2048] w fp32, res | bwd |"))
    want = f"{b['sota_us']:.2f} F.rms_norm (faster, over budget: ! {tc['us']['bwd']:.2f} TC, dw {tc['err_tol']['dw']:.3g})"
    assert want in line, line
    assert tc["err_tol"]["dw"] > 1 and f"{b['sota_over_ours']:.3f}x" in line
    # fwd: TC is SOTA and the fastest peer, so no note.
    assert row["ops"]["fwd"]["sota"] == row["ops"]["fwd"]["fastest_any"] == "TC"
    fwd = next(x for x in md.splitlines() if x.startswith("| [98304, 2048] w fp32, res | fwd |"))
    assert "faster, over budget" not in fwd, fwd
    # A faster peer whose accuracy run gave no err/tol is "not validated", never "None".
    del row["impls"]["TC"]["err_tol"]
    line = next(x for x in table_of(a).splitlines() if x.startswith("| [98304, 2048] w fp32, res | bwd |"))
    assert f"(faster, over budget: ! {tc['us']['bwd']:.2f} TC, not validated)" in line and "None" not in line, line


def test_the_merged_matrix_notes_exactly_the_rows_where_sota_is_not_the_fastest():
    import math
    m = os.path.join(ROOT, "docs", "results", "peers")
    rows = json.load(open(os.path.join(m, "peers.json")))["rows"]
    want = sum(1 for r in rows for o in r["ops"].values() if o.get("sota") and o["fastest_any"] != o["sota"])
    md = open(os.path.join(m, "peers.md")).read()
    assert table_of_files(os.path.join(m, "run-*.json")) == md  # the committed table is what --merge writes now
    got = sum(1 for x in md.splitlines() if x.startswith("| [") and "(faster, over budget: !" in x)
    assert want >= 13 and got == want, (want, got)
    # The summary says how many, and the bwd geomean over the rows whose SOTA is the fastest peer.
    hid = {op: sum(1 for r in rows if r["ops"][op].get("sota") and r["ops"][op]["fastest_any"] != r["ops"][op]["sota"])
           for op in ("bwd", "2xfwd+bwd")}
    clean = [r["ops"]["bwd"]["sota_over_ours"] for r in rows
             if r["ops"]["bwd"].get("sota") and r["ops"]["bwd"]["fastest_any"] == r["ops"]["bwd"]["sota"]]
    g = math.exp(sum(map(math.log, clean)) / len(clean))
    assert f"On {hid['bwd']} bwd, {hid['2xfwd+bwd']} 2xfwd+bwd rows the SOTA is slower" in md
    assert f"SOTA/ours geomean without them: bwd {g:.3f}x;" in md


def test_row_time_prediction_for_end_s():
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from peers import matrix, schedule
    assert matrix.row_elements("heads24", 256, 4097) == 4097 * 24 * 256
    assert matrix.row_elements("res", 6144, 131072) == 131072 * 6144
    assert schedule.predict_row_s([], 10**9) is None
    # docs/results/peers/run-s18-c3-1.json: [131072, 4096] fp32 res: timing
    # 36.4 s + accuracy 71.7 s (537M elements); [4097, 4096] fp32 res: 1.8 + 1.2 s.
    done = [(131072 * 4096, 108.1), (4097 * 4096, 3.0)]
    e = 131072 * 6144  # [131072, 6144] res: only the big row is comparable (>= half its size)
    big = 1.3 * 108.1 * 1.5 + 10
    assert abs(schedule.predict_row_s(done, e) - big) < 1e-9
    assert abs(schedule.predict_row_s(done, e, warm=False) - (big + 100)) < 1e-9
    # Half the size is still comparable; below half it is not (then the biggest row is scaled).
    assert abs(schedule.predict_row_s([(100, 10.0), (49, 9.8)], 98) - (1.3 * 9.8 * 98 / 49 + 10)) < 1e-9
    assert abs(schedule.predict_row_s([(100, 10.0), (48, 9.8)], 98) - (1.3 * 10.0 * 98 / 100 + 10)) < 1e-9
    # Nothing comparable: the biggest row scaled up (not the small row's higher per-element cost).
    assert abs(schedule.predict_row_s([(4097 * 4096, 5.9), (65537 * 4096, 40.0)], 4 * 65537 * 4096)
               - (1.3 * 160.0 + 10)) < 1e-9
    # The loop's decision: rows as results hold them; phase_s's timing + accuracy, not setup, is
    # scaled (a row that compiled in its setup would predict its compile x the element ratio).
    rows = [{"form": "res", "H": 4096, "T": 131072, "seconds": 170.0,
             "phase_s": {"setup": 61.9, "timing": 36.4, "accuracy": 71.7}},
            {"form": "heads24", "H": 256, "T": 4097, "seconds": 6.0}]
    tail = schedule.END_TAIL_S
    assert schedule.end_skip(0, 500, rows, "res", 6144, 131072, True) == ""                     # no --end-s
    assert schedule.end_skip(700, 500, [], "res", 6144, 131072, True) == ""                     # nothing to predict from
    assert schedule.end_skip(700, 700 - tail, [], "res", 6144, 131072, True) == "no time left before --end-s"
    assert schedule.end_skip(700, 700 - big - tail - 1, rows, "res", 6144, 131072, True) == ""  # fits, 1 s to spare
    why = schedule.end_skip(700, 700 - big - tail + 1, rows, "res", 6144, 131072, True)
    assert why == f"predicted {big:.0f} s, {big + tail - 1:.0f} s left before --end-s", why
    assert schedule.end_skip(700, 700 - big - tail - 1, rows, "res", 6144, 131072, False)       # +100 s unwarmed
    # A heads24 row at T=4097 (25M elements) still fits where the big row does not.
    assert schedule.end_skip(700, 700 - big - tail + 1, rows, "heads24", 256, 4097, True) == ""
    r = plan("--end-s", "-1")
    assert r.returncode == 2 and "--end-s -1.0: need >= 0" in r.stderr, r.stderr


def test_run_row_is_timing_then_after_timing_then_accuracy():
    """run_row's phases in order (the warm-up batch starts between them, never
    beside a timing phase), and --defer-accuracy runs the same two halves."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from peers import cli
    calls = []
    saved = cli.run_row_timing, cli.run_row_accuracy
    try:
        cli.run_row_timing = lambda *a: (calls.append("timing"), ({"row": 1}, ["det"]))[1]
        cli.run_row_accuracy = lambda torch, args, impls, row, live, log: (calls.append(("accuracy", row, live)),
                                                                             row)[1]
        row = cli.run_row(None, None, {}, {}, "plain", 64, 8, "bf16", None, None,
                            after_timing=lambda: calls.append("after"))
    finally:
        cli.run_row_timing, cli.run_row_accuracy = saved
    assert calls == ["timing", "after", ("accuracy", {"row": 1}, ["det"])] and row == {"row": 1}
    assert cli.parse_args(["--defer-accuracy"]).defer_accuracy and not cli.parse_args([]).defer_accuracy


def test_split_known_reuses_only_identical_outputs():
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from peers import accuracy
    seen = {"y": [((1, 2, 3), {"err_tol": 0.25, "pass": True})], "dx": [((4, 5), {"err_tol": 2.0, "pass": False})]}
    same = lambda a, b: a == b  # noqa: E731
    todo, reused = accuracy.split_known({"y": (1, 2, 3), "dx": (4, 6), "dw": (7,)}, seen, same)
    assert todo == {"dx": (4, 6), "dw": (7,)}
    assert reused == {"y": {"err_tol": 0.25, "pass": True}}
    todo, reused = accuracy.split_known({"dx": (4, 5)}, seen, same)
    assert todo == {} and reused["dx"]["pass"] is False  # a failing entry is reused as failing
    todo, reused = accuracy.split_known({"y": (1, 2, 3)}, {}, same)
    assert todo == {"y": (1, 2, 3)} and reused == {}


def plan(*args):
    return subprocess.run([sys.executable, PEERS, "--plan", *args], capture_output=True, text=True)


def test_plan_skips_the_rows_of_done_results():
    # A's rows: [65537, 2048] and [65537, 6144] plain, [65537, 2048] res (BF16 w).
    # A measured 2 seeds without QuACK (Q could not be imported there).
    same = ("--seeds", "2", "--peers", "eager,TC,TCd,F.rms_norm,Liger")
    r = plan("--H", "2048,6144", "--T", "65537,131072", "--w", "bf16", "--forms", "plain,res", "--done", A, *same)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[:-1] == ["[131072, 2048] bf16 plain", "[131072, 6144] bf16 plain", "[131072, 2048] bf16 res",
                          "[65537, 6144] bf16 res", "[131072, 6144] bf16 res"], lines
    assert lines[-1] == "5 rows to measure, 3 already done (in 1 of 1 --done files)", lines[-1]
    # A run asking for 5 seeds and every peer (QuACK included) counts none of A's rows.
    r = plan("--H", "2048,6144", "--T", "65537,131072", "--w", "bf16", "--forms", "plain,res", "--done", A)
    assert r.returncode == 0 and r.stdout.splitlines()[-1].startswith("8 rows to measure, 0 already done")
    assert "not counted (seeds 2 vs 5, peer Q could not run there)" in r.stderr
    # The summary says that the file was read but counted nothing, and where to look.
    assert "(in 0 of 1 --done files; 1 counted no row here" in r.stdout.splitlines()[-1], r.stdout
    # A run that was not asked for QuACK (the H200 matrix's runs) counts none of
    # its rows for a run that asks for it, and all of them for one that does not.
    h200 = os.path.join(ROOT, "docs", "results", "peers", "run-s15-c2-2.json")
    r = plan("--H", "4096,5120", "--T", "65537", "--w", "bf16", "--forms", "plain", "--done", h200)
    assert r.returncode == 0 and r.stdout.splitlines()[-1].startswith("2 rows to measure, 0 already done"), r.stdout
    assert "rows without peer Q (not asked for there) not counted" in r.stderr
    r = plan("--H", "4096,5120", "--T", "65537", "--w", "bf16", "--forms", "plain", "--done", h200,
             "--peers", "eager,TC,TCd,F.rms_norm,Liger")
    assert r.returncode == 0 and r.stdout.splitlines()[-1].startswith("0 rows to measure, 2 already done"), r.stdout
    # The whole issue-8 matrix: 5 H x 4 T x 2 w for plain and res, 4 T x 2 w per head form.
    r = plan("--forms", "plain,res,heads24,heads4")
    assert r.returncode == 0 and r.stdout.splitlines()[-1].startswith("96 rows to measure, 0 already done")


def test_done_patterns_may_match_nothing_but_paths_must_exist():
    r = plan("--done", os.path.join(ROOT, "docs", "results", "no-such-dir", "*.json"))
    assert r.returncode == 0, r.stderr
    r = plan("--done", os.path.join(ROOT, "no-such-file.json"))
    assert r.returncode == 2 and "no-such-file.json" in r.stderr
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        f.write('{"rows": []}')
    r = plan("--done", f.name)
    os.unlink(f.name)
    assert r.returncode == 2 and "not a peers.py result" in r.stderr



def test_gpu_state_sums_counter_growth_and_keeps_extremes():
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import gpu_state
    assert gpu_state.GpuState.open(libname="libno-such-nvml.so.1") is None
    s = lambda mhz, pw, pv, tv, r: {"sm_mhz": mhz, "power_w": pw, "temp_c": 50, "power_violation_ns": pv,
                                    "thermal_violation_ns": tv, "reasons": r}
    acc = {}
    gpu_state.accumulate(acc, s(1980, 400.0, 1_000_000, 0, 0), s(1755, 690.5, 4_500_000, 0, 0x4))
    gpu_state.accumulate(acc, s(1980, 300.0, 4_500_000, 7, 0), s(1980, 350.0, 3_000_000, 7, 0x1))
    # 3.5 ms of power capping in the first block; a counter going backwards adds nothing
    assert acc["power_violation_ms"] == 3.5 and acc["thermal_violation_ms"] == 0.0
    assert (acc["sm_mhz_min"], acc["sm_mhz_max"], acc["power_w_max"]) == (1755, 1980, 690.5)
    assert acc["reasons_or"] == 0x5 and acc["blocks"] == 2
    gpu_state.accumulate(acc, None, s(1, 1.0, 0, 0, 0))  # no sample: nothing changes
    assert acc["blocks"] == 2 and acc["sm_mhz_min"] == 1755


def test_spread_lines_name_the_noisy_implementations_only():
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from peers import timing
    row = {"impls": {
        "ours": {"p10_p90": {"fwd": [100.0, 101.0], "bwd": [100.0, 112.0]},
                 "round_us": {"bwd": [101.0, 111.5, 100.5]},
                 "gpu_state": {"power_violation_ms": 12.25, "sm_mhz_min": 1500, "sm_mhz_max": 1980, "reasons_or": 4}},
        "TC": {"p10_p90": {"fwd": [90.0, 90.5], "bwd": [80.0, 82.0]}},
    }}
    lines = timing.spread_lines(row, ["fwd", "bwd"])
    assert len(lines) == 1, lines
    assert "ours bwd p90/p10 1.120" in lines[0] and "101.0/111.5/100.5" in lines[0]
    assert "power-cap 12.2 ms" in lines[0] and "SM 1500-1980 MHz" in lines[0] and "0x4" in lines[0]

def test_acc_parts_sums_the_seeds_and_names_each_implementation():
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from peers import accuracy
    row = {"acc_generate_s": [0.5, 0.25], "acc_open_s": [1.25, 2.0],
           "acc_oracle_s": {"copy": 1.5, "open": 0.75, "validate": 2.0},
           "impls": {"det": {"acc_s": {"run": 0.5, "validate": 3.0}}, "TC": {}}}
    assert accuracy.acc_parts(row) == ("generate 0.8 s, inputs+oracle open 3.2 s; of which, with the validations: "
                                    "copy 1.5 s, open 0.8 s, validate 2.0 s; det run 0.5 + validate 3.0 s")


def test_family_list_matches_the_case_id_enum_and_an_unknown_family_is_a_usage_error():
    import re
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from peers import matrix
    h = open(os.path.join(ROOT, "seeds", "include", "normgate", "seeds", "case_id.h")).read()
    enum = re.search(r"enum class Family : \w+ \{([^}]*)\}", h).group(1)
    assert [t.split("=")[0].strip() for t in enum.split(",")] == matrix.FAMILIES
    r = plan("--family", "nosuch")
    assert r.returncode == 2 and "--family 'nosuch': unknown family" in r.stderr, r.stderr
    assert plan("--family", "cancel").returncode == 0


def first_ours_fraction(md):
    """(ours GB/s, of copy, of peak) of the first table row that has them."""
    import re
    m = re.search(r"\| (\d+) \(([0-9.]+), ([0-9.]+|—)\) \|", md)
    assert m, md[:400]
    return float(m.group(1)), m.group(2), m.group(3)


def test_of_peak_uses_the_gpu_of_the_run_and_none_for_an_unknown_one():
    a = json.load(open(A))
    assert a["meta"]["gpu"] == "NVIDIA H200"
    md = table_of(a)
    assert "HBM peak, 4800 GB/s (H200 HBM3e" in md
    gbps, _, peak = first_ours_fraction(md)
    row = next(r for r in a["rows"] for op in r["ops"].values() if op.get("ours_GBps"))
    op = next(op for op in row["ops"].values() if op.get("ours_GBps"))
    assert peak == f"{op['ours_GBps'] / 4800:.2f}"
    # The same rows as measured on an H100 SXM: 3350 GB/s, not the H200's 4800.
    a["meta"]["gpu"] = "NVIDIA H100 80GB HBM3"
    md = table_of(a)
    assert "HBM peak, 3350 GB/s (H100 SXM HBM3" in md and "4800" not in md
    assert first_ours_fraction(md)[2] == f"{op['ours_GBps'] / 3350:.2f}"
    assert float(first_ours_fraction(md)[2]) > float(peak)
    a["meta"]["gpu"] = "NVIDIA H100 PCIe"
    assert "HBM peak, 2000 GB/s" in table_of(a)
    a["meta"]["gpu"] = "NVIDIA H100 NVL"
    assert "HBM peak, 3900 GB/s" in table_of(a)
    for other in ("NVIDIA A100-SXM4-80GB", "NVIDIA GH200 480GB"):  # GH200 is not an H200
        a["meta"]["gpu"] = other
        md = table_of(a)
        assert f"No HBM peak is listed for {other}" in md
        assert first_ours_fraction(md)[2] == "—"


def test_merge_refuses_runs_on_different_gpus():
    a = json.load(open(A))
    b = json.load(open(B))
    b["meta"]["gpu"] = "NVIDIA H100 80GB HBM3"
    with tempfile.TemporaryDirectory() as d:
        pa, pb = os.path.join(d, "a.json"), os.path.join(d, "b.json")
        json.dump(a, open(pa, "w"))
        json.dump(b, open(pb, "w"))
        out_m = os.path.join(d, "m.md")
        r = run(pa, pb, "--md", out_m)
        assert r.returncode == 2, r.stderr
        assert "'NVIDIA H100 80GB HBM3'" in r.stderr and "'NVIDIA H200'" in r.stderr and "b.json" in r.stderr
        assert not os.path.exists(out_m)


def test_done_counts_only_results_of_the_runs_gpu():
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from argparse import Namespace
    from peers.merge import done_rows
    h100 = os.path.join(ROOT, "docs", "results", "peers", "matrix-h100", "run-h100-1.json")
    meta = json.load(open(h100))["meta"]
    assert meta["gpu"] == "NVIDIA H100 80GB HBM3"
    args = Namespace(peers=["eager", "TC", "TCd", "F.rms_norm", "Liger", "Q"], seeds=2, family="normal",
                     replays=meta["replays"], rounds=meta["rounds"])
    every = done_rows(h100, args)  # --plan: no GPU known, every result counts
    assert len(every) == 6 and ("heads24", 256, "bf16", 131072) in every
    assert done_rows(h100, args, gpu="NVIDIA H100 80GB HBM3") == every
    assert done_rows(h100, args, gpu="NVIDIA H200") == {}
    # --plan --gpu NAME counts as a run on that GPU would.
    rows = ("--forms", "heads24", "--T", "131072", "--w", "bf16", "--seeds", "2", "--done", h100)
    r = plan(*rows, "--gpu", "NVIDIA H100 80GB HBM3")
    assert r.returncode == 0 and r.stdout.splitlines()[-1].startswith("0 rows to measure"), r.stdout
    r = plan(*rows, "--gpu", "NVIDIA H200")
    assert r.returncode == 0 and r.stdout.splitlines()[-1].startswith("1 rows to measure"), r.stdout
    assert "measured on 'NVIDIA H100 80GB HBM3', this run on 'NVIDIA H200'" in r.stderr


def test_merge_checks_its_outputs_and_inputs_before_writing_anything():
    """--json / --md over an input, on one file, a directory, a missing
    folder; malformed results (a row without T, rows not a list, meta not an
    object, skipped entries too short) and NaN: each exit 2 naming the path,
    nothing written (an output over an input used to replace it; the others
    were tracebacks, some after --json was written)."""
    a = json.load(open(A))
    with tempfile.TemporaryDirectory() as d:
        pa = os.path.join(d, "a.json")
        json.dump(a, open(pa, "w"))
        before = open(pa).read()
        out_j, out_m = os.path.join(d, "o.json"), os.path.join(d, "o.md")
        for args, said in [((pa, "--json", pa, "--md", out_m), "is the input"),
                           ((pa, "--json", out_j, "--md", out_j), "--json and --md name one file"),
                           ((pa, "--json", d, "--md", out_m), "is a directory"),
                           ((pa, "--json", out_j, "--md", os.path.join(d, "no", "m.md")), "no folder"),
                           ((d,), "is a directory")]:
            r = run(*args)
            assert r.returncode == 2 and said in r.stderr, (args, r.stderr)
            assert "Traceback" not in r.stderr, r.stderr
            assert open(pa).read() == before
            assert not os.path.exists(out_j) and not os.path.exists(out_m), args
        bad = []
        x = json.loads(before); del x["rows"][0]["T"]; bad.append((x, "rows[0].T is missing"))
        x = json.loads(before); x["rows"] = "abc"; bad.append((x, "rows is not a list"))
        x = json.loads(before); x["meta"] = []; bad.append((x, "meta or copy is not an object"))
        x = json.loads(before); x["meta"]["skipped"] = [[1]]; bad.append((x, "meta.skipped is not a list"))
        x = json.loads(before); x["rows"][0]["impls"] = "x"; bad.append((x, "rows[0].impls is not an object"))
        for k, (res, said) in enumerate(bad):
            pb = os.path.join(d, f"b{k}.json")
            json.dump(res, open(pb, "w"))
            r = run(pb, "--json", out_j, "--md", out_m)
            assert r.returncode == 2 and f"{pb}: not a peers.py result: {said}" in r.stderr, (said, r.stderr)
            assert not os.path.exists(out_j) and not os.path.exists(out_m), said
        x = json.loads(before); x["meta"]["stopped"] = 3; bad.append((x, "meta.stopped is not a string"))
        x = json.loads(before); x["copy"]["GBps"] = "fast"; bad.append((x, "copy.GBps is not a number"))
        x = json.loads(before); x["meta"]["skipped"] = [["a", None, {}, []]]; bad.append((x, "meta.skipped"))
        for k, (res, said) in enumerate(bad[-3:]):
            pb = os.path.join(d, f"c{k}.json")
            json.dump(res, open(pb, "w"))
            r = run(pb, "--json", out_j, "--md", out_m)
            assert r.returncode == 2 and f"{pb}: not a peers.py result: {said}" in r.stderr, (said, r.stderr)
        fifo = os.path.join(d, "f.json")
        os.mkfifo(fifo)
        r = subprocess.run([sys.executable, PEERS, "--merge", fifo], capture_output=True, text=True, timeout=30)
        assert r.returncode == 2 and "not a regular file" in r.stderr, r.stderr
        pn = os.path.join(d, "nan.json")
        open(pn, "w").write(before.replace('"us": ', '"us": NaN, "was": ', 1))
        r = run(pn, "--json", out_j)
        assert r.returncode == 2 and "NaN is not JSON" in r.stderr, r.stderr
        assert not os.path.exists(out_j)


def test_plan_refuses_repeated_values_and_done_results_of_several_gpus():
    r = plan("--T", "1,1", "--H", "64", "--w", "bf16", "--forms", "plain", "--peers", "eager")
    assert r.returncode == 2 and "--T: 1 given twice" in r.stderr, r.stderr
    r = plan("--forms", "plain,plain")
    assert r.returncode == 2 and "--forms: 'plain' given twice" in r.stderr, r.stderr
    h100 = os.path.join(ROOT, "docs", "results", "peers", "matrix-h100", "run-h100-1.json")
    with tempfile.TemporaryDirectory() as d:
        other = json.load(open(h100))
        other["meta"]["gpu"] = "NVIDIA H200"
        po = os.path.join(d, "h200.json")
        json.dump(other, open(po, "w"))
        rows = ("--forms", "heads24", "--T", "131072", "--w", "bf16", "--seeds", "2", "--done", f"{h100},{po}")
        r = plan(*rows)
        assert r.returncode == 2 and "ran on 2 GPUs" in r.stderr and "give --gpu NAME" in r.stderr, r.stderr
        r = plan(*rows, "--gpu", "NVIDIA H200")
        assert r.returncode == 0, r.stderr
        r = plan("--forms", "heads24", "--done", h100, "--done", po)  # argparse would keep the last alone
        assert r.returncode == 2 and "--done given twice" in r.stderr, r.stderr


if __name__ == "__main__":
    test_merge_lists_as_missing_only_rows_no_run_measured()
    test_a_quoted_pattern_merges_run_files_in_natural_order()
    test_summary_and_tables_per_form()
    test_summary_thresholds_on_synthetic_rows()
    test_a_faster_peer_over_budget_is_named_beside_the_sota()
    test_merge_usage_errors_name_the_bad_value_and_a_quoted_pattern_is_expanded()
    test_the_merged_matrix_notes_exactly_the_rows_where_sota_is_not_the_fastest()
    test_row_time_prediction_for_end_s()
    test_run_row_is_timing_then_after_timing_then_accuracy()
    test_split_known_reuses_only_identical_outputs()
    test_plan_skips_the_rows_of_done_results()
    test_done_patterns_may_match_nothing_but_paths_must_exist()
    test_merge_keeps_every_row_and_its_own_copy_ceiling()
    test_merge_refuses_a_row_in_two_runs_and_a_non_result()
    test_of_peak_uses_the_gpu_of_the_run_and_none_for_an_unknown_one()
    test_merge_refuses_runs_on_different_gpus()
    test_done_counts_only_results_of_the_runs_gpu()
    test_merge_checks_its_outputs_and_inputs_before_writing_anything()
    test_plan_refuses_repeated_values_and_done_results_of_several_gpus()
    test_gpu_state_sums_counter_growth_and_keeps_extremes()
    test_spread_lines_name_the_noisy_implementations_only()
    test_acc_parts_sums_the_seeds_and_names_each_implementation()
    test_family_list_matches_the_case_id_enum_and_an_unknown_family_is_a_usage_error()
    print("test_peers_merge: ok")
