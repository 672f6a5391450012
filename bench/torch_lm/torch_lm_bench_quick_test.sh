#!/bin/bash
# bench/torch_lm at a tiny size: every mode (pshard in fp32 and bf16, DDP +
# ZeRO, DDP)
# run on 2 ranks and complete (the driver exits non-zero otherwise). Numbers
# are never asserted. Runs from the runfiles root, where the driver finds the
# example's model and the pshard package (with libpshard.so).
set -euo pipefail
exec /usr/bin/python3 bench/torch_lm/torch_lm_bench.py --quick \
  --json-out "${TEST_TMPDIR:-/tmp}/torch_lm_bench.json"
