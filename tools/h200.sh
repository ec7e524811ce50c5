#!/usr/bin/env bash
# Everything GPU-side in one run, on a CUDA machine (written for the H200):
#   1. build if needed (or use a build made elsewhere: NORMGATE_BUILD),
#   2. run every test binary (GPU tests run here instead of skipping),
#   3. compute-sanitizer memcheck and racecheck on small cases of every variant
#      (`normgate check --variant all`: every backward variant, then every
#      forward variant but the default, fwd_multirow), on the forward's ring
#      kernel across rows (test_kernels Pipeline.RingCrossRowSmall) and on
#      bwd_det_onepass's ticket and graph replays (test_kernels BwdOnepass.*),
#      and racecheck on two backward cases whose chunks exceed 64 rows (the
#      staged batches of refined rstd),
#   4. the kernel benchmark (bench/kernels_bench; NG_BENCH_ARGS passes options),
#   5. the main job on real input: `normgate check` over a grid of cases, one
#      invocation per (T, H) so a deadline leaves complete tables
#      (NG_GRID_T, NG_GRID_H, NG_GRID_W, NG_GRID_SEEDS override the grid; --steps picks steps),
#   6. escbench: the MPFR escalation cost on this host's cores (bench/escalation_bench),
#   7. gate: `normgate gate` over NG_GATE_TABLE (routes/sm90a.toml) with
#      NG_GATE_SEEDS (3x16), NG_GATE_WINDOWS (all), NG_GATE_ARGS, journalled to
#      NG_GATE_JOURNAL (resumes when it exists; copied to the output folder),
#      stopped by the deadline (the journal keeps what finished),
#   8. audit (not run by default; after `gate`, or on NG_AUDIT_REPORT): from the
#      gate report (tools/audit_pick.py picks the window with the highest worst
#      err/tol and a cancel case of it): `normgate repro --from-report` of that
#      window's worst case and `normgate repro CASE --variant ctl_fp32_seq` of
#      the cancel case (a negative control: exit 1 expected), both --save'd to
#      cases/; `normgate export` of every window's worst case (maps.h5); and
#      `normgate inspect` of every .h5. A .h5 over NG_AUDIT_KEEP_MB (default 4)
#      is removed after its inspect, so that logs.tgz stays small.
#      NG_AUDIT_BACKEND=cpu runs it on the CPU models (a dry run without a GPU),
#   9. derive (not run by default): `normgate derive` of routes/sm90a.derive.toml
#      (on a GPU with a spec of its own, routes/sm90a@SLUG.derive.toml, into
#      its per-GPU table) into the output folder (NG_DERIVE_* below, at the step),
#  10. plugin (not run by default): the example CUDA plugin gated from the CLI
#      (NG_PLUGIN_* at the step),
#  11. peers (not run by default): torch.compile, Liger and QuACK through
#      normgate.gate (tools/gate_peers.py; NG_PEERS_ARGS),
#  12. ceiling (not run by default): bench/ceiling_bench, the copies and the
#      one-direction streams that bound a memory-bound kernel (NG_CEILING_ARGS;
#      default --mib 1024 2048 --rounds 5); table in DIR/ceiling.txt,
#  13. a short table last.
# Logs go to the output folder DIR: everything under DIR/logs, packed into
# DIR/logs.tgz at the end.
# Usage: tools/h200.sh [--out DIR] [--deadline-s N] [--steps "STEP ..."]
#   --out DIR       the output folder (default: $OUT if set, else out/ in the
#                   repository)
#   --deadline-s N  seconds after the start by which the grid, escbench, gate
#                   and audit steps stop, so that the logs are packed in time
#                   (default: $NG_DEADLINE, else 0: none)
#   --steps LIST    the steps, blank-separated, of: tests sanitize bench grid
#                   escbench gate audit derive plugin peers ceiling (default:
#                   $NG_STEPS, else "tests sanitize bench grid"); an unknown
#                   one is exit 2 before any work
# e.g.   tools/h200.sh --out /tmp/h200 --deadline-s 540
#        tools/h200.sh --steps "tests sanitize"
#        NG_GATE_WINDOWS=op=bwd,H=2048 tools/h200.sh --steps "gate audit"
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# glibc madvises its large chunks for transparent huge pages (THP "madvise"):
# the oracle's arrays fault in 512x fewer pages (the downloads' vectors ask
# for them in any case; docs/perf/oracle-and-gate-throughput.md, D17).
export GLIBC_TUNABLES="${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}glibc.malloc.hugetlb=1"
build="${NORMGATE_BUILD:-$root/build}"
final="${OUT:-$root/out}"
deadline="${NG_DEADLINE:-0}"
steps="${NG_STEPS:-tests sanitize bench grid}"
while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ $# -ge 2 ] && [ -n "$2" ] || { echo "h200: --out needs a folder (not empty)" >&2; exit 2; }; final="$2"; shift 2 ;;
    --deadline-s) [ $# -ge 2 ] || { echo "h200: --deadline-s needs seconds" >&2; exit 2; }; deadline="$2"; shift 2 ;;
    --steps) [ $# -ge 2 ] || { echo "h200: --steps needs a list" >&2; exit 2; }; steps="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "h200: unknown argument '$1' (--out DIR, --deadline-s N, --steps LIST)" >&2; exit 2 ;;
  esac
done
[[ "$deadline" =~ ^[0-9]+$ ]] || { echo "h200: --deadline-s '$deadline' is not a whole number of seconds" >&2; exit 2; }
# Every step named must be one this script runs: a misspelt step would
# otherwise run nothing and say nothing.
known="tests sanitize bench grid escbench gate audit derive plugin peers ceiling"
[ -n "${steps// /}" ] || { echo "h200: --steps is empty (steps: $known)" >&2; exit 2; }
for s in $steps; do
  [[ " $known " == *" $s "* ]] || { echo "h200: --steps: unknown step '$s' (steps: $known)" >&2; exit 2; }
done
out="$final/logs"   # everything lands here; packed into $final/logs.tgz at the end
mkdir -p "$out"
bin="$build/apps/normgate"
declare -a summary
# A build made in a checkout at /work/main has that path baked into its tests:
# it is linked to this checkout where it is missing.
[ -e /work/main ] || { mkdir -p /work && ln -s "$root" /work/main; }
# A compact build (tools/stage_carry, NORMGATE_BUILD=build/dev): the
# CLI tests look for the binary under build/apps.
if [ "$build" != "$root/build" ] && [ ! -e "$root/build/apps/normgate" ] && [ -x "$build/apps/normgate" ]; then
  mkdir -p "$root/build" && ln -sfn "$(cd "$build" && pwd)/apps" "$root/build/apps"
fi

# Builds made with NORMGATE_HOST_FMA (the default on FMA machines) need FMA here too.
grep -qw fma /proc/cpuinfo 2>/dev/null ||
  echo "h200: this CPU has no FMA: a build made elsewhere with -mfma cannot run here (rebuild with -DNORMGATE_HOST_FMA=OFF)" | tee -a "$out/steps.log"
if ! "$bin" --version >/dev/null 2>&1 || ! [ -x "$build/bench/kernels_bench" ]; then
  echo "h200: no usable build in $build: building" | tee -a "$out/steps.log"
  "$root/scripts/build" >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
fi
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem --format=csv
  nvcc --version 2>/dev/null | tail -2
  "$bin" --version
  git -C "$root" rev-parse HEAD 2>/dev/null || true
} >"$out/env.txt" 2>&1
gpu="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"

has() { [[ " $steps " == *" $1 "* ]]; }
# --deadline-s (seconds after start, 0 = none): the grid stops in time to pack the logs.
left() { if [ "$deadline" -gt 0 ]; then echo $((deadline - SECONDS)); else echo 100000; fi; }

if has tests; then
  for t in "$build"/tests/test_*; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    start=$SECONDS
    timeout "${NG_TEST_TIMEOUT:-240}" "$t" --gtest_brief=1 --gtest_filter="${NG_TEST_FILTER:-*}" >"$out/$name.log" 2>&1
    rc=$?
    pass=$(grep -c "^\[       OK \]" "$out/$name.log" || true)
    res=$(grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$out/$name.log" | tr '\n' ' ')
    summary+=("$(printf '%-24s rc=%d %4ds %s' "$name" "$rc" $((SECONDS - start)) "$res")")
    [ $rc -ne 0 ] && grep -E "FAILED|Failure|error" "$out/$name.log" | head -20
  done
fi

if has sanitize; then
  : >"$out/sanitizer.log"
  # A clean run: exit 0 or 1 (1 = a control failed its budget, as it must; 9 =
  # a sanitizer error) and the tool's summary line saying nothing was found.
  declare -A clean_line=([memcheck]="ERROR SUMMARY: 0 errors"
                         [racecheck]="RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)")
  san_totals=""
  # One sanitizer run of the current $tool: san_run LABEL MAX_RC LIMIT_S
  # EXTRA_PATTERN COMMAND...; clean when its exit status is at most MAX_RC,
  # the tool's summary line says nothing was found, and EXTRA_PATTERN (when
  # not empty) appears in its output.
  san_run() {
    local label=$1 max_rc=$2 limit=$3 extra=$4 start=$SECONDS rc said
    shift 4
    timeout "$limit" compute-sanitizer --tool "$tool" --error-exitcode 9 "$@" >"$out/sanitizer.run" 2>&1
    rc=$?
    cat "$out/sanitizer.run" >>"$out/sanitizer.log"
    said=$(grep -Eo "(ERROR|RACECHECK) SUMMARY: .*" "$out/sanitizer.run" | tail -1)
    runs=$((runs + 1))
    [ "$rc" -le "$max_rc" ] && grep -qF "${clean_line[$tool]}" "$out/sanitizer.run" &&
      { [ -z "$extra" ] || grep -q "$extra" "$out/sanitizer.run"; } && clean=$((clean + 1))
    summary+=("$(printf '%-9s %-58s rc=%-3d %3ds %s' "$tool" "$label" "$rc" $((SECONDS - start)) "${said:-no summary line}")")
  }
  for tool in memcheck racecheck; do
    runs=0 clean=0
    for c in "H=4096,T=67,w=bf16,family=normal,seed=1" "H=7,T=33,w=fp32,family=llm,seed=2" \
             "H=16384,T=19,w=bf16,family=cancel,seed=3" "H=1,T=5,w=fp32,family=normal,seed=4" \
             "H=256,T=9,w=bf16,form=heads24,family=llm,seed=5" "H=256,T=33,w=fp32,form=heads4,family=cancel,seed=6" \
             "H=6144,T=11,w=fp32,form=res,family=llm,seed=7" "H=1001,T=23,w=bf16,form=res,family=cancel,seed=8" \
             "H=4096,T=1,w=bf16,form=res,family=normal,seed=9" "H=16384,T=13,w=bf16,form=res,family=llm,seed=10"; do
      san_run "$c" 1 120 "" "$bin" check --backend gpu --variant all --case "$c"
    done
    # The forward's ring kernel across rows of one CTA (shared red/rs_sh and
    # ring slots reused; the CLI cases above take the default simple kernel).
    san_run "test_kernels Pipeline.RingCrossRowSmall" 0 240 "^\[  PASSED  \] 1 test" \
      "$build/tests/test_kernels" --gtest_filter=Pipeline.RingCrossRowSmall
    # Views the CLI cases do not take (memcheck only): pointers one element
    # off 16-byte alignment and padded rows (the scalar path, bitwise the
    # vector path's), strided and expanded per-head views, of the backward
    # and of fwd_multirow (Variants/Fwd, MultirowForms); the two largest
    # layout shapes are left out for time.
    if [ "$tool" = memcheck ]; then
      san_run "test_kernels layouts and per-head views" 0 300 "^\[  PASSED  \]" \
        "$build/tests/test_kernels" \
        "--gtest_filter=Variants/Bwd.LayoutDoesNotChangeTheBits/bwd_det_chunked_*:Variants/Fwd.DeterministicAndLayoutDoesNotChangeTheBits/*:HeadForms.*:MultirowForms.*-*H4096_T4099*:*H64_T65537*"
    fi
    # Chunks of more than 64 rows (the cases above have at most ~16): the
    # backward's batches of refined rstd in shared memory cross and are
    # overwritten (bwd_chunk_pass.cuh); racecheck only, backward variants only.
    if [ "$tool" = racecheck ]; then
      for c in "H=64,T=210000,w=bf16,family=normal,seed=11" "H=256,T=35000,w=bf16,form=heads4,family=llm,seed=12"; do
        san_run "$c (long chunks)" 0 240 "" "$bin" check --backend gpu \
          --variant bwd_det_chunked --variant bwd_nondet_atomic --variant bwd_det_onepass --case "$c"
        # The FP32 partials may miss the dw budget on long columns (exit 1 allowed).
        san_run "$c (long chunks, FP32 partials)" 1 240 "" "$bin" check --backend gpu \
          --variant bwd_fp32_blocked --case "$c"
      done
    fi
    # bwd_det_onepass's ticket (garbage counter, repeated calls, graph
    # replays) and last-CTA combine in every chunk-pass kernel, and
    # bwd_fp32_blocked in a graph (tests/kernels/bwd_onepass_test.cpp).
    san_run "test_kernels BwdOnepass.*:BwdFp32Blocked.*" 0 300 "^\[  PASSED  \]" \
      "$build/tests/test_kernels" "--gtest_filter=BwdOnepass.*:BwdFp32Blocked.*"
    # bwd_det_wide's 768-thread kernel against bwd_det_chunked, both paths,
    # plain and res (tests/kernels/bwd_own_kernel_test.cpp).
    san_run "test_kernels BwdDetWide.*" 0 300 "^\[  PASSED  \]" \
      "$build/tests/test_kernels" "--gtest_filter=BwdDetWide.*"
    san_totals+="${san_totals:+, }$tool $clean/$runs clean"
  done
  rm -f "$out/sanitizer.run"
  summary+=("sanitizer: $san_totals (clean: exit 0/1 and '${clean_line[memcheck]}' / '${clean_line[racecheck]}')")
fi

if has bench; then
  # NG_BENCH_ARGS: kernels_bench options and shapes (e.g. "--depth 1:1:0:1:0,4:3:0:1:0 --no-controls 131072,4096": S = 0 for the ring)
  "$build/bench/kernels_bench" --json "$out/kernels_bench.json" ${NG_BENCH_ARGS:-} >"$out/kernels_bench.log" 2>&1
  summary+=("kernels_bench rc=$?")
fi

if has ceiling; then
  # shellcheck disable=SC2086
  timeout --signal=KILL $(( $(left) > 10 ? $(left) - 5 : 5 )) "$build/bench/ceiling_bench" \
    ${NG_CEILING_ARGS:---mib 1024 2048 --rounds 5} >"$final/ceiling.txt" 2>"$out/ceiling.log"
  summary+=("ceiling rc=$?")
fi

if has grid; then
  # One invocation per (T, H) so a partial run still leaves complete tables.
  H="${NG_GRID_H:-2048,4096,6144}"
  S="${NG_GRID_SEEDS:-3x8}"
  W="${NG_GRID_W:-bf16,fp32}"
  wtag=""; [ "$W" = "bf16,fp32" ] || wtag="_${W//,/_}"
  for T in $(echo "${NG_GRID_T:-4097,65537,131072}" | tr ',' ' '); do
    for h in $(echo "$H" | tr ',' ' '); do
      start=$SECONDS
      budget=$(left)
      [ "$budget" -gt 20 ] || { summary+=("grid T=$T H=$h skipped: deadline"); continue; }
      timeout $((budget - 10)) "$bin" check --backend gpu --variant all --quiet \
        --H "$h" --T "$T" --w "$W" --seeds "$S" --json "$out/grid_T${T}_H$h$wtag.json" --md "$out/grid_T${T}_H$h$wtag.md" \
        >"$out/grid_T${T}_H$h$wtag.log" 2>&1
      summary+=("grid H=$h T=$T w=$W seeds=$S rc=$? $((SECONDS - start))s")
    done
  done
fi

if has escbench; then
  start=$SECONDS
  budget=$(left)
  if [ "$budget" -gt 30 ]; then
    timeout $((budget - 10)) "$build/bench/escalation_bench" ${NG_ESC_ARGS:-131072 6144 normal,llm,cancel,normal:inject=64 3} \
      >"$out/escalation_bench.log" 2>&1
    summary+=("escalation_bench rc=$? $((SECONDS - start))s")
  else
    summary+=("escalation_bench skipped: deadline")
  fi
fi

if has gate; then
  start=$SECONDS
  budget=$(left)
  journal="${NG_GATE_JOURNAL:-$out/gate.jsonl}"
  mkdir -p "$(dirname "$journal")"
  if [ "$budget" -gt 30 ]; then
    # shellcheck disable=SC2086
    timeout --signal=KILL $((budget - 10)) "$bin" gate "${NG_GATE_TABLE:-$root/routes/sm90a.toml}" \
      --seeds "${NG_GATE_SEEDS:-3x16}" --windows "${NG_GATE_WINDOWS:-}" --journal "$journal" --quiet \
      --report-md "$out/gate.md" --report-json "$out/gate.json" ${NG_GATE_ARGS:-} >"$out/gate.log" 2>&1
    rc=$?
    summary+=("gate ${NG_GATE_WINDOWS:-all windows} seeds=${NG_GATE_SEEDS:-3x16} rc=$rc $((SECONDS - start))s, journal $(wc -l <"$journal") lines")
    while read -r l; do summary+=("  $l"); done < <(grep -E "^(pipeline|verdict|journal) " "$out/gate.log")
  else
    summary+=("gate skipped: deadline")
  fi
  [ "$journal" = "$out/gate.jsonl" ] || cp "$journal" "$out/gate.jsonl"
  gzip -c "$out/gate.jsonl" >"$final/gate.jsonl.gz"
fi

if has derive; then
  # `normgate derive` of NG_DERIVE_SPEC (routes/sm90a.derive.toml): the table
  # to DIR/sm90a.toml, its approvals, approval policy and remembered
  # rejections beside it (seeded from the committed routes/sm90a.approvals.json,
  # sm90a.policy.toml and sm90a.rejections.json when absent: without the
  # rejections derive gates every rejected candidate again, routes.md D7),
  # the report to DIR/derive/sm90a.*;
  # NG_DERIVE_TIMINGS reuses an earlier run's timings, NG_DERIVE_JOURNAL the
  # gate journal (resumed when it exists), NG_DERIVE_ARGS more options
  # (e.g. "--approve --seeds 3x16"); NG_DERIVE_RECHECK=1 first re-proves the
  # seeded rejections whose variant's source changed (`normgate approvals
  # DIR/sm90a.rejections.json --recheck --backend gpu`, routes.md D22; log in
  # DIR/derive/recheck.log). Stopped by the deadline.
  start=$SECONDS
  budget=$(left)
  mkdir -p "$final/derive"
  [ -f "$final/sm90a.approvals.json" ] || cp "$root/routes/sm90a.approvals.json" "$final/sm90a.approvals.json"
  # --approve needs the approval policy beside the output table (policy.h).
  [ -f "$final/sm90a.policy.toml" ] || cp "$root/routes/sm90a.policy.toml" "$final/sm90a.policy.toml"
  [ -f "$final/sm90a.rejections.json" ] || cp "$root/routes/sm90a.rejections.json" "$final/sm90a.rejections.json"
  if [ "${NG_DERIVE_RECHECK:-0}" = 1 ]; then
    "$bin" approvals "$final/sm90a.rejections.json" --recheck --backend gpu >"$final/derive/recheck.log" 2>&1
    summary+=("recheck rc=$? $((SECONDS - start))s: $(tail -n 1 "$final/derive/recheck.log")")
    budget=$(left)
  fi
  djournal="${NG_DERIVE_JOURNAL:-$final/derive/gate.jsonl}"
  targs=()
  [ -n "${NG_DERIVE_TIMINGS:-}" ] && targs=(--timings "$NG_DERIVE_TIMINGS")
  # On a GPU with a spec of its own (routes/sm90a@SLUG.derive.toml, SLUG the
  # device name's file form: routes.md D26), its per-GPU table
  # DIR/sm90a@SLUG.toml (the approvals, policy and rejections above are
  # shared); else routes/sm90a.derive.toml, which only an H200 derives.
  dspec="$root/routes/sm90a.derive.toml" dname=sm90a
  gname="$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null | head -n 1)"
  # The device's per-GPU table name by the library's rule (`routes --files --gpu`).
  if [ -n "$gname" ] && gfiles="$("$bin" routes --files --gpu "$gname" -- "$root/routes/sm90a.toml" 2>"$out/derive.files.err")"; then
    gtable="$(python3 -c 'import json,sys; sys.stdout.buffer.write(json.loads(sys.argv[1])["gpu_table"].encode())' "$gfiles")"
  else
    gtable=""
    summary+=("derive: no per-GPU table name for GPU '$gname' ($(head -c 300 "$out/derive.files.err" 2>/dev/null)): the base spec")
  fi
  if [ -z "${NG_DERIVE_SPEC:-}" ] && [ -n "$gtable" ] && [ -f "${gtable%.toml}.derive.toml" ]; then
    dspec="${gtable%.toml}.derive.toml" dname="$(basename "${gtable%.toml}")"
  fi
  if [ "$budget" -gt 30 ]; then
    # shellcheck disable=SC2086
    timeout --signal=KILL $((budget - 5)) "$bin" derive "${NG_DERIVE_SPEC:-$dspec}" \
      --out "$final/$dname.toml" --report "$final/derive/$dname" --journal "$djournal" \
      --deadline-s $((budget - 25)) "${targs[@]}" ${NG_DERIVE_ARGS:-} >"$out/derive.log" 2>&1
    rc=$?
    summary+=("derive rc=$rc $((SECONDS - start))s")
    while read -r l; do summary+=("  $l"); done < <(grep -E "^(timings|table|stopped|gate) |^  (PASS|FAIL)" "$out/derive.log")
    cp "$out/derive.log" "$final/derive/derive.log"
  else
    summary+=("derive skipped: deadline")
  fi
fi

if has plugin; then
  # The example CUDA plugin (examples/plugin/) gated from the CLI over
  # NG_PLUGIN_TABLE (examples/plugin/routes-cuda.toml) with NG_PLUGIN_SEEDS
  # (3x4) and NG_PLUGIN_ARGS; reports to DIR/plugin/. Stopped by the deadline.
  start=$SECONDS
  budget=$(left)
  mkdir -p "$final/plugin"
  lib="$build/examples/plugin/libng_cuda_plugin.so"
  if [ ! -f "$lib" ]; then
    summary+=("plugin skipped: no $lib (a CUDA build makes it)")
  elif [ "$budget" -gt 30 ]; then
    # shellcheck disable=SC2086
    timeout --signal=INT $((budget - 10)) "$bin" gate "${NG_PLUGIN_TABLE:-$root/examples/plugin/routes-cuda.toml}" \
      --plugin "$lib" --seeds "${NG_PLUGIN_SEEDS:-3x4}" --journal "$final/plugin/gate.jsonl" \
      --report-md "$final/plugin/plugin-gate.md" --report-json "$final/plugin/plugin-gate.json" \
      ${NG_PLUGIN_ARGS:-} >"$out/plugin.log" 2>&1
    rc=$?
    summary+=("plugin rc=$rc $((SECONDS - start))s")
    while read -r l; do summary+=("  $l"); done < <(grep -E "^(verdict|backend) " "$out/plugin.log")
  else
    summary+=("plugin skipped: deadline")
  fi
fi

if has peers; then
  # Other projects' kernels (torch.compile, Liger, QuACK) through normgate.gate
  # (tools/gate_peers.py); NG_PEERS_ARGS passes options (--site DIR for
  # packages installed outside python3's path). Reports to DIR/peers/.
  start=$SECONDS
  budget=$(left)
  if [ "$budget" -gt 30 ]; then
    # shellcheck disable=SC2086
    NORMGATE_LIB="$build/capi/libnormgate_capi.so" PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}" \
      timeout --signal=KILL $((budget - 5)) python3 "$root/tools/gate_peers.py" --out "$final/peers" \
      --deadline-s $((budget - 20)) ${NG_PEERS_ARGS:-} >"$out/peers.log" 2>&1
    rc=$?
    summary+=("peers rc=$rc $((SECONDS - start))s")
    while read -r l; do summary+=("  $l"); done < <(grep -E '^peer |"stopped"' "$out/peers.log")
  else
    summary+=("peers skipped: deadline")
  fi
fi

if has audit; then
  report="${NG_AUDIT_REPORT:-$out/gate.json}"
  keep_mb="${NG_AUDIT_KEEP_MB:-4}"
  be="${NG_AUDIT_BACKEND:-gpu}"   # cpu: a dry run of this step on a machine without a GPU
  mkdir -p "$out/cases"
  : >"$out/audit.log"
  # One audit action: `normgate ARGS...`, its command line and output appended
  # to audit.log; one summary line (exit status against what is expected, time)
  # and the output lines matching PATTERN (at most 4).
  audit_run() {
    local what="$1" expect="$2" pattern="$3" start=$SECONDS budget rc
    shift 3
    budget=$(left)
    if [ "$budget" -le 30 ]; then summary+=("audit $what: skipped (deadline)"); return; fi
    printf '\n$ normgate %s\n' "$*" >>"$out/audit.log"
    timeout $((budget - 10)) "$bin" "$@" >"$out/audit.run" 2>&1
    rc=$?
    cat "$out/audit.run" >>"$out/audit.log"
    summary+=("$(printf 'audit %s: rc=%d (%s) %ds' "$what" "$rc" "$expect" $((SECONDS - start)))")
    while read -r l; do summary+=("  $l"); done < <(grep -E "$pattern|^normgate: " "$out/audit.run" | head -4 | cut -c1-240)
  }
  if [ ! -s "$report" ]; then
    summary+=("audit: skipped, no gate report $report (run the gate step first, or set NG_AUDIT_REPORT)")
  elif ! pick=$(python3 "$root/tools/audit_pick.py" "$report" 2>&1); then
    summary+=("audit: skipped, $pick")
  else
    IFS=$'\t' read -r window cancel label <<<"$pick"
    summary+=("audit: worst window $window ($label), control on $cancel")
    # (a) the window with the highest worst err/tol: its worst case and variant
    audit_run "repro worst case of window $window" "0 pass, 1 fail" "^(from|verdict|saved) " \
      repro --from-report "$report" --window "$window" --backend "$be" --save "$out/cases/"
    # (b) the negative control on a cancel case of that window: it fails by design
    audit_run "repro ctl_fp32_seq on cancel" "1 expected: the control fails" "^(case|verdict|saved) " \
      repro "$cancel" --variant ctl_fp32_seq --backend "$be" --save "$out/cases/"
    # (c) maps of every window's worst case, then every HDF5 file inspected
    audit_run "export --keep 1" "0 expected" "^(export|wrote) " \
      export "$report" -o "$out/maps.h5" --keep 1 --backend "$be"
    for f in "$out"/cases/*.h5 "$out/maps.h5"; do
      [ -f "$f" ] || continue
      audit_run "inspect $(basename "$f")" "0 expected" "normgate-(case|maps)/1" inspect "$f"
      bytes=$(stat -c %s "$f")
      if [ "$bytes" -gt $(( keep_mb * 1048576 )) ]; then
        rm -f "$f"
        summary+=("audit: removed $(basename "$f") ($(awk -v b="$bytes" 'BEGIN{printf "%.1f", b/1048576}') MiB > NG_AUDIT_KEEP_MB=$keep_mb MiB; its command is in audit.log)")
      fi
    done
  fi
  rm -f "$out/audit.run"
fi

echo
echo "== h200.sh on: $gpu"
[ -f "$out/kernels_bench.log" ] && grep -E "^\|" "$out/kernels_bench.log"
for f in "$out"/grid_T*.md; do [ -f "$f" ] && { echo "$(basename "$f")"; grep -E "^\| [a-z_]" "$f" | cut -c1-150; }; done
[ -f "$out/escalation_bench.log" ] && tail -12 "$out/escalation_bench.log"
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
tar -czf "$final/logs.tgz" -C "$final" logs && rm -rf "$out"
