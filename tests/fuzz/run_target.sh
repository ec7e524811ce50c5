#!/usr/bin/env bash
# One short, deterministic libFuzzer run of a tests/fuzz target (ctest).
#   run_target.sh BINARY CORPUS WORK RUNS SECONDS [LIBFUZZER FLAGS...]
# Replays every file of the committed CORPUS, then RUNS mutations (-seed=1)
# within SECONDS. New inputs go to WORK/new (never into the committed
# corpus); a crash, sanitizer report, leak, timeout or contract violation is
# saved as WORK/crash-* (or leak-*, timeout-*, oom-*) and fails the test.
set -euo pipefail
bin=$1 corpus=$2 work=$3 runs=$4 secs=$5
shift 5
here="$(cd "$(dirname "$0")" && pwd)"
[ -d "$corpus" ] || { echo "run_target: no corpus folder $corpus" >&2; exit 2; }
rm -rf "$work"
mkdir -p "$work/new"
# Scratch files of the harnesses stay inside the build.
export TMPDIR="$work"
# malloc returns NULL past ASan's limit, as it would in production (HDF5
# checks for it on corrupted sizes); operator new still reports it.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}"
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$here/lsan.supp:print_suppressions=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
set +e
"$bin" -seed=1 -runs="$runs" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
  -print_final_stats=1 -artifact_prefix="$work/" "$@" "$work/new" "$corpus" >"$work/log" 2>&1
rc=$?
set -e
tail -n 14 "$work/log"
if [ "$rc" -ne 0 ]; then
  echo "run_target: $(basename "$bin") exited $rc; the input is saved as:" $(ls "$work" | grep -E '^(crash|leak|timeout|oom|slow-unit)-' || echo "(none)") >&2
  echo "run_target: whole log: $work/log; replay: $bin <file>" >&2
fi
exit "$rc"
