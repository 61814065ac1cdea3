// The repair ladder: what to do with output that arrived unconstrained (or from a server that
// ignored the constraint). Rungs are tried in a fixed order, each on the output of the previous
// ones, and the first that makes the text parse names the result, so a caller can learn which
// failure mode its model actually has. Truncation is not malformation: a document cut off
// mid-string (or by finish_reason "length") throws TruncatedError instead of being "closed",
// because closing a cut string produces a document that parses and lies.

import { describeIssue, isValid, jsonType, resolveRef, validate } from "./schema.js";
import type { JsonSchema } from "./schema.js";

/** The rungs in ladder order; `none` means the text was valid as it came. */
export const RUNGS = [
  "none",
  "fence",
  "extract",
  "trailing_comma",
  "quotes",
  "python_bools",
  "control_chars",
  "close_braces",
  "coerce",
] as const;

/** The rung that fixed a document. */
export type Rung = (typeof RUNGS)[number];

/** Options for {@link repair}. */
export interface RepairOptions {
  /** When given, the value must validate; the `coerce` rung may convert types to make it so. */
  schema?: JsonSchema;
  /** The completion's finish_reason; `"length"` turns an incomplete document into TruncatedError. */
  finishReason?: string | null;
  /** Counts the outcome. */
  stats?: Stats;
}

/** A repaired value and the rung that produced it. */
export interface Repaired<T = unknown> {
  value: T;
  rung: Rung;
}

/** The output was cut off; raise max_tokens or ask again rather than patching it. */
export class TruncatedError extends Error {
  readonly code = "truncated";
  /** What to do about it: the spec's action for a cut reply. */
  readonly action = "raise_max_tokens";
  /** The text as the model produced it. */
  readonly raw: string;
  readonly finishReason: string | null;
  constructor(message: string, raw: string, finishReason: string | null) {
    super(message);
    this.name = "TruncatedError";
    this.raw = raw;
    this.finishReason = finishReason;
  }
}

/** The model declined to answer (OpenAI's `message.refusal`): no repair or re-ask applies. */
export class RefusalError extends Error {
  readonly code = "refusal";
  /** The refusal as the model wrote it. */
  readonly refusal: string;
  constructor(refusal: string) {
    super(`the model refused: ${refusal}`);
    this.name = "RefusalError";
    this.refusal = refusal;
  }
}

/** No rung produced a document that parses and validates. */
export class RepairError extends Error {
  readonly code = "repair_failed";
  /** The text as the model produced it. */
  readonly raw: string;
  /** Validation problems of the best parse, when something parsed. */
  readonly issues: readonly string[];
  constructor(message: string, raw: string, issues: readonly string[] = []) {
    super(message);
    this.name = "RepairError";
    this.raw = raw;
    this.issues = issues;
  }
}

/** How a repair ended. */
export type Outcome = "valid" | "repaired" | "truncated" | "failed";

/** Counts rungs and outcomes across repairs: which failure modes a model really has. */
export class Stats {
  readonly rungs: Record<Rung, number> = Object.fromEntries(RUNGS.map((r) => [r, 0])) as Record<Rung, number>;
  readonly outcomes: Record<Outcome, number> = { valid: 0, repaired: 0, truncated: 0, failed: 0 };
  /**
   * Invalid outputs that were fixed, by how: `fromMemory` by repair of the text in hand (no new
   * request), `roundTrip` by asking again with the errors fed back (`structured`'s
   * `maxRetries`); `reasks` counts those follow-up requests, fixed or not.
   */
  readonly fixed = { fromMemory: 0, roundTrip: 0 };
  reasks = 0;

  /** Records one repair: a rung when it succeeded, or the failure outcome. */
  record(result: Rung | "truncated" | "failed"): void {
    if (result === "truncated" || result === "failed") {
      this.outcomes[result]++;
      return;
    }
    this.rungs[result]++;
    this.outcomes[result === "none" ? "valid" : "repaired"]++;
    if (result !== "none") this.fixed.fromMemory++;
  }

  /** Records a follow-up request that fed a failure back, and whether its answer was valid. */
  recordReask(fixed: boolean): void {
    this.reasks++;
    if (fixed) this.fixed.roundTrip++;
  }

  /** Total repairs recorded. */
  get total(): number {
    const o = this.outcomes;
    return o.valid + o.repaired + o.truncated + o.failed;
  }

  /** A plain copy, for logging or JSON. */
  snapshot(): {
    rungs: Record<Rung, number>;
    outcomes: Record<Outcome, number>;
    fixed: { fromMemory: number; roundTrip: number };
    reasks: number;
    total: number;
  } {
    return { rungs: { ...this.rungs }, outcomes: { ...this.outcomes }, fixed: { ...this.fixed }, reasks: this.reasks, total: this.total };
  }
}

type Parsed = { ok: true; value: unknown } | { ok: false };

function tryParse(text: string): Parsed {
  const trimmed = text.trim();
  if (trimmed === "") return { ok: false };
  try {
    return { ok: true, value: JSON.parse(trimmed) };
  } catch {
    return { ok: false };
  }
}

// ---- text rungs ---------------------------------------------------------------------------

/** Content of the first ``` fence (a missing closing fence, as a stop sequence leaves it, is fine). */
function fence(text: string): string {
  const open = text.indexOf("```");
  if (open < 0) return text;
  let start = text.indexOf("\n", open);
  const info = text.slice(open + 3, start < 0 ? undefined : start).trim();
  // "```json {...}```" on one line: the info string is really the start of the content.
  if (start < 0 || !/^[A-Za-z0-9_+-]*$/.test(info)) {
    start = open + 3;
    const lang = /^(?:json5?|jsonc|javascript|js)\b/i.exec(text.slice(start).trimStart());
    if (lang) start = text.indexOf(lang[0], start) + lang[0].length;
  }
  const close = text.indexOf("```", start);
  const body = text.slice(start, close < 0 ? undefined : close).trim();
  // A fence around something else (a shell snippet after the JSON) is not the document.
  return /[{[]/.test(body) ? body : text;
}

/** Whether `text[i]` opens something that looks like a JSON object or array (not "{name}" prose). */
function looksLikeStart(text: string, i: number): boolean {
  const c = text[i];
  const rest = text.slice(i + 1).trimStart();
  if (c === "{") return rest === "" || /^["'}\u201c]/.test(rest) || /^[A-Za-z_$][\w$-]*\s*:/.test(rest);
  if (c === "[") return rest === "" || /^(?:[-\d{["'\]\u201c]|true|false|null|True|False|None)/.test(rest);
  return false;
}

/**
 * Index just past the bracket that closes the one at `start` (string-aware, both quote kinds),
 * or -1 when the text ends first.
 */
function balancedEnd(text: string, start: number): number {
  let depth = 0;
  let quote: string | null = null;
  for (let i = start; i < text.length; i++) {
    const c = text[i]!;
    if (quote !== null) {
      if (c === "\\") i++;
      else if (c === quote) quote = null;
      continue;
    }
    if (c === '"' || (c === "'" && /[\s,:[{]/.test(text[i - 1] ?? " "))) quote = c;
    else if (c === "{" || c === "[") depth++;
    else if (c === "}" || c === "]") {
      depth--;
      if (depth === 0) return i + 1;
    }
  }
  return -1;
}

/** The first JSON-looking object/array carved out of surrounding prose (to the end if unclosed). */
function extract(text: string): string {
  for (let i = 0; i < text.length; i++) {
    if ((text[i] === "{" || text[i] === "[") && looksLikeStart(text, i)) {
      const end = balancedEnd(text, i);
      return text.slice(i, end < 0 ? undefined : end).trim();
    }
  }
  return text;
}

/**
 * Rewrites the parts of `text` outside double-quoted strings with `outside`, keeping strings
 * verbatim; `inside` (optional) rewrites each string's body.
 */
function mapOutsideStrings(
  text: string,
  outside: (chunk: string) => string,
  inside: (body: string) => string = (b) => b,
): string {
  let out = "";
  let chunkStart = 0;
  let i = 0;
  while (i < text.length) {
    if (text[i] !== '"') {
      i++;
      continue;
    }
    out += outside(text.slice(chunkStart, i));
    let j = i + 1;
    while (j < text.length && text[j] !== '"') j += text[j] === "\\" ? 2 : 1;
    out += '"' + inside(text.slice(i + 1, Math.min(j, text.length)));
    if (j < text.length) out += '"';
    i = j + 1;
    chunkStart = i;
  }
  return out + outside(text.slice(chunkStart));
}

function trailingComma(text: string): string {
  return mapOutsideStrings(text, (chunk) => chunk.replace(/,(\s*)(?=[}\]])/g, "$1"));
}

/** 'single' and \u201ccurly\u201d strings to "double"; bare object keys quoted. */
function quotes(text: string): string {
  let out = "";
  let last = ""; // the last non-space character written, for spotting bare keys after { or ,
  const emit = (chunk: string) => {
    out += chunk;
    const t = chunk.trimEnd();
    if (t !== "") last = t[t.length - 1]!;
  };
  let i = 0;
  while (i < text.length) {
    const c = text[i]!;
    if (c === '"') {
      let j = i + 1;
      while (j < text.length && text[j] !== '"') j += text[j] === "\\" ? 2 : 1;
      emit(text.slice(i, j + 1));
      i = j + 1;
    } else if (c === "'" || c === "\u201c" || c === "\u2018") {
      const close = c === "'" ? "'" : c === "\u201c" ? "\u201d" : "\u2019";
      let body = "";
      let j = i + 1;
      for (; j < text.length && text[j] !== close; j++) {
        const d = text[j]!;
        if (d === "\\" && text[j + 1] === close) {
          body += close;
          j++;
        } else if (d === "\\") {
          body += d + (text[j + 1] ?? "");
          j++;
        } else body += d === '"' ? '\\"' : d;
      }
      // Unterminated: leave it open, so the truncation check sees a cut string.
      emit(j >= text.length ? `"${body}` : `"${body}"`);
      i = j + 1;
    } else if (/[A-Za-z_$]/.test(c) && (last === "{" || last === ",")) {
      const m = /^[A-Za-z_$][\w$-]*(?=\s*:)/.exec(text.slice(i));
      if (m) {
        emit(`"${m[0]}"`);
        i += m[0].length;
      } else {
        emit(c);
        i++;
      }
    } else {
      emit(c);
      i++;
    }
  }
  return out;
}

function pythonBools(text: string): string {
  const words: Record<string, string> = { True: "true", False: "false", None: "null" };
  return mapOutsideStrings(text, (chunk) => chunk.replace(/\b(True|False|None)\b/g, (w) => words[w]!));
}

function controlChars(text: string): string {
  const named: Record<string, string> = { "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f" };
  return mapOutsideStrings(
    text,
    (chunk) => chunk,
    // eslint-disable-next-line no-control-regex
    (body) => body.replace(/[\u0000-\u001f]/g, (ch) => named[ch] ?? `\\u${ch.charCodeAt(0).toString(16).padStart(4, "0")}`),
  );
}

type Closing = { ok: true; text: string } | { ok: false; reason: string };

/** Appends the missing `}`/`]`; refuses (truncation) when the text stops inside a string or before a value. */
function closeBraces(text: string): Closing {
  const stack: string[] = [];
  let inString = false;
  let lastSignificant = "";
  // Whether the object on top of the stack has a key waiting for its value.
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (inString) {
      if (c === "\\") i++;
      else if (c === '"') inString = false;
      continue;
    }
    if (c === '"') {
      inString = true;
      lastSignificant = '"';
    } else if (c === "{" || c === "[") {
      stack.push(c === "{" ? "}" : "]");
      lastSignificant = c;
    } else if (c === "}" || c === "]") {
      if (stack.pop() !== c) return { ok: false, reason: "mismatched brackets" };
      lastSignificant = c;
    } else if (!/\s/.test(c)) lastSignificant = c;
  }
  if (stack.length === 0 && !(inString && text.trimStart().startsWith('"'))) {
    return { ok: false, reason: "nothing is left open" };
  }
  if (inString) return { ok: false, reason: "it ends inside a string" };
  let body = text.trimEnd();
  if (/^[\s[{]*$/.test(body)) return { ok: false, reason: "it ends before any value" };
  if (lastSignificant === ":") return { ok: false, reason: "it ends after a key, before its value" };
  if (lastSignificant === ",") body = body.slice(0, -1);
  // A key with no colon yet ({"a": 1, "b"), or a cut literal (tru, nul): the value is lost.
  if (/(?:^|[{,])\s*"(?:[^"\\]|\\.)*"$/.test(body) && stack[stack.length - 1] === "}") {
    return { ok: false, reason: "it ends after a key, before its value" };
  }
  if (/(?:^|[^\w"])(?:t|tr|tru|f|fa|fal|fals|n|nu|nul)$/.test(body)) {
    return { ok: false, reason: "it ends inside a literal" };
  }
  return { ok: true, text: body + stack.reverse().join("") };
}

// ---- coerce -------------------------------------------------------------------------------

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

const NUMBER = /^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$/;
const NO = Symbol("no conversion");

function convert(value: unknown, type: string): unknown {
  switch (type) {
    case "boolean":
      if (typeof value === "string" && /^(true|false)$/i.test(value.trim())) return value.trim().toLowerCase() === "true";
      return NO;
    case "integer":
    case "number": {
      if (typeof value !== "string" || !NUMBER.test(value.trim())) return NO;
      const n = Number(value.trim());
      return type === "integer" && !Number.isInteger(n) ? NO : n;
    }
    case "string":
      return typeof value === "number" || typeof value === "boolean" ? String(value) : NO;
    case "null":
      return typeof value === "string" && /^null$/i.test(value.trim()) ? null : NO;
    case "array":
      return Array.isArray(value) ? NO : [value];
    case "object":
      if (typeof value !== "string" || !value.trim().startsWith("{")) return NO;
      try {
        const parsed: unknown = JSON.parse(value);
        return isObject(parsed) ? parsed : NO;
      } catch {
        return NO;
      }
    default:
      return NO;
  }
}

function typesOf(schema: Record<string, unknown>): string[] {
  if (typeof schema.type === "string") return [schema.type];
  if (Array.isArray(schema.type)) return schema.type.filter((t): t is string => typeof t === "string");
  if (isObject(schema.properties) || schema.additionalProperties !== undefined || Array.isArray(schema.required)) return ["object"];
  if (schema.items !== undefined) return ["array"];
  return [];
}

function fits(value: unknown, type: string): boolean {
  if (type === "integer") return typeof value === "number" && Number.isInteger(value);
  return jsonType(value) === type;
}

/**
 * Schema-driven type coercion: "true" -> true, "3" -> 3, 3 -> "3", "null" -> null, a scalar
 * where an array belongs -> a one-element array, a JSON object inside a string -> the object,
 * an enum member in the wrong case -> the member. Returns a new value; never throws.
 */
export function coerce(value: unknown, schema: JsonSchema, root: JsonSchema = schema, depth = 0): unknown {
  if (!isObject(schema) || depth > 64) return value;
  if (typeof schema.$ref === "string") {
    const target = resolveRef(root, schema.$ref);
    return target === undefined ? value : coerce(value, target, root, depth + 1);
  }
  const alternatives = Array.isArray(schema.anyOf) ? schema.anyOf : Array.isArray(schema.oneOf) ? schema.oneOf : null;
  if (alternatives) {
    for (const alt of alternatives) if (isValidIn(root, alt, value)) return value;
    for (const alt of alternatives) {
      const c = coerce(value, alt as JsonSchema, root, depth + 1);
      if (isValidIn(root, alt, c)) return c;
    }
    return value;
  }
  if (Array.isArray(schema.allOf)) {
    for (const sub of schema.allOf) value = coerce(value, sub as JsonSchema, root, depth + 1);
  }
  const types = typesOf(schema);
  if (types.length > 0 && !types.some((t) => fits(value, t))) {
    for (const t of types) {
      const c = convert(value, t);
      if (c !== NO) {
        value = c;
        break;
      }
    }
  }
  if (typeof value === "string" && Array.isArray(schema.enum) && !schema.enum.includes(value)) {
    const wanted = value.trim().toLowerCase();
    const hits = schema.enum.filter((e) => typeof e === "string" && e.toLowerCase() === wanted);
    if (hits.length === 1) value = hits[0];
  }
  if (Array.isArray(value)) {
    const items = schema.items;
    if (Array.isArray(items)) return value.map((v, i) => (i < items.length ? coerce(v, items[i] as JsonSchema, root, depth + 1) : v));
    if (items !== undefined) return value.map((v) => coerce(v, items as JsonSchema, root, depth + 1));
    return value;
  }
  if (isObject(value)) {
    const properties = isObject(schema.properties) ? schema.properties : {};
    const out: Record<string, unknown> = {};
    for (const [key, v] of Object.entries(value)) {
      const sub = Object.prototype.hasOwnProperty.call(properties, key)
        ? properties[key]
        : isObject(schema.additionalProperties)
          ? schema.additionalProperties
          : undefined;
      out[key] = sub === undefined ? v : coerce(v, sub as JsonSchema, root, depth + 1);
    }
    return out;
  }
  return value;
}

/** Validates `value` against a sub-schema whose $refs point into `root`. */
function isValidIn(root: JsonSchema, sub: unknown, value: unknown): boolean {
  if (!isObject(root) || root === sub) return isValid(sub as JsonSchema, value);
  // Keep the root's definitions reachable from the sub-schema: validate against
  // {allOf:[sub]} carrying the root's definitions, so "#/definitions/x" still resolves.
  const wrapper: Record<string, unknown> = { allOf: [sub] };
  if (root.definitions !== undefined) wrapper.definitions = root.definitions;
  if (root.$defs !== undefined) wrapper.$defs = root.$defs;
  return isValid(wrapper, value);
}

// ---- the ladder -----------------------------------------------------------------------------

const TEXT_RUNGS: readonly [Rung, (text: string) => string][] = [
  ["fence", fence],
  ["extract", extract],
  ["trailing_comma", trailingComma],
  ["quotes", quotes],
  ["python_bools", pythonBools],
  ["control_chars", controlChars],
];

function clip(text: string, n = 60): string {
  const flat = text.replace(/\s+/g, " ").trim();
  return flat.length > n ? `${flat.slice(0, n)}...` : flat;
}

/**
 * Repairs model output into a JSON value: tries the rungs in order and returns the value with the
 * rung that fixed it. Throws TruncatedError for a cut-off document and RepairError when no rung
 * yields a value that parses and (with a schema) validates.
 */
export function repair<T = unknown>(text: string, options: RepairOptions = {}): Repaired<T> {
  const { schema, stats } = options;
  const finishReason = options.finishReason ?? null;
  const done = (value: unknown, rung: Rung): Repaired<T> => {
    if (schema !== undefined) {
      if (!isValid(schema, value)) {
        const coerced = coerce(value, schema);
        const issues = validate(schema, coerced);
        if (issues.length > 0) {
          stats?.record("failed");
          throw new RepairError(
            `the output parsed (rung ${rung}) but does not match the schema: ${issues.map(describeIssue).join("; ")}`,
            text,
            issues.map(describeIssue),
          );
        }
        value = coerced;
        rung = "coerce";
      }
    }
    stats?.record(rung);
    return { value: value as T, rung };
  };
  const truncated = (why: string): never => {
    stats?.record("truncated");
    throw new TruncatedError(
      `the output was cut off (${why}) after ${text.length} characters; raise maxTokens or ask again instead of repairing it`,
      text,
      finishReason,
    );
  };

  let current = text;
  let parsed = tryParse(current);
  if (parsed.ok) return done(parsed.value, "none");
  for (const [rung, apply] of TEXT_RUNGS) {
    const next = apply(current);
    if (next === current) continue;
    current = next;
    parsed = tryParse(current);
    if (parsed.ok) return done(parsed.value, rung);
  }
  if (finishReason === "length") truncated('finish_reason "length"');
  if (current.trim() === "") {
    stats?.record("failed");
    throw new RepairError("the output is empty", text);
  }
  const closed = closeBraces(current);
  if (!closed.ok) {
    if (closed.reason !== "nothing is left open" && closed.reason !== "mismatched brackets") truncated(closed.reason);
  } else {
    parsed = tryParse(closed.text);
    if (parsed.ok) return done(parsed.value, "close_braces");
  }
  stats?.record("failed");
  throw new RepairError(`no repair rung makes the output parse as JSON: "${clip(text)}"`, text);
}
