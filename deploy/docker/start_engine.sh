#!/usr/bin/env bash
# Makes a container engine answer on this machine, for the container
# end-to-end test (container_e2e_test.py): installs Debian's docker.io and
# debootstrap where missing and starts dockerd when none is running. The
# daemon gets no bridge network and leaves iptables alone: the test's
# containers all use --network host and listen on 127.0.0.1 only.
#
# Exits 0 when `docker info` answers, 1 (saying why) when no engine could be
# started here, e.g. without the privileges dockerd needs.
set -euo pipefail

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
missing=()
for p in docker.io debootstrap; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "start_engine: installing ${missing[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

if docker info >/dev/null 2>&1; then exit 0; fi
log=$(mktemp /tmp/dockerd.XXXXXX.log)
echo "start_engine: starting dockerd (log $log)" >&2
$SUDO nohup dockerd --bridge=none --iptables=false >"$log" 2>&1 &
for _ in $(seq 1 60); do
  if docker info >/dev/null 2>&1; then exit 0; fi
  if ! kill -0 $! 2>/dev/null; then break; fi
  sleep 0.5
done
echo "start_engine: no container engine answers; dockerd said:" >&2
tail -5 "$log" >&2
exit 1
