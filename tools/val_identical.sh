#!/usr/bin/env bash
# Validation-identity check: run `normgate check` on varied cases and two small
# gates on the CPU, writing JSON reports (timings stripped) into DIR. Run it
# before and after a change to the oracle or validators, then compare:
#   tools/val_identical.sh /tmp/before   # on the old build
#   tools/val_identical.sh /tmp/after    # on the new build
#   diff -r -x raw /tmp/before /tmp/after   # must print nothing (raw/ keeps the unstripped reports)
# NORMGATE_BUILD picks the build (default build). Takes about a minute on 2 cores.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${NORMGATE_BUILD:-$root/build}/apps/normgate"
out="${1:?usage: val_identical.sh OUTDIR}"
mkdir -p "$out/raw"
strip() {  # drop wall-clock fields (seconds, dates, throughput) from a JSON report
  python3 - "$1" "$2" <<'PY'
import json, re, sys
drop = re.compile(r"(^|_)(seconds|secs|date|time|timestamp|wall|rate|per_min|elapsed|started|finished|host|commit)($|_)")
def clean(x):
    if isinstance(x, dict):
        return {k: clean(v) for k, v in x.items() if not drop.search(k)}
    if isinstance(x, list):
        return [clean(v) for v in x]
    return x
json.dump(clean(json.load(open(sys.argv[1]))), open(sys.argv[2], "w"), indent=1, sort_keys=True)
PY
}
i=0
while read -r oracle variant id; do
  [ -z "$id" ] && continue
  i=$((i + 1))
  n=$(printf "c%02d" $i)
  "$bin" check --backend cpu --oracle "$oracle" --variant "$variant" --case "$id" --json "$out/raw/$n.json" \
    >"$out/raw/$n.txt" 2>&1
  echo "exit $?" >>"$out/raw/$n.txt"
  strip "$out/raw/$n.json" "$out/$n.json"
  sed -E 's/[0-9]+(\.[0-9]+)? (s|ms)\b/T \2/g' "$out/raw/$n.txt" >"$out/$n.txt"
done <<'CASES'
auto all H=4096,T=4096,w=bf16,form=plain,family=cancel,seed=0
auto all H=4096,T=1024,w=fp32,form=plain,family=normal,seed=1
auto all H=2048,T=2048,w=bf16,form=res,family=llm,seed=2
auto all H=256,T=1025,w=bf16,form=heads24,family=cancel,seed=3
auto all H=256,T=777,w=fp32,form=heads4,family=huge,seed=4
auto all H=7,T=1000,w=bf16,form=plain,family=cancel,seed=5
auto all H=1001,T=333,w=fp32,form=plain,family=llm,seed=6
auto all H=1001,T=1,w=bf16,form=res,family=huge,seed=7
auto all H=6144,T=512,w=bf16,form=res,family=cancel,seed=8
auto ctl_fp32_seq H=64,T=600,w=bf16,form=plain,family=cancel,seed=1
auto all H=3,T=5000,w=fp32,form=res,family=normal,seed=9
auto all H=128,T=0,w=bf16,form=plain,family=normal,seed=0
auto all H=1000,T=300,w=bf16,form=plain,family=specials,seed=2
auto all H=512,T=400,w=fp32,form=res,family=specials,seed=3
auto all H=300,T=200,w=bf16,form=plain,family=tiny,seed=1
auto all H=300,T=200,w=bf16,form=res,family=zeros,seed=1
fp64 all H=2048,T=1000,w=bf16,form=plain,family=cancel,seed=4
mpfr all H=100,T=50,w=fp32,form=plain,family=llm,seed=5
CASES
"$bin" gate "$root/tests/data/routes/small.toml" --backend cpu --seeds 3x3 --quiet \
  --report-json "$out/raw/gate-small.json" >"$out/raw/gate-small.txt" 2>&1
echo "exit $?" >>"$out/raw/gate-small.txt"
strip "$out/raw/gate-small.json" "$out/gate-small.json"
"$bin" gate "$root/routes/sm90a-ci.toml" --backend cpu --seeds 3x3 --t-per-window 6 --dense-points 4 --quiet \
  --report-json "$out/raw/gate-ci.json" >"$out/raw/gate-ci.txt" 2>&1
echo "exit $?" >>"$out/raw/gate-ci.txt"
strip "$out/raw/gate-ci.json" "$out/gate-ci.json"
echo "wrote $out"
