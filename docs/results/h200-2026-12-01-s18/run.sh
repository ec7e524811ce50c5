#!/usr/bin/env bash
# Session 19's device calls (written at the end of session 18): issue 8's
# peers matrix, 18 rows left (`python3 bench/peers.py --plan --forms
# plain,res,heads24,heads4 --peers eager,TC,TCd,F.rms_norm,Liger --done
# 'docs/results/peers-h200/run-*.json'`): res H=5120 fp32 and H=6144 at
# T=98304/131072 (6), heads24 (5: bf16 T=98304/131072, fp32 T=4097/98304/131072),
# heads4 (7: bf16 T=4097/98304/131072, fp32 T=4097/65537/98304/131072).
# scripts/peers_matrix.sh with its defaults (call limit 590 s, row margin
# 45 s, and peers.py's --end-s prediction: session 18 calls 2-3 ran 10 and 7
# rows with a fixed margin of 100 s, ending 479 and 488 s into the call) and,
# on two GPUs, shards for what is left by estimated time: A (res: 6 rows,
# ~620 s) on GPU 0, B (heads24 and heads4: 12 rows, ~665 s) on GPU 1.
# Carry: ["build/capi/libnormgate_capi.so", "build/tests/test_capi", ".whl"]
#   (.whl: Liger-Kernel 0.8.5's wheel only; a new checkout needs
#   `scripts/build` first).
# Kind: nvidia-h200-x2 if lent (status), else nvidia-h200 (every row left in
#   one peers.py per call).
# Watch: res H=6144 fp32 at T >= 98304 (session 18: [131072, 6144] fp32
#   plain needed the one-pool-per-implementation fallback; res holds more), and
#   heads24 at T=131072 (T*24 rows of 256 = [131072, 6144]'s elements).
# Prediction: 5-7 rows per GPU per call (these are the heaviest rows: session
#   18's T >= 98304 res rows at H >= 4096 took 52-110 s each plus waits).
# NG_FIRST=1 (any call): test_capi and python/tests first (~60-100 s).
# NG_DEFER (default 1 here; NG_DEFER=0 turns it off): peers.py --defer-accuracy,
#   new in session 18 and not yet run on a GPU: the first call is its test
#   (watch "accuracy deferred" and "warm-up waited" lines; rows and their
#   numbers as without it). Prediction: compile waits under 1/6 of the call
#   (session 18: 517 of 1575 s).
# Output: peers-1.tgz (peers/peers.json; with shards also peers-1/2.json) and logs.tgz.
# After each call, here: peers-1.tgz's peers/peers.json (with shards: the
# merged one) to docs/results/peers-h200/run-s19-cC-1.json, logs to
# docs/results/h200-2026-12-0X-s19/callC, merge (`python3 bench/peers.py
# --merge docs/results/peers-h200/run-*.json --json
# docs/results/peers-h200/peers.json --md docs/results/peers-h200/peers.md`),
# COMMIT before the next call (the --done files travel with the tree).
# Usage: bash docs/results/h200-2026-12-01-s18/run.sh   (every call)
NG_DEFER=${NG_DEFER-1} NG_MATRIX_SHARDS="--forms res|--forms heads24,heads4" \
  exec bash "$(dirname "$0")/../../../scripts/peers_matrix.sh"
