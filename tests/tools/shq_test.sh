#!/bin/bash
# scripts/lib/shq.sh: every word reads back as itself through bash, and the
# common ones (case ids, window filters, paths) come out unquoted.
set -u
. "$(dirname "$0")/../../scripts/lib/shq.sh"
fail() { echo "FAIL: $*" >&2; exit 1; }
words=("op=bwd,H=64,w=bf16" "3x16" "/tmp/a b" "it's" "" "a'b'c" '$HOME' '`x`' "*" "~" "--windows" "a
b" "tab	x" '\' '"q"' "-" "x;y" "!" "#c" "=")
got="$(shq "${words[@]}")"
eval "back=($got)"
[ "${#back[@]}" -eq "${#words[@]}" ] || fail "${#back[@]} words back of ${#words[@]}: $got"
for i in "${!words[@]}"; do
  [ "${back[$i]}" == "${words[$i]}" ] || fail "word $i: '${back[$i]}' back for '${words[$i]}' ($got)"
done
[ "$(shq op=bwd,H=64 /tmp/x.json 3x16)" == "op=bwd,H=64 /tmp/x.json 3x16" ] || fail "quoted what needs none"
[ "$(shq "it's")" == "'it'\\''s'" ] || fail "it's: $(shq "it's")"
[ "$(shq "")" == "''" ] || fail "empty: $(shq "")"
echo "PASS: shq"
