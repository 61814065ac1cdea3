#!/usr/bin/env bash
# The constraint benchmark on both reference vocabularies, SmolLM2-135M (49,152 tokens, BPE) and
# Gemma 3 270M (262,144 tokens, SentencePiece), each with our native build, our wasm build in
# Node and llguidance: fetches the two models (scripts/fetch-model.sh, scripts/fetch-gemma.sh),
# then prints one table per vocabulary (scripts/bench_constraint.sh with WASM=1 PEER=1).
#
# usage: [REPEAT=5] scripts/bench_constraint_all.sh
set -euo pipefail
cd "$(dirname "$0")/.."
smollm2=$(scripts/fetch-model.sh)
gemma=$(scripts/fetch-gemma.sh)
for model in "$smollm2" "$gemma"; do
  WASM=1 PEER=1 scripts/bench_constraint.sh "$model"
  echo
done
