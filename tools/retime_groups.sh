#!/usr/bin/env bash
# Time some route groups again after a kernel change that kept its approvals,
# derive the table again from the merged timings, and gate the winners that
# lack an approval on their new windows (docs/perf/routes.md D20), on this
# machine's device. Nothing in the repository is written (out/, ignored by
# git, aside: the default DIR): DIR holds the new timings, the merged
# timings, the derived table and its approvals, to be checked and merged
# by hand (the README of a results folder says how:
# docs/results/routes/fwd-f32-retime-2026-12-04/README.md).
#
#   tools/retime_groups.sh --build BUILD --spec CUT.derive.toml
#                          --gate-windows FILTER [--table routes/sm90a.toml]
#                          [--timings FILE] [--out DIR] [--deadline-s N]
#
#   --build BUILD         build folder with apps/normgate
#   --spec FILE           a derive spec holding only the groups to time again
#                         (the table's spec cut down: the same arch, T grid,
#                         [candidates], [bench] and [fallback], checked
#                         before any work: a new candidate goes into both)
#   --gate-windows F      derive --gate-windows: which windows may be gated
#                         (gate --windows syntax, e.g. "op=fwd,form=res,H=1536")
#   --table FILE          the route table (default routes/sm90a.toml); its
#                         derive spec, approvals, policy and rejections are
#                         the files beside it (STEM.derive.toml, ...; a
#                         per-GPU table STEM@SLUG.toml has its own derive
#                         spec, STEM@SLUG.derive.toml, shares STEM's other
#                         files, and its --timings must be that GPU's)
#   --timings FILE        the timings the table was derived from (default
#                         docs/results/routes/sm90a.timings.json; for a
#                         per-GPU table, docs/results/routes/STEM@SLUG.timings.json,
#                         and any given must be that GPU's)
#   --out DIR             output folder (default $OUT if set, else out/retime)
#   --deadline-s N        seconds from the start after which the bench or
#                         the gate stops (60 to 999999999, default 540); the
#                         derive run gets what the bench left. A derive cut
#                         off by it leaves its journals in DIR/derive: rerun
#                         the command at the head of DIR/derive.log by hand
#                         to resume (rerunning this script times the groups
#                         again and starts the derive afresh)
# Writes DIR/bench-only.log and DIR/cut.timings.json (the new points),
# DIR/merged.timings.json (tools/timings_merge.py), DIR/derive.log and
# DIR/derive/ (the table, its approvals, reports, journals), and
# DIR/routes.diff (the old table against the new); DIR is never the
# repository or in it (out/ aside). Exit 2 on a usage error
# (nothing run), 1 when a step failed or the derive left a window
# unapproved, 0 otherwise.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
. "$root/scripts/lib/shq.sh"
usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "retime_groups: $1" >&2; exit 2; }
build="" spec="" filter="" table="$root/routes/sm90a.toml" timings_given=0
timings="$root/docs/results/routes/sm90a.timings.json"
out="${OUT:-$root/out}/retime"
[ -n "${OUT:-}" ] && out="$OUT"
deadline=540
while [ $# -gt 0 ]; do
  case "$1" in
    --build|--spec|--gate-windows|--table|--timings|--out|--deadline-s)
      [ $# -ge 2 ] && [ -n "$2" ] || die "$1 needs a value (--help lists the options)"
      [[ "$2" != --* ]] || die "$1 needs a value, got the option '$2' (--help lists the options)"
      case "$1" in
        --build) build="$2" ;; --spec) spec="$2" ;; --gate-windows) filter="$2" ;;
        --table) table="$2" ;; --timings) timings="$2" timings_given=1 ;; --out) out="$2" ;;
        --deadline-s) deadline="$2" ;;
      esac
      shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (--help lists them)" ;;
  esac
done
[ -n "$build" ] || die "--build BUILD is required (--help lists the options)"
[ -n "$spec" ] || die "--spec FILE is required (--help lists the options)"
[ -n "$filter" ] || die "--gate-windows FILTER is required (--help lists the options)"
[[ "$deadline" =~ ^[1-9][0-9]{0,8}$ ]] && [ "$deadline" -ge 60 ] ||
  die "--deadline-s '$deadline' is not a whole number of seconds from 60 to 999999999"
bin="$build/apps/normgate"
[ -x "$bin" ] || die "--build $build: $bin is missing"
[ -f "$spec" ] || die "--spec $spec: no such file"
[[ "$table" == *.toml ]] || die "--table $table: not a .toml route table"
# A per-GPU table STEM@SLUG.toml has its own derive spec (STEM@SLUG.derive.toml:
# the candidates timed on that GPU) and shares STEM's approvals, policy and
# rejections (routing.h, "Per-GPU tables").
command -v python3 >/dev/null || die "python3 is needed (tools/timings_merge.py)"
tname="$(basename "$table")"
# The table's files by the library's rule (`normgate routes --files`; a
# malformed '@' name is refused there, exit 2, naming it).
# (stdout alone is the JSON; on a refusal the message is asked for again.)
files="$("$bin" routes --files -- "$table" 2>/dev/null)" ||
  die "--table $table: $("$bin" routes --files -- "$table" 2>&1 >/dev/null)"
field() { python3 -c 'import json,sys; sys.stdout.buffer.write(json.loads(sys.argv[1])[sys.argv[2]].encode())' "$files" "$1"; }
slug="$(field gpu_slug)" dspec="$(field derive_spec)" appr="$(field approvals)" pol="$(field policy)"
rej="$(field rejections)"
# its timings are its GPU's: docs/results/routes/STEM@SLUG.timings.json by default
[ -z "$slug" ] || [ "$timings_given" = 1 ] || timings="$root/docs/results/routes/${tname%.toml}.timings.json"
[ -f "$timings" ] || die "--timings $timings: no such file"
for f in "$table" "$dspec" "$appr" "$pol"; do
  [ -f "$f" ] || die "--table $table: $f is missing"
done
# The cut spec must time what the table's spec derives from: the same
# candidates (a candidate timed here but absent there would be dropped by
# the derive without a word), bench settings, T grid, arch and fallback.
if ! specdiff="$(python3 -B - "$spec" "$dspec" 2>&1 <<'PY'
import sys
try:
    import tomllib
except ImportError:
    sys.exit("python3 >= 3.11 is needed (tomllib) to compare the specs")
specs = []
for f in sys.argv[1:3]:
    try:
        with open(f, "rb") as fh:
            specs.append(tomllib.load(fh))
    except (OSError, tomllib.TOMLDecodeError) as e:
        sys.exit(f"{f}: {e}")
keys = [k for k in ("arch", "T", "candidates", "bench", "fallback") if specs[0].get(k) != specs[1].get(k)]
if keys:
    sys.exit("differs from the table's spec in " + ", ".join(keys))
PY
)"; then
  die "--spec $spec: $specdiff ($dspec; a cut spec keeps the table spec's arch, T, [candidates], [bench] and [fallback]; a new candidate goes into both)"
fi
# --timings read as the merge will read it, before the bench is spent on it;
# a per-GPU table's must be its GPU's (gpu_slug, routing.h).
python3 -B -c 'import sys; sys.path.insert(0, sys.argv[1]); import timings_merge; timings_merge.load(sys.argv[2])' \
  "$root/tools" "$timings" || die "--timings $timings: not a timings file the merge can read (above)"
if [ -n "$slug" ]; then
  tgpu="$(python3 -B -c 'import json, re, sys; g = json.load(open(sys.argv[1]))["gpu"]
print(g + "\t" + "-".join(re.findall(r"[A-Za-z0-9]+", g)).lower())' "$timings")" ||
    die "--timings $timings: no gpu field"
  [ "${tgpu#*$'\t'}" = "$slug" ] ||
    die "--timings $timings: measured on '${tgpu%%$'\t'*}', not the GPU of per-GPU table $tname ('$slug')"
fi
# DIR is emptied of bench/ and derive/ below: never the repository or a
# folder in it (but out/, ignored by git), never a folder whose bench/ or
# derive/ another hand made.
real_out="$(realpath -m -- "$out")" real_root="$(cd -P "$root" && pwd)"
case "$real_out/" in
  "$real_root/out/"?*) ;;
  "$real_root/"*) die "--out '$out' is in the repository ($real_root); give a folder outside it, or under out/" ;;
esac
for x in bench derive; do
  [ ! -e "$out/$x" ] || [ -f "$out/.retime_groups" ] ||
    die "--out '$out': $out/$x exists and is not an earlier retime_groups.sh run's; give another folder"
done
# ... nor a folder whose outputs, removed below, are this run's inputs (an
# earlier run's merged timings or derived table, say).
for f in "$spec" "$timings" "$table" "$dspec" "$appr" "$pol" \
         "$rej"; do
  case "$(realpath -m -- "$f")" in
    "$real_out"/bench/*|"$real_out"/derive/*|"$real_out"/bench-only.log|"$real_out"/cut.timings.json|\
    "$real_out"/merged.timings.json|"$real_out"/derive.log|"$real_out"/routes.diff)
      die "--out '$out': $f, an input, is one of the outputs this run removes first; give another --out" ;;
  esac
done
# The filter's syntax, read by the gate before the bench is spent: on the
# current table it may select no window (the new table may hold those the
# filter names, variant=NEW say), and that alone is no error. (A filter
# that parses but names no group of the derive spec, H=3000 say, is still
# refused only by the derive step, after the bench.)
if ! msg="$("$bin" gate "$table" --windows "$filter" --plan 2>&1 >/dev/null)"; then
  case "$msg" in
    *"no window to gate"*) ;;
    *) line="$(printf '%s\n' "$msg" | grep -m1 -i 'error' || printf '%s\n' "$msg" | tail -1)"
       die "--gate-windows '$filter' (checked with gate --plan on $table): $line" ;;
  esac
fi
mkdir -p -- "$out" 2>/dev/null && [ -w "$out" ] && : >"$out/.retime_groups" ||
  die "--out '$out' is not a folder this script can write"
start=$SECONDS
left() { echo $((deadline - (SECONDS - start))); }
rm -rf -- "$out/derive" "$out/bench"
rm -f -- "$out"/{bench-only.log,cut.timings.json,merged.timings.json,derive.log,routes.diff}

echo "== bench: the spec's groups ($(left) s left)"
mkdir -p "$out/bench"
"$bin" derive "$spec" --out "$out/bench/$tname" --report "$out/bench/cut" --bench-only \
  --deadline-s "$(left)" >"$out/bench-only.log" 2>&1
rc=$?
tail -3 "$out/bench-only.log"
[ $rc -eq 0 ] && [ -f "$out/bench/cut.timings.json" ] ||
  { echo "retime_groups: the bench failed (exit $rc; $out/bench-only.log)" >&2; exit 1; }
mv "$out/bench/cut.timings.json" "$out/cut.timings.json"

echo "== merge into $(basename "$timings")"
python3 "$root/tools/timings_merge.py" "$timings" "$out/cut.timings.json" "$out/merged.timings.json" ||
  { echo "retime_groups: the merge failed" >&2; exit 1; }

d="$out/derive"
mkdir -p "$d"
{ cp "$appr" "$pol" "$d/" &&
  { [ ! -f "$rej" ] || cp "$rej" "$d/"; }; } ||
  { echo "retime_groups: could not copy the table's approvals, policy or rejections into $d" >&2; exit 1; }
r=$(left)
[ "$r" -ge 30 ] || { echo "retime_groups: $r s left after the bench, too few to derive" >&2; exit 1; }
echo "== derive, gating '$filter' ($r s left)"
dcmd=("$bin" derive "$dspec" --out "$d/$tname" --report "$d/rep" --journal "$d/dj"
      --timings "$out/merged.timings.json" --approve --gate-windows "$filter" --deadline-s "$r")
{ printf '# resume by hand (a rerun with the same --journal): %s\n' "$(shq "${dcmd[@]}")"; } >"$out/derive.log"
"${dcmd[@]}" >>"$out/derive.log" 2>&1
rc=$?
grep -E '^(  (PASS|FAIL|approved)|gate|table)' "$out/derive.log" | tail -40
if [ -f "$d/$tname" ]; then
  diff -u "$table" "$d/$tname" >"$out/routes.diff"
  echo "== routes: $(grep -cE '^[-+] +\{ op = ' "$out/routes.diff") window lines changed ($out/routes.diff)"
  grep -E '^[-+] +\{ op = ' "$out/routes.diff" | head -40
fi
[ $rc -eq 0 ] || { echo "retime_groups: the derive exited $rc ($out/derive.log)" >&2; exit 1; }
exit 0
