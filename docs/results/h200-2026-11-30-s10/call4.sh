#!/usr/bin/env bash
# Session 10, call 4 (nvidia-h200; carry ["build/dev", "build/nd9"]): the
# backward with each row's refined rstd computed 32 rows at a time by the
# CTA's first warp into shared memory (one row a lane: global loads of rstd
# and m, rstd_refined); per row one shared 8-byte read (call 3, each row
# computing its own one row ahead: +1-10%).
#   1. test_kernels (GPU bitwise vs the models; new MsqPath.LongChunksCross-
#      TheStagedBatchesOfM: chunks of > 64 rows),
#   2. A/B against build/nd9 (main 30e8714, before msq), two interleaved runs.
#      Prediction: backward within 1.02x of A at every shape.
export PATH=/usr/local/cuda/bin:$PATH
P=$OUT/p; mkdir -p $P
timeout 200 build/dev/tests/test_kernels >$P/test_kernels.txt 2>&1; echo "test_kernels rc=$?" >>$P/test_kernels.txt
S="65537,2048 65537,6144 131072,4096 262148,256"
for i in 1 2; do
  timeout 60 build/nd9/kernels_bench --res --no-controls --w bf16 --json $P/A$i.json $S >$P/A$i.txt 2>&1
  timeout 60 build/dev/bench/kernels_bench --res --no-controls --w bf16 --json $P/B$i.json $S >$P/B$i.txt 2>&1
done
tar czf $OUT/call4.tgz -C $OUT p
echo "== tests"; grep -E "MsqPath|^\[  (PASSED|FAILED)|rc=" $P/test_kernels.txt | tail -12
echo "== A/B"; python3 scripts/ab_table.py $P/A1.json $P/B1.json $P/A2.json $P/B2.json
