"""Fixtures for the C++ tests of the demo models: transformers golden logits and HF tokenizer ids."""
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def _golden_tools():
    sys.path.insert(0, os.path.join(HERE, "golden"))
    import make_hf_golden  # noqa: E402  (train/golden/make_hf_golden.py: exact-float64 transformers copy)
    return make_hf_golden


def target_golden(hf_dir, sequences, top=8):
    """Float64 transformers logits (float32 islands rewritten to float64) of each (name, ids) sequence,
    stored compactly per position: the top-`top` ids and their log-probabilities, plus the log-probability
    of the next token of the sequence."""
    mg = _golden_tools()
    mod = mg.exact_f64_module("transformers.models.qwen3_5.modeling_qwen3_5")
    model = mg.load(getattr(mod, "Qwen3_5ForCausalLM"), hf_dir)
    inv_diff = mg.refresh_inv_freq(model)
    out = []
    with torch.no_grad():
        for name, ids in sequences:
            x = torch.tensor(ids, dtype=torch.long)
            logits = model(input_ids=x[None], use_cache=False).logits[0].double()
            lp = torch.log_softmax(logits, -1)
            tv, ti = lp.topk(top, -1)
            nxt = [float(lp[i, ids[i + 1]]) for i in range(len(ids) - 1)] + [None]
            out.append({"name": name, "tokens": list(map(int, ids)),
                        "top_ids": ti.tolist(), "top_logprobs": [[round(v, 6) for v in r] for r in tv.tolist()],
                        "next_logprob": [None if v is None else round(v, 6) for v in nxt],
                        "max_abs_logit": float(logits.abs().max())})
    return {"precision": "float64 transformers (float32 islands rewritten to float64, inv_freq refreshed, "
                         f"max inv_freq change {inv_diff:.2e}), weights from the bf16 checkpoint",
            "logprob": "log_softmax over all rows of the LM head (including unused padding rows)",
            "sequences": out}


def tokenizer_cases(tok, heldout_files, heldout_chat_texts, seed=7):
    """~30 strings (held-out code, chat text, unicode, whitespace runs) with the HF tokenizer's ids."""
    rng = np.random.default_rng(seed)
    cases = []
    code_files = [t for _, r, t in heldout_files if r.endswith(".py") and len(t) > 800]
    doc_files = [t for _, r, t in heldout_files if not r.endswith(".py") and len(t) > 400]
    for i in range(10):
        t = code_files[int(rng.integers(len(code_files)))]
        lines = t.split("\n")
        a = int(rng.integers(0, max(1, len(lines) - 12)))
        cases.append(("code", "\n".join(lines[a:a + int(rng.integers(4, 12))])[:500]))
    for i in range(min(2, len(doc_files))):
        t = doc_files[int(rng.integers(len(doc_files)))]
        cases.append(("doc", t[:400]))
    for t in heldout_chat_texts[:6]:
        cases.append(("chat", t[:600]))
    cases += [
        ("unicode", "Grüße aus Köln! Ça va? Ελληνικά, русский текст, 日本語のテキスト、中文文本。"),
        ("unicode", "Combining marks: e\u0301 a\u0308 n\u0303 and Hindi \u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e"),
        ("unicode", "Emoji 🙂👍🏽 🇩🇪 family 👨‍👩‍👧 and math ∑∫√∞ ≤ ≥ ≠ → ←"),
        ("unicode", "Arabic مرحبا بالعالم and Hebrew שלום עולם; Thai สวัสดีครับ; Korean 안녕하세요"),
        ("whitespace", "    \n\n\t\tdef f():\n        return  1   \n\n\n   \t  x = 2\r\n\r\n   "),
        ("whitespace", "a  b   c    d     e\u00a0\u00a0f\u3000g\u2003h"),
        ("whitespace", "\n\n\n\n"),
        ("whitespace", "                                                trailing"),
        ("numbers", "Numbers: 1234567890, 3.14159, -42, 1e-10, 0xFF, 1_000_000, ١٢٣ and ½ ²"),
        ("contractions", "I'm sure you're right, it's what we'd do; THEY'LL say I'VE won't"),
        ("specials", "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello!<|im_end|>\n<|endoftext|>"),
        ("specials", "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call><tool_response>\n{\"t\": 21}\n</tool_response><|mask|><|mask|>x<|im_end"),
        ("code", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n"),
        ("code", "x=[i**2 for i in range(10) if i%2==0];print(f\"{x!r:>20}\")  # comment\n\tif (a&&b)||c: pass"),
    ]
    out = []
    for kind, text in cases:
        enc = tok.encode(text, add_special_tokens=False)
        out.append({"kind": kind, "text": text, "ids": enc.ids, "decoded_equal": tok.decode(enc.ids, skip_special_tokens=False) == text})
    return out


@torch.no_grad()
def drafter_golden(drafter_dir, target_hf_dir, ids, c_len, mask_id, layer_ids):
    """Float64 reference for one drafter block: the concatenated target layer outputs of ids (float64
    transformers), the block [ids[c], MASK x 15] at positions c..c+15 over context rows 0..c-1, and its logits."""
    sys.path.insert(0, HERE)
    import dflash as DF
    mg = _golden_tools()
    mod = mg.exact_f64_module("transformers.models.qwen3_5.modeling_qwen3_5")
    target = mg.load(getattr(mod, "Qwen3_5ForCausalLM"), target_hf_dir)
    mg.refresh_inv_freq(target)
    tap = DF.TargetTap(target, layer_ids)
    x = torch.tensor(ids, dtype=torch.long)[None]
    feats = tap.features(x, autocast=False)[0].double()
    tap.remove()
    d = DF.load_drafter(drafter_dir, dtype=torch.float64)
    logits = DF.literal_block_logits(d, target, feats, x[0], c_len, mask_id).double()
    return feats, logits
