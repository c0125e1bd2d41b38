"""The safetensors container, standard library only: an 8-byte little-endian header length, a JSON
header (padded with spaces to 8 bytes) naming each tensor's dtype, shape and byte range, then the raw
little-endian data. dflash.py (torch tensors) and gguf_to_hf.py (numpy arrays) convert to and from
the raw bytes themselves."""
import json
import struct


def write(path, entries, metadata=None):
    """entries: (name, dtype string such as "F32"/"BF16", shape, raw bytes), stored in that order."""
    header, blobs, off = {}, [], 0
    for name, dtype, shape, raw in entries:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blobs.append(raw)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(h)))
        fh.write(h)
        for b in blobs:
            fh.write(b)


def read(path):
    """{name: (dtype string, shape, raw bytes)} of every tensor (the metadata entry left out)."""
    with open(path, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        header = json.loads(fh.read(n))
        data = fh.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        out[name] = (info["dtype"], info["shape"], data[a:b])
    return out
