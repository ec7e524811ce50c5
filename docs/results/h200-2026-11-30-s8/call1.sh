#!/usr/bin/env bash
# Session 8, call 1 (nvidia-h200), carry ["build/dev","build/nd"]: the binary64
# rstd kernels on the GPU (tests + sanitizer), their cost (A = build/nd, the
# pre-fix kernels of 03a6643; B = build/dev), the two-pass forward experiment,
# validation on the 16-core host, and the gate's GPU half after the rework.
export PATH=/usr/local/cuda/bin:$PATH
P=$OUT/p; mkdir -p $P
NORMGATE_BUILD=build/dev NG_STEPS="tests sanitize" timeout 330 scripts/h200.sh >$P/h200.txt 2>&1
S="65537,2048 65537,6144 131072,4096 262148,256"
for i in 1 2; do
  timeout 60 build/nd/kernels_bench --res --no-controls --w bf16 --json $P/A$i.json $S >$P/A$i.txt 2>&1
  timeout 60 build/dev/bench/kernels_bench --res --no-controls --w bf16 --json $P/B$i.json $S >$P/B$i.txt 2>&1
done
timeout 60 build/dev/bench/kernels_bench --fwd-exp --no-controls --w both $S >$P/exp.txt 2>&1
timeout 60 build/dev/bench/finish_bench H=4096,T=131072,w=bf16,form=plain,family=cancel,seed=0 bwd_det_chunked 2 16 >$P/finish.txt 2>&1
G="build/dev/apps/normgate gate routes/sm90a.toml --dense-points 0 --fresh-factor 0 --t-per-window 2 --seeds cancel:0..1"
timeout 90 $G --windows "op=bwd,mode=det,H=4096,w=bf16,form=plain,T=65537..131072" --quiet --report-md $P/gate4096.md >$P/gate4096.log 2>&1
tar czf $OUT/call1.tgz -C $OUT p
echo "== tests"; tail -22 $P/h200.txt
echo "== finish"; tail -4 $P/finish.txt
echo "== exp"; grep -E "experiment|fwd_rowwise" $P/exp.txt
echo "== gate"; grep -h "^pipeline\|verdict" $P/gate*.log
echo "== A/B"; python3 scripts/ab_table.py $P/A1.json $P/B1.json $P/A2.json $P/B2.json
