"""Training the demo target and scorer with transformers' Qwen3_5ForCausalLM (time-budgeted).

The learning-rate schedule and the sequence-length phases follow the fraction of the wall-clock budget
spent (or of --steps when given), so the same code serves a 20-second smoke test and the real run.
"""
import copy
import json
import math
import os
import time

import numpy as np
import torch


def q35_config(vocab_rows, hidden, layers, interval, ffn, heads, kv, head_dim, nk, nv, dk, dv, theta, max_pos,
               eos_id, pad_id):
    import transformers
    n = int(head_dim * 0.25) // 2
    spec = dict(vocab_size=vocab_rows, hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers,
                num_attention_heads=heads, num_key_value_heads=kv, head_dim=head_dim,
                layer_types=["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers)],
                full_attention_interval=interval, linear_num_key_heads=nk, linear_num_value_heads=nv,
                linear_key_head_dim=dk, linear_value_head_dim=dv, linear_conv_kernel_dim=4,
                rope_parameters={"rope_type": "default", "rope_theta": theta, "partial_rotary_factor": 0.25,
                                 "mrope_section": [n // 3 + (n % 3 > 0), n // 3 + (n % 3 > 1), n // 3],
                                 "mrope_interleaved": True},
                partial_rotary_factor=0.25, tie_word_embeddings=True, rms_norm_eps=1e-6,
                max_position_embeddings=max_pos, eos_token_id=eos_id, pad_token_id=pad_id, bos_token_id=None)
    cfg = transformers.Qwen3_5TextConfig(**spec)
    assert cfg.layer_types == spec["layer_types"] and cfg.head_dim == head_dim and cfg.tie_word_embeddings
    return cfg


# name -> shape. The target: 8 layers, attention every 4th (2 gated-attention + 6 Gated DeltaNet layers).
SHAPES = {
    "target": dict(hidden=384, layers=8, interval=4, ffn=1024, heads=6, kv=2, head_dim=64, nk=6, nv=6, dk=64, dv=64),
    "scorer": dict(hidden=256, layers=4, interval=2, ffn=640, heads=4, kv=2, head_dim=64, nk=4, nv=4, dk=64, dv=64),
    "smoke": dict(hidden=64, layers=8, interval=4, ffn=128, heads=2, kv=1, head_dim=32, nk=2, nv=2, dk=32, dv=32),
}


def make_model(shape, vocab_rows, theta, max_pos, eos_id, pad_id, seed, device):
    import transformers
    cfg = q35_config(vocab_rows, theta=theta, max_pos=max_pos, eos_id=eos_id, pad_id=pad_id, **SHAPES[shape])
    try:
        cfg._attn_implementation = "sdpa"
    except Exception:  # noqa: BLE001 - left to transformers' default where the config refuses it
        pass
    torch.manual_seed(seed)
    model = transformers.Qwen3_5ForCausalLM(cfg).float()
    return model.to(device)


def n_params(model):
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------------------------------------
# Data: token streams and batches
# ---------------------------------------------------------------------------------------------

class Streams:
    """Flat token streams (int32) for code/docs and chat text, plus whole retrieval items."""

    def __init__(self, code, chat, retrieval, filler_id):
        self.code = np.asarray(code, dtype=np.int32)
        self.chat = np.asarray(chat, dtype=np.int32)
        self.retrieval = [np.asarray(r, dtype=np.int32) for r in retrieval]
        self.filler_id = filler_id

    @staticmethod
    def flat(arrays):
        return np.concatenate(arrays).astype(np.int32) if len(arrays) else np.zeros(0, dtype=np.int32)

    def window(self, stream, seq, rng):
        s = int(rng.integers(0, len(stream) - seq))
        return stream[s:s + seq]

    def row(self, seq, rng, p_chat, p_retrieval):
        u = rng.random()
        if self.retrieval and u < p_retrieval:
            fits = None
            for _ in range(8):
                r = self.retrieval[int(rng.integers(len(self.retrieval)))]
                if len(r) <= seq:
                    fits = r
                    break
            if fits is not None:
                rest = self.window(self.code, seq - len(fits), rng) if seq > len(fits) else fits[:0]
                return np.concatenate([fits, rest])
        if len(self.chat) > seq and u < p_retrieval + p_chat:
            return self.window(self.chat, seq, rng)
        return self.window(self.code, seq, rng)

    def batch(self, bs, seq, rng, p_chat, p_retrieval):
        return np.stack([self.row(seq, rng, p_chat, p_retrieval) for _ in range(bs)])


# Phases by fraction of the budget: (end fraction, seq, batch, p_chat, p_retrieval)
PHASES = [(0.70, 1024, 64, 0.22, 0.0), (0.88, 2048, 32, 0.22, 0.10), (1.0, 4096, 16, 0.15, 0.45)]
SMOKE_PHASES = [(0.34, 256, 2, 0.3, 0.0), (0.67, 512, 2, 0.3, 0.3), (1.0, 1024, 2, 0.2, 0.5)]


def lr_at(frac, peak, warmup=0.04, floor=0.1):
    if frac < warmup:
        return peak * frac / warmup
    p = min(1.0, (frac - warmup) / (1 - warmup))
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * p)))


def train(model, streams, *, seconds=None, steps=None, phases=PHASES, peak_lr=2e-3, seed=0, log=print,
          log_every=25, batch_scale=1.0):
    """Train until the wall-clock budget (or step count) is used. Returns a record of the run."""
    assert (seconds is None) != (steps is None)
    device = next(model.parameters()).device
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=peak_lr, betas=(0.9, 0.95), eps=1e-8, fused=device.type == "cuda")
    rng = np.random.default_rng(seed)
    model.train()
    t0 = time.time()
    step, tokens, hist = 0, 0, []
    phase_tokens = {}
    phase_time = {}
    last_t = t0
    while True:
        frac = (time.time() - t0) / seconds if seconds else step / steps
        if frac >= 1.0:
            break
        end, seq, bs, p_chat, p_ret = next(p for p in phases if frac < p[0])
        bs = max(1, int(bs * batch_scale))
        lr = lr_at(frac, peak_lr)
        for g in opt.param_groups:
            g["lr"] = lr
        x = torch.from_numpy(streams.batch(bs, seq, rng, p_chat, p_ret)).to(device=device, dtype=torch.long,
                                                                             non_blocking=True)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = model(input_ids=x, labels=x, use_cache=False).loss
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        tokens += bs * seq
        phase_tokens[seq] = phase_tokens.get(seq, 0) + bs * seq
        now = time.time()
        phase_time[seq] = phase_time.get(seq, 0.0) + (now - last_t)
        last_t = now
        if step % log_every == 0 or step == 1:
            rec = {"step": step, "t": round(now - t0, 1), "seq": seq, "bs": bs, "lr": round(lr, 6),
                   "loss": round(float(loss), 4), "gnorm": round(float(gn), 3), "tokens": tokens}
            hist.append(rec)
            log(json.dumps(rec))
    if device.type == "cuda":
        torch.cuda.synchronize()
    wall = time.time() - t0
    return {"steps": step, "tokens": tokens, "seconds": round(wall, 1), "tokens_per_s": round(tokens / wall),
            "tokens_by_seq": phase_tokens,
            "tokens_per_s_by_seq": {k: round(phase_tokens[k] / max(phase_time[k], 1e-9)) for k in phase_tokens},
            "final_logged_loss": hist[-1]["loss"] if hist else None, "history": hist,
            "peak_lr": peak_lr, "phases": phases, "seed": seed}


@torch.no_grad()
def evaluate(model, windows, bs=16):
    """Mean next-token loss (nats) over the given [n, seq] windows."""
    device = next(model.parameters()).device
    model.eval()
    tot, n = 0.0, 0
    for i in range(0, len(windows), bs):
        x = torch.from_numpy(np.asarray(windows[i:i + bs])).to(device=device, dtype=torch.long)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            logits = model(input_ids=x, use_cache=False).logits.float()
        l = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1),
                                              reduction="sum")
        tot += float(l)
        n += x[:, 1:].numel()
    model.train()
    return tot / n


def eval_windows(stream, seq, n, seed):
    rng = np.random.default_rng(seed)
    if len(stream) <= seq:
        return []
    return [stream[s:s + seq] for s in rng.integers(0, len(stream) - seq, size=n)]


def save_hf(model, out_dir, dtype=torch.bfloat16, generation_eos=None, pad_id=None):
    """save_pretrained in bf16 (one safetensors file) plus a generation_config with the chat stop ids."""
    import transformers
    os.makedirs(out_dir, exist_ok=True)
    copy.deepcopy(model).to(dtype).save_pretrained(out_dir)
    if generation_eos is not None:
        gc = transformers.GenerationConfig(eos_token_id=generation_eos, pad_token_id=pad_id, do_sample=False)
        gc.save_pretrained(out_dir)
    return out_dir
