#!/usr/bin/env bash
# CPU speed of deltaflash vs llama.cpp (llama-bench built by bench/build-llama-bench.sh)
# on the same GGUF files: prompt processing (pp) and generation (tg) tokens/s, the
# ratios deltaflash / llama.cpp, and one markdown row per model for docs/performance.md.
#
# Without MODEL arguments it benchmarks random-weight Qwen3.5-0.8B-shaped models at
# Q8_0 and Q4_K, written once by `deltaflash make-model` into models/generated/bench/.
#
# Usage: bench/cpu_vs_llama.sh [options] [MODEL.gguf ...]
#   -p N             prompt tokens (default 512)
#   -n N             generated tokens (default 128)
#   -t N             threads (default 2)
#   -r N             repetitions, both tools report the median (default 3)
#   --deltaflash B   deltaflash binary (default build/deltaflash)
#   --llama-bench B  llama-bench binary (default third_party/llama.cpp-build/bin/llama-bench;
#                    built on demand by bench/build-llama-bench.sh)
#   --only WHICH     run only "deltaflash" or only "llama"
#   --models-dir D   where the default models are generated (default models/generated/bench)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DF="$ROOT/build/deltaflash"
LB="$ROOT/third_party/llama.cpp-build/bin/llama-bench"
GEN_DIR="$ROOT/models/generated/bench"
P=512 N=128 T=2 R=3 ONLY=""
MODELS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    -p) P="$2"; shift ;;
    -n) N="$2"; shift ;;
    -t) T="$2"; shift ;;
    -r) R="$2"; shift ;;
    --deltaflash) DF="$2"; shift ;;
    --llama-bench) LB="$2"; shift ;;
    --models-dir) GEN_DIR="$2"; shift ;;
    --only) ONLY="$2"; shift
            [[ $ONLY == deltaflash || $ONLY == llama ]] || { echo "cpu_vs_llama.sh: --only takes deltaflash or llama" >&2; exit 2; } ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    -*) echo "cpu_vs_llama.sh: unknown option '$1'" >&2; exit 2 ;;
    *) MODELS+=("$1") ;;
  esac
  shift
done
command -v python3 >/dev/null || { echo "cpu_vs_llama.sh: python3 not found" >&2; exit 1; }
RUN_DF=1 RUN_LB=1
[[ $ONLY == llama ]] && RUN_DF=0
[[ $ONLY == deltaflash ]] && RUN_LB=0

if [[ $RUN_DF == 1 && ! -x "$DF" ]]; then
  echo "cpu_vs_llama.sh: deltaflash binary '$DF' not found (build the project first)" >&2; exit 1
fi
if [[ $RUN_LB == 1 && ! -x "$LB" ]]; then
  if [[ "$LB" == "$ROOT/third_party/llama.cpp-build/bin/llama-bench" ]]; then
    "$ROOT/bench/build-llama-bench.sh" >&2
  else
    echo "cpu_vs_llama.sh: llama-bench '$LB' not found" >&2; exit 1
  fi
fi

# Default models: random Qwen3.5-0.8B-shaped weights, generated once.
if [[ ${#MODELS[@]} -eq 0 ]]; then
  [[ -x "$DF" ]] || { echo "cpu_vs_llama.sh: need '$DF' to generate the default models" >&2; exit 1; }
  mkdir -p "$GEN_DIR"
  for type in q8_0 q4_k; do
    f="$GEN_DIR/rand-qwen35-0.8b-$type-seed1.gguf"
    if [[ ! -s "$f" ]]; then
      echo "[cpu_vs_llama] generating $f" >&2
      "$DF" make-model --arch qwen35 --shape 0.8b --type "$type" --seed 1 -o "$f.tmp" >&2
      mv -f "$f.tmp" "$f"
    fi
    MODELS+=("$f")
  done
fi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
HW="$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
[[ -n "$HW" ]] || HW="$(uname -m)"
HW="$HW, $T threads"

# Paths inside the checkout are shown relative to it, others absolute.
rel() { local a; a="$(realpath "$1")"; [[ "$a" == "$ROOT"/* ]] && echo "${a#"$ROOT"/}" || echo "$a"; }

# One line per model for the summary: model<TAB>df.json<TAB>lb.json<TAB>df command<TAB>lb command
: > "$WORK/runs.tsv"
i=0
for m in "${MODELS[@]}"; do
  [[ -f "$m" ]] || { echo "cpu_vs_llama.sh: model '$m' not found" >&2; exit 1; }
  i=$((i + 1))
  df_cmd=("$DF" bench -m "$m" -p "$P" -n "$N" --threads "$T" -r "$R" --json)
  lb_cmd=("$LB" -m "$m" -p "$P" -n "$N" -t "$T" -r "$R" -o json)
  : > "$WORK/df$i.json"; : > "$WORK/lb$i.json"
  if [[ $RUN_DF == 1 ]]; then
    echo "[cpu_vs_llama] ${df_cmd[*]}" >&2
    "${df_cmd[@]}" > "$WORK/df$i.json" 2> "$WORK/df$i.log" \
      || { echo "cpu_vs_llama.sh: deltaflash bench failed on $m:" >&2; tail -20 "$WORK/df$i.log" >&2; exit 1; }
  fi
  if [[ $RUN_LB == 1 ]]; then
    echo "[cpu_vs_llama] ${lb_cmd[*]}" >&2
    "${lb_cmd[@]}" > "$WORK/lb$i.json" 2> "$WORK/lb$i.log" \
      || { echo "cpu_vs_llama.sh: llama-bench failed on $m:" >&2; tail -20 "$WORK/lb$i.log" >&2; exit 1; }
  fi
  df_str="$(rel "$DF") bench -m $(rel "$m") -p $P -n $N --threads $T -r $R --json"
  lb_str="$(rel "$LB") -m $(rel "$m") -p $P -n $N -t $T -r $R -o json"
  printf '%s\t%s\t%s\t%s\t%s\n' "$m" "$WORK/df$i.json" "$WORK/lb$i.json" "$df_str" "$lb_str" >> "$WORK/runs.tsv"
done

python3 - "$WORK/runs.tsv" "$HW" "$P" "$N" "$(date +%Y-%m-%d)" <<'PY'
import json, os, statistics, sys

runs_file, hw, P, N, date = sys.argv[1:6]

def last_json_object(path):
    """deltaflash prints one JSON object; take the last line that parses."""
    text = open(path).read().strip()
    if not text:
        return None
    for line in reversed(text.splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            pass
    return json.loads(text)

def llama_rates(path):
    """(pp, tg) medians of llama-bench's per-repetition tokens/s."""
    text = open(path).read().strip()
    if not text:
        return None, None
    pp = tg = None
    for t in json.loads(text):
        med = statistics.median(t["samples_ts"]) if t.get("samples_ts") else t["avg_ts"]
        if t["n_prompt"] > 0 and t["n_gen"] == 0:
            pp = med
        elif t["n_gen"] > 0 and t["n_prompt"] == 0:
            tg = med
    return pp, tg

fmt = lambda v: "-" if v is None else f"{v:.2f}"
ratio = lambda a, b: "-" if a is None or b is None or b == 0 else f"{a / b:.2f}"

rows, md = [], []
for line in open(runs_file):
    model, dfj, lbj, df_cmd, lb_cmd = line.rstrip("\n").split("\t")
    d = last_json_object(dfj)
    dpp, dtg = (d["prompt_tok_s"], d["gen_tok_s"]) if d else (None, None)
    lpp, ltg = llama_rates(lbj)
    name = os.path.basename(model)
    rows.append((name, f"pp{P}", fmt(dpp), fmt(lpp), ratio(dpp, lpp)))
    rows.append((name, f"tg{N}", fmt(dtg), fmt(ltg), ratio(dtg, ltg)))
    result = (f"deltaflash pp{P} {fmt(dpp)} / tg{N} {fmt(dtg)} tok/s; llama.cpp pp{P} {fmt(lpp)} / tg{N} {fmt(ltg)} tok/s; "
              f"ratio pp {ratio(dpp, lpp)}, tg {ratio(dtg, ltg)}")
    md.append(f"| CPU speed vs llama.cpp (median tok/s) | {hw} | {name} | `{df_cmd}` vs `{lb_cmd}` | {result} | {date} |")

head = ("model", "test", "deltaflash tok/s", "llama.cpp tok/s", "ratio df/llama")
w = [max(len(r[i]) for r in rows + [head]) for i in range(5)]
for r in [head] + rows:
    print("  ".join(c.ljust(w[i]) if i < 2 else c.rjust(w[i]) for i, c in enumerate(r)))
print()
print("markdown rows for docs/performance.md:")
print("\n".join(md))
PY
