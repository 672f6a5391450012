#!/usr/bin/env bash
# The README's test command: installs what is missing, builds every target
# (GPU code included where CUDA is installed) and runs every test.
# Extra arguments go to `bazel test` (e.g. --config=cpu_only).
set -euo pipefail
cd "$(dirname "$0")/.."

tools/setup.sh

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
