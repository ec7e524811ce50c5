#!/usr/bin/env bash
# `cmake --install` of a build tree into a scratch prefix, then a project
# outside normgate (tests/install/consumer) finds it with find_package and
# uses it: the files are where capi.h, cmake/install.cmake and the README
# say; normgate::capi links and runs; the installed library loads the route
# table installed beside it by itself; normgate::plugin_abi and
# normgate_plugin_sha256 are there for plugins; the version file refuses another
# minor version; the imported normgate::cli runs. CPU only; a few seconds.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR VERSION GENERATOR C_COMPILER
set -euo pipefail
[ $# -eq 5 ] || { echo "usage: $0 BUILD_DIR SOURCE_DIR VERSION GENERATOR C_COMPILER" >&2; exit 2; }
build=$1 src=$2 version=$3 gen=$4 cc=$5
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$(realpath "$tmp")/prefix
fail() { echo "FAIL: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; fail "cmake --install"; }
for f in bin/normgate bin/plot_maps.py lib/libnormgate_capi.so include/normgate/capi.h \
         lib/cmake/normgate/normgateConfig.cmake lib/cmake/normgate/normgateConfigVersion.cmake \
         lib/cmake/normgate/normgateTargets.cmake lib/cmake/normgate/NormgatePlugin.cmake \
         include/normgate/plugin.h \
         share/normgate/routes/sm90a.toml share/normgate/routes/sm90a.approvals.json \
         share/normgate/routes/sm90a.rejections.json \
         share/normgate/routes/sm90a@nvidia-h100-80gb-hbm3.toml \
         share/normgate/routes/sm90a.policy.toml share/normgate/routes/sm90a-ci.toml \
         share/normgate/routes/sm90a-ci.policy.toml; do
  [ -f "$prefix/$f" ] || fail "not installed: $f"
done
echo "ok: installed files"

consumer() {  # consumer BUILD_DIR [cmake args]
  local dir=$1; shift
  cmake -S "$src/tests/install/consumer" -B "$dir" -G "$gen" -DCMAKE_C_COMPILER="$cc" \
        -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release "$@"
}
major_minor=${version%.*}
consumer "$tmp/c" -DNG_WANT_VERSION="$major_minor" >"$tmp/c.log" 2>&1 || { cat "$tmp/c.log"; fail "consumer configure"; }
grep -q "consumer: normgate $version routes=$prefix/share/normgate/routes cuda=" "$tmp/c.log" ||
  { cat "$tmp/c.log"; fail "find_package(normgate): version or normgate_ROUTES_DIR"; }
# normgate_plugin_sha256 from the package: the hash of the manifest line, as sha256sum computes it
want=$(cd "$src/tests/install/consumer" && sha256sum consumer.c | sha256sum | cut -d' ' -f1)
grep -q "consumer: consumer.c sha256=$want" "$tmp/c.log" || { cat "$tmp/c.log"; fail "normgate_plugin_sha256 != $want"; }
cmake --build "$tmp/c" >"$tmp/cb.log" 2>&1 || { cat "$tmp/cb.log"; fail "consumer build"; }
out=$(env -u NORMGATE_ROUTES -u NORMGATE_DISPATCH "$tmp/c/consumer") || fail "consumer run: $out"
echo "$out"
grep -qx "version normgate $version (.*)" <<<"$out" || fail "ng_version is not normgate $version"
# sm90a.toml, or on a GPU with a table of its own its sm90a@SLUG.toml (capi.h)
grep -qxE "table $prefix/share/normgate/routes/sm90a(@[a-z0-9-]+)?\.toml" <<<"$out" ||
  fail "the installed library did not load the table installed beside it ($prefix/share/normgate/routes/sm90a.toml)"
grep -qx "variant bwd_[a-z0-9_]*" <<<"$out" || fail "no backward variant routed"
echo "ok: find_package(normgate $major_minor), normgate::capi links and finds its route table"

# SameMinorVersion: 0.x may change the C ABI between minor versions, so an
# older minor is refused too (AnyNewerVersion or SameMajorVersion would take it).
minor=${major_minor#*.}
if [ "$minor" -gt 0 ]; then other="${major_minor%.*}.$((minor - 1))"; else other="${major_minor%.*}.$((minor + 1))"; fi
if consumer "$tmp/r" -DNG_WANT_VERSION="$other" >"$tmp/r.log" 2>&1; then
  cat "$tmp/r.log"; fail "find_package(normgate $other) accepted version $version"
fi
grep -q "normgate" "$tmp/r.log" && grep -q "$other" "$tmp/r.log" || { cat "$tmp/r.log"; fail "refusal does not name the version"; }
echo "ok: find_package(normgate $other) refused"

cli=$(cat "$tmp/c/cli_path.txt")
[ "$cli" = "$prefix/bin/normgate" ] || fail "normgate::cli is $cli, not $prefix/bin/normgate"
cv=$("$cli" --version) || fail "$cli --version"
grep -q "^$version " <<<"$cv" || fail "normgate --version says '$cv', not $version"
echo "ok: normgate::cli runs ($cv)"
echo "install: 4 passed, 0 failed"
