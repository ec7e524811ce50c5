#!/usr/bin/env bash
# Session 16's device calls (written at the end of session 15; from call 2:
# pinned host copies in normgate.Oracle, glibc THP tunable in scripts/peers.sh): issue 8's
# peers matrix, 80 rows left (`python3 bench/peers.py --plan --forms
# plain,res,heads24,heads4 --done 'docs/results/peers-h200/run-*.json'`).
# Every kernel route is approved (68 of 68 current); no campaign is running.
# Before the first call, here: `ninja -C build` (session 15 changed the C ABI
# after its last call). Carry: ["build/capi/libnormgate_capi.so",
# "build/tests/test_capi", ".whl"]  (.whl: Liger-Kernel 0.8.5's wheel only)
# NG_FIRST=1 (call 1): test_capi and python/tests first (session 15's new
# cases: T = 0 and T = 1 through the Python kernels, empty-case ABI).
# Usage: [NG_FIRST=1] bash docs/results/h200-2026-12-01-s16/run.sh   (every call)
#   One GPU (nvidia-h200): row sets in series, 16 threads, --done skipping
#   what earlier calls measured. Two or more GPUs: shard A (plain/res H=4096,
#   5120, heads24, heads4) on GPU 0 and shard B (plain/res H=1536, 2048,
#   6144) on GPU 1, 16 threads each.
# Read first in each row's log: "accuracy parts" (where the accuracy phase's
#   63-91 s per large row go: generate, host copies, reference, validators,
#   eager runs) and "spread:" lines (normgate's slow tail of session 15, with
#   NVML's power/thermal cap time and SM clocks over the blocks).
# After each call, here: each peers-N.tgz's peers/peers.json (single GPU) or
# peers/peers-K.json (shards) to docs/results/peers-h200/run-s16-cC-N.json,
# logs to docs/results/h200-2026-12-0X-s16/callC, `python3 bench/peers.py
# --merge docs/results/peers-h200/run-*.json --json
# docs/results/peers-h200/peers.json --md docs/results/peers-h200/peers.md`,
# COMMIT before the next call (the --done files travel with the tree).
export PATH=/usr/local/cuda/bin:$PATH
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
P=$OUT/p; mkdir -p $P
limit=${NG_CALL_LIMIT:-570}
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
    NG_PEERS_ARGS="$PEERS $1 $DONE --deadline-s $(( left - ${NG_ROW_MARGIN:-110} ))" \
    OUT=$P/pk scripts/peers.sh >$P/peers-$npeers.txt 2>&1
  set +f
  grep -h transparent_hugepage $P/pk/peers/env.txt >>$P/thp.txt 2>/dev/null
  [ -f $P/pk/peers.tgz ] && mv $P/pk/peers.tgz $OUT/peers-$npeers.tgz
  rm -rf $P/pk
}
if [ "${ngpu:-0}" -ge 2 ]; then
  NG_PEERS_GPUS=0,1 NG_PEERS_THREADS=16 \
    NG_PEERS_SHARDS="--forms plain,res,heads24,heads4 --H 4096,5120|--forms plain,res --H 1536,2048,6144" \
    peers_run ""
elif [ "${NG_ONE_SET:-0}" = 1 ]; then
  # Session 17: every row left in one peers.py (one cold TC compile per call
  # instead of one per set; the warm-up child carries over between T's).
  peers_run "$ALLF --T 4097,65537,98304,131072 --w bf16,fp32"
else
  for s in "$ALLF --T 65537 --w bf16" "$ALLF --T 65537 --w fp32" "$ALLF --T 131072 --w bf16" \
           "$ALLF --T 131072 --w fp32" "$ALLF --T 4097" "$ALLF --T 98304"; do
    peers_run "$s"
  done
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
