"""normgate against its peers on one GPU, in one process, at one accuracy budget.

Method (from the seed PR, ../shared/seed/, and docs/perf/peers.md, D1):
  * latency = median over replays of ONE CUDA-graph replay of the op, the L2
    flushed before each replay (a read of a buffer larger than twice the L2,
    outside the timed span), timed by CUDA events around the replay alone
    (the tables' numbers; --cupti adds each replay's span from CUPTI's
    graph trace beside them, which the tables do not use because the trace
    itself lengthens the events: docs/perf/peers.md, D5);
  * each implementation's own setup, reduction, cast and copy kernels are
    inside the graph, hence inside the span;
  * --replays replays per implementation and op (>= 201), split over --rounds
    interleaved rounds; the implementation order rotates between rounds;
  * A/A: a second, separately captured copy of `det` (deterministic=True) and
    of `ours` (deterministic=False) gives the noise floor of the row;
  * ratios from unrounded medians;
  * accuracy at the same budget: every implementation's outputs for the timed
    shape go through normgate's FP64 oracle and validators (dx atol = rtol =
    1e-2, dw atol 1e-4 + rtol 1e-4, y as normgate's budgets) on --seeds seeds
    of --family; SOTA = the fastest peer that is within budget on every seed.

Implementations (names as in the tables):
  det, det#2    normgate, deterministic=True (bwd_det_chunked), and its A/A copy
  ours, ours#2  normgate, deterministic=False (bwd_nondet_atomic), and its A/A copy
  eager         torch eager, explicit FP32-statistics math (y BF16, rstd/dw FP32)
  TC            torch.compile(mode="max-autotune-no-cudagraphs") of that math,
                inductor emulate_precision_casts=True
  TCd           the same, inductor default mode
  F.rms_norm    torch.nn.functional.rms_norm + autograd (no rstd output)
  Liger         Liger-Kernel rms_norm_forward/backward, casting_mode "gemma", offset 0
  Q             QuACK rmsnorm_fwd(store_rstd=True)/rmsnorm_bwd, heuristic config; per-head
                forms through its per-head path (the shared w repeated per head)

Run it as `python3 bench/peers.py ARGS` (the command every result records;
`python3 bench/peers ARGS` is the same): cli.py says what it writes and how
it exits. The modules, by job:
  matrix.py    the matrix's vocabulary: peers, ops, forms, families, case ids,
               row keys, sizes and bytes; usage errors, atomic writes
  impls.py     the implementations (normgate and each peer) over every form
  timing.py    setup (graph captures, pools), interleaved timed rounds, copy
               ceiling, CUPTI spans, NVML samples: a row's timing phase
  accuracy.py  outputs through the oracle, budgets, a row's accuracy phase
               and ratios
  report.py    the Markdown: header, summary, per-form and per-impl tables
  merge.py     --merge (runs into one table) and --done (rows measured already)
  schedule.py  --end-s: a row's predicted seconds, which rows still fit
  warmup.py    the warm-up children that compile the next rows' TC/TCd, and
               killing a child's process tree (/proc)
  cli.py       options and the row loop (main)
"""
import os
import sys

# normgate (python/) and gpu_state (bench/gpu_state.py) import as top-level modules.
_BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(_BENCH, "..", "python"))
sys.path.insert(0, _BENCH)
