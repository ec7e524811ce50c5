#!/usr/bin/env bash
# Session 15's device calls. Only `nvidia-h200` (one GPU, 16 cores) is lent
# this session, so session 14's plan (next-s15.sh, two GPUs) runs in series:
# the plain campaign first, the peers after it, never beside each other on the
# one GPU (the peers' timing phase needs the GPU and host to itself).
# Before call 1, here: `normgate routes routes/sm90a.toml` lists 28 current,
# 40 missing (plain H=6144, 4096, 2048, 1536: campaign slices 1 and 3).
# Carry: ["build/dev/apps", "build/capi/libnormgate_capi.so",
#   "build/tests/test_capi", ".whl"]   (.whl: Liger-Kernel 0.8.5's wheel only)
# Usage:
#   NG_MODE=campaign bash docs/results/h200-2026-12-01-s15/run.sh   (call 1)
#     test_capi and python/tests on the GPU (2 threads), then the plain
#     campaign's slices with the whole host until the deadline (threads 4,1,13:
#     slice 1 has ~3e10 elements of refinement left at H=6144, slice 3 ~4e9
#     grid + its refinement, ~1.9-2.9e11; slice 2 is finished and only
#     re-reports).
#   NG_MODE=mixed bash ...   (call 2): the campaign until every slice reports
#     (deadline NG_CAMPAIGN_S, default 300 s), then the peers with what is left.
#   NG_MODE=peers bash ...   (call 3): the peers alone.
# Peers: first the warm-up check (mixed only: two rows session 13 measured,
# [4097, 1536] and [65537, 1536] BF16 plain, the second warmed by a child
# during the first's accuracy phase; prediction: TC within 1.5% of session
# 13's us, the second row's setup under 10 s; its JSON is a repeat, kept out
# of docs/results/peers-h200/), then row sets in this order, each skipping the
# rows already in docs/results/peers-h200/run-*.json: T=65537 BF16 over every
# form, T=65537 FP32, T=131072 BF16, T=131072 FP32, T=4097, T=98304.
# After each call, here: tar xzf campaign-v3-plain.tgz over
# docs/results/campaign-v3-plain, cp sm90a.approvals.json routes/; each
# peers-N.tgz's peers/peers.json to docs/results/peers-h200/run-s15-cC-N.json
# (+ its log); logs to docs/results/h200-2026-12-01-s15/callC; COMMIT before
# the next call (journals and --done files travel with the tree).
export PATH=/usr/local/cuda/bin:$PATH
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
P=$OUT/p; mkdir -p $P
B=build/dev
limit=${NG_CALL_LIMIT:-570}
export NORMGATE_LIB=$PWD/build/capi/libnormgate_capi.so
PEERS="--peers eager,TC,TCd,F.rms_norm,Liger --seeds 5"
ALLF="--forms plain,res,heads24,heads4 --H 1536,2048,4096,5120,6144"
DONE="--done docs/results/peers-h200/run-*.json"
mode=${NG_MODE:-campaign}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader >$P/gpu.txt 2>&1
campaign() {  # $1: deadline (s from now)
  NORMGATE_BUILD=$B NG_CAMPAIGN_DEADLINE=$1 NG_CAMPAIGN_APPROVE=1 \
    NG_CAMPAIGN_THREADS=${NG_THREADS:-4,1,13} NG_CAMPAIGN_GPUS=0,0,0 NG_CAMPAIGN_DEMO=0 \
    OUT=$P/plain scripts/campaign.sh docs/results/campaign-v3-plain \
    "form=plain,H=6144" "form=plain,H=5120" "form=plain,H=4096|2048|1536" >$P/plain.txt 2>&1
  mv $P/plain/campaign.tgz $OUT/campaign-v3-plain.tgz
  cp routes/sm90a.approvals.json $OUT/
}
npeers=0
peers_set() {  # $1: peers.py args for this set; $2: 1 = --done (the real matrix)
  local left=$(( limit - 25 - SECONDS ))
  [ $left -ge 100 ] || return 0
  npeers=$(( npeers + 1 ))
  local d=""; [ "$2" = 1 ] && d="$DONE"
  set -f
  NORMGATE_BUILD=$PWD/build NG_PEERS_TIMEOUT=$left \
    NG_PEERS_ARGS="$PEERS $1 $d --deadline-s $(( left - 110 ))" \
    OUT=$P/pk scripts/peers.sh >$P/peers-$npeers.txt 2>&1
  set +f
  [ -f $P/pk/peers.tgz ] && mv $P/pk/peers.tgz $OUT/peers-$npeers.tgz
  rm -rf $P/pk
}
if [ "$mode" = campaign ]; then
  OMP_NUM_THREADS=2 timeout 120 build/tests/test_capi >$P/test_capi.txt 2>&1
  echo "test_capi rc=$?" >>$P/test_capi.txt
  OMP_NUM_THREADS=2 timeout 180 python3 -m pytest -q python/tests >$P/pytest.txt 2>&1
  echo "pytest rc=$?" >>$P/pytest.txt
  campaign $(( limit - 35 - SECONDS ))
elif [ "$mode" = mixed ]; then
  campaign ${NG_CAMPAIGN_S:-300}
  peers_set "--H 1536 --T 4097,65537 --w bf16 --forms plain" 0
  for s in "--T 65537 --w bf16" "--T 65537 --w fp32" "--T 131072 --w bf16"; do
    peers_set "$ALLF $s" 1
  done
else
  # Call 3 (about 7 rows fit): the forms session 13 and call 2 did not reach
  # first (res and the per-head forms at T=65537 BF16), then the rest.
  for s in "--forms res,heads4 --H 1536,4096 --T 65537 --w bf16" \
           "--forms heads24 --T 65537 --w bf16" "$ALLF --T 65537 --w bf16" \
           "$ALLF --T 65537 --w fp32" "$ALLF --T 131072"; do
    peers_set "$s" 1
  done
fi
tar czf $OUT/logs.tgz -C $OUT p
[ -f $P/test_capi.txt ] && { echo "== test_capi"; grep -E "PASSED|FAILED|rc=" $P/test_capi.txt; }
[ -f $P/pytest.txt ] && { echo "== pytest"; tail -2 $P/pytest.txt; }
[ -f $P/plain.txt ] && { echo "== plain v3"; grep -E "^rc=|^\| [0-9]|^slice" $P/plain.txt; }
for f in $P/peers-*.txt; do
  [ -f "$f" ] || continue
  echo "== $(basename $f)"; grep -E "peers.py rc|: det |phases|unavailable|failed" "$f" | tail -12
done
rm -rf $P
