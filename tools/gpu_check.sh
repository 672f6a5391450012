#!/usr/bin/env bash
# GPU check, for a machine with an NVIDIA GPU (an H200 in our runs): builds the
# GPU code with the real nvcc, runs every GPU test with PSHARD_REQUIRE_GPU=1
# (so "no device" is a failure, never a silent skip), runs the GPU benchmark
# (optimizer-kernel bandwidth vs cudaMemcpy D2D, 1-GPU ZeRO step time), and
# prints a summary. Budget: under 8 minutes on a fresh machine.
#
#   tools/gpu_check.sh                 # CUDA at /usr/local/cuda
#   PSHARD_CUDA_PATH=/opt/cuda tools/gpu_check.sh
#   GPU_CHECK_SUMMARY=/tmp/summary.txt tools/gpu_check.sh   # also write it
#
# Exit status: 0 when every step passed (the bandwidth goal is reported, not
# enforced), 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."

start=$(date +%s)
summary=()
failed=0
note() { summary+=("$1"); echo "== $1"; }
elapsed() { echo $(( $(date +%s) - start ))s; }

tools/setup.sh || { echo "gpu_check: tools/setup.sh failed" >&2; exit 1; }

cuda_path="${PSHARD_CUDA_PATH:-/usr/local/cuda}"
if [ ! -x "$cuda_path/bin/nvcc" ]; then
  echo "gpu_check: no nvcc at $cuda_path/bin/nvcc (set PSHARD_CUDA_PATH)" >&2
  exit 1
fi
if command -v nvidia-smi >/dev/null 2>&1; then
  gpus=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || true)
  note "GPUs: ${gpus//$'\n'/; }"
else
  note "GPUs: nvidia-smi not found"
fi

# .bazelrc passes PSHARD_CUDA_PATH and PSHARD_DISABLE_CUDA from the
# environment to the repository rule (third_party/cuda_configure.bzl): a
# custom CUDA location is exported as it is, and CUDA is never disabled here.
unset PSHARD_DISABLE_CUDA
[ -n "${PSHARD_CUDA_PATH:-}" ] && export PSHARD_CUDA_PATH
flags=()

# 1. Build.
if bazel build ${flags[@]+"${flags[@]}"} //worker/gpu/... //bench/gpu/...; then
  note "build: ok ($(elapsed))"
else
  note "build: FAILED"
  printf '%s\n' "${summary[@]}"
  exit 1
fi

# 2. Tests: everything in worker/gpu plus any test tagged "gpu" elsewhere.
tagged=$(bazel query --keep_going 'attr(tags, "\bgpu\b", tests(//...))' 2>/dev/null || true)
targets=$( { echo //worker/gpu/...; echo "$tagged"; } | sort -u | grep -v '^$')
log=$(mktemp)
# shellcheck disable=SC2086
if bazel test ${flags[@]+"${flags[@]}"} --test_env=PSHARD_REQUIRE_GPU=1 \
     --test_output=errors --test_summary=short $targets 2>&1 | tee "$log"; then
  tests_ok=1
else
  tests_ok=0
  failed=1
fi
passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log" || true)
nfail=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD|INCOMPLETE)' "$log" || true)
# Count gtest cases that ran, and those skipped (multi-GPU tests on one GPU).
ran=0; skipped=0
for t in bazel-testlogs/worker/gpu/*/test.log; do
  [ -f "$t" ] || continue
  ran=$((ran + $(grep -c '^\[       OK \]' "$t" || true)))
  # Per-test lines end in "(N ms)"; gtest's closing list repeats the names.
  skipped=$((skipped + $(grep -cE '^\[  SKIPPED \] .* \([0-9]+ ms\)$' "$t" || true)))
done
# GTEST_SKIP prints "<file>:<line>: Skipped" and the reason on the next line.
skips=$(grep -h -A1 ': Skipped$' bazel-testlogs/worker/gpu/*/test.log 2>/dev/null |
        grep -v -e ': Skipped$' -e '^--$' | sort | uniq -c |
        sed 's/^ *//' | tr '\n' ';' || true)
note "tests: $passed targets passed, $nfail failed; gtest cases: $ran ok, $skipped skipped ${skips:+($skips)} ($(elapsed))"
rm -f "$log"

# 3. Benchmark.
bench_out=$(mktemp)
timeout 300 bazel-bin/bench/gpu/gpu_bench > "$bench_out" 2>&1
bench_rc=$?
cat "$bench_out"
if [ "$bench_rc" -eq 0 ]; then
  note "bench: $(grep '^SUMMARY' "$bench_out" | sed 's/^SUMMARY //') ($(elapsed))"
  while IFS= read -r line; do summary+=("  $line"); done \
    < <(grep -E 'GB/s|% of cudaMemcpy|ms/step|^device' "$bench_out")
else
  note "bench: FAILED (exit $bench_rc)"
  failed=1
fi
rm -f "$bench_out"

echo
echo "==================== gpu_check summary ===================="
printf '%s\n' "${summary[@]}"
echo "total time: $(elapsed); result: $([ $failed -eq 0 ] && echo PASS || echo FAIL)"
if [ -n "${GPU_CHECK_SUMMARY:-}" ]; then
  { printf '%s\n' "${summary[@]}"
    echo "total time: $(elapsed); result: $([ $failed -eq 0 ] && echo PASS || echo FAIL)"
  } > "$GPU_CHECK_SUMMARY"
fi
exit $failed
