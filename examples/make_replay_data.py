#!/usr/bin/python3
"""Writes a small data set for the `replay` workload (examples/replay_small.json).

Layout (what ReplayWorkload reads):
  <out>/params.safetensors                       initial parameters, F32
  <out>/gradients/step-<s>/rank-<r>.safetensors  gradient of step s (1-based)
                                                 for rank r, keyed by name
  <out>/expected_params.safetensors              the parameters after all
                                                 steps under the optimizer of
                                                 replay_small.json (below)

The expected parameters follow PyTorch's SGD with momentum on the gradient
averaged over ranks: lr 0.1, momentum 0.9, except parameters matching
"*.bias", which use lr 0.05. Compare a job's output with --check:

  /usr/bin/python3 examples/make_replay_data.py            # writes the data
  bazel run //cli:pshardctl -- local examples/replay_small.json --run_dir /tmp/pshard-replay-run
  /usr/bin/python3 examples/make_replay_data.py --check /tmp/pshard-replay-run/output/params.safetensors

(--run_dir must not hold an earlier run; without it the run directory is a
new /tmp/pshard-local-XXXXXX that pshardctl prints.)

Needs only numpy. safetensors format: an 8-byte little-endian header length,
a JSON header {name: {dtype, shape, data_offsets: [begin, end]}}, then the raw
little-endian data.
"""

import argparse
import fnmatch
import json
import os
import struct
import sys

import numpy as np

# Parameter names and shapes, in file (= model) order: a 3-layer MLP.
PARAMS = [
    ("layers.0.weight", (128, 64)),
    ("layers.0.bias", (128,)),
    ("layers.1.weight", (128, 128)),
    ("layers.1.bias", (128,)),
    ("layers.2.weight", (16, 128)),
    ("layers.2.bias", (16,)),
]

# Must match examples/replay_small.json.
LR = 0.1
MOMENTUM = 0.9
BIAS_LR = 0.05


def write_safetensors(path, tensors):
    """tensors: list of (name, float32 array), written in this order."""
    header = {}
    offset = 0
    blobs = []
    for name, array in tensors:
        data = np.ascontiguousarray(array, dtype="<f4").tobytes()
        header[name] = {
            "dtype": "F32",
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        offset += len(data)
        blobs.append(data)
    header_bytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    # Pad with spaces so the data starts 8-byte aligned, as the format allows.
    header_bytes += b" " * ((8 - len(header_bytes) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(header_bytes)))
        f.write(header_bytes)
        for blob in blobs:
            f.write(blob)
    os.replace(tmp, path)


def read_safetensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            raise ValueError(f"{path}: {name} has dtype {info['dtype']}, want F32")
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(data[begin:end], dtype="<f4").reshape(info["shape"])
    return out


def lr_for(name):
    return BIAS_LR if fnmatch.fnmatchcase(name, "*.bias") else LR


def generate(out, steps, ranks, seed):
    rng = np.random.default_rng(seed)
    params = [(name, (rng.standard_normal(shape) * 0.1).astype(np.float32))
              for name, shape in PARAMS]
    os.makedirs(out, exist_ok=True)
    write_safetensors(os.path.join(out, "params.safetensors"), params)

    # Reference run, in float32 like the workers: average the ranks'
    # gradients, then torch.optim.SGD's momentum rule (buf = g on the first
    # step, then buf = momentum * buf + g; p -= lr * buf).
    current = {name: value.copy() for name, value in params}
    momentum = {}
    for step in range(1, steps + 1):
        step_dir = os.path.join(out, "gradients", f"step-{step}")
        os.makedirs(step_dir, exist_ok=True)
        grads = []
        for rank in range(ranks):
            g = [(name, rng.standard_normal(shape).astype(np.float32) * np.float32(0.01))
                 for name, shape in PARAMS]
            write_safetensors(os.path.join(step_dir, f"rank-{rank}.safetensors"), g)
            grads.append(dict(g))
        for name, _ in PARAMS:
            total = grads[0][name].copy()
            for r in range(1, ranks):
                total += grads[r][name]
            avg = total / np.float32(ranks)
            if name in momentum:
                momentum[name] = momentum[name] * np.float32(MOMENTUM) + avg
            else:
                momentum[name] = avg.copy()
            current[name] = current[name] - np.float32(lr_for(name)) * momentum[name]
    write_safetensors(os.path.join(out, "expected_params.safetensors"),
                      [(name, current[name]) for name, _ in PARAMS])
    n = sum(int(np.prod(shape)) for _, shape in PARAMS)
    print(f"wrote {len(PARAMS)} parameters ({n} floats), {steps} steps x "
          f"{ranks} ranks of gradients, and the expected result to {out}")


def check(out, path, tolerance):
    expected = read_safetensors(os.path.join(out, "expected_params.safetensors"))
    got = read_safetensors(path)
    worst = 0.0
    for name, want in expected.items():
        if name not in got:
            print(f"{path}: missing parameter {name}", file=sys.stderr)
            return 1
        if got[name].shape != want.shape:
            print(f"{path}: {name} has shape {got[name].shape}, want {want.shape}",
                  file=sys.stderr)
            return 1
        worst = max(worst, float(np.max(np.abs(got[name] - want))))
    ok = worst <= tolerance
    print(f"max |difference| {worst:.3g} ({'within' if ok else 'above'} "
          f"tolerance {tolerance:g})")
    return 0 if ok else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="/tmp/pshard-replay-small",
                        help="output directory (replay_small.json reads "
                             "/tmp/pshard-replay-small)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--check", metavar="PARAMS",
                        help="compare a job's params.safetensors with the "
                             "expected result instead of generating")
    parser.add_argument("--tolerance", type=float, default=1e-5)
    args = parser.parse_args()
    if args.steps < 1 or args.ranks < 1:
        parser.error("--steps and --ranks must be >= 1")
    if args.check:
        return check(args.out, args.check, args.tolerance)
    generate(args.out, args.steps, args.ranks, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
