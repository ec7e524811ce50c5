#!/usr/bin/env bash
# Written at the end of session 10 for session 11 (nvidia-h200-x2; carry
# ["build/dev/apps"] after `scripts/build && scripts/stage_carry`; the
# kernels must be those of session 10's call 4, 44a0781: `normgate routes
# routes/sm90a.toml` must list the heads4 routes as [current], else the
# kernels changed and the v2 journals are refused).
# The forms campaign v2 resumes: res (3100 cases journalled, grid nearly done,
# then its refinement) and heads24 (1570 cases; its large-T cases are 24x the
# rows). heads4 (slice 3) has finished and is left out, so the two running
# slices get 16 threads each (slice numbers stay: slice K = K-th argument).
# Repeat until res and heads24 report, unpacking $OUT/campaign.tgz over
# docs/results/campaign-forms-v2 and committing between calls; when a slice
# passes, copy campaign-forms-v2/sm90a.approvals.json to routes/.
# When only heads24 is left, split it over both GPUs (scripts/journal_merge.py;
# see docs/results/h200-2026-11-30-s9/next-call1.sh for the pattern).
# Prediction: res reports within this call (grid 68 cases + ~200 refinement
# cases); heads24 needs one or two more calls; every window passes with dw
# err/tol <= ~1e-3 (session 10: 0.000594 worst so far).
export PATH=/usr/local/cuda/bin:$PATH
mkdir -p $OUT/p
NORMGATE_BUILD=build/dev NG_CAMPAIGN_DEADLINE=${NG_CAMPAIGN_DEADLINE:-560} NG_CAMPAIGN_APPROVE=1 \
  scripts/campaign.sh docs/results/campaign-forms-v2 "form=res" "form=heads24" >$OUT/p/campaign.txt 2>&1
tail -12 $OUT/p/campaign.txt
