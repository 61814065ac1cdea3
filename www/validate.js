// A small JSON Schema checker for the demo's result panel: type, enum, const, properties,
// required, additionalProperties: false, items, minimum/maximum, minLength/maxLength, pattern,
// anyOf/oneOf/allOf. Enough for the examples; keywords it does not know are ignored (and
// listed), never silently taken as passed.
const KNOWN = new Set(["type", "enum", "const", "properties", "required", "additionalProperties", "items",
  "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "pattern",
  "anyOf", "oneOf", "allOf", "minItems", "maxItems", "title", "description", "default", "$schema", "examples", "format"]);

function typeOf(v) {
  if (v === null) return "null";
  if (Array.isArray(v)) return "array";
  if (typeof v === "number") return Number.isInteger(v) ? "integer" : "number";
  return typeof v;
}

/** Returns `{ errors, unknown }`: the violations (with JSON paths) and keywords not checked. */
export function validate(schema, value, path = "$", out = { errors: [], unknown: new Set() }) {
  if (schema === true || schema === undefined) return out;
  if (schema === false) { out.errors.push(`${path}: no value is allowed`); return out; }
  for (const k of Object.keys(schema)) if (!KNOWN.has(k)) out.unknown.add(k);
  const t = typeOf(value);
  if (schema.type !== undefined) {
    const types = [].concat(schema.type);
    const ok = types.some((want) => want === t || (want === "number" && t === "integer"));
    if (!ok) { out.errors.push(`${path}: expected ${types.join(" or ")}, got ${t}`); return out; }
  }
  if (schema.enum && !schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(value))) {
    out.errors.push(`${path}: ${JSON.stringify(value)} is not one of ${JSON.stringify(schema.enum)}`);
  }
  if ("const" in schema && JSON.stringify(schema.const) !== JSON.stringify(value)) {
    out.errors.push(`${path}: must be ${JSON.stringify(schema.const)}`);
  }
  if (t === "integer" || t === "number") {
    if (schema.minimum !== undefined && value < schema.minimum) out.errors.push(`${path}: ${value} < minimum ${schema.minimum}`);
    if (schema.maximum !== undefined && value > schema.maximum) out.errors.push(`${path}: ${value} > maximum ${schema.maximum}`);
    if (schema.exclusiveMinimum !== undefined && value <= schema.exclusiveMinimum) out.errors.push(`${path}: ${value} <= exclusiveMinimum`);
    if (schema.exclusiveMaximum !== undefined && value >= schema.exclusiveMaximum) out.errors.push(`${path}: ${value} >= exclusiveMaximum`);
  }
  if (t === "string") {
    const n = [...value].length;
    if (schema.minLength !== undefined && n < schema.minLength) out.errors.push(`${path}: shorter than ${schema.minLength}`);
    if (schema.maxLength !== undefined && n > schema.maxLength) out.errors.push(`${path}: longer than ${schema.maxLength}`);
    if (schema.pattern !== undefined && !new RegExp(schema.pattern, "u").test(value)) out.errors.push(`${path}: does not match ${schema.pattern}`);
  }
  if (t === "object") {
    const props = schema.properties ?? {};
    for (const r of schema.required ?? []) if (!(r in value)) out.errors.push(`${path}: missing required "${r}"`);
    for (const [k, v] of Object.entries(value)) {
      if (k in props) validate(props[k], v, `${path}.${k}`, out);
      else if (schema.additionalProperties === false) out.errors.push(`${path}: unexpected property "${k}"`);
      else if (typeof schema.additionalProperties === "object") validate(schema.additionalProperties, v, `${path}.${k}`, out);
    }
  }
  if (t === "array") {
    if (schema.minItems !== undefined && value.length < schema.minItems) out.errors.push(`${path}: fewer than ${schema.minItems} items`);
    if (schema.maxItems !== undefined && value.length > schema.maxItems) out.errors.push(`${path}: more than ${schema.maxItems} items`);
    if (schema.items && typeof schema.items === "object") value.forEach((v, i) => validate(schema.items, v, `${path}[${i}]`, out));
  }
  for (const s of schema.allOf ?? []) validate(s, value, path, out);
  for (const key of ["anyOf", "oneOf"]) {
    if (!schema[key]) continue;
    const passing = schema[key].filter((s) => validate(s, value, path).errors.length === 0).length;
    if (key === "anyOf" ? passing === 0 : passing !== 1) out.errors.push(`${path}: ${key} not satisfied`);
  }
  return out;
}
