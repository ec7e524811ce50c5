#!/usr/bin/env bash
# The AVX2-only step of scripts/test: the oracle's and the validators' tests
# built with -DNORMGATE_HOST_AVX512=OFF (no AVX-512 code at all: the build
# for compilers and CPUs without it; CMakeLists.txt) in a folder of their
# own, without CUDA, and run. The main build picks its AVX-512 code at load
# time, so a break in the code without it would pass there unseen (about
# 30 s on 2 cores). NORMGATE_NOAVX512=0 skips it.
#   tests/noavx512/ci.sh [BUILD_DIR]     (default: ${NORMGATE_BUILD:-build}-noavx512)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-${NORMGATE_BUILD:-$root/build}-noavx512}"
jobs="${NORMGATE_JOBS:-$(nproc)}"
case "${NORMGATE_NOAVX512:-1}" in
  0) echo "noavx512: skipped (NORMGATE_NOAVX512=0)"; exit 0 ;;
  1) ;;
  *) echo "noavx512: NORMGATE_NOAVX512 '${NORMGATE_NOAVX512}' is not 0 (skip) or 1 (run)" >&2; exit 2 ;;
esac
[[ "$jobs" =~ ^[1-9][0-9]{0,3}$ ]] || { echo "noavx512: NORMGATE_JOBS '$jobs' is not a job count in 1..9999" >&2; exit 2; }
[ ! -e "$build" ] || [ -d "$build" ] || { echo "noavx512: the build folder '$build' exists and is not a folder" >&2; exit 2; }
start=$(date +%s)
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
log="$build.log"
mkdir -p "$build" || { echo "noavx512: cannot create the build folder '$build'" >&2; exit 1; }
if ! cmake -S "$root" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DNORMGATE_CUDA=OFF \
       -DNORMGATE_HOST_AVX512=OFF -DNORMGATE_BUILD_BENCH=OFF -DNORMGATE_BUILD_EXAMPLES=OFF \
       "${launcher[@]}" >"$log" 2>&1 ||
   ! cmake --build "$build" -j "$jobs" --target test_oracle test_validators >>"$log" 2>&1; then
  echo "noavx512: the build with NORMGATE_HOST_AVX512=OFF failed (the end of $log):"
  tail -20 "$log" | sed 's/^/  /'
  exit 1
fi
rc=0
for t in test_oracle test_validators; do
  if ! "$build/tests/$t" --gtest_brief=1 >"$build/$t.log" 2>&1; then
    echo "noavx512: $t failed (built with NORMGATE_HOST_AVX512=OFF; the whole output: $build/$t.log):"
    { grep -E "Failure|FAILED" "$build/$t.log" || tail -5 "$build/$t.log"; } | head -20 | sed 's/^/  /'
    rc=1
  fi
done
[ "$rc" -ne 0 ] || echo "noavx512: test_oracle and test_validators passed, built with NORMGATE_HOST_AVX512=OFF ($(( $(date +%s) - start )) s)"
exit "$rc"
