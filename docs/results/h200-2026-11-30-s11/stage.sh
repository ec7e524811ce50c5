#!/usr/bin/env bash
# Session 11's carry (under 64 MiB with the tree): build/c11 = stripped copies of
# main's normgate, test_kernels and kernels_bench (build/, after scripts/build)
# and of branch wip/bwd-rowptr's kernels_bench and test_kernels
# (build/wip-rowptr; recipe in ../h200-2026-11-30-s10/next-s11-wip.sh).
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
d=$root/build/c11
rm -rf "$d"; mkdir -p "$d/apps" "$d/tests" "$d/bench" "$d/wip"
cp "$root/build/apps/normgate" "$d/apps/"
cp "$root/build/tests/test_kernels" "$d/tests/"
cp "$root/build/bench/kernels_bench" "$d/bench/"
cp "$root/build/wip-rowptr/kernels_bench" "$root/build/wip-rowptr/test_kernels" "$d/wip/"
strip "$d"/*/*
du -sh "$d"
