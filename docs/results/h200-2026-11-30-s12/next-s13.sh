#!/usr/bin/env bash
# Written at the end of session 12 for session 13 (nvidia-h200-x2; kernels of
# 48e338b: `normgate routes routes/sm90a.toml` must still list 6 current, 12
# stale, 50 missing before call 1, else the kernels changed and the v3
# journals are refused).
# Usage: bash docs/results/h200-2026-11-30-s12/next-s13.sh campaign|both
#   campaign: the two v3 campaigns on both GPUs and all 32 cores:
#     docs/results/campaign-v3-forms-b (res, heads24 by w; in refinement) and
#     docs/results/campaign-v3-plain (issue 4's plain windows; 3 slices, the
#     third, H=4096|2048|1536, has ~2x the others' work left: more threads).
#   both: the campaigns on GPU 1 with 24 threads, and the peers (issue 8) on
#     GPU 0 with 8 threads: the Python module's tests, then peers run A (one
#     row, [65537, 2048] BF16 plain: its TC/TCd/Liger/eager times against
#     session 6's quiet run show whether the campaign beside disturbs the
#     timing; the A/A floor says it too) and run B (the whole matrix, 96 rows,
#     skipping rows in docs/results/peers-h200/run-*.json and run A's; stops
#     starting rows 260 s before the call's end). A run in which QuACK could
#     not be imported does not count its rows as done (peers.py --done): if Q
#     cannot run at all, later runs pass --peers without it, and perf.md says why.
# Calls of session 13 (each within 30 s of the last; carry sizes with the
# ~18 MB tree stay under 64 MiB; build/dev/apps and the .so stay on the warm machine):
#   1. carry ["build/dev/apps", "build/capi/libnormgate_capi.so",
#      ".whlparts/...part00"]: `... campaign`
#   2. carry [".whlparts/...part01", "build/dev/bench/kernels_bench",
#      "build/wip-chunks/kernels_bench"]: `NG_FWD_ROWS=1 ... campaign`
#   3. carry [".whlparts/...part02", ".whlparts/...sha256", ".whl"] (never with an
#      assembled 92 MB wheel in .whl/): `... both`
#   (QuACK's runtime is the three parts; peers.sh assembles and checks it.)
# After each call, here: tar xzf each campaign pack over its directory,
# routes/sm90a.approvals.json from the pack, peers run JSONs to
# docs/results/peers-h200/run-s13-cN{a,b}.json (+ logs); commit.
# Predictions: v3-b reports PASS on its 24 windows in call 1; the plain slices
# journal ~3.5e11 elements a call, no failure; QuACK imports; peers run A's TC
# within 1% of session 6's (fwd 125.50, bwd 212.03, 2xfwd+bwd 465.15 us) and
# A/A floors < 0.01; run B measures ~3 rows (5 seeds, ~90-150 s a row).
mode=${1:?usage: next-s13.sh campaign|both}
export PATH=/usr/local/cuda/bin:$PATH
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
P=$OUT/p; mkdir -p $P
B=build/dev
limit=${NG_CALL_LIMIT:-560}
# NG_FWD_ROWS=1 (call 2): first, on the idle machine, kernels_bench's forward
# experiment (bench/fwd_rows.cuh: 2 or 4 rows per team) against fwd_rowwise,
# one pass, BF16 w (~1 min; needs build/dev/bench/kernels_bench carried).
# Prediction: 0 rows differ everywhere; 2 rows per team 8-15% faster at
# H = 1536..4096 (1.5x the bytes in flight per SM at 40 registers), 4 rows
# no better than 2 (56 registers: 1024 threads an SM); within 3% at H=6144.
if [ "${NG_FWD_ROWS:-0}" = 1 ]; then
  timeout 150 build/dev/bench/kernels_bench --no-controls --w bf16 --fwd-rows 2,4 --json $P/fwdrows.json \
    65537,1536 65537,2048 65537,4096 131072,4096 65537,6144 262148,256 >$P/fwdrows.txt 2>&1
  echo "kernels_bench rc=$?" >>$P/fwdrows.txt
  # The chunk count at H = 1536 / 2048 (branch wip/chunk-sweep's kernels_bench,
  # carried as build/wip-chunks/kernels_bench): the plan (K=0) against 2 and 3
  # whole waves of chunk CTAs, ~75 s. Prediction (session 11's four points):
  # K=2 best at H=1536 (-8 to -11% at T >= 65537), K=3 at H=2048 (-3%).
  if [ -x build/wip-chunks/kernels_bench ]; then
    for k in 0 2 3; do
      timeout 60 build/wip-chunks/kernels_bench --no-controls --w bf16 --chunk-sm-waves $k --json $P/sw-w$k.json \
        16384,1536 65537,1536 131072,1536 16384,2048 65537,2048 131072,2048 >$P/sw-w$k.txt 2>&1
    done
  fi
fi
left=$(( limit - SECONDS ))
case $mode in
  campaign) FG=0,1,0,1; PG=1,0,1; FT=3,3,3,3; PT=5,5,10 ;;
  both)     FG=1,1,1,1; PG=1,1,1; FT=2,2,2,2; PT=4,4,8 ;;
  *) echo "mode must be campaign or both, not '$mode'" >&2; exit 2 ;;
esac
NORMGATE_BUILD=$B NG_CAMPAIGN_DEADLINE=$(( left - 40 )) NG_CAMPAIGN_APPROVE=1 NG_CAMPAIGN_THREADS=$FT NG_CAMPAIGN_GPUS=$FG \
  OUT=$P/forms scripts/campaign.sh docs/results/campaign-v3-forms-b \
  "form=res,w=bf16" "form=res,w=fp32" "form=heads24,w=bf16" "form=heads24,w=fp32" >$P/forms.txt 2>&1 &
NORMGATE_BUILD=$B NG_CAMPAIGN_DEADLINE=$(( left - 40 )) NG_CAMPAIGN_APPROVE=1 NG_CAMPAIGN_THREADS=$PT NG_CAMPAIGN_GPUS=$PG \
  NG_CAMPAIGN_DEMO=0 OUT=$P/plain scripts/campaign.sh docs/results/campaign-v3-plain \
  "form=plain,H=6144" "form=plain,H=5120" "form=plain,H=4096|2048|1536" >$P/plain.txt 2>&1 &
if [ $mode = both ]; then
  export NORMGATE_LIB=$PWD/build/capi/libnormgate_capi.so
  CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=8 timeout 150 python3 -m pytest -q python/tests >$P/pytest.txt 2>&1
  echo "pytest rc=$?" >>$P/pytest.txt
  NORMGATE_BUILD=$PWD/build NG_PEERS_GPUS=0 NG_PEERS_THREADS=8 NG_PEERS_TIMEOUT=$(( limit - 20 - SECONDS )) \
    NG_PEERS_ARGS="--seeds 5" NG_PEERS_SHARDS="--H 2048 --T 65537 --w bf16 --forms plain" \
    OUT=$P/pa scripts/peers.sh >$P/peers-a.txt 2>&1
  tar xzf $P/pa/peers.tgz -C $P/pa
  # run A's result only if it exists (a plain --done path must exist, else run B exits 2)
  da=; [ -f $P/pa/peers/peers-1.json ] && da=,$P/pa/peers/peers-1.json
  dl=$(( limit - 260 - SECONDS )); [ $dl -ge 1 ] || dl=1   # 0 would mean "no deadline"
  NORMGATE_BUILD=$PWD/build NG_PEERS_GPUS=0 NG_PEERS_THREADS=8 NG_PEERS_TIMEOUT=$(( limit - 20 - SECONDS )) \
    NG_PEERS_ARGS="--seeds 5 --forms plain,res,heads24,heads4 --deadline-s $dl" \
    NG_PEERS_SHARDS="--done docs/results/peers-h200/run-*.json$da" \
    OUT=$P/pb scripts/peers.sh >$P/peers-b.txt 2>&1
  tar xzf $P/pb/peers.tgz -C $P/pb
  mv $P/pa/peers.tgz $OUT/peers-a.tgz; mv $P/pb/peers.tgz $OUT/peers-b.tgz
fi
wait
mv $P/forms/campaign.tgz $OUT/campaign-v3-forms-b.tgz
mv $P/plain/campaign.tgz $OUT/campaign-v3-plain.tgz
cp routes/sm90a.approvals.json $OUT/
tar czf $OUT/logs.tgz --exclude=p/pa/peers.tgz --exclude=p/pb/peers.tgz -C $OUT p
if [ -f $P/fwdrows.txt ]; then echo "== fwd rows experiment"; grep -E "fwd |rc=|copy" $P/fwdrows.txt; fi
if [ -f $P/sw-w0.json ]; then echo "== chunk waves (bwd, BF16 w)"; python3 scripts/chunk_waves_table.py $P/sw-w*.json | grep -E "det|shape|---"; fi
echo "== forms v3-b"; grep -E "^\| [0-9]|^slice" $P/forms.txt
echo "== plain v3"; grep -E "^rc=|^\| [0-9]|^slice" $P/plain.txt
if [ $mode = both ]; then
  echo "== pytest"; tail -2 $P/pytest.txt
  echo "== peers A"; grep -E "^peers" $P/peers-a.txt; grep -E "unavailable|copy ceiling|: det |phases" $P/pa/peers/peers-1.log
  grep -E "^\| \[" $P/pa/peers/peers.md | head -3
  echo "== peers B"; grep -E "^peers" $P/peers-b.txt; grep -E "unavailable|skipped|: det |phases|failed" $P/pb/peers/peers-1.log | tail -30
fi
rm -rf $P
