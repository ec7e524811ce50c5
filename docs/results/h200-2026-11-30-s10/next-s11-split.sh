#!/usr/bin/env bash
# Written at the end of session 10 for session 11 (nvidia-h200-x2; carry
# ["build/dev/apps"]): when the res slice of docs/results/campaign-forms-v2
# has reported and heads24 (slice 2) would run alone on one GPU, split it by
# weight dtype over both GPUs: windows of w=bf16 and w=fp32 share no case
# (the case id holds w) and each window's refinement and "other windows'
# cases" stay inside its own (H, w, form), so the split gives the same cases
# as one run. Then merge the journals (scripts/journal_merge.py) and resume
# slice 2 with its own filter once: it finds every case journalled, runs
# none, and writes slice-2.md/.json and the approvals.
# Then here: tar xzf split.tgz; copy p/split/* over
# docs/results/campaign-forms-v2-split (its campaign.tgz), and, when merged,
# p/forms/slice-2.* over docs/results/campaign-forms-v2 and
# p/forms/sm90a.approvals.json to routes/ (verdict PASS); commit.
export PATH=/usr/local/cuda/bin:$PATH
P=$OUT/p; mkdir -p $P/split $P/forms
bin=build/dev/apps/normgate
C=docs/results/campaign-forms-v2
S=docs/results/campaign-forms-v2-split
mkdir -p $S
for k in 1 2; do [ -f $S/slice-$k.jsonl.gz ] || cp $C/slice-2.jsonl.gz $S/slice-$k.jsonl.gz; done
NORMGATE_BUILD=build/dev NG_CAMPAIGN_DEADLINE=${NG_CAMPAIGN_DEADLINE:-500} OUT=$P/split \
  scripts/campaign.sh $S "form=heads24,w=bf16" "form=heads24,w=fp32" >$P/split.txt 2>&1
if [ -f $S/slice-1.md ] && [ -f $S/slice-2.md ]; then
  python3 scripts/journal_merge.py $P/forms/slice-2.jsonl $S/slice-1.jsonl.gz $S/slice-2.jsonl.gz >$P/forms/merge.log 2>&1
  timeout 80 $bin gate routes/sm90a.toml --seeds 3x16 --windows "form=heads24" --journal $P/forms/slice-2.jsonl \
    --approve --quiet --report-md $P/forms/slice-2.md --report-json $P/forms/slice-2.json >$P/forms/slice-2.log 2>&1
  echo "merged gate rc=$?" >>$P/forms/merge.log
  gzip -f $P/forms/slice-2.jsonl
  cp routes/sm90a.approvals.json $P/forms/
fi
tar czf $OUT/split.tgz -C $OUT p
echo "== split"; tail -6 $P/split.txt
echo "== merged heads24 slice"; cat $P/forms/merge.log 2>/dev/null; grep -E "^(journal|verdict|pipeline)" $P/forms/slice-2.log 2>/dev/null
