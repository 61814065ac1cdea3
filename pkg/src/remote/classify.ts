// Buckets a failed call so the retry policy and the ladder know what to do with it.
//
//   transient         connection failure, 5xx               retried (a local server that just loaded
//                                                            a model refuses connections for seconds)
//   rate_limited      429, or any Retry-After hint           retried, honouring the hint
//   permanent         400/401/403/404/413/422 and other 4xx  not retried: a full prefill for nothing
//   context_overflow  a 400 saying the prompt is too long    not retried: shrink it or raise the window
//   canceled          the caller's AbortSignal or timeout    not retried
//   unknown           anything else (a 200 that is not JSON) not retried: surface it, do not replay it

import { FIELDS } from "./mechanism.js";
import type { Mechanism } from "./mechanism.js";

/** The class of a failed call. */
export type ErrorClass = "transient" | "rate_limited" | "permanent" | "context_overflow" | "canceled" | "unknown";

/** A failed call to the remote endpoint. */
export class RemoteError extends Error {
  /** How the failure is classed; decides retries and demotion. */
  readonly kind: ErrorClass;
  /** HTTP status, or 0 when no response arrived. */
  readonly status: number;
  /** The provider's error code (`context_length_exceeded`, ...), when it sent one. */
  readonly code: string | null;
  /** The request field the provider blamed, when it said. */
  readonly param: string | null;
  /** The server's wait hint in milliseconds (Retry-After / retry-after-ms), unclamped. */
  readonly retryAfterMs: number | null;
  /** HTTP requests made before giving up (set by the caller that retried). */
  attempts = 1;

  constructor(
    message: string,
    options: {
      kind: ErrorClass;
      status?: number;
      code?: string | null;
      param?: string | null;
      retryAfterMs?: number | null;
      cause?: unknown;
    },
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "RemoteError";
    this.kind = options.kind;
    this.status = options.status ?? 0;
    this.code = options.code ?? null;
    this.param = options.param ?? null;
    this.retryAfterMs = options.retryAfterMs ?? null;
  }

  /** Whether the retry policy may try again. */
  get retryable(): boolean {
    return this.kind === "transient" || this.kind === "rate_limited";
  }
}

/** The error fields of an OpenAI-shaped error body (`{error: {message, code, param}}` or `{error: "text"}`). */
export function errorFields(body: string): { message: string; code: string | null; param: string | null } {
  try {
    const parsed = JSON.parse(body) as unknown;
    if (parsed && typeof parsed === "object") {
      const error = (parsed as { error?: unknown; message?: unknown; detail?: unknown }).error ?? parsed;
      if (typeof error === "string") return { message: error, code: null, param: null };
      if (error && typeof error === "object") {
        const e = error as { message?: unknown; code?: unknown; param?: unknown; type?: unknown; detail?: unknown };
        const message =
          typeof e.message === "string" ? e.message : typeof e.detail === "string" ? e.detail : JSON.stringify(e.detail ?? error);
        const code = typeof e.code === "string" ? e.code : typeof e.type === "string" ? e.type : null;
        return { message, code, param: typeof e.param === "string" ? e.param : null };
      }
    }
  } catch {
    // not JSON: the text is the message
  }
  return { message: body.trim().slice(0, 500), code: null, param: null };
}

/**
 * The wait a response asks for, in milliseconds: `retry-after-ms` (OpenAI, Azure) first, then
 * `Retry-After` as seconds or an HTTP date (relative to `now`). Null when there is none.
 */
export function retryAfterMs(headers: Headers, now: number): number | null {
  const ms = headers.get("retry-after-ms");
  if (ms !== null && ms.trim() !== "" && Number.isFinite(Number(ms))) return Math.max(0, Number(ms));
  const value = headers.get("retry-after");
  if (value === null || value.trim() === "") return null;
  if (/^\s*\d+(\.\d+)?\s*$/.test(value)) return Math.max(0, Number(value) * 1000);
  const date = Date.parse(value);
  return Number.isNaN(date) ? null : Math.max(0, date - now);
}

const CONTEXT_OVERFLOW =
  /context[_ ]length[_ ]exceeded|exceed(?:s|ed)? the (?:available |maximum )?context|maximum context length|context (?:size|window) (?:exceeded|is too small)|too many tokens|prompt is too long|exceed_context_size/i;

/** Whether an error message (or `param`) names one of the constraint fields. */
export function namesConstraintField(message: string, param: string | null, fields: readonly string[] = CONSTRAINT_FIELDS): boolean {
  if (param !== null && fields.some((f) => param === f || param.startsWith(`${f}.`))) return true;
  if (/unrecognized request argument|extra (?:inputs|fields) (?:are )?not permitted|unknown field|unexpected keyword argument/i.test(message)) {
    return fields.some((f) => message.includes(f)) || /unrecognized request argument/i.test(message);
  }
  return fields.some((f) => new RegExp(`(?:^|[^A-Za-z_])${f}(?:$|[^A-Za-z_])`).test(message));
}

/** Every constraint field a mechanism can add. */
export const CONSTRAINT_FIELDS: readonly string[] = ["response_format", "json_schema", "guided_json", "structured_outputs", "grammar", "json_object"];

/** Whether a 400 says the caller's schema is at fault (not the field's support). */
export function isInvalidSchemaMessage(message: string): boolean {
  return /invalid (?:json )?schema|schema (?:is )?(?:invalid|not valid)|json schema conversion failed|failed to (?:parse|compile|convert) (?:the )?(?:json )?schema|unsupported (?:json )?schema (?:keyword|feature)/i.test(
    message,
  );
}

/**
 * Classes an HTTP error response. `sent` is the mechanism whose fields the request carried: a 5xx
 * whose body names one of them is permanent (llama.cpp answers 500 to some deterministic client
 * errors), while 503 "Loading model" stays transient.
 */
export function classifyResponse(
  status: number,
  body: string,
  headers: Headers,
  now: number,
  sent: Mechanism = "prompt_only",
): RemoteError {
  const { message, code, param } = errorFields(body);
  const hint = retryAfterMs(headers, now);
  const text = `HTTP ${status}: ${message || "(empty body)"}`;
  const make = (kind: ErrorClass) => new RemoteError(text, { kind, status, code, param, retryAfterMs: hint });
  if (status === 429) return make("rate_limited");
  if ((status === 400 || status === 413 || status === 422) && (CONTEXT_OVERFLOW.test(message) || (code !== null && CONTEXT_OVERFLOW.test(code)))) {
    return make("context_overflow");
  }
  if (status >= 500) {
    if (FIELDS[sent].length > 0 && namesConstraintField(message, param, FIELDS[sent]) && !/loading model/i.test(message)) {
      return make("permanent");
    }
    return make(hint !== null ? "rate_limited" : "transient");
  }
  if (status === 408) return make("transient");
  if (status >= 400) return make("permanent");
  return make("unknown");
}

/** Classes a failure that produced no response (fetch threw). */
export function classifyThrown(thrown: unknown, url: string, reason: "caller" | "timeout" | null, timeoutMs: number): RemoteError {
  if (reason === "caller") return new RemoteError(`the request to ${url} was canceled`, { kind: "canceled", cause: thrown });
  if (reason === "timeout") {
    return new RemoteError(`the request to ${url} timed out after ${timeoutMs} ms`, { kind: "canceled", code: "timeout", cause: thrown });
  }
  const detail = thrown instanceof Error ? describeCause(thrown) : String(thrown);
  return new RemoteError(`cannot reach ${url}: ${detail}`, { kind: "transient", cause: thrown });
}

function describeCause(error: Error): string {
  // undici puts the system error (ECONNREFUSED ...) in `cause`.
  const cause = (error as Error & { cause?: unknown }).cause;
  if (cause instanceof Error) {
    const code = (cause as Error & { code?: unknown }).code;
    return typeof code === "string" && !cause.message.includes(code) ? `${code}: ${cause.message}` : cause.message;
  }
  return error.message;
}

/**
 * Whether an error is the server refusing the constraint field itself: permanent, not an auth,
 * not-found or size error, naming the field (or "Unrecognized request argument"), and not a
 * complaint about the caller's schema. Only this demotes a mechanism.
 */
export function isDemotion(error: RemoteError, sent: Mechanism): boolean {
  if (sent === "prompt_only" || error.kind !== "permanent") return false;
  if ([401, 403, 404, 413].includes(error.status)) return false;
  if (isInvalidSchemaMessage(error.message)) return false;
  // OpenAI's json_object 400 without the word "json" in a message names response_format but is
  // about the prompt, not the field's support.
  if (/contain the word\W+json/i.test(error.message)) return false;
  return namesConstraintField(error.message, error.param, [...FIELDS[sent], ...(sent === "json_schema" ? ["strict"] : [])]);
}

/**
 * What a rejection of a constrained request means at request time, where the request differs
 * from a plain one only by its constraint field (the spec: a permanent 4xx there means the
 * server does not take the field): `remembered`, the next rung, and the mechanism demoted for
 * the key for good (a bare 4xx, or one naming the field); `request`, the next rung for this
 * request only (a complaint about this schema, or OpenAI's json_object asking for the word
 * "json" in the prompt: other requests may pass); `null`, not about the field (auth, not
 * found, a body too large, a context overflow, transient failures, cancellations), the error
 * stands. Constrained decoding is never the reason a run fails.
 */
export function demotionOf(error: RemoteError, sent: Mechanism): "remembered" | "request" | null {
  if (sent === "prompt_only" || error.kind !== "permanent") return null;
  if ([401, 403, 404, 413].includes(error.status)) return null;
  if (isInvalidSchemaMessage(error.message) || /contain the word\W+json/i.test(error.message)) return "request";
  return "remembered";
}

/** Whether a json_schema refusal is about `strict: true` only (retry non-strict before demoting). */
export function isStrictRefusal(error: RemoteError): boolean {
  return error.kind === "permanent" && /\bstrict\b/i.test(error.message) && !isInvalidSchemaMessage(error.message);
}
