#!/usr/bin/env bash
# Carry a variant's approvals across a change that should not move its bits
# (docs/perf/routes.md D19): run `normgate digest` with the build the
# approvals were gated on (OLD) and with the changed build (NEW) on this
# machine's device, then `normgate approvals --carry` with NEW's binary on a
# copy of the approvals file. Nothing in the repository is written: the
# carried file is DIR/approvals.json, to be checked and copied by hand (or
# the carry run again against the repository's file with NEW's binary).
#
#   tools/digest_carry.sh --old BUILD --new BUILD --variant V [--variant W ...]
#                         [--approvals FILE] [--backend gpu|cpu]
#                         [--out DIR] [--deadline-s N] [--partial]
#
#   --old BUILD     build folder (or staged copy) of the approved sources
#   --new BUILD     build folder of the changed sources
#   --variant V     variant whose approvals are carried (repeatable)
#   --approvals F   approvals file (default routes/sm90a.approvals.json)
#   --backend B     gpu (default) or cpu (the CPU models)
#   --out DIR       output folder (default $OUT if set, else out/): old.json,
#                   new.json (the digests), approvals.json (carried), carry.log
#   --deadline-s N  seconds each digest run may take before it stops starting
#                   approvals (default 0: none); a stopped run carries only
#                   the approvals both runs reached
#   --partial       the carry's --partial: a nondet variant's records whose
#                   bits differ are left stale, the others carried
#                   (docs/perf/routes.md D21)
# Exit status: that of the carry (0 carried, 1 refused, or with --partial
# some left stale: carry.log says which), 2 usage (here or in a digest run),
# 3 a digest run failed.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "digest_carry: $1" >&2; exit 2; }
out="${OUT:-$root/out}"
old="" new="" approvals="$root/routes/sm90a.approvals.json" backend=gpu deadline=0
variants=()
partial=()
while [ $# -gt 0 ]; do
  case "$1" in
    --old|--new|--variant|--approvals|--backend|--out|--deadline-s)
      [ $# -ge 2 ] && [ -n "$2" ] || die "$1 needs a value"
      case "$1" in
        --old) old="$2" ;; --new) new="$2" ;; --variant) variants+=("$2") ;;
        --approvals) approvals="$2" ;; --backend) backend="$2" ;; --out) out="$2" ;;
        --deadline-s) deadline="$2" ;;
      esac
      shift 2 ;;
    --partial) partial=(--partial); shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (--help lists them)" ;;
  esac
done
[ -n "$old" ] && [ -n "$new" ] || die "--old BUILD and --new BUILD are required"
[ ${#variants[@]} -gt 0 ] || die "at least one --variant is required"
[[ "$deadline" =~ ^[0-9]+$ ]] || die "--deadline-s '$deadline' is not a whole number of seconds"
case "$backend" in gpu|cpu) ;; *) die "--backend '$backend' is not gpu or cpu" ;; esac
for b in "$old" "$new"; do [ -x "$b/apps/normgate" ] || die "$b/apps/normgate is missing"; done
[ -f "$approvals" ] || die "--approvals $approvals: no such file"
mkdir -p "$out" || { echo "digest_carry: cannot create $out" >&2; exit 3; }
vargs=()
for v in "${variants[@]}"; do vargs+=(--variant "$v"); done
for side in old new; do
  bin="$old/apps/normgate"; [ "$side" = new ] && bin="$new/apps/normgate"
  echo "== digest with the $side build"
  "$bin" digest "$approvals" "${vargs[@]}" --backend "$backend" --deadline "$deadline" --out "$out/$side.json"
  rc=$?
  [ $rc -ne 2 ] || { echo "digest_carry: the $side digest run refused its arguments (exit 2)" >&2; exit 2; }
  [ $rc -le 1 ] || { echo "digest_carry: the $side digest run failed (exit $rc)" >&2; exit 3; }
done
cp "$approvals" "$out/approvals.json"
echo "== carry with the new build"
"$new/apps/normgate" approvals "$out/approvals.json" --carry "$out/old.json" "$out/new.json" "${partial[@]}" 2>&1 | tee "$out/carry.log"
rc=${PIPESTATUS[0]}
rm -f "$out/approvals.json.lock"
exit $rc
