#!/bin/bash
# The benchmark driver at a tiny size: every section (limits, step time and
# bytes on the wire, optimizer kernels, end to end) runs, and every run
# completes (the driver exits non-zero otherwise). Numbers are never asserted. Runs from the runfiles
# root, where the driver finds the binaries.
set -euo pipefail
exec /usr/bin/python3 bench/run_benchmarks.py --quick \
  --out "${TEST_TMPDIR:-/tmp}/bench"
