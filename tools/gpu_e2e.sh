#!/usr/bin/env bash
# End to end on a GPU through the real binaries, for tools/gpu_check.sh (it
# packs this script with the binaries and runs it after the tests).
# `pshardctl local --device=cuda` starts pshard-coordinator and one
# pshard-worker on cuda:0, as a user would, for each of:
#
#   checkpoint-fp32, checkpoint-bf16   the built-in mlp job on NCCL (Adam;
#       then AdamW with bf16 parameters and fp32 masters): job A runs 40
#       steps and checkpoints at step 20; job B starts from A's step 20
#       (`from_checkpoint`) and must end with A's parameters bit for bit:
#       the GPU optimizer's state (and masters) went to disk and came back.
#   overlap   checkpoint-fp32's job A with overlap_param_broadcast: the
#       forward waits on the device for each layer's broadcast; the same
#       parameters bit for bit.
#   torch-lm   examples/torch_lm on CUDA tensors (pshard.torch over NCCL,
#       the fused CUDA AdamW) for 30 steps: SUCCEEDED, it trained on cuda:0
#       (PSHARD_DEVICE, from backend AUTO on a GPU worker), its loss fell.
#
#   tools/gpu_e2e.sh BIN_DIR PYTHON_DIR EXAMPLES_DIR CORPUS_DIR DEVICE WORK_DIR
#
# BIN_DIR has pshardctl, pshard-coordinator and pshard-worker; PYTHON_DIR
# the package `pshard` (with libpshard.so); EXAMPLES_DIR torch_lm/;
# CORPUS_DIR fortune files; DEVICE cuda, or cpu for a dry run (the same
# jobs on Gloo, to check the script and the pack where there is no GPU);
# WORK_DIR an empty directory for the runs. python3 on PATH (with torch)
# runs the example (a dry run without torch skips it). Prints "e2e NAME: PASSED|FAILED (why)" per check, the
# failures' log tails after them; exit 0 when every check passed.
set -uo pipefail

[ $# -eq 6 ] || { sed -n '2,/^set -uo/p' "$0" | sed '$d' >&2; exit 2; }
bin=$1 python_dir=$2 examples=$3 corpus=$4 device=$5 work=$6
case "$device" in
  cuda) backend=NCCL expect_device=cuda:0 ;;
  cpu) backend=GLOO expect_device=cpu ;;
  *) echo "gpu_e2e: DEVICE must be cuda or cpu, got '$device'" >&2; exit 2 ;;
esac
mkdir -p "$work" || exit 2
failed=0

# Runs `pshardctl local SPEC --workers 1 --device=$device` in a new run
# directory $work/runs/$1; its output is $work/$1.log.
local_run() {
  local name=$1 spec=$2
  timeout -k 10 60 "$bin/pshardctl" local "$spec" --workers=1 \
    --device="$device" --bin_dir="$bin" --run_dir="$work/runs/$name" \
    >"$work/$name.log" 2>&1
}

pass() { echo "e2e $1: PASSED${2:+ ($2)}"; }
fail() {
  echo "e2e $1: FAILED ($2)"
  failed=1
  local log
  for log in "${@:3}"; do
    [ -f "$log" ] || continue
    echo "   | ==> $log"
    tail -n 25 "$log" | sed 's/^/   | /'
  done
}

# The mlp job: 40 steps; $2 the optimizer, $3 extra spec fields.
mlp_spec() {
  local path=$1 optimizer=$2 extra=$3
  cat >"$path" <<EOF
{
  "name": "gpu-e2e-mlp",
  "world_size": 1,
  "backend": "$backend",
  "mlp": {"input_dim": 64, "hidden_dims": [256, 128], "output_dim": 16,
          "batch_size": 64},
  "optimizer": $optimizer,
  "bucket_cap_mb": 0.05,
  "steps": 40,
  "seed": 7,
  "collective_timeout_seconds": 60$extra
}
EOF
}

checkpoint_check() {
  local name=$1 optimizer=$2 precision=$3
  local a="$name-a" b="$name-b" ckpt="$work/$name-ckpt"
  mlp_spec "$work/$a.json" "$optimizer" "$precision,
  \"output_dir\": \"$work/$a-out\",
  \"checkpoint\": {\"dir\": \"$ckpt\", \"every_steps\": 20}"
  mlp_spec "$work/$b.json" "$optimizer" "$precision,
  \"output_dir\": \"$work/$b-out\",
  \"from_checkpoint\": \"$ckpt/step-20\""
  if ! local_run "$a" "$work/$a.json"; then
    fail "$name" "job A (40 steps, checkpoint at 20) did not succeed" \
      "$work/$a.log" "$work/runs/$a/local-worker-0.log"
    return
  fi
  if ! local_run "$b" "$work/$b.json"; then
    fail "$name" "job B (from A's step 20) did not succeed" \
      "$work/$b.log" "$work/runs/$b/local-worker-0.log"
    return
  fi
  if cmp -s "$work/$a-out/params.safetensors" "$work/$b-out/params.safetensors"; then
    pass "$name" "resumed at step 20, bit-identical to the uninterrupted run"
  else
    fail "$name" "resumed at step 20, the parameters differ from the uninterrupted run's"
  fi
}

checkpoint_check checkpoint-fp32 \
  '{"kind": "ADAM", "hyper_parameters": {"lr": 0.01}}' ""
# Job A of checkpoint-fp32 again, its broadcasts left to the next forward.
overlap_check() {
  local reference="$work/checkpoint-fp32-a-out/params.safetensors"
  if [ ! -f "$reference" ]; then
    fail overlap "no output of checkpoint-fp32's job A to compare with"
    return
  fi
  mlp_spec "$work/overlap.json" \
    '{"kind": "ADAM", "hyper_parameters": {"lr": 0.01}}' ',
  "overlap_param_broadcast": true,
  "output_dir": "'"$work"'/overlap-out"'
  if ! local_run overlap "$work/overlap.json"; then
    fail overlap "the job did not succeed" "$work/overlap.log" \
      "$work/runs/overlap/local-worker-0.log"
  elif cmp -s "$reference" "$work/overlap-out/params.safetensors"; then
    pass overlap "bit-identical to the run without overlap"
  else
    fail overlap "the parameters differ from the run without overlap"
  fi
}
overlap_check

checkpoint_check checkpoint-bf16 \
  '{"kind": "ADAMW", "hyper_parameters": {"lr": 0.01, "weight_decay": 0.1}}' \
  ',
  "precision": {"param_dtype": "BF16", "reduce_dtype": "FP32"}'

# The example as a user runs it, on the worker's device (backend AUTO).
python=$(command -v python3 || true)
if [ -z "$python" ] || ! "$python" -c 'import torch' >/dev/null 2>&1; then
  # A GPU machine must run it; a dry run's build machine may lack torch.
  if [ "$device" = cuda ]; then
    fail torch-lm "no python3 with torch on this machine"
  else
    echo "e2e torch-lm: NOT RUN (no python3 with torch on this machine)"
  fi
else
  metrics="$work/torch-lm-metrics.json"
  cat >"$work/torch-lm.json" <<EOF
{
  "name": "gpu-e2e-torch-lm",
  "world_size": 1,
  "backend": "AUTO",
  "program": {
    "argv": ["$python", "$examples/torch_lm/train.py", "--steps", "30",
             "--batch-size", "16", "--context", "32", "--width", "64",
             "--layers", "1", "--heads", "2", "--lr", "0.003",
             "--bucket-cap-mb", "0.05", "--log-every", "10",
             "--sample-chars", "20", "--corpus", "$corpus",
             "--metrics-out", "$metrics"],
    "env": {"PYTHONPATH": "$python_dir"},
    "grace_period_seconds": 10
  },
  "steps": 30,
  "collective_timeout_seconds": 60
}
EOF
  rank_log="$work/runs/torch-lm/program-logs/job-1/rank-0.log"
  if ! local_run torch-lm "$work/torch-lm.json"; then
    fail torch-lm "the job did not succeed" "$work/torch-lm.log" "$rank_log"
  elif ! grep -q "on $expect_device\$" "$rank_log"; then
    fail torch-lm "it did not train on $expect_device" "$rank_log"
  elif ! summary=$("$python" - "$metrics" 2>&1 <<'EOF'
import json, sys
losses = json.load(open(sys.argv[1]))["losses"]
print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f} in {len(losses)} steps")
sys.exit(0 if len(losses) == 30 and losses[-1] < 0.9 * losses[0] else 1)
EOF
  ); then
    fail torch-lm "the loss did not fall: $summary" "$rank_log"
  else
    pass torch-lm "on $expect_device, $summary"
  fi
fi
exit "$failed"
