#!/usr/bin/env bash
# Session 12, call 1 (nvidia-h200-x2; carry ["build/dev"] after
# `scripts/build && scripts/stage_carry`; kernels of 48e338b, main 1bc5610).
# Session 12 keeps plan.h (no chunk sweep): the whole-table campaign and the
# peers need every remaining device minute, and a chunk rule would stale
# every approval (it goes to the fast-kernel work, branch wip/chunk-rule).
#   1. finish_bench on the idle host (before the campaigns start) at 1, 2, 4,
#      8, 16, 32 threads (H=4096, T=16384, llm), and 16 threads at T=65537:
#      does the oracle half scale with threads here? (campaigns ran ~90
#      thread-ns per element on x2; the dev box 11.8 at one thread).
#      Prediction: 1 thread 12-20 ns; 16 threads well below 16x (memory
#      bandwidth), which would explain the 90.
#   2. next-s12-campaign.sh (v3-b forms re-gate + plain v3 with the loader and
#      control demonstration + sanitizer incl. layout/views under memcheck).
export PATH=/usr/local/cuda/bin:$PATH
F=$OUT/finish; mkdir -p $F
{ lscpu; free -g; nproc; } >$F/host.txt 2>&1
for t in 1 2 4 8 16 32; do
  timeout 60 build/dev/bench/finish_bench H=4096,T=16384,w=bf16,form=plain,family=llm,seed=1 bwd_det_chunked 2 $t >$F/finish-t$t.txt 2>&1
done
timeout 60 build/dev/bench/finish_bench H=4096,T=65537,w=bf16,form=plain,family=llm,seed=1 bwd_det_chunked 1 16 >$F/finish-T65537-t16.txt 2>&1
tar czf $OUT/finish.tgz -C $OUT finish
NG_CALL_LIMIT=$(( 560 - SECONDS )) bash docs/results/h200-2026-11-30-s11/next-s12-campaign.sh
echo "== host: $(grep -m1 'Model name' $F/host.txt | tr -s ' '); $(grep -E '^(Thread|Core|Socket|NUMA node\(s\))' $F/host.txt | tr -s ' ' | tr '\n' ';')"
echo "== finish_bench (H=4096, T=16384, llm)"
for f in $F/finish-t*.txt $F/finish-T65537-t16.txt; do echo "$(basename $f .txt): $(grep -hE '^(ns per element|validation CPU|total|CaseOracle)' $f | tr -s ' ' | cut -c1-150 | tr '\n' '|')"; done
rm -rf $F
