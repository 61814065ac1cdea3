#!/usr/bin/env bash
# Times constraint masks on the reference model: `poot trace` over tests/data/bench_cases.tsv
# (regex + text), then one line per case and the overall p50/p99 of every mask, cold (first
# walk, masks computed) and warm (second walk, masks cached).
#
# usage: scripts/bench_constraint.sh [MODEL.gguf]        (default: $POOT_REFERENCE_GGUF)
#        PEER=1 scripts/bench_constraint.sh [MODEL.gguf]  also runs llguidance (PyPI) on the
#        same cases, in a venv under target/ (needs pip access the first time)
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-${POOT_REFERENCE_GGUF:-}}
if [ -z "$MODEL" ]; then
  echo "usage: $0 MODEL.gguf (or set POOT_REFERENCE_GGUF to SmolLM2-135M-Instruct.Q4_1.gguf)" >&2
  exit 2
fi
TARGET=${CARGO_TARGET_DIR:-target}
CASES=tests/data/bench_cases.tsv
cargo build --quiet --release --features cli --bin poot
BIN=$TARGET/release/poot
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

while IFS=$'\t' read -r name regex text; do
  case "$name" in '#'*|'') continue ;; esac
  python3 -c 'import json,sys; print(json.dumps({"guided_regex": sys.argv[1]}))' "$regex" >"$tmp/req.json"
  python3 -c 'import sys; sys.stdout.write(sys.argv[1].replace("\\n", "\n"))' "$text" >"$tmp/out.txt"
  "$BIN" trace --model "$MODEL" --request "$tmp/req.json" --output "$tmp/out.txt" >"$tmp/$name.jsonl" || true
done <"$CASES"

python3 - "$tmp" "$CASES" <<'PY'
import json, math, os, sys
tmp, cases = sys.argv[1], sys.argv[2]
names = [l.split("\t")[0] for l in open(cases, encoding="utf-8") if l.strip() and not l.startswith("#")]
def pct(xs, p):
    xs = sorted(xs)
    return xs[max(1, math.ceil(len(xs) * p / 100)) - 1]
cold, warm = [], []
print(f"{'case':<12} {'tokens':>6} {'states':>6} {'compile_ms':>10} {'cold p50/p99/max us':>22} {'warm p50/p99 us':>16} ok")
for name in names:
    lines = [json.loads(l) for l in open(os.path.join(tmp, name + ".jsonl"))]
    steps = [l for l in lines if "step" in l]
    s = lines[-1]
    cold += [l["mask_us"] for l in steps]
    warm += [l["warm_us"] for l in steps]
    c, w = s["cold"], s["warm"]
    print(f"{name:<12} {s['tokens']:>6} {s['states']:>6} {s['compile_ms']:>10.3f} "
          f"{c['p50_us']:>7.2f}/{c['p99_us']:>7.1f}/{c['max_us']:>6.0f} {w['p50_us']:>7.3f}/{w['p99_us']:>7.3f} {s['accepted']}")
print(f"all {len(warm)} masks: warm p50 {pct(warm, 50):.3f} us, p99 {pct(warm, 99):.3f} us; "
      f"cold p50 {pct(cold, 50):.2f} us, p99 {pct(cold, 99):.1f} us")
PY

if [ "${PEER:-0}" = 1 ]; then
  VENV=$TARGET/bench-venv
  [ -x "$VENV/bin/python3" ] || python3 -m venv "$VENV"
  "$VENV/bin/python3" -c 'import llguidance, numpy' 2>/dev/null || "$VENV/bin/pip" install --quiet llguidance numpy
  "$VENV/bin/python3" scripts/bench_constraint_llguidance.py "$MODEL" "$CASES"
fi
