#!/usr/bin/env bash
# scripts/build refuses a build folder configured from another source tree
# (exit 2, naming both trees), with and without --log, before building
# anything: such a folder would build and run the other tree's code.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/b" "$tmp/elsewhere"
printf 'CMAKE_HOME_DIRECTORY:INTERNAL=%s\n' "$tmp/elsewhere" > "$tmp/b/CMakeCache.txt"
: > "$tmp/b/build.ninja"
for log in "" --log; do
  rc=0
  NORMGATE_BUILD="$tmp/b" "$root/scripts/build" $log normgate > "$tmp/out" 2>&1 || rc=$?
  if [ "$rc" != 2 ]; then echo "FAIL: scripts/build $log: exit $rc, want 2"; cat "$tmp/out"; exit 1; fi
  grep -q "was configured from the source tree $tmp/elsewhere, not from this one ($root)" "$tmp/out" \
    || { echo "FAIL: scripts/build $log: message"; cat "$tmp/out"; exit 1; }
  [ ! -e "$tmp/b.log" ] || { echo "FAIL: a build log was started"; exit 1; }
done
echo "PASS"
