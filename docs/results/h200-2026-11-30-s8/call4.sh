#!/usr/bin/env bash
# Session 8, call 4 (nvidia-h200), carry ["build/dev","build/nd"]: after call
# 3, the simple forward by default and the forward's two-slot geometry for
# H > 2048 (plan.h): GPU tests, then A = build/nd (pre-binary64 kernels,
# 03a6643) against B = build/dev twice, interleaved, and B's ring/simple sweep.
export PATH=/usr/local/cuda/bin:$PATH
P=$OUT/p4; mkdir -p $P
NORMGATE_BUILD=build/dev NG_STEPS="tests" timeout 240 scripts/h200.sh >$P/h200.txt 2>&1
S="65537,2048 65537,4096 65537,6144 131072,4096 262148,256"
for i in 1 2; do
  timeout 60 build/nd/kernels_bench --res --no-controls --w both --json $P/A$i.json $S >$P/A$i.txt 2>&1
  timeout 60 build/dev/bench/kernels_bench --res --no-controls --w both --json $P/B$i.json $S >$P/B$i.txt 2>&1
done
timeout 120 build/dev/bench/kernels_bench --no-controls --w bf16 --res --depth 3:0:0:1:1:1:1,3:0:0:1:0:1:1,3:0:0:1:1:0:1 65537,1536 98304,5120 $S >$P/w.txt 2>&1
tar czf $OUT/call4.tgz -C $OUT p4
echo "== tests"; grep -E "rc=|PASSED|FAILED" $P/h200.txt | tail -12
echo "== sweep"; grep -E "\| fwd" $P/w.txt | awk -F'|' '{print $2,$4,$5}'
echo "== A/B"; python3 scripts/ab_table.py $P/A1.json $P/B1.json $P/A2.json $P/B2.json | grep -v "copy\|nondet"
