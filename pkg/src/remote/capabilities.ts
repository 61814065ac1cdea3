// What an endpoint really enforces, found by probing. A 200 proves nothing: vLLM >= 0.12,
// llama.cpp and Ollama answer 200 to fields they ignore, and llama.cpp answers 200 to json_object
// while constraining nothing. So a candidate passes only if its *output* parses and validates,
// for a neutral prompt that does not mention JSON ("Say hello.") and a one-boolean schema whose
// required key no model would write by chance.

import { isDemotion, isInvalidSchemaMessage, isStrictRefusal, RemoteError } from "./classify.js";
import { MECHANISMS, wireFields } from "./mechanism.js";
import type { Mechanism } from "./mechanism.js";
import { PRESETS } from "./presets.js";
import type { Prior, Provider } from "./presets.js";
import { isValid } from "./schema.js";
import type { JsonSchema } from "./schema.js";
import type { Completion } from "./transport.js";

/** How one candidate mechanism fared in a probe. */
export type Verdict =
  | "pass" // output parsed and validated
  | "fail" // the server answered, the output did not parse or validate: the field is ignored
  | "rejected" // a permanent error naming the field: not supported
  | "skipped" // never sent (prior "no", or no GBNF converter)
  | "error" // no conclusive answer (timeout, 5xx, ...)
  | "not_probed"; // the probe stopped before reaching it

export interface CandidateResult {
  mechanism: Mechanism;
  verdict: Verdict;
  /** One sentence: what was seen. */
  detail: string;
}

/** A demotion at request time: the server refused the field after the probe trusted it. */
export interface Demotion {
  mechanism: Mechanism;
  reason: string;
  at: number;
}

/** What an endpoint supports, for one (provider, endpoint, model). */
export interface Capabilities {
  provider: Provider;
  endpoint: string;
  model: string;
  /** True only after a conclusive probe; a prior alone is never trusted for decoding. */
  probed: boolean;
  /** Mechanisms to try at request time, strongest first; always ends with prompt_only. */
  ladder: Mechanism[];
  /** Whether json_schema takes `strict: true` (false after a refusal naming strict). */
  strict: boolean;
  candidates: CandidateResult[];
  demotions: Demotion[];
  probedAt: number | null;
  /** Why ladder[0] is the selected mechanism. */
  why: string;
}

/** The weakest possible backend: prompt-only JSON plus repair. Unreachable endpoints degrade to it. */
export function zeroCapabilities(provider: Provider, endpoint: string, model: string, why: string): Capabilities {
  return {
    provider,
    endpoint,
    model,
    probed: false,
    ladder: ["prompt_only"],
    strict: true,
    candidates: [],
    demotions: [],
    probedAt: null,
    why,
  };
}

/** The probe's schema: one boolean under a key no model writes unprompted. */
export const PROBE_SCHEMA: JsonSchema = {
  type: "object",
  properties: { poot_probe_qx7: { type: "boolean" } },
  required: ["poot_probe_qx7"],
  additionalProperties: false,
};

/** The probe's neutral prompt: it does not mention JSON, so only an enforcing server yields JSON. */
export const PROBE_PROMPT = "Say hello.";
/** OpenAI/Azure refuse json_object unless a message contains "json"; this says it without a schema. */
export const PROBE_JSON_WORD = "Reply with a JSON object.";
export const PROBE_MAX_TOKENS = 32;
/** The whole probe's time limit: a cold local model may load slowly, but a probe must not become the slow path. */
export const PROBE_TIMEOUT_MS = 20_000;

/** The request body of one probe candidate (`grammar` for gbnf_grammar). */
export function probeBody(model: string, mechanism: Mechanism, strict: boolean, grammar?: string): Record<string, unknown> {
  const messages =
    mechanism === "json_object"
      ? [
          { role: "system", content: PROBE_JSON_WORD },
          { role: "user", content: PROBE_PROMPT },
        ]
      : [{ role: "user", content: PROBE_PROMPT }];
  return {
    model,
    messages,
    max_tokens: PROBE_MAX_TOKENS,
    temperature: 0,
    ...wireFields(mechanism, { schema: PROBE_SCHEMA, name: "poot_probe", strict, grammar }),
  };
}

/** Whether a probe's output shows the mechanism enforced (json_object: any object; others: the schema). */
export function probeOutputPasses(mechanism: Mechanism, content: string): { pass: boolean; detail: string } {
  let value: unknown;
  const shown = JSON.stringify(content.length > 60 ? `${content.slice(0, 60)}...` : content);
  try {
    value = JSON.parse(content);
  } catch {
    return { pass: false, detail: `answered 200 but the output does not parse: ${shown}` };
  }
  const ok = mechanism === "json_object" ? typeof value === "object" && value !== null && !Array.isArray(value) : isValid(PROBE_SCHEMA, value);
  return ok
    ? { pass: true, detail: `output parsed and validated: ${shown}` }
    : { pass: false, detail: `answered 200 but the output does not validate: ${shown}` };
}

/** The dependencies of {@link runProbe}. */
export interface ProbeDeps {
  provider: Provider;
  endpoint: string;
  model: string;
  /** Sends one probe request (with retries, bounded by `deadline`). */
  send(body: Record<string, unknown>, mechanism: Mechanism, deadline: number): Promise<Completion>;
  gbnf(schema: JsonSchema): Promise<string>;
  now(): number;
  timeoutMs: number;
}

function candidatesFor(provider: Provider): { mechanism: Mechanism; prior: Prior }[] {
  const priors = PRESETS[provider];
  return MECHANISMS.filter((m): m is Exclude<Mechanism, "prompt_only"> => m !== "prompt_only").map((m) => ({ mechanism: m, prior: priors[m] }));
}

/**
 * Probes every candidate the provider's prior allows, strongest first, within `timeoutMs`. Never
 * throws. The result is `probed` when at least one candidate got a conclusive answer and nothing
 * said the whole endpoint is unusable (unreachable, 401/403/404).
 */
export async function runProbe(deps: ProbeDeps): Promise<Capabilities> {
  const start = deps.now();
  const deadline = start + deps.timeoutMs;
  const caps = zeroCapabilities(deps.provider, deps.endpoint, deps.model, "");
  let conclusive = false;
  let fatal: string | null = null;

  for (const { mechanism, prior } of candidatesFor(deps.provider)) {
    const record = (verdict: Verdict, detail: string) => caps.candidates.push({ mechanism, verdict, detail });
    if (prior === "no") {
      record("skipped", `not sent: the ${deps.provider} preset knows it is unsupported`);
      continue;
    }
    if (fatal !== null) {
      record("not_probed", fatal);
      continue;
    }
    if (deps.now() >= deadline) {
      record("not_probed", `the probe's ${deps.timeoutMs} ms limit was reached first`);
      continue;
    }
    let grammar: string | undefined;
    if (mechanism === "gbnf_grammar") {
      try {
        grammar = await deps.gbnf(PROBE_SCHEMA);
      } catch (error) {
        record("skipped", `no GBNF converter: ${(error as Error).message}`);
        continue;
      }
    }
    let strict = caps.strict;
    for (;;) {
      try {
        const completion = await deps.send(probeBody(deps.model, mechanism, strict, grammar), mechanism, deadline);
        conclusive = true;
        const { pass, detail } = probeOutputPasses(mechanism, completion.content);
        record(pass ? "pass" : "fail", detail);
        if (pass) caps.ladder.splice(caps.ladder.length - 1, 0, mechanism);
      } catch (error) {
        if (!(error instanceof RemoteError)) {
          record("error", (error as Error).message);
        } else if (mechanism === "json_schema" && strict && isStrictRefusal(error)) {
          strict = false; // the server has json_schema but not strict mode: ask again without it
          caps.strict = false;
          continue;
        } else if (isDemotion(error, mechanism) || (error.kind === "permanent" && error.status === 400 && isInvalidSchemaMessage(error.message))) {
          conclusive = true;
          record("rejected", `refused: ${error.message}`);
        } else if (error.kind === "permanent" && [401, 403, 404].includes(error.status)) {
          fatal = `the endpoint refused the probe (${error.message}), so nothing else was tried`;
          record("error", error.message);
        } else if (error.kind === "transient" && error.status === 0) {
          fatal = `the endpoint is unreachable (${error.message})`;
          record("error", error.message);
        } else {
          record("error", `${error.kind}: ${error.message}`);
        }
      }
      break;
    }
  }

  caps.probed = conclusive && fatal === null;
  if (!caps.probed) {
    caps.ladder = ["prompt_only"];
    caps.why = fatal ?? "no probe got a conclusive answer, so the prior is not trusted: prompt-only JSON with repair";
    return caps;
  }
  caps.probedAt = deps.now();
  caps.why = whySelected(caps);
  return caps;
}

/** One sentence: why ladder[0] is the mechanism. */
export function whySelected(caps: Capabilities): string {
  const top = caps.ladder[0] ?? "prompt_only";
  const stronger = caps.candidates.filter((c) => MECHANISMS.indexOf(c.mechanism) < MECHANISMS.indexOf(top) && c.verdict !== "skipped");
  const demoted = caps.demotions.filter((d) => MECHANISMS.indexOf(d.mechanism) < MECHANISMS.indexOf(top));
  const reasons = [
    ...stronger.map((c) => `${c.mechanism} ${c.verdict}`),
    ...demoted.map((d) => `${d.mechanism} demoted at request time (${d.reason})`),
  ];
  if (top === "prompt_only") {
    return reasons.length === 0
      ? "no constrained-decoding mechanism is available: prompt-only JSON with repair"
      : `every stronger mechanism was ruled out (${reasons.join("; ")}): prompt-only JSON with repair`;
  }
  const own = caps.candidates.find((c) => c.mechanism === top);
  return `${top}: probe ${own?.detail ?? "passed"}${reasons.length > 0 ? ` (stronger ones: ${reasons.join("; ")})` : ""}`;
}
