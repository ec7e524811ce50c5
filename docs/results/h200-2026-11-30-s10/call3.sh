#!/usr/bin/env bash
# Session 10, call 3 (nvidia-h200; carry ["build/dev", "build/nd9"]): the
# backward computing row i+1's refined rstd at the end of row i (its chain of
# a shared read and four FP64 operations off the path to the barrier;
# branch-free rstd_refined), m staged 32 rows at a time (call 2: +2-12%).
#   1. test_kernels (GPU bitwise vs the models; new MsqPath.LongChunksCross-
#      TheStagedBatchesOfM: chunks of > 64 rows),
#   2. A/B against build/nd9 (main 30e8714, before msq), two interleaved runs.
#      Prediction: backward within 1.02x at H >= 2048, within 1.05x at H=256.
export PATH=/usr/local/cuda/bin:$PATH
P=$OUT/p; mkdir -p $P
timeout 200 build/dev/tests/test_kernels >$P/test_kernels.txt 2>&1; echo "test_kernels rc=$?" >>$P/test_kernels.txt
S="65537,2048 65537,6144 131072,4096 262148,256"
for i in 1 2; do
  timeout 60 build/nd9/kernels_bench --res --no-controls --w bf16 --json $P/A$i.json $S >$P/A$i.txt 2>&1
  timeout 60 build/dev/bench/kernels_bench --res --no-controls --w bf16 --json $P/B$i.json $S >$P/B$i.txt 2>&1
done
tar czf $OUT/call3.tgz -C $OUT p
echo "== tests"; grep -E "MsqPath|^\[  (PASSED|FAILED)|rc=" $P/test_kernels.txt | tail -12
echo "== A/B"; python3 scripts/ab_table.py $P/A1.json $P/B1.json $P/A2.json $P/B2.json
