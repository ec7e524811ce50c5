#!/usr/bin/env bash
# Session 19's device calls (written at the end of session 18): issue 8's
# peers matrix, 18 rows left (`python3 bench/peers.py --plan --forms
# plain,res,heads24,heads4 --peers eager,TC,TCd,F.rms_norm,Liger --done
# 'docs/results/peers-h200/run-*.json'`): res H=5120 fp32 and H=6144 at
# T=98304/131072 (6), heads24 (5: bf16 T=98304/131072, fp32 T=4097/98304/131072),
# heads4 (7: bf16 T=4097/98304/131072, fp32 T=4097/65537/98304/131072).
# Session 16's run.sh with session 18's settings: call limit 590 s and a row
# margin of 100 s (session 18 calls 2-3: 10 and 7 rows, ending 478 and 488 s
# into the call; the margin of 130 s in call 1 left ~140 s unused), and shards
# for what is left: A (res, heads24) on GPU 0, B (heads4) on GPU 1.
# Carry: ["build/capi/libnormgate_capi.so", "build/tests/test_capi", ".whl"]
#   (.whl: Liger-Kernel 0.8.5's wheel only; a new checkout needs
#   `scripts/build` first).
# Kind: nvidia-h200-x2 if lent (status), else nvidia-h200 (every row left in
#   one peers.py per call).
# Watch: res H=6144 fp32 at T >= 98304 (session 18: [131072, 6144] fp32
#   plain needed the one-pool-per-implementation fallback; res holds more), and
#   heads24 at T=131072 (T*24 rows of 256 = [131072, 6144]'s elements).
# Prediction: 5-7 rows per GPU per call (these are the heaviest rows: session
#   18's T >= 98304 res rows at H >= 4096 took 52-110 s each plus waits).
# NG_FIRST=1 (any call): test_capi and python/tests first (~60-100 s).
# After each call, here: peers-N.tgz's peers/peers.json (or peers-K.json per
# shard) to docs/results/peers-h200/run-s19-cC-N.json, logs to
# docs/results/h200-2026-12-0X-s19/callC, merge (`python3 bench/peers.py
# --merge docs/results/peers-h200/run-*.json --json
# docs/results/peers-h200/peers.json --md docs/results/peers-h200/peers.md`),
# COMMIT before the next call (the --done files travel with the tree).
# Usage: bash docs/results/h200-2026-12-01-s18/run.sh   (every call)
export PATH=/usr/local/cuda/bin:$PATH
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
P=$OUT/p; mkdir -p $P
limit=${NG_CALL_LIMIT:-590}
export NORMGATE_LIB=$PWD/build/capi/libnormgate_capi.so
PEERS="--peers eager,TC,TCd,F.rms_norm,Liger --seeds 5${NG_CUPTI:+ --cupti}"  # NG_CUPTI=1 (session 17 on): CUPTI spans beside the events
ALLF="--forms plain,res,heads24,heads4 --H 1536,2048,4096,5120,6144"
DONE="--done docs/results/peers-h200/run-*.json"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader >$P/gpu.txt 2>&1
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${NG_FIRST:-0}" = 1 ]; then
  OMP_NUM_THREADS=4 timeout 120 build/tests/test_capi >$P/test_capi.txt 2>&1; echo "test_capi rc=$?" >>$P/test_capi.txt
  # NG_PYTEST_ARGS (session 17, call 2 on): what pytest runs (default: all of python/tests)
  OMP_NUM_THREADS=4 timeout 180 python3 -m pytest -q ${NG_PYTEST_ARGS:-python/tests} >$P/pytest.txt 2>&1; echo "pytest rc=$?" >>$P/pytest.txt
fi
npeers=0
if [ "${NG_CUPTI_CHECK:-0}" = 1 ] && grep -q "pytest rc=0" $P/pytest.txt 2>/dev/null; then
  # Session 17, call 1: an already-measured row again, with --cupti and 1
  # seed, kept out of the matrix: det/ours against their matrix numbers say
  # whether CUPTI's graph trace moves the events; cupti/events says how much
  # launch latency the events hold at T=4097.
  NORMGATE_BUILD=$PWD/build NG_PEERS_TIMEOUT=200 \
    NG_PEERS_ARGS="--peers eager,TC,TCd,F.rms_norm,Liger --seeds 1 --cupti --forms plain --H 1536 --T 4097 --w bf16 --no-warm-next" \
    OUT=$P/ck scripts/peers.sh >$P/cupti-check.txt 2>&1
  [ -f $P/ck/peers.tgz ] && mv $P/ck/peers.tgz $OUT/cupti-check.tgz
  rm -rf $P/ck
fi
peers_run() {  # $1: peers.py args; extra env passed through (shards)
  local left=$(( limit - 25 - SECONDS ))
  [ $left -ge 100 ] || return 0
  set -f  # a set with no row left costs no peers.sh start (call 2: ~15 s)
  python3 bench/peers.py --plan $PEERS $1 $DONE 2>/dev/null | tail -1 | grep -q '^0 rows' && { set +f; return 0; }
  set +f
  npeers=$(( npeers + 1 ))
  set -f
  NORMGATE_BUILD=$PWD/build NG_PEERS_TIMEOUT=$left \
    NG_PEERS_ARGS="$PEERS $1 $DONE --deadline-s $(( left - ${NG_ROW_MARGIN:-100} ))" \
    OUT=$P/pk scripts/peers.sh >$P/peers-$npeers.txt 2>&1
  set +f
  grep -h transparent_hugepage $P/pk/peers/env.txt >>$P/thp.txt 2>/dev/null
  [ -f $P/pk/peers.tgz ] && mv $P/pk/peers.tgz $OUT/peers-$npeers.tgz
  rm -rf $P/pk
}
if [ "${ngpu:-0}" -ge 2 ]; then
  NG_PEERS_GPUS=0,1 NG_PEERS_THREADS=16 \
    NG_PEERS_SHARDS="--forms res,heads24|--forms heads4" \
    peers_run "--forms res,heads24,heads4 --H 5120,6144 --T 4097,65537,98304,131072 --w bf16,fp32"
  # ($1 is for the plan check and comes first in every shard's arguments; a
  # shard's --forms comes later and wins. Session 16's x2 branch passed ""
  # here, whose plan (plain rows only, all done) would now skip the call.)
else
  # Session 17: every row left in one peers.py (one cold TC compile per call
  # instead of one per set; the warm-up child carries over between T's).
  peers_run "$ALLF --T 4097,65537,98304,131072 --w bf16,fp32"
fi
tar czf $OUT/logs.tgz -C $OUT p
[ -f $P/thp.txt ] && { echo "== THP"; sort -u $P/thp.txt; }
[ -f $P/test_capi.txt ] && { echo "== test_capi"; grep -E "PASSED|FAILED|rc=" $P/test_capi.txt; }
[ -f $P/pytest.txt ] && { echo "== pytest"; grep -E "passed|failed|rc=" $P/pytest.txt | tail -3; }
[ -f $P/cupti-check.txt ] && { echo "== cupti-check"; grep -E "CUPTI|cupti|: det " $P/cupti-check.txt | cut -c1-300; }
for f in $P/peers-*.txt; do
  [ -f "$f" ] || continue
  echo "== $(basename $f)"; grep -E "peers.py|host threads|CUPTI|cupti|: det |phases|accuracy parts|spread:|unavailable|failed" "$f" | tail -20 | cut -c1-400
done
rm -rf $P
