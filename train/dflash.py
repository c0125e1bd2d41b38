"""DFlash block-diffusion drafter for the demo target: model, target-feature capture, greedy generation,
training with random anchors and decayed position weights, tau measurement, and the Hugging Face layout.

Drafter math (the contract with our C++ forward; see train/README.md):
  f_t   = RMSNorm(fc . concat(h_l1(t), ..., h_ln(t))) * hidden_norm.weight       (h_l = output of target layer l)
  block = [anchor, MASK x (B-1)] embedded with the target's embedding
  layer:  xn = RMSNorm(x) * input_layernorm;  Q = q_norm(q_proj(xn)) (block rows only);
          K = k_norm(k_proj([f_0..f_{c-1}; xn])),  V = v_proj([f_0..f_{c-1}; xn]);
          NeoX RoPE over the whole head_dim: Q at positions c..c+B-1, K at 0..c+B-1;
          softmax(Q K^T / sqrt(head_dim)) V with no mask (GQA); x += o_proj(.); x += mlp(RMSNorm(x) * post_attention_layernorm)
  out = RMSNorm(x) * norm.weight -> the target's LM head; row k (1..B-1) predicts the token at anchor + k.
RMSNorm weights are plain multipliers (Qwen3 convention). In training, many blocks share one sequence and a
mask gives each block exactly the view above (context rows j < anchor position, all rows of its own block).
"""
import json
import math
import os
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import safetensors_file


@dataclass
class DFlashConfig:
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    target_layer_ids: list
    mask_token_id: int
    num_target_layers: int  # depth of the target model
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1e5
    max_position_embeddings: int = 4096
    block_size: int = 16

    def hf_json(self):
        return {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": self.hidden_size,
                "num_hidden_layers": self.num_hidden_layers, "num_attention_heads": self.num_attention_heads,
                "num_key_value_heads": self.num_key_value_heads, "head_dim": self.head_dim,
                "intermediate_size": self.intermediate_size, "hidden_act": "silu", "rms_norm_eps": self.rms_norm_eps,
                "rope_theta": self.rope_theta, "rope_scaling": None, "attention_bias": False,
                "max_position_embeddings": self.max_position_embeddings, "vocab_size": self.vocab_size,
                "tie_word_embeddings": False, "block_size": self.block_size,
                "num_target_layers": self.num_target_layers, "dtype": "bfloat16",
                "dflash_config": {"mask_token_id": self.mask_token_id, "target_layer_ids": list(self.target_layer_ids)}}

    @staticmethod
    def from_hf_json(j):
        return DFlashConfig(hidden_size=j["hidden_size"], num_hidden_layers=j["num_hidden_layers"],
                            num_attention_heads=j["num_attention_heads"], num_key_value_heads=j["num_key_value_heads"],
                            head_dim=j["head_dim"], intermediate_size=j["intermediate_size"], vocab_size=j["vocab_size"],
                            target_layer_ids=j["dflash_config"]["target_layer_ids"],
                            mask_token_id=j["dflash_config"]["mask_token_id"], num_target_layers=j["num_target_layers"],
                            rms_norm_eps=j["rms_norm_eps"], rope_theta=j["rope_theta"],
                            max_position_embeddings=j["max_position_embeddings"], block_size=j["block_size"])


def spread_layer_ids(n_layers, n):
    """round(linspace(1, L-3, n)) as in the DFlash recipe (0-indexed 'output of decoder layer i')."""
    lo, hi = 1, max(1, n_layers - 3)
    return [int(round(lo + (hi - lo) * i / max(1, n - 1))) for i in range(n)]


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dt = x.dtype
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(dt)


def rope_cos_sin(pos, head_dim, theta):
    """cos/sin [..., head_dim] for integer positions (NeoX layout: the two halves share frequencies)."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=pos.device, dtype=torch.float64) / head_dim))
    ang = pos.to(torch.float64)[..., None] * inv
    emb = torch.cat([ang, ang], dim=-1)
    return emb.cos().float(), emb.sin().float()


def apply_rope(x, cos, sin):
    h = x.shape[-1] // 2
    xf = x.float()
    rot = torch.cat([-xf[..., h:], xf[..., :h]], dim=-1)
    return (xf * cos + rot * sin).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, c: DFlashConfig):
        super().__init__()
        self.h, self.kv, self.hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.q_proj = nn.Linear(c.hidden_size, self.h * self.hd, bias=False)
        self.k_proj = nn.Linear(c.hidden_size, self.kv * self.hd, bias=False)
        self.v_proj = nn.Linear(c.hidden_size, self.kv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.h * self.hd, c.hidden_size, bias=False)
        self.q_norm = RMSNorm(self.hd, c.rms_norm_eps)
        self.k_norm = RMSNorm(self.hd, c.rms_norm_eps)

    def forward(self, xn, ctx, rq, rc, mask):
        """xn [N, M, D] normed block rows; ctx [N, T, D] fused context; rq/rc (cos, sin) for block/context
        positions, [N or 1, M or T, hd]; mask [N, M, T+M] bool (True = may attend) or None (no mask)."""
        N, M, _ = xn.shape
        T = ctx.shape[1]
        q = self.q_norm(self.q_proj(xn).view(N, M, self.h, self.hd))
        kb = self.k_norm(self.k_proj(xn).view(N, M, self.kv, self.hd))
        kc = self.k_norm(self.k_proj(ctx).view(ctx.shape[0], T, self.kv, self.hd))
        vb = self.v_proj(xn).view(N, M, self.kv, self.hd)
        vc = self.v_proj(ctx).view(ctx.shape[0], T, self.kv, self.hd)
        q = apply_rope(q, rq[0][:, :, None], rq[1][:, :, None])
        kb = apply_rope(kb, rq[0][:, :, None], rq[1][:, :, None])
        kc = apply_rope(kc, rc[0][:, :, None], rc[1][:, :, None])
        if kc.shape[0] != N:
            kc, vc = kc.expand(N, -1, -1, -1), vc.expand(N, -1, -1, -1)
        dt = vb.dtype
        k = torch.cat([kc.to(dt), kb.to(dt)], 1).transpose(1, 2)
        v = torch.cat([vc.to(dt), vb], 1).transpose(1, 2)
        q = q.to(dt).transpose(1, 2)
        rep = self.h // self.kv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        am = None if mask is None else mask[:, None]
        if hasattr(F, "scaled_dot_product_attention"):
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=am)
        else:  # torch < 2.0 (local checks only)
            s = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(self.hd)
            if am is not None:
                s = s.masked_fill(~am, float("-inf"))
            o = (s.softmax(-1) @ v.float()).to(dt)
        return self.o_proj(o.transpose(1, 2).reshape(N, M, self.h * self.hd))


class MLP(nn.Module):
    def __init__(self, c: DFlashConfig):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c: DFlashConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = MLP(c)

    def forward(self, x, ctx, rq, rc, mask):
        x = x + self.self_attn(self.input_layernorm(x), ctx, rq, rc, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class DFlashDrafter(nn.Module):
    """Parameter names are the published Hugging Face layout (no embedding, no LM head)."""

    def __init__(self, c: DFlashConfig):
        super().__init__()
        self.config = c
        n = len(c.target_layer_ids)
        self.fc = nn.Linear(n * c.hidden_size, c.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.layers = nn.ModuleList([Layer(c) for _ in range(c.num_hidden_layers)])
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)

    def init_weights(self, seed, std=0.02):
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if p.ndim == 2:
                    p.copy_(torch.randn(p.shape, generator=g) * std)
                else:
                    p.fill_(1.0)

    def fuse(self, feats):
        """feats [..., n*D] concatenated target layer outputs -> fused context features [..., D]."""
        return self.hidden_norm(self.fc(feats))

    def forward(self, ctx, x, blk_pos, mask):
        """ctx [N, T, D] fused features (positions 0..T-1); x [N, M, D] block embeddings at positions blk_pos [N, M];
        mask [N, M, T+M] or None. Returns final-normed hidden states [N, M, D]."""
        c = self.config
        T = ctx.shape[1]
        rq = rope_cos_sin(blk_pos, c.head_dim, c.rope_theta)
        rc = rope_cos_sin(torch.arange(T, device=ctx.device)[None], c.head_dim, c.rope_theta)
        for layer in self.layers:
            x = layer(x, ctx, rq, rc, mask)
        return self.norm(x)


# ---------------------------------------------------------------------------------------------
# Target side: features, embedding, LM head, greedy generation
# ---------------------------------------------------------------------------------------------

class TargetTap:
    """Captures the outputs of the chosen decoder layers of a transformers causal LM during its forward."""

    def __init__(self, target, layer_ids):
        self.target, self.layer_ids, self.out = target, list(layer_ids), {}
        layers = target.model.layers
        self.handles = [layers[i].register_forward_hook(self._hook(i)) for i in self.layer_ids]

    def _hook(self, i):
        def f(mod, inp, out):
            self.out[i] = out[0] if isinstance(out, (tuple, list)) else out
        return f

    @torch.no_grad()
    def features(self, ids, autocast=True):
        """[N, T, n*D] concatenated layer outputs of the full-sequence forward (base model only, no logits)."""
        self.out = {}
        dev = ids.device
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=autocast and dev.type == "cuda"):
            self.target.model(input_ids=ids, use_cache=False)
        feats = torch.cat([self.out[i] for i in self.layer_ids], dim=-1)
        return feats.float() if feats.dtype in (torch.bfloat16, torch.float16) else feats

    def remove(self):
        for h in self.handles:
            h.remove()


def lm_head_weight(target):
    return target.get_output_embeddings().weight


def embed_weight(target):
    return target.get_input_embeddings().weight


@torch.no_grad()
def greedy_generate(target, prompts, n_new, autocast=True):
    """Greedy continuation of equal-length prompts [N, S] through the model's cache: [N, n_new]."""
    dev = prompts.device
    N, S = prompts.shape
    ac = dict(device_type=dev.type, dtype=torch.bfloat16, enabled=autocast and dev.type == "cuda")
    with torch.autocast(**ac):  # logits of the last prompt position only (N x S x V logits would be GBs)
        out = target(input_ids=prompts, position_ids=torch.arange(S, device=dev)[None].expand(N, S), use_cache=True,
                     logits_to_keep=1)
    cache = out.past_key_values
    nxt = out.logits[:, -1].float().argmax(-1)
    toks = [nxt]
    for t in range(1, n_new):
        pos = torch.full((N, 1), S + t - 1, device=dev, dtype=torch.long)
        with torch.autocast(**ac):
            out = target(input_ids=nxt[:, None], position_ids=pos, past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        nxt = out.logits[:, -1].float().argmax(-1)
        toks.append(nxt)
    return torch.stack(toks, 1)


# ---------------------------------------------------------------------------------------------
# Blocks, masks, loss
# ---------------------------------------------------------------------------------------------

def block_inputs(ids, anchors, B, mask_id):
    """ids [N, T], anchors [N, A] -> block token ids [N, A*B], positions [N, A*B]."""
    N, A = anchors.shape
    k = torch.arange(B, device=ids.device)
    pos = (anchors[:, :, None] + k).reshape(N, A * B)
    toks = torch.full((N, A, B), mask_id, dtype=ids.dtype, device=ids.device)
    toks[:, :, 0] = torch.gather(ids, 1, anchors)
    return toks.reshape(N, A * B), pos


def block_mask(anchors, T, B):
    """[N, A*B, T + A*B]: context j < anchor position; block rows see all rows of their own block."""
    N, A = anchors.shape
    dev = anchors.device
    ctx = torch.arange(T, device=dev)[None, None, :] < anchors.repeat_interleave(B, dim=1)[:, :, None]
    bid = torch.arange(A, device=dev).repeat_interleave(B)
    blk = (bid[:, None] == bid[None, :])[None].expand(N, -1, -1)
    return torch.cat([ctx, blk], dim=-1)


def block_labels(ids, lengths, anchors, B, gamma):
    """Labels [N, A*B] (token at anchor+k, -100 where invalid) and weights exp(-(k-1)/gamma), 0 for k = 0."""
    N, A = anchors.shape
    k = torch.arange(B, device=ids.device)
    pos = anchors[:, :, None] + k  # [N, A, B]
    valid = (k > 0)[None, None] & (pos < lengths[:, None, None])
    lab = torch.gather(ids, 1, pos.clamp(max=ids.shape[1] - 1).reshape(N, -1)).reshape(N, A, B)
    lab = torch.where(valid, lab, torch.full_like(lab, -100))
    w = torch.exp(-(k.float() - 1) / gamma)[None, None].expand(N, A, B) * valid.float()
    return lab.reshape(N, A * B), w.reshape(N, A * B)


def sample_anchors(starts, lengths, A, gen):
    """A anchors per row, uniform without replacement in [start-1, length-2]; rows with fewer candidates
    repeat the last one (its weight is zeroed by anchor_valid)."""
    N = len(starts)
    out = np.zeros((N, A), dtype=np.int64)
    ok = np.zeros((N, A), dtype=bool)
    for i in range(N):
        lo, hi = max(0, int(starts[i]) - 1), int(lengths[i]) - 2
        cand = np.arange(lo, hi + 1)
        if len(cand) == 0:
            out[i] = 0
            continue
        pick = np.sort(gen.choice(cand, size=min(A, len(cand)), replace=False))
        out[i, :len(pick)] = pick
        out[i, len(pick):] = pick[-1]
        ok[i, :len(pick)] = True
    return out, ok


def drafter_logits(drafter, target, tap, ids, anchors, mask_id, feats=None, autocast=True):
    """Block logits [N, A*B, V] for the given anchors (batched form with the block mask)."""
    c = drafter.config
    B = c.block_size
    dev = ids.device
    if feats is None:
        feats = tap.features(ids, autocast=autocast)
    with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=autocast and dev.type == "cuda"):
        ctx = drafter.fuse(feats)
        btok, bpos = block_inputs(ids, anchors, B, mask_id)
        x = F.embedding(btok, embed_weight(target).detach())
        h = drafter(ctx, x, bpos, block_mask(anchors, ids.shape[1], B))
        return F.linear(h, lm_head_weight(target).detach())


def literal_block_logits(drafter, target, feats, ids, c_len, mask_id):
    """The inference form, for one block: context = rows 0..c-1 only, no mask, no batching tricks."""
    cfg = drafter.config
    B = cfg.block_size
    dev = ids.device
    ctx = drafter.fuse(feats[:c_len][None])
    tok = torch.full((1, B), mask_id, dtype=torch.long, device=dev)
    tok[0, 0] = ids[c_len]
    x = F.embedding(tok, embed_weight(target).detach())
    h = drafter(ctx, x, torch.arange(c_len, c_len + B, device=dev)[None], None)
    return F.linear(h, lm_head_weight(target).detach())[0]


# ---------------------------------------------------------------------------------------------
# Training and tau
# ---------------------------------------------------------------------------------------------

def pad_rows(rows, fill):
    T = max(len(r) for r in rows)
    out = np.full((len(rows), T), fill, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return out


def block_loss(drafter, target, tap, ids, starts, lengths, anchors, gen, gamma):
    """Weighted block CE and first-draft accuracy of padded rows ids [N, T] at `anchors` random anchors each."""
    c = drafter.config
    dev = ids.device
    anc, ok = sample_anchors(starts, lengths, anchors, gen)
    anc_t = torch.from_numpy(anc).to(dev)
    logits = drafter_logits(drafter, target, tap, ids, anc_t, c.mask_token_id)
    lab, w = block_labels(ids, torch.from_numpy(lengths).to(dev), anc_t, c.block_size, gamma)
    w = w * torch.from_numpy(ok).to(dev).repeat_interleave(c.block_size, dim=1).float()
    ce = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), lab.reshape(-1), ignore_index=-100,
                         reduction="none").reshape(lab.shape)
    loss = (ce * w).sum() / w.sum().clamp(min=1e-6)
    with torch.no_grad():
        l1 = lab[:, 1::c.block_size]
        acc1 = ((logits[:, 1::c.block_size].argmax(-1) == l1).float() * (l1 >= 0).float()).sum() / \
            (l1 >= 0).float().sum().clamp(min=1)
    return loss, acc1


@torch.no_grad()
def validation_loss(drafter, target, tap, val, anchors=64, gamma=7.0, pad_id=0, bs=48, seed=4321):
    """(loss, first-draft accuracy) on fixed (ids, start) rows with fixed anchors: the held-out learning curve."""
    if not val:
        return None
    was = drafter.training
    drafter.eval()
    gen = np.random.default_rng(seed)
    dev = next(drafter.parameters()).device
    tot_l = tot_a = 0.0
    n = 0
    for i in range(0, len(val), bs):
        rows = [r for r, _ in val[i:i + bs]]
        starts = np.array([s for _, s in val[i:i + bs]])
        lengths = np.array([len(r) for r in rows])
        ids = torch.from_numpy(pad_rows(rows, pad_id)).to(dev)
        loss, acc = block_loss(drafter, target, tap, ids, starts, lengths, anchors, gen, gamma)
        tot_l += float(loss) * len(rows)
        tot_a += float(acc) * len(rows)
        n += len(rows)
    drafter.train(was)
    return tot_l / n, tot_a / n


def train_drafter(drafter, target, tap, data, *, seconds=None, steps=None, bs=32, anchors=64, lr=6e-4,
                  weight_decay=0.01, gamma=7.0, pad_id=0, seed=0, log=print, log_every=25, val=None,
                  val_every_s=20.0, warmup=0.04, min_lr_frac=0.1):
    """data: list of (ids, start) with start = index of the first target-generated token. Rows are drawn
    without replacement (a fresh permutation each pass). val: fixed held-out (ids, start) rows whose loss is
    logged every val_every_s seconds (steps mode: every log_every steps). LR: linear warmup, cosine to
    min_lr_frac, over the wall-clock budget (seconds) or the step count."""
    assert (seconds is None) != (steps is None)
    dev = next(drafter.parameters()).device
    decay = [p for p in drafter.parameters() if p.ndim >= 2]
    no_decay = [p for p in drafter.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.95))
    gen = np.random.default_rng(seed)
    drafter.train()
    t0 = time.time()
    step, hist, seen, vhist = 0, [], 0, []
    order, pos, passes = gen.permutation(len(data)), 0, 0
    next_val = 0.0
    while True:
        frac = (time.time() - t0) / seconds if seconds else step / steps
        if frac >= 1.0:
            break
        if val and ((seconds and time.time() - t0 >= next_val) or (steps and step % log_every == 0)):
            vl, va = validation_loss(drafter, target, tap, val, anchors=anchors, gamma=gamma, pad_id=pad_id)
            vhist.append({"step": step, "t": round(time.time() - t0, 1), "passes": round(seen / max(1, len(data)), 3),
                          "val_loss": round(vl, 4), "val_acc_k1": round(va, 4)})
            log(json.dumps(vhist[-1]))
            next_val = time.time() - t0 + val_every_s
        cur = lr * frac / warmup if frac < warmup else \
            lr * (min_lr_frac + (1 - min_lr_frac) * 0.5 * (1 + math.cos(math.pi * (frac - warmup) / (1 - warmup))))
        for g in opt.param_groups:
            g["lr"] = cur
        if pos + bs > len(order):
            order, pos, passes = gen.permutation(len(data)), 0, passes + 1
        pick = order[pos:pos + bs]
        pos += bs
        rows = [data[i][0] for i in pick]
        starts = np.array([data[i][1] for i in pick])
        lengths = np.array([len(r) for r in rows])
        ids = torch.from_numpy(pad_rows(rows, pad_id)).to(dev)
        loss, acc1 = block_loss(drafter, target, tap, ids, starts, lengths, anchors, gen, gamma)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        opt.step()
        step += 1
        seen += len(pick)
        if step % log_every == 0 or step == 1:
            rec = {"step": step, "t": round(time.time() - t0, 1), "lr": round(cur, 7), "loss": round(float(loss), 4),
                   "acc_k1": round(float(acc1), 4), "gnorm": round(float(gn), 3)}
            hist.append(rec)
            log(json.dumps(rec))
    if val:
        vl, va = validation_loss(drafter, target, tap, val, anchors=anchors, gamma=gamma, pad_id=pad_id)
        vhist.append({"step": step, "t": round(time.time() - t0, 1), "passes": round(seen / max(1, len(data)), 3),
                      "val_loss": round(vl, 4), "val_acc_k1": round(va, 4)})
        log(json.dumps(vhist[-1]))
    return {"steps": step, "sequences_seen": seen, "passes": round(seen / max(1, len(data)), 3),
            "seconds": round(time.time() - t0, 1), "history": hist, "val_history": vhist, "batch": bs,
            "anchors": anchors, "lr": lr, "weight_decay": weight_decay, "gamma": gamma, "seed": seed}


@torch.no_grad()
def tau_of_sequence(drafter, target, tap, prompt, cont, chunk=128):
    """Greedy chain verification against the target's greedy continuation `cont` of `prompt`.
    Returns (tau, steps, committed, accept_hist[k] = times draft k was accepted)."""
    c = drafter.config
    B = c.block_size
    dev = next(drafter.parameters()).device
    ids = torch.tensor(list(prompt) + list(cont), device=dev)[None]
    S, N = len(prompt), len(cont)
    if N < 2:
        return None
    feats = tap.features(ids)
    drafts = []
    anchors_all = torch.arange(S, S + N - 1, device=dev)
    for i in range(0, len(anchors_all), chunk):
        a = anchors_all[i:i + chunk][None]
        lg = drafter_logits(drafter, target, tap, ids, a, c.mask_token_id, feats=feats)
        drafts.append(lg.float().argmax(-1).reshape(a.shape[1], B))
    d = torch.cat(drafts).cpu().numpy()  # d[i, k] predicts cont[i + k]
    g = np.asarray(cont)
    i, steps, committed = 0, 0, 0
    acc_hist = np.zeros(B, dtype=np.int64)
    while i < N - 1:
        a = 0
        while a < B - 1 and i + a + 1 <= N - 1 and d[i, a + 1] == g[i + a + 1]:
            a += 1
        acc_hist[1:a + 1] += 1
        n_commit = min(a + 1, N - 1 - i)
        i += n_commit
        committed += n_commit
        steps += 1
    return committed / steps, steps, committed, acc_hist


def measure_tau(drafter, target, tap, pairs):
    """pairs: list of (prompt ids, continuation ids). tau = total committed / total verify steps."""
    drafter.eval()
    steps = committed = 0
    per, hist = [], None
    for p, cont in pairs:
        r = tau_of_sequence(drafter, target, tap, p, cont)
        if r is None:
            continue
        per.append(round(r[0], 3))
        steps += r[1]
        committed += r[2]
        hist = r[3] if hist is None else hist + r[3]
    drafter.train()
    return {"tau": committed / max(steps, 1), "verify_steps": steps, "committed_tokens": committed,
            "sequences": len(per), "per_sequence_tau": per,
            "accepted_at_k": hist.tolist() if hist is not None else []}


# ---------------------------------------------------------------------------------------------
# Saving (safetensors written here: a JSON header and raw little-endian data)
# ---------------------------------------------------------------------------------------------

_ST_DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}


def save_safetensors(tensors, path, metadata=None):
    entries = []
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        raw = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
        entries.append((name, _ST_DTYPES[t.dtype], t.shape, raw))
    safetensors_file.write(path, entries, metadata)


def load_safetensors(path):
    out = {}
    for name, (dtype, shape, raw) in safetensors_file.read(path).items():
        raw = bytearray(raw)
        if dtype == "BF16":
            t = torch.frombuffer(raw, dtype=torch.int16).view(torch.bfloat16)
        else:
            t = torch.frombuffer(raw, dtype={"F32": torch.float32, "F16": torch.float16}[dtype])
        out[name] = t.reshape(shape).clone()
    return out


def save_drafter(drafter, out_dir, extra=None):
    os.makedirs(out_dir, exist_ok=True)
    sd = {k: v.to(torch.bfloat16) for k, v in drafter.state_dict().items()}
    save_safetensors(sd, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    cfg = drafter.config.hf_json()
    if extra:
        cfg.update(extra)
    with open(os.path.join(out_dir, "config.json"), "w") as fh:
        json.dump(cfg, fh, indent=1)
        fh.write("\n")


def load_drafter(in_dir, device="cpu", dtype=torch.float32):
    with open(os.path.join(in_dir, "config.json")) as fh:
        cfg = DFlashConfig.from_hf_json(json.load(fh))
    d = DFlashDrafter(cfg)
    sd = load_safetensors(os.path.join(in_dir, "model.safetensors"))
    missing = set(d.state_dict()) ^ set(sd)
    assert not missing, missing
    d.load_state_dict({k: v.to(dtype) for k, v in sd.items()})
    return d.to(device=device, dtype=dtype)
