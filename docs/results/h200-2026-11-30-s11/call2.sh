#!/usr/bin/env bash
# Session 11, call 2 (nvidia-h200-x2; carry ["build/c11"]): forms.sh with every
# slice on GPU 1 (FORMS_THREADS from the command line, after call 1), and on
# GPU 0 beside it: wip.sh (branch wip/bwd-rowptr against main; GPU 0 runs
# nothing else meanwhile), then issue 6's audit (h200.sh NG_STEPS=audit) on the
# finished heads4 slice (docs/results/campaign-forms-v2/slice-3.json: repro +
# --save of the worst window's worst case, ctl_fp32_seq on a cancel case of it
# (exit 1 expected), export --keep 1, inspect; .h5 over 5 MiB dropped).
# Predictions: wip as in wip.sh; audit: every step's exit status as expected,
# under 150 s.
export PATH=/usr/local/cuda/bin:$PATH
mkdir -p $OUT/w
s=docs/results/h200-2026-11-30-s11
FORMS_GPUS=1,1,1 FORMS_DEADLINE=${FORMS_DEADLINE:-480} bash $s/forms.sh >$OUT/w/forms.out 2>&1 &
export CUDA_VISIBLE_DEVICES=0
bash $s/wip.sh >$OUT/w/wip.out 2>&1
OMP_NUM_THREADS=4 NORMGATE_BUILD=build/c11 NG_STEPS=audit NG_AUDIT_KEEP_MB=5 NG_DEADLINE=$((520 - SECONDS)) \
  NG_AUDIT_REPORT=docs/results/campaign-forms-v2/slice-3.json OUT=$OUT/w/side scripts/h200.sh >$OUT/w/side.out 2>&1
echo "audit rc=$?" >>$OUT/w/side.out
wait
tar czf $OUT/call.tgz -C $OUT w
cat $OUT/w/wip/tables.txt
tail -14 $OUT/w/side.out
cat $OUT/w/forms.out
