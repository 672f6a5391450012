#!/usr/bin/env bash
# Installs the pinned npm packages that deploy/k8s/validate/validate.mjs needs
# (kubernetes-models, yaml) into deploy/k8s/validate/node_modules, exactly as
# package-lock.json pins them. Idempotent: when the installed tree matches the
# lock file it only compares a checksum and exits. Needs node and npm, and
# the npm registry on the first run.
set -euo pipefail
dir="$(cd "$(dirname "$0")/../k8s/validate" && pwd)"
stamp="$dir/node_modules/.pshard-lock.sha256"

for tool in node npm; do
  if ! command -v "$tool" >/dev/null; then
    echo "setup_validator: $tool is not installed" >&2
    exit 1
  fi
done

want="$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi

echo "setup_validator: installing the packages of $dir/package-lock.json" >&2
# npm ci installs exactly the lock file's versions (and fails if package.json
# and the lock disagree). --ignore-scripts: no package needs an install step.
(cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
echo "$want" >"$stamp"
