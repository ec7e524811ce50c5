#!/usr/bin/env bash
# Written at the end of session 9, for session 10's first call (nvidia-h200),
# on main (the refined-rstd backward, msq, merged as 79affb2), after `scripts/build && scripts/stage_carry`;
# carry ["build/dev", "build/nd9"] (build/nd9/kernels_bench = the backward of
# main 30e8714, before the refined rstd: the A side).
#   1. every test binary and the sanitizer on the refined-rstd backward (the
#      GPU tests compare the kernels with their CPU models bit for bit; the
#      model changed with the kernel),
#   2. the failing case of session 9 on the GPU: dw err/tol 2.431 before,
#      0.00057 on the CPU model after (predicted: the same on the GPU),
#   3. the cost, A/B, two interleaved runs. Prediction: backward within
#      1.03x (one 8-byte msq load and ~4 FP64 operations per row, nothing
#      per element), forward within 1.01x (one 8-byte store per row).
#      Note: kernels_bench passes no msq (BwdArgs::msq null): it times the
#      kernels without the refinement's load unless it is taught to.
# Run: bash docs/results/h200-2026-11-30-s9/next-s10-call1.sh   (pack: $OUT/call1.tgz)
export PATH=/usr/local/cuda/bin:$PATH
P=$OUT/p; mkdir -p $P
NORMGATE_BUILD=build/dev NG_STEPS="tests sanitize" timeout 330 scripts/h200.sh >$P/h200.txt 2>&1
timeout 90 build/dev/apps/normgate check --backend gpu --variant bwd_det_chunked --variant bwd_nondet_atomic \
  --case H=6144,T=131071,w=bf16,form=res,family=llm,seed=22 >$P/seed22.txt 2>&1
S="65537,2048 65537,6144 131072,4096 262148,256"
for i in 1 2; do
  timeout 60 build/nd9/kernels_bench --res --no-controls --w bf16 --json $P/A$i.json $S >$P/A$i.txt 2>&1
  timeout 60 build/dev/bench/kernels_bench --res --no-controls --w bf16 --json $P/B$i.json $S >$P/B$i.txt 2>&1
done
tar czf $OUT/call1.tgz -C $OUT p
echo "== tests"; tail -22 $P/h200.txt
echo "== seed 22 (dw err/tol: 2.431 before)"; grep -E "^impl|^dw |^verdict" $P/seed22.txt
echo "== A/B"; python3 scripts/ab_table.py $P/A1.json $P/B1.json $P/A2.json $P/B2.json
