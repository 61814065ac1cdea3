// Reading a model file into wasm memory: from a URL (with download progress and a Cache
// Storage copy reused on the next load), a Blob/File, an ArrayBuffer or a Uint8Array.
//
// The bytes go into a `ModelBytes` (wasm memory) chunk by chunk as they arrive, so a model
// never sits whole in JavaScript memory too when its size is known up front (a download with
// Content-Length, a Blob, a buffer). Only a download of unknown length is gathered in
// JavaScript first, then copied in at its exact size.
import { PootError, toPootError } from "./errors.js";
import type { Wasm } from "./wasm.js";

/** Where a model comes from. A string is a URL (relative ones resolve against the page). */
export type ModelSource = string | URL | Blob | File | ArrayBuffer | Uint8Array;

/** Model loading progress: bytes of the file so far (`total` when known). */
export interface LoadProgress {
  /**
   * `download`: from the network; `cache`: from Cache Storage; `parse`: into wasm memory
   * and through the GGUF parser; `upload`: weights onto the GPU.
   */
  phase: "download" | "cache" | "parse" | "upload";
  loaded: number;
  total?: number;
}

export interface ReadOptions {
  onProgress?: (p: LoadProgress) => void;
  /** Cache Storage bucket name, or false for none. */
  cache: string | false;
  signal?: AbortSignal;
}

type ModelBytes = InstanceType<Wasm["ModelBytes"]>;

/** Largest piece copied into wasm memory at once (each copy passes through a transient buffer). */
const SLICE = 8 << 20;

/** Calls `onProgress` at most every 1% (and always for the last byte). */
function progress(phase: LoadProgress["phase"], total: number | undefined, onProgress?: (p: LoadProgress) => void) {
  let next = 0;
  return (loaded: number, force = false) => {
    if (!onProgress) return;
    if (!force && loaded < next && loaded !== total) return;
    next = loaded + (total ? total / 100 : 1 << 20);
    onProgress(total === undefined ? { phase, loaded } : { phase, loaded, total });
  };
}

export function abortError(signal: AbortSignal | undefined, what: string): PootError {
  const err = new PootError(`${what} was aborted`, { status: 499, code: "aborted" });
  Object.defineProperty(err, "name", { value: "AbortError" });
  if (signal?.reason !== undefined) Object.defineProperty(err, "cause", { value: signal.reason });
  return err;
}

function checkAbort(signal: AbortSignal | undefined, what: string) {
  if (signal?.aborted) throw abortError(signal, what);
}

/** Copies `bytes` into `sink` in slices (no copy in JavaScript: `subarray` is a view). */
function appendAll(sink: ModelBytes, bytes: Uint8Array) {
  for (let at = 0; at < bytes.length; at += SLICE) {
    sink.append(bytes.subarray(at, Math.min(at + SLICE, bytes.length)));
  }
}

/** The model's bytes in wasm memory, and a name for messages (the URL or file name). */
export async function readModel(wasm: Wasm, source: ModelSource, opts: ReadOptions): Promise<{ bytes: ModelBytes; name: string }> {
  if (source instanceof ArrayBuffer || ArrayBuffer.isView(source)) {
    const view = source instanceof Uint8Array ? source : source instanceof ArrayBuffer ? new Uint8Array(source) : null;
    if (!view) throw badSource(source);
    return { bytes: fromBuffer(wasm, view, opts), name: "the model bytes" };
  }
  if (typeof Blob !== "undefined" && source instanceof Blob) {
    const name = typeof File !== "undefined" && source instanceof File ? source.name : "the model Blob";
    return { bytes: await fromStream(wasm, source.stream(), source.size, "parse", opts), name };
  }
  if (typeof source === "string" || source instanceof URL) {
    return fromUrl(wasm, resolveUrl(source), opts);
  }
  throw badSource(source);
}

function badSource(source: unknown): PootError {
  const kind = source === null ? "null" : typeof source === "object" ? (source as object).constructor?.name ?? "object" : typeof source;
  return new PootError(`model must be a URL, a Blob/File, an ArrayBuffer or a Uint8Array, got ${kind}`, {
    status: 400,
    code: "invalid_input",
    param: "model",
  });
}

function resolveUrl(source: string | URL): URL {
  if (source instanceof URL) return source;
  const base = typeof location !== "undefined" ? location.href : undefined;
  try {
    return new URL(source, base);
  } catch {
    throw new PootError(
      `model \`${source}\` is not a URL${base ? "" : " (outside a page, pass an absolute URL, or the file's bytes: in Node, readFileSync(path))"}`,
      { status: 400, code: "invalid_input", param: "model" },
    );
  }
}

function fromBuffer(wasm: Wasm, view: Uint8Array, opts: ReadOptions): ModelBytes {
  const sink = new wasm.ModelBytes(view.length);
  const report = progress("parse", view.length, opts.onProgress);
  try {
    for (let at = 0; at < view.length; at += SLICE) {
      checkAbort(opts.signal, "loading the model");
      const end = Math.min(at + SLICE, view.length);
      sink.append(view.subarray(at, end));
      report(end);
    }
    return sink;
  } catch (e) {
    sink.free();
    throw toPootError(e);
  }
}

/** Reads a byte stream into wasm memory (its length known, or gathered first when not). */
async function fromStream(
  wasm: Wasm,
  stream: ReadableStream<Uint8Array>,
  total: number | undefined,
  phase: LoadProgress["phase"],
  opts: ReadOptions,
): Promise<ModelBytes> {
  const reader = stream.getReader();
  const report = progress(phase, total, opts.onProgress);
  report(0, true);
  let sink: ModelBytes | undefined;
  const pending: Uint8Array[] = [];
  let loaded = 0;
  try {
    if (total !== undefined) sink = new wasm.ModelBytes(total);
    for (;;) {
      checkAbort(opts.signal, "loading the model");
      const { done, value } = await reader.read();
      if (done) break;
      loaded += value.length;
      if (sink) appendAll(sink, value);
      else pending.push(value);
      report(loaded);
    }
    if (!sink) {
      sink = new wasm.ModelBytes(loaded);
      for (const chunk of pending.splice(0)) appendAll(sink, chunk);
    } else if (loaded !== total) {
      throw new PootError(`the model file ended after ${loaded} of its ${total} bytes`, {
        status: 400,
        code: "model_download_failed",
        param: "model",
      });
    }
    report(loaded, true);
    return sink;
  } catch (e) {
    sink?.free();
    reader.cancel().catch(() => {});
    throw toPootError(e);
  }
}

/** The body length a response promises, when its bytes are the file's (not compressed). */
function contentLength(response: Response): number | undefined {
  const encoding = response.headers.get("content-encoding");
  if (encoding && encoding !== "identity") return undefined;
  const n = Number(response.headers.get("content-length") ?? NaN);
  return Number.isSafeInteger(n) && n >= 0 ? n : undefined;
}

async function openCache(name: string | false): Promise<Cache | undefined> {
  if (name === false || typeof caches === "undefined") return undefined;
  try {
    return await caches.open(name);
  } catch {
    return undefined; // Cache Storage refused (an opaque origin, private mode): no cache.
  }
}

async function fromUrl(wasm: Wasm, url: URL, opts: ReadOptions): Promise<{ bytes: ModelBytes; name: string }> {
  const name = url.href;
  const cache = /^https?:$/.test(url.protocol) ? await openCache(opts.cache) : undefined;
  const cached = await cache?.match(name).catch(() => undefined);
  if (cached?.body) {
    try {
      return { bytes: await fromStream(wasm, cached.body, contentLength(cached), "cache", opts), name };
    } catch (e) {
      // A cached copy that cannot be read is dropped and downloaded again.
      if ((e as Error)?.name === "AbortError") throw e;
      await cache?.delete(name).catch(() => {});
    }
  }
  checkAbort(opts.signal, "loading the model");
  let response: Response;
  try {
    response = await fetch(url, opts.signal ? { signal: opts.signal } : {});
  } catch (e) {
    if (opts.signal?.aborted) throw abortError(opts.signal, "loading the model");
    throw new PootError(`could not download the model from ${name}: ${(e as Error)?.message ?? e}`, {
      status: 400,
      code: "model_download_failed",
      param: "model",
    });
  }
  if (!response.ok || !response.body) {
    response.body?.cancel().catch(() => {});
    throw new PootError(
      `could not download the model from ${name}: HTTP ${response.status}${response.statusText ? ` ${response.statusText}` : ""}`,
      { status: 400, code: "model_download_failed", param: "model" },
    );
  }
  let body = response.body;
  let stored: Promise<void> | undefined;
  let dropFromCache = (_: unknown) => {};
  if (cache) {
    // One branch to the cache, one into wasm memory; the entry is written only when whole,
    // and a failed load errors the cache branch so that nothing partial is stored.
    const [toCache, toWasm] = body.tee();
    body = toWasm;
    const reader = toCache.getReader();
    let control: ReadableStreamDefaultController<Uint8Array> | undefined;
    const cacheBody = new ReadableStream<Uint8Array>({
      start: (c) => void (control = c),
      pull: async (c) => {
        const { done, value } = await reader.read();
        if (done) c.close();
        else c.enqueue(value);
      },
      cancel: (reason) => reader.cancel(reason),
    });
    dropFromCache = (e) => {
      control?.error(e);
      reader.cancel(e).catch(() => {});
    };
    const headers = new Headers(response.headers);
    if (contentLength(response) === undefined) {
      headers.delete("content-length");
      headers.delete("content-encoding");
    }
    stored = cache.put(name, new Response(cacheBody, { headers })).catch(() => {}); // a full quota is no reason to fail
  }
  try {
    const bytes = await fromStream(wasm, body, contentLength(response), "download", opts);
    await stored;
    return { bytes, name };
  } catch (e) {
    dropFromCache(e);
    throw e;
  }
}
