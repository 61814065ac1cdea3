#!/usr/bin/env bash
# Times constraint masks on one model's vocabulary, over the cases of tests/data/bench_cases.tsv
# (regex + text): each case's text is followed token by token (greedy longest match) and every
# mask is timed, cold (first walk on a fresh constraint: masks computed) and warm (second walk:
# masks cached). Each case runs REPEAT times (default 5) and every step's time is the median
# over the repeats, so a walk preempted by another process on a busy machine does not set the
# p99. Prints one table: per case and over all masks, p50/p99 per mask (us) and compile (ms),
# with ratios to our native build.
#
#   ours native   `poot trace` (release build)
#   ours wasm     pkg/bench/constraint.mjs in Node on the release wasm build (WASM=1): fillMask
#                 into a JavaScript Uint32Array; "wasm view" is the zero-copy form (fillOwnMask,
#                 read through a view on wasm memory), timed on warm walks only
#   llguidance    scripts/bench_constraint_llguidance.py, PyPI llguidance in a venv under the
#                 target folder (PEER=1; needs pip access the first time)
#
# usage: [PEER=1] [WASM=1] [REPEAT=5] scripts/bench_constraint.sh [MODEL.gguf]
#        (default model: $POOT_REFERENCE_GGUF; scripts/bench_constraint_all.sh runs both
#        reference vocabularies with every engine)
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-${POOT_REFERENCE_GGUF:-}}
if [ -z "$MODEL" ]; then
  echo "usage: $0 MODEL.gguf (or set POOT_REFERENCE_GGUF to SmolLM2-135M-Instruct.Q4_1.gguf)" >&2
  exit 2
fi
TARGET=${CARGO_TARGET_DIR:-target}
CASES=tests/data/bench_cases.tsv
REPEAT=${REPEAT:-5}
cargo build --quiet --release --features cli --bin poot
BIN=$TARGET/release/poot
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

mkdir -p "$tmp/native"
while IFS=$'\t' read -r name regex text; do
  case "$name" in '#'*|'') continue ;; esac
  python3 -c 'import json,sys; print(json.dumps({"guided_regex": sys.argv[1]}))' "$regex" >"$tmp/req.json"
  python3 -c 'import sys; sys.stdout.write(sys.argv[1].replace("\\n", "\n"))' "$text" >"$tmp/out.txt"
  for r in $(seq "$REPEAT"); do
    "$BIN" trace --model "$MODEL" --request "$tmp/req.json" --output "$tmp/out.txt" >"$tmp/native/$name.$r.jsonl" || true
  done
done <"$CASES"

if [ "${WASM:-0}" = 1 ]; then
  cargo build --quiet --target wasm32-unknown-unknown --release --features gpu
  wasm-bindgen --target web --out-dir "$TARGET/bench-wasm" --out-name poot \
    "$TARGET/wasm32-unknown-unknown/release/poot.wasm"
  node pkg/bench/constraint.mjs "$MODEL" "$CASES" --wasm-dir "$TARGET/bench-wasm" \
    --repeat "$REPEAT" >"$tmp/wasm.jsonl"
fi

if [ "${PEER:-0}" = 1 ]; then
  VENV=$TARGET/bench-venv
  [ -x "$VENV/bin/python3" ] || python3 -m venv "$VENV"
  "$VENV/bin/python3" -c 'import llguidance, numpy' 2>/dev/null ||
    "$VENV/bin/pip" install --quiet llguidance==1.9.1 numpy
  "$VENV/bin/python3" scripts/bench_constraint_llguidance.py "$MODEL" "$CASES" \
    --repeat "$REPEAT" >"$tmp/llguidance.jsonl"
fi

python3 - "$tmp" "$CASES" "$MODEL" "$REPEAT" <<'PY'
import json, math, os, statistics, sys
tmp, cases, model, repeat = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
names = [l.split("\t")[0] for l in open(cases, encoding="utf-8") if l.strip() and not l.startswith("#")]

def pct(xs, p):
    xs = sorted(xs)
    return xs[max(1, math.ceil(len(xs) * p / 100)) - 1] if xs else float("nan")

def native(name):
    """Our native build: per-step medians over the REPEAT `poot trace` runs."""
    runs = [[json.loads(l) for l in open(os.path.join(tmp, "native", f"{name}.{r}.jsonl"))]
            for r in range(1, repeat + 1)]
    if any("error" in run[-1] for run in runs):
        return {"refused": runs[0][-1]["error"]["code"]}
    steps = [[l for l in run if "step" in l] for run in runs]
    s = runs[0][-1]
    med = lambda key: [statistics.median(run[i][key] for run in steps) for i in range(len(steps[0]))]
    return {"tokens": s["tokens"], "states": s["states"], "accepted": s["accepted"],
            "compile_ms": statistics.median(run[-1]["compile_ms"] for run in runs),
            "cold_us": med("mask_us"), "warm_us": med("warm_us")}

engines = {"ours native": {n: native(n) for n in names}}
for engine, file in [("ours wasm", "wasm.jsonl"), ("llguidance", "llguidance.jsonl")]:
    path = os.path.join(tmp, file)
    if os.path.exists(path):
        engines[engine] = {d["name"]: d for d in map(json.loads, open(path)) if "name" in d}
    if engine == "ours wasm" and engine in engines:
        # The zero-copy form (fillOwnMask + a view on wasm memory), timed on warm walks only.
        engines["wasm view"] = {n: {**d, "cold_us": None, "warm_us": d.get("warm_view_us")}
                                for n, d in engines[engine].items()}

vocab = os.path.basename(model)
print(f"{vocab}: median of {repeat} walks per step; us per mask, compile ms; ratios = engine / ours native")
print(f"{'case':<11} {'engine':<11} {'tok':>4} {'warm p50':>9} {'warm p99':>9} {'cold p50':>9} "
      f"{'cold p99':>9} {'compile':>8}  {'x warm p50/p99':>14} {'x cold p50/p99':>14} {'x compile':>9}")
def fmt(x):
    return f"{x:9.2f}" if x < 100 else f"{x:9.0f}"
def ratio(a, b):
    return f"{a / b:.1f}" if b > 0 else "-"
def row(case, engine, d, base):
    if d is None:
        return
    if "refused" in d:
        ms = f"{d['compile_ms']:8.2f}" if "compile_ms" in d else f"{'':>8}"
        print(f"{case:<11} {engine:<11} {d.get('tokens', ''):>4} {'refused: ' + d['refused']:>39} {ms}")
        return
    w, c = d["warm_us"], d["cold_us"]
    if c is None:  # warm only
        line = f"{case:<11} {engine:<11} {d['tokens']:>4} {fmt(pct(w, 50))} {fmt(pct(w, 99))}"
    else:
        line = (f"{case:<11} {engine:<11} {d['tokens']:>4} {fmt(pct(w, 50))} {fmt(pct(w, 99))} "
                f"{fmt(pct(c, 50))} {fmt(pct(c, 99))} {d['compile_ms']:8.3f}")
    if base and "refused" not in base and engine != "ours native":
        bw, bc = base["warm_us"], base["cold_us"]
        line += f"{'':>39}" if c is None else ""
        line += f"  {ratio(pct(w, 50), pct(bw, 50)):>6}/{ratio(pct(w, 99), pct(bw, 99)):<7}"
        if c is not None:
            line += (f" {ratio(pct(c, 50), pct(bc, 50)):>6}/{ratio(pct(c, 99), pct(bc, 99)):<7}"
                     f" {ratio(d['compile_ms'], base['compile_ms']):>9}")
    if not d.get("accepted", True):
        line += "  NOT ACCEPTED"
    print(line)
for name in names:
    base = engines["ours native"][name]
    for engine, results in engines.items():
        row(name, engine, results.get(name), base)
# Over every mask of the cases all engines ran (a refused case is left out of every engine).
ran = [n for n in names if all("refused" not in r.get(n, {"refused": 1}) for r in engines.values())]
total = {}
for engine, results in engines.items():
    total[engine] = {"tokens": sum(results[n]["tokens"] for n in ran),
                     "warm_us": [x for n in ran for x in results[n]["warm_us"]],
                     "cold_us": None if engine == "wasm view" else
                                [x for n in ran for x in results[n]["cold_us"]],
                     "compile_ms": statistics.median(results[n]["compile_ms"] for n in ran)}
for engine in engines:
    row("all masks", engine, total[engine], total["ours native"])
print("(all masks: every step of the cases no engine refused; compile: the median case)")
PY
