#!/usr/bin/env bash
# Session 11 (nvidia-h200-x2; carry ["build/c11"], made by
# docs/results/h200-2026-11-30-s11/stage.sh): finish the forms campaign v2 on
# the kernels of 44a0781 (the v2 journals' variant hashes).
#   res            docs/results/campaign-forms-v2 slice 1 (filter form=res)
#   heads24 bf16   docs/results/campaign-forms-v2-split slice 1
#   heads24 fp32   docs/results/campaign-forms-v2-split slice 2
# Both split slices start from v2's heads24 journal (slice 2: 1570 bf16 cases,
# no fp32 case yet). Windows of w=bf16 and w=fp32 share no case (the case id
# holds w), and each window's refinement and "other windows' cases" stay inside
# its own (H, w, form): the split runs the cases one heads24 slice would.
# When both split slices have reported, their journals are merged
# (scripts/journal_merge.py) into v2's slice 2 and the heads24 gate resumes
# from it once (runs no case) for one report of the form.
# State: out/c11 on the device (ignored, so kept between warm calls); each
# journal is seeded from the tree when the tree's copy has more lines (a cold
# machine, or the tree updated from an earlier call's pack).
# Approvals: after the slices stop, sequentially, for res and the merged
# heads24 slice when their verdict is PASS (gate --approve resumes from the
# complete journal), into routes/sm90a.approvals.json, packed.
# Env: FORMS_THREADS "res,bf16,fp32" OpenMP threads (default 6,8,17),
# FORMS_GPUS "res,bf16,fp32" (default 0,0,1), FORMS_DEADLINE (default 480 s).
# Output: $OUT/w/forms/ (forms.tgz of out/c11, logs); prints a short table.
set -u
root="$(cd "$(dirname "$0")/../../.." && pwd)"
cd "$root"
export PATH=/usr/local/cuda/bin:$PATH
B=${NORMGATE_BUILD:-build/c11}
bin=$B/apps/normgate
[ -x "$bin" ] || { echo "forms: no $bin (carry build/c11)"; exit 3; }
P=$OUT/w/forms; mkdir -p "$P"
V=docs/results/campaign-forms-v2; S=docs/results/campaign-forms-v2-split
st=out/c11; mkdir -p $st/v2 $st/split
lines() { if [ -f "$1" ]; then zcat "$1" | wc -l; else echo 0; fi; }
# seed SRC DST: DST := SRC when SRC has more journal lines
seed() { [ -f "$1" ] && [ "$(lines "$1")" -gt "$(lines "$2")" ] && cp "$1" "$2"; return 0; }
seed $V/slice-1.jsonl.gz $st/v2/slice-1.jsonl.gz
cp $V/slice-1.filter $st/v2/
for k in 1 2; do
  seed $S/slice-$k.jsonl.gz $st/split/slice-$k.jsonl.gz
  seed $V/slice-2.jsonl.gz $st/split/slice-$k.jsonl.gz
  [ -f $S/slice-$k.filter ] && cp $S/slice-$k.filter $st/split/
done
for f in $st/v2/slice-1.jsonl.gz $st/split/slice-{1,2}.jsonl.gz; do echo "start: $f $(lines $f) lines"; done | tee $P/start.txt
IFS=, read -r t_res t_bf t_fp <<<"${FORMS_THREADS:-6,8,17}"
IFS=, read -r g_res g_bf g_fp <<<"${FORMS_GPUS:-0,0,1}"
D=${FORMS_DEADLINE:-480}
NORMGATE_BUILD=$B NG_CAMPAIGN_DEADLINE=$D NG_CAMPAIGN_THREADS=$t_res NG_CAMPAIGN_GPUS=$g_res OUT=$P/res \
  scripts/campaign.sh $st/v2 "form=res" >$P/res.txt 2>&1 &
NORMGATE_BUILD=$B NG_CAMPAIGN_DEADLINE=$D NG_CAMPAIGN_THREADS=$t_bf,$t_fp NG_CAMPAIGN_GPUS=$g_bf,$g_fp OUT=$P/split \
  scripts/campaign.sh $st/split "form=heads24,w=bf16" "form=heads24,w=fp32" >$P/split.txt 2>&1 &
wait
passed() { grep -q '^- verdict: \*\*PASS' "$1" 2>/dev/null; }
# approve DIR K FILTER: gate --approve from slice K's complete journal
approve() {
  local j rc; j=$(mktemp)
  zcat "$1/slice-$2.jsonl.gz" >"$j"
  timeout 120 "$bin" gate routes/sm90a.toml --seeds 3x16 --windows "$3" --journal "$j" --threads 16 --quiet \
    --approve --report-md "$1/slice-$2.md" --report-json "$1/slice-$2.json" >"$1/slice-$2.approve.log" 2>&1
  rc=$?; gzip -c "$j" >"$1/slice-$2.jsonl.gz"; rm -f "$j"
  echo "approve $3: rc=$rc $(grep -E '^verdict' "$1/slice-$2.approve.log")"
}
{
  passed $st/v2/slice-1.md && approve $st/v2 1 "form=res"
  if [ -f $st/split/slice-1.md ] && [ -f $st/split/slice-2.md ]; then
    python3 scripts/journal_merge.py $st/v2/slice-2.jsonl.gz $st/split/slice-1.jsonl.gz $st/split/slice-2.jsonl.gz
    echo "heads24 merged: $(lines $st/v2/slice-2.jsonl.gz) lines"
    cp $V/slice-2.filter $st/v2/
    approve $st/v2 2 "form=heads24"
    passed $st/v2/slice-2.md || echo "heads24 merged gate: not PASS (see slice-2.md)"
  fi
} >$P/approve.txt 2>&1
cp routes/sm90a.approvals.json $st/
tar czf $P/forms.tgz -C out c11
echo "== forms"; cat $P/start.txt
for f in $P/res.txt $P/split.txt; do grep -E "^\| [0-9]|^slice" $f; done
cat $P/approve.txt
