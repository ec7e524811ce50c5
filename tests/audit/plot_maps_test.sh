#!/usr/bin/env bash
# plot_maps_test.sh FILE.h5: run audit/plot_maps.py on FILE.h5 into a temp
# dir and check that it wrote 3 non-empty PNGs (_dw, _dx_tiles, _hist) per
# entry (1 for a normgate-case/1 file, @entries for a normgate-maps/1 file)
# and nothing else.
# Exit 0 pass, 1 fail, 77 skip (python3 lacks h5py or matplotlib).
# PYTHON=/path/to/python overrides the interpreter (default python3).
set -u

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
script="$here/../../audit/plot_maps.py"
py=${PYTHON:-}
if [ -z "$py" ]; then  # the first interpreter that has the modules (Debian's, when pyenv shadows it)
  for c in python3 /usr/bin/python3; do
    if "$c" -c 'import h5py, matplotlib, numpy' >/dev/null 2>&1; then py=$c; break; fi
  done
  py=${py:-python3}
fi

if [ $# -ne 1 ]; then
  echo "usage: $0 FILE.h5" >&2
  exit 1
fi
file=$1

if ! "$py" -c 'import h5py, matplotlib, numpy' >/dev/null 2>&1; then
  echo "SKIP: $py cannot import h5py, matplotlib and numpy (pip install h5py matplotlib numpy)"
  exit 77
fi
if [ ! -f "$file" ]; then
  echo "FAIL: $file: no such file" >&2
  exit 1
fi

# Expected entry count, from the file itself.
entries=$("$py" - "$file" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    s = f.attrs.get("schema", b"")
    s = s.decode() if isinstance(s, bytes) else str(s)
    print(1 if s == "normgate-case/1" else int(f.attrs["entries"]) if s == "normgate-maps/1" else -1)
EOF
) || { echo "FAIL: cannot read the schema of $file" >&2; exit 1; }
if [ "$entries" -lt 0 ]; then
  echo "FAIL: $file is neither normgate-case/1 nor normgate-maps/1" >&2
  exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/plot_maps_test.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
out=$tmp/png
log=$tmp/log

if ! "$py" "$script" "$file" -o "$out" --dpi 60 >"$log" 2>&1; then
  echo "FAIL: plot_maps.py exited non-zero on $file:" >&2
  cat "$log" >&2
  exit 1
fi
printed=$(grep -c '^wrote ' "$log")

fail=0
want=$((3 * entries))
got=$(find "$out" -mindepth 1 | wc -l)
if [ "$got" -ne "$want" ]; then
  echo "FAIL: $got files in the output dir, want $want (3 per entry, no temp files left)" >&2
  ls -la "$out" >&2
  fail=1
fi
if [ "$printed" -ne "$want" ]; then
  echo "FAIL: printed $printed 'wrote' lines, want $want" >&2
  fail=1
fi
png_magic='89504e470d0a1a0a'
for ((i = 0; i < entries; i++)); do
  key=$(printf '%04d' "$i")
  for kind in dw dx_tiles hist; do
    set -- "$out/${key}_"*"_${kind}.png"
    if [ $# -ne 1 ] || [ ! -f "$1" ]; then
      echo "FAIL: entry $key: no single ${key}_*_${kind}.png" >&2
      fail=1
      continue
    fi
    if [ ! -s "$1" ]; then
      echo "FAIL: $(basename "$1") is empty" >&2
      fail=1
      continue
    fi
    magic=$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')
    if [ "$magic" != "$png_magic" ]; then
      echo "FAIL: $(basename "$1") is not a PNG (starts with $magic)" >&2
      fail=1
    fi
  done
done

if [ "$fail" -eq 0 ]; then
  echo "PASS: $want PNGs for $entries entr$([ "$entries" -eq 1 ] && echo y || echo ies) of $file"
fi
exit "$fail"
