import { PootError } from "./errors.js";
import type { Limits } from "./types.js";

/** The `limits` option as the wasm module reads it (JSON text); its checks are the module's. */
export function limitsText(limits: Limits | undefined): string | undefined {
  if (limits === undefined) return undefined;
  if (typeof limits !== "object" || limits === null || Array.isArray(limits)) {
    throw new PootError(`limits must be an object of limit names and numbers, got ${JSON.stringify(limits)}`, {
      status: 400,
      code: "invalid_input",
      param: "limits",
    });
  }
  return JSON.stringify(limits);
}
