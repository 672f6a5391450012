"""A tiny pure-Python safetensors reader and writer (json + struct +
torch.frombuffer), standing in for the `safetensors` package to check that
pshard's files are what other tools read, and that pshard reads theirs.

  safetensors_interop.py read FILE    prints one line per tensor:
                                      name dtype shape sum  (then metadata)
  safetensors_interop.py write FILE   writes a file the C++ test then reads
"""
import json
import struct
import sys

import torch

DTYPES = {
    "F32": torch.float32, "F64": torch.float64, "F16": torch.float16,
    "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32,
    "U8": torch.uint8, "I8": torch.int8, "BOOL": torch.bool,
}


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    body = memoryview(data)[8 + n:]
    metadata = header.pop("__metadata__", {})
    covered = 0
    for name, entry in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"]):
        begin, end = entry["data_offsets"]
        assert begin == covered, (name, begin, covered)
        covered = end
        dtype = DTYPES[entry["dtype"]]
        if end > begin:
            t = torch.frombuffer(bytearray(body[begin:end]), dtype=dtype)
        else:
            t = torch.empty(0, dtype=dtype)
        t = t.reshape(entry["shape"])
        total = t.to(torch.float64).sum().item()
        print(name, entry["dtype"], "x".join(str(d) for d in entry["shape"]),
              repr(total))
    assert covered == len(body), (covered, len(body))
    for key in sorted(metadata):
        print("meta", key, metadata[key])


def write(path):
    tensors = {
        "w": torch.arange(6, dtype=torch.float32).reshape(2, 3) / 4,
        "h": torch.tensor([1.5, -2.0], dtype=torch.bfloat16),
        "n": torch.tensor([7, -9, 2 ** 40], dtype=torch.int64),
    }
    header = {"__metadata__": {"format": "pt", "from": "python"}}
    offset = 0
    blobs = []
    for name, t in tensors.items():
        raw = t.contiguous().view(torch.uint8).numpy().tobytes() if t.dtype != torch.bfloat16 \
            else t.view(torch.int16).numpy().tobytes()
        header[name] = {"dtype": {torch.float32: "F32", torch.bfloat16: "BF16",
                                  torch.int64: "I64"}[t.dtype],
                        "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    text = json.dumps(header).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)


if __name__ == "__main__":
    {"read": read, "write": write}[sys.argv[1]](sys.argv[2])
