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
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${POOT_REFERENCE_GGUF:?set POOT_REFERENCE_GGUF to the model path}
PP=${1:-16}
TG=${2:-8}
CT=${3:-8}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
cargo build --release --features cli --bin poot >&2
POOT=$CARGO_TARGET_DIR/release/poot
REQUEST=$(mktemp --suffix .json)
ROWS=$(mktemp)
trap 'rm -f "$REQUEST" "$ROWS"' EXIT
# A completions prompt of a few tokens, so the constrained run is mostly decode steps.
cat > "$REQUEST" <<JSON
{"prompt": "Character:", "max_tokens": $CT, "temperature": 0,
 "guided_json": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
   "age": {"type": "integer"}}, "required": ["name", "age"], "additionalProperties": false}}
JSON
echo "uptime: $(uptime)"
echo "model: $MODEL ($(( $(stat -c %s "$MODEL") / 1000000 )) MB); prefill $PP tokens, decode $TG greedy tokens"
"$POOT" bench --model "$MODEL" --backend cpu --prompt-tokens "$PP" --tokens "$TG" | tee -a "$ROWS"
# Each variant's features disabled otherwise; the one that runs names itself in `kernels`
# (an adapter without a feature runs a variant twice under two names: the rows say so).
for DISABLE in f16,subgroups subgroups f16; do
  POOT_GPU_DISABLE=$DISABLE "$POOT" bench --model "$MODEL" --backend gpu --prompt-tokens "$PP" --tokens "$TG" | tee -a "$ROWS"
done
POOT_GPU_DISABLE= "$POOT" bench --model "$MODEL" --backend gpu --prompt-tokens "$PP" --tokens "$TG" --request "$REQUEST" | tee -a "$ROWS"
node - "$ROWS" <<'JS'
const rows = require("fs").readFileSync(process.argv[2], "utf8").trim().split("\n").map((l) => JSON.parse(l));
const f = (x, d = 2) => (x === undefined ? "" : Number(x).toFixed(d));
console.log("\n| backend | kernels | what | tok/s | step ms median | step ms p99 | dispatches/token | submissions/token | bytes read back/token | KV cache bytes/position |");
console.log("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
for (const r of rows.filter((r) => r.what !== "constrained decode")) {
  const what = r.what === "prefill" ? `prefill ${r.tokens} tokens (median of ${r.runs})` : `decode ${r.tokens} tokens, ${r.how}`;
  const median = r.what === "prefill" ? r.ms_median / r.tokens : r.step_ms_median;
  console.log(`| ${r.backend} | ${r.kernels ?? ""} | ${what} | ${f(r.tok_s, 3)} | ${f(median, 1)} | ${f(r.step_ms_p99, 1)} | ${f(r.dispatches_per_token, 0)} | ${f(r.submissions_per_token, 0)} | ${f(r.bytes_read_back_per_token, 0)} | ${f(r.kv_cache_bytes_per_position, 0)} |`);
}
const c = rows.filter((r) => r.what === "constrained decode");
if (c.length === 2) {
  const [on, off] = [c.find((r) => r.overlap), c.find((r) => !r.overlap)];
  console.log(`\nconstrained (${on.kernels} kernels, ${on.constraint}, ${on.steps} decode steps, sampled on the GPU): step median ${f(on.step_ms_median, 1)} ms with the mask overlapped, ${f(off.step_ms_median, 1)} ms serial; mask ${f(on.mask_ms_median, 3)} ms median (serial ${f(off.mask_ms_median, 3)}), so the overlap hides ${f(off.step_ms_median - on.step_ms_median, 1)} ms a step`);
  console.log(`outputs: ${JSON.stringify(on.output)} / ${JSON.stringify(off.output)}`);
}
JS
echo
echo "Per-kernel tolerances (CPU-twin tests on this adapter): worst error as a fraction of the stated bound"
cargo test --features gpu,cli --lib gpu::kernel_tests -- --nocapture 2>&1 | grep "worst error" | sed 's/^/  /'
cargo test --features gpu,cli --test gpu_matvec -- --nocapture 2>&1 | grep "worst error" | sed 's/^/  matvec /'
cargo test --features gpu,cli --test gpu_sample -- --nocapture 2>&1 | grep "GPU vs CPU sampler" | sed 's/^/  /'
