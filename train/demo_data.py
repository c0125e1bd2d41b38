"""Corpus, chat data, long-context retrieval items and the byte-level BPE tokenizer of the demo models.

Everything here is deterministic given the seed and the files found on the machine (the Python sources and
docs of the installed packages and of the standard library). See train/README.md for the recipe.

Only the standard library is needed to build the corpus and render chat text; `tokenizers` is imported
lazily by the functions that train, save or use the tokenizer.
"""
import ast
import hashlib
import json
import os
import random
import sysconfig
import textwrap
from concurrent.futures import ProcessPoolExecutor

# ---------------------------------------------------------------------------------------------
# Tokenizer layout
# ---------------------------------------------------------------------------------------------

# The Qwen3.5 pre-tokenizer regex (HF tokenizer.json form). Our C++ spells the same thing in PCRE2
# (src/tokenizer/pretokenizer.cpp, "qwen35"); the converter picks "qwen35" for qwen35 models.
QWEN35_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
                  r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

BPE_VOCAB = 4096
# (text, special): added after the BPE vocabulary, in this order (ids BPE_VOCAB, BPE_VOCAB+1, ...).
# As in Qwen's tokenizers, <|...|> tokens are "special" and the tag-like ones are plain added tokens.
ADDED_TOKENS = [
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<think>", False), ("</think>", False), ("<tool_call>", False), ("</tool_call>", False),
    ("<tool_response>", False), ("</tool_response>", False), ("<|mask|>", True),
]
EOT, IM_START, IM_END, MASK = "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|mask|>"


def embedding_rows(n_tokens, multiple=64):
    return (n_tokens + multiple - 1) // multiple * multiple


# A Qwen-style ChatML template: system/user/assistant/tool turns, tools in the system turn, XML tool
# calls, <think> blocks (an empty one when the assistant message has no reasoning_content), and
# enable_thinking=false adds the empty think block to the generation prompt, as Qwen3 templates do.
CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou have access to the following functions:\\n\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nIf you choose to call a function ONLY reply in the following format with NO suffix:"
    "\\n\\n<tool_call>\\n<function=example_function_name>\\n<parameter=example_parameter_1>\\nvalue_1\\n"
    "</parameter>\\n</function>\\n</tool_call><|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' %}"
    "{{- '<|im_start|>user\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if message.reasoning_content is defined and message.reasoning_content %}"
    "{{- '<think>\\n' + message.reasoning_content + '\\n</think>\\n\\n' }}"
    "{%- else %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- if message.content %}{{- message.content }}{%- endif %}"
    "{%- if message.tool_calls is defined and message.tool_calls %}"
    "{%- for tc in message.tool_calls %}"
    "{%- if tc.function is defined %}{%- set tc = tc.function %}{%- endif %}"
    "{%- if loop.first and message.content %}{{- '\\n\\n' }}{%- elif not loop.first %}{{- '\\n' }}{%- endif %}"
    "{{- '<tool_call>\\n<function=' + tc.name + '>\\n' }}"
    "{%- for name, value in tc.arguments.items() %}"
    "{{- '<parameter=' + name + '>\\n' }}"
    "{%- if value is string %}{{- value }}{%- else %}{{- value | tojson }}{%- endif %}"
    "{{- '\\n</parameter>\\n' }}"
    "{%- endfor %}"
    "{{- '</function>\\n</tool_call>' }}"
    "{%- endfor %}"
    "{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)


def _tojson(x):
    # transformers' chat-template tojson: json.dumps(ensure_ascii=False), key order kept
    return json.dumps(x, ensure_ascii=False)


def render_chat(messages, tools=None, add_generation_prompt=False, enable_thinking=None):
    """Python mirror of CHAT_TEMPLATE (checked against transformers' renderer in the smoke phase)."""
    out = []
    if tools:
        out.append("<|im_start|>system\n")
        if messages[0]["role"] == "system":
            out.append(messages[0]["content"] + "\n\n")
        out.append("# Tools\n\nYou have access to the following functions:\n\n<tools>")
        for t in tools:
            out.append("\n" + _tojson(t))
        out.append("\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:"
                   "\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n"
                   "</parameter>\n</function>\n</tool_call><|im_end|>\n")
    elif messages[0]["role"] == "system":
        out.append("<|im_start|>system\n" + messages[0]["content"] + "<|im_end|>\n")
    for i, m in enumerate(messages):
        role = m["role"]
        if role == "user":
            out.append("<|im_start|>user\n" + m["content"] + "<|im_end|>\n")
        elif role == "assistant":
            out.append("<|im_start|>assistant\n")
            rc = m.get("reasoning_content")
            out.append("<think>\n" + rc + "\n</think>\n\n" if rc else "<think>\n\n</think>\n\n")
            if m.get("content"):
                out.append(m["content"])
            for j, tc in enumerate(m.get("tool_calls") or []):
                tc = tc.get("function", tc)
                if j == 0 and m.get("content"):
                    out.append("\n\n")
                elif j > 0:
                    out.append("\n")
                out.append("<tool_call>\n<function=" + tc["name"] + ">\n")
                for k, v in tc["arguments"].items():
                    out.append("<parameter=" + k + ">\n" + (v if isinstance(v, str) else _tojson(v)) + "\n</parameter>\n")
                out.append("</function>\n</tool_call>")
            out.append("<|im_end|>\n")
        elif role == "tool":
            if i == 0 or messages[i - 1]["role"] != "tool":
                out.append("<|im_start|>user")
            out.append("\n<tool_response>\n" + m["content"] + "\n</tool_response>")
            if i == len(messages) - 1 or messages[i + 1]["role"] != "tool":
                out.append("<|im_end|>\n")
    if add_generation_prompt:
        out.append("<|im_start|>assistant\n")
        if enable_thinking is False:
            out.append("<think>\n\n</think>\n\n")
    return "".join(out)


# ---------------------------------------------------------------------------------------------
# Corpus: files of installed packages, deduplicated, split by package
# ---------------------------------------------------------------------------------------------

CODE_EXT = (".py",)
DOC_EXT = (".md", ".rst", ".txt")
SKIP_DIRS = {"__pycache__", "site-packages", "dist-packages", ".git", "node_modules"}


def default_roots():
    paths = sysconfig.get_paths()
    roots = []
    for key, tag in (("purelib", ""), ("platlib", ""), ("stdlib", "stdlib.")):
        p = paths.get(key)
        if p and os.path.isdir(p) and all(os.path.realpath(p) != os.path.realpath(r) for r, _ in roots):
            roots.append((p, tag))
    return roots


def list_files(roots, max_bytes=300_000):
    """[(package, relpath, abspath, size)] for code and doc files under the roots."""
    out = []
    for root, tag in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            rel_dir = os.path.relpath(dirpath, root)
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.endswith((".dist-info", ".egg-info"))
                                 and not (tag and rel_dir == "." and d in ("test", "idlelib", "turtledemo", "lib2to3")))
            for f in sorted(filenames):
                if not f.endswith(CODE_EXT + DOC_EXT):
                    continue
                ap = os.path.join(dirpath, f)
                try:
                    size = os.path.getsize(ap)
                except OSError:
                    continue
                if size < 200 or size > max_bytes:
                    continue
                rel = os.path.relpath(ap, root)
                top = rel.split(os.sep)[0]
                if top.endswith(".py"):
                    top = top[:-3]
                if top.startswith("_") and not tag:  # _distutils_hack, __editable__ files
                    continue
                out.append((tag + top, rel, ap, size))
    return out


def _read_file(item):
    pkg, rel, ap, _ = item
    try:
        with open(ap, "rb") as fh:
            raw = fh.read()
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    text = text.replace("\r\n", "\n")
    lines = text.split("\n")
    if max(len(l) for l in lines) > 1000 or "\x00" in text:
        return None
    if rel.endswith(DOC_EXT) and len(text) < 300:
        return None
    return (pkg, rel, text, hashlib.sha1(text.encode("utf-8")).hexdigest())


def _h(s, seed):
    return hashlib.sha1(f"{seed}:{s}".encode()).hexdigest()


def build_corpus(roots=None, seed=1234, per_package_cap=24_000_000, total_cap=300_000_000,
                 heldout_bytes=3_000_000, workers=16, log=print):
    """Read, deduplicate and split the files. Returns dict with 'train' / 'heldout' lists of
    (package, relpath, text), 'heldout_packages' and stats."""
    roots = roots or default_roots()
    files = list_files(roots)
    # Package sizes before reading (for the held-out choice and the caps).
    pkg_bytes = {}
    for pkg, _, _, size in files:
        pkg_bytes[pkg] = pkg_bytes.get(pkg, 0) + size
    # Held-out packages: a deterministic pseudo-random choice of mid-sized packages.
    cands = sorted((p for p, b in pkg_bytes.items() if 40_000 <= b <= 4_000_000), key=lambda p: _h(p, seed))
    heldout, hb = [], 0
    for p in cands:
        if hb >= heldout_bytes and len(heldout) >= 6:
            break
        heldout.append(p)
        hb += pkg_bytes[p]
    heldout_set = set(heldout)
    # Per-package cap: keep files in a seeded order until the cap.
    files.sort(key=lambda f: (f[0], _h(f[1], seed)))
    kept, used = [], {}
    for f in files:
        if used.get(f[0], 0) + f[3] > per_package_cap:
            continue
        used[f[0]] = used.get(f[0], 0) + f[3]
        kept.append(f)
    with ProcessPoolExecutor(max_workers=workers) as ex:
        read = list(ex.map(_read_file, kept, chunksize=64))
    seen, train, held = set(), [], []
    n_dup = n_bad = 0
    total = 0
    # Held-out files first, so that a file shared with a training package stays out of training.
    order = sorted(range(len(read)), key=lambda i: (kept[i][0] not in heldout_set, _h(kept[i][1], seed)))
    for i in order:
        r = read[i]
        if r is None:
            n_bad += 1
            continue
        pkg, rel, text, digest = r
        if digest in seen:
            n_dup += 1
            continue
        seen.add(digest)
        if pkg in heldout_set:
            held.append((pkg, rel, text))
        elif total + len(text) <= total_cap:
            train.append((pkg, rel, text))
            total += len(text)
    train.sort(key=lambda x: _h(x[1] + x[0], seed))
    held.sort(key=lambda x: (x[0], x[1]))
    stats = {"roots": [r for r, _ in roots], "files_listed": len(files), "files_after_caps": len(kept),
             "unreadable_or_filtered": n_bad, "exact_duplicates": n_dup, "train_files": len(train),
             "train_bytes": sum(len(t) for _, _, t in train), "heldout_files": len(held),
             "heldout_bytes": sum(len(t) for _, _, t in held), "packages": len(pkg_bytes),
             "heldout_packages": heldout,
             "train_code_bytes": sum(len(t) for _, r, t in train if r.endswith(CODE_EXT)),
             "train_doc_bytes": sum(len(t) for _, r, t in train if r.endswith(DOC_EXT))}
    log(json.dumps({k: v for k, v in stats.items() if k != "roots"}))
    return {"train": train, "heldout": held, "heldout_packages": heldout, "stats": stats}


# ---------------------------------------------------------------------------------------------
# Chat items derived from code
# ---------------------------------------------------------------------------------------------

SYSTEMS = ["You are a helpful assistant.", "You are a helpful coding assistant.",
           "You are an expert Python programmer. Answer concisely."]

SMALL_TALK = [
    ("Hello!", "Hello! How can I help you today?"),
    ("Hi, who are you?", "I am a small assistant trained on Python code and documentation. I can write and explain Python functions."),
    ("What can you do?", "I can write short Python functions, explain what a piece of code does, and answer simple questions about Python libraries."),
    ("Thank you!", "You're welcome! Let me know if you need anything else."),
    ("What is Python?", "Python is a high-level, general-purpose programming language known for its readable syntax and its large standard library."),
    ("How do I reverse a list in Python?", "Use slicing or the `reverse` method:\n\n```python\nitems = [1, 2, 3]\nreversed_items = items[::-1]\nitems.reverse()\n```"),
    ("What is a dictionary in Python?", "A dictionary (`dict`) maps keys to values. For example:\n\n```python\nages = {\"alice\": 31, \"bob\": 27}\nprint(ages[\"alice\"])\n```"),
    ("How do I read a file in Python?", "Open it with a `with` block so that it is closed afterwards:\n\n```python\nwith open(\"data.txt\", encoding=\"utf-8\") as f:\n    text = f.read()\n```"),
    ("What is a list comprehension?", "A list comprehension builds a list from an iterable in one expression:\n\n```python\nsquares = [x * x for x in range(10)]\n```"),
    ("How do I install a package?", "Use pip from a terminal:\n\n```\npython -m pip install package-name\n```"),
    ("Write a function that adds two numbers.", "```python\ndef add(a, b):\n    \"\"\"Return the sum of a and b.\"\"\"\n    return a + b\n```"),
    ("What is the difference between a list and a tuple?", "A list is mutable: you can change its items. A tuple is immutable: once created, it cannot be changed."),
    ("How do I sort a list of numbers?", "Use `sorted` to get a new list, or the `sort` method to sort in place:\n\n```python\nnumbers = [3, 1, 2]\nprint(sorted(numbers))\nnumbers.sort()\n```"),
    ("What does `len` do?", "`len` returns the number of items in a container, such as a list, a string or a dictionary."),
    ("Goodbye!", "Goodbye! Happy coding."),
    ("Write a function that checks if a number is even.", "```python\ndef is_even(n):\n    \"\"\"Return True if n is even.\"\"\"\n    return n % 2 == 0\n```"),
    ("How do I loop over a dictionary?", "Use `items()` to get keys and values together:\n\n```python\nfor key, value in data.items():\n    print(key, value)\n```"),
    ("What is an exception?", "An exception is an error raised while a program runs. You can handle it with `try` and `except`:\n\n```python\ntry:\n    value = int(text)\nexcept ValueError:\n    value = 0\n```"),
]


def _summary(doc):
    if not doc:
        return None
    para = doc.strip().split("\n\n")[0]
    s = " ".join(l.strip() for l in para.split("\n")).strip()
    if not (15 <= len(s) <= 300) or " " not in s or s.startswith((">>>", ":", "..")):
        return None
    letters = sum(c.isalpha() for c in s)
    if letters < 0.5 * len(s):
        return None
    return s


def _args(fn):
    a = fn.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    names = [n for n in names if n not in ("self", "cls")]
    defaults = {}
    pos = a.posonlyargs + a.args
    for arg, d in zip(pos[len(pos) - len(a.defaults):], a.defaults):
        defaults[arg.arg] = d
    for arg, d in zip(a.kwonlyargs, a.kw_defaults):
        if d is not None:
            defaults[arg.arg] = d
    return names, defaults


def _functions(pkg, rel, text):
    """(name, module, source, source_without_docstring, summary, args, defaults) for documented functions."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    module = rel[:-3].replace(os.sep, ".")
    if module.endswith(".__init__"):
        module = module[: -len(".__init__")]
    if pkg.startswith("stdlib."):
        module = module  # stdlib modules are importable by their relative path
    lines = text.split("\n")
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if node.name.startswith("__") or not node.body:
            continue
        s = _summary(ast.get_docstring(node))
        if not s:
            continue
        n_lines = node.end_lineno - node.lineno + 1
        if n_lines < 4 or n_lines > 45:
            continue
        body = node.body[1:]
        if not body or (len(body) == 1 and isinstance(body[0], (ast.Pass, ast.Raise))):
            continue
        seg = lines[node.lineno - 1: node.end_lineno]
        seg[0] = " " * node.col_offset + seg[0][node.col_offset:] if len(seg[0]) >= node.col_offset else seg[0]
        src = textwrap.dedent("\n".join(seg)).rstrip()
        d0, d1 = node.body[0].lineno - node.lineno, node.body[0].end_lineno - node.lineno
        nodoc = textwrap.dedent("\n".join(seg[:d0] + seg[d1 + 1:])).rstrip()
        if len(src) > 2500:
            continue
        names, defaults = _args(node)
        dtext = {}
        for k, v in defaults.items():
            try:
                dtext[k] = ast.unparse(v)
            except Exception:  # noqa: BLE001 - unparse of odd nodes
                pass
        out.append((node.name, module, src, nodoc, s, names, dtext))
    return out


def _fmt_args(names, defaults):
    return ", ".join(f"{n}={defaults[n]}" if n in defaults else n for n in names)


def _lower_first(s):
    return s[:1].lower() + s[1:] if s[:2] != s[:2].upper() else s


def _chat_items_for_file(args):
    pkg, rel, text, seed, max_items = args
    rng = random.Random(_h(rel + pkg, seed))
    items = []
    for name, module, src, nodoc, summ, names, defaults in _functions(pkg, rel, text)[:max_items]:
        msgs = []
        if rng.random() < 0.35:
            msgs.append({"role": "system", "content": rng.choice(SYSTEMS)})
        kind = rng.random()
        tools = None
        think = rng.random() < 0.25
        sig = f"{name}({_fmt_args(names, defaults)})"
        if kind < 0.40:
            user = rng.choice([f"Write a Python function `{sig}` that does the following:\n{summ}",
                               f"Implement `{sig}` in Python. {summ}",
                               f"Write a Python function named `{name}`. {summ}"])
            answer = "```python\n" + src + "\n```"
            reason = f"I need to write `{name}`. It should: {_lower_first(summ)} I will write it in Python."
        elif kind < 0.70:
            user = rng.choice(["Explain this function:", "What does this function do?",
                               "Explain what the following Python code does."]) + "\n\n```python\n" + nodoc + "\n```"
            answer = f"This is `{name}`. {summ}"
            if names:
                answer += "\n\nIt takes " + ", ".join(f"`{n}`" for n in names) + "."
            reason = f"The code defines `{name}`. Reading its body, it does this: {_lower_first(summ)}"
        elif kind < 0.96:
            q = rng.randrange(3)
            if q == 0:
                user = f"What does `{name}` in `{module}` do?"
                answer = summ
            elif q == 1:
                user = f"What are the parameters of `{module}.{name}`?"
                if names:
                    parts = [f"`{n}` (default `{defaults[n]}`)" if n in defaults else f"`{n}`" for n in names]
                    answer = f"`{name}` takes {len(names)} parameter{'s' if len(names) > 1 else ''}: " + ", ".join(parts) + "."
                else:
                    answer = f"`{name}` takes no parameters."
            else:
                user = f"Where is the function `{name}` defined?"
                answer = f"`{name}` is defined in the module `{module}`."
            reason = f"The question is about `{name}` from `{module}`."
        else:
            props = {n: {"type": "string", "description": f"The `{n}` argument."} for n in names}
            req = [n for n in names if n not in defaults]
            tools = [{"type": "function", "function": {"name": name, "description": summ,
                                                       "parameters": {"type": "object", "properties": props, "required": req}}}]
            vals = {n: defaults.get(n, rng.choice(["example", "data.txt", "42", "true", "items"])) for n in req}
            user = f"Please use the `{name}` tool" + (" with " + ", ".join(f"{k}={v}" for k, v in vals.items()) if vals else "") + "."
            msgs.append({"role": "user", "content": user})
            msgs.append({"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": name, "arguments": vals}}]})
            items.append({"messages": msgs, "tools": tools, "kind": "tool"})
            continue
        msgs.append({"role": "user", "content": user})
        a = {"role": "assistant", "content": answer}
        if think:
            a["reasoning_content"] = reason
        msgs.append(a)
        items.append({"messages": msgs, "tools": tools, "kind": "write" if kind < 0.4 else "explain" if kind < 0.7 else "qa"})
    return items


def chat_items(files, seed, max_items, max_per_file=6, workers=16, small_talk_copies=0, max_parse_bytes=None):
    """Chat conversations derived from the .py files (the first max_parse_bytes of them, in the given
    order), plus optional small-talk copies."""
    jobs, n = [], 0
    for p, r, t in files:
        if not r.endswith(".py"):
            continue
        if max_parse_bytes is not None and n >= max_parse_bytes:
            break
        jobs.append((p, r, t, seed, max_per_file))
        n += len(t)
    items = []
    ex = ProcessPoolExecutor(max_workers=workers)
    try:
        for res in ex.map(_chat_items_for_file, jobs, chunksize=16):
            items.extend(res)
            if len(items) >= max_items:
                break
    finally:
        ex.shutdown(wait=True, cancel_futures=True)
    items = items[:max_items]
    rng = random.Random(seed)
    for i in range(small_talk_copies):
        u, a = SMALL_TALK[i % len(SMALL_TALK)]
        msgs = ([{"role": "system", "content": rng.choice(SYSTEMS)}] if rng.random() < 0.35 else [])
        msgs += [{"role": "user", "content": u}, {"role": "assistant", "content": a}]
        items.append({"messages": msgs, "tools": None, "kind": "smalltalk"})
    rng.shuffle(items)
    return items


def render_item(item):
    return render_chat(item["messages"], tools=item.get("tools"))


def prompt_of(item, enable_thinking=False):
    """The conversation up to (and excluding) the last assistant turn, with the generation prompt."""
    msgs = item["messages"]
    k = max(i for i, m in enumerate(msgs) if m["role"] == "assistant")
    return render_chat(msgs[:k], tools=item.get("tools"), add_generation_prompt=True, enable_thinking=enable_thinking)


# ---------------------------------------------------------------------------------------------
# Long-context retrieval items (a fact buried in code, the question at the end)
# ---------------------------------------------------------------------------------------------

NAMES = ["amber", "falcon", "granite", "harbor", "juniper", "lantern", "meadow", "nebula", "orchid", "pepper",
         "quartz", "raven", "saffron", "tundra", "velvet", "willow", "zephyr", "cobalt", "ember", "glacier",
         "hazel", "indigo", "jasper", "kestrel", "lotus", "marble", "nimbus", "onyx", "pebble", "quill",
         "river", "sierra", "thistle", "umber", "violet", "walnut", "yarrow", "aspen", "birch", "cedar"]


def retrieval_item(files, rng, min_chars, max_chars):
    """A long user message (code files) with one fact line inserted, a question at the end, and the answer."""
    target = rng.randint(min_chars, max_chars)
    parts, n = [], 0
    while n < target:
        p, r, t = files[rng.randrange(len(files))]
        if not r.endswith(".py"):
            continue
        take = t[: target - n + 200]
        parts.append(f"# File: {p}/{r}\n" + take)
        n += len(take)
    doc_lines = "\n\n".join(parts)[:target].split("\n")
    name, num = rng.choice(NAMES), rng.randint(1000, 999999)
    if rng.random() < 0.5:
        fact = f"# Note: the secret code for project {name} is {num}."
        question = f"What is the secret code for project {name}?"
        answer = f"The secret code for project {name} is {num}."
    else:
        var = f"{name.upper()}_TOKEN"
        fact = f'{var} = "{num}"'
        question = f"What is the value of {var}?"
        answer = f'The value of {var} is "{num}".'
    depth = rng.uniform(0.02, 0.95)
    at = int(depth * len(doc_lines))
    doc = "\n".join(doc_lines[:at] + [fact] + doc_lines[at:])
    messages = [{"role": "user", "content": f"{doc}\n\nQuestion: {question}"},
                {"role": "assistant", "content": answer}]
    return {"messages": messages, "tools": None, "kind": "retrieval", "question": question, "answer": answer,
            "fact": fact, "depth": round(depth, 4)}


# ---------------------------------------------------------------------------------------------
# Tokenizer (HF tokenizers) and files
# ---------------------------------------------------------------------------------------------

def train_tokenizer(texts, vocab_size=BPE_VOCAB):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    # No normalizer (Qwen's has NFC; our engine, like llama.cpp, applies none, so ours has none either).
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN35_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    n_bpe = tok.get_vocab_size()
    for text, special in ADDED_TOKENS:
        t = AddedToken(text, special=special, normalized=False, lstrip=False, rstrip=False, single_word=False)
        (tok.add_special_tokens if special else tok.add_tokens)([t])
    ids = {text: tok.token_to_id(text) for text, _ in ADDED_TOKENS}
    assert [ids[t] for t, _ in ADDED_TOKENS] == list(range(n_bpe, n_bpe + len(ADDED_TOKENS))), ids
    return tok


def save_tokenizer(tok, out_dir, model_max_length=4096):
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    decoder = {}
    for text, special in ADDED_TOKENS:
        decoder[str(tok.token_to_id(text))] = {"content": text, "lstrip": False, "normalized": False,
                                               "rstrip": False, "single_word": False, "special": special}
    cfg = {"add_bos_token": False, "add_prefix_space": False, "added_tokens_decoder": decoder,
           "bos_token": None, "eos_token": IM_END, "pad_token": EOT, "unk_token": None,
           "model_max_length": model_max_length, "clean_up_tokenization_spaces": False,
           "mask_token": MASK, "tokenizer_class": "PreTrainedTokenizerFast", "chat_template": CHAT_TEMPLATE}
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as fh:
        json.dump(cfg, fh, indent=1, ensure_ascii=False)
        fh.write("\n")
    return cfg


def special_ids(tok):
    return {text: tok.token_to_id(text) for text, _ in ADDED_TOKENS}


def encode_texts(tok, texts, sep_id=None, batch=4096):
    """Token ids of each text (a list of int32 arrays); sep_id appended to each when given."""
    import numpy as np
    enc = getattr(tok, "encode_batch_fast", None) or tok.encode_batch
    out = []
    for i in range(0, len(texts), batch):
        for e in enc(texts[i:i + batch], add_special_tokens=False):
            ids = e.ids
            if sep_id is not None:
                ids.append(sep_id)
            out.append(np.asarray(ids, dtype=np.int32))
    return out
