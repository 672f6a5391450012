#!/usr/bin/env bash
# GPU check: every GPU test, the end-to-end runs of tools/gpu_e2e.sh (the
# real pshardctl, coordinator and worker on the GPU: checkpoints and resume
# of a NCCL job, the torch_lm example on CUDA tensors) and the GPU benchmark
# (optimizer-kernel bandwidth against the device's copy bandwidth in the
# same run, and the step time of a 1-GPU job) on a machine with an NVIDIA
# GPU, then a summary.
#
# The GPU machines we are lent (an H200) have the CUDA driver and toolkit but
# no Bazel, none of the Debian packages pshard builds against, and no network.
# So the check comes in two halves: build and pack where pshard builds, run
# where the GPU is.
#
#   tools/gpu_check.sh pack [DIR]      # build machine (nvcc, no GPU needed):
#                                      # build the GPU tests, gpu_bench and
#                                      # the binaries with CUDA, pack them
#                                      # and the shared libraries they need
#                                      # into DIR/pack.tar.gz (DIR:
#                                      # .gpu_check)
#   tools/gpu_check.sh run [DIR]       # GPU machine: unpack, find the CUDA
#                                      # libraries there, run every test with
#                                      # PSHARD_REQUIRE_GPU=1 (no device = a
#                                      # failure, never a silent skip), the
#                                      # end-to-end runs, then gpu_bench;
#                                      # print the summary
#   tools/gpu_check.sh dry-run [DIR]   # build machine: `run` without a GPU
#                                      # (tests skip, the end-to-end runs
#                                      # use the CPU, the benchmark reports
#                                      # "no CUDA device"), and check that the
#                                      # pack holds every library the system
#                                      # there will not have
#   tools/gpu_check.sh [all]           # a GPU machine that can build: both
#
# Through the device tool: pack in the checkout the session runs from (the
# tool sends that one), then one call with carry [".gpu_check"], timeout_s
# 600 and the command `GPU_CHECK_OUT=$OUT tools/gpu_check.sh run`. The run
# ends within GPU_CHECK_BUDGET_S (540 s) whatever hangs, and writes its two
# files under $OUT as it goes, so even a killed run returns what it did.
#
# Environment: PSHARD_CUDA_PATH (CUDA for the build; default /usr/local/cuda),
# GPU_CHECK_OUT (a folder that gets summary.txt and logs.txt, line by line
# and test by test), GPU_CHECK_SUMMARY (a file that gets the summary),
# GPU_CHECK_BUDGET_S (run's time budget in seconds; default 540).
# Exit status: 0 when every test and the benchmark passed (the bandwidth goal
# is reported, not enforced), 1 otherwise, 2 for a usage or setup error.
set -euo pipefail
cd "$(dirname "$0")/.."

readonly BENCH=//bench/gpu:gpu_bench
# The C API, for the Python package's test on CUDA tensors (PYTHON_TESTS,
# run with the GPU machine's own python3 and torch).
readonly LIBPSHARD=//worker/api:libpshard.so
readonly PYTHON_TESTS="python/tests/cuda_parity_test.py"
readonly PYTHON_TEST_FILES="python/tests/parity_common.py python/tests/precision_common.py worker/optim/testdata/torch_optim.py"
# What tools/gpu_e2e.sh runs: the binaries a user runs, the example, and a
# slice of its corpus (the GPU machine has no fortunes package).
readonly CLUSTER_BINARIES="//cli:pshardctl //server:pshard-coordinator //worker:pshard-worker"
readonly E2E_EXAMPLE_FILES="examples/torch_lm/train.py examples/torch_lm/model.py"
readonly E2E_CORPUS_FILES="/usr/share/games/fortunes/computers /usr/share/games/fortunes/science"
# Every test of worker/gpu, and any test tagged "gpu" elsewhere.
readonly TESTS_QUERY='tests(//worker/gpu/...) union attr(tags, "\bgpu\b", tests(//...))'
# Per test binary and for the benchmark (then SIGTERM; SIGKILL 10 s later,
# for a process stuck in the driver).
readonly TEST_TIMEOUT_S=180
readonly BENCH_TIMEOUT_S=240
readonly E2E_TIMEOUT_S=150
# The device call kills a command after 10 minutes and returns only its
# output's tail and what is under $OUT: `run` ends inside this budget (seconds
# from its start) however long the binaries take, the summary written. The
# end-to-end runs stop BENCH_RESERVE_S before the end, for the benchmark;
# the Python test E2E_RESERVE_S before that, for the end-to-end runs; and
# the C++ tests PYTHON_RESERVE_S before that, for the Python test (the only
# unit check of CUDA tensors in pshard.torch: one stuck binary must not
# starve it).
readonly BUDGET_S=${GPU_CHECK_BUDGET_S:-540}
readonly BENCH_RESERVE_S=150
readonly E2E_RESERVE_S=75
readonly PYTHON_RESERVE_S=75
# What the pack may weigh: a device call carries 64 MiB, source tree included.
readonly PACK_LIMIT_BYTES=$((48 << 20))
work=""  # run's unpacked pack (global: the EXIT trap removes it)

die() { echo "gpu_check: $*" >&2; exit 2; }

# ---- library classes, by file name -----------------------------------------
# The C library and the driver always come from the machine that runs.
is_system_lib() {
  case "$1" in
    linux-vdso.so* | ld-linux* | libc.so* | libm.so* | libpthread.so* | \
    libdl.so* | librt.so* | libresolv.so* | libutil.so* | libcuda.so* | \
    libnvidia*) return 0 ;;
  esac
  return 1
}
# Too large to carry (hundreds of MiB); every CUDA machine has them, in the
# toolkit or in PyTorch's wheels.
is_gpu_machine_lib() {
  case "$1" in
    libcublas.so* | libcublasLt.so* | libnccl.so*) return 0 ;;
  esac
  return 1
}
# Carried, but used there only if the system's are too old for our binaries.
is_fallback_lib() {
  case "$1" in
    libstdc++.so* | libgcc_s.so*) return 0 ;;
  esac
  return 1
}

# ---- pack ------------------------------------------------------------------
# Where Bazel put `label`'s binary (checked to be there).
built_binary() {
  local path="bazel-bin/${1#//}"
  path="${path/://}"
  [ -x "$path" ] || die "$1 built, but $path is not there"
  echo "$path"
}

pack() {
  local dir=$1
  command -v bazel >/dev/null || die "no bazel here (tools/setup.sh installs it)"
  local cuda_path="${PSHARD_CUDA_PATH:-/usr/local/cuda}"
  [ -x "$cuda_path/bin/nvcc" ] ||
    die "no nvcc at $cuda_path/bin/nvcc (set PSHARD_CUDA_PATH)"
  # .bazelrc passes these to the repository rule (third_party/cuda_configure.bzl).
  unset PSHARD_DISABLE_CUDA
  [ -n "${PSHARD_CUDA_PATH:-}" ] && export PSHARD_CUDA_PATH

  local tests
  tests=$(bazel query "$TESTS_QUERY" 2>/dev/null | sort -u)
  [ -n "$tests" ] || die "bazel query found no GPU tests"
  # The binaries run outside Bazel: a test with runfiles would not find them.
  local data
  data=$(bazel query "labels(data, set($tests))" 2>/dev/null || true)
  [ -z "$data" ] || die "GPU tests with data dependencies cannot be packed: $data"
  # shellcheck disable=SC2086
  bazel build $tests "$BENCH" "$LIBPSHARD" $CLUSTER_BINARIES ||
    die "build failed"

  local stage
  stage=$(mktemp -d)
  mkdir -p "$stage/bin" "$stage/lib" "$stage/fallback"
  local label path paths=() names=()
  for label in $tests "$BENCH"; do
    path=$(built_binary "$label")
    cp -L "$path" "$stage/bin/"
    paths+=("$path")
    names+=("$(basename "$path")")
  done
  # The binaries of tools/gpu_e2e.sh, kept out of bin/ (not tests), and
  # what it runs.
  mkdir -p "$stage/cluster" "$stage/examples/torch_lm" "$stage/corpus"
  for label in $CLUSTER_BINARIES; do
    path=$(built_binary "$label")
    cp -L "$path" "$stage/cluster/"
    paths+=("$path")
  done
  cp tools/gpu_e2e.sh "$stage/"
  cp $E2E_EXAMPLE_FILES "$stage/examples/torch_lm/"
  local file
  for file in $E2E_CORPUS_FILES; do
    [ -f "$file" ] || die "no $file (tools/setup.sh installs fortunes)"
    cp "$file" "$stage/corpus/"
  done
  # The Python package with the library beside it (where pshard._capi
  # looks first), and its tests with what they import.
  mkdir -p "$stage/python/pshard" "$stage/python/tests"
  cp python/pshard/*.py "$stage/python/pshard/"
  cp -L bazel-bin/worker/api/libpshard.so "$stage/python/pshard/"
  paths+=("bazel-bin/worker/api/libpshard.so")
  for file in $PYTHON_TESTS $PYTHON_TEST_FILES; do
    cp "$file" "$stage/python/tests/"
  done
  # (ldd's output is kept whole: `ldd | grep -q` can fail under pipefail.)
  local deps
  deps=$(ldd "bazel-bin/bench/gpu/gpu_bench")
  [[ "$deps" == *libcudart* ]] ||
    die "gpu_bench does not link libcudart: CUDA was not built in"

  # The shared libraries the binaries need, found here by the dynamic loader
  # (the test libraries through the binaries' RUNPATH into bazel-bin).
  local line soname target
  : >"$stage/gpu_machine_libs"
  for path in "${paths[@]}"; do
    while IFS= read -r line; do
      soname=$(awk '{print $1}' <<<"$line")
      target=$(awk '$2 == "=>" {print $3}' <<<"$line")
      if [ "$target" = "not" ]; then
        die "$path: $soname not found here"
      fi
      if is_system_lib "$soname"; then continue; fi
      if is_gpu_machine_lib "$soname"; then
        echo "$soname" >>"$stage/gpu_machine_libs"
      elif is_fallback_lib "$soname"; then
        cp -Ln "$target" "$stage/fallback/$soname"
      elif [ -n "$target" ]; then
        cp -Ln "$target" "$stage/lib/$soname"
      fi
    done < <(ldd "$path")
  done
  sort -u -o "$stage/gpu_machine_libs" "$stage/gpu_machine_libs"
  printf '%s\n' "${names[@]}" >"$stage/tests"
  sed -i '/^gpu_bench$/d' "$stage/tests"
  {
    echo "packed: $(date -u +%FT%TZ) on $(hostname)"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
    echo "nvcc: $("$cuda_path/bin/nvcc" --version | tail -1)"
  } >"$stage/MANIFEST"

  mkdir -p "$dir"
  tar czf "$dir/pack.tar.gz" -C "$stage" .
  rm -rf "$stage"
  local bytes
  bytes=$(stat -c %s "$dir/pack.tar.gz")
  echo "gpu_check: packed ${#names[@]} binaries into $dir/pack.tar.gz ($((bytes >> 20)) MiB)"
  [ "$bytes" -le "$PACK_LIMIT_BYTES" ] ||
    die "the pack is over $((PACK_LIMIT_BYTES >> 20)) MiB: too large to carry"
}

# ---- run -------------------------------------------------------------------
summary=()
failed=0
start=$(date +%s)
# A summary line, kept and, with GPU_CHECK_OUT, written out at once.
emit() {
  summary+=("$1")
  if [ -n "${GPU_CHECK_OUT:-}" ]; then echo "$1" >>"$GPU_CHECK_OUT/summary.txt"; fi
}
note() { emit "$1"; echo "== $1"; }
elapsed() { echo "$(($(date +%s) - start))s"; }
# A timeout of at most $1 seconds that ends $2 seconds before the budget.
timeout_within() {
  local t=$((start + BUDGET_S - $2 - $(date +%s)))
  [ "$t" -lt "$1" ] || t=$1
  echo "$t"
}
# Appends log $1 to GPU_CHECK_OUT's logs.txt.
save_log() {
  if [ -n "${GPU_CHECK_OUT:-}" ]; then
    { echo "===== $(basename "$1")"; cat "$1"; } >>"$GPU_CHECK_OUT/logs.txt"
  fi
}

# Folders on this machine that hold `soname` (CUDA toolkit, PyTorch's wheels,
# the loader's cache).
find_lib_dirs() {
  local soname=$1 d
  {
    for d in "${PSHARD_CUDA_PATH:-/usr/local/cuda}"/{lib64,lib,targets/x86_64-linux/lib} \
             /usr/local/cuda-*/{lib64,lib,targets/x86_64-linux/lib}; do
      [ -e "$d/$soname" ] && echo "$d"
    done
    if command -v python3 >/dev/null; then
      python3 - "$soname" 2>/dev/null <<'EOF' || true
import glob, os, site, sys
roots = site.getsitepackages() + [site.getusersitepackages()]
for root in roots:
    for path in glob.glob(os.path.join(root, "nvidia", "*", "lib", sys.argv[1])):
        print(os.path.dirname(path))
EOF
    fi
    ldconfig -p 2>/dev/null | awk -v s="$soname" '$1 == s {print $NF}' |
      xargs -r -n1 dirname
  } | awk '!seen[$0]++'
}

run() {
  local dir=$1 dry=$2
  # The budget is the run's: in `all` and `dry-run` the pack (a build) came
  # first.
  start=$(date +%s)
  local pack="$dir/pack.tar.gz"
  [ -f "$pack" ] || die "no $pack: run 'tools/gpu_check.sh pack' on a build machine first"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  if [ -n "${GPU_CHECK_OUT:-}" ]; then
    mkdir -p "$GPU_CHECK_OUT"
    : >"$GPU_CHECK_OUT/summary.txt"
    : >"$GPU_CHECK_OUT/logs.txt"
  fi
  tar xzf "$pack" -C "$work"
  sed 's/^/   /' "$work/MANIFEST"

  if command -v nvidia-smi >/dev/null 2>&1; then
    local gpus
    gpus=$(nvidia-smi --query-gpu=name,driver_version,memory.total \
      --format=csv,noheader 2>&1 || true)
    note "GPUs: ${gpus//$'\n'/; }"
  else
    note "GPUs: nvidia-smi not found"
  fi

  # Library path: the pack's, then wherever this machine has the CUDA
  # libraries we did not carry.
  local libpath="$work/lib" soname d found
  while IFS= read -r soname; do
    [ -n "$soname" ] || continue
    # (sed reads everything: `head -1` could SIGPIPE the search under
    # pipefail and end the script.)
    found=$(find_lib_dirs "$soname" | sed -n 1p)
    if [ -n "$found" ]; then
      libpath="$libpath:$found"
      note "$soname: from $found"
    else
      note "$soname: not found on this machine"
    fi
  done <"$work/gpu_machine_libs"
  # The driver comes from this machine: normally through the loader's
  # cache; some GPU machines only mount it in a folder of its own.
  local cache
  cache=$(ldconfig -p 2>/dev/null || true)
  if [[ "$cache" == *"libcuda.so.1 "* ]]; then
    note "libcuda.so.1: from the loader's cache"
  else
    found=""
    for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
      if [ -e "$d/libcuda.so.1" ]; then found=$d; break; fi
    done
    if [ -n "$found" ]; then
      libpath="$libpath:$found"
      note "libcuda.so.1: from $found"
    else
      note "libcuda.so.1: not found on this machine (the tests will say no CUDA device)"
    fi
  fi
  libpath="$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

  # Every binary must load: name what is missing rather than fail later. A
  # C++ runtime too old for our binaries is replaced by the carried one.
  local bin unresolved
  local deps
  for bin in "$work"/bin/* "$work"/cluster/*; do
    deps=$(LD_LIBRARY_PATH="$libpath" ldd "$bin" 2>&1 || true)
    if grep -q 'GLIBCXX\|CXXABI\|GCC_[0-9]' <<<"$deps"; then
      libpath="$work/fallback:$libpath"
      note "system C++ runtime too old: using the carried libstdc++"
      break
    fi
  done
  unresolved=""
  for bin in "$work"/bin/* "$work"/cluster/*; do
    unresolved+=$(LD_LIBRARY_PATH="$libpath" ldd "$bin" 2>&1 |
      awk -v b="$(basename "$bin")" '/not found/ {printf "%s: %s; ", b, $1}')
  done
  if [ -n "$unresolved" ]; then
    note "libraries: MISSING $unresolved"
    failed=1
  else
    note "libraries: every binary loads"
  fi
  if [ "$dry" = 1 ]; then
    # Here the build machine's own libraries would hide a hole in the pack:
    # everything but the C library, the driver and the CUDA libraries left
    # to the GPU machine must come from the pack.
    local line leaks=""
    for bin in "$work"/bin/* "$work"/cluster/*; do
      while IFS= read -r line; do
        soname=$(awk '{print $1}' <<<"$line")
        d=$(awk '$2 == "=>" {print $3}' <<<"$line")
        [ -n "$d" ] || continue
        is_system_lib "$soname" || is_gpu_machine_lib "$soname" ||
          is_fallback_lib "$soname" || [[ "$d" == "$work"/* ]] ||
          leaks+="$(basename "$bin"): $soname from $d; "
      done < <(LD_LIBRARY_PATH="$libpath" ldd "$bin")
    done
    if [ -n "$leaks" ]; then
      note "pack: INCOMPLETE, taken from this machine: $leaks"
      failed=1
    else
      note "pack: complete (only libc, the driver and $(tr '\n' ' ' <"$work/gpu_machine_libs")from the system)"
    fi
  fi

  local logs="$work/logs"
  mkdir -p "$logs"
  local require=1
  [ "$dry" = 1 ] && require=0
  # NCCL's own reason for a failure, in the logs.
  export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"
  # Every rank of these tests is on this machine: bootstrap over loopback
  # rather than whatever other interface a VM has (or lacks an address on).
  export NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-lo}"

  # Tests: each binary on its own, with a timeout; a failure is counted and
  # reported, and the rest still run.
  local t rc ok skipped failed_cases reasons total_ok=0 total_skipped=0
  local passed_bins=0 failed_bins=0 limit
  while IFS= read -r t; do
    limit=$(timeout_within "$TEST_TIMEOUT_S" \
      $((BENCH_RESERVE_S + E2E_RESERVE_S + PYTHON_RESERVE_S)))
    if [ "$limit" -lt 10 ]; then
      failed_bins=$((failed_bins + 1))
      failed=1
      note "test $t: NOT RUN (the ${BUDGET_S}s budget is spent)"
      continue
    fi
    rc=0
    (cd "$work" && PSHARD_REQUIRE_GPU=$require LD_LIBRARY_PATH="$libpath" \
      timeout -k 10 "$limit" "bin/$t" --gtest_color=no) \
      >"$logs/$t.log" 2>&1 || rc=$?
    save_log "$logs/$t.log"
    ok=$(grep -c '^\[       OK \]' "$logs/$t.log" || true)
    # Per-test lines end in "(N ms)"; gtest's closing list repeats the names.
    skipped=$(grep -cE '^\[  SKIPPED \] .* \([0-9]+ ms\)$' "$logs/$t.log" || true)
    failed_cases=$(grep -E '^\[  FAILED  \] .* \([0-9]+ ms\)$' "$logs/$t.log" |
      sed -E 's/^\[  FAILED  \] ([^ ,]+).*/\1/' | tr '\n' ' ' || true)
    total_ok=$((total_ok + ok))
    total_skipped=$((total_skipped + skipped))
    if [ "$rc" -eq 0 ]; then
      passed_bins=$((passed_bins + 1))
      note "test $t: PASSED ($ok ok, $skipped skipped)"
    else
      failed_bins=$((failed_bins + 1))
      failed=1
      local why="exit $rc" hung
      if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        # The case that hung: the last one gtest started.
        hung=$(grep '^\[ RUN      \]' "$logs/$t.log" | tail -n 1 |
          sed 's/^\[ RUN      \] //' || true)
        why="timed out after ${limit}s${hung:+ in $hung}"
      fi
      note "test $t: FAILED ($why; $ok ok, $skipped skipped; failed: ${failed_cases:-none listed})"
      tail -n 30 "$logs/$t.log" | sed 's/^/   | /'
    fi
  done <"$work/tests"
  # GTEST_SKIP prints "<file>:<line>: Skipped" and the reason on the next line.
  reasons=$(cat /dev/null "$logs"/*.log 2>/dev/null | grep -A1 ': Skipped$' |
    grep -v -e ': Skipped$' -e '^--$' | sort | uniq -c | sed 's/^ *//' |
    tr '\n' ';' || true)
  note "tests: $passed_bins binaries passed, $failed_bins failed; gtest cases: $total_ok ok, $total_skipped skipped${reasons:+ ($reasons)} ($(elapsed))"

  # The Python package on CUDA tensors, with this machine's python3 and
  # torch (the GPU machines have torch 2.x; a machine without torch says so).
  local py
  for py in $PYTHON_TESTS; do
    py=$(basename "$py")
    limit=$(timeout_within "$TEST_TIMEOUT_S" \
      $((BENCH_RESERVE_S + E2E_RESERVE_S)))
    if ! python3 -c 'import torch' >/dev/null 2>&1; then
      note "python $py: NOT RUN (no python3 with torch on this machine)"
      [ "$dry" = 1 ] || failed=1
      continue
    fi
    if [ "$limit" -lt 10 ]; then
      note "python $py: NOT RUN (the ${BUDGET_S}s budget is spent)"
      failed=1
      continue
    fi
    rc=0
    (cd "$work/python" && PSHARD_REQUIRE_GPU=$require \
      LD_LIBRARY_PATH="$libpath" PYTHONPATH="$work/python:$work/python/tests" \
      timeout -k 10 "$limit" python3 "tests/$py" -v) \
      >"$logs/$py.log" 2>&1 || rc=$?
    save_log "$logs/$py.log"
    if [ "$rc" -eq 0 ]; then
      note "python $py: PASSED ($(grep -E '^(OK|FAILED)' "$logs/$py.log" | tail -n 1), torch $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null))"
    else
      failed=1
      note "python $py: FAILED (exit $rc)"
      tail -n 30 "$logs/$py.log" | sed 's/^/   | /'
    fi
  done

  # End to end through the real binaries, on cuda:0 (the CPU in a dry run).
  limit=$(timeout_within "$E2E_TIMEOUT_S" "$BENCH_RESERVE_S")
  if [ "$limit" -lt 30 ]; then
    note "e2e: NOT RUN (the ${BUDGET_S}s budget is spent)"
    failed=1
  else
    local device=cuda
    [ "$dry" = 1 ] && device=cpu
    rc=0
    (cd "$work" && LD_LIBRARY_PATH="$libpath" NCCL_DEBUG="$NCCL_DEBUG" \
      timeout -k 10 "$limit" ./gpu_e2e.sh "$work/cluster" "$work/python" \
      "$work/examples" "$work/corpus" "$device" "$work/e2e") \
      >"$logs/gpu_e2e.log" 2>&1 || rc=$?
    save_log "$logs/gpu_e2e.log"
    while IFS= read -r line; do note "$line"; done \
      < <(grep '^e2e ' "$logs/gpu_e2e.log" || true)
    if [ "$rc" -ne 0 ]; then
      failed=1
      if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        note "e2e: timed out after ${limit}s"
      fi
      grep -v '^e2e ' "$logs/gpu_e2e.log" | tail -n 60 | sed 's/^/   | /'
    fi
  fi

  # Benchmark: copy bandwidth and optimizer kernels in one run, then the
  # 1-GPU job step.
  rc=0
  limit=$(timeout_within "$BENCH_TIMEOUT_S" 15)
  if [ "$limit" -lt 30 ]; then
    echo "gpu_check: the ${BUDGET_S}s budget is spent" >"$logs/gpu_bench.log"
    rc=125
  else
    (cd "$work" && LD_LIBRARY_PATH="$libpath" timeout -k 10 "$limit" \
      bin/gpu_bench) >"$logs/gpu_bench.log" 2>&1 || rc=$?
  fi
  save_log "$logs/gpu_bench.log"
  cat "$logs/gpu_bench.log"
  if [ "$rc" -eq 0 ]; then
    note "bench: $(grep '^SUMMARY' "$logs/gpu_bench.log" | sed 's/^SUMMARY //') ($(elapsed))"
    while IFS= read -r line; do emit "  $line"; done \
      < <(grep -E 'GB/s|% of cudaMemcpy|ms/step|^device' "$logs/gpu_bench.log")
  elif [ "$dry" = 1 ] && [ "$rc" -eq 2 ] &&
       grep -q 'no CUDA device' "$logs/gpu_bench.log"; then
    note "bench: not run, as expected in a dry run ($(head -1 "$logs/gpu_bench.log"))"
  else
    local why="exit $rc"
    { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; } && why="timed out after ${limit}s"
    [ "$rc" -eq 125 ] && why="not run: the ${BUDGET_S}s budget is spent"
    note "bench: FAILED ($why)"
    failed=1
  fi

  local result
  result=$([ "$failed" -eq 0 ] && echo PASS || echo FAIL)
  [ "$dry" = 1 ] && result="$result (dry run: no GPU used)"
  emit "total time: $(elapsed); result: $result"
  echo
  echo "==================== gpu_check summary ===================="
  printf '%s\n' "${summary[@]}"
  if [ -n "${GPU_CHECK_SUMMARY:-}" ]; then
    printf '%s\n' "${summary[@]}" >"$GPU_CHECK_SUMMARY"
  fi
  return "$failed"
}

mode=${1:-all}
dir=${2:-.gpu_check}
case "$mode" in
  pack) pack "$dir" ;;
  run) run "$dir" 0 || exit 1 ;;
  dry-run) pack "$dir" && { run "$dir" 1 || exit 1; } ;;
  all) pack "$dir" && { run "$dir" 0 || exit 1; } ;;
  -h | --help | help) sed -n '2,/^set -euo/p' "$0" | sed '$d' ;;
  *) die "unknown mode '$mode' (pack, run, dry-run, all)" ;;
esac
