#!/usr/bin/env python3
"""Rebuilds a transformers Qwen3_5ForCausalLM checkpoint folder from a qwen35 GGUF that `deltaflash convert`
wrote: config.json, generation_config.json, model.safetensors, tokenizer.json and tokenizer_config.json.

Why: the GPU machine gets a copy of the working tree (64 MiB at most). The committed Q8_0 target travels with it;
its bf16 HF checkpoint does not fit beside it. Training the drafter against the dequantized Q8_0 target is what
we want anyway: the drafter drafts for that GGUF.

It undoes every step of the converter's qwen35 path (src/convert/):
  - names: tensor_map.cpp's kQwen35Layer / kQwen35Global read backwards;
  - layout: GGUF lists dims contiguous-first, numpy last-first; conv1d is [K, CD] in GGUF and [CD, 1, K] in HF;
  - values: every "+1" norm (ValueOp::AddOne) gets 1 subtracted; ssm_a = -exp(A_log) gives A_log = log(-ssm_a);
  - value heads: the key-head-tiled order of convert_tensor.cpp's v_head_permutation is put back into the grouped
    order (the identity when there are as many value heads as key heads, as in the demo target);
  - tied embeddings: no output.weight means tie_word_embeddings and no lm_head.weight.
Q8_0 blocks (34 bytes: f16 scale d, 32 int8 q; value d*q) are dequantized exactly to float32, so the default
float32 output holds exactly the weights the engine computes with. --dtype bf16 rounds them once more.

The tokenizer is rebuilt from tokenizer.ggml.* (the GPT-2 style byte-level BPE our demo tokenizer is): vocabulary,
merges, the added tokens (CONTROL = special, USER_DEFINED = plain added token; UNUSED padding rows are dropped),
the pre-tokenizer regex named by tokenizer.ggml.pre, and the chat template.

Needs numpy only. `--check ORIG_DIR` compares with the checkpoint the GGUF was converted from (every tensor within
its Q8_0 step, config, tokenizer files).
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

import safetensors_file

# tokenizer.ggml.pre -> the Split regex of the HF pre-tokenizer (train/demo_data.py QWEN35_PATTERN)
PRE_PATTERNS = {
    "qwen35": (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
               r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
}

GGML_F32, GGML_F16, GGML_Q8_0, GGML_BF16 = 0, 1, 8, 30
TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED = 1, 3, 4, 5


# ---------------------------------------------------------------------------------------------
# GGUF reading
# ---------------------------------------------------------------------------------------------

class GGUF:
    """Metadata (dict) and tensors (name -> (ggml type, ne list, raw bytes)) of a GGUF v2/v3 file."""

    _SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def __init__(self, path):
        with open(path, "rb") as fh:
            self.data = memoryview(fh.read())
        self.off = 0
        if bytes(self.data[:4]) != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        self.off = 4
        self.version = self._rd("I")
        if self.version not in (2, 3):
            raise ValueError(f"{path}: GGUF version {self.version}")
        n_tensors, n_kv = self._rd("Q"), self._rd("Q")
        self.meta = {}
        for _ in range(n_kv):
            k = self._str()
            self.meta[k] = self._val(self._rd("I"))
        infos = []
        for _ in range(n_tensors):
            name = self._str()
            nd = self._rd("I")
            ne = [self._rd("Q") for _ in range(nd)]
            infos.append((name, ne, self._rd("I"), self._rd("Q")))
        align = int(self.meta.get("general.alignment", 32))
        base = (self.off + align - 1) // align * align
        self.tensors = {}
        for name, ne, ty, off in infos:
            n = int(np.prod(ne))
            size = {GGML_F32: 4 * n, GGML_F16: 2 * n, GGML_BF16: 2 * n, GGML_Q8_0: n // 32 * 34}.get(ty)
            if size is None:
                raise ValueError(f"{name}: ggml type {ty} is not supported (F32, F16, BF16, Q8_0)")
            self.tensors[name] = (ty, ne, self.data[base + off:base + off + size])

    def _rd(self, fmt):
        v = struct.unpack_from("<" + fmt, self.data, self.off)[0]
        self.off += struct.calcsize("<" + fmt)
        return v

    def _str(self):
        n = self._rd("Q")
        s = bytes(self.data[self.off:self.off + n]).decode("utf-8")
        self.off += n
        return s

    def _val(self, t):
        if t in self._SCALARS:
            return self._rd(self._SCALARS[t])
        if t == 8:
            return self._str()
        if t == 9:
            et, n = self._rd("I"), self._rd("Q")
            return [self._val(et) for _ in range(n)]
        raise ValueError(f"GGUF value type {t}")

    def array(self, name):
        """float32 numpy array in PyTorch order (dims reversed from GGUF's ne)."""
        ty, ne, raw = self.tensors[name]
        shape = tuple(reversed([int(x) for x in ne]))
        if ty == GGML_F32:
            return np.frombuffer(raw, dtype="<f4").reshape(shape).copy()
        if ty == GGML_F16:
            return np.frombuffer(raw, dtype="<f2").astype(np.float32).reshape(shape)
        if ty == GGML_BF16:
            u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            return u.view(np.float32).reshape(shape)
        return dequant_q8_0(raw).reshape(shape)

    def q8_0_scales(self, name):
        """Per-block f16 scales d of a Q8_0 tensor, [rows, ne0 / 32] in PyTorch order, or None."""
        ty, ne, raw = self.tensors[name]
        if ty != GGML_Q8_0:
            return None
        b = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 34)
        d = b[:, :2].copy().view("<f2").astype(np.float32)[:, 0]
        return d.reshape(tuple(reversed([int(x) for x in ne[1:]])) + (int(ne[0]) // 32,))


def dequant_q8_0(raw):
    b = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 34)
    d = b[:, :2].copy().view("<f2").astype(np.float32)  # [blocks, 1]
    q = b[:, 2:].copy().view(np.int8).astype(np.float32)  # [blocks, 32]
    return (d * q).reshape(-1)


# ---------------------------------------------------------------------------------------------
# The inverse of src/convert/ for qwen35
# ---------------------------------------------------------------------------------------------

# (GGUF suffix after "blk.N.", HF suffix after "model.layers.N.", value op, value-head axis) as in tensor_map.cpp
LAYER_RULES = [
    ("attn_norm.weight", "input_layernorm.weight", "add_one", None),
    ("post_attention_norm.weight", "post_attention_layernorm.weight", "add_one", None),
    ("ffn_gate.weight", "mlp.gate_proj.weight", None, None),
    ("ffn_up.weight", "mlp.up_proj.weight", None, None),
    ("ffn_down.weight", "mlp.down_proj.weight", None, None),
    ("attn_q.weight", "self_attn.q_proj.weight", None, None),
    ("attn_k.weight", "self_attn.k_proj.weight", None, None),
    ("attn_v.weight", "self_attn.v_proj.weight", None, None),
    ("attn_output.weight", "self_attn.o_proj.weight", None, None),
    ("attn_q_norm.weight", "self_attn.q_norm.weight", "add_one", None),
    ("attn_k_norm.weight", "self_attn.k_norm.weight", "add_one", None),
    ("attn_qkv.weight", "linear_attn.in_proj_qkv.weight", None, "qkv_rows"),
    ("attn_gate.weight", "linear_attn.in_proj_z.weight", None, "rows"),
    ("ssm_beta.weight", "linear_attn.in_proj_b.weight", None, "row_per_head"),
    ("ssm_alpha.weight", "linear_attn.in_proj_a.weight", None, "row_per_head"),
    ("ssm_conv1d.weight", "linear_attn.conv1d.weight", None, "conv_channels"),
    ("ssm_dt.bias", "linear_attn.dt_bias", None, "elements"),
    ("ssm_a", "linear_attn.A_log", "neg_exp", "elements"),
    ("ssm_norm.weight", "linear_attn.norm.weight", None, None),
    ("ssm_out.weight", "linear_attn.out_proj.weight", None, "columns"),
]
GLOBAL_RULES = [
    ("token_embd.weight", "model.embed_tokens.weight", None),
    ("output_norm.weight", "model.norm.weight", "add_one"),
    ("output.weight", "lm_head.weight", None),
]


def v_head_source_index(length, offset, block, n_k, n_v):
    """src/convert/v_heads.cpp: GGUF index i holds HF index src[i] (key-head-tiled from grouped order)."""
    r = n_v // n_k
    src = np.arange(length)
    for tiled in range(n_v):
        m, kh = tiled // n_k, tiled % n_k
        grouped = kh * r + m
        src[offset + tiled * block:offset + (tiled + 1) * block] = offset + grouped * block + np.arange(block)
    return src


def undo_v_heads(x, axis, hp):
    """x in PyTorch order (rows = dim 0 of the 2-D view, elements = last dim). Inverse of v_head_permutation."""
    n_k, n_v = hp["n_k"], hp["n_v"]
    if axis is None or n_k == n_v:
        return x
    qk, d_v = 2 * n_k * hp["d_k"], hp["d_v"]
    if axis in ("qkv_rows", "conv_channels", "rows", "row_per_head"):
        off = qk if axis in ("qkv_rows", "conv_channels") else 0
        blk = 1 if axis == "row_per_head" else d_v
        src = v_head_source_index(x.shape[0], off, blk, n_k, n_v)
        out = np.empty_like(x)
        out[src] = x
        return out
    blk = 1 if axis == "elements" else d_v
    src = v_head_source_index(x.shape[-1], 0, blk, n_k, n_v)
    out = np.empty_like(x)
    out[..., src] = x
    return out


def hparams(meta):
    a = meta["general.architecture"]
    if a != "qwen35":
        raise ValueError(f"general.architecture is {a!r}; this rebuilds qwen35 (Qwen3.5 hybrid) files only")
    g = lambda k, d=None: meta.get(f"{a}.{k}", d)  # noqa: E731
    hp = {"n_layer": g("block_count"), "n_embd": g("embedding_length"), "n_ff": g("feed_forward_length"),
          "n_head": g("attention.head_count"), "n_head_kv": g("attention.head_count_kv"),
          "head_dim": g("attention.key_length"), "ctx": g("context_length"),
          "eps": g("attention.layer_norm_rms_epsilon"), "theta": g("rope.freq_base"), "n_rot": g("rope.dimension_count"),
          "sections": g("rope.dimension_sections", [11, 11, 10, 0]), "interval": g("full_attention_interval", 4),
          "conv": g("ssm.conv_kernel"), "d_k": g("ssm.state_size"), "n_k": g("ssm.group_count"),
          "n_v": g("ssm.time_step_rank"), "d_inner": g("ssm.inner_size"), "n_nextn": g("nextn_predict_layers", 0)}
    hp["d_v"] = hp["d_inner"] // hp["n_v"]
    if hp["n_nextn"]:
        raise ValueError("the GGUF holds MTP layers; rebuilding them is not implemented")
    return hp


def f32_round(x):
    """Python float -> the nearest float32, as a short decimal (0.25, 1e-06: what a JSON config holds)."""
    f = float(np.float32(x))
    for digits in range(1, 18):
        s = float(f"{f:.{digits}g}")
        if float(np.float32(s)) == f:
            return s
    return f


def build_config(meta, hp, tied, n_vocab, dtype):
    layer_types = ["full_attention" if (i + 1) % hp["interval"] == 0 else "linear_attention"
                   for i in range(hp["n_layer"])]
    prf = hp["n_rot"] / hp["head_dim"]
    theta = f32_round(hp["theta"])
    eos = meta.get("tokenizer.ggml.eos_token_id")
    pad = meta.get("tokenizer.ggml.padding_token_id")
    bos = meta.get("tokenizer.ggml.bos_token_id") if meta.get("tokenizer.ggml.add_bos_token") else None
    return {
        "architectures": ["Qwen3_5ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": bos,
        "dtype": dtype,
        "eos_token_id": eos,
        "full_attention_interval": hp["interval"],
        "head_dim": hp["head_dim"],
        "hidden_act": "silu",
        "hidden_size": hp["n_embd"],
        "initializer_range": 0.02,
        "intermediate_size": hp["n_ff"],
        "layer_types": layer_types,
        "linear_conv_kernel_dim": hp["conv"],
        "linear_key_head_dim": hp["d_k"],
        "linear_num_key_heads": hp["n_k"],
        "linear_num_value_heads": hp["n_v"],
        "linear_value_head_dim": hp["d_v"],
        "max_position_embeddings": hp["ctx"],
        "model_type": "qwen3_5_text",
        "num_attention_heads": hp["n_head"],
        "num_hidden_layers": hp["n_layer"],
        "num_key_value_heads": hp["n_head_kv"],
        "pad_token_id": pad,
        "partial_rotary_factor": prf,
        "rms_norm_eps": f32_round(hp["eps"]),
        "rope_parameters": {"mrope_interleaved": True, "mrope_section": list(hp["sections"][:3]),
                            "partial_rotary_factor": prf, "rope_theta": theta, "rope_type": "default"},
        "tie_word_embeddings": tied,
        "transformers_version": "5.17.0",
        "use_cache": True,
        "vocab_size": n_vocab,
    }


def build_tokenizer(meta):
    """(tokenizer.json dict, tokenizer_config.json dict) of the HF fast tokenizer the GGUF's vocabulary came from."""
    if meta.get("tokenizer.ggml.model") != "gpt2":
        raise ValueError(f"tokenizer.ggml.model {meta.get('tokenizer.ggml.model')!r}: only byte-level BPE (gpt2)")
    pre = meta.get("tokenizer.ggml.pre")
    if pre not in PRE_PATTERNS:
        raise ValueError(f"tokenizer.ggml.pre {pre!r}: no known pre-tokenizer regex")
    toks, types, merges = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"], meta["tokenizer.ggml.merges"]
    vocab, added = {}, []
    for i, (t, ty) in enumerate(zip(toks, types)):
        if ty == TOKEN_NORMAL:
            vocab[t] = i
        elif ty in (TOKEN_CONTROL, TOKEN_USER_DEFINED):
            added.append({"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": ty == TOKEN_CONTROL})
        elif ty != TOKEN_UNUSED:
            raise ValueError(f"token {i} {t!r} has type {ty}")
    tj = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
          "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
              {"type": "Split", "pattern": {"Regex": PRE_PATTERNS[pre]}, "behavior": "Isolated", "invert": False},
              {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
          "post_processor": None,
          "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
          "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                    "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                    "vocab": vocab, "merges": [m.split(" ", 1) for m in merges]}}
    name = lambda key: toks[meta[key]] if key in meta else None  # noqa: E731
    decoder = {str(a["id"]): {k: a[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")}
               for a in added}
    mask = next((a["content"] for a in added if a["content"] == "<|mask|>"), None)
    cfg = {"add_bos_token": bool(meta.get("tokenizer.ggml.add_bos_token", False)), "add_prefix_space": False,
           "added_tokens_decoder": decoder, "bos_token": name("tokenizer.ggml.bos_token_id")
           if meta.get("tokenizer.ggml.add_bos_token") else None,
           "eos_token": name("tokenizer.ggml.eos_token_id"), "pad_token": name("tokenizer.ggml.padding_token_id"),
           "unk_token": None, "model_max_length": int(meta[f"{meta['general.architecture']}.context_length"]),
           "clean_up_tokenization_spaces": False}
    if mask:
        cfg["mask_token"] = mask
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    if "tokenizer.chat_template" in meta:
        cfg["chat_template"] = meta["tokenizer.chat_template"]
    return tj, cfg


def hf_tensors(g, hp):
    """HF name -> float32 numpy array, and HF name -> GGUF name."""
    out, src = {}, {}
    used = set()

    def take(gname, hname, op, axis):
        x = g.array(gname)
        if op == "add_one":
            x = (x.astype(np.float64) - 1.0).astype(np.float32)
        elif op == "neg_exp":
            x = np.log(-x.astype(np.float64)).astype(np.float32)
        if gname.endswith("ssm_conv1d.weight"):
            x = x[:, None, :]  # GGUF [K, CD] = numpy [CD, K] -> HF [CD, 1, K]
        x = undo_v_heads(x, axis, hp)
        out[hname], src[hname] = np.ascontiguousarray(x), gname
        used.add(gname)

    for gname, hname, op in GLOBAL_RULES:
        if gname in g.tensors:
            take(gname, hname, op, None)
    for i in range(hp["n_layer"]):
        for gs, hs, op, axis in LAYER_RULES:
            gname = f"blk.{i}.{gs}"
            if gname in g.tensors:
                take(gname, f"model.layers.{i}.{hs}", op, axis)
    left = sorted(set(g.tensors) - used)
    if left:
        raise ValueError(f"GGUF tensors with no HF name: {left}")
    return out, src


def to_bf16_bits(x):
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16  # round to nearest even
    return u.astype(np.uint16)


def write_safetensors(path, tensors, dtype="f32"):
    entries = []
    for name in sorted(tensors):
        x = tensors[name]
        raw = (to_bf16_bits(x) if dtype == "bf16" else np.ascontiguousarray(x, dtype="<f4")).tobytes()
        entries.append((name, "BF16" if dtype == "bf16" else "F32", x.shape, raw))
    safetensors_file.write(path, entries, {"format": "pt"})


def read_safetensors(path):
    out = {}
    for name, (dtype, shape, raw) in safetensors_file.read(path).items():
        if dtype == "BF16":
            x = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif dtype == "F16":
            x = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        elif dtype == "F32":
            x = np.frombuffer(raw, dtype="<f4")
        else:
            raise ValueError(f"{name}: dtype {dtype}")
        out[name] = x.reshape(shape)
    return out


def gguf_to_hf(gguf_path, out_dir, dtype="f32", log=print):
    """Writes the checkpoint folder; returns (config, {hf name: GGUF name}, GGUF object)."""
    g = GGUF(gguf_path)
    hp = hparams(g.meta)
    tensors, src = hf_tensors(g, hp)
    tied = "lm_head.weight" not in tensors
    n_vocab = tensors["model.embed_tokens.weight"].shape[0]
    os.makedirs(out_dir, exist_ok=True)
    cfg = build_config(g.meta, hp, tied, n_vocab, "float32" if dtype == "f32" else "bfloat16")
    with open(os.path.join(out_dir, "config.json"), "w") as fh:
        json.dump(cfg, fh, indent=2)
        fh.write("\n")
    eos = [g.meta["tokenizer.ggml.eos_token_id"]]
    # Generation also stops at <|endoftext|> (the padding token of our demo vocabulary), as the original had.
    if g.meta.get("tokenizer.ggml.padding_token_id") is not None:
        eos.append(g.meta["tokenizer.ggml.padding_token_id"])
    gen = {"do_sample": False, "eos_token_id": eos, "pad_token_id": g.meta.get("tokenizer.ggml.padding_token_id"),
           "transformers_version": "5.17.0"}
    with open(os.path.join(out_dir, "generation_config.json"), "w") as fh:
        json.dump(gen, fh, indent=2)
        fh.write("\n")
    tj, tc = build_tokenizer(g.meta)
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as fh:
        json.dump(tj, fh, ensure_ascii=False)
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as fh:
        json.dump(tc, fh, indent=1, ensure_ascii=False)
        fh.write("\n")
    write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors, dtype)
    log(f"gguf_to_hf: {gguf_path} -> {out_dir}: {len(tensors)} tensors ({dtype}), "
        f"{sum(x.size for x in tensors.values()):,} parameters, tied={tied}")
    return cfg, src, g


# ---------------------------------------------------------------------------------------------
# Checks against the checkpoint the GGUF was converted from
# ---------------------------------------------------------------------------------------------

# The quantizer rounds x / d_exact (d_exact = amax / 127) to q but stores d = f16(d_exact), whose relative error is
# at most 2^-11: |x - d q| <= d_exact / 2 + 127 |d_exact - d|, i.e. at most (0.5 + 127 * 2^-11) / (1 - 2^-11) d.
Q8_BOUND = (0.5 + 127 * 2.0 ** -11) / (1 - 2.0 ** -11)


def check_against(out_dir, orig_dir, g, src, log=print):
    """Every tensor vs the original: Q8_0 tensors within their block's quantization step (Q8_BOUND * d), float32
    ones to float32 rounding. Config and tokenizer files compared as JSON. Returns a report dict."""
    rec = read_safetensors(os.path.join(out_dir, "model.safetensors"))
    orig = read_safetensors(os.path.join(orig_dir, "model.safetensors"))
    rep = {"tensors": len(rec), "missing": sorted(set(orig) - set(rec)), "extra": sorted(set(rec) - set(orig)),
           "per_tensor": {}, "worst_q8_step_ratio": 0.0, "max_abs_f32": 0.0, "max_abs_q8": 0.0, "failures": []}
    for name in sorted(set(rec) & set(orig)):
        a, b = rec[name].astype(np.float64), orig[name].astype(np.float64)
        if a.shape != b.shape:
            rep["failures"].append(f"{name}: shape {a.shape} vs {b.shape}")
            continue
        diff = np.abs(a - b)
        d = g.q8_0_scales(src[name])
        if d is not None:
            step = np.repeat(d.reshape(-1, d.shape[-1]), 32, axis=1).reshape(a.shape).astype(np.float64)
            ratio = float((diff / np.maximum(step, 1e-30)).max())  # |error| / d
            rep["per_tensor"][name] = {"type": "q8_0", "max_abs": float(diff.max()), "max_err_over_d": ratio}
            rep["worst_q8_step_ratio"] = max(rep["worst_q8_step_ratio"], ratio)
            rep["max_abs_q8"] = max(rep["max_abs_q8"], float(diff.max()))
            if ratio > Q8_BOUND:
                rep["failures"].append(f"{name}: error {ratio:.4f} d > {Q8_BOUND:.4f} d")
        else:
            tol = 2e-7 * max(1.0, float(np.abs(b).max())) + 1e-7
            rep["per_tensor"][name] = {"type": "f32", "max_abs": float(diff.max())}
            rep["max_abs_f32"] = max(rep["max_abs_f32"], float(diff.max()))
            if diff.max() > tol:
                rep["failures"].append(f"{name}: f32 error {diff.max():.3e} > {tol:.1e}")
    if rep["missing"] or rep["extra"]:
        rep["failures"].append(f"missing {rep['missing']} extra {rep['extra']}")
    for fname in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        p, q = os.path.join(out_dir, fname), os.path.join(orig_dir, fname)
        if not os.path.exists(q):
            continue
        with open(p, encoding="utf-8") as fh:
            a = json.load(fh)
        with open(q, encoding="utf-8") as fh:
            b = json.load(fh)
        if fname == "config.json":
            a, b = dict(a), dict(b)
            a.pop("dtype", None)
            b.pop("dtype", None)
        keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k)) if isinstance(a, dict) else []
        rep[fname] = "equal" if a == b else f"differs in {keys}"
        if a != b:
            rep["failures"].append(f"{fname} differs in {keys}")
    log(f"check vs {orig_dir}: {len(rec)} tensors; Q8_0 worst |error| / d = {rep['worst_q8_step_ratio']:.4f} "
        f"(max |error| {rep['max_abs_q8']:.3e}); float32 tensors max |error| {rep['max_abs_f32']:.3e}; "
        + "; ".join(f"{f} {rep.get(f, 'absent')}" for f in ("config.json", "generation_config.json", "tokenizer.json",
                                                             "tokenizer_config.json")))
    for f in rep["failures"]:
        log(f"  FAIL {f}")
    return rep


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("gguf")
    ap.add_argument("out_dir")
    ap.add_argument("--dtype", choices=("f32", "bf16"), default="f32",
                    help="f32 (default) keeps the dequantized Q8_0 values exactly")
    ap.add_argument("--check", default="", help="ORIG_DIR: compare with the checkpoint the GGUF came from")
    ap.add_argument("--report", default="", help="write the --check report here (JSON)")
    args = ap.parse_args()
    _, src, g = gguf_to_hf(args.gguf, args.out_dir, args.dtype)
    if args.check:
        rep = check_against(args.out_dir, args.check, g, src)
        if args.report:
            with open(args.report, "w") as fh:
                json.dump(rep, fh, indent=1)
        sys.exit(1 if rep["failures"] else 0)


if __name__ == "__main__":
    main()
