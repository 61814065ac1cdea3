// `engine.fetch`: the engine behind a `fetch`-shaped function, so that any OpenAI client
// (`new OpenAI({ baseURL: "http://poot.local/v1", apiKey: "local", fetch: engine.fetch })`)
// talks to it as to a server. Nothing goes over a network.
//
// Routes, on any origin and any base path ending in them:
//   POST …/chat/completions, POST …/completions, GET …/models, GET …/models/{id}.
// Streams are Server-Sent Events (`data: {chunk}\n\n` … `data: [DONE]\n\n`); an error after
// the stream started is an error event before `[DONE]`, as `poot serve` sends it. Errors
// before are OpenAI error bodies with status 400, 404, 405 or 500. An aborted `init.signal`
// rejects the call, or errors the body stream mid-way, with the signal's reason, as `fetch`
// does.
import { PootError, toPootError } from "./errors.js";
import type { ModelList } from "./types.js";

/** A validated request, queued on the engine. */
export interface StartedRun {
  readonly stream: boolean;
  /** One message per ignored request field. */
  readonly warnings: string[];
  /** The whole response (non-streamed requests). */
  result(): Promise<object>;
  /** The stream's chunks; ends early (without error) when the signal aborts. */
  chunks(): AsyncGenerator<object, void, undefined>;
}

/** What `engine.fetch` needs of the engine. */
export interface FetchTarget {
  models(): ModelList | Promise<ModelList>;
  /**
   * Validates and queues a request; throws a PootError for a bad one. A promise while the
   * engine restarts after a crash.
   */
  start(endpoint: "chat" | "completion", body: string, signal?: AbortSignal): StartedRun | Promise<StartedRun>;
}

const encoder = new TextEncoder();

function json(status: number, body: unknown, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: { "content-type": "application/json", ...headers },
  });
}

/** An error response that is no PootError: a route or method the engine does not serve. */
function routeError(status: number, code: string, message: string): Response {
  return json(status, { error: { message, type: "invalid_request_error", param: null, code } });
}

function errorResponse(e: unknown): Response {
  const err = toPootError(e);
  // PootError's statuses are 400 and 500 (499 only for aborts, which reject instead).
  return json(err.status === 400 ? 400 : 500, err.toJSON());
}

function abortReason(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException("This operation was aborted", "AbortError");
}

/** Header values are Latin-1: the warnings' JSON with everything else escaped. */
function headerJson(value: unknown): string {
  return JSON.stringify(value).replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

function sse(run: StartedRun, signal: AbortSignal | undefined): ReadableStream<Uint8Array> {
  const chunks = run.chunks();
  const event = (data: string) => encoder.encode(`data: ${data}\n\n`);
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const next = await chunks.next();
        if (!next.done) {
          controller.enqueue(event(JSON.stringify(next.value)));
        } else if (signal?.aborted) {
          controller.error(abortReason(signal));
        } else {
          controller.enqueue(event("[DONE]"));
          controller.close();
        }
      } catch (e) {
        // The status line is gone: an error event, then the end.
        controller.enqueue(event(JSON.stringify(toPootError(e).toJSON())));
        controller.enqueue(event("[DONE]"));
        controller.close();
      }
    },
    async cancel() {
      await chunks.return(undefined);
    },
  });
}

/** GET …/models, or …/models/{id}. */
async function models(target: FetchTarget, id: string | null): Promise<Response> {
  let list: ModelList;
  try {
    list = await target.models();
  } catch (e) {
    return errorResponse(e);
  }
  if (id === null) return json(200, list);
  const model = list.data.find((m) => m.id === id);
  return model ? json(200, model) : routeError(404, "model_not_found", `no model \`${id}\` (this engine serves \`${list.data[0]?.id}\`)`);
}

/** A `fetch` that serves the OpenAI routes from `target`. */
export function createFetch(target: FetchTarget): typeof globalThis.fetch {
  return async function poot_fetch(input: RequestInfo | URL, init?: RequestInit): Promise<Response> {
    const request = typeof Request !== "undefined" && input instanceof Request ? input : undefined;
    const href = typeof input === "string" ? input : input instanceof URL ? input.href : (input as Request).url;
    const url = new URL(href, typeof location !== "undefined" ? location.href : "http://localhost/");
    const method = (init?.method ?? request?.method ?? "GET").toUpperCase();
    const signal = init?.signal ?? request?.signal ?? undefined;
    if (signal?.aborted) throw abortReason(signal);

    const path = url.pathname.replace(/\/+$/, "");
    const only = (allowed: string) =>
      method === allowed ? null : routeError(405, "method_not_allowed", `${method} is not allowed on ${url.pathname} (use ${allowed})`);
    let endpoint: "chat" | "completion";
    if (path.endsWith("/chat/completions")) {
      endpoint = "chat";
    } else if (path.endsWith("/completions")) {
      endpoint = "completion";
    } else if (path.endsWith("/models")) {
      return only("GET") ?? models(target, null);
    } else if (/\/models\/[^/]+$/.test(path)) {
      return only("GET") ?? models(target, decodeURIComponent(path.slice(path.lastIndexOf("/") + 1)));
    } else {
      return routeError(404, "not_found", `no route ${method} ${url.pathname} (poot serves …/chat/completions, …/completions and …/models)`);
    }
    const refused = only("POST");
    if (refused) return refused;

    let body: string;
    try {
      body = init?.body != null ? await new Response(init.body).text() : request ? await request.text() : "";
    } catch (e) {
      return errorResponse(new PootError(`cannot read the request body: ${(e as Error)?.message ?? e}`, { status: 400, code: "invalid_input" }));
    }

    let run: StartedRun;
    try {
      run = await target.start(endpoint, body, signal);
    } catch (e) {
      if (signal?.aborted) throw abortReason(signal);
      return errorResponse(e);
    }
    const headers: Record<string, string> = {};
    if (run.warnings.length) headers["x-poot-warnings"] = headerJson(run.warnings);
    if (run.stream) {
      return new Response(sse(run, signal), {
        status: 200,
        headers: { "content-type": "text/event-stream", "cache-control": "no-cache", ...headers },
      });
    }
    try {
      return json(200, await run.result(), headers);
    } catch (e) {
      if (signal?.aborted) throw abortReason(signal);
      return errorResponse(e);
    }
  };
}
