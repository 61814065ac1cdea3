// The schema -> GBNF converter for the grammar rung, loaded only when that rung is reached, so a
// remote-only user never downloads the wasm. The converter is the wasm module's `schemaToGbnf`
// export (the Rust JSON Schema compiler's GBNF export); until a build has it, the rung is skipped
// and the reason recorded. Callers can inject their own converter with the `gbnf` option.

import type { JsonSchema } from "./schema.js";

/** Converts a JSON Schema to a GBNF grammar whose root accepts exactly its instances. */
export type GbnfConverter = (schema: JsonSchema) => Promise<string>;

/** The grammar rung cannot run: no converter, or the converter refused this schema. */
export class GbnfUnavailableError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "GbnfUnavailableError";
  }
}

const nodeImport = (name: string): Promise<unknown> => import(/* @vite-ignore */ /* webpackIgnore: true */ name);

let converter: Promise<(schema: string) => string> | undefined;

async function loadConverter(): Promise<(schema: string) => string> {
  let wasm: Record<string, unknown>;
  try {
    const { loadWasm } = await import("../wasm.js");
    const isNode = typeof (globalThis as { process?: { versions?: { node?: string } } }).process?.versions?.node === "string";
    let source: BufferSource | undefined;
    if (isNode) {
      // The glue would fetch() a file: URL, which Node's fetch does not do: read the bytes.
      const fs = (await nodeImport("node:fs/promises")) as { readFile(path: URL): Promise<Uint8Array<ArrayBuffer>> };
      source = await fs.readFile(new URL("../../wasm/poot_bg.wasm", import.meta.url));
    }
    wasm = (await loadWasm(source)) as unknown as Record<string, unknown>;
  } catch (error) {
    throw new GbnfUnavailableError(`cannot load the wasm module for schemaToGbnf: ${(error as Error).message}`, { cause: error });
  }
  const fn = wasm.schemaToGbnf;
  if (typeof fn !== "function") {
    throw new GbnfUnavailableError("the wasm module has no schemaToGbnf export yet (the JSON Schema compiler's GBNF export is not built)");
  }
  return fn as (schema: string) => string;
}

/** The default converter: the wasm module's `schemaToGbnf`, loaded on first use. */
export const wasmGbnf: GbnfConverter = async (schema) => {
  converter ??= loadConverter();
  let convert: (schema: string) => string;
  try {
    convert = await converter;
  } catch (error) {
    converter = undefined; // a later build (or a retry after a network blip) may have it
    throw error;
  }
  try {
    return convert(JSON.stringify(schema));
  } catch (error) {
    throw new GbnfUnavailableError(`schemaToGbnf cannot convert this schema: ${(error as Error).message}`, { cause: error });
  }
};
