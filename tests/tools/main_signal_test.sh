#!/usr/bin/env bash
# scripts/main signalled alone (SIGTERM to its own PID, as a scheduler may
# send it): the gate it runs stops too (no gate left running), the script
# ends with the signal's 143, the gate's note names scripts/main's resume
# (cd ROOT && NORMGATE_RESUME=1 NORMGATE_OUT=.. NORMGATE_BUILD=.. scripts/main
# ARGS), the last run's reports set aside are gone (no .aside files), and
# that command, run as printed from another folder, resumes and finishes.
#   tests/tools/main_signal_test.sh BUILD   (a build folder holding apps/normgate)
set -u
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$1"
d="$(mktemp -d)"
trap 'rm -rf "$d"' EXIT
fail() { echo "main_signal_test: $1"; echo "--- stderr"; tail -20 "$d/stderr"; exit 1; }
mkdir -p "$d/out"
echo old > "$d/out/gate-ci.md"
echo old > "$d/out/gate-ci.json"
args=(--backend cpu --threads 1)
NORMGATE_BUILD="$build" NORMGATE_OUT="$d/out" "$root/scripts/main" "${args[@]}" >"$d/stdout" 2>"$d/stderr" &
pid=$!
j="$d/out/gate-ci.journal"
for _ in $(seq 1200); do
  [ -f "$j" ] && [ "$(wc -l <"$j")" -ge 4 ] && break
  kill -0 "$pid" 2>/dev/null || fail "scripts/main ended before its gate journalled 3 cases"
  sleep 0.05
done
kill -TERM "$pid"
wait "$pid"
rc=$?
[ "$rc" -eq 143 ] || fail "exit $rc after SIGTERM, not 143"
sleep 0.2
if pgrep -f -- "--journal $j" >/dev/null; then
  pkill -f -- "--journal $j"
  fail "the gate kept running after scripts/main was signalled"
fi
# The note's resume command, run as printed (from another folder).
resume="$(sed -n 's/.*stopped by a signal; run \(.*\) to resume: every case.*/\1/p' "$d/stderr")"
[ -n "$resume" ] || fail "no note naming scripts/main's resume"
case "$resume" in *"NORMGATE_RESUME=1"*"scripts/main --backend cpu --threads 1") ;;
  *) fail "the resume command is not scripts/main's: $resume" ;; esac
ls "$d/out"/*.aside >/dev/null 2>&1 && fail "the last run's files set aside were left: $(ls "$d/out")"
[ -e "$d/out/gate-ci.md" ] && fail "the last run's report is back after a run that started"
(cd / && bash -c "$resume") >"$d/stdout" 2>"$d/stderr"
rc=$?
[ "$rc" -eq 0 ] || fail "the resume exited $rc"
grep -q "resumed" "$d/stdout" || fail "the resume did not resume the journal"
echo "PASS: scripts/main signalled stops its gate (143), names its resume, which finishes"
