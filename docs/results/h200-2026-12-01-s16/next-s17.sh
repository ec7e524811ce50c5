#!/usr/bin/env bash
# Session 17's device calls (written at the end of session 16): issue 8's
# peers matrix, 67 rows left (`python3 bench/peers.py --plan --forms
# plain,res,heads24,heads4 --peers eager,TC,TCd,F.rms_norm,Liger --done
# 'docs/results/peers-h200/run-*.json'`): session 16's run.sh with NG_ONE_SET=1
# (one row set of everything; the --done files skip what is measured). The "host threads" line
# is in each peers-N.tgz's peers.log (logs.tgz too), not in the call's tail.
# Before the first call, here: `ninja -C build` (session 16 changed the C ABI's
# host_copy after its last call). Carry: ["build/capi/libnormgate_capi.so",
# "build/tests/test_capi", ".whl"]  (.whl: Liger-Kernel 0.8.5's wheel only)
# Call 1: NG_FIRST=1 NG_CUPTI_CHECK=1: test_capi and python/tests first
# (session 16's new tests: thread default, pinned host copies, and the CUPTI
# test as rewritten after its first version crashed the H200 process: the
# trace before the capture; check its result first), then, only if pytest
# passed, [4097, 1536] bf16 plain again with
# --cupti and 1 seed, outside the matrix (cupti-check.tgz). Compare its det
# and ours with the matrix's (docs/results/peers-h200/peers.md; session 15
# re-measured that row within 1.5%): if they hold, later calls add NG_CUPTI=1
# (CUPTI spans beside the events in every row's JSON); if not, leave it off
# and say so in perf.md.
# Usage: [NG_FIRST=1 NG_CUPTI_CHECK=1 | NG_CUPTI=1] bash docs/results/h200-2026-12-01-s16/next-s17.sh
#   One GPU (nvidia-h200): row sets in series, --done skipping what earlier
#   calls measured; a set with no row left is skipped. Two or more GPUs:
#   shard A (plain/res H=4096, 5120, heads24, heads4) on GPU 0 and shard B
#   (plain/res H=1536, 2048, 6144) on GPU 1, 16 threads each.
# Read first: "host threads" (torch's vs the oracle's: session 16 found the
#   oracle took torch's count where threads=0; what that was on the H200 is
#   unknown), then each row's "accuracy parts": prediction
#   open <= 2 s per seed at [65537, 6144] (3.7 s in session 16) and large
#   rows bound by the next row's TC compile ("warm-up waited").
# After each call, here: each peers-N.tgz's peers/peers.json (single GPU) or
# peers/peers-K.json (shards) to docs/results/peers-h200/run-s17-cC-N.json,
# logs to docs/results/h200-2026-12-0X-s17/callC, `python3 bench/peers.py
# --merge docs/results/peers-h200/run-*.json --json
# docs/results/peers-h200/peers.json --md docs/results/peers-h200/peers.md`,
# COMMIT before the next call (the --done files travel with the tree).
# NG_ONE_SET=1: every row left in one peers.py per call (session 16's sets
# each paid a cold TC compile of 30-55 s for their first row).
# NG_ROW_MARGIN=160: no row starts in the last 160 s of a call (rows at
# T=131072 take ~110-150 s; session 16's 110 s margin was for T=65537).
NG_ONE_SET=1 NG_ROW_MARGIN=160 exec bash "$(dirname "$0")/run.sh"
