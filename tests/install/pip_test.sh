#!/usr/bin/env bash
# `pip install SOURCE_DIR` into a fresh virtual environment (pyproject.toml,
# scikit-build-core over the CMake build; CPU half: NORMGATE_CUDA=OFF), then,
# from a folder outside the source tree, as a user would:
#   - normgate.__version__ is the CMake project version, read from the
#     installed package (not from a source tree);
#   - the library loaded is the one installed inside the package, even with
#     NORMGATE_LIB pointing elsewhere, and it loads the route table installed
#     beside it (share/normgate/routes/sm90a.toml);
#   - the `normgate` command is on the environment's PATH and runs the
#     packaged CLI (`normgate --version`, `normgate variants`);
#   - the package is a CMake prefix: find_package(normgate) builds and runs
#     tests/install/consumer against it.
# Builds the package from scratch (~60 objects; --no-cache-dir: never a wheel
# cached by an earlier run): about 360 s of CPU time, so about 3 minutes on 2
# idle cores; ctest label "pip". Needs python3 with venv and pip, and PyPI for the build
# requirements (scikit-build-core); skips (77) without venv or without PyPI.
# Usage: pip_test.sh SOURCE_DIR VERSION GENERATOR C_COMPILER
set -euo pipefail
[ $# -eq 4 ] || { echo "usage: $0 SOURCE_DIR VERSION GENERATOR C_COMPILER" >&2; exit 2; }
src=$1 version=$2 gen=$3 cc=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tmp=$(realpath "$tmp")
fail() { echo "FAIL: $*" >&2; exit 1; }

python3 -m venv "$tmp/venv" >/dev/null 2>&1 || { echo "skipped: python3 cannot make a venv (python3-venv)"; exit 77; }
py=$tmp/venv/bin/python
start=$SECONDS
"$py" -m pip install --disable-pip-version-check --no-cache-dir -q "$src" -C cmake.define.NORMGATE_CUDA=OFF \
  >"$tmp/pip.log" 2>&1 || {
  tail -60 "$tmp/pip.log"
  # PyPI out of reach is not this package's failure: say so and skip.
  if grep -qE "No matching distribution found for scikit-build-core|Failed to establish a new connection|Temporary failure in name resolution" "$tmp/pip.log"; then
    echo "skipped: pip could not fetch the build requirements (scikit-build-core) from PyPI"; exit 77
  fi
  fail "pip install $src"; }
echo "ok: pip install (CPU half) in $((SECONDS - start)) s"

cd "$tmp"   # not the source tree: `import normgate` must find the installed package
pkg=$("$py" -c "import os, normgate; print(os.path.dirname(normgate.__file__))")
case "$pkg" in "$tmp/venv/"*) ;; *) fail "imported normgate from $pkg, not the environment";; esac
for f in lib/libnormgate_capi.so bin/normgate bin/plot_maps.py include/normgate/capi.h \
         share/normgate/routes/sm90a.toml share/normgate/routes/sm90a.approvals.json \
         share/normgate/routes/sm90a.rejections.json \
         share/normgate/routes/sm90a@nvidia-h100-80gb-hbm3.toml \
         share/normgate/routes/sm90a.policy.toml share/normgate/routes/sm90a-ci.toml \
         lib/cmake/normgate/normgateConfig.cmake _build_info.py; do
  [ -f "$pkg/$f" ] || fail "not in the package: $f"
done
[ ! -e "$pkg/tests" ] && [ ! -e "$pkg/conftest.py" ] || fail "python/tests in the package"

out=$(NORMGATE_LIB=/nonexistent/libnormgate_capi.so "$py" -c "
import normgate
from normgate import _version
print('version', normgate.__version__)
print('installed', _version.installed, 'cuda', _version.built_with_cuda)
print('library', normgate.library_path())
print('lib', normgate.version())
print('device', normgate.device_available())
r = normgate.route_for('bwd', 2048, 1000, 'bf16', deterministic=True)
print('table', r['table'])
print('variant', r['variant'])
") || fail "python: $out"
echo "$out"
grep -qx "version $version" <<<"$out" || fail "__version__ is not $version"
grep -qx "installed True cuda False" <<<"$out" || fail "_build_info.py: not installed, or CUDA claimed for a CPU build"
grep -qx "library $pkg/lib/libnormgate_capi.so" <<<"$out" || fail "not the packaged library (NORMGATE_LIB must not win)"
grep -qx "lib normgate $version (.*)" <<<"$out" || fail "ng_version is not $version"
grep -qx "device False" <<<"$out" || fail "a CPU build claims a device"
grep -qx "table $pkg/share/normgate/routes/sm90a.toml" <<<"$out" || fail "the packaged library did not load its route table"
grep -qx "variant bwd_[a-z0-9_]*" <<<"$out" || fail "no backward variant routed"
echo "ok: import normgate: version, packaged library, its route table"

cli=$tmp/venv/bin/normgate
[ -x "$cli" ] || fail "no normgate command in $tmp/venv/bin"
cv=$(PATH="$tmp/venv/bin:/usr/bin:/bin" normgate --version) || fail "normgate --version: $cv"
grep -q "^$version .*CPU half: built without CUDA" <<<"$cv" || fail "normgate --version says '$cv', not $version, CPU half"
vs=$("$cli" variants) || fail "normgate variants: $vs"
grep -q "bwd_det_chunked" <<<"$vs" || fail "normgate variants lists no bwd_det_chunked: $vs"
rc=0; "$cli" no-such-subcommand >/dev/null 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "normgate no-such-subcommand exited $rc, not 2 (the CLI's usage error through the launcher)"
echo "ok: normgate command ($cv; variants; usage error exit 2)"

cmake -S "$src/tests/install/consumer" -B "$tmp/c" -G "$gen" -DCMAKE_C_COMPILER="$cc" \
      -DCMAKE_PREFIX_PATH="$pkg" >"$tmp/c.log" 2>&1 || { cat "$tmp/c.log"; fail "consumer configure on the package"; }
cmake --build "$tmp/c" >"$tmp/cb.log" 2>&1 || { cat "$tmp/cb.log"; fail "consumer build"; }
cout=$(env -u NORMGATE_ROUTES "$tmp/c/consumer") || fail "consumer: $cout"
grep -qx "table $pkg/share/normgate/routes/sm90a.toml" <<<"$cout" || fail "consumer: $cout"
echo "ok: find_package(normgate) on the installed package"
echo "pip: 4 passed, 0 failed"
