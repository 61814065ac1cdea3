// The portable subset: the JSON Schema constructs that GBNF conversion and vLLM guided decoding
// both support, so a schema inside it constrains the same way on every local server. A schema
// outside it silently degrades somewhere.
//
//   type, properties, required, items, enum, additionalProperties,
//   minItems, maxItems, minLength, maxLength, minimum and maximum (integer bounds)
//
// plus annotations (title, description, default, examples, $schema, $comment, $id) and
// acyclic local $ref into definitions/$defs.

import { resolveRef } from "./schema.js";
import type { JsonSchema } from "./schema.js";

/** A construct outside the portable subset, with where it is (JSON Pointer into the schema). */
export interface PortabilityIssue {
  path: string;
  keyword: string;
  message: string;
}

/** The result of {@link portable}. */
export interface Portability {
  portable: boolean;
  issues: PortabilityIssue[];
}

const SUPPORTED = new Set([
  "type",
  "properties",
  "required",
  "items",
  "enum",
  "additionalProperties",
  "minItems",
  "maxItems",
  "minLength",
  "maxLength",
  "minimum",
  "maximum",
]);
const ANNOTATIONS = new Set(["title", "description", "default", "examples", "$schema", "$comment", "$id", "definitions", "$defs", "$ref"]);
const AVOIDED: Record<string, string> = {
  uniqueItems: "uniqueItems cannot be expressed as a grammar",
  contains: "contains cannot be expressed as a grammar",
  if: "if/then/else is not supported by every backend",
  then: "if/then/else is not supported by every backend",
  else: "if/then/else is not supported by every backend",
  prefixItems: "prefixItems is not supported by every backend",
  patternProperties: "patternProperties cannot be expressed as a grammar",
  oneOf: "oneOf is not supported by every backend",
  anyOf: "anyOf is not supported by every backend",
  allOf: "allOf is not supported by every backend",
};

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function escape(key: string): string {
  return key.replace(/~/g, "~0").replace(/\//g, "~1");
}

/** Lists every construct of `schema` outside the portable subset; `portable` when there is none. */
export function portable(schema: JsonSchema): Portability {
  const issues: PortabilityIssue[] = [];
  const add = (path: string, keyword: string, message: string) => issues.push({ path: path || "/", keyword, message });
  const visiting: unknown[] = [];

  const walk = (s: unknown, path: string): void => {
    if (typeof s === "boolean") return;
    if (!isObject(s)) {
      add(path, "schema", "not a schema object");
      return;
    }
    if (visiting.includes(s)) {
      add(path, "$ref", "a $ref cycle: recursive schemas have no finite grammar on every backend");
      return;
    }
    visiting.push(s);
    for (const [keyword, value] of Object.entries(s)) {
      const at = `${path}/${escape(keyword)}`;
      if (keyword === "$ref") {
        const target = typeof value === "string" ? resolveRef(schema, value) : undefined;
        if (target === undefined) add(at, "$ref", `cannot resolve ${JSON.stringify(value)} (only local refs are portable)`);
        else walk(target, at);
      } else if (keyword === "definitions" || keyword === "$defs") {
        // Checked where they are referenced; unreferenced definitions cost nothing.
      } else if (AVOIDED[keyword] !== undefined) {
        add(at, keyword, AVOIDED[keyword]!);
      } else if (!SUPPORTED.has(keyword) && !ANNOTATIONS.has(keyword)) {
        add(at, keyword, `${keyword} is outside the portable subset`);
      } else if ((keyword === "minimum" || keyword === "maximum") && !Number.isInteger(value)) {
        add(at, keyword, `${keyword} ${JSON.stringify(value)} is not an integer bound`);
      } else if (keyword === "type" && (value === "number" || (Array.isArray(value) && value.includes("number"))) && ("minimum" in s || "maximum" in s)) {
        add(at, keyword, "bounds are portable on integers only");
      } else if (keyword === "properties" && isObject(value)) {
        for (const [key, sub] of Object.entries(value)) walk(sub, `${at}/${escape(key)}`);
      } else if ((keyword === "items" || keyword === "additionalProperties") && typeof value !== "boolean") {
        if (Array.isArray(value)) add(at, keyword, "tuple items are outside the portable subset");
        else walk(value, at);
      }
    }
    visiting.pop();
  };
  walk(schema, "");
  return { portable: issues.length === 0, issues };
}
