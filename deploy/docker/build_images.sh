#!/usr/bin/env bash
# Builds pshard's container images from Bazel outputs (see docs/deploy.md).
#
#   deploy/docker/build_images.sh [--registry REGISTRY] [--tag TAG] [--no-gpu] [--push]
#
# CPU images (coordinator, worker-cpu, pshardctl) come from a CPU-only build
# in bazel-bin/; the GPU worker from a CUDA build in its own output tree,
# bazel-gpu-bin/, so that neither build overwrites the other's binary. Each
# image's build context is the output tree, and its
# <name>.Dockerfile.dockerignore sends only the binary it copies.
set -euo pipefail
cd "$(dirname "$0")/../.."

registry="pshard"
tag="0.1.0"
gpu=1
push=0
while [ $# -gt 0 ]; do
  case "$1" in
    --registry) registry="$2"; shift 2 ;;
    --tag) tag="$2"; shift 2 ;;
    --no-gpu) gpu=0; shift ;;
    --push) push=1; shift ;;
    *) echo "build_images: unknown argument $1" >&2; exit 2 ;;
  esac
done
docker="${DOCKER:-docker}"

bazel build -c opt --config=cpu_only \
  //server:pshard-coordinator //worker:pshard-worker //cli:pshardctl
images=()
for name in coordinator worker-cpu pshardctl; do
  DOCKER_BUILDKIT=1 "$docker" build -f "deploy/docker/$name.Dockerfile" \
    -t "$registry/$name:$tag" bazel-bin/
  images+=("$registry/$name:$tag")
done

if [ "$gpu" = 1 ]; then
  bazel build -c opt --platform_suffix=gpu --symlink_prefix=bazel-gpu- //worker:pshard-worker
  DOCKER_BUILDKIT=1 "$docker" build -f deploy/docker/worker-gpu.Dockerfile \
    -t "$registry/worker-gpu:$tag" bazel-gpu-bin/
  images+=("$registry/worker-gpu:$tag")
fi

if [ "$push" = 1 ]; then
  for image in "${images[@]}"; do "$docker" push "$image"; done
fi
printf '%s\n' "${images[@]}"
