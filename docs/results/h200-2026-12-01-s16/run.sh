#!/usr/bin/env bash
# Session 16's device calls (written at the end of session 15; from call 2:
# pinned host copies in normgate.Oracle, glibc THP tunable in scripts/peers.sh): issue 8's
# peers matrix, 80 rows left (`python3 bench/peers.py --plan --forms
# plain,res,heads24,heads4 --done 'docs/results/peers-h200/run-*.json'`).
# Every kernel route is approved (68 of 68 current); no campaign is running.
# Before the first call, here: `ninja -C build` (session 15 changed the C ABI
# after its last call). Carry: ["build/capi/libnormgate_capi.so",
# "build/tests/test_capi", ".whl"]  (.whl: Liger-Kernel 0.8.5's wheel only)
# NG_FIRST=1 (call 1): test_capi and python/tests first (session 15's new
# cases: T = 0 and T = 1 through the Python kernels, empty-case ABI).
# Usage: [NG_FIRST=1] bash docs/results/h200-2026-12-01-s16/run.sh   (every call)
#   One GPU (nvidia-h200): row sets in series, 16 threads, --done skipping
#   what earlier calls measured. Two or more GPUs: shard A (plain/res H=4096,
#   5120, heads24, heads4) on GPU 0 and shard B (plain/res H=1536, 2048,
#   6144) on GPU 1, 16 threads each.
# Read first in each row's log: "accuracy parts" (where the accuracy phase's
#   63-91 s per large row go: generate, host copies, reference, validators,
#   eager runs) and "spread:" lines (normgate's slow tail of session 15, with
#   NVML's power/thermal cap time and SM clocks over the blocks).
# After each call, here: each peers-N.tgz's peers/peers.json (single GPU) or
# peers/peers-K.json (shards) to docs/results/peers-h200/run-s16-cC-N.json,
# logs to docs/results/h200-2026-12-0X-s16/callC, `python3 bench/peers.py
# --merge docs/results/peers-h200/run-*.json --json
# docs/results/peers-h200/peers.json --md docs/results/peers-h200/peers.md`,
# COMMIT before the next call (the --done files travel with the tree).
# Since session 18 the body lives in scripts/peers_matrix.sh (the script as
# sessions 16-18 ran it: `git show 8876b8d:docs/results/h200-2026-12-01-s16/run.sh`);
# this keeps session 16's limit, margin and shards. Gone with the move: the
# row sets run in series (NG_ONE_SET=1, every row left in one peers.py, has
# been the only mode since session 17) and NG_CUPTI_CHECK (session 17's
# check row, in docs/results/h200-2026-12-01-s17/call4).
NG_CALL_LIMIT=${NG_CALL_LIMIT:-570} NG_ROW_MARGIN=${NG_ROW_MARGIN:-110} \
  NG_MATRIX_SHARDS="--forms plain,res,heads24,heads4 --H 4096,5120|--forms plain,res --H 1536,2048,6144" \
  exec bash "$(dirname "$0")/../../../scripts/peers_matrix.sh"
