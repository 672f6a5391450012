#!/bin/bash
# Runs a test script of python/tests with Debian's Python (/usr/bin/python3,
# where python3-torch is installed), the package importable from runfiles
# (and worker/optim/testdata's torch_optim.py, the torch references' Lion).
#   run_python_test.sh SCRIPT [ARGS...]
set -euo pipefail
root="${TEST_SRCDIR}/${TEST_WORKSPACE}"
export PYTHONPATH="${root}/python:${root}/python/tests:${root}/worker/optim/testdata"
exec /usr/bin/python3 "${root}/python/tests/$1" "${@:2}"
