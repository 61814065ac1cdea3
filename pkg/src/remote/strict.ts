// OpenAI's `strict: true` json_schema mode accepts only schemas where every object lists all its
// properties as required and sets `additionalProperties: false`, with an object at the root. A
// schema that does not qualify is either sent non-strict or transformed: optional properties
// become required-but-nullable, and the nulls the model then writes are stripped back out.

import { resolveRef } from "./schema.js";
import type { JsonSchema } from "./schema.js";

type Obj = Record<string, unknown>;

function isObject(value: unknown): value is Obj {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

const SUBSCHEMA_LISTS = ["anyOf", "allOf", "oneOf"] as const;
const DEFINITIONS = ["definitions", "$defs"] as const;

function isObjectSchema(s: Obj): boolean {
  return s.type === "object" || isObject(s.properties);
}

/** Whether `schema` qualifies for `strict: true` as it is. */
export function qualifiesForStrict(schema: JsonSchema): boolean {
  if (!isObject(schema) || !isObjectSchema(schema)) return false;
  const seen = new Set<unknown>();
  const ok = (s: unknown): boolean => {
    if (!isObject(s)) return false; // boolean schemas are free-form
    if (seen.has(s)) return true;
    seen.add(s);
    if (typeof s.$ref === "string") return ok(resolveRef(schema, s.$ref));
    if (isObjectSchema(s)) {
      if (!isObject(s.properties) || s.additionalProperties !== false) return false;
      const required = Array.isArray(s.required) ? s.required : [];
      if (!Object.keys(s.properties).every((k) => required.includes(k))) return false;
      if (!Object.values(s.properties).every(ok)) return false;
    }
    if (s.type === "array" || s.items !== undefined) {
      if (!isObject(s.items) || !ok(s.items)) return false;
    }
    for (const list of SUBSCHEMA_LISTS) if (Array.isArray(s[list]) && !(s[list] as unknown[]).every(ok)) return false;
    for (const defs of DEFINITIONS) if (isObject(s[defs]) && !Object.values(s[defs] as Obj).every(ok)) return false;
    return true;
  };
  return ok(schema);
}

function allowsNull(s: unknown): boolean {
  if (!isObject(s)) return s === true;
  if (s.type === "null" || (Array.isArray(s.type) && s.type.includes("null"))) return true;
  if (Array.isArray(s.enum) && s.enum.includes(null)) return true;
  return SUBSCHEMA_LISTS.some((k) => k !== "allOf" && Array.isArray(s[k]) && (s[k] as unknown[]).some(allowsNull));
}

function nullable(s: unknown): unknown {
  if (!isObject(s) || allowsNull(s)) return s;
  if (typeof s.type === "string" && s.$ref === undefined) {
    const out: Obj = { ...s, type: [s.type, "null"] };
    if (Array.isArray(s.enum)) out.enum = [...s.enum, null];
    return out;
  }
  if (Array.isArray(s.type) && s.$ref === undefined) return { ...s, type: [...s.type, "null"] };
  return { anyOf: [s, { type: "null" }] };
}

/**
 * A strict-qualifying copy of `schema` (optional properties made required and nullable,
 * `additionalProperties: false` added), or null when it cannot qualify (a non-object root, an
 * object allowing extra properties, an array without items schema).
 */
export function toStrict(schema: JsonSchema): JsonSchema | null {
  if (!isObject(schema) || !isObjectSchema(schema)) return null;
  let possible = true;
  const seen = new Map<unknown, unknown>();
  const walk = (s: unknown): unknown => {
    if (!isObject(s)) {
      possible = false;
      return s;
    }
    if (seen.has(s)) return seen.get(s);
    const out: Obj = { ...s };
    seen.set(s, out);
    if (isObjectSchema(s)) {
      if (!isObject(s.properties) || (s.additionalProperties !== undefined && s.additionalProperties !== false)) {
        possible = false;
        return out;
      }
      const required = Array.isArray(s.required) ? s.required : [];
      const properties: Obj = {};
      for (const [key, sub] of Object.entries(s.properties)) {
        const strictSub = walk(sub);
        properties[key] = required.includes(key) ? strictSub : nullable(strictSub);
      }
      out.properties = properties;
      out.required = Object.keys(properties);
      out.additionalProperties = false;
    }
    if (s.type === "array" || s.items !== undefined) {
      if (!isObject(s.items)) possible = false;
      else out.items = walk(s.items);
    }
    for (const list of SUBSCHEMA_LISTS) if (Array.isArray(s[list])) out[list] = (s[list] as unknown[]).map(walk);
    for (const defs of DEFINITIONS) {
      if (isObject(s[defs])) out[defs] = Object.fromEntries(Object.entries(s[defs] as Obj).map(([k, v]) => [k, walk(v)]));
    }
    return out;
  };
  const result = walk(schema);
  return possible ? (result as JsonSchema) : null;
}

/**
 * Removes the nulls a strict-transformed schema made the model write: a property that `original`
 * left optional and that does not allow null is deleted when its value is null.
 */
export function stripAddedNulls(value: unknown, original: JsonSchema, root: JsonSchema = original, depth = 0): unknown {
  if (!isObject(original) || depth > 64) return value;
  if (typeof original.$ref === "string") {
    const target = resolveRef(root, original.$ref);
    return target === undefined ? value : stripAddedNulls(value, target, root, depth + 1);
  }
  for (const list of SUBSCHEMA_LISTS) {
    if (Array.isArray(original[list])) {
      for (const alt of original[list] as unknown[]) value = stripAddedNulls(value, alt as JsonSchema, root, depth + 1);
    }
  }
  if (Array.isArray(value) && isObject(original.items)) {
    return value.map((v) => stripAddedNulls(v, original.items as JsonSchema, root, depth + 1));
  }
  if (isObject(value) && isObject(original.properties)) {
    const required = Array.isArray(original.required) ? original.required : [];
    const out: Obj = {};
    for (const [key, v] of Object.entries(value)) {
      const sub = original.properties[key];
      if (v === null && sub !== undefined && !required.includes(key) && !allowsNull(sub)) continue;
      out[key] = sub === undefined ? v : stripAddedNulls(v, sub as JsonSchema, root, depth + 1);
    }
    return out;
  }
  return value;
}
