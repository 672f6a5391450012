#!/usr/bin/env bash
# The README's first command: installs what is missing, builds the three
# binaries and runs the local cluster demo — a coordinator and CPU workers on
# loopback training the example job (examples/mlp_adam_2workers.json).
# Arguments go to `pshardctl local` (e.g. a job-spec file, --workers 3).
set -euo pipefail
cd "$(dirname "$0")/.."

tools/setup.sh
bazel build //cli:pshardctl //server:pshard-coordinator //worker:pshard-worker
exec bazel run //cli:pshardctl -- local "$@"
