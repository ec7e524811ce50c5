#!/usr/bin/env bash
# Prepared at the end of session 19 (not yet run): the first measurements of
# the fast-kernel work, from issue 8's findings (docs/perf.md, session 19,
# "Next"). One device call on `nvidia-h200`, steps chosen with NG_STEPS:
#   detnd   deterministic=False vs True on the four rows where it was
#           reproducibly slower ([131072, 5120] fp32 res; [98304, 6144]
#           bf16/fp32 res; [131072, 256] fp32 heads24): peers eager only (no
#           compile), bwd and 2xfwd+bwd, 1005 replays over 9 rounds, 1 seed
#           (their accuracy is known). Prediction: det/ours and det#2/ours#2
#           again 0.95-0.97x on the 2xfwd+bwd rows; if the A/A pairs agree,
#           route nondet to bwd_det_chunked there. 390 s.
#   cancel  every peer's accuracy on the cancellation-heavy family at four
#           T=4097 rows (plain, H 2048/4096, bf16/fp32 weights; 5 seeds): the
#           matrix checked `normal` only. Prediction: TC/TCd/eager dw far over
#           budget (the guide: ~1e5), ours within it. 180 s.
# Carry: ["build/capi/libnormgate_capi.so", ".whl"] (.whl: Liger 0.8.5's
#   wheel; scripts/build first in a new checkout).
# Output: $OUT/next-s20.tgz: per step and set, <step>-<k>.txt (peers.sh's
#   output) and <step>-<k>/peers.tgz (peers/peers.json, peers.md, peers.log); file the JSONs under docs/results/ (not in peers-h200/run-*.json:
#   other replays/rounds/family, so --done and --merge of the matrix must not
#   see them).
# Usage: NG_STEPS="detnd cancel" bash docs/results/h200-2026-12-01-s19/next-s20.sh
set -uo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
final="${OUT:-$root/out}"
steps="${NG_STEPS:-detnd cancel}"
t0=$SECONDS
for step in $steps; do
  case "$step" in
    detnd)
      sets=("--forms res --H 5120 --T 131072 --w fp32"
            "--forms res --H 6144 --T 98304 --w bf16,fp32"
            "--forms heads24 --T 131072 --w fp32")
      secs=(110 170 110)  # ~60-70 s a row: 5 x 1005 replays of ~2-5.5 ms per op, setup, 1 seed's oracle
      common="--peers eager --ops bwd,2xfwd+bwd --replays 1005 --rounds 9 --seeds 1";;
    cancel)
      sets=("--forms plain --H 2048,4096 --T 4097 --w bf16,fp32")
      secs=(180)  # 4 small rows; TC's compiles warmed side by side
      common="--peers eager,TC,TCd,F.rms_norm,Liger --family cancel --seeds 5";;
    *) echo "next-s20: unknown step '$step' (known: detnd cancel)" >&2; exit 2;;
  esac
  k=0
  for s in "${sets[@]}"; do
    k=$((k + 1))
    left=$(( 590 - (SECONDS - t0) ))
    t=$(( secs[k - 1] < left ? secs[k - 1] : left ))
    [ "$t" -lt 60 ] && { echo "next-s20: $step $k: ${left}s left, not started"; continue; }
    OUT="$final/$step-$k" NG_PEERS_TIMEOUT=$t NG_PEERS_ARGS="$common $s" bash "$root/scripts/peers.sh" \
      >"$final/$step-$k.txt" 2>&1
    echo "== $step $k ($s): rc $?, $(( SECONDS - t0 )) s"
    grep -E "^\| \[" "$final/$step-$k.txt" | head -8
  done
done
# One file back (the device returns at most 8): every step's log and peers.tgz.
(cd "$final" && tar -czf next-s20.tgz --remove-files $(ls -d -- */ *.txt 2>/dev/null | grep -v '^next-s20'))
