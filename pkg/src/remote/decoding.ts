// Request semantics around structured output: the structured_decoding switch, the JSON-only stop
// sequences and the instruction that tells the model what to write.

import { PootError } from "../errors.js";
import type { JsonSchema } from "./schema.js";

/** `auto` negotiates the strongest mechanism; `off` forces prompt-only JSON plus repair. */
export type StructuredDecoding = "auto" | "off";

const OFF_ALIASES = ["off", "none", "false", "0", "prompt", "prompt-only"];

/**
 * Normalises the structured_decoding setting: "auto" (the default) or "off", with the aliases of
 * off (none, false, 0, prompt, prompt-only; case and spaces ignored, booleans accepted).
 */
export function normalizeDecoding(value: unknown): StructuredDecoding {
  if (value === undefined || value === null || value === true) return "auto";
  if (value === false || value === 0) return "off";
  const text = typeof value === "string" ? value.trim().toLowerCase() : undefined;
  if (text === "auto" || text === "") return "auto";
  if (text !== undefined && OFF_ALIASES.includes(text)) return "off";
  throw new PootError(
    `structuredDecoding must be "auto" or "off" (or an alias of off: none, false, 0, prompt, prompt-only), got ${JSON.stringify(value)}`,
    { status: 400, code: "invalid_option", param: "structuredDecoding" },
  );
}

/**
 * Stop sequences for JSON-only requests: they end the completion the moment the model starts a
 * markdown section after its object. The commonest small-model JSON failure is not malformed
 * JSON, it is valid JSON followed by an essay. (OpenAI accepts at most four stop strings.)
 */
export const JSON_STOP_SEQUENCES: readonly string[] = ["\n## ", "```\n\n", "\nNote:"];

/** The system instruction for a structured request; it contains the word "JSON", as OpenAI's json_object requires. */
export function jsonInstruction(schema: JsonSchema): string {
  const what = typeof schema === "object" && schema.type === "object" ? "a JSON object" : "a JSON value";
  return `Reply with only ${what} that matches this JSON Schema, with no prose and no code fences:\n${JSON.stringify(schema)}`;
}

/** A chat message as the OpenAI API takes it (only the fields this package reads are typed). */
export interface ChatMessage {
  role: "system" | "developer" | "user" | "assistant" | "tool";
  content: string | null | { type: string; text?: string }[];
  [field: string]: unknown;
}

/** `messages` with `instruction` appended to the leading system message, or a new one in front. */
export function withInstruction(messages: readonly ChatMessage[], instruction: string): ChatMessage[] {
  const first = messages[0];
  if (first && (first.role === "system" || first.role === "developer") && typeof first.content === "string") {
    return [{ ...first, content: `${first.content}\n\n${instruction}` }, ...messages.slice(1)];
  }
  return [{ role: "system", content: instruction }, ...messages];
}

/** Stop strings for a request: the caller's, then the JSON-only ones, at most four. */
export function stopSequences(callerStop: string | readonly string[] | undefined, jsonOnly: boolean): string[] | undefined {
  const own = callerStop === undefined ? [] : typeof callerStop === "string" ? [callerStop] : [...callerStop];
  const all = jsonOnly ? [...own, ...JSON_STOP_SEQUENCES.filter((s) => !own.includes(s))] : own;
  return all.length === 0 ? undefined : all.slice(0, 4);
}
