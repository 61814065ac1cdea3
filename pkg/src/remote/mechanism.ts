// The constrained-decoding mechanisms, strongest first, and how each one is spelled on the wire.
// Rank 2 has two spellings: vLLM <= 0.11 reads `guided_json`, vLLM >= 0.12 reads
// `structured_outputs: {json}`, and each version ignores the other's field with a 200, so they are
// separate mechanisms, probed separately.

import type { JsonSchema } from "./schema.js";

/** A constrained-decoding mechanism. */
export type Mechanism =
  | "json_schema"
  | "structured_outputs"
  | "guided_json"
  | "gbnf_grammar"
  | "json_object"
  | "prompt_only";

/** Every mechanism, strongest first; `prompt_only` (nothing on the wire) is the floor. */
export const MECHANISMS: readonly Mechanism[] = [
  "json_schema",
  "structured_outputs",
  "guided_json",
  "gbnf_grammar",
  "json_object",
  "prompt_only",
];

/** The spec's rank of each mechanism (1 strongest). */
export const RANK: Readonly<Record<Mechanism, number>> = {
  json_schema: 1,
  structured_outputs: 2,
  guided_json: 2,
  gbnf_grammar: 3,
  json_object: 4,
  prompt_only: 5,
};

/** The request fields each mechanism adds, as error messages name them. */
export const FIELDS: Readonly<Record<Mechanism, readonly string[]>> = {
  json_schema: ["response_format", "json_schema"],
  structured_outputs: ["structured_outputs"],
  guided_json: ["guided_json"],
  gbnf_grammar: ["grammar"],
  json_object: ["response_format", "json_object"],
  prompt_only: [],
};

/** What a mechanism needs to build its request fields. */
export interface WireInput {
  schema: JsonSchema;
  name: string;
  /** Whether to send `strict: true` (json_schema only). */
  strict: boolean;
  /** The GBNF grammar (gbnf_grammar only). */
  grammar?: string;
}

/** The extra body fields for `mechanism`: merged into an otherwise plain chat request. */
export function wireFields(mechanism: Mechanism, input: WireInput): Record<string, unknown> {
  switch (mechanism) {
    case "json_schema":
      return {
        response_format: {
          type: "json_schema",
          json_schema: { name: input.name, schema: input.schema, strict: input.strict },
        },
      };
    case "structured_outputs":
      return { structured_outputs: { json: input.schema } };
    case "guided_json":
      return { guided_json: input.schema };
    case "gbnf_grammar":
      return { grammar: input.grammar ?? "" };
    case "json_object":
      return { response_format: { type: "json_object" } };
    case "prompt_only":
      return {};
  }
}

/** Whether a mechanism carries the caller's schema to the server (so the output can be held to it). */
export function carriesSchema(mechanism: Mechanism): boolean {
  return mechanism !== "json_object" && mechanism !== "prompt_only";
}
