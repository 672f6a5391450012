#!/usr/bin/env bash
# Installs every Debian package pshard needs to build, test and benchmark.
# Idempotent: when everything is present it only runs dpkg-query and exits.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap bazel-rules-java
  g++ pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev
  libgloo-dev libsqlite3-dev libgoogle-glog-dev libopenblas-dev libssl-dev prometheus-cpp-dev
  python3-torch python3-numpy
  python3-sklearn fortunes
  procps iproute2 python3-yaml
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Tools that this machine image usually ships outside Debian's archive; fall
# back to Debian's packages where they are missing. kubectl renders the
# Kubernetes manifests (deploy/ tests); node and npm run the offline manifest
# validator.
fallbacks=()
command -v kubectl >/dev/null || fallbacks+=(kubernetes-client)
command -v node >/dev/null || fallbacks+=(nodejs)
command -v npm >/dev/null || fallbacks+=(npm)
if [ ${#fallbacks[@]} -gt 0 ]; then
  echo "setup: installing ${fallbacks[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${fallbacks[@]}" >/dev/null
fi

# The pinned npm packages of the manifest validator (a no-op when installed).
"$(dirname "$0")/../deploy/tools/setup_validator.sh"
