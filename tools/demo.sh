#!/usr/bin/env bash
# The README's first command: installs what is missing, builds pshardctl
# (which carries the coordinator and worker binaries) and runs the local
# cluster demo: a coordinator and CPU workers on loopback training the example
# job (examples/mlp_adam_2workers.json).
# Arguments go to `pshardctl local` (e.g. a job-spec file, --workers 3).
set -euo pipefail
cd "$(dirname "$0")/.."

tools/setup.sh
exec bazel run //cli:pshardctl -- local "$@"
