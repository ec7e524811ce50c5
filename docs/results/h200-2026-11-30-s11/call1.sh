#!/usr/bin/env bash
# Session 11, call 1 (nvidia-h200-x2; carry ["build/c11"]): forms.sh (res on
# GPU 0 with 6 threads, heads24 bf16 on GPU 0 with 8, heads24 fp32 on GPU 1 with
# 17) and, beside it on GPU 1, the sanitizer on the kernels of 44a0781
# (h200.sh NG_STEPS=sanitize: 10 CLI cases and the ring test under memcheck
# and racecheck, plus the two long-chunk racecheck cases; not yet run on them).
# Predictions: res reports PASS in this call (68 grid cases of 5.5e10 elements
# left, then refinement); heads24 bf16 reports; fp32 gets about half its grid
# (1.55e11 elements at ~8e6 elements/s a thread); every case within budget, dw
# err/tol <= ~1e-3; sanitizer clean everywhere (11/11 memcheck, 13/13 racecheck).
export PATH=/usr/local/cuda/bin:$PATH
mkdir -p $OUT/w
s=docs/results/h200-2026-11-30-s11
bash $s/forms.sh >$OUT/w/forms.out 2>&1 &
CUDA_VISIBLE_DEVICES=1 NORMGATE_BUILD=build/c11 NG_STEPS=sanitize OUT=$OUT/w/side timeout 530 scripts/h200.sh >$OUT/w/side.out 2>&1
echo "side rc=$?" >>$OUT/w/side.out
wait
tar czf $OUT/call.tgz -C $OUT w
tail -8 $OUT/w/side.out
cat $OUT/w/forms.out
