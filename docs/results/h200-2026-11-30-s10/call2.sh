#!/usr/bin/env bash
# Session 10, call 2 (nvidia-h200; carry ["build/dev", "build/nd9"]): the
# backward with the forward's m staged 32 rows at a time in shared memory
# (call 1 measured +8-20% backward time with one global msq load per row).
#   1. every test binary and the sanitizer (the staging is a new shared
#      buffer: racecheck),
#   2. A/B against build/nd9 (main 30e8714, before msq), two interleaved
#      runs. Prediction: backward within 1.02x, forward as call 1 (1.004-1.022).
export PATH=/usr/local/cuda/bin:$PATH
P=$OUT/p; mkdir -p $P
NORMGATE_BUILD=build/dev NG_STEPS="tests sanitize" timeout 330 scripts/h200.sh >$P/h200.txt 2>&1
S="65537,2048 65537,6144 131072,4096 262148,256"
for i in 1 2; do
  timeout 60 build/nd9/kernels_bench --res --no-controls --w bf16 --json $P/A$i.json $S >$P/A$i.txt 2>&1
  timeout 60 build/dev/bench/kernels_bench --res --no-controls --w bf16 --json $P/B$i.json $S >$P/B$i.txt 2>&1
done
tar czf $OUT/call2.tgz -C $OUT p
echo "== tests"; grep -E "rc=|sanitizer:" $P/h200.txt | grep -vE "memcheck |racecheck " ; grep -c "0 errors\|0 hazards" $P/h200.txt
echo "== A/B"; python3 scripts/ab_table.py $P/A1.json $P/B1.json $P/A2.json $P/B2.json
