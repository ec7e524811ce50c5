#!/usr/bin/env bash
# tests/tools/chunk_cap_sweep_test.sh: tools/chunk_cap_sweep.sh without a GPU,
# on a stub kernels_bench that prints table rows whose times depend on
# NG_EXP_CHUNK_CAP: the table is each cap's time over the built plan's,
# averaged over rounds; usage errors exit 2 before any run; a failing
# kernels_bench, or no matching row, exits 3; a deadline before any run,
# 1. Exit 0 pass, 1 fail.
set -euo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
sweep=$src/tools/chunk_cap_sweep.sh
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
cat >"$d/kb" <<'STUB'
#!/usr/bin/env bash
# 200 us at the built plan, 200 - cap/10 at a cap; a row that does not match, and the header.
c=${NG_EXP_CHUNK_CAP:-0}
echo "| shape | w | op | median us | GB/s |"
echo "| [65537, 1536] | bf16 | bwd bwd_det_chunked | $(( 200 - c / 10 )).0 | 3000 |"
echo "| [65537, 1536] | bf16 | bwd bwd_det_onepass | 2000.0 | 300 |"
echo "$*" >>"$STUB_ARGS"
STUB
chmod +x "$d/kb"
export STUB_ARGS=$d/args
run() {  # EXPECTED_RC ARGS...: the script's exit code must be EXPECTED_RC
  local want=$1 rc=0
  shift
  "$sweep" "$@" >"$d/out" 2>&1 || rc=$?
  [ "$rc" = "$want" ] || fail "exit $rc, not $want: $* :: $(cat "$d/out")"
}
run 0 --kb "$d/kb" --shapes "65537,1536 131072,1536" --caps "0 500 1000" --out "$d/o" --deadline-s 100 --rounds 2 -- --res
grep -qF '| [65537,1536] | bf16 | bwd bwd_det_chunked | 200.0 | 0.750 | 0.500 |' "$d/o/table.md" ||
  fail "table: $(cat "$d/o/table.md")"
! grep -q onepass "$d/o/table.md" || fail "a row outside --rows was tabled"
[ "$(wc -l <"$d/o/sweep.txt")" = 6 ] || fail "sweep.txt: $(cat "$d/o/sweep.txt")"  # 3 caps x 2 rounds
[ "$(wc -l <"$STUB_ARGS")" = 6 ] || fail "kernels_bench ran $(wc -l <"$STUB_ARGS") times, not 6"
grep -q -- '--res 65537,1536 131072,1536$' "$STUB_ARGS" || fail "arguments: $(head -1 "$STUB_ARGS")"
: >"$STUB_ARGS"
for bad in '--caps "500 1000"' '--caps 0' '--caps "0 x"' '--shapes 65537' '--deadline-s' '--rounds 0' \
           '--rows ""' '--rows "("' '--reps 10'; do
  eval "set -- $bad"
  args=(--kb "$d/kb" --shapes 65537,1536 --caps "0 500" --out "$d/u" --deadline-s 100)
  args+=("$@")
  run 2 "${args[@]}"
done
run 2 --kb "$d" --shapes 65537,1536 --caps "0 500" --out "$d/u" --deadline-s 100
[ ! -s "$STUB_ARGS" ] || fail "kernels_bench ran on a usage error"
run 3 --kb "$d/kb" --shapes 65537,1536 --caps "0 500" --out "$d/n" --deadline-s 100 --rows nomatch
printf '#!/bin/sh\nexit 5\n' >"$d/bad"
chmod +x "$d/bad"
run 3 --kb "$d/bad" --shapes 65537,1536 --caps "0 500" --out "$d/b" --deadline-s 100
run 1 --kb "$d/kb" --shapes 65537,1536 --caps "0 500" --out "$d/z" --deadline-s 0
echo "chunk_cap_sweep_test: pass"
