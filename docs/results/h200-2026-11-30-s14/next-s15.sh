#!/usr/bin/env bash
# Session 15's device calls, written at the end of session 14 (nvidia-h200-x2).
# Before call 1, here: `normgate routes routes/sm90a.toml` should list 28
# current, 40 missing (plain H=6144, 4096, 2048, 1536: campaign slices 1 and 3
# still running; slice 2, H=5120, approved in session 14).
# Carry: ["build/dev/apps", "build/capi/libnormgate_capi.so",
#   "build/tests/test_capi", ".whl"]   (.whl: Liger-Kernel 0.8.5's wheel only)
# Usage:
#   NG_MODE=first bash docs/results/h200-2026-11-30-s14/next-s15.sh   (call 1)
#     the plain campaign's last two slices at once with nearly the whole host
#     (threads 8,1,21 on GPU 1; left: slice 1 ~50 refinement cases at H=6144,
#     ~3e10 elements; slice 3 ~4e9 grid elements + its refinement, ~1.9e11 if
#     like slice 2's, at most 5.2e11: ~330-450 s at session 14's 6.6e8
#     elements/s, more if slice 3's worst points sit at large T); beside it on
#     GPU 0 (2-4 threads): test_capi (its new GPU test: ng_generate_device ==
#     ng_generate_host), python/tests, then the warm-up check (two rows session
#     13 measured). If a slice has not reported, call 2 runs NG_MODE=first again.
#   NG_MODE=peers bash ...   (calls 2, 3): the peers alone, shard A on GPU 0 and
#     shard B on GPU 1, 16 threads each.
# Peers shards (96-row matrix; 87 rows left before session 15):
#   A: --forms plain,res,heads24,heads4 --H 4096,5120 (32 + 16 rows: the per-head
#   forms take H = 256), B: --forms plain,res --H
#   1536,2048,6144 (39 rows left).
# After each call, here: tar xzf campaign-v3-plain.tgz over
# docs/results/campaign-v3-plain, cp sm90a.approvals.json routes/; each peers
# pack's peers/peers-K.json to docs/results/peers-h200/run-s15-cN-K.json (+ its
# log); logs to docs/results/h200-2026-11-30-s15/callN; COMMIT before the next
# call (journals and --done files travel with the tree).
export PATH=/usr/local/cuda/bin:$PATH
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
P=$OUT/p; mkdir -p $P
B=build/dev
limit=${NG_CALL_LIMIT:-570}
export NORMGATE_LIB=$PWD/build/capi/libnormgate_capi.so
PEERS="--peers eager,TC,TCd,F.rms_norm,Liger --seeds 5"
SHARD_A="--forms plain,res,heads24,heads4 --H 4096,5120 --done docs/results/peers-h200/run-*.json"
SHARD_B="--forms plain,res --H 1536,2048,6144 --done docs/results/peers-h200/run-*.json"
mode=${NG_MODE:-first}
if [ "$mode" = first ]; then
  NORMGATE_BUILD=$B NG_CAMPAIGN_DEADLINE=$(( limit - 35 )) NG_CAMPAIGN_APPROVE=1 \
    NG_CAMPAIGN_THREADS=${NG_THREADS:-8,1,21} NG_CAMPAIGN_GPUS=1,1,1 NG_CAMPAIGN_DEMO=0 \
    OUT=$P/plain scripts/campaign.sh docs/results/campaign-v3-plain \
    "form=plain,H=6144" "form=plain,H=5120" "form=plain,H=4096|2048|1536" >$P/plain.txt 2>&1 &
  CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=2 timeout 120 build/tests/test_capi >$P/test_capi.txt 2>&1
  echo "test_capi rc=$?" >>$P/test_capi.txt
  CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=2 timeout 240 python3 -m pytest -q python/tests >$P/pytest.txt 2>&1
  echo "pytest rc=$?" >>$P/pytest.txt
  # Warm-up check (peers.py's new setup warm-up, session 14): two rows session
  # 13 measured ([65537, 1536] and [98304, 1536] BF16 plain, call2/peers-b),
  # the second warmed by a child during the first's accuracy phase. Prediction:
  # TC's and TCd's us within the rows' run-to-run spread of session 13 (1.5%),
  # the second row's setup under 10 s (was 59 s). Its JSON is a repeat: keep it
  # out of docs/results/peers-h200/ (--merge refuses duplicate rows).
  NORMGATE_BUILD=$PWD/build NG_PEERS_GPUS=0 NG_PEERS_THREADS=4 NG_PEERS_TIMEOUT=$(( limit - 30 - SECONDS )) \
    NG_PEERS_ARGS="$PEERS" NG_PEERS_SHARDS="--H 1536 --T 65537,98304 --w bf16 --forms plain" \
    OUT=$P/pa scripts/peers.sh >$P/peers-a.txt 2>&1
  tar xzf $P/pa/peers.tgz -C $P/pa && mv $P/pa/peers.tgz $OUT/peers-warmcheck.tgz
  wait
  mv $P/plain/campaign.tgz $OUT/campaign-v3-plain.tgz
  cp routes/sm90a.approvals.json $OUT/
else
  dl=$(( limit - 200 - SECONDS )); [ $dl -ge 1 ] || dl=1
  NORMGATE_BUILD=$PWD/build NG_PEERS_GPUS=0,1 NG_PEERS_THREADS=16 NG_PEERS_TIMEOUT=$(( limit - 20 - SECONDS )) \
    NG_PEERS_ARGS="$PEERS --deadline-s $dl" NG_PEERS_SHARDS="$SHARD_A|$SHARD_B" \
    OUT=$P/pb scripts/peers.sh >$P/peers.txt 2>&1
fi
if [ -f $P/pb/peers.tgz ]; then tar xzf $P/pb/peers.tgz -C $P/pb && mv $P/pb/peers.tgz $OUT/peers.tgz; fi
tar czf $OUT/logs.tgz --exclude=p/pb --exclude=p/pa -C $OUT p
[ -f $P/test_capi.txt ] && { echo "== test_capi"; grep -E "PASSED|FAILED|rc=" $P/test_capi.txt; }
[ -f $P/pytest.txt ] && { echo "== pytest"; tail -2 $P/pytest.txt; }
[ -f $P/plain.txt ] && { echo "== plain v3"; grep -E "^rc=|^\| [0-9]|^slice" $P/plain.txt; }
if [ -d $P/pa/peers ]; then
  echo "== warm-up check"; grep -hE ": det |phases" $P/pa/peers/peers-*.log
  grep -E "^\| \[" $P/pa/peers/peers.md | head -6
fi
if [ -d $P/pb/peers ]; then
  echo "== peers"; grep -E "^peers" $P/peers.txt; grep -hE "unavailable|: det |phases|failed" $P/pb/peers/peers-*.log | tail -24
fi
rm -rf $P
