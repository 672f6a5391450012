#!/usr/bin/env bash
# The README's test command: installs what is missing, builds every target
# in the CPU-only configuration and in the default one (GPU code included
# where CUDA is installed), and runs every test.
# Extra arguments go to both bazel commands (e.g. --keep_going).
set -euo pipefail
cd "$(dirname "$0")/.."

tools/setup.sh

# The CPU-only configuration (README: machines without CUDA) must build too;
# only the GPU targets and what links them differ, so the two builds share
# almost every action.
bazel build --config=cpu_only //... "$@"

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
bazel test //... --test_summary=short "$@" 2>&1 | tee "$log" || status=$?

# One closing line that counts passed and failed test targets, so a run that
# executed no test is visible at a glance.
passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log" || true)
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD|INCOMPLETE)' "$log" || true)
echo "bazel: ${passed} passed, ${failed} failed"
exit "$status"
