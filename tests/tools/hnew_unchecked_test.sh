#!/usr/bin/env bash
# A journal written before the gate recorded h_new (form res): its records
# still read, but their cases' h_new was never checked, so a resumed res
# window is INCOMPLETE (exit 1), never PASS, and the report says why; the
# same campaign into a new journal passes again.
#
#   tests/tools/hnew_unchecked_test.sh NORMGATE
# Exit 0 pass, 1 fail, 77 skip (no python3).
set -u
bin=$1
root="$(cd "$(dirname "$0")/../.." && pwd)"
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
d=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$d"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
cat >"$d/t.toml" <<'TOML'
arch = "sm90a"
description = "hnew_unchecked_test: one res window"
route = [
  { op = "bwd", mode = "det", H = 64, w = "bf16", form = "res", T = [1, 40], variant = "bwd_det_chunked" },
]
TOML
args=(gate "$d/t.toml" --backend cpu --threads 1 --seeds 3x1 --t-per-window 3 --dense-points 0 --fresh-factor 0 --quiet)
"$bin" "${args[@]}" --journal "$d/j.jsonl" --report-md "$d/a.md" >"$d/a.log" 2>&1 || fail "the first gate: exit $? $(tail -3 "$d/a.log")"
grep -q '"h_new":\[' "$d/j.jsonl" || fail "the journal records no h_new"
grep -q "h_new (form res: bitwise equal to BF16(x + u), gated in each res window): equal in every case" "$d/a.md" ||
  fail "the report does not say h_new was gated: $(grep -n h_new "$d/a.md")"
# The journal as an older normgate wrote it: no h_new, each line resealed
# and chained again (tools/journal_seal.py).
PYTHONPATH="$root/tools" python3 - "$d/j.jsonl" "$d/old.jsonl" <<'PY' || fail "could not rewrite the journal"
import json, sys
import journal_seal as js
src, dst = sys.argv[1:3]
lines = open(src, encoding="utf-8").read().splitlines()
out, prev = [], None
for i, line in enumerate(lines):
    obj = json.loads(js.unsealed(line))
    if i > 0:
        for r in obj.get("results", []):
            r.pop("h_new", None)
        obj["prev"] = prev
    text = js.seal(json.dumps(obj, separators=(",", ":")))
    out.append(text)
    prev = js.seal_of(text)
open(dst, "w", encoding="utf-8").write("\n".join(out) + "\n")
PY
grep -q '"h_new"' "$d/old.jsonl" && fail "h_new left in the rewritten journal"
"$bin" "${args[@]}" --journal "$d/old.jsonl" --report-md "$d/b.md" --report-json "$d/b.json" >"$d/b.log" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "the resume of the old journal: exit $rc, want 1 (INCOMPLETE): $(tail -5 "$d/b.log")"
grep -q "verdict  INCOMPLETE: 1 of 1 res windows hold cases whose h_new was not checked" "$d/b.log" ||
  fail "no INCOMPLETE verdict naming h_new: $(grep verdict "$d/b.log")"
grep -q "finished cases resumed, 0 run now" "$d/b.log" || fail "the old journal's cases were run again: $(grep journal "$d/b.log")"
grep -q "hold cases whose h_new was not checked" "$d/b.md" || fail "the report does not say why: $(head -12 "$d/b.md")"
python3 - "$d/b.json" <<'PY' || fail "the JSON report's outputs.h_new"
import json, sys
w = json.load(open(sys.argv[1]))["windows"][0]
h = w["outputs"]["h_new"]
assert w["verdict"] != "pass" and w["pass"] is False, w["verdict"]
assert h["cases_unchecked"] == w["cases"] > 0 and h["cases_over"] == 0, h
PY
echo "PASS: a res journal without h_new resumes INCOMPLETE"
