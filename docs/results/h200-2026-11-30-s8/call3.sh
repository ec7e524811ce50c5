#!/usr/bin/env bash
# Session 8, call 3 (nvidia-h200), carry ["build/dev","build/nd"]: the forward
# with rstd computed by the team's first warp only (pipeline.h fwd_rstd_warp),
# GPU tests (the settings sweep checks W=0 and W=1 give the model's bits),
# then A = build/nd (pre-binary64 kernels, 03a6643) against B = build/dev
# twice, interleaved, and B's own W=0/W=1/simple sweep.
export PATH=/usr/local/cuda/bin:$PATH
P=$OUT/p3; mkdir -p $P
NORMGATE_BUILD=build/dev NG_STEPS="tests" timeout 240 scripts/h200.sh >$P/h200.txt 2>&1
S="65537,2048 65537,4096 65537,6144 131072,4096 262148,256"
for i in 1 2; do
  timeout 60 build/nd/kernels_bench --res --no-controls --w bf16 --json $P/A$i.json $S >$P/A$i.txt 2>&1
  timeout 60 build/dev/bench/kernels_bench --res --no-controls --w bf16 --json $P/B$i.json $S >$P/B$i.txt 2>&1
done
timeout 120 build/dev/bench/kernels_bench --no-controls --w bf16 --res --depth 3:0:0:1:0:1:1,3:0:0:1:0:1:0,3:0:0:1:1:1:1,3:0:0:1:1:0:1 65537,1536 $S >$P/w.txt 2>&1
tar czf $OUT/call3.tgz -C $OUT p3
echo "== tests"; grep -E "rc=|PASSED|FAILED" $P/h200.txt | tail -12
echo "== W sweep"; grep -E "\| fwd" $P/w.txt | awk -F'|' '{print $2,$4,$5}'
echo "== A/B"; python3 scripts/ab_table.py $P/A1.json $P/B1.json $P/A2.json $P/B2.json | grep -v "copy\|nondet"
