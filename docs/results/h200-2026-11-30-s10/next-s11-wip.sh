#!/usr/bin/env bash
# Written at the end of session 10 for session 11 (nvidia-h200; carry
# ["build/dev/bench", "build/wip-rowptr"]; build/wip-rowptr holds
# kernels_bench and test_kernels of branch wip/bwd-rowptr, built here on
# 2026-11-30; build/dev/bench the kernels_bench of main after `scripts/build &&
# scripts/stage_carry`).
# wip/bwd-rowptr: the backward's row pointers advance one stride a row
# (plain rows) instead of a 64-bit multiply by r for each of x, dy, dx,
# dh_new and the L2 prefetch rows; the row loop's SASS (1-slot bf16 kernel)
# has 49 uniform-datapath instructions where main has 83 (385 in all vs
# 434). The backward is issue-bound (ncu, session 5) and its per-row
# instructions are shared by only 8 columns a thread.
#   1. the wip test_kernels (GPU = CPU model bit for bit; the change moves
#      addresses only, so every GPU test must pass unchanged),
#   2. A/B, main (A) against wip (B), two interleaved runs.
# Prediction: backward 3-8% faster at every shape (B/A 0.92-0.97), forward
# unchanged (same code: B/A within 0.005).
export PATH=/usr/local/cuda/bin:$PATH
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
P=$OUT/p; mkdir -p $P
timeout 240 build/wip-rowptr/test_kernels >$P/test_kernels_wip.txt 2>&1; echo "test_kernels rc=$?" >>$P/test_kernels_wip.txt
S="65537,2048 65537,6144 131072,4096 262148,256 65537,1536 65537,5120"
for i in 1 2; do
  timeout 80 build/dev/bench/kernels_bench --res --no-controls --w both --json $P/A$i.json $S >$P/A$i.txt 2>&1
  timeout 80 build/wip-rowptr/kernels_bench --res --no-controls --w both --json $P/B$i.json $S >$P/B$i.txt 2>&1
done
tar czf $OUT/wip.tgz -C $OUT p
echo "== wip tests"; grep -E "^\[  (PASSED|FAILED)|rc=" $P/test_kernels_wip.txt | tail -6
echo "== A/B (A main, B wip/bwd-rowptr)"; python3 scripts/ab_table.py $P/A1.json $P/B1.json $P/A2.json $P/B2.json | grep -E "bwd|copy|shape|---"
