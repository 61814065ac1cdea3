#!/usr/bin/env bash
# Times the values that cross the Rust–JavaScript edge as JSON text (what the package does)
# against serde-wasm-bindgen, in Node on the release wasm32 build of examples/wasm_boundary.rs:
# a step's chunk, one with logprobs, a whole response, a request. Prints median and p99 per
# crossing and the serde/JSON ratio.
#
# usage: [BATCHES=400] scripts/bench_wasm_boundary.sh
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=${CARGO_TARGET_DIR:-target}
cargo build --quiet --release --target wasm32-unknown-unknown --example wasm_boundary
OUT=$TARGET/bench-wasm-boundary
wasm-bindgen --target web --out-dir "$OUT" --out-name wasm_boundary \
  "$TARGET/wasm32-unknown-unknown/release/examples/wasm_boundary.wasm"
node scripts/bench_wasm_boundary.mjs "$(realpath "$OUT/wasm_boundary.js")"
