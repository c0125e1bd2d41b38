#!/usr/bin/env bash
# Speculative decoding on the demo pair: plain vs --draft decode tok/s and tau (mean committed
# tokens per draft step) on held-out code prompts (bench/prompts/code.txt, raw completion) and
# chat prompts (bench/prompts/chat.txt, --chat), greedy and temperature 0.7, in one run.
# Usage: bench/spec_demo.sh [TARGET.gguf DRAFT.gguf] [--max-prompts N] [--bin PATH] [-n N]
#                           [--code-prompts FILE] [--sets "code chat"]
#                           [extra run flags, e.g. --device cuda]
# --bin: the deltaflash binary (default build/deltaflash). -n: tokens generated per prompt
# (default 128). --code-prompts: the code prompt file (default bench/prompts/code.txt; e.g. the
# output of bench/heldout_code_prompts.py, the drafter's own held-out distribution). --sets:
# which prompt sets to run (default both).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build/deltaflash
TARGET=models/demo/qwen35-demo-target-q8_0.gguf
DRAFT=models/demo/qwen35-demo-drafter-q8_0.gguf
if [ $# -ge 2 ] && [ "${1#-}" = "$1" ]; then TARGET=$1; DRAFT=$2; shift 2; fi
MAX_PROMPTS=1000
N=128
CODE_PROMPTS=bench/prompts/code.txt
SETS="code chat"
while [ $# -gt 0 ]; do
  case "$1" in
    --max-prompts) MAX_PROMPTS=$2; shift 2 ;;
    --bin) BIN=$2; shift 2 ;;
    -n) N=$2; shift 2 ;;
    --code-prompts) CODE_PROMPTS=$2; shift 2 ;;
    --sets) SETS=$2; shift 2 ;;
    *) break ;;
  esac
done
out=$(mktemp)
jsonl=$(mktemp)
trap 'rm -f "$out" "$jsonl"' EXIT
# Each (set, temperature, mode) is one process over all its prompts (run --prompt-file), as a
# server sees them: CUDA graphs and the speculation policy's step costs carry over from prompt
# to prompt, so the first prompt alone pays the warm-up. Medians are over prompts.
for set in $SETS; do
  chat_flag=""; [ "$set" = chat ] && chat_flag="--chat"
  file=bench/prompts/$set.txt; [ "$set" = code ] && file=$CODE_PROMPTS
  # The file's lines (printf %b escapes) as JSON strings, one per line.
  head -n "$MAX_PROMPTS" "$file" | while IFS= read -r prompt; do
    printf '%b' "$prompt" | python3 -c 'import json, sys; print(json.dumps(sys.stdin.read().rstrip("\n")))'
  done >"$jsonl"
  for temp in 0 0.7; do
    for mode in plain spec; do
      extra=(); [ "$mode" = spec ] && extra=(--draft "$DRAFT")
      "$BIN" run -m "$TARGET" --prompt-file "$jsonl" $chat_flag -n $N --temp "$temp" --seed 7 --stats-json \
        "${extra[@]}" "$@" 2>&1 >/dev/null | { grep '^{' || true; } | sed "s/^/$set $temp $mode /" >>"$out"
    done
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    s, temp, mode, js = line.split(" ", 3)
    rows.setdefault((s, temp), {}).setdefault(mode, []).append(json.loads(js))
# tau counts only the steps that speculated; "spec share" is the share of generated tokens those
# steps committed (the adaptive policy turns speculation off where it does not pay, so compare
# tau across devices or builds at full width: --draft-adaptive false).
# ms/draft step and ms/plain step: the speculative run's mean wall time per step of each kind
# (host work included), against the plain run's ms/token: what the policy compares.
print(f"{'prompts':8} {'temp':5} {'plain tok/s':>12} {'spec tok/s':>11} {'speedup':>8} {'tau':>6} {'accepted/drafted':>17} {'spec share':>10}"
      f" {'ms/draft step':>13} {'ms/plain step':>13} {'plain run ms/token':>18}")
for (s, temp), m in sorted(rows.items()):
    plain = statistics.median(r["decode_tok_s"] for r in m["plain"])
    spec = statistics.median(r["decode_tok_s"] for r in m["spec"])
    steps = sum(r.get("draft_steps", 0) for r in m["spec"])
    acc = sum(r.get("accepted_tokens", 0) for r in m["spec"])
    drafted = sum(r.get("drafted_tokens", 0) for r in m["spec"])
    tau = (acc + steps) / steps if steps else 0
    generated = sum(r.get("generated_tokens", 0) for r in m["spec"])
    share = (acc + steps) / generated if generated else 0
    plain_steps = sum(r.get("plain_steps", 0) for r in m["spec"])
    draft_ms = 1e3 * sum(r.get("draft_step_seconds", 0) for r in m["spec"]) / steps if steps else 0
    plain_ms = 1e3 * sum(r.get("plain_step_seconds", 0) for r in m["spec"]) / plain_steps if plain_steps else 0
    plain_run_ms = 1e3 * sum(r["decode_seconds"] for r in m["plain"]) / max(1, sum(r["generated_tokens"] - 1 for r in m["plain"]))
    print(f"{s:8} {temp:5} {plain:12.1f} {spec:11.1f} {spec / plain:7.2f}x {tau:6.2f} {acc:8}/{drafted:<8} {share:9.0%}"
          f" {draft_ms:13.3f} {plain_ms:13.3f} {plain_run_ms:18.3f}")
# CUDA graphs (counts since the process started, so the last prompt's line has them all): steps
# run op by op, captured, replayed. Many captures per token mean the steps keep changing shape.
for (s, temp), m in sorted(rows.items()):
    g = m["spec"][-1].get("cuda_graphs")
    if g:
        print(f"{s} {temp} speculative run, CUDA graph steps: {g['direct']} op by op, {g['captured']} captured, {g['replayed']} replayed")
PY
