#!/usr/bin/env bash
# Everything GPU-side in one call (on the H200 device machine, or any CUDA box):
#   1. build if needed (or use a build made elsewhere and carried along),
#   2. run every test binary (GPU tests run here instead of skipping),
#   3. compute-sanitizer memcheck and racecheck on small cases of every variant,
#   4. the kernel benchmark (bench/kernels_bench),
#   5. the main job on real input: `normgate check` over a grid of cases, one
#      invocation per (T, H) so a deadline leaves complete tables
#      (NG_GRID_T, NG_GRID_H, NG_GRID_SEEDS override the grid; NG_STEPS picks steps),
#   6. escbench: the MPFR escalation cost on this host's cores (bench/escalation_bench),
#   7. gate: `normgate gate` over NG_GATE_TABLE (routes/sm90a.toml) with
#      NG_GATE_SEEDS (3x16), NG_GATE_WINDOWS (all), NG_GATE_ARGS, journalled to
#      NG_GATE_JOURNAL (resumes when it exists; copied back to the output),
#      stopped by the deadline (the journal keeps what finished),
#   8. a short table last.
# Logs go to $OUT (the device tool's output folder) or ./out.
# Usage: scripts/h200.sh            (all steps)
#        NG_STEPS="tests sanitize" scripts/h200.sh
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${NORMGATE_BUILD:-$root/build}"
final="${OUT:-$root/out}"
out="$final/logs"   # everything lands here; packed into $final/logs.tgz at the end
steps="${NG_STEPS:-tests sanitize bench grid}"
mkdir -p "$out"
bin="$build/apps/normgate"
declare -a summary
# A build carried from the dev machine has /work/main baked into its test paths.
[ -e /work/main ] || { mkdir -p /work && ln -s "$root" /work/main; }

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
# NG_DEADLINE (seconds after start, 0 = none): the grid stops in time to pack the logs.
deadline="${NG_DEADLINE:-0}"
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
  for tool in memcheck racecheck; do
    runs=0 clean=0
    for c in "H=4096,T=67,w=bf16,family=normal,seed=1" "H=7,T=33,w=fp32,family=llm,seed=2" \
             "H=16384,T=19,w=bf16,family=cancel,seed=3" "H=1,T=5,w=fp32,family=normal,seed=4" \
             "H=256,T=9,w=bf16,form=heads24,family=llm,seed=5" "H=256,T=33,w=fp32,form=heads4,family=cancel,seed=6"; do
      start=$SECONDS
      timeout 120 compute-sanitizer --tool "$tool" --error-exitcode 9 "$bin" check --backend gpu --variant all --case "$c" \
        >"$out/sanitizer.run" 2>&1
      rc=$?
      cat "$out/sanitizer.run" >>"$out/sanitizer.log"
      said=$(grep -Eo "(ERROR|RACECHECK) SUMMARY: .*" "$out/sanitizer.run" | tail -1)
      runs=$((runs + 1))
      [ "$rc" -le 1 ] && grep -qF "${clean_line[$tool]}" "$out/sanitizer.run" && clean=$((clean + 1))
      summary+=("$(printf '%-9s %-58s rc=%-3d %3ds %s' "$tool" "$c" "$rc" $((SECONDS - start)) "${said:-no summary line}")")
    done
    san_totals+="${san_totals:+, }$tool $clean/$runs clean"
  done
  rm -f "$out/sanitizer.run"
  summary+=("sanitizer: $san_totals (clean: exit 0/1 and '${clean_line[memcheck]}' / '${clean_line[racecheck]}')")
fi

if has bench; then
  "$build/bench/kernels_bench" --json "$out/kernels_bench.json" >"$out/kernels_bench.log" 2>&1
  summary+=("kernels_bench rc=$?")
fi

if has grid; then
  # One invocation per T so a partial run still leaves complete tables.
  H="${NG_GRID_H:-2048,4096,6144}"
  S="${NG_GRID_SEEDS:-3x8}"
  for T in $(echo "${NG_GRID_T:-4097,65537,131072}" | tr ',' ' '); do
    for h in $(echo "$H" | tr ',' ' '); do
      start=$SECONDS
      budget=$(left)
      [ "$budget" -gt 20 ] || { summary+=("grid T=$T H=$h skipped: deadline"); continue; }
      timeout $((budget - 10)) "$bin" check --backend gpu --variant all --quiet \
        --H "$h" --T "$T" --w bf16,fp32 --seeds "$S" --json "$out/grid_T${T}_H$h.json" --md "$out/grid_T${T}_H$h.md" \
        >"$out/grid_T${T}_H$h.log" 2>&1
      summary+=("grid H=$h T=$T seeds=$S rc=$? $((SECONDS - start))s")
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

echo
echo "== h200.sh on: $gpu"
[ -f "$out/kernels_bench.log" ] && grep -E "^\|" "$out/kernels_bench.log"
for f in "$out"/grid_T*.md; do [ -f "$f" ] && { echo "$(basename "$f")"; grep -E "^\| [a-z_]" "$f" | cut -c1-150; }; done
[ -f "$out/escalation_bench.log" ] && tail -12 "$out/escalation_bench.log"
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
tar -czf "$final/logs.tgz" -C "$final" logs && rm -rf "$out"
