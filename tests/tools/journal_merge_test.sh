#!/usr/bin/env bash
# journal_merge_test.sh NORMGATE TABLE: tools/journal_merge.py against the
# gate itself, on the CPU models (no GPU):
#   1. a gate of filter A and a gate of filter B, each into its own journal
#      (A's gzipped), merged; a gate of "A|B" on the merged journal resumes
#      every case, runs none, and writes the same Markdown report as a direct
#      gate of "A|B" (except the date line);
#   2. a journal of another campaign (other options) is refused: exit 2, no
#      output file;
#   3. a torn last line (a run killed mid-write) is dropped with a message,
#      the rest merged;
#   4. a line whose SHA-256 digest fails (one flipped bit) is refused: exit 2
#      naming FILE:LINE, no output file;
#   5. a line contradicting an earlier one (the same case and implementation
#      with another result, validly signed) is refused (exit 2, nothing
#      written); with --keep-first it is dropped and named, and the gate
#      resumes the merged journal (it would refuse the contradiction);
#   6. blank lines ending a journal are ignored, as the gate ignores them (the
#      gate resumes that file too); a blank line between records is refused
#      (exit 2 naming FILE:LINE, no output file), as the gate refuses it;
#   9. a journalled error stays on resume and is run again with
#      --retry-errors (the report then a direct run's); merges keep the
#      error and the later result, and an error after a result;
#  10. journals under a journal key;
#  11. the chain: a record repeated, moved or copied in from another
#      journal is refused by the merge and the gate; so is format 2.
# Exit 0 pass, 1 fail, 77 skip (no python3).
set -u
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
[ $# -eq 2 ] || { echo "usage: $0 NORMGATE TABLE" >&2; exit 1; }
bin=$1 table=$2
merge="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../../tools/journal_merge.py"
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
opts=(--seeds normal:0..1 --t-per-window 2 --dense-points 1 --fresh-factor 1 --quiet)
A="w=bf16" B="w=fp32"
"$bin" gate "$table" "${opts[@]}" --windows "$A" --journal "$d/a.jsonl" >"$d/a.log" 2>&1 || fail "gate $A: $(tail -3 "$d/a.log")"
"$bin" gate "$table" "${opts[@]}" --windows "$B" --journal "$d/b.jsonl" >"$d/b.log" 2>&1 || fail "gate $B: $(tail -3 "$d/b.log")"
gzip "$d/a.jsonl"
python3 "$merge" "$d/m.jsonl" "$d/a.jsonl.gz" "$d/b.jsonl" >"$d/merge.log" 2>&1 || fail "merge: $(cat "$d/merge.log")"
na=$(zcat "$d/a.jsonl.gz" | tail -n +2 | wc -l) nb=$(tail -n +2 "$d/b.jsonl" | wc -l) nm=$(tail -n +2 "$d/m.jsonl" | wc -l)
[ "$na" -gt 0 ] && [ "$nb" -gt 0 ] || fail "empty journals ($na, $nb case lines)"
[ "$nm" -eq $((na + nb)) ] || fail "merged $nm case lines, expected $na + $nb (the filters share no case)"
"$bin" gate "$table" "${opts[@]}" --windows "$A|${B#w=}" --journal "$d/m.jsonl" --report-md "$d/m.md" >"$d/m.log" 2>&1 \
  || fail "gate on the merged journal: $(tail -3 "$d/m.log")"
grep -q "$nm finished cases resumed, 0 run now" "$d/m.log" || fail "the merged journal was not fully resumed: $(grep journal "$d/m.log")"
"$bin" gate "$table" "${opts[@]}" --windows "$A|${B#w=}" --report-md "$d/direct.md" >"$d/direct.log" 2>&1 \
  || fail "direct gate: $(tail -3 "$d/direct.log")"
diff <(grep -v '^- date:' "$d/direct.md") <(grep -v '^- date:' "$d/m.md") >"$d/diff.txt" \
  || fail "report from the merged journal differs from a direct run: $(head -20 "$d/diff.txt")"
# 2. another campaign's journal.
"$bin" gate "$table" --seeds normal:0..0 --t-per-window 2 --dense-points 0 --fresh-factor 0 --quiet --windows "$A,op=fwd" \
  --journal "$d/o.jsonl" >"$d/o.log" 2>&1 || fail "gate (other campaign): $(tail -3 "$d/o.log")"
python3 "$merge" "$d/x.jsonl" "$d/b.jsonl" "$d/o.jsonl" >"$d/x.log" 2>&1
rc=$?
[ $rc -eq 2 ] || fail "merging two campaigns: exit $rc, expected 2"
grep -q "belongs to a different campaign" "$d/x.log" || fail "no clear error: $(cat "$d/x.log")"
[ ! -e "$d/x.jsonl" ] && [ ! -e "$d/x.jsonl.tmp" ] || fail "an output file was written on error"
# 3. a torn last line.
cp "$d/b.jsonl" "$d/t.jsonl"
printf '{"case":"H=2048,T=5' >>"$d/t.jsonl"
python3 "$merge" "$d/y.jsonl" "$d/t.jsonl" >"$d/y.log" 2>&1 || fail "torn line: exit $?: $(cat "$d/y.log")"
grep -q "torn last line dropped" "$d/y.log" || fail "torn line not reported: $(cat "$d/y.log")"
cmp -s "$d/y.jsonl" "$d/b.jsonl" || fail "torn line: the merged journal is not the journal without it"
# 4. one flipped bit in a case line ('1' <-> '0' in its case id's seed).
python3 -c 'import sys; t = open(sys.argv[1]).read().split("\n"); t[2] = t[2].replace("seed=1", "seed=0", 1) if "seed=1" in t[2] else t[2].replace("seed=0", "seed=1", 1); open(sys.argv[2], "w").write("\n".join(t))' \
  "$d/b.jsonl" "$d/f.jsonl"
python3 "$merge" "$d/z.jsonl" "$d/f.jsonl" >"$d/z.log" 2>&1
rc=$?
[ $rc -eq 2 ] || fail "a flipped bit: exit $rc, expected 2"
grep -q "f.jsonl:3 fails its seal or is no record: the line.s SHA-256 digest does not match" "$d/z.log" || fail "flipped bit not named: $(cat "$d/z.log")"
[ ! -e "$d/z.jsonl" ] || fail "an output file was written on error"
# 5. a contradicting line, signed as the gate signs (the dw ratio of line 2's first result changed).
python3 - "$d/b.jsonl" "$d/c.jsonl" <<'PY'
import hashlib, json, sys
lines = open(sys.argv[1]).read().split("\n")
rec = json.loads(lines[1])
rec.pop("sha256")
rec["results"][0]["dw"][0] = 0.125 if rec["results"][0]["dw"][0] != 0.125 else 0.25
body = json.dumps(rec, separators=(",", ":"), sort_keys=True)
open(sys.argv[2], "w").write(lines[0] + "\n" + body[:-1] + ',"sha256":"' + hashlib.sha256(body.encode()).hexdigest() + '"}\n')
PY
python3 "$merge" "$d/k.jsonl" "$d/b.jsonl" "$d/c.jsonl" >"$d/k.log" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "c.jsonl:2 contradicts .*b.jsonl:2 .*nothing merged" "$d/k.log" && [ ! -e "$d/k.jsonl" ] ||
  fail "a contradiction without --keep-first: exit $rc (want 2, nothing written): $(cat "$d/k.log")"
python3 "$merge" --keep-first "$d/k.jsonl" "$d/b.jsonl" "$d/c.jsonl" >"$d/k.log" 2>&1 || fail "contradiction: exit $?: $(cat "$d/k.log")"
grep -q "c.jsonl:2 dropped: contradicts .*b.jsonl:2" "$d/k.log" || fail "contradiction not named: $(cat "$d/k.log")"
cmp -s "$d/k.jsonl" "$d/b.jsonl" || fail "contradiction: the merged journal is not the first journal"
"$bin" gate "$table" "${opts[@]}" --windows "$B" --journal "$d/k.jsonl" >"$d/k2.log" 2>&1 || fail "gate on k.jsonl: $(tail -3 "$d/k2.log")"
# 6. blank lines: at the end accepted (by the gate as well), between records refused.
{ cat "$d/b.jsonl"; printf '\n \t\r\n\n'; } >"$d/e.jsonl"
python3 "$merge" "$d/e-out.jsonl" "$d/e.jsonl" >"$d/e.log" 2>&1 || fail "trailing blank lines: exit $?: $(cat "$d/e.log")"
cmp -s "$d/e-out.jsonl" "$d/b.jsonl" || fail "trailing blank lines: the merged journal is not the journal without them"
"$bin" gate "$table" "${opts[@]}" --windows "$B" --journal "$d/e.jsonl" >"$d/e2.log" 2>&1 \
  || fail "the gate on a journal ending in blank lines: $(tail -3 "$d/e2.log")"
grep -q "$nb finished cases resumed, 0 run now" "$d/e2.log" || fail "the gate did not resume e.jsonl: $(grep journal "$d/e2.log")"
python3 -c 'import sys; t = open(sys.argv[1]).read().split("\n"); t.insert(2, ""); open(sys.argv[2], "w").write("\n".join(t))' \
  "$d/b.jsonl" "$d/g.jsonl"
python3 "$merge" "$d/g-out.jsonl" "$d/g.jsonl" >"$d/g.log" 2>&1
rc=$?
[ $rc -eq 2 ] || fail "a blank line between records: exit $rc, expected 2"
grep -q "g.jsonl:3 is blank and records follow it" "$d/g.log" || fail "blank line not named: $(cat "$d/g.log")"
[ ! -e "$d/g-out.jsonl" ] || fail "an output file was written on error"
# 7. damage the gate refuses, refused alike: CRLF line ends; a complete last
# line with stray bytes where its newline belongs. A torn tail cut inside a
# UTF-8 character is dropped like any torn tail (the gate resumes it).
sed 's/$/\r/' "$d/b.jsonl" >"$d/crlf.jsonl"
{ cat "$d/b.jsonl" | head -c -1; printf 'XYZ'; } >"$d/junk.jsonl"
for bad in crlf junk; do
  python3 "$merge" "$d/$bad-out.jsonl" "$d/$bad.jsonl" >"$d/$bad.log" 2>&1
  rc=$?
  [ $rc -eq 2 ] || fail "$bad: exit $rc, expected 2: $(cat "$d/$bad.log")"
  "$bin" gate "$table" "${opts[@]}" --windows "$B" --journal "$d/$bad.jsonl" >"$d/$bad-gate.log" 2>&1
  [ $? -eq 2 ] || fail "$bad: the gate accepted what the merge refuses: $(tail -2 "$d/$bad-gate.log")"
  [ ! -e "$d/$bad-out.jsonl" ] && [ ! -e "$d/$bad-out.jsonl.tmp" ] || fail "$bad: an output file was written on error"
done
grep -q "ends in CR" "$d/crlf.log" || fail "CRLF not named: $(cat "$d/crlf.log")"
grep -q "stray bytes where its newline belongs" "$d/junk.log" || fail "stray bytes not named: $(cat "$d/junk.log")"
# A whole last line without its newline, one digit of its record changed:
# a change, not a tear; refused by both (it was dropped and rerun).
python3 -c 'import re, sys; t = open(sys.argv[1]).read().rstrip("\n"); i = t.rfind("\n") + 1; m = re.search(r"[0-9]", t[i + 2:]); k = i + 2 + m.start(); open(sys.argv[2], "w").write(t[:k] + ("8" if t[k] == "9" else chr(ord(t[k]) + 1)) + t[k + 1:])' \
  "$d/b.jsonl" "$d/chg.jsonl"
python3 "$merge" "$d/chg-out.jsonl" "$d/chg.jsonl" >"$d/chg.log" 2>&1
rc=$?
[ $rc -eq 2 ] || fail "a changed whole last line: exit $rc, expected 2: $(cat "$d/chg.log")"
grep -q "the last (whole, without its newline): its SHA-256 digest does not match" "$d/chg.log" ||
  fail "changed last line not named: $(cat "$d/chg.log")"
"$bin" gate "$table" "${opts[@]}" --windows "$B" --journal "$d/chg.jsonl" >"$d/chg-gate.log" 2>&1
[ $? -eq 2 ] || fail "a changed whole last line: the gate accepted it: $(tail -2 "$d/chg-gate.log")"
[ ! -e "$d/chg-out.jsonl" ] || fail "a changed whole last line: an output file was written on error"
{ cat "$d/b.jsonl"; printf '{"case\xc3'; } >"$d/u8.jsonl"
python3 "$merge" "$d/u8-out.jsonl" "$d/u8.jsonl" >"$d/u8.log" 2>&1 || fail "torn UTF-8 tail: exit $?: $(cat "$d/u8.log")"
cmp -s "$d/u8-out.jsonl" "$d/b.jsonl" || fail "torn UTF-8 tail: the merged journal is not the journal without it"
# 8. OUT is checked before any work: a folder, empty, or in a missing folder.
for out in "$d" "" "$d/no/such/o.jsonl"; do
  python3 "$merge" "$out" "$d/b.jsonl" >"$d/o.log" 2>&1
  rc=$?
  [ $rc -eq 2 ] || fail "OUT '$out': exit $rc, expected 2: $(cat "$d/o.log")"
  grep -q "OUT" "$d/o.log" || fail "OUT '$out' not named: $(cat "$d/o.log")"
done
[ ! -e "$d.tmp" ] && [ ! -e ".tmp" ] || fail "a .tmp was left behind"
# 9. an error record (line 2's case journalled as a failed attempt, signed
# as the gate signs): a resume keeps it (the case's windows fail, nothing
# runs); --retry-errors runs that case alone again and appends its result,
# which counts from then on, in the gate and in the merge; an error after a
# result is a failed attempt beside it: the result counts.
python3 - "$d/b.jsonl" "$d/err.jsonl" "$d/err-line.txt" <<'PY'
import hashlib, json, sys
def seal(rec):
    body = json.dumps(rec, separators=(",", ":"), sort_keys=True)
    return body[:-1] + ',"sha256":"' + hashlib.sha256(body.encode()).hexdigest() + '"}'
lines = open(sys.argv[1]).read().rstrip("\n").split("\n")
rec = json.loads(lines[1])
for k in ("sha256", "outputs"):
    rec.pop(k, None)
rec["results"], rec["error"] = [], "injected: CUDA error: out of memory"
err = seal(rec)  # its "prev" (the header's seal) kept
out = [lines[0], err]
for line in lines[2:]:  # chained again to the line before, as the gate writes them
    r = json.loads(line)
    r.pop("sha256")
    r["prev"] = out[-1][-66:-2]
    out.append(seal(r))
open(sys.argv[2], "w").write("\n".join(out) + "\n")
open(sys.argv[3], "w").write(err + "\n")
PY
cp "$d/err.jsonl" "$d/err0.jsonl"
"$bin" gate "$table" "${opts[@]}" --windows "$B" --journal "$d/err.jsonl" --report-md "$d/err.md" >"$d/err.log" 2>&1
rc=$?
# Its windows fail on an error alone, none over budget: verdict ERROR, exit 3.
[ $rc -eq 3 ] || fail "a journalled error: exit $rc, expected 3 (ERROR: a case could not run): $(tail -3 "$d/err.log")"
grep -q "^verdict  ERROR: .* injected: CUDA error: out of memory" "$d/err.log" ||
  fail "a journalled error: no ERROR verdict naming it: $(tail -3 "$d/err.log")"
grep -q "0 run now" "$d/err.log" || fail "a journalled error was run again without --retry-errors: $(grep journal "$d/err.log")"
cmp -s "$d/err.jsonl" "$d/err0.jsonl" || fail "a resume without --retry-errors changed the journal"
"$bin" gate "$table" "${opts[@]}" --windows "$B" --journal "$d/err.jsonl" --retry-errors --report-md "$d/retry.md" \
  >"$d/retry.log" 2>&1 || fail "gate --retry-errors: exit $?: $(tail -3 "$d/retry.log")"
grep -q "$((nb - 1)) finished cases resumed, 1 run now (1 of them journalled errors run again)" "$d/retry.log" ||
  fail "--retry-errors did not run exactly the errored case: $(grep journal "$d/retry.log")"
[ "$(tail -n +2 "$d/err.jsonl" | wc -l)" -eq $((nb + 1)) ] || fail "--retry-errors: the journal should keep the error and append one line"
"$bin" gate "$table" "${opts[@]}" --windows "$B" --report-md "$d/b-direct.md" >"$d/b-direct.log" 2>&1 || fail "direct gate $B"
diff <(grep -v '^- date:' "$d/b-direct.md") <(grep -v '^- date:' "$d/retry.md") >"$d/diff9.txt" \
  || fail "the report after --retry-errors differs from a direct run: $(head -20 "$d/diff9.txt")"
"$bin" gate "$table" "${opts[@]}" --windows "$B" --journal "$d/err.jsonl" >"$d/again.log" 2>&1 \
  || fail "resume after the retry: exit $?: $(tail -3 "$d/again.log")"
grep -q "$nb finished cases resumed, 0 run now" "$d/again.log" || fail "after the retry: $(grep journal "$d/again.log")"
# The merge: the retried journal as it is, and the error line after b's result.
python3 "$merge" "$d/m9.jsonl" "$d/err.jsonl" >"$d/m9.log" 2>&1 || fail "merge of a retried journal: $(cat "$d/m9.log")"
cmp -s "$d/m9.jsonl" "$d/err.jsonl" || fail "merge of a retried journal dropped a line"
{ head -1 "$d/b.jsonl"; cat "$d/err-line.txt"; } >"$d/err-only.jsonl"
python3 "$merge" "$d/m10.jsonl" "$d/b.jsonl" "$d/err-only.jsonl" >"$d/m10.log" 2>&1 || fail "merge, error after result: $(cat "$d/m10.log")"
grep -q "dropped: contradicts" "$d/m10.log" && fail "an error after a result was taken for a contradiction: $(cat "$d/m10.log")"
"$bin" gate "$table" "${opts[@]}" --windows "$B" --journal "$d/m10.jsonl" >"$d/m10g.log" 2>&1 \
  || fail "gate on a journal with an error after a result: exit $?: $(tail -3 "$d/m10g.log")"
grep -q "0 run now" "$d/m10g.log" || fail "error after a result: $(grep journal "$d/m10g.log")"
"$bin" gate "$table" "${opts[@]}" --windows "$B" --journal "$d/m11.jsonl" --merge "$d/err0.jsonl" --retry-errors \
  >"$d/m11.log" 2>&1
rc=$?
[ $rc -eq 2 ] || fail "--retry-errors with --merge: exit $rc, expected 2"
grep -qE -- "--(merge excludes --retry-errors|retry-errors excludes --merge)" "$d/m11.log" || fail "--retry-errors with --merge: $(cat "$d/m11.log")"
[ ! -e "$d/m11.jsonl" ] || fail "--retry-errors with --merge wrote a journal"
# 10. Journals under a journal key (NORMGATE_JOURNAL_KEY_FILE): merged under
# the key (lines chained again under it), the gate resumes the result under it; a
# keyed line re-sealed with a plain SHA-256 is refused naming FILE:LINE, and
# keyed journals without the key are exit 2 naming the variable.
printf '%s\n' 0123456789abcdef0123456789abcdef0123456789abcdef >"$d/key"; chmod 600 "$d/key"
K=(env NORMGATE_JOURNAL_KEY_FILE="$d/key")
"${K[@]}" "$bin" gate "$table" "${opts[@]}" --windows "$A" --journal "$d/ka.jsonl" >"$d/ka.log" 2>&1 || fail "keyed gate $A: $(tail -3 "$d/ka.log")"
"${K[@]}" "$bin" gate "$table" "${opts[@]}" --windows "$B" --journal "$d/kb.jsonl" >"$d/kb.log" 2>&1 || fail "keyed gate $B: $(tail -3 "$d/kb.log")"
grep -q '"hmac_sha256":"' "$d/ka.jsonl" || fail "a keyed journal without hmac_sha256 lines"
"${K[@]}" python3 "$merge" "$d/km.jsonl" "$d/ka.jsonl" "$d/kb.jsonl" >"$d/km.log" 2>&1 || fail "keyed merge: $(cat "$d/km.log")"
"${K[@]}" "$bin" gate "$table" "${opts[@]}" --windows "w=bf16|fp32" --journal "$d/km.jsonl" >"$d/kmg.log" 2>&1 \
  || fail "keyed resume of the merge: $(tail -3 "$d/kmg.log")"
grep -q " 0 run now" "$d/kmg.log" || fail "keyed resume ran cases: $(grep journal "$d/kmg.log")"
python3 "$merge" "$d/kn.jsonl" "$d/ka.jsonl" >"$d/kn.log" 2>&1
[ $? -eq 2 ] && [ ! -e "$d/kn.jsonl" ] || fail "keyed journal merged without the key: $(cat "$d/kn.log")"
python3 - "$d/ka.jsonl" "$d/kf.jsonl" <<'PY'
import hashlib, sys
lines = open(sys.argv[1]).read().split("\n")
b = lines[1][:lines[1].rindex(',"hmac_sha256"')] + "}"
lines[1] = b[:-1] + ',"sha256":"' + hashlib.sha256(b.encode()).hexdigest() + '"}'
open(sys.argv[2], "w").write("\n".join(lines))
PY
"${K[@]}" python3 "$merge" "$d/kfm.jsonl" "$d/kf.jsonl" >"$d/kf.log" 2>&1
[ $? -eq 2 ] && grep -q "kf.jsonl:2" "$d/kf.log" && [ ! -e "$d/kfm.jsonl" ] || fail "a re-sealed plain line was merged: $(cat "$d/kf.log")"
# 11. The chain (journal format 3): a record repeated, two swapped, or one
# copied in from another journal of the same campaign keeps its own seal
# but not its "prev": refused by the merge (exit 2 naming FILE:LINE, no
# output) and by the gate alike.
python3 - "$d/b.jsonl" "$d/a.jsonl.gz" "$d" <<'PY'
import gzip, sys
b = open(sys.argv[1]).read().rstrip("\n").split("\n")
a = gzip.open(sys.argv[2], "rt").read().rstrip("\n").split("\n")
assert len(b) >= 4, "b.jsonl holds fewer than 3 records"
def put(name, lines):
    open(f"{sys.argv[3]}/{name}.jsonl", "w").write("\n".join(lines) + "\n")
put("rep", b + [b[-1]])                       # line len(b)+1 repeats line len(b)
put("swap", [b[0], b[2], b[1]] + b[3:])       # line 2 is b's line 3
put("foreign", b + [a[1]])                    # a's first record after b's last
PY
nl=$(wc -l <"$d/b.jsonl")
for bad in rep:$((nl + 1)) swap:2 foreign:$((nl + 1)); do
  f=${bad%%:*} n=${bad#*:}
  python3 "$merge" "$d/$f-out.jsonl" "$d/$f.jsonl" >"$d/$f.log" 2>&1
  rc=$?
  [ $rc -eq 2 ] || fail "chain ($f): exit $rc, expected 2: $(cat "$d/$f.log")"
  grep -q "$f.jsonl:$n: its \"prev\" is not the seal of line $((n - 1))" "$d/$f.log" || fail "chain ($f) not named: $(cat "$d/$f.log")"
  [ ! -e "$d/$f-out.jsonl" ] || fail "chain ($f): an output file was written on error"
  "$bin" gate "$table" "${opts[@]}" --windows "$A|${B#w=}" --journal "$d/$f.jsonl" >"$d/$f-gate.log" 2>&1
  [ $? -eq 2 ] && grep -q "line $n: its \"prev\" is not the seal of line $((n - 1))" "$d/$f-gate.log" ||
    fail "chain ($f): the gate did not refuse it: $(tail -2 "$d/$f-gate.log")"
done
# A "prev" the gate reads but OUT's chain could not rewrite (escaped): refused.
python3 - "$d/b.jsonl" "$d/esc.jsonl" <<'PY'
import hashlib, json, sys
lines = open(sys.argv[1]).read().rstrip("\n").split("\n")
b = lines[-1][:lines[-1].rindex(',"sha256"')] + "}"
i = b.index('"prev":"') + 8
b = b[:i] + "\\u%04x" % ord(b[i]) + b[i + 1:]
lines[-1] = b[:-1] + ',"sha256":"' + hashlib.sha256(b.encode()).hexdigest() + '"}'
open(sys.argv[2], "w").write("\n".join(lines) + "\n")
PY
python3 "$merge" "$d/esc-out.jsonl" "$d/esc.jsonl" >"$d/esc.log" 2>&1
[ $? -eq 2 ] && grep -q "not written as the gate writes it" "$d/esc.log" && [ ! -e "$d/esc-out.jsonl" ] ||
  fail "an escaped prev was merged: $(cat "$d/esc.log")"
python3 "$merge" --help >"$d/help.log" 2>&1 || fail "--help: exit $?"
grep -q "keep-first" "$d/help.log" || fail "--help does not print the usage"
# A key mismatch is named as one, not as "not a journal".
NORMGATE_JOURNAL_KEY_FILE="$d/key" python3 "$merge" "$d/kx.jsonl" "$d/b.jsonl" >"$d/kx.log" 2>&1
[ $? -eq 2 ] && grep -q "b.jsonl:1: the line is sealed with a plain SHA-256.*NORMGATE_JOURNAL_KEY_FILE" "$d/kx.log" ||
  fail "a plain journal under a key: $(cat "$d/kx.log")"
# A format-2 journal (unchained) is refused by both, saying so.
python3 - "$d/b.jsonl" "$d/v2.jsonl" <<'PY'
import hashlib, json, sys
lines = open(sys.argv[1]).read().rstrip("\n").split("\n")
h = json.loads(lines[0]); h.pop("sha256"); h["normgate_journal"] = 2
body = json.dumps(h, separators=(",", ":"), sort_keys=True)
open(sys.argv[2], "w").write(body[:-1] + ',"sha256":"' + hashlib.sha256(body.encode()).hexdigest() + '"}\n')
PY
python3 "$merge" "$d/v2-out.jsonl" "$d/v2.jsonl" >"$d/v2.log" 2>&1
[ $? -eq 2 ] && grep -q "format-2 journal (its lines are not chained)" "$d/v2.log" || fail "format 2 merged: $(cat "$d/v2.log")"
"$bin" gate "$table" "${opts[@]}" --windows "$B" --journal "$d/v2.jsonl" >"$d/v2-gate.log" 2>&1
[ $? -eq 2 ] && grep -q "is format 2; this normgate reads format 3" "$d/v2-gate.log" ||
  fail "format 2 resumed by the gate: $(tail -2 "$d/v2-gate.log")"
# 12. the output's temporary is a file of its own: a link or a folder at
# OUT.tmp is left alone (the old fixed name wrote through the link), and no
# temporary is left beside OUT.
echo precious >"$d/victim.txt"
ln -s "$d/victim.txt" "$d/t12.jsonl.tmp"
python3 "$merge" "$d/t12.jsonl" "$d/b.jsonl" >"$d/t12.log" 2>&1 || fail "merge beside a link: $(cat "$d/t12.log")"
[ "$(cat "$d/victim.txt")" = precious ] || fail "the merge wrote through OUT.tmp's link"
[ -f "$d/t12.jsonl" ] && [ ! -L "$d/t12.jsonl" ] || fail "OUT is not a regular file after the merge"
mkdir "$d/t13.jsonl.tmp"
python3 "$merge" "$d/t13.jsonl" "$d/b.jsonl" >"$d/t13.log" 2>&1 || fail "merge beside a folder OUT.tmp: $(cat "$d/t13.log")"
cmp -s "$d/t12.jsonl" "$d/t13.jsonl" || fail "the two merges of one journal differ"
ls -a "$d" | grep -q '^\.journal_merge\.' && fail "a temporary was left behind: $(ls -a "$d")"
echo "PASS: merged $na + $nb case lines; the gate resumed all, ran none, same report; bad inputs refused; errors retried; keyed journals; chain"
