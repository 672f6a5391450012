#!/usr/bin/env bash
# Builds pshard's container images from Bazel outputs (see docs/deploy.md).
#
#   deploy/docker/build_images.sh [--registry REGISTRY] [--tag TAG]
#       [--base IMAGE] [--no-gpu] [--push]
#
# CPU images (coordinator, worker-cpu, pshardctl) come from a CPU-only build
# in its own output tree, bazel-cpu-bin/, and the GPU worker from a CUDA
# build in bazel-gpu-bin/, so that neither build, nor the default one in
# bazel-bin/, overwrites another's binary. Each image's build context is its
# output tree, and its <name>.Dockerfile.dockerignore sends only the binary
# it copies. --base replaces the Debian base image (debian:12.11-slim); on a
# host that reaches no registry, make one with make_base_image.sh. Plain
# `docker build` (no BuildKit or buildx needed) or Podman ($DOCKER=podman).
set -euo pipefail
cd "$(dirname "$0")/../.."

usage="usage: build_images.sh [--registry REGISTRY] [--tag TAG] [--base IMAGE] [--no-gpu] [--push]"
registry="pshard"
tag="0.1.0"
base=""
gpu=1
push=0
while [ $# -gt 0 ]; do
  case "$1" in
    --registry|--tag|--base)
      if [ $# -lt 2 ] || [ -z "$2" ]; then
        echo "build_images: $1 needs a value; $usage" >&2; exit 2
      fi
      case "$1" in
        --registry) registry="$2" ;;
        --tag) tag="$2" ;;
        --base) base="$2" ;;
      esac
      shift 2 ;;
    --no-gpu) gpu=0; shift ;;
    --push) push=1; shift ;;
    -h|--help) echo "$usage"; exit 0 ;;
    *) echo "build_images: unknown argument $1; $usage" >&2; exit 2 ;;
  esac
done
docker="${DOCKER:-docker}"
build_args=()
if [ -n "$base" ]; then build_args+=(--build-arg "BASE_IMAGE=$base"); fi
# The classic builder: BuildKit needs the buildx plugin, which Debian's
# docker.io does not ship. Podman ignores the variable.
export DOCKER_BUILDKIT=0

bazel build -c opt --config=cpu_only --platform_suffix=cpu --symlink_prefix=bazel-cpu- \
  //server:pshard-coordinator //worker:pshard-worker //cli:pshardctl
images=()
# build_image NAME OUTPUT_TREE BINARY: the context holds the one binary the
# Dockerfile copies, at its path in the output tree (the classic builder and
# Podman do not read <name>.Dockerfile.dockerignore, BuildKit's).
build_image() {
  local context
  context=$(mktemp -d)
  mkdir -p "$context/$(dirname "$3")"
  cp "$2/$3" "$context/$3"
  "$docker" build -q "${build_args[@]}" -f "deploy/docker/$1.Dockerfile" \
    -t "$registry/$1:$tag" "$context" >&2
  rm -rf "$context"
  images+=("$registry/$1:$tag")
}
build_image coordinator bazel-cpu-bin server/pshard-coordinator
build_image worker-cpu bazel-cpu-bin worker/pshard-worker
build_image pshardctl bazel-cpu-bin cli/pshardctl

if [ "$gpu" = 1 ]; then
  bazel build -c opt --platform_suffix=gpu --symlink_prefix=bazel-gpu- //worker:pshard-worker
  build_image worker-gpu bazel-gpu-bin worker/pshard-worker
fi

if [ "$push" = 1 ]; then
  for image in "${images[@]}"; do "$docker" push "$image"; done
fi
printf '%s\n' "${images[@]}"
