#!/usr/bin/env bash
# Session 11, call 4 (nvidia-h200-x2; carry ["build/dev"] after `scripts/build
# && scripts/stage_carry` at the merge of wip/bwd-rowptr, 48e338b):
#   GPU 0: every test binary (h200.sh tests) and the sanitizer (memcheck 11
#          runs, racecheck 13 with the two long-chunk cases) on the merged
#          kernels;
#   GPU 1: the forms campaign v3 on the merged kernels starts, slices split by
#          weight dtype (each a complete set of windows, no merge needed):
#          1 heads4 w=bf16, 2 heads4 w=fp32 (later calls add 3-6: res bf16,
#          res fp32, heads24 bf16, heads24 fp32, passing all six in this
#          order), 14 threads each, approvals when a slice passes.
# Predictions: every test passes (the merge moves addresses only; GPU = CPU
# models bit for bit); sanitizer clean; heads4 finishes in ~330 s with the
# same numbers as v2 on 44a0781 to the last digit (identical outputs give
# identical err/tol: dx 0.389, dw 0.000593, y 0.366, rstd 0.00596).
export PATH=/usr/local/cuda/bin:$PATH
mkdir -p $OUT/w
C=docs/results/campaign-v3-forms
CUDA_VISIBLE_DEVICES=1 NORMGATE_BUILD=build/dev NG_CAMPAIGN_DEADLINE=${NG_CAMPAIGN_DEADLINE:-470} NG_CAMPAIGN_APPROVE=1 \
  NG_CAMPAIGN_THREADS=14 NG_CAMPAIGN_GPUS=1 OUT=$OUT/w/campaign \
  scripts/campaign.sh $C "form=heads4,w=bf16" "form=heads4,w=fp32" >$OUT/w/campaign.out 2>&1 &
CUDA_VISIBLE_DEVICES=0 NORMGATE_BUILD=build/dev NG_STEPS="tests sanitize" OUT=$OUT/w/side timeout 520 scripts/h200.sh >$OUT/w/side.out 2>&1
echo "side rc=$?" >>$OUT/w/side.out
wait
tar czf $OUT/call.tgz -C $OUT w
grep -E "^test_|sanitizer:|side rc" $OUT/w/side.out
grep -vE "^(memcheck|racecheck) " $OUT/w/side.out | grep -iE "fail|error" | head -5
tail -6 $OUT/w/campaign.out
