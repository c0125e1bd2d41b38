"""Stand-in for safetensors.torch.load_file (F32, F16, BF16)."""
import json
import struct

import torch


def load_file(path, device="cpu"):
    with open(path, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        header = json.loads(fh.read(n))
        data = fh.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        raw = bytearray(data[a:b])
        if info["dtype"] == "BF16":
            t = torch.frombuffer(raw, dtype=torch.int16).view(torch.bfloat16)
        else:
            t = torch.frombuffer(raw, dtype={"F32": torch.float32, "F16": torch.float16}[info["dtype"]])
        out[name] = t.reshape(info["shape"]).clone()
    return out
