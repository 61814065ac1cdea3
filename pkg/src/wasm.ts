// The one module that imports the wasm-bindgen glue; everything else in the package is plain
// TypeScript that can be tested without wasm.
import init, * as glue from "../wasm/poot.js";

/** The compiled wasm module's exports, once loaded. */
export type Wasm = typeof glue;

/**
 * Where the `.wasm` bytes come from: omitted, the glue fetches `poot_bg.wasm` next to itself
 * (`new URL(..., import.meta.url)`, which bundlers follow); in Node pass the file's bytes.
 */
export type WasmSource = URL | string | Response | BufferSource | WebAssembly.Module;

let loading: Promise<Wasm> | undefined;

/** Loads and instantiates the wasm module once; later calls share the same instance. */
export function loadWasm(source?: WasmSource): Promise<Wasm> {
  loading ??= init(source === undefined ? undefined : { module_or_path: source }).then(() => glue);
  return loading;
}
