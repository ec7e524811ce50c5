"""tools/routed_records.py: which records a route table reads (mode rule of
routes.md D21 included), what --op, --skip-variant and --moved drop, stale
records dropped, records copied byte for byte, usage errors exit 2 with
nothing written. Runs under pytest or as
`python3 tests/tools/test_routed_records.py`."""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TOOL = os.path.join(ROOT, "tools", "routed_records.py")
sys.path.insert(0, os.path.join(ROOT, "tools"))
import routed_records as rr  # noqa: E402

H = rr.current_hashes(ROOT)


def rec(variant, op, T, Hh=2048, w="bf16", form="plain", mode=None, source=None, cases=10):
    win = {"H": Hh, "T": T, "form": form, "op": op, "w": w}
    if mode:
        win["mode"] = mode
    return {"variant": variant, "source_sha256": source or H[variant], "window": win, "cases": cases}


def route(variant, op, T, Hh=2048, w="bf16", form="plain", mode=None):
    r = {"op": op, "H": Hh, "w": w, "form": form, "T": T, "variant": variant}
    if mode:
        r["mode"] = mode
    return r


def test_selection_rules():
    routes = [route("fwd_wide", "fwd", [100, 200]),
              route("bwd_det_chunked", "bwd", [2, 131072], mode="det"),
              route("bwd_det_wreg", "bwd", [2, 4096], mode="nondet", w="fp32")]
    recs = [
        rec("fwd_wide", "fwd", [1, 100]),                        # 0 touches at T = 100: read
        rec("fwd_wide", "fwd", [201, 300]),                      # 1 just past: not read
        rec("fwd_wide", "fwd", [1, 131072], w="fp32"),           # 2 another w: not read
        rec("fwd_rowwise", "fwd", [100, 200]),                   # 3 another variant: not read
        rec("bwd_det_wreg", "bwd", [2, 4096], w="fp32", mode="det"),     # 4 det record, nondet route: read
        rec("bwd_det_chunked", "bwd", [2, 8448], mode="det"),    # 5 below the moved T: kept
        rec("bwd_det_chunked", "bwd", [2, 8449], mode="det"),    # 6 reaches past it: --moved
        rec("bwd_det_chunked", "bwd", [2, 16], mode="nondet"),   # 7 nondet record, det route: not read
        rec("bwd_det_chunked", "bwd", [2, 16], mode="det", Hh=4096),      # 8 another H: not read
        rec("bwd_det_chunked", "bwd", [2, 16], mode="det", source="0" * 64),  # 9 stale
    ]
    kept, dropped = rr.select(recs, routes, H, moved=[rr.parse_moved("op=bwd,H=1537..2048,T>8448")])
    assert [recs.index(r) for r in kept] == [0, 4, 5]
    assert dropped == {"read by no route": 5, "--moved": 1, "stale (another source hash)": 1}
    kept, dropped = rr.select(recs, routes, H, op="bwd", skip={"bwd_det_wreg"})
    assert [recs.index(r) for r in kept] == [5, 6]
    assert dropped["another op"] == 4 and dropped["--skip-variant bwd_det_wreg"] == 1


def run(*a):
    return subprocess.run([sys.executable, TOOL, *a], capture_output=True, text=True)


def test_cli_writes_the_subset_and_refuses_bad_input():
    with tempfile.TemporaryDirectory() as d:
        table = os.path.join(d, "t.toml")
        with open(table, "w") as f:
            f.write('arch = "sm90a"\nroute = [\n  { op = "fwd", H = 2048, w = "bf16", form = "plain", '
                    'T = [1, 131072], variant = "fwd_wide" },\n]\n')
        recs = [rec("fwd_wide", "fwd", [1, 4096]), rec("fwd_rowwise", "fwd", [1, 4096])]
        recs[0]["record_sha256"] = "a" * 64  # copied as it is, not recomputed
        ap = os.path.join(d, "t.approvals.json")
        with open(ap, "w") as f:
            json.dump({"format": "normgate-approvals/1", "approvals": recs}, f)
        out = os.path.join(d, "keep.json")
        r = run("--table", table, "--approvals", ap, "--out", out)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "kept     fwd fwd_wide: 1 records, 10 cases on record" in r.stdout, r.stdout
        assert "wrote    " in r.stdout and "1 of 2 records" in r.stdout
        got = json.load(open(out))
        assert got["format"] == "normgate-approvals/1" and got["approvals"] == [recs[0]]
        umask = os.umask(0)
        os.umask(umask)
        assert os.stat(out).st_mode & 0o777 == 0o666 & ~umask  # as open() makes a file, not 0600
        bad = [
            (["--moved", "op=bwd,H=2048,T>1"], "--moved"),
            (["--moved", "op=bwd,H=3000..2000,T>1"], "is empty"),
            (["--skip-variant", "no_such"], "no such variant"),
            (["--op", "both"], "invalid choice"),
        ]
        for extra, want in bad:
            if os.path.exists(out):
                os.unlink(out)
            r = run("--table", table, "--approvals", ap, "--out", out, *extra)
            assert r.returncode == 2 and want in r.stderr, (extra, r.stderr)
            assert not os.path.exists(out)
        r = run("--table", os.path.join(d, "none.toml"), "--approvals", ap, "--out", out)
        assert r.returncode == 2 and "--table" in r.stderr and not os.path.exists(out)
        with open(os.path.join(d, "broken.toml"), "w") as f:
            f.write("route = [ {\n")
        r = run("--table", os.path.join(d, "broken.toml"), "--approvals", ap, "--out", out)
        assert r.returncode == 2 and "not TOML" in r.stderr
        r = run("--table", table, "--approvals", table, "--out", out)
        assert r.returncode == 2 and "not JSON" in r.stderr
        r = run("--table", table, "--approvals", ap, "--out", os.path.join(d, "no", "dir", "k.json"))
        assert r.returncode == 2 and "no folder" in r.stderr
        assert not [f for f in os.listdir(d) if f.startswith(".routed-")]


if __name__ == "__main__":
    test_selection_rules()
    test_cli_writes_the_subset_and_refuses_bad_input()
    print("test_routed_records: ok")
