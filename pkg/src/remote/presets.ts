// Provider presets: priors on which mechanisms are worth probing at all. A prior is a hint, never
// trusted for decoding; only a probe that saw the output parse and validate is.
// "no" means never send it: OpenAI and Azure answer 400 "Unrecognized request argument supplied"
// to guided_json / structured_outputs / grammar, and there is no point spending a probe on it.

import type { Mechanism } from "./mechanism.js";

/** The providers with presets; `generic` knows nothing and probes everything. */
export type Provider = "openai" | "azure" | "vllm" | "llamacpp" | "ollama" | "lmstudio" | "generic";

export const PROVIDERS: readonly Provider[] = ["openai", "azure", "vllm", "llamacpp", "ollama", "lmstudio", "generic"];

/** Expected support: "yes" and "unknown" are probed, "no" is never sent. */
export type Prior = "yes" | "unknown" | "no";

type Priors = Readonly<Record<Exclude<Mechanism, "prompt_only">, Prior>>;

/**
 * What each provider is known to do (measured against real servers):
 * - openai/azure: json_schema with strict; json_object needs the word "json" in a message.
 * - vllm: json_schema; rank 2 in one of its two spellings depending on the version.
 * - llamacpp: json_schema and GBNF enforced; a recent build answers 200 to json_object and
 *   constrains nothing (so it is probed, and the probe decides); guided_* ignored with a 200.
 * - ollama: json_schema (0.5+) and json_object through its OpenAI endpoint; no grammar.
 * - lmstudio: json_schema; json_object is a 400 "'response_format.type' must be 'json_schema'";
 *   GBNF unknown.
 */
export const PRESETS: Readonly<Record<Provider, Priors>> = {
  openai: { json_schema: "yes", structured_outputs: "no", guided_json: "no", gbnf_grammar: "no", json_object: "yes" },
  azure: { json_schema: "yes", structured_outputs: "no", guided_json: "no", gbnf_grammar: "no", json_object: "yes" },
  vllm: { json_schema: "yes", structured_outputs: "unknown", guided_json: "unknown", gbnf_grammar: "no", json_object: "yes" },
  llamacpp: { json_schema: "yes", structured_outputs: "no", guided_json: "no", gbnf_grammar: "yes", json_object: "unknown" },
  ollama: { json_schema: "yes", structured_outputs: "no", guided_json: "no", gbnf_grammar: "no", json_object: "yes" },
  lmstudio: { json_schema: "yes", structured_outputs: "no", guided_json: "no", gbnf_grammar: "unknown", json_object: "no" },
  generic: {
    json_schema: "unknown",
    structured_outputs: "unknown",
    guided_json: "unknown",
    gbnf_grammar: "unknown",
    json_object: "unknown",
  },
};

/** A provider from the endpoint's host when none was named: OpenAI and Azure have fixed hosts. */
export function detectProvider(baseURL: string): Provider {
  let host = "";
  try {
    host = new URL(baseURL).hostname;
  } catch {
    return "generic";
  }
  if (host === "api.openai.com") return "openai";
  if (host.endsWith(".openai.azure.com") || host.endsWith(".services.ai.azure.com")) return "azure";
  return "generic";
}
