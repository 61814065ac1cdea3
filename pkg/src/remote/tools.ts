// Tool calls: one per turn (the transport truncates to the first), and tool calls that a model
// wrote as text instead of in `tool_calls`, in the formats chat templates teach:
//   <tool_call>{"name": ..., "arguments": {...}}</tool_call>     Hermes, Qwen
//   [TOOL_CALLS][{"name": ..., "arguments": {...}}]               Mistral (also [TOOL_CALLS]name[ARGS]{...})
//   <|python_tag|>{"name": ..., "parameters": {...}}              Llama 3.1
//   {"name": ..., "arguments": {...}}                             a bare object naming a declared tool

import { repair } from "./repair.js";

/** An OpenAI-shaped tool call (`function.arguments` is a JSON string, as on the wire). */
export interface ToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}

/** What {@link parseTextToolCalls} found: the calls and the text around them. */
export interface TextToolCalls {
  toolCalls: ToolCall[];
  /** The content with the tool-call markup removed (trimmed); empty when it was all markup. */
  content: string;
}

let counter = 0;
function callId(): string {
  counter = (counter + 1) % 1_000_000;
  return `call_text_${Date.now().toString(36)}${counter.toString(36)}`;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Parses JSON leniently (through the repair ladder, no schema); undefined when hopeless. */
function lenient(text: string): unknown {
  try {
    return repair(text).value;
  } catch {
    return undefined;
  }
}

/** A call from `{name, arguments | parameters}`; arguments may be an object or a JSON string. */
function toCall(value: unknown): ToolCall | null {
  if (!isObject(value)) return null;
  const fn = isObject(value.function) ? value.function : value;
  const name = fn.name;
  if (typeof name !== "string" || name === "") return null;
  const args = fn.arguments ?? fn.parameters ?? {};
  const text = typeof args === "string" ? args : JSON.stringify(args);
  return { id: typeof value.id === "string" ? value.id : callId(), type: "function", function: { name, arguments: text } };
}

function callsFrom(value: unknown): ToolCall[] {
  const items = Array.isArray(value) ? value : [value];
  return items.map(toCall).filter((c): c is ToolCall => c !== null);
}

/**
 * Finds tool calls written as text. `toolNames`, when given, is the set of declared tools: a bare
 * `{"name", "arguments"}` object only counts when it names one of them (otherwise it may simply be
 * the answer), and calls to undeclared tools are dropped.
 */
export function parseTextToolCalls(content: string, toolNames?: readonly string[]): TextToolCalls {
  const declared = (call: ToolCall) => toolNames === undefined || toolNames.includes(call.function.name);
  const found: ToolCall[] = [];
  let rest = content;

  // <tool_call> ... </tool_call> (the closing tag may be cut off by max_tokens or a stop string).
  const tagged = /<tool_call>([\s\S]*?)(?:<\/tool_call>|$)/g;
  if (rest.includes("<tool_call>")) {
    for (const m of rest.matchAll(tagged)) found.push(...callsFrom(lenient(m[1]!)));
    rest = rest.replace(tagged, "");
  }

  // [TOOL_CALLS] followed by a JSON list, or by name[ARGS]{...} (newer Mistral templates).
  const mistral = rest.indexOf("[TOOL_CALLS]");
  if (mistral >= 0) {
    const after = rest.slice(mistral + "[TOOL_CALLS]".length);
    const named = /^\s*([A-Za-z0-9_.-]+)\[ARGS\]([\s\S]*)$/.exec(after);
    if (named) {
      for (const part of after.split("[TOOL_CALLS]")) {
        const m = /^\s*([A-Za-z0-9_.-]+)\[ARGS\]([\s\S]*)$/.exec(part);
        if (m) found.push(...callsFrom({ name: m[1], arguments: lenient(m[2]!) ?? {} }));
      }
    } else {
      found.push(...callsFrom(lenient(after)));
    }
    rest = rest.slice(0, mistral);
  }

  // <|python_tag|>{...} (several may be separated by ";").
  const python = rest.indexOf("<|python_tag|>");
  if (python >= 0) {
    const after = rest.slice(python + "<|python_tag|>".length).replace(/<\|eo[mt]_id\|>\s*$/, "");
    const whole = lenient(after);
    if (whole !== undefined) found.push(...callsFrom(whole));
    else for (const part of after.split(/;\s*(?=\{)/)) found.push(...callsFrom(lenient(part)));
    rest = rest.slice(0, python);
  }

  // A bare object (or list of objects) that is nothing but a call.
  if (found.length === 0) {
    const trimmed = rest.trim();
    if (/^[[{]/.test(trimmed) || trimmed.startsWith("```")) {
      const value = lenient(trimmed);
      const items = Array.isArray(value) ? value : [value];
      const calls = items.every(
        (v) => isObject(v) && typeof v.name === "string" && ("arguments" in v || "parameters" in v) && Object.keys(v).length <= 3,
      )
        ? callsFrom(value)
        : [];
      if (calls.length > 0 && (toolNames === undefined ? true : calls.every(declared))) {
        found.push(...calls);
        rest = "";
      }
    }
  }

  return { toolCalls: found.filter(declared), content: rest.trim() };
}

/** One tool call per turn: keeps the first call, drops the rest. */
export function firstToolCall(calls: readonly ToolCall[] | undefined): ToolCall[] {
  return calls && calls.length > 0 ? [calls[0]!] : [];
}
