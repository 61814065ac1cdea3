#!/usr/bin/env bash
# Speed of the CPU forward pass next to llama.cpp's, on the same machine in the same run:
# prompt processing (PP prompt tokens in one pass) and generation (TG greedy tokens), for
# native builds with 1 and 2 threads, the wasm32 build (SIMD128, one thread) under Node's WASI,
# and llama.cpp through npm node-llama-cpp with 1 and 2 threads. Also the native peak RSS
# against the budget "model file + KV cache + 64 MiB".
#
# Usage: POOT_REFERENCE_GGUF=model.gguf scripts/bench_model.sh [PP] [TG]
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${POOT_REFERENCE_GGUF:?set POOT_REFERENCE_GGUF to the model path}
PP=${1:-128}
TG=${2:-64}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
NLC=${POOT_NLC_DIR:-$HOME/.cache/poot/nlc}
if [ ! -f "$NLC/node_modules/node-llama-cpp/dist/index.js" ]; then
  mkdir -p "$NLC" && (cd "$NLC" && { [ -f package.json ] || echo '{}' > package.json; } && npm i node-llama-cpp@3.21.1 --no-audit --no-fund >&2)
fi
rustup target list --installed | grep -q wasm32-wasip1 || rustup target add wasm32-wasip1 >&2
cargo build --release --example bench_model >&2
CARGO_TARGET_WASM32_WASIP1_RUSTFLAGS="-C target-feature=+simd128" \
  cargo build --release --target wasm32-wasip1 --example bench_model >&2
NATIVE=$CARGO_TARGET_DIR/release/examples/bench_model
WASM=$CARGO_TARGET_DIR/wasm32-wasip1/release/examples/bench_model.wasm
RUNNER=$(mktemp --suffix .mjs)
trap 'rm -f "$RUNNER"' EXIT
cat > "$RUNNER" <<'JS'
import fs from "node:fs"; import path from "node:path"; import { WASI } from "node:wasi";
const [wasm, model, threads, pp, tg] = process.argv.slice(2);
const wasi = new WASI({ version: "preview1", args: ["bench_model", "/model/" + path.basename(model), threads, pp, tg],
  preopens: { "/model": path.dirname(model) } });
wasi.start(await WebAssembly.instantiate(await WebAssembly.compile(fs.readFileSync(wasm)), wasi.getImportObject()));
process.exit(0); // V8 20.x can abort while unwinding a finished WASI instance
JS
row() { printf '%-34s %s\n' "$1" "$2"; }
echo "uptime: $(uptime)"
for t in 1 2; do
  row "poot native, $t thread(s)" "$(/usr/bin/time -f '{"max_rss_kib":%M}' -o /tmp/poot_bench_rss.$t "$NATIVE" "$MODEL" $t "$PP" "$TG") $(cat /tmp/poot_bench_rss.$t)"
  row "llama.cpp native, $t thread(s)" "$(node scripts/bench_llama_cpp.mjs "$MODEL" $t "$PP" "$TG")"
done
# The exact-f32 reference path (Model::set_exact), which the rounded 8-bit products replace
# in generation on x86-64.
row "poot native exact, 1 thread" "$("$NATIVE" "$MODEL" 1 "$PP" "$TG" exact)"
# Node 20's V8 sometimes aborts in a garbage collection while the wasm memory grows ("Fatal
# error ... unreachable code", more often on a loaded machine, with or without this crate's
# changes): up to 6 tries.
wasm_row() {
  local out
  for _ in 1 2 3 4 5 6; do
    out=$(node --no-warnings "$RUNNER" "$WASM" "$MODEL" 1 "$PP" "$TG" 2>/dev/null) && [ -n "$out" ] && { echo "$out"; return; }
  done
  echo "(node aborted 6 times)"
}
row "poot wasm32+simd128 (Node WASI), 1" "$(wasm_row)"
KV=$(( 2 * 30 * (PP + TG + 1) * 192 * 4 / 1024 ))
echo "budget: model $(( $(stat -c %s "$MODEL") / 1024 )) KiB + KV cache $KV KiB (SmolLM2-135M: 30 layers x 192 floats x 2) + 65536 KiB"
