#!/usr/bin/env bash
# tests/bench/bench_args_test.sh SRC TOOL...: the command lines of the host
# benchmarks (bench/cli_args.h), each TOOL one of add_row_bench,
# escalation_bench, finish_bench, host_copy_bench, oracle_bench,
# dispatch_bench, clock_probe (a path; the name is its basename). -h /
# --help prints the usage to stdout, exit 0; a bad or missing argument prints one line
# "TOOL: ..." naming the argument and the value to stderr, nothing to
# stdout (no work started), exit 2; an exception from the work itself (a
# malformed route table for dispatch_bench) "TOOL: what()", exit 1, not
# std::terminate. No benchmark runs: every call ends while parsing (each is
# stopped after 10 s all the same). Exit 0 pass, 1 fail.
set -u
[ $# -ge 2 ] || { echo "usage: $0 SRC TOOL..." >&2; exit 1; }
src=$1
shift
declare -A bin
for t in "$@"; do bin[$(basename "$t")]=$t; done
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fails=0 checks=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
run() {  # TOOL ARGS...: rc, $d/out, $d/err
  timeout 10 "${bin[$1]}" "${@:2}" >"$d/out" 2>"$d/err"
  rc=$?
  checks=$((checks + 1))
}
show() {
  echo "    stdout: $(head -c 300 "$d/out" | tr '\n' '|')"
  echo "    stderr: $(head -c 300 "$d/err" | tr '\n' '|')"
}
help_ok() {  # TOOL FLAG: usage on stdout, exit 0
  run "$1" "$2"
  if [ $rc -ne 0 ] || ! head -1 "$d/out" | grep -q "^usage: $1 " || [ -s "$d/err" ]; then
    fail "$1 $2: exit $rc (want 0, 'usage: $1 ...' on stdout, nothing on stderr)"
    show
  fi
}
bad() {  # TOOL NAME VALUE ARGS...: exit 2, one line on stderr naming NAME and 'VALUE', stdout empty
  local tool=$1 name=$2 value=$3
  shift 3
  run "$tool" "$@"
  if [ $rc -ne 2 ] || [ -s "$d/out" ] || [ "$(wc -l <"$d/err")" -ne 1 ] || ! grep -q "^$tool: " "$d/err" ||
    ! grep -qF -- "$name" "$d/err" || { [ -n "$value" ] && ! grep -qF -- "'$value'" "$d/err"; }; then
    fail "$tool $*: exit $rc (want 2, one line '$tool: ...' on stderr naming $name${value:+ and '$value'}, no stdout)"
    show
  fi
}
has() { [ -n "${bin[$1]:-}" ]; }

C='H=64,T=8,w=bf16,form=plain,family=normal,seed=1'
if has add_row_bench; then
  help_ok add_row_bench --help
  bad add_row_bench CASE_ID ''                                   # no arguments
  bad add_row_bench CASE_ID 'H=64' 'H=64'
  bad add_row_bench variant 'nope' "$C" nope
  bad add_row_bench rows x "$C" bwd_det_chunked x
  bad add_row_bench samples 0 "$C" bwd_det_chunked 2 0
  bad add_row_bench "unexpected argument" 5 "$C" bwd_det_chunked 2 3 5
fi
if has finish_bench; then
  help_ok finish_bench --help
  help_ok finish_bench -h
  bad finish_bench CASE_ID ''                                    # no arguments
  bad finish_bench CASE_ID 'H=64,T=8' 'H=64,T=8'
  bad finish_bench reps x "$C" bwd_det_chunked x
  bad finish_bench threads -1 "$C" bwd_det_chunked 3 -1
  bad finish_bench impls 2x "$C" bwd_det_chunked 3 0 2x
fi
if has escalation_bench; then
  help_ok escalation_bench --help
  bad escalation_bench T 12x 12x
  bad escalation_bench H 99999 64 99999
  bad escalation_bench families nofam 64 64 nofam
  bad escalation_bench inject q 64 64 normal:inject=q
  bad escalation_bench reps 0 64 64 normal 0
  bad escalation_bench threads -1 64 64 normal 1 -1
fi
if has oracle_bench; then
  help_ok oracle_bench --help
  bad oracle_bench T 0 0
  bad oracle_bench H abc 65536 abc
  bad oracle_bench copy_MiB ' 8' 64 64 ' 8'
fi
if has host_copy_bench; then
  help_ok host_copy_bench --help
  bad host_copy_bench gib 0.01 0.01
  bad host_copy_bench reps x 1 x
  bad host_copy_bench threads 0 1 5 0
  bad host_copy_bench kept-heap yes 1 5 2 yes
fi
if has clock_probe; then
  help_ok clock_probe --help
  bad clock_probe threads 0 0
  bad clock_probe threads x 1,x
  bad clock_probe threads '1,,2' '1,,2'
  bad clock_probe seconds 0.01 1 0.01
  bad clock_probe seconds nan 1 nan
  bad clock_probe kinds avx1024 1 1 scalar,avx1024
  bad clock_probe "unexpected argument" extra 1 1 scalar extra
fi
if has dispatch_bench; then
  help_ok dispatch_bench --help
  bad dispatch_bench calls x "$src/routes/sm90a.toml" x
  bad dispatch_bench table "$d/none.toml" "$d/none.toml"
  printf 'not a route table\n' >"$d/bad.toml"
  run dispatch_bench "$d/bad.toml" 1000
  if [ $rc -ne 1 ] || ! grep -q "^dispatch_bench: " "$d/err" || grep -q "terminate called" "$d/err"; then
    fail "dispatch_bench on a malformed table: exit $rc (want 1, 'dispatch_bench: <what>' on stderr)"
    show
  fi
fi
[ $checks -gt 0 ] || { echo "FAIL: no known tool among: $*"; exit 1; }
[ $fails -eq 0 ] || { echo "$fails of $checks checks failed"; exit 1; }
echo "PASS: $checks checks of $# tools"
