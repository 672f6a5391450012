#!/bin/bash
# Runs a test script of python/tests with Debian's Python (/usr/bin/python3,
# where python3-torch is installed), the package importable from runfiles.
#   run_python_test.sh SCRIPT [ARGS...]
set -euo pipefail
root="${TEST_SRCDIR}/${TEST_WORKSPACE}"
export PYTHONPATH="${root}/python:${root}/python/tests"
exec /usr/bin/python3 "${root}/python/tests/$1" "${@:2}"
