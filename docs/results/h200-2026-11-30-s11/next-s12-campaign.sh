#!/usr/bin/env bash
# Written at the end of session 11 for session 12 (nvidia-h200-x2; carry
# ["build/dev"] after `scripts/build && scripts/stage_carry`; kernels of
# 48e338b: `normgate routes routes/sm90a.toml` must list the six heads4
# routes as [current], else the kernels changed and the v3 journals are
# refused). Run after next-s12-sweep.sh, and only if the sweep leaves plan.h
# as it is (a new chunk rule changes the kernels: every campaign restarts on
# new journals, v4).
#   1. Two campaigns side by side (approvals serialized by campaign.sh's flock):
#      docs/results/campaign-v3-forms-b (res and heads24 by w, 4 slices;
#      ~1380 of ~1750 cases each journalled in session 11), 4 threads each;
#      docs/results/campaign-v3-plain (issue 4's whole table, plain windows:
#      slices H=6144, H=5120, H=4096|2048|1536), 5 threads each, the first
#      call with NG_CAMPAIGN_DEMO=1 (loader and control demonstration).
#   2. (NG_SANITIZE=1, the default; 0 in later calls) beside them on GPU 0:
#      h200.sh's sanitizer step, which now also runs the GPU layout tests
#      (pointers one element off alignment, padded rows) and the per-head view
#      tests under memcheck (issue 7: alignment and views under
#      compute-sanitizer on the H200); its logs as sanitizer-logs.tgz.
# Then here: tar xzf each pack over the directory of its name and commit;
# copy $OUT/sm90a.approvals.json to routes/ (written after both campaigns).
# Repeat with NG_CAMPAIGN_DEMO=0 until v3-b has reported.
# Predictions: the sanitizer clean (memcheck 12/12, racecheck 13/13); v3-b reports PASS on all 24 windows within
# this call (worst dw ~6e-4, dx 0.389, as v2); the plain slices journal
# about 4e11 elements (~1e3 cases each), no failure.
export PATH=/usr/local/cuda/bin:$PATH
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
P=$OUT/p; mkdir -p $P
B=build/dev
left=$(( ${NG_CALL_LIMIT:-560} - SECONDS ))
[ "$left" -ge 100 ] || left=100
NORMGATE_BUILD=$B NG_CAMPAIGN_DEADLINE=$(( left - 40 )) NG_CAMPAIGN_APPROVE=1 NG_CAMPAIGN_THREADS=4 NG_CAMPAIGN_GPUS=0,1,0,1 \
  OUT=$P/forms scripts/campaign.sh docs/results/campaign-v3-forms-b \
  "form=res,w=bf16" "form=res,w=fp32" "form=heads24,w=bf16" "form=heads24,w=fp32" >$P/forms.txt 2>&1 &
NORMGATE_BUILD=$B NG_CAMPAIGN_DEADLINE=$(( left - 40 )) NG_CAMPAIGN_APPROVE=1 NG_CAMPAIGN_THREADS=5 NG_CAMPAIGN_GPUS=1,0,1 \
  NG_CAMPAIGN_DEMO=${NG_CAMPAIGN_DEMO:-1} OUT=$P/plain scripts/campaign.sh docs/results/campaign-v3-plain \
  "form=plain,H=6144" "form=plain,H=5120" "form=plain,H=4096|2048|1536" >$P/plain.txt 2>&1 &
if [ "${NG_SANITIZE:-1}" = 1 ]; then
  CUDA_VISIBLE_DEVICES=0 NORMGATE_BUILD=$B NG_STEPS=sanitize OUT=$P/side timeout $(( left - 20 )) scripts/h200.sh >$P/side.txt 2>&1 &
fi
wait
[ -f $P/side/logs.tgz ] && mv $P/side/logs.tgz $OUT/sanitizer-logs.tgz
mv $P/forms/campaign.tgz $OUT/campaign-v3-forms-b.tgz
mv $P/plain/campaign.tgz $OUT/campaign-v3-plain.tgz
cp routes/sm90a.approvals.json $OUT/
tar czf $OUT/logs.tgz -C $OUT p
[ -f $P/side.txt ] && { echo "== sanitizer"; grep -E "^(memcheck|racecheck) |^sanitizer:" $P/side.txt | grep -vE "0 errors$|0 hazards displayed \(0 errors, 0 warnings\)$" ; }
echo "== forms v3-b"; grep -E "^\| [0-9]|^slice" $P/forms.txt
echo "== plain v3"; grep -E "^rc=|^\| [0-9]|^slice" $P/plain.txt
rm -rf $P
