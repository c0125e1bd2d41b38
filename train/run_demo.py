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


def smoke_failed(args, e):
    """A smoke-phase failure: record it, write the summary, exit with code 3 (no GPU time wasted)."""
    SUMMARY["errors"].append(f"smoke: {type(e).__name__}: {e}\n{traceback.format_exc()}")
    log(f"SMOKE FAILED: {e}\n{traceback.format_exc()}")
    write_summary(args.out)
    sys.exit(3)


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


def _oom_errors():
    import torch
    return tuple(e for e in (getattr(torch.cuda, "OutOfMemoryError", None), getattr(torch, "OutOfMemoryError", None))
                 if e is not None) or (RuntimeError,)


def gen_pairs(target, prompts, n_new, im_end, device, bs, stop_at_im_end, stats=None):
    """(prompt, continuation) pairs; prompts are equal-length lists. Continuations cut after <|im_end|>.
    A batch that runs out of GPU memory is split in halves (stats['oom_splits'] counts them)."""
    import torch
    import dflash as DF
    pairs = []

    def run(rows):
        try:
            return DF.greedy_generate(target, torch.tensor(rows, device=device), n_new).cpu().numpy()
        except _oom_errors():
            if len(rows) < 64:
                raise
            torch.cuda.empty_cache()
            if stats is not None:
                stats["oom_splits"] = stats.get("oom_splits", 0) + 1
            h = len(rows) // 2
            return np.concatenate([run(rows[:h]), run(rows[h:])])

    for i in range(0, len(prompts), bs):
        g = run(prompts[i:i + bs])
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


def code_prompts_mixed(stream, docs, n, length, rng, start_frac):
    """n code prompts of `length` tokens: a share start_frac of file starts (the first `length` tokens of random
    training files, as the held-out evaluation prompts are), the rest random windows of the code stream."""
    cands = [d for d in docs if len(d) > length + 8]
    n_start = min(len(cands), int(round(n * start_frac)))
    rows = code_prompts_random(stream, n - n_start, length, rng)
    if n_start:
        rows += [list(map(int, cands[i][:length])) for i in rng.choice(len(cands), size=n_start, replace=False)]
    return rows


class ChatPool:
    """Training chat conversations, encoded once. A prompt is either the generation prompt of an item (the
    conversation up to its last assistant turn) or, with probability cut_frac, the whole rendering cut at a random
    point inside the last assistant turn, so that the target also continues answers mid-way (as a drafter sees
    them when serving). Items are drawn without replacement until the pool is used up."""

    def __init__(self, tok, items, max_len, im_start, rng):
        items = [it for it in items if it["kind"] != "retrieval"]
        enc = getattr(tok, "encode_batch_fast", None) or tok.encode_batch
        prompts = [e.ids for e in enc([D.prompt_of(it, enable_thinking=False) for it in items], add_special_tokens=False)]
        fulls = [e.ids for e in enc([D.render_item(it) for it in items], add_special_tokens=False)]
        self.rows = []
        for p, f in zip(prompts, fulls):
            if len(p) > max_len:
                continue
            a = max(i for i, t in enumerate(f) if t == im_start) + 2 if im_start in f else len(f)
            self.rows.append((p, f, a))
        self.max_len, self.rng = max_len, rng
        self.order, self.pos, self.passes = rng.permutation(len(self.rows)), 0, 0

    def take(self, n, cut_frac):
        out = []
        while len(out) < n:
            if self.pos >= len(self.order):
                self.order, self.pos, self.passes = self.rng.permutation(len(self.rows)), 0, self.passes + 1
            p, f, a = self.rows[self.order[self.pos]]
            self.pos += 1
            if self.rng.random() < cut_frac and len(f) - 2 > a:
                cut = int(self.rng.integers(a + 1, len(f) - 1))
                q = f[:cut][-self.max_len:]
                out.append(q)
            else:
                out.append(p)
        return out


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
        t_scorer, t_gen = args.scorer_seconds, args.gen_seconds or 35
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
            rng = np.random.default_rng(args.data_seed or args.seed + 11)  # eval prompts do not depend on it
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
            n_new = 24 if smoke else args.gen_new
            code_eval = code_prompts_from_docs(enc["hcode_docs"], n_eval, 32 if smoke else 128, random.Random(args.seed))
            cp = chat_prompts(tok, held_items, n_eval, 192, rng)
            L = max(len(p) for p in cp)
            t = time.time()
            n_eval_new = 24 if smoke else 256
            code_pairs = gen_pairs(target, code_eval, n_eval_new, im_end, dev, 256, False)
            chat_pairs = gen_pairs(target, left_pad(cp, L, eot), n_eval_new, im_end, dev, 256, True)
            res["eval_gen_s"] = round(time.time() - t, 1)
            # training data: target-generated continuations of held-in prompts
            pool = ChatPool(tok, train_items[:400] if smoke else train_items, 160, sp[D.IM_START], rng)
            data, kinds, t, n_tok, nb = [], [], time.time(), 0, 0
            gb = 8 if smoke else args.gen_batch
            gstats = {"code_batches": 0, "chat_batches": 0, "code_tokens": 0, "chat_tokens": 0}
            docs = enc["code"]
            batch_s = []
            while True:
                if smoke and nb >= 2:
                    break
                # stop when the budget is spent, or when the next batch (as long as the slowest so far) would overrun
                if not smoke and nb and (time.time() - t + max(batch_s) > t_gen or nb >= 400):
                    break
                tb = time.time()
                chat = rng.random() < args.gen_chat_frac if not smoke else nb % 2 == 1
                if not chat:
                    length = 24 if smoke else int(rng.choice([48, 64, 96, 128]))
                    pr = code_prompts_mixed(streams.code, docs, gb, length, rng, args.code_start_frac)
                    pairs = gen_pairs(target, pr, n_new, im_end, dev, gb, False, gstats)
                else:
                    cp2 = pool.take(gb, args.chat_cut_frac)
                    pairs = gen_pairs(target, left_pad(cp2, max(len(p) for p in cp2), eot), n_new, im_end, dev, gb, True,
                                      gstats)
                k = "chat" if chat else "code"
                for p, c in pairs:
                    data.append((p + c, len(p)))
                    kinds.append(k)
                    n_tok += len(c)
                    gstats[k + "_tokens"] += len(c)
                gstats[k + "_batches"] += 1
                nb += 1
                batch_s.append(time.time() - tb)
                if not smoke:
                    log(f"gen batch {nb} ({k}): {len(pairs)} x {n_new} in {batch_s[-1]:.1f} s, "
                        f"{n_tok / (time.time() - t):.0f} tok/s so far, {n_tok} tokens")
            gstats["chat_pool"] = {"items": len(pool.rows), "passes": pool.passes}
            res["drafter_data"] = {"sequences": len(data), "generated_tokens": n_tok, "batches": nb,
                                   "seconds": round(time.time() - t, 1), "batch": gb, "new_tokens": n_new,
                                   "tokens_per_s": round(n_tok / max(1e-6, time.time() - t)), **gstats,
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
            if args.init_drafter and not smoke:
                sd = DF.load_safetensors(os.path.join(args.init_drafter, "model.safetensors"))
                with open(os.path.join(args.init_drafter, "config.json")) as fh:
                    icfg = json.load(fh)
                if DF.DFlashConfig.from_hf_json(icfg) != cfg:
                    raise RuntimeError(f"--init-drafter {args.init_drafter}: config differs from this drafter's")
                drafter.load_state_dict({k: v.float() for k, v in sd.items()})
                res["init_drafter"] = args.init_drafter
                log(f"drafter initialized from {args.init_drafter}")
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
                                       log=log, log_every=1, val=[(p + c, len(p)) for p, c in code_pairs[:2]])
            else:
                if not t_drafter:
                    t_drafter = max(20.0, args.deadline - el() - args.drafter_reserve)
                res["drafter_seconds"] = round(t_drafter, 1)
                log(f"drafter training budget {t_drafter:.1f} s")
                val = [(p + c, len(p)) for p, c in code_pairs + chat_pairs]
                rec = DF.train_drafter(drafter, target, tap, data, seconds=t_drafter, bs=args.drafter_bs,
                                       anchors=args.drafter_anchors, lr=args.drafter_lr, weight_decay=args.drafter_wd,
                                       pad_id=eot, seed=args.data_seed or args.seed, log=log, val=val,
                                       val_every_s=args.val_every)
            res["drafter_train"] = rec
            res["drafter_config"] = cfg.hf_json()

        with Phase("tau"):
            res["tau_code"] = DF.measure_tau(drafter, target, tap, code_pairs)
            res["tau_chat"] = DF.measure_tau(drafter, target, tap, chat_pairs)
            # the same measure on sequences it trained on (code batches): the generalization gap
            tr = [(r[:s0], r[s0:]) for (r, s0), k in zip(data, kinds) if k == "code"][:len(code_pairs)]
            res["tau_train_seqs"] = DF.measure_tau(drafter, target, tap, tr)
            log(f"tau on {len(tr)} training sequences {res['tau_train_seqs']['tau']:.3f}")
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


def stage1_from_gguf(gguf, st1):
    """The stage-1 layout run_drafter_only reads (tokenizer/ and target-hf/), rebuilt from the committed GGUF by
    train/gguf_to_hf.py: the dequantized Q8_0 target in float32, its config and its tokenizer."""
    import gguf_to_hf as G2H
    hf = os.path.join(st1, "target-hf")
    cfg, src, g = G2H.gguf_to_hf(gguf, hf, "f32", log=log)
    os.makedirs(os.path.join(st1, "tokenizer"), exist_ok=True)
    copy_tokenizer(hf, os.path.join(st1, "tokenizer"))
    return {"gguf": gguf, "general.name": g.meta.get("general.name"), "tensors": len(src),
            "q8_0_tensors": sum(1 for n in src.values() if g.q8_0_scales(n) is not None)}


def check_target_golden(target, golden_path, dev):
    """The loaded target vs the committed float64 transformers logits of the original bf16 checkpoint
    (tests/data/demo/target_golden.json): top-1 agreement, agreement where the golden margin is over 0.5 nats, and
    the largest |delta log-prob| over the golden top-8 ids. Float32, TF32 off."""
    import torch
    with open(golden_path) as fh:
        gold = json.load(fh)
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    n = agree = conf = conf_agree = 0
    worst = 0.0
    target.eval()
    with torch.no_grad():
        for sq in gold["sequences"]:
            x = torch.tensor(sq["tokens"], device=dev)[None]
            lp = torch.log_softmax(target(input_ids=x, use_cache=False).logits[0].double(), -1).cpu()
            for i, (ids, lps) in enumerate(zip(sq["top_ids"], sq["top_logprobs"])):
                top1 = int(lp[i].argmax())
                n += 1
                agree += top1 == ids[0]
                if lps[0] - lps[1] > 0.5:
                    conf += 1
                    conf_agree += top1 == ids[0]
                worst = max(worst, max(abs(float(lp[i, j]) - v) for j, v in zip(ids, lps)))
    torch.backends.cuda.matmul.allow_tf32 = tf32
    return {"positions": n, "top1_agree": agree, "confident_positions": conf, "confident_agree": conf_agree,
            "max_abs_dlogprob_top8": round(worst, 4)}


def run_drafter_only(args):
    """The drafter part alone, on a target trained earlier: --drafter-only STAGE1_DIR holding tokenizer/ and
    target-hf/ as packed by a full run, or --drafter-only-gguf GGUF (rebuilt by gguf_to_hf.py). Corpus prompts,
    a drafter smoke pass, then the real drafter run."""
    import torch
    import tokenizers
    import transformers
    import demo_lm as LM
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.drafter_only_gguf:
        with Phase("stage1 from gguf"):
            args.drafter_only = os.path.join(args.work, "stage1")
            SUMMARY["gguf_to_hf"] = stage1_from_gguf(args.drafter_only_gguf, args.drafter_only)
    st1 = args.drafter_only
    with Phase("load stage1 + corpus"):
        tok = tokenizers.Tokenizer.from_file(os.path.join(st1, "tokenizer", "tokenizer.json"))
        sp = D.special_ids(tok)
        rows = D.embedding_rows(tok.get_vocab_size())
        target = transformers.Qwen3_5ForCausalLM.from_pretrained(os.path.join(st1, "target-hf"), dtype=torch.float32).to(dev)
        if args.golden_check and os.path.exists(args.golden_check):
            gc = check_target_golden(target, args.golden_check, dev)
            SUMMARY["target_vs_golden"] = gc
            log(f"target vs {args.golden_check}: {json.dumps(gc)}")
            if gc["confident_agree"] < gc["confident_positions"] or gc["max_abs_dlogprob_top8"] > args.golden_tol:
                SUMMARY["errors"].append(f"target differs from the golden logits: {gc}")
                write_summary(args.out)
                log("TARGET CHECK FAILED")
                sys.exit(4)
        corpus = D.build_corpus(seed=args.seed, total_cap=args.corpus_bytes, workers=args.workers, log=log)
        train_items = D.chat_items(corpus["train"], args.seed, args.chat_items, max_per_file=25, workers=args.workers,
                                   small_talk_copies=args.chat_items // 20, max_parse_bytes=150_000_000)
        held_items = D.chat_items(corpus["heldout"], args.seed + 1, 1500, max_per_file=25, workers=args.workers)
        eot = sp[D.EOT]
        enc = {"code": D.encode_texts(tok, [x for _, _, x in corpus["train"][:args.code_files]], eot),
               "hcode_docs": D.encode_texts(tok, [x for _, _, x in corpus["heldout"]], eot)}
        streams = LM.Streams(LM.Streams.flat(enc["code"]), np.zeros(0, dtype=np.int32), [], eot)
        SUMMARY["drafter_only_inputs"] = {"stage1": st1, "train_items": len(train_items), "held_items": len(held_items),
                                          "code_files": len(enc["code"]), "code_tokens": int(len(streams.code)),
                                          "target_params": LM.n_params(target)}
        log(json.dumps(SUMMARY["drafter_only_inputs"]))
    if not args.skip_smoke:
        with Phase("smoke"):
            try:
                r = {}
                drafter_stage(args, tok, sp, rows, target, streams, enc, train_items, held_items, st1,
                              os.path.join(args.work, "smoke", "stage2"), args.out, True, None, None, r)
                SUMMARY["smoke"] = r
            except Exception as e:  # noqa: BLE001
                smoke_failed(args, e)
        log("smoke passed")
        if args.smoke_only:
            return
    res = {}
    SUMMARY["real"] = res
    drafter_stage(args, tok, sp, rows, target, streams, enc, train_items, held_items, st1,
                  os.path.join(args.work, "real", "stage2"), args.out, False, args.gen_seconds or 120,
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
    ap.add_argument("--gen-seconds", type=float, default=0,
                    help="generation budget of the drafter data (default: 35 s in a full run, 120 s drafter-only)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--rope-theta", type=float, default=1e5)
    ap.add_argument("--lr-target", type=float, default=2e-3)
    ap.add_argument("--lr-scorer", type=float, default=3e-3)
    ap.add_argument("--corpus-bytes", type=int, default=200_000_000)
    ap.add_argument("--tok-sample-bytes", type=int, default=30_000_000)
    ap.add_argument("--chat-items", type=int, default=30_000)
    ap.add_argument("--retrieval-items", type=int, default=2000)
    ap.add_argument("--eval-prompts", type=int, default=48)
    ap.add_argument("--gen-batch", type=int, default=8192, help="prompts per greedy generation batch")
    ap.add_argument("--drafter-layers", type=int, default=3)
    ap.add_argument("--drafter-bs", type=int, default=64)
    ap.add_argument("--drafter-anchors", type=int, default=96)
    ap.add_argument("--drafter-lr", type=float, default=6e-4)
    ap.add_argument("--skip-smoke", action="store_true")
    ap.add_argument("--smoke-only", action="store_true")
    ap.add_argument("--drafter-only", default="", help="STAGE1_DIR: train only the drafter on that target")
    ap.add_argument("--drafter-only-gguf", default="",
                    help="GGUF: train only the drafter, on the target rebuilt from this file by gguf_to_hf.py "
                         "(e.g. models/demo/qwen35-demo-target-q8_0.gguf)")
    ap.add_argument("--golden-check", default=os.path.join(HERE, "..", "tests", "data", "demo", "target_golden.json"),
                    help="drafter-only: compare the loaded target with these float64 logits first (exit 4 on a mismatch)")
    ap.add_argument("--golden-tol", type=float, default=0.75, help="largest |delta log-prob| over the golden top-8 ids")
    ap.add_argument("--data-seed", type=int, default=0,
                    help="seed of the drafter's generation prompts and training order (default: from --seed); a warm "
                         "start uses another one so that it sees new data. The corpus split and the eval prompts keep --seed")
    ap.add_argument("--init-drafter", default="", help="HF drafter folder to start the drafter from (warm start)")
    ap.add_argument("--drafter-wd", type=float, default=0.01, help="drafter weight decay (matrices only)")
    ap.add_argument("--drafter-reserve", type=float, default=30,
                    help="drafter-only without --drafter-seconds: seconds kept after training (tau, save, pack)")
    ap.add_argument("--gen-new", type=int, default=256, help="tokens the target generates per training sequence")
    ap.add_argument("--gen-chat-frac", type=float, default=0.4, help="share of generation batches with chat prompts")
    ap.add_argument("--chat-cut-frac", type=float, default=0.5,
                    help="share of chat prompts cut inside the assistant answer instead of at its start")
    ap.add_argument("--code-start-frac", type=float, default=0.25, help="share of code prompts that are file starts")
    ap.add_argument("--code-files", type=int, default=6000, help="drafter-only: training files encoded for prompts")
    ap.add_argument("--val-every", type=float, default=20, help="seconds between held-out drafter loss checks")
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
    if args.drafter_only or args.drafter_only_gguf:
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
                    smoke_failed(args, e)
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
