#!/usr/bin/env bash
# Every C++ test, then the Python tests that load libpshard, built with
# AddressSanitizer and UndefinedBehaviorSanitizer (--config=asan in .bazelrc:
# pshard's own code instrumented, the Debian libraries not; CPU-only; its own
# output tree, so the normal build stays cached). Not part of CI: it is a
# second full build. Extra arguments go to both bazel commands.
set -euo pipefail
cd "$(dirname "$0")/.."

status=0
bazel test --config=asan --keep_going "$@" \
  -- $(bazel query 'kind(cc_test, tests(//...))' 2>/dev/null) || status=$?

# Python is not instrumented: the sanitizer runtime (and the C++ runtime,
# whose exceptions it intercepts) must be loaded before libpshard, and
# Python's own allocations are not ours to check for leaks.
preload="$(realpath "$(gcc -print-file-name=libasan.so)") $(realpath "$(gcc -print-file-name=libstdc++.so.6)")"
bazel test --config=asan --keep_going "$@" \
  "--test_env=LD_PRELOAD=${preload}" \
  --test_env=ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:allocator_may_return_null=1 \
  -- $(bazel query 'kind(sh_test, tests(//python/... + //examples/...))' 2>/dev/null) \
  || status=$?
exit "$status"
