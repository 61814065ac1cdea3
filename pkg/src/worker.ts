// The engine in a Web Worker: `serveEngine()` runs inside the worker, `createWorkerEngine(worker)`
// on the calling side returns the same `Engine` as `createEngine` (its `fetch` included, built
// here over the worker calls), so a page keeps its main thread free while the model runs.
//
//   // engine-worker.js (a module worker)
//   import { serveEngine } from "poot";
//   serveEngine();
//
//   // the page
//   const worker = new Worker(new URL("./engine-worker.js", import.meta.url), { type: "module" });
//   const engine = await createWorkerEngine(worker, { model: "/models/smollm2.gguf" });
//
// Every message is `{ kind, id, content }` (types below). Calls carry a fresh id; the worker
// answers with `result` or `error`, a stream with `stream`, then `chunk`s and `end` (or
// `error`), a `fetch` with `response`, then `body` pieces and `end`; `abort` crosses the other
// way. The calling side behaves as the in-page engine does: the same errors (PootErrors with
// the OpenAI fields), an aborted call rejects with the same `aborted` error, an aborted stream
// just ends, and `engine.fetch` answers with the worker engine's own responses, byte for byte.
//
// Model bytes given as an `ArrayBuffer` (or a `Uint8Array` spanning its whole buffer) are
// transferred, not copied: the caller's buffer is detached (except with a worker factory, see
// createWorkerEngine: they are then copied once into a Blob, kept for a replacement worker). A worker that fails (its `error`
// event), is terminated through `worker.terminate()`, or dies otherwise (detected with a Web
// Lock the worker holds while it serves) rejects every pending call and ends every open stream
// with a PootError (`worker_failed`).
//
// A crash of the engine (a Rust panic) is not the worker's death: the engine recovers, as in
// the page. Given a function that starts a worker, `createWorkerEngine` terminates the crashed
// worker and loads the model in a new one; given a Worker, the engine inside it restarts on a
// fresh wasm instance. The worker tells the calling side with `crashed` and `recovered`
// messages (under the load call's id).
import {
  createEngine,
  notify,
  untilAborted,
  type BackendInfo,
  type ChatCompletions,
  type Completions,
  type Engine,
  type EngineOptions,
  type RecoverEvent,
} from "./engine.js";
import { PootError, toPootError } from "./errors.js";
import { abortError, type LoadProgress } from "./modelSource.js";
import { parseCompletion, withJsonSchemas } from "./typed.js";
import type { ModelList } from "./types.js";
import type { WasmSource } from "./wasm.js";

/** What the calling side sends. */
export type WorkerRequest =
  | { kind: "load"; id: string; content: WorkerLoadOptions }
  | { kind: "create"; id: string; content: { engine: string; endpoint: "chat" | "completions"; request: object } }
  | { kind: "models"; id: string; content: { engine: string } }
  | { kind: "unload"; id: string; content: { engine: string } }
  | { kind: "fetch"; id: string; content: { engine: string; url: string; method: string; headers: [string, string][]; body: string | null } }
  | { kind: "abort"; id: string; content: null };

/** What the worker sends back, each message answering the request with the same id. */
export type WorkerReply =
  | { kind: "progress"; id: string; content: LoadProgress }
  | { kind: "loaded"; id: string; content: { backend: BackendInfo; model: Engine["model"]; lock: string | null } }
  | { kind: "result"; id: string; content: unknown }
  | { kind: "stream"; id: string; content: null }
  | { kind: "chunk"; id: string; content: unknown }
  | { kind: "end"; id: string; content: null }
  | { kind: "response"; id: string; content: { status: number; statusText: string; headers: [string, string][] } }
  | { kind: "body"; id: string; content: Uint8Array }
  | { kind: "error"; id: string; content: SerializedError }
  /** The engine loaded by call `id` crashed (a Rust panic). */
  | { kind: "crashed"; id: string; content: { error: SerializedError; crashes: number } }
  /** The engine loaded by call `id` restarted after a crash (on its own, in this worker). */
  | { kind: "recovered"; id: string; content: RecoverEvent & { backend: BackendInfo } };

/** The engine options as they cross: the model as a URL string, a Blob or bytes. */
export interface WorkerLoadOptions {
  model: string | Blob | ArrayBuffer | Uint8Array;
  backend?: EngineOptions["backend"];
  cache?: EngineOptions["cache"];
  wasm?: string | ArrayBuffer | WebAssembly.Module;
  /** Whether the engine in the worker restarts by itself after a crash (see createWorkerEngine). */
  recover?: boolean;
  limits?: EngineOptions["limits"];
}

/** An error as it crosses: a PootError's fields and its name (`AbortError` for an abort). */
export interface SerializedError {
  name: string;
  message: string;
  status?: number;
  code?: string;
  param?: string | null;
}

/** The options of {@link createWorkerEngine}: `createEngine`'s, with progress forwarded. */
export type WorkerEngineOptions = Omit<EngineOptions, "onProgress"> & { onProgress?: (p: LoadProgress) => void };

/** What `createWorkerEngine` needs of a `Worker` (a `MessagePort` wrapper works too). */
export interface WorkerLike {
  postMessage(message: unknown, transfer: Transferable[]): void;
  addEventListener(type: "message" | "error" | "messageerror", listener: (event: Event) => void): void;
  removeEventListener(type: "message" | "error" | "messageerror", listener: (event: Event) => void): void;
  terminate?(): void;
}

/** What `serveEngine` needs of the worker's global scope. */
export interface WorkerScope {
  postMessage(message: unknown, transfer?: Transferable[]): void;
  addEventListener(type: "message", listener: (event: MessageEvent) => void): void;
  removeEventListener(type: "message", listener: (event: MessageEvent) => void): void;
}

const KINDS = new Set(["progress", "loaded", "result", "stream", "chunk", "end", "response", "body", "error", "crashed", "recovered"]);

export function serializeError(thrown: unknown): SerializedError {
  const e = toPootError(thrown);
  const name = typeof thrown === "object" && thrown !== null && (thrown as Error).name === "AbortError" ? "AbortError" : "PootError";
  return { name, message: e.message, status: e.status, code: e.code, param: e.param };
}

export function deserializeError(e: SerializedError): PootError {
  const err = new PootError(e.message, { status: e.status ?? 500, code: e.code ?? "internal_error", param: e.param ?? null });
  if (e.name !== "PootError") Object.defineProperty(err, "name", { value: e.name });
  return err;
}

/** What `fetch` rejects with when its signal aborts: the signal's reason. */
function abortReason(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException("This operation was aborted", "AbortError");
}

// ---------------------------------------------------------------------------------------------
// Inside the worker.

/**
 * Serves engines to `createWorkerEngine` callers over `scope`'s messages (the worker's global
 * scope by default). Returns a function that stops listening. `create` replaces
 * `createEngine` (tests pass a fake).
 */
export function serveEngine(
  scope: WorkerScope = globalThis as unknown as WorkerScope,
  options: { create?: (opts: EngineOptions) => Promise<Engine> } = {},
): () => void {
  const create = options.create ?? createEngine;
  const engines = new Map<string, { engine: Engine; release: () => void }>();
  const aborts = new Map<string, AbortController>();
  const send = (reply: WorkerReply) => scope.postMessage(reply);

  const call = async (id: string, work: (signal: AbortSignal) => Promise<void>) => {
    const controller = new AbortController();
    aborts.set(id, controller);
    try {
      await work(controller.signal);
    } catch (e) {
      send({ kind: "error", id, content: serializeError(e) });
    } finally {
      aborts.delete(id);
    }
  };

  const engineOf = (id: string): Engine => {
    const held = engines.get(id);
    if (!held) {
      throw new PootError(`this worker has no engine ${id} (it was never loaded here, or the worker restarted)`, {
        status: 500,
        code: "worker_failed",
      });
    }
    return held.engine;
  };

  const onMessage = (event: MessageEvent) => {
    const msg = event.data as WorkerRequest;
    if (typeof msg !== "object" || msg === null || typeof msg.id !== "string") return;
    const { id } = msg;
    switch (msg.kind) {
      case "abort":
        aborts.get(id)?.abort();
        return;
      case "load":
        void call(id, async (signal) => {
          const o = msg.content;
          const engine: Engine = await create({
            model: o.model,
            backend: o.backend,
            cache: o.cache,
            wasm: o.wasm as WasmSource | undefined,
            signal,
            onProgress: (p) => send({ kind: "progress", id, content: { ...p } }),
            recover: o.recover,
            limits: o.limits,
            onCrash: (e) => send({ kind: "crashed", id, content: { error: serializeError(e.error), crashes: e.crashes } }),
            onRecover: (e) => send({ kind: "recovered", id, content: { ...e, backend: { ...engine.backend } } }),
          });
          const lock = await holdLock(`poot-worker-engine-${id}`);
          engines.set(id, { engine, release: lock.release });
          send({ kind: "loaded", id, content: { backend: { ...engine.backend }, model: { ...engine.model }, lock: lock.name } });
        });
        return;
      case "create":
        void call(id, async (signal) => {
          const { engine: engineId, endpoint, request } = msg.content;
          const engine = engineOf(engineId);
          const api = endpoint === "chat" ? engine.chat.completions : engine.completions;
          const result = await (api.create as (r: object, o: { signal: AbortSignal }) => Promise<unknown>)(request, { signal });
          if (!(request as { stream?: unknown }).stream) {
            send({ kind: "result", id, content: result });
            return;
          }
          send({ kind: "stream", id, content: null });
          for await (const chunk of result as AsyncIterable<unknown>) {
            send({ kind: "chunk", id, content: chunk });
          }
          send({ kind: "end", id, content: null });
        });
        return;
      case "models":
        void call(id, async () => {
          send({ kind: "result", id, content: await engineOf(msg.content.engine).models.list() });
        });
        return;
      case "unload":
        void call(id, async () => {
          const held = engines.get(msg.content.engine);
          await engineOf(msg.content.engine).unload();
          send({ kind: "result", id, content: null });
          held?.release();
        });
        return;
      case "fetch":
        void call(id, async (signal) => {
          const { engine: engineId, url, method, headers, body } = msg.content;
          const response = await engineOf(engineId).fetch(url, { method, headers, body, signal });
          send({
            kind: "response",
            id,
            content: { status: response.status, statusText: response.statusText, headers: headerList(response.headers) },
          });
          if (response.body) {
            const reader = response.body.getReader();
            for (;;) {
              const { done, value } = await reader.read();
              if (done) break;
              scope.postMessage({ kind: "body", id, content: value } satisfies WorkerReply, [value.buffer as ArrayBuffer]);
            }
          }
          send({ kind: "end", id, content: null });
        });
        return;
    }
  };
  scope.addEventListener("message", onMessage);
  return () => scope.removeEventListener("message", onMessage);
}

/**
 * Holds a Web Lock until `release()`: the calling side asks for the same lock, and is granted
 * it when this worker ends for any reason. Where there are no Web Locks, `name` is null.
 */
async function holdLock(name: string): Promise<{ name: string | null; release: () => void }> {
  const locks = (globalThis as { navigator?: { locks?: LockManager } }).navigator?.locks;
  if (!locks) return { name: null, release: () => {} };
  let release!: () => void;
  const held = new Promise<void>((r) => (release = r));
  await new Promise<void>((granted) => {
    void locks.request(name, () => {
      granted();
      return held;
    });
  });
  return { name, release };
}

// ---------------------------------------------------------------------------------------------
// The calling side.

let nextId = Math.floor(Math.random() * 2 ** 40);

/** A call in flight: hears its replies, and the worker's death. */
interface Pending {
  onReply(reply: WorkerReply): void;
  onDead(error: PootError): void;
}

const workerFailed = (message: string) => new PootError(message, { status: 500, code: "worker_failed" });

/** One worker, and the calls in flight on it. */
class Connection {
  readonly worker: WorkerLike;
  readonly pending = new Map<string, Pending>();
  dead: PootError | null = null;
  /** The engine's id in the worker (its load call's id), once loaded. */
  engineId = "";
  unloading = false;
  /** Hears the engine's `crashed` and `recovered` messages. */
  onEvent: ((reply: Extract<WorkerReply, { kind: "crashed" | "recovered" }>) => void) | undefined;

  constructor(worker: WorkerLike) {
    this.worker = worker;
    worker.addEventListener("message", this.#onMessage);
    worker.addEventListener("error", this.#onError);
    worker.addEventListener("messageerror", this.#onMessageError);
    if (typeof worker.terminate === "function") {
      const terminate = worker.terminate;
      const die = (e: PootError) => this.die(e);
      worker.terminate = function (this: WorkerLike) {
        terminate.call(this);
        die(workerFailed("the engine's worker was terminated"));
      };
    }
  }

  #onMessage = (event: Event) => {
    const reply = (event as MessageEvent).data as WorkerReply;
    if (typeof reply !== "object" || reply === null || !KINDS.has(reply.kind)) return;
    if (reply.kind === "crashed" || reply.kind === "recovered") {
      if (reply.id === this.engineId && !this.dead) this.onEvent?.(reply);
      return;
    }
    this.pending.get(reply.id)?.onReply(reply);
  };

  #onError = (event: Event) => {
    const message = (event as ErrorEvent).message;
    event.preventDefault?.();
    this.die(workerFailed(`the engine's worker failed: ${message || "it could not load its script or threw an uncaught error"}`));
  };

  #onMessageError = () => this.die(workerFailed("the engine's worker sent a message that could not be read (messageerror)"));

  /** Ends every call in flight with `error`; later calls reject with it. */
  die(error: PootError) {
    if (this.dead) return;
    this.dead = error;
    this.worker.removeEventListener("message", this.#onMessage);
    this.worker.removeEventListener("error", this.#onError);
    this.worker.removeEventListener("messageerror", this.#onMessageError);
    const calls = [...this.pending.values()];
    this.pending.clear();
    for (const p of calls) p.onDead(error);
  }

  /** Starts call `id`: `pending` hears its replies until it deletes itself or the worker dies. */
  start(request: WorkerRequest, handler: Pending, transfer: Transferable[] = []) {
    if (this.dead) return handler.onDead(this.dead);
    this.pending.set(request.id, handler);
    try {
      this.worker.postMessage(request, transfer);
    } catch (e) {
      this.pending.delete(request.id);
      // A request that cannot be cloned (a function in it, say) is the caller's fault.
      handler.onDead(new PootError(`cannot send the request to the engine's worker: ${(e as Error)?.message ?? e}`, { status: 400, code: "invalid_input" }));
    }
  }

  abort(id: string) {
    if (!this.pending.delete(id) || this.dead) return;
    this.worker.postMessage({ kind: "abort", id, content: null } satisfies WorkerRequest, []);
  }
}

/** Calls `onAbort` when `signal` aborts; returns the function that stops listening. */
function onSignal(signal: AbortSignal | undefined, onAbort: () => void) {
  signal?.addEventListener("abort", onAbort, { once: true });
  return () => signal?.removeEventListener("abort", onAbort);
}

type Loaded = Extract<WorkerReply, { kind: "loaded" }>["content"];

/** Loads the model in `conn`'s worker; `onProgress` hears the worker's progress. */
function loadIn(
  conn: Connection,
  content: WorkerLoadOptions,
  transfer: Transferable[],
  signal: AbortSignal | undefined,
  onProgress: (p: LoadProgress) => void,
): Promise<Loaded> {
  const loadId = String(nextId++);
  return new Promise<Loaded>((resolve, reject) => {
    if (signal?.aborted) return reject(abortError(signal, "loading the model"));
    const stop = onSignal(signal, () => {
      conn.abort(loadId);
      reject(abortError(signal!, "loading the model"));
    });
    conn.start({ kind: "load", id: loadId, content }, {
      onReply(reply) {
        if (reply.kind === "progress") {
          try {
            onProgress(reply.content);
          } catch (e) {
            // As in the page, a throwing callback fails the load.
            conn.abort(loadId);
            stop();
            reject(e);
          }
          return;
        }
        if (reply.kind !== "loaded" && reply.kind !== "error") return;
        conn.pending.delete(loadId);
        stop();
        if (reply.kind === "error") return reject(deserializeError(reply.content));
        conn.engineId = loadId;
        if (reply.content.lock) {
          watchLock(reply.content.lock, () => !conn.unloading && conn.die(workerFailed("the engine's worker stopped (it was closed, or it crashed)")));
        }
        resolve(reply.content);
      },
      onDead(e) {
        stop();
        reject(e);
      },
    }, transfer);
  });
}

/**
 * The engine of `createEngine`, running in a worker (which calls {@link serveEngine}). Resolves
 * once the model is loaded there; `opts.onProgress` hears the worker's progress.
 *
 * `worker` is a Worker, or a function that starts one. After a crash (a Rust panic in the
 * worker's engine) the engine recovers, as the in-page one does (see engine.ts): given a
 * function, this side terminates the crashed worker and starts a new one, where the model is
 * loaded again (a URL from the Cache Storage copy; bytes from a Blob this side keeps: given a
 * function, model bytes are copied once into a Blob, not transferred, and `.wasm` bytes are
 * compiled here once, and the module sent); given a Worker, the engine inside it restarts on a
 * fresh wasm instance. Either way the requests in flight reject with `engine_crashed`, later
 * ones wait for the restart, and `onCrash`, `onRecover` and `engine.crashes` are as in the page.
 */
export async function createWorkerEngine(worker: WorkerLike | (() => WorkerLike), opts: WorkerEngineOptions): Promise<Engine> {
  const factory = typeof worker === "function" ? worker : undefined;
  const recover = opts?.recover !== false;
  // Given a function, this side replaces a crashed worker; else the engine in it restarts.
  const replaces = recover && factory !== undefined;
  const { content: load, transfer } = await loadOptions(opts, replaces);
  load.recover = recover && !replaces;

  let conn: Connection;
  let backend: BackendInfo;
  let crashes = 0;
  /** The crash that `conn` died of, while it is still to be replaced. */
  let crash: PootError | null = null;
  let replacing: Promise<Connection> | undefined;

  const onEvent = (from: Connection) => (reply: Extract<WorkerReply, { kind: "crashed" | "recovered" }>) => {
    if (from !== conn) return;
    if (reply.kind === "crashed") {
      crashes++;
      const error = deserializeError(reply.content.error);
      notify(opts.onCrash, { error, crashes });
      if (replaces) {
        crash = error;
        ready().catch(() => {});
      }
      return;
    }
    const { backend: b, ...event } = reply.content;
    backend = Object.freeze({ ...b });
    notify(opts.onRecover, { ...event, crashes });
  };

  /** The worker to call: at once, or once the one replacing a crashed worker is loaded. */
  const ready = (): Promise<Connection> => {
    if (replacing) return replacing;
    if (crash) {
      replacing = replace(crash).finally(() => (replacing = undefined));
      return replacing;
    }
    return Promise.resolve(conn);
  };

  const replace = async (error: PootError): Promise<Connection> => {
    const old = conn;
    old.die(error); // its calls in flight reject with the crash
    old.worker.terminate?.();
    const t0 = performance.now();
    let from: LoadProgress["phase"] | undefined;
    let next: Connection | undefined;
    try {
      const fresh = (next = new Connection(factory!()));
      fresh.onEvent = onEvent(fresh);
      const loaded = await loadIn(fresh, load, [], undefined, (p) => void (from ??= p.phase));
      conn = fresh;
      crash = null;
      backend = Object.freeze({ ...loaded.backend });
      const modelFrom = from === "cache" ? "cache" : from === "download" ? "network" : typeof load.model === "string" ? "network" : "blob";
      notify(opts.onRecover, { crashes, ms: performance.now() - t0, modelFrom });
      return fresh;
    } catch (e) {
      next?.worker.terminate?.();
      throw new PootError(`the engine crashed and restarting its worker failed (${toPootError(e).message}); the next request tries again`, {
        status: 500,
        code: "engine_crashed",
      });
    }
  };

  // Load.
  const first = new Connection(factory ? factory() : (worker as WorkerLike));
  first.onEvent = onEvent(first);
  conn = first;
  const loaded = await loadIn(first, load, transfer, opts.signal, (p) => opts.onProgress?.(p));
  backend = Object.freeze({ ...loaded.backend });

  /** `create` on either endpoint, as the in-page engine answers it. */
  const create = async (endpoint: "chat" | "completions", req: object, o?: { signal?: AbortSignal }): Promise<unknown> => {
    const signal = o?.signal;
    if (signal?.aborted) throw abortError(signal, "the request");
    const c = await untilAborted(ready(), signal);
    return new Promise((resolve, reject) => {
      if (signal?.aborted) return reject(abortError(signal, "the request"));
      const id = String(nextId++);
      let open: ChunkQueue | null = null;
      const stop = onSignal(signal, () => {
        c.abort(id);
        // As in the page: an aborted call rejects, an aborted stream just ends.
        if (open) open.end();
        else reject(abortError(signal!, "the request"));
      });
      // Schema objects (Zod, ...) cannot cross to the worker: their JSON Schemas do.
      const request = withJsonSchemas(req).body;
      c.start({ kind: "create", id, content: { engine: c.engineId, endpoint, request } }, {
        onReply(reply) {
          switch (reply.kind) {
            case "result":
              c.pending.delete(id);
              stop();
              resolve(reply.content);
              return;
            case "stream":
              open = new ChunkQueue(() => {
                stop();
                c.abort(id);
              });
              resolve(open);
              return;
            case "chunk":
              open?.push(reply.content);
              return;
            case "end":
              c.pending.delete(id);
              stop();
              open?.end();
              return;
            case "error": {
              c.pending.delete(id);
              stop();
              const e = deserializeError(reply.content);
              if (open) open.fail(e);
              else reject(e);
              return;
            }
          }
        },
        onDead(e) {
          stop();
          if (open) open.fail(e);
          else reject(e);
        },
      });
    });
  };

  /** A call answered by one `result` or `error`. */
  const simple = async <T>(kind: "models" | "unload", c?: Connection): Promise<T> => {
    const on = c ?? (await ready());
    return new Promise<T>((resolve, reject) => {
      const id = String(nextId++);
      on.start({ kind, id, content: { engine: on.engineId } }, {
        onReply(reply) {
          if (reply.kind !== "result" && reply.kind !== "error") return;
          on.pending.delete(id);
          if (reply.kind === "error") reject(deserializeError(reply.content));
          else resolve(reply.content as T);
        },
        onDead: reject,
      });
    });
  };

  /** `engine.fetch`: the worker engine's own `fetch`, its response body streamed across. */
  const fetch = async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
    const request = typeof Request !== "undefined" && input instanceof Request ? input : undefined;
    const href = typeof input === "string" ? input : input instanceof URL ? input.href : (input as Request).url;
    const base = (globalThis as { location?: { href: string } }).location?.href ?? "http://localhost/";
    const url = new URL(href, base).href;
    const method = (init?.method ?? request?.method ?? "GET").toUpperCase();
    const signal = init?.signal ?? request?.signal ?? undefined;
    if (signal?.aborted) throw abortReason(signal);
    const headers = headerList(new Headers(init?.headers ?? request?.headers));
    const body = init?.body != null ? await new Response(init.body).text() : request && method !== "GET" && method !== "HEAD" ? await request.text() : null;
    if (signal?.aborted) throw abortReason(signal);
    let c: Connection;
    try {
      c = await untilAborted(ready(), signal);
    } catch (e) {
      if (signal?.aborted) throw abortReason(signal);
      // As the in-page engine's fetch answers a failed restart: a 500 with the error.
      const err = toPootError(e);
      return new Response(JSON.stringify(err.toJSON()), { status: 500, headers: { "content-type": "application/json" } });
    }
    return new Promise<Response>((resolve, reject) => {
      const id = String(nextId++);
      let sink: ReadableStreamDefaultController<Uint8Array> | null = null;
      const stop = onSignal(signal, () => {
        c.abort(id);
        if (sink) sink.error(abortReason(signal!));
        else reject(abortReason(signal!));
      });
      c.start({ kind: "fetch", id, content: { engine: c.engineId, url, method, headers, body } }, {
        onReply(reply) {
          switch (reply.kind) {
            case "response": {
              const stream = new ReadableStream<Uint8Array>({
                start: (controller) => void (sink = controller),
                cancel: () => {
                  stop();
                  c.abort(id);
                },
              });
              const { status, statusText, headers } = reply.content;
              resolve(new Response(status === 204 ? null : stream, { status, statusText, headers }));
              return;
            }
            case "body":
              sink?.enqueue(reply.content);
              return;
            case "end":
              c.pending.delete(id);
              stop();
              sink?.close();
              return;
            case "error": {
              c.pending.delete(id);
              stop();
              const e = deserializeError(reply.content);
              if (sink) sink.error(e);
              else reject(e);
              return;
            }
          }
        },
        onDead(e) {
          stop();
          if (sink) sink.error(e);
          else reject(e);
        },
      });
    });
  };

  const engine: Engine = {
    get backend() {
      return backend;
    },
    model: Object.freeze({ ...loaded.model }),
    chat: Object.freeze({
      completions: {
        create: (req: object, o?: { signal?: AbortSignal }) => create("chat", req, o),
        parse: (req: object, o?: { signal?: AbortSignal }) => parseCompletion((r, p) => create("chat", r, p), req, o),
      } as ChatCompletions,
    }),
    completions: { create: (req: object, o?: { signal?: AbortSignal }) => create("completions", req, o) } as Completions,
    models: { list: () => simple<ModelList>("models") },
    fetch: fetch as typeof globalThis.fetch,
    async unload() {
      const c = await ready().catch(() => conn);
      c.unloading = true;
      try {
        await simple<null>("unload", c);
      } catch (e) {
        c.unloading = false;
        throw e;
      }
    },
    get crashes() {
      return crashes;
    },
  };
  return engine;
}

/** The engine options as they cross to the worker, and what to transfer with them. */
async function loadOptions(opts: WorkerEngineOptions, keep: boolean): Promise<{ content: WorkerLoadOptions; transfer: Transferable[] }> {
  if (typeof opts !== "object" || opts === null) {
    throw new PootError("createWorkerEngine needs options with a model", { status: 400, code: "invalid_input", param: "model" });
  }
  const transfer: Transferable[] = [];
  const base = (globalThis as { location?: { href: string } }).location?.href;
  const absolute = (u: string | URL) => (base === undefined ? String(u) : new URL(u, base).href);
  let model: WorkerLoadOptions["model"];
  const source = opts.model;
  if (typeof source === "string" || source instanceof URL) {
    // Resolved here: the worker's own location is not the page's.
    model = absolute(source);
  } else if (typeof Blob !== "undefined" && source instanceof Blob) {
    model = source; // cloned by reference, never copied
  } else if (keep && (source instanceof ArrayBuffer || source instanceof Uint8Array)) {
    // Kept to load a replacement worker after a crash: copied once into a Blob, which every
    // worker reads without a copy of its own; the caller's buffer is left alone.
    model = new Blob([source as BlobPart]);
  } else if (source instanceof ArrayBuffer) {
    model = source;
    transfer.push(source);
  } else if (source instanceof Uint8Array) {
    const whole = source.byteOffset === 0 && source.byteLength === source.buffer.byteLength && source.buffer instanceof ArrayBuffer;
    // A view on part of a buffer is copied: transferring would detach the caller's other data.
    model = whole ? source : source.slice();
    transfer.push(model.buffer as ArrayBuffer);
  } else {
    // Let the engine in the worker word the error, as createEngine would.
    model = source as unknown as WorkerLoadOptions["model"];
  }
  let wasm: WorkerLoadOptions["wasm"];
  const w = opts.wasm;
  if (w === undefined) wasm = undefined;
  else if (typeof w === "string" || w instanceof URL) wasm = absolute(w);
  else if (typeof Response !== "undefined" && w instanceof Response) wasm = await w.arrayBuffer();
  else if (w instanceof WebAssembly.Module) wasm = w;
  else if (w instanceof ArrayBuffer) wasm = w.slice(0);
  else if (ArrayBuffer.isView(w)) wasm = new Uint8Array(w.buffer, w.byteOffset, w.byteLength).slice().buffer;
  else wasm = w as never;
  if (keep && wasm instanceof ArrayBuffer) {
    // Compiled once here; the module goes to every worker, which then compiles nothing.
    try {
      wasm = await WebAssembly.compile(wasm);
    } catch (e) {
      throw toPootError(e);
    }
  }
  if (wasm instanceof ArrayBuffer) transfer.push(wasm);
  return { content: { model, backend: opts.backend, cache: opts.cache, wasm, limits: opts.limits }, transfer };
}

function headerList(headers: Headers): [string, string][] {
  const list: [string, string][] = [];
  headers.forEach((value, name) => list.push([name, value]));
  return list;
}

/** Calls `onEnd` once the worker holding lock `name` releases it (it ended, or unloaded). */
function watchLock(name: string, onEnd: () => void): void {
  const locks = (globalThis as { navigator?: { locks?: LockManager } }).navigator?.locks;
  if (!locks) return;
  void locks.request(name, () => onEnd()).catch(() => {});
}

/** A stream's chunks on the calling side: pushed by messages, pulled by `for await`. */
class ChunkQueue implements AsyncIterable<unknown> {
  #items: unknown[] = [];
  #done = false;
  #error: { e: unknown } | null = null;
  #waiting: { resolve: (r: IteratorResult<unknown>) => void; reject: (e: unknown) => void } | null = null;
  #cancel: () => void;

  constructor(cancel: () => void) {
    this.#cancel = cancel;
  }

  push(item: unknown): void {
    if (this.#done || this.#error) return;
    if (this.#waiting) {
      const w = this.#waiting;
      this.#waiting = null;
      w.resolve({ value: item, done: false });
    } else this.#items.push(item);
  }

  end(): void {
    if (this.#done || this.#error) return;
    this.#done = true;
    this.#wake();
  }

  fail(e: unknown): void {
    if (this.#done || this.#error) return;
    this.#error = { e };
    this.#wake();
  }

  #wake(): void {
    if (!this.#waiting || this.#items.length) return;
    const w = this.#waiting;
    this.#waiting = null;
    if (this.#error) w.reject(this.#error.e);
    else w.resolve({ value: undefined, done: true });
  }

  [Symbol.asyncIterator](): AsyncIterator<unknown> {
    return {
      next: () => {
        if (this.#items.length) return Promise.resolve({ value: this.#items.shift(), done: false });
        if (this.#error) {
          const { e } = this.#error;
          this.#done = true;
          this.#error = null;
          return Promise.reject(e);
        }
        if (this.#done) return Promise.resolve({ value: undefined, done: true });
        return new Promise((resolve, reject) => (this.#waiting = { resolve, reject }));
      },
      return: () => {
        // The consumer stopped early (`break`): the worker stops generating.
        if (!this.#done && !this.#error) this.#cancel();
        this.#done = true;
        this.#error = null;
        this.#items = [];
        return Promise.resolve({ value: undefined, done: true });
      },
    };
  }
}


