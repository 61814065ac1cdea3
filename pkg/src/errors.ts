/** An error from the engine, shaped like an OpenAI API error. */
export class PootError extends Error {
  /** HTTP-style status: 400 for the caller's fault, 500 for the engine's. */
  readonly status: number;
  /** A stable machine-readable code (`no_allowed_token`, `invalid_input`, ...). */
  readonly code: string;
  /** The request field at fault, when known. */
  readonly param: string | null;

  constructor(message: string, options: { status: number; code: string; param?: string | null }) {
    super(message);
    this.name = "PootError";
    this.status = options.status;
    this.code = options.code;
    this.param = options.param ?? null;
  }

  /** The OpenAI error body for this error. */
  toJSON(): { error: { message: string; type: string; param: string | null; code: string } } {
    return {
      error: {
        message: this.message,
        type: this.status === 400 ? "invalid_request_error" : "server_error",
        param: this.param,
        code: this.code,
      },
    };
  }
}

/** Converts whatever the wasm layer threw (an `Error` with `code`/`param`/`status`) into a PootError. */
export function toPootError(thrown: unknown): PootError {
  if (thrown instanceof PootError) return thrown;
  if (thrown instanceof Error) {
    const fields = thrown as Error & { code?: unknown; param?: unknown; status?: unknown };
    return new PootError(thrown.message, {
      status: typeof fields.status === "number" ? fields.status : 500,
      code: typeof fields.code === "string" ? fields.code : "internal_error",
      param: typeof fields.param === "string" ? fields.param : null,
    });
  }
  return new PootError(String(thrown), { status: 500, code: "internal_error" });
}
