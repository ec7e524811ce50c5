#!/usr/bin/env bash
# Session 14's device calls (nvidia-h200-x2; kernels of 48e338b: `normgate
# routes routes/sm90a.toml` listed 18 current, 0 stale, 50 missing before
# call 1). The plain campaign (issue 4: docs/results/campaign-v3-plain, its
# three slices) gets the whole host: 32 OpenMP threads split by the grid
# elements each slice has left (2.63e11, 1.67e11, 3.74e11 before call 1),
# slices on both GPUs (the GPU half is not the limit).
# Carry: ["build/dev/apps", "build/capi/libnormgate_capi.so"].
# Usage: [NG_FIRST=1] [NG_THREADS=a,b,c] bash docs/results/h200-2026-11-30-s14/run.sh
#   NG_FIRST=1 (call 1): the Python module's tests (python/tests) on GPU 0
#   first, with 4 threads taken from slice 3 while they run.
# After each call, here: tar xzf campaign-v3-plain.tgz over
# docs/results/campaign-v3-plain, cp sm90a.approvals.json routes/, logs to
# docs/results/h200-2026-11-30-s14/callN; commit before the next call.
export PATH=/usr/local/cuda/bin:$PATH
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
P=$OUT/p; mkdir -p $P
B=build/dev
limit=${NG_CALL_LIMIT:-575}
export NORMGATE_LIB=$PWD/build/capi/libnormgate_capi.so
if [ "${NG_FIRST:-0}" = 1 ]; then
  (CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=4 timeout 200 python3 -m pytest -q python/tests >$P/pytest.txt 2>&1
   echo "pytest rc=$?" >>$P/pytest.txt) &
fi
NORMGATE_BUILD=$B NG_CAMPAIGN_DEADLINE=$(( limit - 35 )) NG_CAMPAIGN_APPROVE=1 \
  NG_CAMPAIGN_THREADS=${NG_THREADS:-10,7,15} NG_CAMPAIGN_GPUS=0,1,1 \
  NG_CAMPAIGN_DEMO=0 OUT=$P/plain scripts/campaign.sh docs/results/campaign-v3-plain \
  "form=plain,H=6144" "form=plain,H=5120" "form=plain,H=4096|2048|1536" >$P/plain.txt 2>&1
wait
mv $P/plain/campaign.tgz $OUT/campaign-v3-plain.tgz
cp routes/sm90a.approvals.json $OUT/
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >$P/gpu.txt 2>&1
tar czf $OUT/logs.tgz -C $OUT p
echo "== plain v3"; grep -E "^rc=|^\| [0-9]|^slice" $P/plain.txt
if [ -f $P/pytest.txt ]; then echo "== pytest"; tail -3 $P/pytest.txt; fi
rm -rf $P
