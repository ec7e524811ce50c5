#!/usr/bin/env bash
# Written at the end of session 8, for the next session's first call
# (nvidia-h200-x2; carry ["build/dev"] after scripts/build && scripts/stage_carry):
#   1. the GPU tests and the sanitizer on the merged host-side changes (host
#      vector pool: BwdEdge.KeptHostBuffersGiveTheSameBits; the ring across
#      rows: Pipeline.RingCrossRowSmall under memcheck and racecheck),
#   2. the gate's two halves after them (session 6 call 8's command; session 8
#      call 1 measured 12.9 s: GPU half 9.7 s, oracle half 9.5 s; predicted
#      GPU half ~5.3 s), default copy threads and NORMGATE_COPY_THREADS=4,
#   3. finish_bench at 16 threads (predicted total 1.2-1.45 s, was 1.52;
#      validation cores busy >= 14, was 11.5),
#   4. the forms campaign with what is left of the call (resumes the journals
#      in docs/results/campaign-forms/).
# Run: bash docs/results/h200-2026-11-30-s8/next-call1.sh   (pack: $OUT/call1.tgz, $OUT/campaign.tgz)
export PATH=/usr/local/cuda/bin:$PATH
P=$OUT/p; mkdir -p $P
T0=$SECONDS
NORMGATE_BUILD=build/dev NG_STEPS="tests sanitize" timeout 300 scripts/h200.sh >$P/h200.txt 2>&1
G="build/dev/apps/normgate gate routes/sm90a.toml --dense-points 0 --fresh-factor 0 --t-per-window 2 --seeds cancel:0..1 --windows op=bwd,mode=det,H=4096,w=bf16,form=plain,T=65537..131072 --quiet"
timeout 90 $G --report-md $P/gate-a.md >$P/gate-a.log 2>&1
NORMGATE_COPY_THREADS=4 timeout 90 $G --report-md $P/gate-b.md >$P/gate-b.log 2>&1
timeout 60 build/dev/bench/finish_bench H=4096,T=131072,w=bf16,form=plain,family=cancel,seed=0 bwd_det_chunked 2 16 >$P/finish.txt 2>&1
tar czf $OUT/call1.tgz -C $OUT p
left=$(( 575 - (SECONDS - T0) ))
# The campaign journals what the GPU half downloads: run it only when every
# test binary passed (the host vector pool runs on a GPU for the first time here).
# The gate's first run through the reused host vectors must report what session
# 8 call 1 reported for the same cases (calls/call1.tgz, p/gate4096.md):
want="| bwd det H=4096 w=bf16 form=plain T=65537..131072 | bwd_det_chunked | 2.94e-05 | 0.00232 | 0.366 | 2.27e-07 | 3.39e-09 / 1.93e-08 | H=4096,T=65537,w=bf16,form=plain,family=cancel,seed=1 (dx) | 6 | PASS |"
same=1
for g in a b; do grep -qxF "$want" $P/gate-$g.md 2>/dev/null || { same=0; echo "gate-$g differs from session 8 call 1" >>$P/campaign.txt; }; done
if grep -E "^test_[a-z_]+ +rc=" $P/h200.txt | grep -vq "rc=0 " || [ "$(grep -cE "^test_[a-z_]+ +rc=0 " $P/h200.txt)" -lt 7 ]; then
  echo "campaign skipped: a test binary failed or did not run (h200.txt)" >>$P/campaign.txt
elif [ $same -eq 0 ]; then
  echo "campaign skipped: the gate's report changed with the host vector pool" >>$P/campaign.txt
elif [ $left -gt 120 ]; then
  NORMGATE_BUILD=build/dev NG_CAMPAIGN_DEADLINE=$left NG_CAMPAIGN_APPROVE=1 scripts/campaign.sh docs/results/campaign-forms \
    "form=res" "form=heads24|heads4" >$P/campaign.txt 2>&1
fi
echo "== tests"; grep -E "rc=|sanitizer:" $P/h200.txt | tail -12
echo "== gate (default, then 4 copy threads)"; grep -h "^pipeline" $P/gate-a.log $P/gate-b.log
echo "== finish"; tail -4 $P/finish.txt
echo "== campaign"; tail -8 $P/campaign.txt 2>/dev/null
