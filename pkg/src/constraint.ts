// The constraint engine on its own, for callers that run the model elsewhere (a server, another
// runtime, their own WebGPU code): compile the constraint fields of an OpenAI request against a
// vocabulary, then ask for a token mask before each step and report each sampled token.
//
//   const m = await compileConstraint({ vocabulary: { gguf: bytes }, request: { guided_json: schema } });
//   const mask = new Uint32Array(Math.ceil(m.vocabSize / 32));
//   m.fillMask(mask);            // bit i % 32 of mask[i >> 5] allows token i
//   m.accept(sampledToken);      // a disallowed token throws and changes nothing
//   m.free();
//
// Everything here is a thin layer over the wasm `Vocabulary` / `Constraint` / `Matcher`: the
// masks are the Rust engine's, bit for bit.
import { PootError, toPootError } from "./errors.js";
import type { ChatCompletionCreateParams, CompletionCreateParams, Limits } from "./types.js";
import { limitsText } from "./limits.js";
import { loadWasm, type Wasm, type WasmSource } from "./wasm.js";

type WasmVocabulary = Wasm["Vocabulary"]["prototype"];
type WasmConstraint = Wasm["Constraint"]["prototype"];
type WasmMatcher = Wasm["Matcher"]["prototype"];

/**
 * Where the tokens come from:
 * - `{ gguf }`: a GGUF file's bytes, or any prefix of it that reaches the tensor data. Only the
 *   header (metadata and tensor list) is read, and only it is copied into wasm memory.
 * - `{ tokenizerJson, eos? }`: a Hugging Face `tokenizer.json` (text or parsed object); `eos`
 *   defaults to the file's end-of-turn / end-of-sequence special tokens.
 * - `{ tokens, eos }`: each token's bytes (a `Uint8Array`, or a string for its UTF-8 bytes)
 *   and the end-of-sequence ids, for callers with their own tokenizer.
 */
export type VocabularySource =
  | { gguf: Uint8Array | ArrayBuffer }
  | { tokenizerJson: string | object; eos?: readonly number[] }
  | { tokens: readonly (Uint8Array | string)[]; eos: readonly number[] };

/**
 * The constraint fields of an OpenAI chat or completions request. The rest of a request may be
 * passed along and is ignored. Precedence when several are set: `guided_choice` >
 * `guided_regex` > `guided_grammar` > `guided_json` > `response_format`.
 */
export interface ConstraintRequest {
  guided_choice?: readonly string[] | null;
  guided_regex?: string | null;
  guided_grammar?: string | null;
  guided_json?: object | string | boolean | null;
  /** `false`: objects take only their listed keys where `additionalProperties` is left out (default `true`, as JSON Schema says). */
  guided_json_extra_keys?: boolean | null;
  response_format?:
    | { type: "text" }
    | { type: "json_object" }
    | { type: "json_schema"; json_schema: { name?: string; schema?: object | boolean; strict?: boolean | null; description?: string } }
    | null;
  /** Declared tools are ignored unless `tool_choice` forces a call, which is refused. */
  tools?: readonly unknown[] | null;
  tool_choice?: unknown;
  [field: string]: unknown;
}

/** A parsed vocabulary that several constraints can share (see {@link loadVocabulary}). */
export interface ConstraintVocabulary {
  /** Number of tokens: the logits' length. */
  readonly size: number;
  /** Length of a mask over it in `u32` words: `ceil(size / 32)`. */
  readonly maskWords: number;
  /** The end-of-sequence ids, sorted. */
  readonly eosIds: readonly number[];
  /** The bytes token `id` adds to the output (a special token's name, for display). */
  tokenBytes(id: number): Uint8Array;
  /** Whether token `id` is text (a constraint may allow it); special tokens never are. */
  isText(id: number): boolean;
  /** Releases its wasm memory; the matchers compiled from it must be freed first. */
  free(): void;
}

/** One sequence's position in a compiled constraint. Holds wasm memory until `free()`. */
export interface ConstraintMatcher {
  /** Number of tokens in the vocabulary (the logits' length). */
  readonly vocabSize: number;
  /** Length of a mask in `u32` words: `ceil(vocabSize / 32)`. */
  readonly maskWords: number;
  /** What the request asked for: `"choice"`, `"regex"`, `"grammar"`, `"json"`, `"json_object"`. */
  readonly kind: string;
  /** The vocabulary's end-of-sequence ids. */
  readonly eosIds: readonly number[];
  /**
   * Writes the tokens allowed next into `mask` (`maskWords` words; bit `i % 32` of word
   * `i >> 5` is token `i`). End-of-sequence tokens are allowed exactly when the output so far
   * is complete; after one is accepted, nothing is.
   */
  fillMask(mask: Uint32Array): void;
  /** Advances by `tokenId`; a token the mask does not allow throws a 400 and changes nothing. */
  accept(tokenId: number): void;
  /** Whether `tokenId` is allowed next (its bit in the mask), without building the mask. */
  isAllowed(tokenId: number): boolean;
  /** Whether the output so far is complete: an end-of-sequence token is allowed now. */
  isAccepting(): boolean;
  /** Whether an end-of-sequence token has been accepted. */
  isFinished(): boolean;
  /** Tokens accepted so far. */
  readonly tokenCount: number;
  /** Undoes the last `n` tokens; more than were accepted throws and changes nothing. */
  rollback(n: number): void;
  /** Back to the start of the output. */
  reset(): void;
  /**
   * The bytes that must come next whatever tokens produce them (jump-forward decoding);
   * empty when the next byte is not forced.
   */
  forced(): Uint8Array;
  /** Releases the matcher's wasm memory (and the vocabulary's, when it was parsed for it). */
  free(): void;
}

export interface CompileConstraintOptions {
  /** The tokens, or a vocabulary from {@link loadVocabulary} to share between constraints. */
  vocabulary: VocabularySource | ConstraintVocabulary;
  /** The constraint fields, or a whole chat / completions request (an `openai` one too). */
  request: ConstraintRequest | ChatCompletionCreateParams | CompletionCreateParams;
  /** The wasm module's bytes or location (needed once in Node; browsers find it themselves). */
  wasm?: WasmSource;
  /** Tighter bounds on what the request may make the compiler do (see {@link Limits}). */
  limits?: Limits;
}

const invalid = (message: string, param: string | null = null) =>
  new PootError(message, { status: 400, code: "invalid_input", param });

function describe(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  if (value instanceof Uint8Array) return "a Uint8Array";
  if (ArrayBuffer.isView(value)) return `a ${value.constructor.name}`;
  if (value instanceof ArrayBuffer) return "an ArrayBuffer";
  const t = typeof value;
  return t === "object" ? "an object" : t === "undefined" ? "undefined" : `a ${t}`;
}

class Vocab implements ConstraintVocabulary {
  #inner: WasmVocabulary | null;
  readonly size: number;
  readonly maskWords: number;
  readonly eosIds: readonly number[];

  constructor(inner: WasmVocabulary) {
    this.#inner = inner;
    this.size = inner.size;
    this.maskWords = inner.maskWords;
    this.eosIds = Object.freeze([...inner.eosIds]);
  }

  get inner(): WasmVocabulary {
    if (!this.#inner) throw invalid("this vocabulary was freed", "vocabulary");
    return this.#inner;
  }

  tokenBytes(id: number): Uint8Array {
    try {
      return this.inner.tokenBytes(id);
    } catch (e) {
      throw toPootError(e);
    }
  }

  isText(id: number): boolean {
    return Number.isInteger(id) && id >= 0 && id < this.size && this.inner.isText(id);
  }

  free(): void {
    this.#inner?.free();
    this.#inner = null;
  }
}

/** Parses a vocabulary once, for several {@link compileConstraint} calls to share. */
export async function loadVocabulary(source: VocabularySource, options: { wasm?: WasmSource } = {}): Promise<ConstraintVocabulary> {
  const wasm = await loadWasm(options.wasm);
  return new Vocab(parseVocabulary(wasm, source));
}

function parseVocabulary(wasm: Wasm, source: VocabularySource): WasmVocabulary {
  if (typeof source !== "object" || source === null || Array.isArray(source)) {
    throw invalid(`vocabulary must be { gguf }, { tokenizerJson } or { tokens, eos }, got ${describe(source)}`, "vocabulary");
  }
  const eosOf = (eos: unknown, what: string): Uint32Array => {
    if (!Array.isArray(eos) || !eos.every((id) => Number.isInteger(id) && id >= 0 && id <= 0xffffffff)) {
      throw invalid(`${what} must be an array of token ids (non-negative integers), got ${describe(eos)}`, "vocabulary");
    }
    return Uint32Array.from(eos as number[]);
  };
  try {
    if ("gguf" in source) {
      const bytes = source.gguf instanceof ArrayBuffer ? new Uint8Array(source.gguf) : source.gguf;
      if (!(bytes instanceof Uint8Array)) {
        throw invalid(`vocabulary.gguf must be a Uint8Array or an ArrayBuffer, got ${describe(source.gguf)}`, "vocabulary");
      }
      return wasm.Vocabulary.fromGguf(bytes.subarray(0, ggufHeaderEnd(bytes)));
    }
    if ("tokenizerJson" in source) {
      const json = source.tokenizerJson;
      if (typeof json !== "string" && (typeof json !== "object" || json === null || json instanceof Uint8Array)) {
        throw invalid(`vocabulary.tokenizerJson must be a string or an object, got ${describe(json)}`, "vocabulary");
      }
      const eos = source.eos === undefined ? undefined : eosOf(source.eos, "vocabulary.eos");
      return wasm.Vocabulary.fromTokenizerJson(typeof json === "string" ? json : JSON.stringify(json), eos);
    }
    if ("tokens" in source) {
      if (!Array.isArray(source.tokens)) {
        throw invalid(`vocabulary.tokens must be an array of Uint8Arrays or strings, got ${describe(source.tokens)}`, "vocabulary");
      }
      return wasm.Vocabulary.fromTokens(source.tokens as (Uint8Array | string)[], eosOf(source.eos, "vocabulary.eos"));
    }
  } catch (e) {
    throw toPootError(e);
  }
  const keys = Object.keys(source);
  throw invalid(
    `vocabulary must be { gguf }, { tokenizerJson } or { tokens, eos }, got an object with ${keys.length ? `keys ${keys.join(", ")}` : "no keys"}`,
    "vocabulary",
  );
}

/**
 * Refuses what the constraint-only API cannot compile: a forced tool call's format depends on
 * the model's chat template (poot's engine forces ChatML/Hermes calls only), so a request that
 * forces one gets a 400 instead of a constraint that would not say what the engine enforces.
 */
function checkTools(request: { tool_choice?: unknown }): void {
  const choice = request.tool_choice;
  const forcing = choice === "required" || (typeof choice === "object" && choice !== null);
  if (forcing) {
    throw invalid(
      'compileConstraint cannot force a tool call (tool_choice "required" or a named function): the call\'s format depends on the model\'s chat template. Compile the call\'s format as guided_grammar or guided_json instead',
      "tool_choice",
    );
  }
}

/**
 * Compiles the constraint an OpenAI request carries (`guided_choice`, `guided_regex`,
 * `guided_grammar`, `guided_json`, `response_format` json_object / json_schema) over a
 * vocabulary, and returns a matcher at the start of the output; `null` when the request does
 * not constrain its output (no such field, or `response_format: {type: "text"}`).
 *
 * Errors are {@link PootError}s with the OpenAI error fields: a 400 naming the request field
 * for a constraint that does not compile (`invalid_input`) or is too large (`limit_exceeded`).
 */
export async function compileConstraint(options: CompileConstraintOptions): Promise<ConstraintMatcher | null> {
  if (typeof options !== "object" || options === null) {
    throw invalid(`compileConstraint takes { vocabulary, request }, got ${describe(options)}`);
  }
  const { vocabulary, request } = options;
  if (typeof request !== "object" || request === null || Array.isArray(request)) {
    throw invalid(`request must be an object (the constraint fields of an OpenAI request), got ${describe(request)}`, "request");
  }
  checkTools(request as { tool_choice?: unknown });
  const limits = limitsText(options.limits);
  const wasm = await loadWasm(options.wasm);
  const shared = vocabulary instanceof Vocab ? vocabulary : null;
  const vocab = shared ? shared.inner : parseVocabulary(wasm, vocabulary as VocabularySource);
  let constraint: WasmConstraint | undefined;
  try {
    constraint = wasm.Constraint.fromRequest(vocab, JSON.stringify(request), limits);
  } catch (e) {
    if (!shared) vocab.free();
    throw toPootError(e);
  }
  if (!constraint) {
    if (!shared) vocab.free();
    return null;
  }
  return new Matcher(constraint, vocab, !shared);
}

class Matcher implements ConstraintMatcher {
  #matcher: WasmMatcher | null;
  #constraint: WasmConstraint;
  #vocab: WasmVocabulary;
  #ownsVocab: boolean;
  readonly vocabSize: number;
  readonly maskWords: number;
  readonly kind: string;
  readonly eosIds: readonly number[];

  constructor(constraint: WasmConstraint, vocab: WasmVocabulary, ownsVocab: boolean) {
    this.#constraint = constraint;
    this.#matcher = constraint.matcher();
    this.#vocab = vocab;
    this.#ownsVocab = ownsVocab;
    this.vocabSize = vocab.size;
    this.maskWords = vocab.maskWords;
    this.kind = constraint.kind;
    this.eosIds = Object.freeze([...vocab.eosIds]);
  }

  #live(): WasmMatcher {
    if (!this.#matcher) throw invalid("this matcher was freed");
    return this.#matcher;
  }

  #call<T>(f: (m: WasmMatcher) => T): T {
    const m = this.#live();
    try {
      return f(m);
    } catch (e) {
      throw toPootError(e);
    }
  }

  fillMask(mask: Uint32Array): void {
    if (!(mask instanceof Uint32Array)) {
      throw invalid(`the mask must be a Uint32Array of ${this.maskWords} words, got ${describe(mask)}`, "mask");
    }
    this.#call((m) => m.fillMask(mask));
  }

  accept(tokenId: number): void {
    if (!Number.isInteger(tokenId) || tokenId < 0 || tokenId > 0xffffffff) {
      throw invalid(`a token id must be a non-negative integer, got ${JSON.stringify(tokenId) ?? String(tokenId)}`);
    }
    this.#call((m) => m.accept(tokenId));
  }

  isAllowed(tokenId: number): boolean {
    if (!Number.isInteger(tokenId) || tokenId < 0 || tokenId >= this.vocabSize) return false;
    return this.#call((m) => m.isAllowed(tokenId));
  }

  isAccepting(): boolean {
    return this.#call((m) => m.isAccepting());
  }

  isFinished(): boolean {
    return this.#call((m) => m.isFinished());
  }

  get tokenCount(): number {
    return this.#call((m) => m.tokenCount);
  }

  rollback(n: number): void {
    if (!Number.isInteger(n) || n < 0) {
      throw invalid(`rollback takes a non-negative integer, got ${JSON.stringify(n) ?? String(n)}`);
    }
    this.#call((m) => m.rollback(n));
  }

  reset(): void {
    this.#call((m) => m.reset());
  }

  forced(): Uint8Array {
    return this.#call((m) => m.forced());
  }

  free(): void {
    if (!this.#matcher) return;
    this.#matcher.free();
    this.#matcher = null;
    this.#constraint.free();
    if (this.#ownsVocab) this.#vocab.free();
  }
}

/**
 * The offset where a GGUF file's header (metadata and tensor list) ends, so that only that
 * prefix is copied into wasm memory (a few MB of a file that may be gigabytes). Anything it
 * cannot walk — a truncated or malformed file — yields the whole length, and the Rust parser
 * then reports exactly what is wrong.
 */
export function ggufHeaderEnd(bytes: Uint8Array): number {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const n = bytes.byteLength;
  let pos = 0;
  const need = (k: number) => {
    if (pos + k > n) throw new RangeError("truncated");
  };
  const u32 = () => (need(4), (pos += 4), view.getUint32(pos - 4, true));
  const u64 = () => {
    need(8);
    const v = view.getBigUint64(pos, true);
    pos += 8;
    if (v > BigInt(n)) throw new RangeError("too large");
    return Number(v);
  };
  const skip = (k: number) => (need(k), (pos += k));
  const SIZES: Record<number, number> = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
  const value = (type: number, depth: number): void => {
    if (type === 8) return void skip(u64());
    if (type === 9) {
      if (depth > 4) throw new RangeError("nested");
      const itemType = u32();
      const count = u64();
      const size = SIZES[itemType];
      if (size !== undefined) return void skip(count * size);
      for (let i = 0; i < count; i++) value(itemType, depth + 1);
      return;
    }
    const size = SIZES[type];
    if (size === undefined) throw new RangeError("type");
    skip(size);
  };
  try {
    if (n < 4 || view.getUint32(0, true) !== 0x46554747) return n; // "GGUF"
    pos = 4;
    const version = u32();
    if (version !== 2 && version !== 3) return n;
    const tensors = u64();
    const kvs = u64();
    for (let i = 0; i < kvs; i++) {
      skip(u64()); // key
      value(u32(), 0);
    }
    for (let i = 0; i < tensors; i++) {
      skip(u64()); // name
      const dims = u32();
      skip(dims * 8 + 4 + 8); // dims, type, offset
    }
    return pos;
  } catch {
    return n;
  }
}
