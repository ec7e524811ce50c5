"""tools/timings_merge.py: the groups of NEW replace those groups in BASE,
every other point of BASE is kept as it was, OUT is written whole (temp file
then rename); a bad input or OUT naming an input exits 2 and writes nothing.
Runs under pytest or as `python3 tests/tools/test_timings_merge.py`."""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TOOL = os.path.join(ROOT, "tools", "timings_merge.py")


def point(op, H, w, form, T, us):
    return {"op": op, "H": H, "w": w, "form": form, "T": T, "aa_variant": "a", "aa_floor": 0.01,
            "median_us": us, "rounds_us": {k: [v] * 3 for k, v in us.items()}}


def timings(points, date, commit):
    return {"format": "normgate-timings/1", "gpu": "G", "driver": "d", "cuda": "c", "date": date,
            "normgate_commit": commit, "rounds": 3, "reps": 50, "points": points}


def run(*args):
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)


def test_new_groups_replace_old_ones():
    with tempfile.TemporaryDirectory() as d:
        base = timings([point("fwd", 256, "bf16", "heads24", 1, {"a": 5.0}),
                        point("fwd", 256, "bf16", "heads24", 16, {"a": 6.0}),
                        point("fwd", 256, "fp32", "heads24", 1, {"a": 7.0}),
                        point("bwd", 4096, "bf16", "plain", 1, {"b": 9.0})], "2026-12-01T00:00:00Z", "aaa")
        # NEW carries the per-round A/A repeats (docs/perf/routes.md D9); BASE
        # predates them: both kinds of point survive the merge as they were.
        new = timings([dict(point("fwd", 256, "bf16", "heads24", 1, {"a": 5.5, "n": 4.0}), aa_rounds_us=[5.4, 5.6, 5.5]),
                       dict(point("fwd", 256, "bf16", "heads24", 16, {"a": 6.5, "n": 5.0}), aa_rounds_us=[6.5] * 3)],
                      "2026-12-02T00:00:00Z", "bbb")
        paths = [os.path.join(d, n) for n in ("base.json", "new.json", "out.json")]
        for p, t in zip(paths, (base, new)):
            with open(p, "w") as f:
                json.dump(t, f)
        r = run(*paths)
        assert r.returncode == 0, r.stderr
        out = json.load(open(paths[2]))
        keys = sorted((p["op"], p["w"], p["form"], p["T"]) for p in out["points"])
        # the bf16 heads24 group replaced, the others kept.
        assert keys == [("bwd", "bf16", "plain", 1), ("fwd", "bf16", "heads24", 1), ("fwd", "bf16", "heads24", 16),
                        ("fwd", "fp32", "heads24", 1)]
        got = {(p["op"], p["w"], p["T"]): p["median_us"] for p in out["points"]}
        assert got[("fwd", "bf16", 1)] == {"a": 5.5, "n": 4.0}
        assert got[("fwd", "bf16", 16)] == {"a": 6.5, "n": 5.0}
        assert got[("fwd", "fp32", 1)] == {"a": 7.0}
        aa = {(p["w"], p["T"]): p.get("aa_rounds_us") for p in out["points"] if p["op"] == "fwd"}
        assert aa == {("bf16", 1): [5.4, 5.6, 5.5], ("bf16", 16): [6.5] * 3, ("fp32", 1): None}
        assert out["normgate_commit"] == "bbb" and out["date"] == "2026-12-02T00:00:00Z"
        assert [m["normgate_commit"] for m in out["merged_from"]] == ["aaa", "bbb"]
        assert [m["points"] for m in out["merged_from"]] == [2, 2]
        assert oct(os.stat(paths[2]).st_mode & 0o777) == "0o644"
        assert not [n for n in os.listdir(d) if n.startswith(".timings_merge.")]
        # A merge over an existing OUT keeps its mode (it came back 0644).
        os.chmod(paths[2], 0o600)
        r = run(*paths)
        assert r.returncode == 0, r.stderr
        assert oct(os.stat(paths[2]).st_mode & 0o777) == "0o600"


def test_bad_inputs_exit_2_and_write_nothing():
    with tempfile.TemporaryDirectory() as d:
        good = os.path.join(d, "good.json")
        with open(good, "w") as f:
            json.dump(timings([point("fwd", 256, "bf16", "heads4", 1, {"a": 1.0})], "x", "y"), f)
        bad = os.path.join(d, "bad.json")
        with open(bad, "w") as f:
            f.write('{"format": "other"}')
        other_reps = os.path.join(d, "reps.json")
        t = timings([point("fwd", 256, "bf16", "heads4", 1, {"a": 1.0})], "x", "y")
        t["reps"] = 100
        with open(other_reps, "w") as f:
            json.dump(t, f)
        def write(name, pts, **over):
            t = timings(pts, "x", "y")
            t.update(over)
            path = os.path.join(d, name)
            with open(path, "w") as f:
                json.dump(t, f)
            return path
        base2 = write("base2.json", [point("fwd", 256, "bf16", "heads4", 1, {"a": 1.0}),
                                      point("fwd", 256, "bf16", "heads4", 16, {"a": 1.0})])
        short = write("short.json", [point("fwd", 256, "bf16", "heads4", 1, {"a": 2.0, "n": 1.0})])
        dup = write("dup.json", [point("fwd", 256, "bf16", "heads4", 1, {"a": 2.0})] * 2)
        gpu = write("gpu.json", [point("fwd", 256, "bf16", "heads4", 1, {"a": 1.0})], gpu="other")
        mixed = write("mixed.json", [point("fwd", 256, "bf16", "heads4", 1, {"a": 2.0, "n": 1.0}),
                                      point("fwd", 256, "bf16", "heads4", 16, {"a": 2.0})])
        nan = os.path.join(d, "nan.json")
        with open(nan, "w") as f:
            f.write(json.dumps(timings([point("fwd", 256, "bf16", "heads4", 1, {"a": 1.0})], "x", "y"))
                    .replace('"a": 1.0}, "rounds_us"', '"a": NaN}, "rounds_us"'))
        out = os.path.join(d, "out.json")
        # What derive would read wrongly or refuse later: a key it ignores,
        # times that are not numbers, a grid T missing from a replaced group.
        moded = dict(point("fwd", 256, "bf16", "heads4", 1, {"a": 2.0}), mode="det")
        mode = write("mode.json", [moded])
        strs = write("strs.json", [dict(point("fwd", 256, "bf16", "heads4", 1, {"a": 2.0}), rounds_us={"a": ["1"]})])
        floor = write("floor.json", [dict(point("fwd", 256, "bf16", "heads4", 1, {"a": 2.0}), aa_floor=-1)])
        aa2 = write("aa2.json", [dict(point("fwd", 256, "bf16", "heads4", 1, {"a": 2.0}), aa_rounds_us=[2.0, 2.1])])
        aa0 = write("aa0.json", [dict(point("fwd", 256, "bf16", "heads4", 1, {"a": 2.0}), aa_rounds_us=[2.0, 0, 2.1])])
        aav = write("aav.json", [dict(point("fwd", 256, "bf16", "heads4", 1, {"b": 2.0}), aa_rounds_us=[2.0] * 3)])
        aab = write("aab.json", [dict(point("fwd", 256, "bf16", "heads4", 1, {"a": 2.0}), aa_rounds_us=[True] * 3)])
        aan = write("aan.json", [dict(point("fwd", 256, "bf16", "heads4", 1, {"a": 2.0}), aa_rounds_us=-1.5)])
        two = write("two.json", [dict(point("fwd", 256, "bf16", "heads4", 1, {"a": 2.0}), rounds_us={"a": [2.0, 2.0]})])
        mixaa = write("mixaa.json", [dict(point("fwd", 256, "bf16", "heads4", 1, {"a": 2.0}), aa_rounds_us=[2.0] * 3),
                                     point("fwd", 256, "bf16", "heads4", 16, {"a": 2.0})])
        huge = os.path.join(d, "huge.json")
        with open(huge, "w") as f:
            f.write(json.dumps(timings([point("fwd", 256, "bf16", "heads4", 1, {"a": 1.0})], "x", "y"))
                    .replace('"aa_floor": 0.01', '"aa_floor": 1' + "0" * 400))
        giant = os.path.join(d, "giant.json")
        with open(giant, "w") as f:
            f.write(json.dumps(timings([point("fwd", 256, "bf16", "heads4", 1, {"a": 1.0})], "x", "y"))
                    .replace('"aa_floor": 0.01', '"aa_floor": 1' + "0" * 5000))
        big = os.path.join(d, "big.json")
        with open(big, "w") as f:
            f.truncate(65 << 20)  # sparse: a size, no data
        hstr = write("hstr.json", [dict(point("fwd", 256, "bf16", "heads4", 1, {"a": 2.0}), H="256")])
        grid_base = write("grid_base.json", [point("fwd", 256, "bf16", "heads4", t, {"a": 1.0}) for t in (1, 8, 16)] +
                          [point("bwd", 256, "bf16", "heads4", t, {"a": 1.0}) for t in (1, 8, 16)])
        no8 = write("no8.json", [point("fwd", 256, "bf16", "heads4", t, {"a": 1.0, "n": 0.5}) for t in (1, 16)])
        nodate = write("nodate.json", [point("fwd", 256, "bf16", "heads4", 1, {"a": 2.0})], date=None)
        srounds = write("srounds.json", [point("fwd", 256, "bf16", "heads4", 1, {"a": 2.0})], rounds="3")
        mfrom = write("mfrom.json", [point("fwd", 256, "bf16", "heads4", 1, {"a": 2.0})], merged_from=[1, "x", None])
        dupkey = os.path.join(d, "dupkey.json")
        with open(dupkey, "w") as f:
            f.write(json.dumps(timings([point("fwd", 256, "bf16", "heads4", 1, {"a": 1.0})], "x", "y"))
                    .replace('"format":', '"gpu": "other", "format":', 1))
        for args, needle in (((base2, mode, out), "exactly the keys"), ((base2, strs, out), "rounds_us must map"),
                             ((base2, floor, out), "aa_floor must be a number >= 0"),
                             ((base2, hstr, out), "H must be a whole number"),
                             ((base2, aa2, out), "2 values, but a has 3 rounds"),
                             ((base2, aa0, out), "aa_rounds_us must be a list of times > 0"),
                             ((base2, aav, out), "aa_variant 'a' has no rounds_us"),
                             ((base2, aab, out), "list of times > 0, got [True, True, True]"),
                             ((base2, aan, out), "list of times > 0, got -1.5"),
                             ((base2, two, out), "rounds_us has [2] rounds, the file says rounds = 3"),
                             ((base2, mixaa, out), "has points with aa_rounds_us and points without"),
                             ((base2, huge, out), "huge.json"),
                             ((base2, giant, out), "giant.json"),
                             ((base2, big, out), "more than a timings file has"),
                             ((grid_base, no8, out), "lacks T = [8] of the T grid"),
                             ((base2, nodate, out), "date must be a string"),
                             ((base2, srounds, out), "rounds must be a whole number >= 1, got '3'"),
                             ((base2, mfrom, out), "merged_from must be a list of objects"),
                             ((base2, dupkey, out), "key 'gpu' given twice"),
                             ((good, base2, os.path.join(d, "x") + os.sep), "is a folder or empty")):
            r = run(*args)
            assert r.returncode == 2 and needle in r.stderr, (args, r.returncode, r.stderr)
            assert not os.path.exists(out) and not os.path.exists(os.path.join(d, "x"))
        os.symlink(d, os.path.join(d, "link"))
        os.mkdir(os.path.join(d, "folder"))
        fifo = os.path.join(d, "fifo.json")
        os.mkfifo(fifo)
        out = os.path.join(d, "out.json")
        for args, needle in (((base2, short, out), "lacks T = [16], the ends"), ((base2, dup, out), "a second point"),
                             ((base2, gpu, out), "gpu 'other' differs"), ((base2, mixed, out), "different candidates"),
                             ((base2, nan, out), "NaN is not a number"),
                             ((good, base2, os.path.join(d, "link", "good.json")), "one of the inputs"),
                             ((good, base2, os.path.join(d, "folder")), "is a folder"),
                             ((good, base2, "-"), "OUT '-': give a file"),
                             ((good, base2, fifo), "exists and is not a regular file"),
                             ((good, bad, out), "bad.json"), ((good, os.path.join(d, "none.json"), out), "none.json"),
                             ((good, other_reps, out), "rounds/reps"), ((good, good, good), "one of the inputs"),
                             ((good,), "Usage")):
            r = run(*args)
            assert r.returncode == 2, (args, r.returncode)
            assert needle in r.stderr or needle == "Usage" and "tools/timings_merge.py BASE NEW OUT" in r.stderr, r.stderr
            assert not os.path.exists(out) and not os.path.exists("-")
            assert not [n for n in os.listdir(d) if n.startswith(".timings_merge.")], args


if __name__ == "__main__":
    test_new_groups_replace_old_ones()
    test_bad_inputs_exit_2_and_write_nothing()
    print("ok")
