#!/usr/bin/env bash
# Approvals for a new deterministic variant W whose outputs equal existing
# variants' bit for bit (docs/perf/routes.md D23), without gating it: on
# this machine's device, for each vouching variant V, `normgate digest` of
# V's current records gated on this GPU model (--current --this-gpu, and
# --windows F when given) run by V and run by W (`--as W`), then
# `normgate approvals --vouch` on a copy of the approvals file (with the
# rejections file beside it, whose failures of W refuse a vouch). Nothing
# in the repository is written: the vouched file is DIR/STEM.approvals.json,
# to be checked (`normgate approvals DIR/STEM.approvals.json`) and merged
# by hand (`normgate approvals DIR/STEM.approvals.json --merge-into
# routes/STEM.approvals.json`).
#
#   tools/digest_vouch.sh --build BUILD --as W --from V [--from V2 ...]
#                         [--windows F] [--approvals FILE] [--backend gpu|cpu]
#                         [--out DIR] [--deadline-s N]
#
#   --build BUILD    build folder with apps/normgate (W and every V built in)
#   --as W           the variant that gets the records
#   --from V         a variant whose records vouch (repeatable; each with W:
#                    deterministic, one op)
#   --windows F      only records whose window F selects (gate --windows
#                    syntax, e.g. "form=plain|res|heads4"); default all
#   --approvals F    approvals file (default routes/sm90a.approvals.json);
#                    its rejections file is the one beside it
#                    (STEM.rejections.json)
#   --backend B      gpu (default: the records gated on this GPU model) or
#                    cpu (the CPU models' records)
#   --out DIR        output folder (default $OUT if set, else out/vouch):
#                    V.json and V-as-W.json (the digests), STEM.approvals.json
#                    and STEM.rejections.json (copies; the first vouched),
#                    vouch-V.log
#   --deadline-s N   seconds from the start after which no digest run starts
#                    another record (0: none, the default); each V's two runs
#                    share what is left, so a stopped pair vouches for the
#                    records both reached
# Exit status: 0 every vouch written (or nothing to vouch for), 1 a vouch
# refused or a digest run stopped by the deadline (the logs say which), 2
# usage (here or in a normgate run, before any work), 3 a digest run failed.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "digest_vouch: $1" >&2; exit 2; }
out="${OUT:-$root/out}/vouch"
[ -n "${OUT:-}" ] && out="$OUT"
build="" as="" windows="" approvals="$root/routes/sm90a.approvals.json" backend=gpu deadline=0
froms=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build|--as|--from|--windows|--approvals|--backend|--out|--deadline-s)
      [ $# -ge 2 ] && [ -n "$2" ] || die "$1 needs a value"
      case "$1" in
        --build) build="$2" ;; --as) as="$2" ;; --from) froms+=("$2") ;; --windows) windows="$2" ;;
        --approvals) approvals="$2" ;; --backend) backend="$2" ;; --out) out="$2" ;;
        --deadline-s) deadline="$2" ;;
      esac
      shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (--help lists them)" ;;
  esac
done
[ -n "$build" ] || die "--build BUILD is required"
[ -n "$as" ] || die "--as W is required"
[ ${#froms[@]} -gt 0 ] || die "at least one --from V is required"
[[ "$as" =~ ^[A-Za-z0-9_.+-]{1,64}$ ]] || die "--as '$as' is not a variant name"
for v in "${froms[@]}"; do
  [[ "$v" =~ ^[A-Za-z0-9_.+-]{1,64}$ ]] || die "--from '$v' is not a variant name"
  [ "$v" != "$as" ] || die "--from $v is the --as variant"
done
[ -z "$(printf '%s\n' "${froms[@]}" | sort | uniq -d)" ] || die "a --from variant is given twice"
[[ "$deadline" =~ ^[0-9]{1,9}$ ]] || die "--deadline-s '$deadline' is not a whole number of seconds (at most 9 digits)"
case "$backend" in gpu|cpu) ;; *) die "--backend '$backend' is not gpu or cpu" ;; esac
ng="$build/apps/normgate"
[ -x "$ng" ] || die "$ng is missing"
[ -f "$approvals" ] || die "--approvals $approvals: no such file"
case "$(basename "$approvals")" in
  *.approvals.json) stem="$(basename "$approvals" .approvals.json)" ;;
  *) die "--approvals $approvals: not named STEM.approvals.json (its rejections file could not be found)" ;;
esac
[ -n "$stem" ] || die "--approvals $approvals: no STEM before .approvals.json"
rejections="$(dirname "$approvals")/$stem.rejections.json"
[ -e "$out" ] && [ ! -d "$out" ] && die "--out '$out' exists and is not a folder"
# normgate checks the variants, the filter and the records itself, each run
# before its first case (exit 2 here too).
t0=$SECONDS
flags=(--current --backend "$backend")
[ "$backend" = gpu ] && flags+=(--this-gpu)
[ -n "$windows" ] && flags+=(--windows "$windows")
mkdir -p "$out" || { echo "digest_vouch: cannot create $out" >&2; exit 3; }
cp "$approvals" "$out/$stem.approvals.json" || exit 3
rm -f "$out/$stem.rejections.json"
if [ -e "$rejections" ]; then cp "$rejections" "$out/$stem.rejections.json" || exit 3; fi
worst=0
for v in "${froms[@]}"; do
  for side in "$v" "$v-as-$as"; do
    args=("${flags[@]}")
    [ "$side" != "$v" ] && args+=(--as "$as")
    dl=0
    if [ "$deadline" -gt 0 ]; then
      left=$(( deadline - (SECONDS - t0) ))
      [ "$side" = "$v" ] && left=$(( left / 2 ))
      [ "$left" -ge 1 ] || { echo "digest_vouch: the deadline passed before $side's digest run" >&2; worst=1; continue 2; }
      dl=$left
    fi
    echo "== digest $side"
    "$ng" digest "$approvals" --variant "$v" "${args[@]}" --deadline "$dl" --out "$out/$side.json"
    rc=$?
    [ $rc -ne 2 ] || { echo "digest_vouch: the digest run of $side refused its arguments (exit 2)" >&2; exit 2; }
    [ $rc -le 1 ] || { echo "digest_vouch: the digest run of $side failed (exit $rc)" >&2; exit 3; }
    [ $rc -eq 0 ] || worst=1
  done
  echo "== vouch: $v for $as"
  "$ng" approvals "$out/$stem.approvals.json" --vouch "$out/$v.json" "$out/$v-as-$as.json" 2>&1 | tee "$out/vouch-$v.log"
  rc=${PIPESTATUS[0]}
  [ $rc -ne 2 ] || { echo "digest_vouch: the vouch of $v refused its files (exit 2)" >&2; exit 2; }
  [ $rc -eq 0 ] || worst=1
done
rm -f "$out/$stem.approvals.json.lock"
echo "vouched file: $out/$stem.approvals.json (check it, then merge it by hand)"
exit $worst
