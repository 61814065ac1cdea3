// The one module that loads the wasm-bindgen glue; everything else in the package is plain
// TypeScript that can be tested without wasm.
//
// The glue is used through `poot_instance.js` (scripts/glue-instance.mjs writes it from the
// glue at build time): the same code wrapped in `createGlue()`, so that there can be more than
// one instance. `wasm-bindgen --target web` keeps its state (the instance, its memory views,
// the registries that free Rust objects) in module-level variables and initialises once per
// module; a wasm instance that trapped on a Rust panic cannot be used again, so the engine
// needs a fresh instance, with fresh glue state, to recover (see engine.ts).
import type * as glue from "../wasm/poot.js";
import { createGlue, wasmUrl } from "../wasm/poot_instance.js";

/** The compiled wasm module's exports, once loaded. */
export type Wasm = typeof glue;

/**
 * Where the `.wasm` bytes come from. Omitted, `poot_bg.wasm` next to the glue
 * (`new URL(..., import.meta.url)`, which bundlers follow): fetched in a browser, read from
 * disk in Node (a `file:` URL, which Node's `fetch` cannot load). Or a URL, a `Response`, the
 * bytes, or a compiled module.
 */
export type WasmSource = URL | string | Response | BufferSource | WebAssembly.Module;

let compiling: Promise<WebAssembly.Module> | undefined;
let loading: Promise<Wasm> | undefined;

/** Fetches and compiles the `.wasm` once: the first call's source is the one used. */
function compiled(source?: WasmSource): Promise<WebAssembly.Module> {
  compiling ??= compile(source);
  compiling.catch(() => (compiling = undefined)); // a failed attempt is not kept
  return compiling;
}

/** Whether this is Node (or a runtime that poses as it), where `file:` URLs are files. */
function isNode(): boolean {
  const proc = (globalThis as { process?: { versions?: { node?: unknown } } }).process;
  return typeof proc?.versions?.node === "string";
}

/** A `file:` URL's bytes, through Node's `fs` (typed here: the package builds for browsers). */
async function readFileUrl(url: URL): Promise<Uint8Array<ArrayBuffer>> {
  // Not a literal: bundlers for the browser leave the import alone (this path is Node's).
  const fsName = "node:fs/promises";
  const fs = (await import(/* webpackIgnore: true */ /* @vite-ignore */ fsName)) as {
    readFile(path: URL): Promise<Uint8Array<ArrayBuffer>>;
  };
  return fs.readFile(url);
}

async function compile(source: WasmSource | undefined): Promise<WebAssembly.Module> {
  if (source instanceof WebAssembly.Module) return source;
  if (source === undefined || typeof source === "string" || source instanceof URL) {
    const url = source === undefined ? wasmUrl() : source;
    const href = url instanceof URL ? url.href : url;
    if (isNode() && href.startsWith("file:")) {
      return WebAssembly.compile(await readFileUrl(new URL(href)));
    }
    source = await fetch(url);
  }
  if (typeof Response === "function" && source instanceof Response) {
    if (!source.ok) throw new Error(`failed to fetch Wasm: ${source.status} ${source.statusText} fetching '${source.url}'`);
    if (typeof WebAssembly.compileStreaming === "function" && source.headers.get("content-type") === "application/wasm") {
      return WebAssembly.compileStreaming(source);
    }
    return WebAssembly.compile(await source.arrayBuffer());
  }
  return WebAssembly.compile(source as BufferSource);
}

/**
 * A new wasm instance with its own glue state, from the module compiled once: the engine
 * takes one per model, and a fresh one after a crash. No fetch and no compile after the first.
 */
export async function instantiateWasm(source?: WasmSource): Promise<Wasm> {
  const module = await compiled(source);
  const fresh = createGlue();
  await fresh.default({ module_or_path: module });
  return fresh;
}

/** Loads and instantiates the wasm module once; later calls share the same instance. */
export function loadWasm(source?: WasmSource): Promise<Wasm> {
  loading ??= instantiateWasm(source);
  loading.catch(() => (loading = undefined));
  return loading;
}
