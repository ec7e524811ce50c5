#!/usr/bin/env bash
# The fuzz step of scripts/test: build tests/fuzz with clang in its own build
# folder and run every target briefly over its committed corpus (ctest -L
# fuzz; run_target.sh). Skips, saying why, when clang or libFuzzer is
# missing, or when NORMGATE_FUZZ=0.
#   tests/fuzz/ci.sh [BUILD_DIR]     (default: ${NORMGATE_BUILD:-build}-fuzz)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-${NORMGATE_BUILD:-$root/build}-fuzz}"
jobs="${NORMGATE_JOBS:-$(nproc)}"
if [ "${NORMGATE_FUZZ:-1}" = "0" ]; then
  echo "fuzz: skipped (NORMGATE_FUZZ=0)"
  exit 0
fi
cxx="${NORMGATE_FUZZ_CXX:-clang++}" cc="${NORMGATE_FUZZ_CC:-clang}"
if ! command -v "$cxx" >/dev/null || ! command -v "$cc" >/dev/null; then
  echo "fuzz: skipped: no $cxx/$cc on PATH (the fuzz targets need clang with libFuzzer: apt-get install clang libomp-dev)"
  exit 0
fi
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' >"$probe/p.cpp"
if ! "$cxx" -fsanitize=fuzzer,address,undefined "$probe/p.cpp" -o "$probe/p" >"$probe/log" 2>&1; then
  echo "fuzz: skipped: $cxx cannot link a libFuzzer target (libclang-rt missing?):"
  sed 's/^/  /' "$probe/log" | head -5
  exit 0
fi
start=$(date +%s)
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
if [ ! -f "$build/build.ninja" ]; then
  CC="$cc" CXX="$cxx" cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DNORMGATE_FUZZ=ON \
    "${launcher[@]}" >"$build.configure.log" 2>&1 || { cat "$build.configure.log" >&2; exit 1; }
fi
echo "fuzz: building the fuzz targets in $build (clang, ASan+UBSan; log $build/build.log)"
cmake --build "$build" -j "$jobs" >"$build/build.log" 2>&1 || { tail -n 40 "$build/build.log" >&2; exit 1; }
built=$(date +%s)
set +e
ctest --test-dir "$build" -L fuzz --output-on-failure -j "$jobs" 2>&1 | tee "$build/ctest.log"
rc=${PIPESTATUS[0]}
set -e
echo "fuzz: build $((built - start)) s, runs $(( $(date +%s) - built )) s (longer runs: tests/fuzz/README.md)"
exit "$rc"
