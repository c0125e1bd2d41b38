#!/usr/bin/env python3
"""Tiny random Qwen3.5 / Qwen3 checkpoints plus float64 golden logits from Hugging Face transformers.

For every variant in VARIANTS this writes OUT/<name>/:
  config.json, model.safetensors (float32), generation_config.json (if transformers writes one),
  logits_<i>.f64  raw little-endian float64, row-major [T x vocab], full-sequence forward of sequence i,
  golden.json     token ids, shapes, config, versions, full-vs-incremental differences, sensitivity checks.
and OUT/manifest.json (one line per variant). See README.md beside this file.

Precision: stock transformers keeps several islands in float32 even in a float64 model (RMSNorm, the
gated-DeltaNet kernels, softmax, RoPE tables). With --precision exact-f64 (default) the golden logits come
from a copy of the transformers modelling module in which only those dtypes are rewritten to float64;
the stock float64 forward is still run and its difference is recorded.
"""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import argparse
import copy
import datetime
import importlib
import importlib.util
import inspect
import json
import platform
import re
import sys
import time
import types
from pathlib import Path

import safetensors
import torch
import transformers
from safetensors.torch import load_file

LENGTHS = (7, 33, 70)  # 70 > 64 crosses the gated-DeltaNet chunk size
MAX_DIR_BYTES = 4 * 1024 * 1024


def rope(theta, prf, head_dim):
    n = int(head_dim * prf) // 2  # rotated pairs; text-only input makes the mrope split irrelevant
    return {"rope_type": "default", "rope_theta": theta, "partial_rotary_factor": prf,
            "mrope_section": [n // 3 + (n % 3 > 0), n // 3 + (n % 3 > 1), n // 3], "mrope_interleaved": True}


def q35(layers, interval, tied, nk, nv, dk, dv, head_dim, prf, theta=1e7, vocab=512, hidden=64, ffn=128,
        heads=4, kv=2):
    return dict(arch="qwen3_5", vocab_size=vocab, hidden_size=hidden, intermediate_size=ffn,
                num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv, head_dim=head_dim,
                layer_types=["full_attention" if (i + 1) % interval == 0 else "linear_attention"
                             for i in range(layers)],
                full_attention_interval=interval, linear_num_key_heads=nk, linear_num_value_heads=nv,
                linear_key_head_dim=dk, linear_value_head_dim=dv, linear_conv_kernel_dim=4,
                rope_parameters=rope(theta, prf, head_dim), partial_rotary_factor=prf, tie_word_embeddings=tied, rms_norm_eps=1e-6,
                max_position_embeddings=4096)


def q3(layers, tied, head_dim, theta, vocab, hidden, ffn, heads, kv):
    return dict(arch="qwen3", vocab_size=vocab, hidden_size=hidden, intermediate_size=ffn,
                num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv, head_dim=head_dim,
                rope_parameters={"rope_type": "default", "rope_theta": theta}, tie_word_embeddings=tied,
                rms_norm_eps=1e-6, max_position_embeddings=4096)


# name: (seed, what it covers, spec)
VARIANTS = {
    "q35_tied_i4": (101, "tied; attention every 4th layer; n_v = 2 n_k; partial rotary 0.25",
                    q35(4, 4, True, nk=2, nv=4, dk=32, dv=32, head_dim=32, prf=0.25)),
    "q35_untied_i2_nv6": (102, "untied; attention every 2nd layer; n_v = 3 n_k; partial rotary 0.5, theta 1e4; MQA",
                          q35(4, 2, False, nk=2, nv=6, dk=16, dv=16, head_dim=32, prf=0.5, theta=1e4, kv=1)),
    "q35_dk32_dv64": (103, "untied; linear key head dim 32 != value head dim 64; head_dim 64",
                      q35(4, 4, False, nk=2, nv=4, dk=32, dv=64, head_dim=64, prf=0.25)),
    "q35_deep8": (104, "8 layers (two groups of 4); tied; n_v = n_k like 0.8B; vocab 1000",
                  q35(8, 4, True, nk=4, nv=4, dk=16, dv=16, head_dim=32, prf=0.25, vocab=1000, ffn=96)),
    "q3_tied": (201, "Qwen3; tied; head_dim 32 != hidden/heads 16",
                q3(3, True, head_dim=32, theta=1e6, vocab=512, hidden=64, ffn=128, heads=4, kv=2)),
    "q3_untied": (202, "Qwen3; untied; head_dim 24 != hidden/heads 16; theta 1e4; vocab 768",
                  q3(2, False, head_dim=24, theta=1e4, vocab=768, hidden=96, ffn=160, heads=6, kv=3)),
}

CLASSES = {"qwen3_5": ("Qwen3_5TextConfig", "Qwen3_5ForCausalLM", "transformers.models.qwen3_5.modeling_qwen3_5"),
           "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", "transformers.models.qwen3.modeling_qwen3")}


_EXACT = {}


def exact_f64_module(modname):
    """Copy of a transformers modelling module with its float32 islands rewritten to float64.

    Only `torch.float32` / `torch.float` and `.float()` change; the copy keeps the module's name (for transformers'
    name-based lookups) but is not put in sys.modules, so the stock classes stay untouched."""
    if modname not in _EXACT:
        mod = importlib.import_module(modname)
        src = re.sub(r"torch\.float(32)?\b", "torch.float64", inspect.getsource(mod)).replace(".float()", ".double()")
        new = types.ModuleType(modname)
        new.__package__, new.__file__ = mod.__package__, mod.__file__
        exec(compile(src, mod.__file__, "exec"), new.__dict__)
        _EXACT[modname] = new
    return _EXACT[modname]


def perturb(model, seed, zero_centred):
    """Overwrite every parameter from a fixed seed so that no convention is invisible in the logits."""
    g = torch.Generator().manual_seed(seed)

    def u(p, lo, hi):
        return torch.rand(p.shape, generator=g) * (hi - lo) + lo

    def n(p, std):
        return torch.randn(p.shape, generator=g) * std

    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("A_log"):  # decay rate exp(A_log) in [0.02, 0.5]: some heads keep state past 64
                v = u(p, 0.02, 0.5).log()
            elif name.endswith("dt_bias"):
                v = u(p, -2.0, 0.5)
            elif name.endswith("conv1d.weight"):
                v = n(p, 0.5)
            elif name.endswith("linear_attn.norm.weight"):  # gated norm: plain scale
                v = u(p, 0.6, 1.4)
            elif "norm" in name:  # Qwen3.5: zero-centred (scale 1 + w); Qwen3: plain scale w
                v = u(p, -0.4, 0.4) if zero_centred else u(p, 0.6, 1.4)
            elif name.endswith("embed_tokens.weight"):
                v = n(p, 0.5)
            elif name.endswith("in_proj_a.weight"):
                v = n(p, 0.5 / p.shape[1] ** 0.5)
            elif p.ndim == 2:
                v = n(p, 1.0 / p.shape[1] ** 0.5)
            else:
                raise ValueError(f"no perturbation rule for {name} {tuple(p.shape)}")
            p.copy_(v)


def tokens(seed, vocab):
    g = torch.Generator().manual_seed(seed)
    seqs = [torch.randint(0, vocab, (t,), generator=g) for t in LENGTHS]
    seqs[0][0], seqs[0][-1] = 0, vocab - 1  # first and last embedding rows
    return seqs


def full(model, ids):
    return model(input_ids=ids[None], use_cache=False).logits[0]


def cached(model, ids, splits):
    """Logits through the KV / recurrent cache, feeding ids in pieces that start at `splits`."""
    bounds = list(splits) + [len(ids)]
    rows, cache = [], None
    for a, b in zip(bounds, bounds[1:]):
        out = model(input_ids=ids[None, a:b], position_ids=torch.arange(a, b)[None], past_key_values=cache,
                    use_cache=True)
        cache = out.past_key_values
        rows.append(out.logits[0])
    return torch.cat(rows)


def incremental(model, ids):
    return cached(model, ids, range(len(ids)))


def split_prefill(model, ids):
    return cached(model, ids, [0, (len(ids) + 1) // 2 + 2])


def maxdiff(a, b):
    return float((a - b).abs().max())


def load(cls, path):
    m = cls.from_pretrained(path, dtype=torch.float64, attn_implementation="eager").eval()
    if any(p.dtype != torch.float64 for p in m.parameters()):
        m = m.double()
    return m


def refresh_inv_freq(model):
    """Recompute RoPE inverse frequencies in float64 (the buffer may have been built or stored in float32)."""
    worst = 0.0
    for mod in model.modules():
        if hasattr(mod, "inv_freq") and hasattr(mod, "compute_default_rope_parameters"):
            inv, _ = mod.compute_default_rope_parameters(mod.config)
            inv = inv.to(torch.float64)
            worst = max(worst, maxdiff(mod.inv_freq.double(), inv))
            mod.inv_freq = inv
            mod.original_inv_freq = inv.clone()
    return worst


def gdn_layers(model):
    return [layer.linear_attn for layer in model.model.layers if hasattr(layer, "linear_attn")]


def tile_v_heads(model):
    """Simulate an engine that pairs v head h with q/k head h % n_k (GGUF order) on HF-ordered weights.

    That equals HF's consecutive grouping after moving v head h to slot (h % n_k) * r + h // n_k."""
    for la in gdn_layers(model):
        nk, nv, dv, kd = la.num_k_heads, la.num_v_heads, la.head_v_dim, la.key_dim
        r = nv // nk
        perm = sorted(range(nv), key=lambda h: (h % nk) * r + h // nk)  # perm[slot] = old head

        def rows(w, off=0):
            blocks = w[off:off + nv * dv].reshape(nv, dv, *w.shape[1:])
            w[off:off + nv * dv] = blocks[perm].reshape(nv * dv, *w.shape[1:])

        rows(la.in_proj_qkv.weight, 2 * kd)
        rows(la.conv1d.weight, 2 * kd)
        rows(la.in_proj_z.weight)
        for p in (la.in_proj_b.weight, la.in_proj_a.weight, la.dt_bias, la.A_log):
            p.copy_(p[perm].clone())
        w = la.out_proj.weight
        w.copy_(w.reshape(w.shape[0], nv, dv)[:, perm].reshape(w.shape[0], nv * dv).clone())


def sensitivity(model, ids, ref, arch):
    """Max |logit change| on the longest sequence when a convention is got wrong: must dwarf the tolerance."""
    def trial(edit):
        m = copy.deepcopy(model)
        with torch.no_grad():
            edit(m)
            return maxdiff(full(m, ids), ref)

    def norms(m, kind):
        return [mod for mod in m.modules() if type(mod).__name__ == kind]

    if arch == "qwen3":
        return {"rmsnorm_with_plus1": trial(lambda m: [x.weight.add_(1) for x in norms(m, "Qwen3RMSNorm")])}
    res = {
        "zero_centred_norm_without_plus1":
            trial(lambda m: [x.weight.sub_(1) for x in norms(m, "Qwen3_5RMSNorm")]),
        "gated_norm_with_plus1": trial(lambda m: [la.norm.weight.add_(1) for la in gdn_layers(m)]),
        "conv_taps_reversed": trial(lambda m: [la.conv1d.weight.copy_(la.conv1d.weight.flip(-1))
                                               for la in gdn_layers(m)]),
    }
    if model.config.linear_num_value_heads > model.config.linear_num_key_heads:
        res["v_heads_tiled_grouping"] = trial(tile_v_heads)
    return res


def gdn_path(modeling):
    from transformers.utils import import_utils
    info = {"device": "cpu"}
    for flag in ("is_flash_linear_attention_available", "is_causal_conv1d_available"):
        fn = getattr(import_utils, flag, None)
        info[flag] = bool(fn()) if fn else None
    info["kernels_package"] = importlib.util.find_spec("kernels") is not None
    for fn in ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule", "causal_conv1d_fn"):
        f = getattr(modeling, fn, None)
        info[fn] = f"{getattr(f, '__module__', '?')}.{getattr(f, '__qualname__', '?')}"
    return info


def make_variant(name, seed, about, spec, out, precision, meta):
    spec = dict(spec)
    arch = spec.pop("arch")
    cfg_name, cls_name, modname = CLASSES[arch]
    cfg = getattr(transformers, cfg_name)(**spec)
    if arch == "qwen3_5":
        assert cfg.layer_types == spec["layer_types"], cfg.layer_types
        assert cfg.rope_parameters["partial_rotary_factor"] == spec["rope_parameters"]["partial_rotary_factor"]
        for k in ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim"):
            assert getattr(cfg, k) == spec[k], k
    assert cfg.head_dim == spec["head_dim"] and cfg.tie_word_embeddings == spec["tie_word_embeddings"]

    torch.manual_seed(seed)
    stock_cls = getattr(transformers, cls_name)
    model = stock_cls(cfg).float().eval()
    perturb(model, seed, zero_centred=(arch == "qwen3_5"))
    d = out / name
    d.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(d)

    saved = load_file(d / "model.safetensors")
    sd = model.state_dict()
    assert set(saved) <= set(sd), set(saved) - set(sd)
    assert set(sd) - set(saved) <= ({"lm_head.weight"} if cfg.tie_word_embeddings else set()), set(sd) - set(saved)
    assert all(torch.equal(saved[k], sd[k]) for k in saved)

    stock = load(stock_cls, d)
    exact, is_exact, exact_note = stock, False, "stock transformers in float64 (float32 islands kept)"
    if precision == "exact-f64":
        try:
            exact = load(getattr(exact_f64_module(modname), cls_name), d)
            is_exact = True
            exact_note = f"exact float64 (float32 islands rewritten); inv_freq refresh diff {refresh_inv_freq(exact):.3e}"
        except Exception as e:  # keep going with the stock model, and say so
            exact_note = f"exact-f64 patch FAILED ({type(e).__name__}: {e}); stock float64 used"
            print("  " + exact_note)
    esd = exact.state_dict()
    for k, v in saved.items():
        assert torch.equal(esd[k], v.double()), k

    seqs = tokens(seed + 1000, cfg.vocab_size)
    recs, worst = [], 0.0
    with torch.no_grad():
        for i, ids in enumerate(seqs):
            ref = full(exact, ids)
            assert ref.shape == (len(ids), cfg.vocab_size) and torch.isfinite(ref).all()
            fname = f"logits_{i}.f64"
            (d / fname).write_bytes(ref.numpy().astype("<f8").tobytes())
            stock_full = full(stock, ids)
            diffs = {"full_vs_incremental": maxdiff(incremental(exact, ids), ref),
                     "full_vs_split_prefill": maxdiff(split_prefill(exact, ids), ref),
                     "full_vs_stock_full": maxdiff(stock_full, ref),
                     "stock_full_vs_stock_incremental": maxdiff(incremental(stock, ids), stock_full)}
            worst = max(worst, diffs["full_vs_incremental"])
            recs.append({"index": i, "length": len(ids), "token_ids": ids.tolist(), "logits_file": fname,
                         "shape": [len(ids), cfg.vocab_size], "dtype": "float64", "byte_order": "little",
                         "max_abs_logit": float(ref.abs().max()), "logit_std": float(ref.std()),
                         "distinct_argmax": len(set(ref.argmax(-1).tolist())), "max_abs_diff": diffs})
        sens = sensitivity(exact, seqs[-1], full(exact, seqs[-1]), arch)

    files = sorted({p.name for p in d.iterdir()} | {"golden.json"})
    golden = {
        "name": name, "about": about, "arch": arch, "hf_class": cls_name, "seed": seed,
        "precision": exact_note, "exact_f64": is_exact, "logits": "full-sequence forward, float64 little-endian, row-major [T x vocab]",
        "max_full_vs_incremental_diff": worst,
        "config": json.loads((d / "config.json").read_text()),
        "tensors": [{"name": k, "shape": list(v.shape), "dtype": str(v.dtype).replace("torch.", "")}
                    for k, v in sorted(saved.items())],
        "sequences": recs, "sensitivity_longest_sequence": sens, "files": files, **meta,
    }
    if arch == "qwen3_5":
        golden["gdn_path"] = gdn_path(importlib.import_module(modname))
    (d / "golden.json").write_text(json.dumps(golden, indent=1) + "\n")
    size = sum(p.stat().st_size for p in d.iterdir())
    assert size < MAX_DIR_BYTES, f"{name} is {size} bytes"
    return {"name": name, "about": about, "bytes": size, "max_full_vs_incremental_diff": worst,
            "max_full_vs_stock_full": max(r["max_abs_diff"]["full_vs_stock_full"] for r in recs),
            "max_stock_incremental_diff": max(r["max_abs_diff"]["stock_full_vs_stock_incremental"] for r in recs),
            "max_split_prefill_diff": max(r["max_abs_diff"]["full_vs_split_prefill"] for r in recs),
            "max_abs_logit": max(r["max_abs_logit"] for r in recs), "sensitivity": sens,
            "precision": exact_note, "exact_f64": is_exact,
            "params": sum(p.numel() for p in model.parameters())}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "hf-golden-out"))
    ap.add_argument("--precision", choices=["exact-f64", "stock-f64"], default="exact-f64")
    ap.add_argument("--only", nargs="*", help="variant names (default: all)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    meta = {"generated_by": {
        "command": "python3 train/golden/make_hf_golden.py " + " ".join(sys.argv[1:]),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "transformers": transformers.__version__, "torch": torch.__version__,
        "safetensors": safetensors.__version__, "python": platform.python_version(),
        "platform": platform.platform(), "compute_device": "cpu"}}
    print(json.dumps(meta["generated_by"]))
    results, failed = [], []
    for name, (seed, about, spec) in VARIANTS.items():
        if args.only and name not in args.only:
            continue
        t0 = time.time()
        try:
            r = make_variant(name, seed, about, spec, out, args.precision, meta)
        except Exception as e:
            import traceback
            traceback.print_exc()
            r = {"name": name, "about": about, "error": f"{type(e).__name__}: {e}"}
        r["seconds"] = round(time.time() - t0, 2)
        results.append(r)
        print(json.dumps(r))
        tol = 1e-9 if r.get("exact_f64") else 1e-4
        if "error" in r or r["max_full_vs_incremental_diff"] > tol * max(1.0, r["max_abs_logit"]):
            failed.append(name)
    (out / "manifest.json").write_text(json.dumps({**meta, "variants": results}, indent=1) + "\n")
    total = sum(r.get("bytes", 0) for r in results)
    print(f"total {total} bytes; {len(results) - len(failed)} passed, {len(failed)} failed {failed}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
