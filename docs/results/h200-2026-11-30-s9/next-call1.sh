#!/usr/bin/env bash
# SUPERSEDED (end of session 9): the backward changes first (wip/bwd-rstd; next-s10-call1.sh),
# then every campaign restarts on the new kernels; this script was for the old ones.
# Written at the end of session 9, for the next session's first call
# (nvidia-h200-x2; carry ["build/dev"] after scripts/build && scripts/stage_carry):
#   1. issue 6's audit on the first finished campaign (the res slice,
#      docs/results/campaign-forms/slice-1.json): repro + --save of its worst
#      case (H=6144,T=2047,w=bf16,form=res,family=llm,seed=15, dw 0.581) and of
#      ctl_fp32_seq on a cancel case (exit 1 expected), export of every
#      window's worst case (maps.h5), inspect. A CPU-model dry run of the same
#      step here took 9 min on 2 cores (export 528 s: two T = 131071 cases);
#      predicted on the GPU host: under 150 s.
#   2. the heads slice's refinement split over both GPUs: its journal
#      (campaign-forms/slice-2, grid done: 6336 cases) copied to two slices
#      of campaign-forms-split, `form=heads24` on GPU 0 and `form=heads4` on
#      GPU 1 (the two forms share no case),
#   3. when both finished: scripts/journal_merge.py back into
#      campaign-forms/slice-2.jsonl.gz and the slice's own gate once more
#      (`--windows "form=heads24|heads4" --approve`): it resumes every case,
#      runs none, and writes slice-2.md/.json and the approvals.
# Run: bash docs/results/h200-2026-11-30-s9/next-call1.sh     (pack: $OUT/call1.tgz)
# A second call while the split has not finished: NG_SKIP_AUDIT=1 (after
# unpacking p/split/campaign.tgz over docs/results/campaign-forms-split).
# Then here: tar xzf call1.tgz; copy p/split/* over docs/results/campaign-forms-split
# (campaign.tgz), p/forms/* over docs/results/campaign-forms, and
# p/forms/sm90a.approvals.json to routes/ when the verdict is PASS.
export PATH=/usr/local/cuda/bin:$PATH
P=$OUT/p; mkdir -p $P/audit $P/split $P/forms
bin=build/dev/apps/normgate
[ "${NG_SKIP_AUDIT:-0}" = 1 ] || NORMGATE_BUILD=build/dev NG_STEPS=audit NG_AUDIT_KEEP_MB=5 NG_AUDIT_REPORT=docs/results/campaign-forms/slice-1.json \
  OUT=$P/audit timeout 240 scripts/h200.sh >$P/audit.txt 2>&1
S=docs/results/campaign-forms-split
mkdir -p $S
for k in 1 2; do [ -f $S/slice-$k.jsonl.gz ] || cp docs/results/campaign-forms/slice-2.jsonl.gz $S/slice-$k.jsonl.gz; done
left=$(( 540 - SECONDS ))
NORMGATE_BUILD=build/dev NG_CAMPAIGN_DEADLINE=$left OUT=$P/split scripts/campaign.sh $S "form=heads24" "form=heads4" \
  >$P/split.txt 2>&1
if [ -f $S/slice-1.md ] && [ -f $S/slice-2.md ]; then
  python3 scripts/journal_merge.py $P/forms/slice-2.jsonl $S/slice-1.jsonl.gz $S/slice-2.jsonl.gz >$P/forms/merge.log 2>&1
  timeout 60 $bin gate routes/sm90a.toml --seeds 3x16 --windows "form=heads24|heads4" --journal $P/forms/slice-2.jsonl \
    --approve --quiet --report-md $P/forms/slice-2.md --report-json $P/forms/slice-2.json >$P/forms/slice-2.log 2>&1
  echo "merged gate rc=$?" >>$P/forms/merge.log
  gzip -f $P/forms/slice-2.jsonl
  cp routes/sm90a.approvals.json $P/forms/
fi
tar czf $OUT/call1.tgz -C $OUT p
echo "== audit"; tail -16 $P/audit.txt | cut -c1-200
echo "== split refinement"; tail -5 $P/split.txt
echo "== merged heads slice"; cat $P/forms/merge.log 2>/dev/null; grep -E "^(journal|verdict)" $P/forms/slice-2.log 2>/dev/null
