#!/usr/bin/env bash
# Written at the end of session 9: the peers call (issue 8) with QuACK, on
# nvidia-h200-x2, as the THIRD warm call of a session whose calls 1 and 2
# carried .whlparts/...part00 and ...part01 (QuACK's CuTe DSL runtime, 92 MB,
# travels in three parts: one call's carry is at most 64 MiB with the tree).
# Carry for this call: [".whlparts/nvidia_cutlass_dsl_libs_cu12-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl.part02",
#   ".whlparts/nvidia_cutlass_dsl_libs_cu12-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl.sha256",
#   ".whl", "build/capi/libnormgate_capi.so"]
# Steps:
#   1. the Python module's tests on the GPU (issue 8: pass on the H200),
#   2. scripts/peers.sh: assembles the wheel parts (sha256 checked), installs
#      the wheels, then two shards on the two GPUs: plain BF16 weight at
#      T = 65537 and 131072, H = 2048/4096/6144, 5 seeds of `normal`, every
#      peer (QuACK for the first time, if it imports).
# Prediction: QuACK imports (its missing module was cutlass.cutlass_dsl,
# which the assembled libs wheel carries); ~2-3 min per workload with 5 seeds
# (session 6 call 7: 63-152 s with 2 seeds), so about 3 workloads per shard.
# Run: bash docs/results/h200-2026-11-30-s9/next-call3.sh     (pack: $OUT/call3.tgz, $OUT/peers.tgz)
export PATH=/usr/local/cuda/bin:$PATH
P=$OUT/p; mkdir -p $P
export NORMGATE_LIB=$PWD/build/capi/libnormgate_capi.so
timeout 120 python3 -m pytest -q python/tests >$P/pytest.txt 2>&1
echo "pytest rc=$?" >>$P/pytest.txt
NORMGATE_BUILD=build NG_PEERS_TIMEOUT=$(( 560 - SECONDS )) \
  NG_PEERS_ARGS="--forms plain --w bf16 --seeds 5 --deadline-s $(( 400 - SECONDS ))" \
  NG_PEERS_SHARDS="--H 2048,6144 --T 65537|--H 4096 --T 65537,131072" scripts/peers.sh >$P/peers.txt 2>&1
tar czf $OUT/call3.tgz -C $OUT p
echo "== pytest"; tail -3 $P/pytest.txt
echo "== peers"; tail -30 $P/peers.txt
