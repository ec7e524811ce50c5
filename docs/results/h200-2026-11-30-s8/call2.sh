#!/usr/bin/env bash
# Session 8, call 2 (nvidia-h200, warm), carry ["build/dev"]: after call 1
# showed the binary64 forward 1.21x/1.27x slower (ring kernel), sweep the
# forward's streaming knobs at the new arithmetic: ring depth 3 (default),
# 6, L2 prefetch, blocked rows, and the simple forward (one row per team).
export PATH=/usr/local/cuda/bin:$PATH
P=$OUT/p2; mkdir -p $P
S="65537,1536 65537,2048 65537,4096 98304,5120 65537,6144 131072,4096 262148,256 1572888,256"
timeout 300 build/dev/bench/kernels_bench --no-controls --w bf16 --res --depth 3:0:0:1:0:1,6:0:0:1:0:1,3:2:0:1:0:1,3:0:4:1:0:1,3:0:0:1:1:1,3:0:0:1:1:0 --json $P/depth.json $S >$P/depth.txt 2>&1
tar czf $OUT/call2.tgz -C $OUT p2
grep -E "fwd" $P/depth.txt
