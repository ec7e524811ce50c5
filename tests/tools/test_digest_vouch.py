"""tools/digest_vouch.sh on the CPU models (docs/perf/routes.md D23).

tests/data/routes/small.toml's bwd_det_chunked windows gated and approved on
the CPU models in a scratch folder; the script then gives bwd_det_lean (the
same bits) those records through digests and `approvals --vouch`, on a copy
(the file the records came from is left as it was); --windows narrows the
records; a failure of bwd_det_lean remembered beside the approvals refuses
the vouch in its window (exit 1); bad arguments are exit 2 before any work.

Usage: python3 test_digest_vouch.py NORMGATE_BINARY
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "tools", "digest_vouch.sh")
FAST = ["--backend", "cpu", "--threads", "1", "--seeds", "3x1", "--t-per-window", "4", "--dense-points", "2",
        "--quiet"]


def run(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def lean_records(path):
    with open(path) as f:
        return [r for r in json.load(f)["approvals"] if r["variant"] == "bwd_det_lean"]


def main():
    ng = os.path.abspath(sys.argv[1])
    build = os.path.dirname(os.path.dirname(ng))  # BUILD/apps/normgate
    fails = []

    def check(cond, what, out=""):
        if not cond:
            fails.append(what + ("\n" + out[-2000:] if out else ""))

    with tempfile.TemporaryDirectory() as d:
        for f in ("small.toml", "small.policy.toml"):
            shutil.copy(os.path.join(ROOT, "tests", "data", "routes", f), d)
        g = run([ng, "gate", os.path.join(d, "small.toml"), "--windows", "variant=bwd_det_chunked", "--approve"] + FAST)
        check(g.returncode == 0, "gate --approve: exit %d" % g.returncode, g.stdout)
        approvals = os.path.join(d, "small.approvals.json")
        before = open(approvals, "rb").read()

        base = ["bash", SCRIPT, "--build", build, "--as", "bwd_det_lean", "--from", "bwd_det_chunked",
                "--approvals", approvals, "--backend", "cpu"]
        v = run(base + ["--out", os.path.join(d, "v")])
        check(v.returncode == 0, "vouch: exit %d" % v.returncode, v.stdout)
        got = lean_records(os.path.join(d, "v", "small.approvals.json"))
        check(sorted(r["window"]["T"][0] for r in got) == [1, 1, 101], "vouch: lean's windows %r" % got, v.stdout)
        check(all(r.get("vouched", {}).get("variant") == "bwd_det_chunked" for r in got), "vouch: not vouched", "")
        check(open(approvals, "rb").read() == before, "the source approvals file was written")

        w = run(base + ["--windows", "H=256", "--out", os.path.join(d, "w")])
        check(w.returncode == 0, "--windows: exit %d" % w.returncode, w.stdout)
        got = lean_records(os.path.join(d, "w", "small.approvals.json"))
        check([r["window"]["H"] for r in got] == [256], "--windows H=256: %r" % got, w.stdout)

        # A failure of bwd_det_lean's source remembered beside the approvals:
        # the vouch of that window is refused (exit 1, nothing written).
        src = run([ng, "variants"]).stdout
        line = next(l for l in src.splitlines() if l.startswith("bwd_det_lean "))
        short = line.split("src=")[1].split()[0]
        with open(os.path.join(d, "w", "bwd_det_chunked-as-bwd_det_lean.json")) as f:
            full = json.load(f)["variants"]["bwd_det_lean"]
        check(full.startswith(short), "lean's source hash %s vs %s" % (full, short))
        rec = {"backend": "cpu-model", "date": "2026-12-08T00:00:00Z", "gated_T": [1, 100], "gpu": "cpu-model",
               "normgate_commit": "test", "normgate_version": "0.2.0", "source_sha256": full,
               "variant": "bwd_det_lean",
               "window": {"H": 64, "T": [2, 8], "form": "plain", "mode": "det", "op": "bwd", "w": "bf16"},
               "worst_case": "H=64,T=5,w=bf16,form=plain,family=cancel,seed=1", "worst_err_tol": 3.5,
               "worst_output": "dx"}
        rec["record_sha256"] = hashlib.sha256(
            json.dumps(rec, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
        with open(os.path.join(d, "small.rejections.json"), "w") as f:
            json.dump({"format": "normgate-rejections/1", "rejections": [rec]}, f)
        r = run(base + ["--out", os.path.join(d, "r")])
        check(r.returncode == 1, "a refuted window: exit %d (want 1)" % r.returncode, r.stdout)
        check("T=1..100" in r.stdout and "rejections" in r.stdout, "the refusal does not name it", r.stdout)
        check(lean_records(os.path.join(d, "r", "small.approvals.json")) == [], "a refused vouch wrote records",
              r.stdout)

        # Usage errors: exit 2, no output folder made.
        bad = [
            (["--as", "bwd_det_lean", "--from", "bwd_det_chunked"], "--build BUILD is required"),
            (["--build", build, "--from", "bwd_det_chunked"], "--as W is required"),
            (["--build", build, "--as", "bwd_det_lean"], "at least one --from V"),
            (["--build", build, "--as", "x", "--from", "x"], "is the --as variant"),
            (["--build", build, "--as", "w", "--from", "v", "--from", "v"], "given twice"),
            (["--build", build, "--as", "w", "--from", "v", "--backend", "tpu"], "is not gpu or cpu"),
            (["--build", build, "--as", "w", "--from", "v", "--deadline-s", "1.5"], "not a whole number"),
            (["--build", d, "--as", "w", "--from", "v"], "apps/normgate is missing"),
            (["--build", build, "--as", "w", "--from", "v", "--approvals", os.path.join(d, "small.toml")],
             "not named STEM.approvals.json"),
            (["--build", build, "--as", "w;rm", "--from", "v"], "is not a variant name"),
            (["--bogus"], "unknown argument '--bogus'"),
        ]
        for args, needle in bad:
            out = os.path.join(d, "bad")
            b = run(["bash", SCRIPT] + args + ["--out", out])
            check(b.returncode == 2 and needle in b.stdout, "%r: exit %d, want 2 and %r" % (args, b.returncode, needle),
                  b.stdout)
            check(not os.path.exists(out), "%r made its output folder" % (args,))
        # An unknown variant is refused by normgate's own check (exit 2).
        u = run(base[:4] + ["bwd_no_such"] + base[6:] + ["--out", os.path.join(d, "u")])
        check(u.returncode == 2 and "bwd_no_such" in u.stdout, "unknown --as: exit %d" % u.returncode, u.stdout)
        h = run(["bash", SCRIPT, "--help"])
        check(h.returncode == 0 and "Approvals for a new deterministic variant" in h.stdout, "--help")

    for f in fails:
        print("FAIL:", f)
    print("ok" if not fails else "%d failures" % len(fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
