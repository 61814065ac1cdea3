// A JSON Schema validator for the draft-07 keywords structured output meets in practice, written
// here rather than taken from ajv because ajv compiles schemas with `new Function`, which a page
// with a strict Content-Security-Policy forbids, and `poot/remote` has to run in such pages.
//
// Supported keywords: type (string or list), enum, const, properties, required,
// additionalProperties, patternProperties, propertyNames, minProperties, maxProperties,
// dependencies, items (schema or list), additionalItems, contains, minItems, maxItems,
// uniqueItems, minLength, maxLength (in code points), pattern, minimum, maximum,
// exclusiveMinimum, exclusiveMaximum (draft-06+ numbers and draft-04 booleans), multipleOf,
// allOf, anyOf, oneOf, not, if/then/else, local $ref (#, #/definitions/..., #/$defs/...),
// boolean schemas. `format` and unknown keywords are annotations and never reject.
// The package's tests compare it with ajv on the official draft-07 suite and JSONSchemaBench.

/** A JSON Schema (draft-07 subset); `true`/`false` are the boolean schemas. */
export type JsonSchema = boolean | { [keyword: string]: unknown };

/** A parsed JSON value. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** One reason a value does not match: where (JSON Pointer), which keyword, and a sentence. */
export interface SchemaIssue {
  path: string;
  keyword: string;
  message: string;
}

type SchemaObject = { [keyword: string]: unknown };

const MAX_DEPTH = 256; // ref chains deeper than this are cycles that never consume input

/** JSON type name of a value as JSON Schema names them ("integer" is reported as "number"). */
export function jsonType(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  return typeof value === "object" ? "object" : typeof value;
}

function isObject(value: unknown): value is SchemaObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function matchesType(value: unknown, type: string): boolean {
  switch (type) {
    case "null":
      return value === null;
    case "boolean":
      return typeof value === "boolean";
    case "number":
      return typeof value === "number" && Number.isFinite(value);
    case "integer":
      return typeof value === "number" && Number.isInteger(value);
    case "string":
      return typeof value === "string";
    case "array":
      return Array.isArray(value);
    case "object":
      return isObject(value);
    default:
      return false;
  }
}

/** Structural equality of JSON values (object key order ignored), as `enum`/`const` need. */
export function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== typeof b || a === null || b === null || typeof a !== "object") return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a)) {
    const other = b as unknown[];
    return a.length === other.length && a.every((item, i) => jsonEqual(item, other[i]));
  }
  const left = a as SchemaObject;
  const right = b as SchemaObject;
  const keys = Object.keys(left);
  return keys.length === Object.keys(right).length && keys.every((k) => has(right, k) && jsonEqual(left[k], right[k]));
}

// Own properties only: "constructor" or "toString" in a document must not be found on the prototype.
function has(object: object, key: string): boolean {
  return Object.prototype.hasOwnProperty.call(object, key);
}

function codePoints(text: string): number {
  let n = 0;
  for (const _ of text) n++;
  return n;
}

function pointer(path: string, key: string | number): string {
  return `${path}/${String(key).replace(/~/g, "~0").replace(/\//g, "~1")}`;
}

/** Resolves a local `$ref` ("#", "#/definitions/x", "#/$defs/x") against the root schema. */
export function resolveRef(root: JsonSchema, ref: string): JsonSchema | undefined {
  if (!ref.startsWith("#")) return undefined;
  let target: unknown = root;
  const fragment = decodeURIComponent(ref.slice(1));
  if (fragment === "") return root;
  if (!fragment.startsWith("/")) return undefined;
  for (const raw of fragment.slice(1).split("/")) {
    const key = raw.replace(/~1/g, "/").replace(/~0/g, "~");
    if (Array.isArray(target)) target = target[Number(key)];
    else if (isObject(target)) target = target[key];
    else return undefined;
    if (target === undefined) return undefined;
  }
  return typeof target === "boolean" || isObject(target) ? (target as JsonSchema) : undefined;
}

const regexCache = new Map<string, RegExp | null>();
function regex(source: string): RegExp | null {
  let compiled = regexCache.get(source);
  if (compiled === undefined) {
    try {
      compiled = new RegExp(source, "u");
    } catch {
      compiled = null;
    }
    regexCache.set(source, compiled);
  }
  return compiled;
}

class Validator {
  readonly issues: SchemaIssue[] = [];
  constructor(
    private readonly root: JsonSchema,
    private readonly limit: number,
  ) {}

  private fail(path: string, keyword: string, message: string): false {
    if (this.issues.length < this.limit) this.issues.push({ path, keyword, message });
    return false;
  }

  /** Whether `value` matches `schema` without recording anything (for anyOf/oneOf/not/if). */
  private quiet(value: unknown, schema: unknown, path: string, depth: number): boolean {
    const probe = new Validator(this.root, 1);
    return probe.check(value, schema, path, depth);
  }

  check(value: unknown, schema: unknown, path: string, depth: number): boolean {
    if (schema === true || schema === undefined) return true;
    if (schema === false) return this.fail(path, "false", "no value is allowed here");
    if (!isObject(schema)) return true;
    if (depth > MAX_DEPTH) return this.fail(path, "$ref", "the schema's $ref chain does not terminate");
    let ok = true;

    if (typeof schema.$ref === "string") {
      const target = resolveRef(this.root, schema.$ref);
      if (target === undefined) return this.fail(path, "$ref", `cannot resolve $ref ${schema.$ref}`);
      // Draft-07: a $ref's siblings are ignored.
      return this.check(value, target, path, depth + 1);
    }

    const type = schema.type;
    if (typeof type === "string" || Array.isArray(type)) {
      const types = (Array.isArray(type) ? type : [type]) as string[];
      if (!types.some((t) => matchesType(value, t))) {
        return this.fail(path, "type", `expected ${types.join(" or ")}, got ${jsonType(value)}`);
      }
    }
    if (Array.isArray(schema.enum) && !schema.enum.some((v) => jsonEqual(v, value))) {
      ok = this.fail(path, "enum", `expected one of ${JSON.stringify(schema.enum)}, got ${JSON.stringify(value)}`);
    }
    if ("const" in schema && !jsonEqual(schema.const, value)) {
      ok = this.fail(path, "const", `expected ${JSON.stringify(schema.const)}, got ${JSON.stringify(value)}`);
    }

    if (typeof value === "number") ok = this.number(value, schema, path) && ok;
    if (typeof value === "string") ok = this.string(value, schema, path) && ok;
    if (Array.isArray(value)) ok = this.array(value, schema, path, depth) && ok;
    if (isObject(value)) ok = this.object(value, schema, path, depth) && ok;

    if (Array.isArray(schema.allOf)) {
      for (const sub of schema.allOf) ok = this.check(value, sub, path, depth + 1) && ok;
    }
    if (Array.isArray(schema.anyOf) && !schema.anyOf.some((sub) => this.quiet(value, sub, path, depth + 1))) {
      ok = this.fail(path, "anyOf", "matches none of the anyOf alternatives");
    }
    if (Array.isArray(schema.oneOf)) {
      const n = schema.oneOf.filter((sub) => this.quiet(value, sub, path, depth + 1)).length;
      if (n !== 1) ok = this.fail(path, "oneOf", `matches ${n} of the oneOf alternatives, not exactly one`);
    }
    if ("not" in schema && this.quiet(value, schema.not, path, depth + 1)) {
      ok = this.fail(path, "not", "matches the schema under not");
    }
    if ("if" in schema) {
      const branch = this.quiet(value, schema.if, path, depth + 1) ? schema.then : schema.else;
      if (branch !== undefined) ok = this.check(value, branch, path, depth + 1) && ok;
    }
    return ok;
  }

  private number(value: number, s: SchemaObject, path: string): boolean {
    let ok = true;
    if (typeof s.minimum === "number") {
      const exclusive = s.exclusiveMinimum === true;
      if (exclusive ? value <= s.minimum : value < s.minimum) {
        ok = this.fail(path, "minimum", `${value} is below the minimum ${s.minimum}${exclusive ? " (exclusive)" : ""}`);
      }
    }
    if (typeof s.maximum === "number") {
      const exclusive = s.exclusiveMaximum === true;
      if (exclusive ? value >= s.maximum : value > s.maximum) {
        ok = this.fail(path, "maximum", `${value} is above the maximum ${s.maximum}${exclusive ? " (exclusive)" : ""}`);
      }
    }
    if (typeof s.exclusiveMinimum === "number" && value <= s.exclusiveMinimum) {
      ok = this.fail(path, "exclusiveMinimum", `${value} is not above ${s.exclusiveMinimum}`);
    }
    if (typeof s.exclusiveMaximum === "number" && value >= s.exclusiveMaximum) {
      ok = this.fail(path, "exclusiveMaximum", `${value} is not below ${s.exclusiveMaximum}`);
    }
    if (typeof s.multipleOf === "number" && s.multipleOf > 0) {
      const q = value / s.multipleOf;
      if (!Number.isFinite(q) || Math.abs(q - Math.round(q)) > 1e-9) {
        ok = this.fail(path, "multipleOf", `${value} is not a multiple of ${s.multipleOf}`);
      }
    }
    return ok;
  }

  private string(value: string, s: SchemaObject, path: string): boolean {
    let ok = true;
    const needLength = typeof s.minLength === "number" || typeof s.maxLength === "number";
    const length = needLength ? codePoints(value) : 0;
    if (typeof s.minLength === "number" && length < s.minLength) {
      ok = this.fail(path, "minLength", `${length} characters, fewer than the minimum ${s.minLength}`);
    }
    if (typeof s.maxLength === "number" && length > s.maxLength) {
      ok = this.fail(path, "maxLength", `${length} characters, more than the maximum ${s.maxLength}`);
    }
    if (typeof s.pattern === "string") {
      const re = regex(s.pattern);
      if (re && !re.test(value)) ok = this.fail(path, "pattern", `does not match the pattern ${s.pattern}`);
    }
    return ok;
  }

  private array(value: unknown[], s: SchemaObject, path: string, depth: number): boolean {
    let ok = true;
    if (typeof s.minItems === "number" && value.length < s.minItems) {
      ok = this.fail(path, "minItems", `${value.length} items, fewer than the minimum ${s.minItems}`);
    }
    if (typeof s.maxItems === "number" && value.length > s.maxItems) {
      ok = this.fail(path, "maxItems", `${value.length} items, more than the maximum ${s.maxItems}`);
    }
    if (Array.isArray(s.items)) {
      value.forEach((item, i) => {
        const sub = i < (s.items as unknown[]).length ? (s.items as unknown[])[i] : s.additionalItems;
        ok = this.check(item, sub, pointer(path, i), depth + 1) && ok;
      });
    } else if (s.items !== undefined) {
      value.forEach((item, i) => {
        ok = this.check(item, s.items, pointer(path, i), depth + 1) && ok;
      });
    }
    if ("contains" in s && !value.some((item, i) => this.quiet(item, s.contains, pointer(path, i), depth + 1))) {
      ok = this.fail(path, "contains", "no item matches the contains schema");
    }
    if (s.uniqueItems === true) {
      for (let i = 0; i < value.length; i++) {
        for (let j = i + 1; j < value.length; j++) {
          if (jsonEqual(value[i], value[j])) return this.fail(path, "uniqueItems", `items ${i} and ${j} are equal`);
        }
      }
    }
    return ok;
  }

  private object(value: SchemaObject, s: SchemaObject, path: string, depth: number): boolean {
    let ok = true;
    const keys = Object.keys(value);
    if (typeof s.minProperties === "number" && keys.length < s.minProperties) {
      ok = this.fail(path, "minProperties", `${keys.length} properties, fewer than the minimum ${s.minProperties}`);
    }
    if (typeof s.maxProperties === "number" && keys.length > s.maxProperties) {
      ok = this.fail(path, "maxProperties", `${keys.length} properties, more than the maximum ${s.maxProperties}`);
    }
    if (Array.isArray(s.required)) {
      for (const key of s.required) {
        if (typeof key === "string" && !has(value, key)) {
          ok = this.fail(path, "required", `missing the required property ${JSON.stringify(key)}`);
        }
      }
    }
    const properties = isObject(s.properties) ? s.properties : {};
    const patterns = isObject(s.patternProperties) ? Object.entries(s.patternProperties) : [];
    for (const key of keys) {
      const at = pointer(path, key);
      let matched = false;
      if (Object.prototype.hasOwnProperty.call(properties, key)) {
        matched = true;
        ok = this.check(value[key], properties[key], at, depth + 1) && ok;
      }
      for (const [source, sub] of patterns) {
        if (regex(source)?.test(key)) {
          matched = true;
          ok = this.check(value[key], sub, at, depth + 1) && ok;
        }
      }
      if (!matched && s.additionalProperties !== undefined) {
        if (s.additionalProperties === false) {
          ok = this.fail(at, "additionalProperties", `the property ${JSON.stringify(key)} is not allowed`);
        } else {
          ok = this.check(value[key], s.additionalProperties, at, depth + 1) && ok;
        }
      }
      if ("propertyNames" in s && !this.quiet(key, s.propertyNames, at, depth + 1)) {
        ok = this.fail(at, "propertyNames", `the property name ${JSON.stringify(key)} does not match propertyNames`);
      }
    }
    if (isObject(s.dependencies)) {
      for (const [key, dependency] of Object.entries(s.dependencies)) {
        if (!has(value, key)) continue;
        if (Array.isArray(dependency)) {
          for (const needed of dependency) {
            if (typeof needed === "string" && !has(value, needed)) {
              ok = this.fail(path, "dependencies", `${JSON.stringify(key)} requires ${JSON.stringify(needed)}`);
            }
          }
        } else {
          ok = this.check(value, dependency, path, depth + 1) && ok;
        }
      }
    }
    return ok;
  }
}

/**
 * Checks `value` against `schema`; returns the problems found (at most `limit`), empty when the
 * value matches. Never throws: an unresolvable `$ref` is reported as a problem.
 */
export function validate(schema: JsonSchema, value: unknown, limit = 8): SchemaIssue[] {
  const validator = new Validator(schema, Math.max(1, limit));
  validator.check(value, schema, "", 0);
  return validator.issues;
}

/** Whether `value` matches `schema`. */
export function isValid(schema: JsonSchema, value: unknown): boolean {
  return validate(schema, value, 1).length === 0;
}

/** One issue as a sentence: "/items/0: expected integer, got string". */
export function describeIssue(issue: SchemaIssue): string {
  return `${issue.path === "" ? "(root)" : issue.path}: ${issue.message}`;
}
