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
# A control character keeps the word on one line ($'...'), so a printed
# command stays one line.
[ "$(shq "a
b" | wc -l)" -eq 0 ] || fail "a newline printed raw: $(shq "a
b")"
[[ "$(shq "$(printf 'x\033y')")" != *$'\033'* ]] || fail "an ESC printed raw"
# Older bash reads quotes in ${a//pat/rep} differently (4.2: RHEL 7 hosts):
# the same checks under its rules.
if [ -z "${SHQ_TEST_COMPAT:-}" ]; then
  SHQ_TEST_COMPAT=1 BASH_COMPAT=42 bash "$0" > /dev/null || fail "under BASH_COMPAT=42"
fi
echo "PASS: shq"
