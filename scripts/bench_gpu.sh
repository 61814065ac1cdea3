#!/usr/bin/env bash
# The GPU path (wgpu on the Vulkan adapter: lavapipe on a machine without a GPU) next to the
# CPU path on the same model in the same run: prefill and decode tokens/s (decode: median and
# p99 step), dispatches, submissions and bytes read back per decode token, decoding with the
# logits read back vs sampled on the GPU, and a constrained request (guided_json) with the
# CPU's mask filled while the GPU runs the forward pass vs after it (the difference of the
# step medians is the mask time the overlap hides). The GPU rows run once per kernel variant
# (`kernels`: f32, f16, subgroups, f16+subgroups; POOT_GPU_DISABLE=f16,subgroups picks the f32
# path), where the adapter has the features, so their ratios come from the same run. Then the
# per-kernel tolerance table from the CPU-twin tests (worst error as a fraction of each
# kernel's stated tolerance, per variant).
#
# Lavapipe is a software rasterizer: seconds per token on this 98 MB model, so the defaults are
# small. The Chromium (SwiftShader) figure next to the wasm CPU path is printed by
# pkg/test/browser/engine.test.mjs (`make browser-test`).
#
# Usage: POOT_REFERENCE_GGUF=model.gguf scripts/bench_gpu.sh [PP] [TG] [CONSTRAINED_TOKENS]
#        scripts/bench_gpu.sh --build DIR   (poot and the three test executables, release, into
#        DIR, for POOT_BIN and POOT_TEST_BINS on a machine without a Rust toolchain)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --build ]; then
  dir=${2:?--build DIR}
  mkdir -p "$dir"
  cargo build --release --features cli --bin poot
  cp "${CARGO_TARGET_DIR:-target}/release/poot" "$dir/poot"
  # The executables cargo names in its JSON messages (their file names carry a hash).
  cargo test --release --features gpu,cli --lib --test gpu_matvec --test gpu_sample --no-run \
    --message-format json | node -e '
      const lines = require("fs").readFileSync(0, "utf8").trim().split("\n").map((l) => JSON.parse(l));
      for (const m of lines) if (m.reason === "compiler-artifact" && m.executable && m.profile.test)
        console.log(`${m.target.kind.some((k) => k.endsWith("lib")) ? "lib" : m.target.name} ${m.executable}`);' |
    while read -r name exe; do cp "$exe" "$dir/$name"; done
  strip "$dir"/*
  ls -l "$dir"
  exit 0
fi
MODEL=${POOT_REFERENCE_GGUF:?set POOT_REFERENCE_GGUF to the model path}
PP=${1:-16}
TG=${2:-8}
CT=${3:-8}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
# POOT_BIN: a `poot` built elsewhere (a machine with a GPU but no Rust toolchain); else built here.
if [ -n "${POOT_BIN:-}" ]; then
  POOT=$POOT_BIN
else
  cargo build --release --features cli --bin poot >&2
  POOT=$CARGO_TARGET_DIR/release/poot
fi
REQUEST=$(mktemp --suffix .json)
# POOT_BENCH_ROWS: where the rows are kept (for rendering elsewhere); else a temporary file.
ROWS=${POOT_BENCH_ROWS:-$(mktemp)}
: > "$ROWS"
trap 'rm -f "$REQUEST"; [ -n "${POOT_BENCH_ROWS:-}" ] || rm -f "$ROWS"' EXIT
# A completions prompt of a few tokens, so the constrained run is mostly decode steps.
cat > "$REQUEST" <<JSON
{"prompt": "Character:", "max_tokens": $CT, "temperature": 0,
 "guided_json": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
   "age": {"type": "integer"}}, "required": ["name", "age"], "additionalProperties": false}}
JSON
echo "uptime: $(uptime)"
echo "model: $MODEL ($(( $(stat -c %s "$MODEL") / 1000000 )) MB); prefill $PP tokens, decode $TG greedy tokens"
"$POOT" bench --model "$MODEL" --backend cpu --prompt-tokens "$PP" --tokens "$TG" | tee -a "$ROWS"
# CPU_THREADS (> 1): the CPU path again on that many threads, the fair peer on a many-core host.
if [ "${CPU_THREADS:-1}" -gt 1 ]; then
  "$POOT" bench --model "$MODEL" --backend cpu --prompt-tokens "$PP" --tokens "$TG" --threads "$CPU_THREADS" | tee -a "$ROWS"
fi
# Each variant's features disabled otherwise; the one that runs names itself in `kernels`
# (an adapter without a feature runs a variant twice under two names: the rows say so).
for DISABLE in f16,subgroups subgroups f16; do
  POOT_GPU_DISABLE=$DISABLE "$POOT" bench --model "$MODEL" --backend gpu --prompt-tokens "$PP" --tokens "$TG" | tee -a "$ROWS"
done
POOT_GPU_DISABLE= "$POOT" bench --model "$MODEL" --backend gpu --prompt-tokens "$PP" --tokens "$TG" --request "$REQUEST" | tee -a "$ROWS"
if command -v node >/dev/null; then
  node scripts/bench_gpu_table.mjs "$ROWS"
else
  echo "no node here: render the rows with node scripts/bench_gpu_table.mjs ROWS_FILE"
fi
echo
echo "Per-kernel tolerances (CPU-twin tests on this adapter): worst error as a fraction of the stated bound"
# POOT_TEST_BINS: a folder with the test executables built elsewhere (`lib`, `gpu_matvec`,
# `gpu_sample`: scripts/bench_gpu.sh --build DIR makes it); else cargo runs them here.
if [ -n "${POOT_TEST_BINS:-}" ]; then
  lib_tests() { "$POOT_TEST_BINS/lib" "$@"; }
  gpu_matvec() { "$POOT_TEST_BINS/gpu_matvec" "$@"; }
  gpu_sample() { "$POOT_TEST_BINS/gpu_sample" "$@"; }
else
  lib_tests() { cargo test --features gpu,cli --lib -- "$@"; }
  gpu_matvec() { cargo test --features gpu,cli --test gpu_matvec -- "$@"; }
  gpu_sample() { cargo test --features gpu,cli --test gpu_sample -- "$@"; }
fi
lib_tests gpu::kernel_tests --nocapture 2>&1 | grep "worst error\|test result" | sed 's/^/  /'
gpu_matvec --nocapture 2>&1 | grep "worst error\|test result" | sed 's/^/  matvec /'
gpu_sample --nocapture 2>&1 | grep "GPU vs CPU sampler\|test result" | sed 's/^/  /'
