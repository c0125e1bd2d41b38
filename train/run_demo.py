#!/usr/bin/env python3
"""Builds the demo models end to end on one GPU within a wall-clock deadline (see train/README.md).

  corpus -> smoke test of every phase at tiny sizes (aborts with exit code 3 on any failure)
  -> tokenizer -> target (Qwen3_5ForCausalLM) -> scorer -> golden fixtures -> stage1 archive
  -> target-generated continuations -> DFlash drafter -> tau -> stage2 archive

Results go to --out as split tar archives (<=15 MiB parts) plus summary.json. Budgets for the target and
the drafter are what is left of --deadline after the fixed phases, split by --target-share.
"""
import argparse
import json
import os
import random
import shutil
import sys
import tarfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

import demo_data as D  # noqa: E402

T0 = time.time()
SUMMARY = {"phases": {}, "errors": []}


def el():
    return time.time() - T0


def log(msg):
    print(f"[{el():7.1f}s] {msg}", flush=True)


class Phase:
    def __init__(self, name):
        self.name = name

    def __enter__(self):
        self.t = time.time()
        log(f"== {self.name}")
        return self

    def __exit__(self, *exc):
        SUMMARY["phases"][self.name] = round(time.time() - self.t, 1)
        log(f"== {self.name} done in {SUMMARY['phases'][self.name]} s")
        return False


def pack(src_dir, out_dir, name, part=15 * 1024 * 1024):
    """tar src_dir as NAME/ and write it to out_dir as NAME.tar.part-00, -01, ... (each <= part bytes)."""
    tmp = os.path.join(os.path.dirname(src_dir.rstrip("/")), name + ".tar")
    with tarfile.open(tmp, "w") as tf:
        tf.add(src_dir, arcname=name)
    parts = []
    with open(tmp, "rb") as fh:
        i = 0
        while True:
            chunk = fh.read(part)
            if not chunk:
                break
            p = os.path.join(out_dir, f"{name}.tar.part-{i:02d}")
            with open(p, "wb") as o:
                o.write(chunk)
            parts.append(os.path.basename(p))
            i += 1
    os.remove(tmp)
    log(f"packed {name}: {parts}")
    return parts


def write_summary(out_dir):
    SUMMARY["elapsed_s"] = round(el(), 1)
    with open(os.path.join(out_dir, "summary.json"), "w") as fh:
        json.dump(SUMMARY, fh, indent=1, default=str)


def copy_tokenizer(tok_dir, dst):
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tok_dir, f), os.path.join(dst, f))


# ---------------------------------------------------------------------------------------------

def encode_all(tok, corpus, train_items, held_items, retr_train, retr_held, sp, max_len=4096):
    eot = sp[D.EOT]
    t = time.time()
    code = D.encode_texts(tok, [x for _, _, x in corpus["train"]], eot)
    chat = D.encode_texts(tok, [D.render_item(i) for i in train_items], eot)
    retr = [r for r in D.encode_texts(tok, [D.render_item(i) for i in retr_train], eot) if len(r) <= max_len]
    hcode_docs = D.encode_texts(tok, [x for _, _, x in corpus["heldout"]], eot)
    hchat = D.encode_texts(tok, [D.render_item(i) for i in held_items], eot)
    hretr = D.encode_texts(tok, [D.render_item(i) for i in retr_held], eot)
    log(f"encoded in {time.time() - t:.1f} s")
    return {"code": code, "chat": chat, "retr": retr, "hcode_docs": hcode_docs, "hchat": hchat, "hretr": hretr}


def lm_evals(LM, model, enc, seqs=((1024, 48), (4096, 8)), seed=99):
    from demo_lm import Streams
    hcode = Streams.flat(enc["hcode_docs"])
    hchat = Streams.flat(enc["hchat"])
    tcode = Streams.flat(enc["code"][:2000])
    res = {}
    for seq, n in seqs:
        w = LM.eval_windows(hcode, seq, n, seed)
        if w:
            res[f"heldout_code_{seq}"] = LM.evaluate(model, w, bs=max(1, 16384 // seq))
    w = LM.eval_windows(hchat, 1024, 32, seed)
    if w:
        res["heldout_chat_1024"] = LM.evaluate(model, w, bs=16)
    w = LM.eval_windows(tcode, 1024, 32, seed)
    if w:
        res["train_code_1024"] = LM.evaluate(model, w, bs=16)
    res = {k: {"loss": round(v, 4), "ppl": round(float(np.exp(v)), 3)} for k, v in res.items()}
    log(f"eval {json.dumps(res)}")
    return res


def chat_template_check(tok_dir, items):
    """Our Python renderer vs transformers' apply_chat_template on the saved tokenizer (logged, not fatal)."""
    try:
        import transformers
        t = transformers.AutoTokenizer.from_pretrained(tok_dir)
        bad = 0
        for it in items:
            msgs = it["messages"]
            k = max(i for i, m in enumerate(msgs) if m["role"] == "assistant")
            a = t.apply_chat_template(msgs, tools=it.get("tools"), tokenize=False)
            b = t.apply_chat_template(msgs[:k], tools=it.get("tools"), tokenize=False, add_generation_prompt=True,
                                      enable_thinking=False)
            bad += (a != D.render_item(it)) + (b != D.prompt_of(it))
        return {"items": len(items), "mismatches": int(bad), "class": type(t).__name__}
    except Exception as e:  # noqa: BLE001
        return {"error": f"{type(e).__name__}: {e}"}


def sample_generations(tok, model, sp, device, prompts, n_new=64):
    """Greedy float32 continuations (no autocast) for the model card and the engine comparison."""
    import torch
    import dflash as DF
    out = []
    for kind, text in prompts:
        ids = tok.encode(text, add_special_tokens=False).ids
        g = DF.greedy_generate(model, torch.tensor([ids], device=device), n_new, autocast=False)[0].tolist()
        if sp[D.IM_END] in g:
            g = g[:g.index(sp[D.IM_END]) + 1]
        out.append({"kind": kind, "prompt": text, "prompt_ids": ids, "greedy_ids": g,
                    "text": tok.decode(g, skip_special_tokens=False)})
        log(f"sample [{kind}] {text!r} -> {out[-1]['text'][:300]!r}")
    return out


def gen_pairs(target, prompts, n_new, im_end, device, bs, stop_at_im_end):
    """(prompt, continuation) pairs; prompts are equal-length lists. Continuations cut after <|im_end|>."""
    import torch
    import dflash as DF
    pairs = []
    for i in range(0, len(prompts), bs):
        p = torch.tensor(prompts[i:i + bs], device=device)
        g = DF.greedy_generate(target, p, n_new).cpu().numpy()
        for row, pr in zip(g, prompts[i:i + bs]):
            row = row.tolist()
            if stop_at_im_end and im_end in row:
                row = row[:row.index(im_end) + 1]
            pairs.append((list(pr), row))
    return pairs


def left_pad(rows, length, pad):
    return [[pad] * (length - len(r)) + list(r) for r in rows]


def code_prompts_from_docs(docs, n, length, rng):
    """First `length` tokens of documents that are long enough (file starts: natural prompts)."""
    cands = [d for d in docs if len(d) > length + 8]
    rng.shuffle(cands)
    return [list(map(int, d[:length])) for d in cands[:n]]


def code_prompts_random(stream, n, length, rng):
    return [list(map(int, stream[s:s + length])) for s in rng.integers(0, len(stream) - length, size=n)]


def chat_prompts(tok, items, n, max_len, rng):
    out = []
    for it in items:
        if it["kind"] in ("retrieval",):
            continue
        ids = tok.encode(D.prompt_of(it, enable_thinking=False), add_special_tokens=False).ids
        if len(ids) <= max_len:
            out.append(ids)
        if len(out) >= n:
            break
    return out


# ---------------------------------------------------------------------------------------------

def run_pipeline(args, corpus, train_items, held_items, retr_train, retr_held, work, out_dir, smoke):
    """One pass of the whole pipeline. smoke=True: tiny sizes, step counts instead of time budgets."""
    import torch
    import demo_lm as LM
    import dflash as DF
    import demo_golden as G
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    res = {}
    stage1 = os.path.join(work, "stage1")
    stage2 = os.path.join(work, "stage2")
    os.makedirs(stage1, exist_ok=True)
    os.makedirs(stage2, exist_ok=True)

    with Phase("tokenizer" + (" (smoke)" if smoke else "")):
        budget = 2_000_000 if smoke else args.tok_sample_bytes
        sample, n = [], 0
        for _, _, t in corpus["train"]:
            if n >= budget * 0.85:
                break
            sample.append(t)
            n += len(t)
        for it in train_items:
            if n >= budget:
                break
            s = D.render_item(it)
            sample.append(s)
            n += len(s)
        t = time.time()
        tok = D.train_tokenizer(sample, vocab_size=600 if smoke else D.BPE_VOCAB)
        tok_dir = os.path.join(stage1, "tokenizer")
        D.save_tokenizer(tok, tok_dir)
        sp = D.special_ids(tok)
        n_tokens = tok.get_vocab_size()
        rows = D.embedding_rows(n_tokens)
        res["tokenizer"] = {"train_bytes": n, "seconds": round(time.time() - t, 1), "n_tokens": n_tokens,
                            "embedding_rows": rows, "special_ids": sp}
        log(json.dumps(res["tokenizer"]))
        res["chat_template_check"] = chat_template_check(tok_dir, (held_items + train_items)[:200])
        log(f"chat template check: {res['chat_template_check']}")

    with Phase("encode"):
        if smoke:
            c = {"train": corpus["train"][:300], "heldout": corpus["heldout"][:60]}
            enc = encode_all(tok, c, train_items[:300], held_items[:60], retr_train[:8], retr_held[:4], sp)
        else:
            enc = encode_all(tok, corpus, train_items, held_items, retr_train, retr_held, sp)
        streams = LM.Streams(LM.Streams.flat(enc["code"]), LM.Streams.flat(enc["chat"]), enc["retr"], sp[D.EOT])
        res["tokens"] = {"code_docs": int(len(streams.code)), "chat": int(len(streams.chat)),
                         "retrieval_items": len(enc["retr"]), "retrieval_tokens": int(sum(len(r) for r in enc["retr"])),
                         "heldout_code": int(sum(len(x) for x in enc["hcode_docs"])),
                         "heldout_chat": int(sum(len(x) for x in enc["hchat"]))}
        log(json.dumps(res["tokens"]))

    # Budgets: what is left of the deadline after the fixed phases.
    if smoke:
        t_target = t_scorer = t_drafter = t_gen = None
    else:
        left = args.deadline - el() - args.reserve
        t_target = max(30.0, args.target_share * left)
        t_drafter = max(30.0, left - t_target)
        t_scorer, t_gen = args.scorer_seconds, args.gen_seconds
        if args.target_seconds:
            t_target = args.target_seconds
        if args.drafter_seconds:
            t_drafter = args.drafter_seconds
        res["budgets_s"] = {"target": round(t_target, 1), "scorer": t_scorer, "gen": t_gen, "drafter": round(t_drafter, 1)}
        log(f"budgets {res['budgets_s']}")

    models = {}
    for name in ("target", "scorer"):
        with Phase(name + (" (smoke)" if smoke else "")):
            shape = "smoke" if smoke else name
            m = LM.make_model(shape, rows, theta=args.rope_theta, max_pos=4096, eos_id=sp[D.IM_END], pad_id=sp[D.EOT],
                              seed=args.seed + (0 if name == "target" else 1), device=dev)
            info = {"params": LM.n_params(m), "shape": LM.SHAPES[shape], "rope_theta": args.rope_theta,
                    "attn_implementation": getattr(m.config, "_attn_implementation", None)}
            log(f"{name}: {info}")
            if smoke:
                rec = LM.train(m, streams, steps=6, phases=LM.SMOKE_PHASES, peak_lr=args.lr_target, seed=args.seed, log=log,
                               log_every=2)
            else:
                rec = LM.train(m, streams, seconds=t_target if name == "target" else t_scorer, peak_lr=args.lr_target
                               if name == "target" else args.lr_scorer, seed=args.seed, log=log)
            info["train"] = rec
            info["eval"] = lm_evals(LM, m, enc, seqs=((256, 4), (1024, 2)) if smoke else ((1024, 48), (4096, 8)))
            hf = os.path.join(stage1, f"{name}-hf")
            LM.save_hf(m, hf, generation_eos=[sp[D.IM_END], sp[D.EOT]], pad_id=sp[D.EOT])
            copy_tokenizer(tok_dir, hf)
            info["hf_files"] = sorted(os.listdir(hf))
            models[name] = m
            res[name] = info
    target = models["target"]

    with Phase("reload check"):
        import transformers
        hf = os.path.join(stage1, "target-hf")
        rl = transformers.Qwen3_5ForCausalLM.from_pretrained(hf, dtype=torch.float32).to(dev).eval()
        x = torch.from_numpy(streams.code[:64].astype(np.int64))[None].to(dev)
        with torch.no_grad():
            a = rl(input_ids=x).logits.float()
            b = target.eval()(input_ids=x).logits.float()
        target.train()
        res["reload_check"] = {"max_abs_diff_vs_fp32_master": float((a - b).abs().max()),
                               "top1_agree": float((a.argmax(-1) == b.argmax(-1)).float().mean())}
        log(f"reload {res['reload_check']}")
        del rl

    with Phase("samples"):
        prompts = [("code", "def fibonacci(n):"),
                   ("chat", D.render_chat([{"role": "user", "content": "Write a function that checks if a number is even."}],
                                          add_generation_prompt=True, enable_thinking=False)),
                   ("chat", D.render_chat([{"role": "user", "content": "What is a dictionary in Python?"}],
                                          add_generation_prompt=True, enable_thinking=False)),
                   ("chat", D.render_chat([{"role": "user", "content": "Explain this function:\n\n```python\ndef area(r):\n    return 3.14159 * r * r\n```"}],
                                          add_generation_prompt=True, enable_thinking=False)),
                   ("code", "import numpy as np\n\n\ndef normalize(x):\n")]
        target.eval()
        res["samples"] = sample_generations(tok, target, sp, dev, prompts, n_new=16 if smoke else 96)
        target.train()

    with Phase("golden fixtures"):
        rng = np.random.default_rng(args.seed + 5)
        hdocs = [d for d in enc["hcode_docs"] if len(d) > 320]
        seqs = [("code_file_start", list(map(int, hdocs[0][:96]))),
                ("chat", list(map(int, enc["hchat"][0][:160]))),
                ("code_long", list(map(int, hdocs[min(1, len(hdocs) - 1)][:300])))]
        fx = os.path.join(stage1, "fixtures")
        os.makedirs(fx, exist_ok=True)
        for name in ("target", "scorer"):
            g = G.target_golden(os.path.join(stage1, f"{name}-hf"), seqs)
            with open(os.path.join(fx, f"{name}_golden.json"), "w") as fh:
                json.dump(g, fh)
        cases = G.tokenizer_cases(tok, corpus["heldout"], [D.render_item(i) for i in held_items[:6]])
        with open(os.path.join(fx, "tokenizer_cases.json"), "w") as fh:
            json.dump({"tokenizer": "HF tokenizers " + __import__("tokenizers").__version__, "cases": cases}, fh,
                      ensure_ascii=False, indent=0)
        res["tokenizer_cases"] = {"n": len(cases), "decode_roundtrip_all": all(c["decoded_equal"] for c in cases)}
        with open(os.path.join(fx, "samples.json"), "w") as fh:
            json.dump(res["samples"], fh, ensure_ascii=False, indent=1)
        with open(os.path.join(stage1, "niah_heldout.jsonl"), "w") as fh:
            for it, ids in zip(retr_held, enc["hretr"]):
                fh.write(json.dumps({"prompt": D.prompt_of(it), "question": it["question"], "answer": it["answer"],
                                     "fact": it["fact"], "depth": it["depth"], "prompt_tokens": int(len(ids))},
                                    ensure_ascii=False) + "\n")
        with open(os.path.join(stage1, "corpus_stats.json"), "w") as fh:
            json.dump(corpus["stats"], fh, indent=1)

    if not smoke:
        SUMMARY["stage1"] = res
        res["stage1_parts"] = pack(stage1, out_dir, "stage1")
        write_summary(out_dir)

    drafter_stage(args, tok, sp, rows, target, streams, enc, train_items, held_items, stage1, stage2, out_dir,
                  smoke, t_gen, t_drafter, res)
    return res


def drafter_stage(args, tok, sp, rows, target, streams, enc, train_items, held_items, stage1, stage2, out_dir,
                  smoke, t_gen, t_drafter, res):
    """Target-generated data, drafter training, tau, saving (results into res)."""
    import torch
    import dflash as DF
    import demo_golden as G
    dev = next(target.parameters()).device
    os.makedirs(stage2, exist_ok=True)
    try:
        with Phase("drafter data" + (" (smoke)" if smoke else "")):
            target.eval()
            layer_ids = DF.spread_layer_ids(target.config.num_hidden_layers, 3)
            rng = np.random.default_rng(args.seed + 11)
            im_end, eot = sp[D.IM_END], sp[D.EOT]
            # hook vs hidden_states (the definition of "output of layer i")
            tap = DF.TargetTap(target, layer_ids)
            x = torch.from_numpy(streams.code[:80].astype(np.int64))[None].to(dev)
            f = tap.features(x, autocast=False)
            D_ = target.config.hidden_size
            try:
                with torch.no_grad():
                    hs = target(input_ids=x, output_hidden_states=True, use_cache=False).hidden_states
                diffs = [float((f[..., k * D_:(k + 1) * D_] - hs[i + 1].float()).abs().max()) if i + 1 < len(hs)
                         else None for k, i in enumerate(layer_ids)]
                res["hook_vs_hidden_states"] = {"layer_ids": layer_ids, "max_abs_diff": diffs, "n_hidden_states": len(hs)}
            except Exception as e:  # noqa: BLE001 - diagnostic only; the hooks define the features
                res["hook_vs_hidden_states"] = {"error": f"{type(e).__name__}: {e}"}
            log(f"hook vs hidden_states: {res['hook_vs_hidden_states']}")
            # evaluation pairs (held-out prompts)
            n_eval = 4 if smoke else args.eval_prompts
            n_new = 24 if smoke else 256
            code_eval = code_prompts_from_docs(enc["hcode_docs"], n_eval, 32 if smoke else 128, random.Random(args.seed))
            cp = chat_prompts(tok, held_items, n_eval, 192, rng)
            L = max(len(p) for p in cp)
            t = time.time()
            code_pairs = gen_pairs(target, code_eval, n_new, im_end, dev, 256, False)
            chat_pairs = gen_pairs(target, left_pad(cp, L, eot), n_new, im_end, dev, 256, True)
            res["eval_gen_s"] = round(time.time() - t, 1)
            # training data: target-generated continuations of held-in prompts
            data, t, n_tok, nb = [], time.time(), 0, 0
            gb = 8 if smoke else args.gen_batch
            while True:
                if smoke and nb >= 2:
                    break
                if not smoke and (time.time() - t > t_gen or nb >= 200):
                    break
                if nb % 5 in (0, 2, 4):
                    pr = code_prompts_random(streams.code, gb, 24 if smoke else 96, rng)
                    pairs = gen_pairs(target, pr, n_new, im_end, dev, gb, False)
                else:
                    start = int(rng.integers(0, max(1, len(train_items) - 4 * gb)))
                    cp2 = chat_prompts(tok, train_items[start:], gb, 160, rng)
                    pairs = gen_pairs(target, left_pad(cp2, max(len(p) for p in cp2), eot), n_new, im_end, dev, gb, True)
                for p, c in pairs:
                    data.append((p + c, len(p)))
                    n_tok += len(c)
                nb += 1
            res["drafter_data"] = {"sequences": len(data), "generated_tokens": n_tok, "batches": nb,
                                   "seconds": round(time.time() - t, 1),
                                   "eval_code_pairs": len(code_pairs), "eval_chat_pairs": len(chat_pairs),
                                   "mean_chat_continuation": float(np.mean([len(c) for _, c in chat_pairs]))}
            log(json.dumps(res["drafter_data"]))

        with Phase("drafter train" + (" (smoke)" if smoke else "")):
            ts = target.config
            cfg = DF.DFlashConfig(hidden_size=ts.hidden_size, num_hidden_layers=1 if smoke else args.drafter_layers,
                                  num_attention_heads=ts.num_attention_heads, num_key_value_heads=ts.num_key_value_heads,
                                  head_dim=ts.head_dim, intermediate_size=ts.intermediate_size, vocab_size=rows,
                                  target_layer_ids=layer_ids, mask_token_id=sp[D.MASK],
                                  num_target_layers=ts.num_hidden_layers, rms_norm_eps=ts.rms_norm_eps,
                                  rope_theta=args.rope_theta, max_position_embeddings=4096, block_size=16)
            drafter = DF.DFlashDrafter(cfg)
            drafter.init_weights(args.seed + 21)
            drafter.to(dev)
            for p in target.parameters():
                p.requires_grad_(False)
            # masked batched form vs the literal inference form on the real target
            ids = torch.tensor(code_pairs[0][0] + code_pairs[0][1], device=dev)
            anc = torch.tensor([[5, len(code_pairs[0][0]), len(ids) - 3]], device=dev)
            tf32 = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = False  # a true float32 comparison
            with torch.no_grad():
                feats = tap.features(ids[None], autocast=False)
                lg = DF.drafter_logits(drafter, target, tap, ids[None], anc, cfg.mask_token_id, feats=feats, autocast=False)
                worst = 0.0
                for a in range(anc.shape[1]):
                    lit = DF.literal_block_logits(drafter, target, feats[0], ids, int(anc[0, a]), cfg.mask_token_id)
                    worst = max(worst, float((lit - lg[0, a * 16:(a + 1) * 16]).abs().max()))
            torch.backends.cuda.matmul.allow_tf32 = tf32
            scale = max(1.0, float(lg.abs().max()))
            res["masked_vs_literal_max_abs_diff"] = worst
            res["masked_vs_literal_max_abs_logit"] = scale
            log(f"masked vs literal: {worst:.3e} (max |logit| {scale:.2f})")
            if worst > 1e-3 * scale:
                raise RuntimeError(f"masked drafter form differs from the literal form by {worst}")
            res["drafter_params"] = sum(p.numel() for p in drafter.parameters())
            if smoke:
                rec = DF.train_drafter(drafter, target, tap, data, steps=3, bs=4, anchors=8, pad_id=eot, seed=args.seed,
                                       log=log, log_every=1)
            else:
                rec = DF.train_drafter(drafter, target, tap, data, seconds=t_drafter, bs=args.drafter_bs,
                                       anchors=args.drafter_anchors, lr=args.drafter_lr, pad_id=eot, seed=args.seed, log=log)
            res["drafter_train"] = rec
            res["drafter_config"] = cfg.hf_json()

        with Phase("tau"):
            res["tau_code"] = DF.measure_tau(drafter, target, tap, code_pairs)
            res["tau_chat"] = DF.measure_tau(drafter, target, tap, chat_pairs)
            log(f"tau code {res['tau_code']['tau']:.3f}  chat {res['tau_chat']['tau']:.3f}")
            log(f"accepted at k (code): {res['tau_code']['accepted_at_k']}")

        with Phase("drafter save"):
            ddir = os.path.join(stage2, "drafter-hf")
            DF.save_drafter(drafter, ddir)
            d2 = DF.load_drafter(ddir, device=dev)
            with torch.no_grad():
                lg2 = DF.drafter_logits(d2, target, tap, ids[None], anc, cfg.mask_token_id, feats=feats, autocast=False)
                lg1 = DF.drafter_logits(drafter, target, tap, ids[None], anc, cfg.mask_token_id, feats=feats, autocast=False)
            res["drafter_reload_top1_agree"] = float((lg1.argmax(-1) == lg2.argmax(-1)).float().mean())
            try:
                from safetensors.torch import load_file
                names = sorted(load_file(os.path.join(ddir, "model.safetensors")).keys())
                res["drafter_tensor_names"] = names
            except Exception as e:  # noqa: BLE001
                res["drafter_tensor_names"] = f"safetensors check failed: {e}"
            # float64 golden block for the C++ drafter forward
            p0, c0 = code_pairs[0]
            gids = (p0 + c0)[:48 if smoke else 160]
            c_len = len(gids) - 20
            feats64, logits64 = G.drafter_golden(ddir, os.path.join(stage1, "target-hf"), gids, c_len, cfg.mask_token_id,
                                                 layer_ids)
            gdir = os.path.join(stage2, "drafter_golden")
            os.makedirs(gdir, exist_ok=True)
            feats64.float().numpy().astype("<f4").tofile(os.path.join(gdir, "target_features.f32"))
            logits64.float().numpy().astype("<f4").tofile(os.path.join(gdir, "block_logits.f32"))
            with open(os.path.join(gdir, "golden.json"), "w") as fh:
                json.dump({"tokens": gids, "context_len": c_len, "anchor_token": gids[c_len],
                           "block_positions": [c_len, c_len + 15], "mask_token_id": cfg.mask_token_id,
                           "target_layer_ids": layer_ids,
                           "target_features": {"file": "target_features.f32", "shape": list(feats64.shape),
                                               "what": "concat of outputs of target layers target_layer_ids, float64 transformers, stored f32"},
                           "block_logits": {"file": "block_logits.f32", "shape": list(logits64.shape),
                                            "what": "drafter logits of rows 0..15 (row 0 unused), float64 from the bf16 checkpoint, stored f32"},
                           "greedy_draft": logits64.argmax(-1).tolist()}, fh, indent=1)
            tap.remove()
        if not smoke:
            res["stage2_parts"] = pack(stage2, out_dir, "stage2")
    except KeyboardInterrupt:
        raise
    except Exception as e:  # noqa: BLE001
        if smoke:
            raise
        SUMMARY["errors"].append(f"drafter: {type(e).__name__}: {e}\n{traceback.format_exc()}")
        log(f"DRAFTER FAILED: {e}\n{traceback.format_exc()}")
        if os.path.isdir(stage2) and os.listdir(stage2):
            res["stage2_parts"] = pack(stage2, out_dir, "stage2")


def run_drafter_only(args):
    """The drafter part alone, on a target trained earlier (--drafter-only STAGE1_DIR holding tokenizer/ and
    target-hf/ as packed by a full run): corpus prompts, a drafter smoke pass, then the real drafter run."""
    import torch
    import tokenizers
    import transformers
    import demo_lm as LM
    st1 = args.drafter_only
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with Phase("load stage1 + corpus"):
        tok = tokenizers.Tokenizer.from_file(os.path.join(st1, "tokenizer", "tokenizer.json"))
        sp = D.special_ids(tok)
        rows = D.embedding_rows(tok.get_vocab_size())
        target = transformers.Qwen3_5ForCausalLM.from_pretrained(os.path.join(st1, "target-hf"), dtype=torch.float32).to(dev)
        corpus = D.build_corpus(seed=args.seed, total_cap=args.corpus_bytes, workers=args.workers, log=log)
        train_items = D.chat_items(corpus["train"], args.seed, args.chat_items, max_per_file=25, workers=args.workers,
                                   small_talk_copies=args.chat_items // 20, max_parse_bytes=60_000_000)
        held_items = D.chat_items(corpus["heldout"], args.seed + 1, 1500, max_per_file=25, workers=args.workers)
        eot = sp[D.EOT]
        enc = {"code": D.encode_texts(tok, [x for _, _, x in corpus["train"][:4000]], eot),
               "hcode_docs": D.encode_texts(tok, [x for _, _, x in corpus["heldout"]], eot)}
        streams = LM.Streams(LM.Streams.flat(enc["code"]), np.zeros(0, dtype=np.int32), [], eot)
        SUMMARY["drafter_only_inputs"] = {"stage1": st1, "train_items": len(train_items), "held_items": len(held_items),
                                          "code_tokens": int(len(streams.code)), "target_params": LM.n_params(target)}
        log(json.dumps(SUMMARY["drafter_only_inputs"]))
    if not args.skip_smoke:
        with Phase("smoke"):
            try:
                r = {}
                drafter_stage(args, tok, sp, rows, target, streams, enc, train_items, held_items, st1,
                              os.path.join(args.work, "smoke", "stage2"), args.out, True, None, None, r)
                SUMMARY["smoke"] = r
            except Exception as e:  # noqa: BLE001
                SUMMARY["errors"].append(f"smoke: {type(e).__name__}: {e}\n{traceback.format_exc()}")
                log(f"SMOKE FAILED: {e}\n{traceback.format_exc()}")
                write_summary(args.out)
                sys.exit(3)
        log("smoke passed")
    res = {}
    SUMMARY["real"] = res
    drafter_stage(args, tok, sp, rows, target, streams, enc, train_items, held_items, st1,
                  os.path.join(args.work, "real", "stage2"), args.out, False, args.gen_seconds,
                  args.drafter_seconds, res)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="results folder (split archives, summary.json)")
    ap.add_argument("--work", default="/tmp/demo-work")
    ap.add_argument("--deadline", type=float, default=545, help="seconds from start by which everything is packed")
    ap.add_argument("--reserve", type=float, default=185, help="seconds kept for the fixed phases after encoding")
    ap.add_argument("--target-share", type=float, default=0.7)
    ap.add_argument("--target-seconds", type=float, default=0)
    ap.add_argument("--drafter-seconds", type=float, default=0)
    ap.add_argument("--scorer-seconds", type=float, default=40)
    ap.add_argument("--gen-seconds", type=float, default=35)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--rope-theta", type=float, default=1e5)
    ap.add_argument("--lr-target", type=float, default=2e-3)
    ap.add_argument("--lr-scorer", type=float, default=3e-3)
    ap.add_argument("--corpus-bytes", type=int, default=200_000_000)
    ap.add_argument("--tok-sample-bytes", type=int, default=30_000_000)
    ap.add_argument("--chat-items", type=int, default=30_000)
    ap.add_argument("--retrieval-items", type=int, default=2000)
    ap.add_argument("--eval-prompts", type=int, default=48)
    ap.add_argument("--gen-batch", type=int, default=768)
    ap.add_argument("--drafter-layers", type=int, default=3)
    ap.add_argument("--drafter-bs", type=int, default=32)
    ap.add_argument("--drafter-anchors", type=int, default=48)
    ap.add_argument("--drafter-lr", type=float, default=6e-4)
    ap.add_argument("--skip-smoke", action="store_true")
    ap.add_argument("--smoke-only", action="store_true")
    ap.add_argument("--drafter-only", default="", help="STAGE1_DIR: train only the drafter on that target")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 4)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    SUMMARY["args"] = vars(args)
    SUMMARY["command"] = "python3 train/run_demo.py " + " ".join(sys.argv[1:])
    import torch
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    import transformers
    import tokenizers
    SUMMARY["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__,
                           "tokenizers": tokenizers.__version__, "python": sys.version.split()[0],
                           "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    log(json.dumps(SUMMARY["versions"]))
    if args.drafter_only:
        try:
            run_drafter_only(args)
        except KeyboardInterrupt:
            SUMMARY["errors"].append("interrupted (deadline)")
            log("INTERRUPTED")
            d = os.path.join(args.work, "real", "stage2")
            if os.path.isdir(d) and not any(f.startswith("stage2") for f in os.listdir(args.out)):
                pack(d, args.out, "stage2")
        finally:
            write_summary(args.out)
        log("done")
        return
    try:
        with Phase("corpus"):
            corpus = D.build_corpus(seed=args.seed, total_cap=args.corpus_bytes, workers=args.workers, log=log)
            train_items = D.chat_items(corpus["train"], args.seed, args.chat_items, max_per_file=25, workers=args.workers,
                                       small_talk_copies=3000, max_parse_bytes=150_000_000)
            held_items = D.chat_items(corpus["heldout"], args.seed + 1, 1500, max_per_file=25, workers=args.workers)
            rng = random.Random(args.seed)
            retr_train = [D.retrieval_item(corpus["train"], rng, 2000, 13000) for _ in range(args.retrieval_items)]
            retr_held = [D.retrieval_item(corpus["heldout"], rng, 2000, 13000) for _ in range(48)]
            SUMMARY["corpus"] = corpus["stats"]
            SUMMARY["chat_items"] = {"train": len(train_items), "heldout": len(held_items)}
            log(json.dumps(SUMMARY["chat_items"]))
        if not args.skip_smoke:
            with Phase("smoke"):
                try:
                    SUMMARY["smoke"] = run_pipeline(args, corpus, train_items, held_items, retr_train, retr_held,
                                                    os.path.join(args.work, "smoke"), args.out, smoke=True)
                except Exception as e:  # noqa: BLE001
                    SUMMARY["errors"].append(f"smoke: {type(e).__name__}: {e}\n{traceback.format_exc()}")
                    log(f"SMOKE FAILED: {e}\n{traceback.format_exc()}")
                    write_summary(args.out)
                    sys.exit(3)
            log("smoke passed")
            if args.smoke_only:
                write_summary(args.out)
                return
        res = run_pipeline(args, corpus, train_items, held_items, retr_train, retr_held,
                           os.path.join(args.work, "real"), args.out, smoke=False)
        SUMMARY["real"] = {k: v for k, v in res.items()}
    except KeyboardInterrupt:
        SUMMARY["errors"].append("interrupted (deadline)")
        log("INTERRUPTED")
        real = os.path.join(args.work, "real")
        for st in ("stage1", "stage2"):
            d = os.path.join(real, st)
            if os.path.isdir(d) and not any(f.startswith(st) for f in os.listdir(args.out)):
                pack(d, args.out, st)
    finally:
        write_summary(args.out)
    log("done")


if __name__ == "__main__":
    main()
