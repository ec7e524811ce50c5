#!/usr/bin/env bash
# CUDA compiler launcher of the kernels library (kernels/CMakeLists.txt):
# runs the compile command it is given (with any launcher after it, e.g.
# ccache, which replays a cached compile's messages) and keeps ptxas's lines
# of a successful compile beside the object, as OBJ.ptxas, for the spill
# check (tests/kernels/spill_check.py; the kernels build with -warn-spills).
# The compile's stderr passes through unchanged; its exit status is this
# script's.
set -u
obj="" prev=""
for a in "$@"; do
  [ "$prev" = "-o" ] && obj="$a"
  prev="$a"
done
err=$(mktemp) || exit 1
"$@" 2>"$err"
rc=$?
cat "$err" >&2
if [ "$rc" -eq 0 ] && [ -n "$obj" ]; then
  grep '^ptxas' "$err" >"$obj.ptxas.tmp"
  mv -f "$obj.ptxas.tmp" "$obj.ptxas" || rc=1
fi
rm -f "$err"
exit "$rc"
