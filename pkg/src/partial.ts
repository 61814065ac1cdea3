// Partial JSON: what a prefix of a JSON text stands for so far, for streams that show a value
// while it is written. Containers are closed where the text stops; a string cut short is kept
// as far as it goes (it only grows); a number or literal cut short, a key without its value, or
// an escape cut in the middle, is left out until it is whole. Every field it returns that is
// not the last one written is final.

/** The value of a JSON prefix, and whether the text stopped inside it. */
interface Read {
  value: unknown;
  partial: boolean;
}

/** Nothing readable yet (the text stopped before or inside a scalar). */
const NOTHING: Read = { value: undefined, partial: true };

class Cut extends Error {}

/** Containers nested deeper than this are a SyntaxError (not a stack overflow on hostile text). */
export const MAX_PARTIAL_DEPTH = 512;

// Sticky: matched at `lastIndex` without copying the rest of the text (a slice per scalar made
// one parse quadratic in the number of scalars).
const SCALAR_TOKEN = /[-+0-9.eE]+|[a-z]+/y;

/**
 * The value `text` (a prefix of a JSON text) stands for so far; `undefined` when nothing is
 * known yet. Throws a SyntaxError when the text cannot be the start of a JSON value, or nests
 * containers deeper than {@link MAX_PARTIAL_DEPTH}.
 */
export function parsePartialJson(text: string): unknown {
  let i = 0;
  let depth = 0;
  const ws = () => {
    while (i < text.length && " \t\n\r".includes(text[i]!)) i++;
  };
  const bad = (): never => {
    throw new SyntaxError(`not the start of a JSON value at offset ${i}: ${JSON.stringify(text.slice(i, i + 20))}`);
  };
  const string = (): Read => {
    i++; // the opening quote
    let out = "";
    while (i < text.length) {
      const c = text[i]!;
      if (c === '"') {
        i++;
        return { value: out, partial: false };
      }
      if (c === "\\") {
        const esc = text.slice(i, text[i + 1] === "u" ? i + 6 : i + 2);
        if (esc.length < (text[i + 1] === "u" ? 6 : 2)) return { value: out, partial: true };
        try {
          out += JSON.parse(`"${esc}"`) as string;
        } catch {
          bad();
        }
        i += esc.length;
        continue;
      }
      out += c;
      i++;
    }
    return { value: out, partial: true };
  };
  const scalar = (): Read => {
    // The token runs to the first character no number or literal has.
    SCALAR_TOKEN.lastIndex = i;
    const token = SCALAR_TOKEN.exec(text)?.[0] ?? bad();
    const whole = /^(?:-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null)$/.test(token);
    if (i + token.length === text.length) {
      // At the end: a literal is whole, a number may go on; a prefix of either is nothing yet.
      if (whole && /[a-z]$/.test(token)) {
        i += token.length;
        return { value: JSON.parse(token), partial: false };
      }
      if (whole || /^(?:-|-?(?:0|[1-9]\d*)(?:\.\d*)?(?:[eE][+-]?\d*)?|t(?:r(?:u)?)?|f(?:a(?:l(?:s)?)?)?|n(?:u(?:l)?)?)$/.test(token)) throw new Cut();
      return bad();
    }
    if (!whole) bad();
    i += token.length;
    return { value: JSON.parse(token), partial: false };
  };
  const value = (): Read => {
    ws();
    if (i >= text.length) return NOTHING;
    const c = text[i]!;
    if ((c === "{" || c === "[") && ++depth > MAX_PARTIAL_DEPTH) {
      throw new SyntaxError(`containers nest deeper than ${MAX_PARTIAL_DEPTH} at offset ${i}`);
    }
    if (c === "{") {
      i++;
      const obj: Record<string, unknown> = {};
      for (let first = true; ; first = false) {
        ws();
        if (i >= text.length) return { value: obj, partial: true };
        if (text[i] === "}") {
          i++;
          depth--; // closed: its siblings start at its depth again
          return { value: obj, partial: false };
        }
        if (!first) {
          if (text[i] !== ",") bad();
          i++;
          ws();
          if (i >= text.length) return { value: obj, partial: true };
        }
        if (text[i] !== '"') bad();
        const key = string();
        if (key.partial) return { value: obj, partial: true };
        ws();
        if (i >= text.length) return { value: obj, partial: true };
        if (text[i] !== ":") bad();
        i++;
        const v = item();
        if (v.value !== undefined) obj[key.value as string] = v.value;
        if (v.partial) return { value: obj, partial: true };
      }
    }
    if (c === "[") {
      i++;
      const arr: unknown[] = [];
      for (let first = true; ; first = false) {
        ws();
        if (i >= text.length) return { value: arr, partial: true };
        if (text[i] === "]") {
          i++;
          depth--; // closed: its siblings start at its depth again
          return { value: arr, partial: false };
        }
        if (!first) {
          if (text[i] !== ",") bad();
          i++;
        }
        const v = item();
        if (v.value !== undefined) arr.push(v.value);
        if (v.partial) return { value: arr, partial: true };
      }
    }
    if (c === '"') return string();
    return scalar();
  };
  /** A value inside a container: a scalar cut short is nothing yet. */
  const item = (): Read => {
    try {
      return value();
    } catch (e) {
      if (e instanceof Cut) return NOTHING;
      throw e;
    }
  };
  const top = item();
  ws();
  if (!top.partial && i < text.length) bad();
  return top.value;
}
