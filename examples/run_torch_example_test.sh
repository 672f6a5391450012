#!/bin/bash
# Runs examples/torch_examples_test.py with Debian's Python (/usr/bin/python3,
# where python3-torch is), the pshard package importable from runfiles.
set -euo pipefail
root="${TEST_SRCDIR}/${TEST_WORKSPACE}"
export PYTHONPATH="${root}/python"
exec /usr/bin/python3 "${root}/examples/torch_examples_test.py" "$@"
