#!/usr/bin/env bash
# Keeps the core pure: JavaScript bindings only in src/wasm/, wgpu only in src/gpu/, and clocks
# only in the CLI (src/bin/) and test-only modules, since `Instant::now()` panics on
# wasm32-unknown-unknown.
set -u
cd "$(dirname "$0")/.."
status=0
check() {
  local what=$1 pattern=$2 allowed=$3 hits
  hits=$(grep -rnE "$pattern" src --include='*.rs' | grep -vE "^(${allowed})" || true)
  if [ -n "$hits" ]; then
    echo "error: ${what} outside ${allowed//|/ or }:"
    echo "$hits"
    status=1
  fi
}
check "wasm_bindgen/js_sys/web_sys" '\b(wasm_bindgen|js_sys|web_sys)\b' 'src/wasm/'
check "wgpu" '\bwgpu::|\buse wgpu\b' 'src/gpu/'
# Test-only modules (`*_tests.rs`, compiled for native `cargo test` only) may time things.
check "a clock" '\b(Instant|SystemTime|std::time)\b' 'src/bin/|src/[a-z_/]*_tests\.rs:'
[ "$status" -eq 0 ] && echo "edges ok: bindings in src/wasm/, wgpu in src/gpu/, clocks in src/bin/ and *_tests.rs"
exit "$status"
