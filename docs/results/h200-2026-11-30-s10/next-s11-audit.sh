#!/usr/bin/env bash
# Written at the end of session 10 for session 11 (nvidia-h200; carry
# ["build/dev"] after `scripts/build && scripts/stage_carry`):
#   1. the sanitizer on the kernels of session 10's call 4 (not yet run on
#      them: calls 1-2 ran it on earlier versions of the staging),
#   2. issue 6's audit on the first finished v2 slice (heads4,
#      docs/results/campaign-forms-v2/slice-3.json): repro + --save of the
#      worst window's worst case, ctl_fp32_seq on a cancel case of it (exit 1
#      expected), export of every window's worst case, inspect; .h5 files
#      over 5 MiB are dropped after inspect (their commands stay in audit.log).
# Then here: tar xzf logs.tgz; `normgate plot` the maps and cases into
# docs/results/audit-heads4/ (look at the PNGs), commit the .h5 cases under
# datasets/cases/ (< 5 MB each) and the logs.
# Prediction: sanitizer 11/11 clean each; audit under 150 s on the GPU host.
export PATH=/usr/local/cuda/bin:$PATH
NORMGATE_BUILD=build/dev NG_STEPS="sanitize audit" NG_AUDIT_KEEP_MB=5 \
  NG_AUDIT_REPORT=docs/results/campaign-forms-v2/slice-3.json timeout 560 scripts/h200.sh >$OUT/h200.txt 2>&1
tail -30 $OUT/h200.txt
