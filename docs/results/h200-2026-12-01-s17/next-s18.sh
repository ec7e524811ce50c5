#!/usr/bin/env bash
# Session 18's device calls (written at the end of session 17): issue 8's
# peers matrix, 46 rows left (`python3 bench/peers.py --plan --forms
# plain,res,heads24,heads4 --peers eager,TC,TCd,F.rms_norm,Liger --done
# 'docs/results/peers-h200/run-*.json'`): FP32 plain H=6144, every res row at
# T=4097/98304/131072, heads24 and heads4. Session 16's run.sh with peers.py's
# warm-up batches (--warm-ahead 4, session 17: 8 rows in a 375 s deadline).
# Carry: ["build/capi/libnormgate_capi.so", "build/tests/test_capi", ".whl"]
#   (.whl: Liger-Kernel 0.8.5's wheel only; no C ABI change since session 17's
#   calls, but a new checkout needs `scripts/build` first).
# Kind: nvidia-h200-x2 if lent (status): run.sh's two shards, A (plain/res
#   H=4096, 5120, heads24, heads4: 25 rows) on GPU 0 and B (plain/res H=1536,
#   2048, 6144: 21 rows) on GPU 1, 16 threads each, each with its own warm-up
#   batches; else nvidia-h200 with every row left in one peers.py.
# Watch: the FP32 res rows at T >= 98304 (session 16 measured 102 GiB of
#   private graph pools at [65537, 6144] fp32 res: pool_mode "impl" fallback,
#   never run on the H200 yet), "warm-up batch" and "waited" lines.
# Prediction: 7-9 rows per GPU per 570 s call (session 17: 8 at T<=131072
#   plain); res rows ~20% slower than plain (one more input and output).
# After each call, here: peers-N.tgz's peers/peers.json (or peers-K.json per
# shard) to docs/results/peers-h200/run-s18-cC-N.json, logs to
# docs/results/h200-2026-12-0X-s18/callC, merge (`python3 bench/peers.py
# --merge docs/results/peers-h200/run-*.json --json
# docs/results/peers-h200/peers.json --md docs/results/peers-h200/peers.md`),
# COMMIT before the next call (the --done files travel with the tree).
# Usage: bash docs/results/h200-2026-12-01-s17/next-s18.sh   (every call)
NG_ONE_SET=1 NG_ROW_MARGIN=130 exec bash "$(dirname "$0")/../h200-2026-12-01-s16/run.sh"
