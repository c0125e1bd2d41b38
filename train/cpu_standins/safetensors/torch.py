"""Stand-in for safetensors.torch.load_file (F32, F16, BF16): the reader train/dflash.py already has."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from dflash import load_safetensors  # noqa: E402


def load_file(path, device="cpu"):
    return load_safetensors(path)
