#!/usr/bin/env bash
# Makes a Debian 12 base image for pshard's CPU images on a host that can
# reach Debian's package archive but no container registry: debootstrap
# (minbase) with every runtime package the CPU Dockerfiles install, then
# `docker import`. Images built FROM it (build_images.sh --base) find their
# packages installed and do not run apt, so no container needs a network.
#
#   deploy/docker/make_base_image.sh [--tag TAG] [--mirror URL] [--suite SUITE]
#
# Needs root (debootstrap) and a container engine ($DOCKER, default docker;
# podman works). Prints the image's tag.
set -euo pipefail
cd "$(dirname "$0")/../.."

tag="pshard/debian-base:12"
mirror="http://deb.debian.org/debian"
suite="bookworm"
usage="usage: make_base_image.sh [--tag TAG] [--mirror URL] [--suite SUITE]"
while [ $# -gt 0 ]; do
  case "$1" in
    --tag|--mirror|--suite)
      if [ $# -lt 2 ] || [ -z "$2" ]; then
        echo "make_base_image: $1 needs a value; $usage" >&2; exit 2
      fi
      case "$1" in
        --tag) tag="$2" ;;
        --mirror) mirror="$2" ;;
        --suite) suite="$2" ;;
      esac
      shift 2 ;;
    -h|--help) echo "$usage"; exit 0 ;;
    *) echo "make_base_image: unknown argument $1; $usage" >&2; exit 2 ;;
  esac
done
docker="${DOCKER:-docker}"
if [ "$(id -u)" != 0 ]; then
  echo "make_base_image: debootstrap needs root" >&2; exit 1
fi
for tool in debootstrap "$docker" python3; do
  if ! command -v "$tool" >/dev/null; then
    echo "make_base_image: $tool is not installed (apt-get install debootstrap docker.io)" >&2
    exit 1
  fi
done

packages=$(python3 deploy/docker/dockerfiles.py --cpu_packages)
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase --include="${packages// /,}" \
  "$suite" "$root" "$mirror" >&2
# What an image does not need: downloaded .debs, package lists, docs.
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
  "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/locale/*
tar --numeric-owner -C "$root" -c . | "$docker" import - "$tag" >&2
echo "$tag"
