#!/usr/bin/env bash
# The GPU-side scripts refuse bad arguments before any work (exit 2, naming
# the value) and print their help: tools/h200.sh, tools/digest_carry.sh,
# tools/oracle_scaling.sh, tools/kernels_ab.sh and tools/retime_groups.sh.
# No GPU needed: every case below stops at argument checking.
set -u
root="$(cd "$(dirname "$0")/../.." && pwd)"
fail=0
expect() {  # expect CODE PATTERN -- command...
  local code="$1" pat="$2"; shift 3
  local out rc
  out="$("$@" 2>&1)"; rc=$?
  if [ "$rc" != "$code" ] || ! grep -q -- "$pat" <<<"$out"; then
    echo "FAIL: $* -> exit $rc (want $code), output: $out" >&2
    fail=1
  fi
}
# The real normgate, for what the scripts ask it about names (`routes
# --files`); the made-up ones below hand those calls to it.
real="${NG_REAL_NORMGATE:-$root/build/apps/normgate}"
[ -x "$real" ] || { echo "FAIL: no normgate binary at $real (set NG_REAL_NORMGATE)" >&2; exit 1; }
export NG_REAL_NORMGATE="$real"
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
H="$root/tools/h200.sh"
expect 2 "not a whole number of seconds" -- bash "$H" --out "$t/o" --deadline-s abc
expect 2 "unknown argument '--bogus'" -- bash "$H" --bogus
expect 2 "needs a folder" -- bash "$H" --out
expect 2 "unknown step 'test'" -- bash "$H" --out "$t/o" --steps "test sanitize"
expect 2 "is empty" -- bash "$H" --out "$t/o" --steps " "
expect 0 "Everything GPU-side in one run" -- bash "$H" --help
[ ! -e "$t/o" ] || { echo "FAIL: h200.sh made its output folder before refusing" >&2; fail=1; }
D="$root/tools/digest_carry.sh"
expect 2 "are required" -- bash "$D" --variant x
expect 2 "at least one --variant" -- bash "$D" --old "$t" --new "$t"
expect 2 "is not gpu or cpu" -- bash "$D" --old "$t" --new "$t" --variant x --backend tpu
expect 2 "not a whole number" -- bash "$D" --old "$t" --new "$t" --variant x --deadline-s 1.5
expect 2 "apps/normgate is missing" -- bash "$D" --old "$t" --new "$t" --variant x --out "$t/d"
expect 2 "unknown argument" -- bash "$D" --partial --what
expect 0 "Carry a variant's approvals" -- bash "$D" --help
[ ! -e "$t/d" ] || { echo "FAIL: digest_carry.sh made its output folder before refusing" >&2; fail=1; }
S="$root/tools/oracle_scaling.sh"
expect 2 "not a whole number of seconds" -- bash "$S" --out "$t/s" --deadline-s 2m
expect 2 "unknown argument '--bogus'" -- bash "$S" --bogus
expect 2 "needs a folder" -- bash "$S" --out ""
expect 2 "finish_bench is missing" -- env NORMGATE_BUILD="$t" bash "$S" --out "$t/s"
mkdir -p "$t/b/bench" && printf '#!/bin/sh\nexit 0\n' >"$t/b/bench/finish_bench" && chmod +x "$t/b/bench/finish_bench"
expect 2 "NG_OS_BLOCKS entry '-1'" -- env NORMGATE_BUILD="$t/b" NG_OS_BLOCKS="auto -1" bash "$S" --out "$t/s"
expect 2 "NG_OS_THREADS entry '0'" -- env NORMGATE_BUILD="$t/b" NG_OS_THREADS="0 2" bash "$S" --out "$t/s"
expect 2 "NG_OS_BLOCKS entry '3000000000'" -- env NORMGATE_BUILD="$t/b" NG_OS_BLOCKS=3000000000 bash "$S" --out "$t/s"
expect 2 "NG_OS_REPS 'x'" -- env NORMGATE_BUILD="$t/b" NG_OS_REPS=x bash "$S" --out "$t/s"
expect 2 "NG_OS_BUSY '-1'" -- env NORMGATE_BUILD="$t/b" NG_OS_BUSY=-1 bash "$S" --out "$t/s"
expect 2 "NG_OS_THREADS is empty" -- env NORMGATE_BUILD="$t/b" NG_OS_THREADS=" " bash "$S" --out "$t/s"
expect 2 "NG_OS_BLOCKS lists 'auto' twice" -- env NORMGATE_BUILD="$t/b" NG_OS_BLOCKS="auto 16 auto" bash "$S" --out "$t/s"
expect 2 "NG_OS_THREADS entry '\*'" -- env NORMGATE_BUILD="$t/b" NG_OS_THREADS="*" bash "$S" --out "$t/s"
expect 2 "at most 9 digits" -- env NORMGATE_BUILD="$t/b" bash "$S" --out "$t/s" --deadline-s 99999999999999999999
touch "$t/afile"
expect 2 "exists and is not a folder" -- env NORMGATE_BUILD="$t/b" bash "$S" --out "$t/afile"
expect 0 "How the oracle half's cost per element grows" -- bash "$S" --help
[ ! -e "$t/s" ] || { echo "FAIL: oracle_scaling.sh made its output folder before refusing" >&2; fail=1; }
# A finish_bench that fails: the script says so and exits 3.
printf '#!/bin/sh\nexit 1\n' >"$t/b/bench/finish_bench"
expect 3 "1 run(s) failed" -- env NORMGATE_BUILD="$t/b" NG_OS_THREADS=1 NG_OS_BLOCKS=auto bash "$S" --out "$t/s2"
# tools/kernels_ab.sh: usage errors before any run, then a run over two
# made-up kernels_bench builds (each writes one row of its own time and logs
# its turn): rounds alternate the order, and ab.md holds B/A.
K="$root/tools/kernels_ab.sh"
printf '#!/bin/sh\nexit 0\n' >"$t/kb" && chmod +x "$t/kb"
expect 2 "two or more --build" -- bash "$K" --build a="$t/kb" --out "$t/k"
expect 2 "is not an executable file" -- bash "$K" --build a="$t/kb" --build b="$t/none" --out "$t/k"
expect 2 "is not NAME=FILE" -- bash "$K" --build "a b=$t/kb" --build b="$t/kb" --out "$t/k"
expect 2 "name 'a' given twice" -- bash "$K" --build a="$t/kb" --build a="$t/kb" --out "$t/k"
expect 2 "from 1 to 99" -- bash "$K" --build a="$t/kb" --build b="$t/kb" --rounds 0 --out "$t/k"
expect 2 "from 30 to 999999999" -- bash "$K" --build a="$t/kb" --build b="$t/kb" --deadline-s 1234567890 --out "$t/k"
expect 2 "from 30 to 999999999" -- bash "$K" --build a="$t/kb" --build b="$t/kb" --deadline-s 5 --out "$t/k"
expect 2 "'--json=x' is set by this script" -- bash "$K" --build a="$t/kb" --build b="$t/kb" --out "$t/k" -- --json=x
expect 2 "'--json' is set by this script" -- bash "$K" --build a="$t/kb" --build b="$t/kb" --out "$t/k" -- --json x
expect 0 "An A/B (or A/B/C...) of kernels_bench" -- bash "$K" --help
[ ! -e "$t/k" ] || { echo "FAIL: kernels_ab.sh made its output folder before refusing" >&2; fail=1; }
for n in 10 12; do
  cat >"$t/kb$n" <<EOS
#!/bin/sh
while [ \$# -gt 0 ]; do [ "\$1" = --json ] && j="\$2"; shift; done
echo "kb$n" >>"$t/turns"
printf '{"rows": [{"shape": "4097x1536", "w": "bf16", "op": "fwd fwd_wide", "median_us": $n.0}]}' >"\$j"
EOS
  chmod +x "$t/kb$n"
done
expect 0 "| 4097x1536 | bf16 | fwd fwd_wide | 10.0 (10.0/10.0) | 12.0 (12.0/12.0) | 1.200 |" -- \
  bash "$K" --build old="$t/kb10" --build new="$t/kb12" --rounds 2 --out "$t/k" -- --reps 50 4097,1536
[ "$(tr '\n' ' ' <"$t/turns")" = "kb10 kb12 kb12 kb10 " ] ||
  { echo "FAIL: kernels_ab.sh ran in the order $(tr '\n' ' ' <"$t/turns") (want kb10 kb12 kb12 kb10)" >&2; fail=1; }
[ -f "$t/k/ab.md" ] && [ -f "$t/k/new-2.json" ] || { echo "FAIL: kernels_ab.sh left no ab.md or new-2.json" >&2; fail=1; }
printf '#!/bin/sh\nexit 1\n' >"$t/kbfail" && chmod +x "$t/kbfail"
expect 1 "kernels_ab: bad round 1 failed" -- bash "$K" --build old="$t/kb10" --build bad="$t/kbfail" --rounds 1 --out "$t/k2"
# Into the folder of the good run: its table and the new build's JSONs are
# not shown again as this run's.
expect 1 "(no round where both ran)" -- bash "$K" --build old="$t/kb10" --build new="$t/kbfail" --rounds 2 --out "$t/k"
[ ! -e "$t/k/new-2.json" ] || { echo "FAIL: kernels_ab.sh kept an earlier run's new-2.json" >&2; fail=1; }
printf '#!/bin/sh\nwhile [ $# -gt 0 ]; do [ "$1" = --json ] && j="$2"; shift; done\necho "{oops" >"$j"\n' >"$t/kbbad"
chmod +x "$t/kbbad"
expect 1 "a table could not be made" -- bash "$K" --build old="$t/kb10" --build bad="$t/kbbad" --rounds 1 --out "$t/k3"
# tools/retime_groups.sh: usage errors before any run; then a run with a
# made-up normgate whose bench times one group 10% faster and whose derive
# moves one window (the merged timings, the diff and the exit status are
# what is checked).
R="$root/tools/retime_groups.sh"
mkdir -p "$t/rb/apps"
expect 2 "is required" -- bash "$R" --spec x --gate-windows op=fwd
expect 2 "--spec FILE is required" -- bash "$R" --build "$t/rb" --gate-windows op=fwd
expect 2 "--gate-windows FILTER is required (--help lists the options)" -- bash "$R" --build "$t/rb" --spec x
expect 2 "--build needs a value, got the option '--spec'" -- bash "$R" --build --spec x --gate-windows op=fwd
expect 2 "apps/normgate is missing" -- bash "$R" --build "$t/rb" --spec x --gate-windows op=fwd --out "$t/r"
expect 2 "from 60 to" -- bash "$R" --build "$t/rb" --spec x --gate-windows op=fwd --deadline-s 59
expect 2 "from 60 to" -- bash "$R" --build "$t/rb" --spec x --gate-windows op=fwd --deadline-s 1e3
expect 2 "unknown argument '--bogus'" -- bash "$R" --bogus
expect 0 "Time some route groups again" -- bash "$R" --help
cat >"$t/rb/apps/normgate" <<'FAKE'
#!/usr/bin/env python3
import json, os, re, sys
a = sys.argv[1:]
opt = lambda k: a[a.index(k) + 1]
if a[0] == "routes" and "--files" in a:  # the file-name rule is the real normgate's
    os.execv(os.environ["NG_REAL_NORMGATE"], ["normgate"] + a)
if a[0] == "gate":  # retime_groups.sh's check of --gate-windows: gate TABLE --windows F --plan
    assert a[2] == "--windows" and a[4] == "--plan", a
    if "bogus" in a[3]:  # as CLI11 and the parser print it: the error, then a hint line
        print(f"normgate: error: --windows '{a[3]}': unknown key", file=sys.stderr)
        sys.exit(print("Run with --help for more information.", file=sys.stderr) or 2)
    if "variant=new" in a[3]:
        sys.exit(print(f"normgate: error: no window to gate: the filter '{a[3]}' selects none", file=sys.stderr) or 2)
    sys.exit(0)
assert a[0] == "derive"
if "--bench-only" in a:
    base = json.load(open(sys.argv[0] + ".base.json"))
    pts = [p for p in base["points"] if (p["op"], p["H"], p["form"]) == ("fwd", 1536, "res")]
    for p in pts:
        p["median_us"] = {k: v * 0.9 for k, v in p["median_us"].items()}
        p["rounds_us"] = {k: [x * 0.9 for x in v] for k, v in p["rounds_us"].items()}
        p.pop("aa_rounds_us", None)
    base["points"] = pts
    base.pop("merged_from", None)
    json.dump(base, open(opt("--report") + ".timings.json", "w"))
    print("bench    1 group timed")
    sys.exit(0)
assert json.load(open(opt("--timings")))["merged_from"]
assert "--approve" in a and opt("--gate-windows") == "op=fwd,form=res,H=1536"
t = open(a[1].replace(".derive.toml", ".toml")).read()
t = t.replace('H = 1536, w = "bf16", form = "res", T = [1, 3158]', 'H = 1536, w = "bf16", form = "res", T = [1, 3000]', 1)
open(opt("--out"), "w").write(t)
print("  PASS fwd H=1536 w=bf16 form=res T=3001..3158 -> fwd_staged: worst err/tol 0.38 (y), 400 cases, 2 s")
print("table    " + opt("--out") + ": every route with a current approval")
FAKE
chmod +x "$t/rb/apps/normgate"
cp "$root/docs/results/routes/sm90a.timings.json" "$t/rb/apps/normgate.base.json"
# A cut spec: the table's spec without its groups, and one group.
sed '/^\[\[group\]\]/,$d' "$root/routes/sm90a.derive.toml" >"$t/cut.toml"
printf '[[group]]\nop = "fwd"\nH = 1536\nw = ["bf16", "fp32"]\nform = "res"\n' >>"$t/cut.toml"
# One whose candidates differ from the table's spec (a new variant added to
# the cut alone): refused before any work, naming what differs.
sed 's/^fwd = \["fwd_rowwise"/fwd = ["fwd_new", "fwd_rowwise"/' "$t/cut.toml" >"$t/cut-new.toml"
grep -q fwd_new "$t/cut-new.toml" || { echo "FAIL: the test could not add a candidate to its cut spec" >&2; fail=1; }
expect 2 "cut-new.toml: differs from the table's spec in candidates" -- bash "$R" --build "$t/rb" --spec "$t/cut-new.toml" --gate-windows op=fwd --out "$t/rx"
# Refused before the bench: --timings not a timings file, --out in the
# repository (its routes/ here; --out . at the root would empty bench/),
# --out whose bench/ another hand made.
echo "{oops" >"$t/bad.json"
expect 2 "--timings $t/bad.json: not a timings file" -- bash "$R" --build "$t/rb" --spec "$t/cut.toml" --gate-windows op=fwd --timings "$t/bad.json" --out "$t/rx"
expect 2 "is in the repository" -- bash "$R" --build "$t/rb" --spec "$t/cut.toml" --gate-windows op=fwd --out "$root/routes"
expect 2 "--gate-windows 'op=bogus' (checked with gate --plan on .*): normgate: error: --windows 'op=bogus': unknown key" -- bash "$R" --build "$t/rb" --spec "$t/cut.toml" --gate-windows op=bogus --out "$t/rx"
mkdir -p "$t/ry/bench"
expect 2 "ry/bench exists and is not an earlier" -- bash "$R" --build "$t/rb" --spec "$t/cut.toml" --gate-windows op=fwd --out "$t/ry"
[ ! -e "$t/rx" ] && [ -d "$t/ry/bench" ] && [ ! -e "$root/routes/bench-only.log" ] && [ ! -e "$root/routes/bench" ] ||
  { echo "FAIL: retime_groups.sh wrote or emptied a folder before refusing" >&2; fail=1; }
expect 0 "2 window lines changed" -- bash "$R" --build "$t/rb" --spec "$t/cut.toml" --gate-windows op=fwd,form=res,H=1536 --out "$t/r"
python3 - "$t/r/merged.timings.json" "$root/docs/results/routes/sm90a.timings.json" <<'PY' || fail=1
import json, sys
m, b = (json.load(open(f)) for f in sys.argv[1:])
key = lambda p: (p["op"], p["H"], p["w"], p["form"], p["T"])
old = {key(p): p for p in b["points"]}
new = {key(p): p for p in m["points"]}
assert set(old) == set(new), "merged timings lost or gained points"
for k, p in new.items():
    want = 0.9 if k[0] == "fwd" and k[1] == 1536 and k[3] == "res" else 1.0
    for v, us in p["median_us"].items():
        assert abs(us - want * old[k]["median_us"][v]) < 1e-9 * us, ("merged point", k, v)
PY
grep -q '^+  { op = "fwd", H = 1536, w = "bf16", form = "res", T = \[1, 3000\]' "$t/r/routes.diff" ||
  { echo "FAIL: retime_groups.sh's routes.diff lacks the moved window" >&2; fail=1; }
# The last run's merged timings as the next run's --timings, same --out:
# refused before they are removed.
expect 2 "an input, is one of the outputs" -- bash "$R" --build "$t/rb" --spec "$t/cut.toml" --gate-windows op=fwd --timings "$t/r/merged.timings.json" --out "$t/r"
[ -f "$t/r/merged.timings.json" ] || { echo "FAIL: retime_groups.sh removed its --timings input" >&2; fail=1; }
# A per-GPU table (routing.h, "Per-GPU tables"): its own spec is the one a
# cut must match (one without fwd_staged, which the H100's has, is refused), the base
# table's approvals and policy are copied beside the derived table, which
# keeps its name; its timings are its GPU's.
h100="$root/routes/sm90a@nvidia-h100-80gb-hbm3"
cp "$root/docs/results/routes/sm90a@nvidia-h100-80gb-hbm3.timings.json" "$t/rb/apps/normgate.base.json"
sed '/^\[\[group\]\]/,$d' "$h100.derive.toml" >"$t/cut-h100.toml"
printf '[[group]]\nop = "fwd"\nH = 1536\nw = ["bf16", "fp32"]\nform = "res"\n' >>"$t/cut-h100.toml"
sed 's/, "fwd_staged"\]/]/' "$t/cut.toml" >"$t/cut-nostaged.toml"
grep -q '"fwd_staged"' "$t/cut-nostaged.toml" && { echo "FAIL: the test could not drop fwd_staged from its cut spec" >&2; fail=1; }
expect 2 "cut-nostaged.toml: differs from the table's spec in candidates (.*sm90a@nvidia-h100-80gb-hbm3.derive.toml" -- bash "$R" --build "$t/rb" --spec "$t/cut-nostaged.toml" --table "$h100.toml" --timings "$root/docs/results/routes/sm90a@nvidia-h100-80gb-hbm3.timings.json" --gate-windows op=fwd --out "$t/rh"
expect 2 "measured on 'NVIDIA H200', not the GPU of per-GPU table sm90a@nvidia-h100-80gb-hbm3.toml" -- bash "$R" --build "$t/rb" --spec "$t/cut-h100.toml" --table "$h100.toml" --timings "$root/docs/results/routes/sm90a.timings.json" --gate-windows op=fwd --out "$t/rh"
cp "$h100.toml" "$t/sm90a@NVIDIA-H100.toml"
expect 2 "a '@' makes it a per-GPU table" -- bash "$R" --build "$t/rb" --spec "$t/cut-h100.toml" --table "$t/sm90a@NVIDIA-H100.toml" --gate-windows op=fwd --out "$t/rh"
[ ! -e "$t/rh" ] || { echo "FAIL: retime_groups.sh wrote before refusing a per-GPU table's input" >&2; fail=1; }
# (no --timings: the per-GPU table's own, docs/results/routes/STEM@SLUG.timings.json)
expect 0 "window lines changed" -- bash "$R" --build "$t/rb" --spec "$t/cut-h100.toml" --table "$h100.toml" --gate-windows op=fwd,form=res,H=1536 --out "$t/rh"
for f in sm90a@nvidia-h100-80gb-hbm3.toml sm90a.approvals.json sm90a.policy.toml; do
  [ -f "$t/rh/derive/$f" ] || { echo "FAIL: retime_groups.sh on a per-GPU table: no derive/$f" >&2; fail=1; }
done
[ ! -e "$t/rh/derive/sm90a@nvidia-h100-80gb-hbm3.approvals.json" ] ||
  { echo "FAIL: retime_groups.sh gave a per-GPU table approvals of its own" >&2; fail=1; }
grep -q "derive .*sm90a@nvidia-h100-80gb-hbm3.derive.toml --out .*/derive/sm90a@nvidia-h100-80gb-hbm3.toml" "$t/rh/derive.log" ||
  { echo "FAIL: retime_groups.sh did not derive the per-GPU table from its own spec" >&2; fail=1; }
# A bench that fails: exit 1, nothing derived.
# (A filter that selects no window of the current table passes the check.)
printf '#!/bin/sh\n[ "$1" = routes ] && exec "$NG_REAL_NORMGATE" "$@"\n[ "$1" = gate ] && { echo "normgate: error: no window to gate" >&2; exit 2; }\necho "no device" >&2\nexit 1\n' >"$t/rb/apps/normgate"
expect 1 "the bench failed" -- bash "$R" --build "$t/rb" --spec "$t/cut.toml" --gate-windows variant=new --out "$t/r"
[ ! -e "$t/r/derive" ] && [ ! -e "$t/r/routes.diff" ] ||
  { echo "FAIL: retime_groups.sh kept an earlier run's derive folder or diff" >&2; fail=1; }
[ "$fail" = 0 ] && echo "test_gpu_script_args: ok"
exit $fail
