// One HTTP exchange with an OpenAI-compatible chat endpoint: the request, the timeout and the
// caller's AbortSignal, and the response read as JSON or as server-sent events. No retries here:
// retry.ts is the only retry layer, so a request is never retried twice over.

import { classifyResponse, classifyThrown, errorFields, RemoteError } from "./classify.js";
import type { Mechanism } from "./mechanism.js";
import type { ToolCall } from "./tools.js";

/** The parts of a chat completion this package uses. */
export interface Completion {
  /** The assistant's text ("" when it only called a tool). */
  content: string;
  /** Tool calls as the server returned them (not yet truncated). */
  toolCalls: ToolCall[];
  finishReason: string | null;
  /** The model's refusal (OpenAI's `message.refusal`), when it declined to answer. */
  refusal: string | null;
  /** The response's id (a stream's chunks share it). */
  id: string | null;
  /** The token counts, when the server sent them (a stream: its usage chunk). */
  usage: Usage | null;
  /** The response body (for a stream: the assembled chunks' last body, with content filled in). */
  body: unknown;
}

/** A response's token counts, as OpenAI-compatible servers send them. */
export interface Usage {
  prompt_tokens?: number;
  completion_tokens?: number;
  total_tokens?: number;
  [field: string]: unknown;
}

/** `usage` of a response body or chunk, when it is an object. */
function usageOf(body: unknown): Usage | null {
  const u = (body as { usage?: unknown } | null)?.usage;
  return u && typeof u === "object" && !Array.isArray(u) ? (u as Usage) : null;
}

/** `id` of a response body or chunk, when it is a string. */
function idOf(body: unknown): string | null {
  const id = (body as { id?: unknown } | null)?.id;
  return typeof id === "string" ? id : null;
}

/** How to send one request. */
export interface SendOptions {
  fetch: typeof fetch;
  url: string;
  headers: Record<string, string>;
  body: Record<string, unknown>;
  signal?: AbortSignal;
  timeoutMs: number;
  now: () => number;
  /** The mechanism whose fields the body carries (for classing a 5xx that names them). */
  sent: Mechanism;
  /** A stream's text so far, each time a content delta arrives. */
  onText?: (text: string) => void;
}

/** Runs `work` with a signal that aborts on the caller's signal or after `timeoutMs`; says which. */
async function withDeadline<T>(
  signal: AbortSignal | undefined,
  timeoutMs: number,
  work: (signal: AbortSignal) => Promise<T>,
  onError: (thrown: unknown, reason: "caller" | "timeout" | null) => never,
): Promise<T> {
  const controller = new AbortController();
  let reason: "caller" | "timeout" | null = null;
  const onAbort = () => {
    reason ??= "caller";
    controller.abort(signal?.reason);
  };
  if (signal?.aborted) onAbort();
  else signal?.addEventListener("abort", onAbort, { once: true });
  const timer = setTimeout(() => {
    reason ??= "timeout";
    controller.abort(new Error(`timed out after ${timeoutMs} ms`));
  }, timeoutMs);
  try {
    return await work(controller.signal);
  } catch (thrown) {
    if (thrown instanceof RemoteError) throw thrown;
    return onError(thrown, reason);
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener("abort", onAbort);
  }
}

function text(content: unknown): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content.map((part) => (part && typeof part === "object" && typeof part.text === "string" ? part.text : "")).join("");
  }
  return "";
}

function toolCallsOf(raw: unknown): ToolCall[] {
  if (!Array.isArray(raw)) return [];
  return raw
    .filter((c) => c && typeof c === "object" && c.function && typeof c.function.name === "string")
    .map((c, i) => ({
      id: typeof c.id === "string" ? c.id : `call_${i}`,
      type: "function" as const,
      function: {
        name: c.function.name as string,
        arguments: typeof c.function.arguments === "string" ? c.function.arguments : JSON.stringify(c.function.arguments ?? {}),
      },
    }));
}

function clip(s: string, n = 120): string {
  return s.length > n ? `${s.slice(0, n)}...` : s;
}

/** A 200 whose body is an error object (some proxies do that). */
function bodyError(body: unknown, url: string, options: SendOptions): RemoteError | null {
  if (!body || typeof body !== "object" || !("error" in body) || (body as { error: unknown }).error == null) return null;
  const error = (body as { error: unknown }).error;
  const status = error && typeof error === "object" && typeof (error as { code?: unknown }).code === "number" ? (error as { code: number }).code : 0;
  if (status >= 400) return classifyResponse(status, JSON.stringify(body), new Headers(), options.now(), options.sent);
  const { message, code, param } = errorFields(JSON.stringify(body));
  return new RemoteError(`${url} answered 200 with an error: ${message}`, { kind: "unknown", status: 200, code, param });
}

function fromJson(body: unknown, url: string, options: SendOptions): Completion {
  const error = bodyError(body, url, options);
  if (error) throw error;
  const choice = (body as { choices?: unknown[] } | null)?.choices?.[0] as
    | { message?: { content?: unknown; tool_calls?: unknown; refusal?: unknown }; finish_reason?: unknown }
    | undefined;
  if (!choice || typeof choice !== "object") {
    throw new RemoteError(`the response from ${url} has no choices: ${clip(JSON.stringify(body))}`, { kind: "unknown", status: 200 });
  }
  const message = choice.message ?? {};
  let content = text(message.content);
  const refusal = typeof message.refusal === "string" && message.refusal !== "" ? message.refusal : null;
  if (content === "" && refusal !== null) content = refusal;
  return {
    content,
    toolCalls: toolCallsOf(message.tool_calls),
    finishReason: typeof choice.finish_reason === "string" ? choice.finish_reason : null,
    refusal,
    id: idOf(body),
    usage: usageOf(body),
    body,
  };
}

/** Assembles a streamed completion; malformed events are `unknown`, a cut stream is `transient`. */
async function fromStream(response: Response, url: string, options: SendOptions): Promise<Completion> {
  if (!response.body) throw new RemoteError(`the stream from ${url} has no body`, { kind: "unknown", status: response.status });
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let data: string[] = [];
  let content = "";
  let finishReason: string | null = null;
  let refusal = "";
  let id: string | null = null;
  let usage: Usage | null = null;
  let done = false;
  let last: unknown = null;
  const calls = new Map<number, { id: string; name: string; arguments: string }>();

  const dispatch = () => {
    if (data.length === 0) return;
    const payload = data.join("\n");
    data = [];
    if (payload.trim() === "[DONE]") {
      done = true;
      return;
    }
    let chunk: unknown;
    try {
      chunk = JSON.parse(payload);
    } catch {
      throw new RemoteError(`malformed server-sent event from ${url}: data is not JSON: ${JSON.stringify(clip(payload, 80))}`, {
        kind: "unknown",
        status: response.status,
      });
    }
    const error = bodyError(chunk, url, options);
    if (error) throw error;
    last = chunk;
    id ??= idOf(chunk);
    usage = usageOf(chunk) ?? usage;
    const choice = (chunk as { choices?: unknown[] })?.choices?.[0] as
      | { delta?: { content?: unknown; tool_calls?: unknown; refusal?: unknown }; finish_reason?: unknown }
      | undefined;
    if (!choice) return;
    const delta = text(choice.delta?.content);
    content += delta;
    if (delta !== "") options.onText?.(content);
    if (typeof choice.delta?.refusal === "string") refusal += choice.delta.refusal;
    if (Array.isArray(choice.delta?.tool_calls)) {
      for (const part of choice.delta.tool_calls as { index?: number; id?: string; function?: { name?: string; arguments?: string } }[]) {
        const index = typeof part.index === "number" ? part.index : 0;
        const call = calls.get(index) ?? { id: "", name: "", arguments: "" };
        if (part.id) call.id = part.id;
        if (part.function?.name) call.name += part.function.name;
        if (part.function?.arguments) call.arguments += part.function.arguments;
        calls.set(index, call);
      }
    }
    if (typeof choice.finish_reason === "string") finishReason = choice.finish_reason;
  };

  for (;;) {
    const { value, done: ended } = await reader.read();
    if (ended) break;
    buffer += decoder.decode(value, { stream: true });
    let newline: number;
    while ((newline = buffer.search(/\r?\n/)) >= 0) {
      const line = buffer.slice(0, newline);
      buffer = buffer.slice(newline + (buffer[newline] === "\r" ? 2 : 1));
      if (line === "") dispatch();
      else if (line.startsWith("data:")) data.push(line.slice(line[5] === " " ? 6 : 5));
      else if (!line.startsWith(":") && !/^(event|id|retry):/.test(line)) {
        throw new RemoteError(`malformed server-sent event from ${url}: unexpected line ${JSON.stringify(clip(line, 80))}`, {
          kind: "unknown",
          status: response.status,
        });
      }
      if (done) break;
    }
    if (done) break;
  }
  if (!done && buffer.startsWith("data:")) data.push(buffer.slice(buffer[5] === " " ? 6 : 5));
  if (!done) dispatch();
  if (!done && finishReason === null) {
    throw new RemoteError(`the stream from ${url} ended before [DONE] and without a finish_reason`, { kind: "transient", status: response.status });
  }
  await reader.cancel().catch(() => undefined);
  const toolCalls = [...calls.entries()]
    .sort(([a], [b]) => a - b)
    .map(([i, c]) => ({ id: c.id || `call_${i}`, type: "function" as const, function: { name: c.name, arguments: c.arguments } }));
  if (content === "" && refusal !== "") content = refusal;
  return { content, toolCalls, finishReason, refusal: refusal || null, id, usage, body: last };
}

/** POSTs one chat completion request; throws a classified RemoteError on any failure. */
export async function sendChat(options: SendOptions): Promise<Completion> {
  const { url } = options;
  return withDeadline(
    options.signal,
    options.timeoutMs,
    async (signal) => {
      const response = await options.fetch(url, {
        method: "POST",
        headers: { "content-type": "application/json", accept: "application/json, text/event-stream", ...options.headers },
        body: JSON.stringify(options.body),
        signal,
      });
      if (!response.ok) {
        const body = await response.text();
        throw classifyResponse(response.status, body, response.headers, options.now(), options.sent);
      }
      if ((response.headers.get("content-type") ?? "").includes("text/event-stream")) return fromStream(response, url, options);
      const raw = await response.text();
      let body: unknown;
      try {
        body = JSON.parse(raw);
      } catch {
        throw new RemoteError(`the response from ${url} is not JSON: ${JSON.stringify(clip(raw, 80))}`, { kind: "unknown", status: response.status });
      }
      return fromJson(body, url, options);
    },
    (thrown, reason) => {
      throw classifyThrown(thrown, url, reason, options.timeoutMs);
    },
  );
}

/** GETs `url` (the models list) for reachability; never throws. */
export async function getJson(
  fetcher: typeof fetch,
  url: string,
  headers: Record<string, string>,
  timeoutMs: number,
  signal?: AbortSignal,
): Promise<{ status: number; body: unknown; error: string | null }> {
  try {
    return await withDeadline(
      signal,
      timeoutMs,
      async (s) => {
        const response = await fetcher(url, { headers: { accept: "application/json", ...headers }, signal: s });
        const raw = await response.text();
        let body: unknown = raw;
        try {
          body = JSON.parse(raw);
        } catch {
          // keep the text
        }
        return { status: response.status, body, error: response.ok ? null : `HTTP ${response.status}: ${errorFields(raw).message}` };
      },
      (thrown, reason) => {
        throw classifyThrown(thrown, url, reason, timeoutMs);
      },
    );
  } catch (error) {
    return { status: 0, body: null, error: (error as Error).message };
  }
}
