"""Stand-in Qwen3_5ForCausalLM: the checkpoint's names and shapes are checked against the config; the forward is
a cheap causal model over the real embedding, norms and MLPs (a causal running mean replaces the mixers)."""
import json
import os
import types

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file


def expected_shapes(c):
    D, L = c.hidden_size, c.num_hidden_layers
    out = {"model.embed_tokens.weight": [c.vocab_size, D], "model.norm.weight": [D]}
    kd, vd = c.linear_num_key_heads * c.linear_key_head_dim, c.linear_num_value_heads * c.linear_value_head_dim
    for i in range(L):
        p = f"model.layers.{i}."
        out.update({p + "input_layernorm.weight": [D], p + "post_attention_layernorm.weight": [D],
                    p + "mlp.gate_proj.weight": [c.intermediate_size, D], p + "mlp.up_proj.weight": [c.intermediate_size, D],
                    p + "mlp.down_proj.weight": [D, c.intermediate_size]})
        if c.layer_types[i] == "full_attention":
            hd = c.head_dim
            out.update({p + "self_attn.q_proj.weight": [2 * c.num_attention_heads * hd, D],
                        p + "self_attn.k_proj.weight": [c.num_key_value_heads * hd, D],
                        p + "self_attn.v_proj.weight": [c.num_key_value_heads * hd, D],
                        p + "self_attn.o_proj.weight": [D, c.num_attention_heads * hd],
                        p + "self_attn.q_norm.weight": [hd], p + "self_attn.k_norm.weight": [hd]})
        else:
            nv = c.linear_num_value_heads
            out.update({p + "linear_attn.in_proj_qkv.weight": [2 * kd + vd, D], p + "linear_attn.in_proj_z.weight": [vd, D],
                        p + "linear_attn.in_proj_b.weight": [nv, D], p + "linear_attn.in_proj_a.weight": [nv, D],
                        p + "linear_attn.conv1d.weight": [2 * kd + vd, 1, c.linear_conv_kernel_dim],
                        p + "linear_attn.dt_bias": [nv], p + "linear_attn.A_log": [nv],
                        p + "linear_attn.norm.weight": [c.linear_value_head_dim],
                        p + "linear_attn.out_proj.weight": [D, vd]})
    if not c.tie_word_embeddings:
        out["lm_head.weight"] = [c.vocab_size, D]
    return out


class RMS(nn.Module):
    def __init__(self, w, eps):
        super().__init__()
        self.weight = nn.Parameter(w)
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return ((1.0 + self.weight.float()) * xf).to(x.dtype)


class Layer(nn.Module):
    def __init__(self, sd, p, c):
        super().__init__()
        self.input_layernorm = RMS(sd[p + "input_layernorm.weight"], c.rms_norm_eps)
        self.post_attention_layernorm = RMS(sd[p + "post_attention_layernorm.weight"], c.rms_norm_eps)
        # the first 64 FFN channels only: a cheap forward (the whole sequence is recomputed at every step)
        self.gate = nn.Parameter(sd[p + "mlp.gate_proj.weight"][:64].clone())
        self.up = nn.Parameter(sd[p + "mlp.up_proj.weight"][:64].clone())
        self.down = nn.Parameter(sd[p + "mlp.down_proj.weight"][:, :64].clone())

    def forward(self, x):
        h = self.input_layernorm(x)
        n = torch.arange(1, x.shape[1] + 1, device=x.device, dtype=h.dtype)[None, :, None]
        x = x + 0.5 * torch.cumsum(h, 1) / n
        h = self.post_attention_layernorm(x)
        return (x + F.linear(F.silu(F.linear(h, self.gate)) * F.linear(h, self.up), self.down),)


class Cache:
    def __init__(self, ids):
        self.ids = ids


class TextModel(nn.Module):
    def __init__(self, sd, c):
        super().__init__()
        self.config = c
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.embed_tokens.weight = nn.Parameter(sd["model.embed_tokens.weight"])
        self.layers = nn.ModuleList([Layer(sd, f"model.layers.{i}.", c) for i in range(c.num_hidden_layers)])
        self.norm = RMS(sd["model.norm.weight"], c.rms_norm_eps)

    def forward(self, input_ids=None, use_cache=False, output_hidden_states=False, **kw):
        x = self.embed_tokens(input_ids)
        hs = [x]
        for layer in self.layers:
            x = layer(x)[0]
            hs.append(x)
        x = self.norm(x)
        return types.SimpleNamespace(last_hidden_state=x, hidden_states=tuple(hs[:-1]) + (x,) if output_hidden_states else None)


class Qwen3_5ForCausalLM(nn.Module):
    def __init__(self, sd, c):
        super().__init__()
        self.config = c
        self.model = TextModel(sd, c)
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        self.lm_head.weight = self.model.embed_tokens.weight if c.tie_word_embeddings else nn.Parameter(sd["lm_head.weight"])

    @classmethod
    def from_pretrained(cls, path, dtype=torch.float32, attn_implementation=None, **kw):
        with open(os.path.join(path, "config.json")) as fh:
            j = json.load(fh)
        assert j["architectures"] == ["Qwen3_5ForCausalLM"], j["architectures"]
        c = types.SimpleNamespace(**j)
        c._attn_implementation = attn_implementation or "sdpa"
        sd = load_file(os.path.join(path, "model.safetensors"))
        want = expected_shapes(c)
        got = {k: list(v.shape) for k, v in sd.items()}
        if got != want:
            bad = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
            raise ValueError(f"stand-in: checkpoint tensors differ from the config's: {bad[:10]}")
        return cls({k: v.to(dtype) for k, v in sd.items()}, c)

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def get_output_embeddings(self):
        return self.lm_head

    def forward(self, input_ids=None, position_ids=None, past_key_values=None, use_cache=None, logits_to_keep=0,
                output_hidden_states=False, attention_mask=None, **kw):
        ids = input_ids if past_key_values is None else torch.cat([past_key_values.ids, input_ids], 1)
        if position_ids is not None:
            assert int(position_ids[0, -1]) == ids.shape[1] - 1, "stand-in: position ids do not follow the cache"
        out = self.model(input_ids=ids, output_hidden_states=output_hidden_states)
        h = out.last_hidden_state[:, -input_ids.shape[1]:]
        if logits_to_keep:
            h = h[:, -logits_to_keep:]
        return types.SimpleNamespace(logits=self.lm_head(h), past_key_values=Cache(ids) if use_cache else None,
                                     hidden_states=out.hidden_states)
