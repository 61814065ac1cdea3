#!/usr/bin/env bash
# Times guided_grammar and response_format json_object masks on models' vocabularies, over the
# cases of tests/data/grammars/bench_cases.tsv (grammar file + text): each text is followed
# token by token (greedy longest match) with `poot trace`, every mask timed cold (first walk on
# a fresh constraint: per-state masks computed as they are reached) and warm (second walk:
# cached). Each case runs REPEAT times (default 5) and every step's time is the median over the
# repeats. One table per vocabulary: p50/p99/max per mask (us), compile (ms), the same for
# llguidance (PEER=1) and for our wasm build in Node (WASM=1), measured in the same run.
#
#   ours native   `poot trace` (release build)
#   ours wasm     scripts/bench_grammar_wasm.mjs on the release wasm32 build (WASM=1)
#   llguidance    scripts/bench_grammar_llguidance.py, PyPI llguidance 1.9.1 in a venv under
#                 the target folder (PEER=1; needs pip access the first time); GBNF through its
#                 own GBNF-to-Lark converter, json_object as the JSON schema {}
#
# usage: [PEER=1] [WASM=1] [REPEAT=5] scripts/bench_grammar.sh [MODEL.gguf ...]
#        (default: $POOT_REFERENCE_GGUF, then $POOT_GEMMA_GGUF when set)
set -euo pipefail
cd "$(dirname "$0")/.."
MODELS=("$@")
if [ ${#MODELS[@]} = 0 ]; then
  [ -n "${POOT_REFERENCE_GGUF:-}" ] && MODELS+=("$POOT_REFERENCE_GGUF")
  [ -n "${POOT_GEMMA_GGUF:-}" ] && MODELS+=("$POOT_GEMMA_GGUF")
fi
if [ ${#MODELS[@]} = 0 ]; then
  echo "usage: $0 MODEL.gguf... (or set POOT_REFERENCE_GGUF / POOT_GEMMA_GGUF)" >&2
  exit 2
fi
TARGET=${CARGO_TARGET_DIR:-target}
GRAMMARS=tests/data/grammars
CASES=$GRAMMARS/bench_cases.tsv
REPEAT=${REPEAT:-5}
cargo build --quiet --release --features cli --bin poot
BIN=$TARGET/release/poot
if [ "${WASM:-0}" = 1 ]; then
  cargo build --quiet --target wasm32-unknown-unknown --release
  wasm-bindgen --target web --out-dir "$TARGET/bench-grammar-wasm" --out-name poot \
    "$TARGET/wasm32-unknown-unknown/release/poot.wasm"
fi
if [ "${PEER:-0}" = 1 ]; then
  VENV=$TARGET/bench-venv
  [ -x "$VENV/bin/python3" ] || python3 -m venv "$VENV"
  "$VENV/bin/python3" -c 'import llguidance, numpy' 2>/dev/null ||
    "$VENV/bin/pip" install --quiet llguidance==1.9.1 numpy
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for MODEL in "${MODELS[@]}"; do
  rm -rf "$tmp"/*
  mkdir -p "$tmp/native"
  while IFS=$'\t' read -r name kind text; do
    case "$name" in '#'*|'') continue ;; esac
    if [ "$kind" = json_object ]; then
      echo '{"response_format": {"type": "json_object"}}' >"$tmp/req.json"
    else
      python3 -c 'import json,sys; print(json.dumps({"guided_grammar": open(sys.argv[1]).read()}))' \
        "$GRAMMARS/$kind" >"$tmp/req.json"
    fi
    python3 -c 'import sys; sys.stdout.write(sys.argv[1].replace("\\n", "\n"))' "$text" >"$tmp/out.txt"
    for r in $(seq "$REPEAT"); do
      "$BIN" trace --model "$MODEL" --request "$tmp/req.json" --output "$tmp/out.txt" \
        >"$tmp/native/$name.$r.jsonl" || true
    done
  done <"$CASES"
  if [ "${WASM:-0}" = 1 ]; then
    node scripts/bench_grammar_wasm.mjs "$MODEL" "$CASES" "$GRAMMARS" \
      --wasm-dir "$TARGET/bench-grammar-wasm" --repeat "$REPEAT" >"$tmp/wasm.jsonl"
  fi
  if [ "${PEER:-0}" = 1 ]; then
    "$TARGET/bench-venv/bin/python3" scripts/bench_grammar_llguidance.py "$MODEL" "$CASES" \
      "$GRAMMARS" --repeat "$REPEAT" >"$tmp/llguidance.jsonl"
  fi

  python3 - "$tmp" "$CASES" "$MODEL" "$REPEAT" <<'PY'
import json, math, os, statistics, sys
tmp, cases, model, repeat = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
names = [l.split("\t")[0] for l in open(cases, encoding="utf-8") if l.strip() and not l.startswith("#")]

def pct(xs, p):
    xs = sorted(xs)
    return xs[max(1, math.ceil(len(xs) * p / 100)) - 1] if xs else float("nan")

def native(name):
    runs = [[json.loads(l) for l in open(os.path.join(tmp, "native", f"{name}.{r}.jsonl"))]
            for r in range(1, repeat + 1)]
    steps = [[l for l in run if "step" in l and "mask_us" in l] for run in runs]
    n = min(len(s) for s in steps)
    med = lambda key: [statistics.median(run[i][key] for run in steps) for i in range(n)]
    s = runs[0][-1]
    return {"tokens": s["tokens"], "accepted": all(run[-1].get("accepted") for run in runs),
            "compile_ms": statistics.median(run[-1]["compile_ms"] for run in runs),
            "cold_us": med("mask_us"), "warm_us": med("warm_us")}

engines = {"ours native": {n: native(n) for n in names}}
for engine, file in [("ours wasm", "wasm.jsonl"), ("llguidance", "llguidance.jsonl")]:
    path = os.path.join(tmp, file)
    if os.path.exists(path):
        engines[engine] = {d["name"]: d for d in map(json.loads, open(path)) if "name" in d}

print(f"{os.path.basename(model)}: median of {repeat} walks per step; us per mask, compile ms")
print(f"{'case':<16} {'engine':<11} {'tok':>4} {'warm p50':>9} {'warm p99':>9} {'cold p50':>9} "
      f"{'cold p99':>9} {'cold max':>9} {'compile':>8}")
fmt = lambda x: f"{x:9.2f}" if x < 100 else f"{x:9.0f}"
for name in names:
    for engine, results in engines.items():
        d = results.get(name)
        if d is None:
            continue
        if "refused" in d:
            print(f"{name:<16} {engine:<11} {d.get('tokens', ''):>4}  refused: {d['refused']}")
            continue
        w, c = d["warm_us"], d["cold_us"]
        line = (f"{name:<16} {engine:<11} {d['tokens']:>4} {fmt(pct(w, 50))} {fmt(pct(w, 99))} "
                f"{fmt(pct(c, 50))} {fmt(pct(c, 99))} {fmt(max(c))} {d['compile_ms']:8.3f}")
        if not d.get("accepted", True):
            line += "  NOT ACCEPTED"
        print(line)
print("targets at 49k: arithmetic <= 20 us p50 / 100 us p99, json_object <= 3 / 30; "
      "compile <= 5 ms; at 262k no mask over 2 ms")
PY
  echo
done
