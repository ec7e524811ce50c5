#!/usr/bin/env bash
# Written at the end of session 11 for session 12's FIRST call (nvidia-h200;
# carry ["build/dev/bench", "build/wip-chunks", "build/capi/libnormgate_capi.so"]
# after `scripts/build && scripts/stage_carry`; build/wip-chunks/kernels_bench is branch
# wip/chunk-sweep: main's kernels, 48e338b, plus a host-side override of the
# backward's chunk cap; recipe: `git worktree add /work/cs wip/chunk-sweep &&
# cd /work/cs && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release &&
# cmake --build build --target kernels_bench`, then copy and strip).
# Before the whole-table campaign: the chunk count (plan.h num_chunks) is the
# one cheap backward gain seen in session 11 (2 whole waves at H=1536: -10.5%,
# 3 at H=2048: -3.3%, at T=65537); a new rule changes dw's rounding (and the
# CPU models with it), so it must come before the campaign or cost a re-gate.
#   1. finish_bench on the idle host at 1, 4, 8, 16 threads (H=4096, T=16384,
#      llm): CPU ns per element of reference and validation (the campaigns ran
#      ~90 thread-ns per element on x2; the dev box 11.3 at one thread).
#   2. The sweep: --chunk-sm-waves K (the cap = K whole waves of this H's
#      chunk CTAs: 132 SMs x floor(1024 / team)) for K = 0 (the plan), 1, 2,
#      3, 4, 6, 8 at H = 1536, 2048, 4096, 5120, 6144 and 256 x T = 16384,
#      65537, 131072 (262148 at H=256), BF16 weight, then the same K in
#      reverse (drift).
#   3. Nsight Compute on the forward gap (TC's forward ran 0.78x of our time
#      at [65537, 2048] in session 5): one fwd+bwd of ours and of TC at
#      H=2048, T=65537, BF16 w, inside the profiler window (kernel_shapes.py
#      --ncu-window; compilation and autotuning outside), sections
#      SpeedOfLight, MemoryWorkloadAnalysis, Occupancy, WarpStateStats,
#      LaunchStats; CSV in the pack. Prediction: our fwd_simple_kernel
#      reaches < 80% of DRAM peak with warps mostly stalled on the barrier or
#      the long scoreboard (the row's reduction and rstd), TC's > 85%.
# Then here: scripts/chunk_waves_table.py over sw-*w<K>.json (K in the name)
# gives B/A per shape; a rule goes into plan.h only if one K (or a K per H)
# wins at every T of that H by more than the two passes' spread.
# Predictions: K=2 best at H=1536 (-8 to -11%), K=3 at H=2048 (-3%), at
# H >= 4096 the plan is already whole waves (3 at 4096, 4 at 6144, 6 at 5120)
# and within 1% of the best K; at H=256 the plan (half a wave) stays best;
# at T=16384 every K >= 2 gives the same chunks (ceil(T/16) = 1024 is below
# the cap) except where 1 wave is fewer.
export PATH=/usr/local/cuda/bin:$PATH
P=$OUT/p; mkdir -p $P
{ lscpu; grep -m1 -o -w "avx2\|avx512f\|fma" /proc/cpuinfo | sort -u; free -g; } >$P/host.txt 2>&1
for t in 1 4 8 16; do
  timeout 60 build/dev/bench/finish_bench H=4096,T=16384,w=bf16,form=plain,family=llm,seed=1 bwd_det_chunked 2 $t >$P/finish-t$t.txt 2>&1
done
S="16384,1536 65537,1536 131072,1536 16384,2048 65537,2048 131072,2048 16384,4096 65537,4096 131072,4096 16384,5120 65537,5120 131072,5120 16384,6144 65537,6144 131072,6144 262148,256"
for pass in a b; do
  ks="0 1 2 3 4 6 8"; [ $pass = b ] && ks="8 6 4 3 2 1 0"
  for k in $ks; do
    [ $SECONDS -lt 400 ] || { echo "pass $pass K=$k skipped at ${SECONDS}s (call limit)" >>$P/skipped.txt; continue; }
    timeout 80 build/wip-chunks/kernels_bench --no-controls --w bf16 --chunk-sm-waves $k --json $P/sw-$pass-w$k.json $S >$P/sw-$pass-w$k.txt 2>&1
  done
done
export NORMGATE_LIB=$PWD/build/capi/libnormgate_capi.so
ncu_left=$(( 560 - SECONDS ))
[ $ncu_left -ge 60 ] || ncu_left=1   # no time left: ncu is skipped (timeout 1)
timeout $ncu_left ncu --clock-control none --profile-from-start off --csv --page details \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section LaunchStats \
  python3 bench/kernel_shapes.py --case H=2048,T=65537,w=bf16,form=plain,family=normal,seed=0 --impls ours,TC --ncu-window \
  >$P/ncu_fwd.csv 2>$P/ncu_fwd.err
echo "ncu rc=$?" >>$P/ncu_fwd.err
tar czf $OUT/sweep.tgz -C $OUT p
echo "== host: $(grep -m1 'Model name' $P/host.txt | tr -s ' '); flags: $(grep -o -w 'avx2\|avx512f\|fma' $P/host.txt | sort -u | tr '\n' ' ')"
[ -f $P/skipped.txt ] && cat $P/skipped.txt
echo "== finish_bench CPU ns per element"
for t in 1 4 8 16; do echo "threads $t: $(grep -hE "CPU ns per element" $P/finish-t$t.txt | tr '\n' ' ')"; done
echo "== sweep pass a"; python3 scripts/chunk_waves_table.py $P/sw-a-w*.json | grep -E "det|shape|---"
echo "== sweep pass b"; python3 scripts/chunk_waves_table.py $P/sw-b-w*.json | grep -E "det|shape|---"
echo "== ncu (kernels profiled, DRAM throughput % of peak)"; tail -2 $P/ncu_fwd.err
python3 - $P/ncu_fwd.csv <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) >= 15]
for r in rows[1:]:
    if r[12] in ("DRAM Throughput", "Duration", "Achieved Occupancy", "Memory Throughput"):
        print(f"{r[0]:>3} {r[4][:60]:60} {r[12]:20} {r[14]} {r[13]}")
PY
