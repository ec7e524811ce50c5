#!/usr/bin/env bash
# Session 11: branch wip/bwd-rowptr against main on one GPU (run with
# CUDA_VISIBLE_DEVICES set; carry ["build/c11"]: bench/kernels_bench is main's
# (A), wip/ the branch's kernels_bench and test_kernels (B)). The plan and
# predictions are those of ../h200-2026-11-30-s10/next-s11-wip.sh: backward
# B/A 0.92-0.97 on plain rows, heads backward 0.75-0.9, heads forward
# 0.85-0.95, forward unchanged (within 0.005); whole chunk waves 3-10% faster
# than the plan's count at H=1536 and 2048, 16 waves 10-30% faster at H=256.
# Left out from that plan: finish_bench at 1-16 threads (the other GPU's
# campaign keeps the host's cores busy in this call).
# Output: $OUT/w/wip/ (logs and JSON); prints the tables.
root="$(cd "$(dirname "$0")/../../.." && pwd)"
cd "$root"
export PATH=/usr/local/cuda/bin:$PATH
[ -e /work/main ] || { mkdir -p /work && ln -s "$root" /work/main; }
A=build/c11/bench/kernels_bench; Bw=build/c11/wip
P=$OUT/w/wip; mkdir -p $P
# (the branch's binary checks its variant hashes against the files on disk,
# which are main's here: that one test is left out)
timeout 200 $Bw/test_kernels --gtest_brief=1 --gtest_filter=-Registry.SourceHashMatchesTheFilesOnDisk >$P/test_kernels_wip.txt 2>&1
echo "test_kernels rc=$?" >>$P/test_kernels_wip.txt
S="65537,2048 65537,6144 131072,4096 262148,256 65537,1536 65537,5120"
for i in 1 2; do
  timeout 80 $A --res --no-controls --w both --json $P/A$i.json $S >$P/A$i.txt 2>&1
  timeout 80 $Bw/kernels_bench --res --no-controls --w both --json $P/B$i.json $S >$P/B$i.txt 2>&1
done
for i in 1 2; do
  timeout 60 $A --heads --no-controls --w bf16 --json $P/HA$i.json 262148,256 1048576,256 >$P/HA$i.txt 2>&1
  timeout 60 $Bw/kernels_bench --heads --no-controls --w bf16 --json $P/HB$i.json 262148,256 1048576,256 >$P/HB$i.txt 2>&1
done
W="65537,1536 65537,2048 131072,2048 262148,256"
for w in 0 5 6 8 10 16; do
  timeout 60 $Bw/kernels_bench --no-controls --w bf16 --chunk-waves $w --json $P/cw-w$w.json $W >$P/cw-w$w.txt 2>&1
done
{
echo "== wip tests"; grep -E "^\[  (PASSED|FAILED)|rc=" $P/test_kernels_wip.txt | tail -6
echo "== chunk waves (wip binary)"; python3 scripts/chunk_waves_table.py $P/cw-w*.json
echo "== A/B (A main, B wip/bwd-rowptr)"; python3 scripts/ab_table.py $P/A1.json $P/B1.json $P/A2.json $P/B2.json | grep -E "bwd|fwd|copy|shape|---"
echo "== A/B heads"; python3 scripts/ab_table.py $P/HA1.json $P/HB1.json $P/HA2.json $P/HB2.json | grep -E "heads|shape|---"
} >$P/tables.txt 2>&1
