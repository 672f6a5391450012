#!/bin/bash
# Installs the Python package `pshard` for Debian's /usr/bin/python3, offline:
# builds libpshard.so and copies it beside the package into a site directory.
#   tools/install_python.sh [SITE_DIR]
# SITE_DIR defaults to the user site directory of /usr/bin/python3. The
# package finds the library beside itself (or at $PSHARD_LIBRARY).
set -euo pipefail
cd "$(dirname "$0")/.."
site="${1:-$(/usr/bin/python3 -c 'import site; print(site.getusersitepackages())')}"
bazel build //worker/api:libpshard.so
mkdir -p "${site}/pshard"
install -m 0644 python/pshard/__init__.py python/pshard/_capi.py \
  python/pshard/torch.py "${site}/pshard/"
install -m 0755 bazel-bin/worker/api/libpshard.so "${site}/pshard/"
echo "pshard installed in ${site}/pshard"
