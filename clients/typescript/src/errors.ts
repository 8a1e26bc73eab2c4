// Herald answers every error as {"error": {"code", "message"}}; these classes
// carry that answer so a caller can switch on `code`.
import type { components } from "./generated/openapi.js";

type CodeOf<R> = R extends { content: { "application/json": { error: { code: infer C } } } } ? C : never;

/** Every code Herald's OpenAPI document lists for its error responses. */
export type DocumentedErrorCode = CodeOf<components["responses"][keyof components["responses"]]>;

/**
 * A code a caller can switch on: one Herald documents, or `unexpected_response`
 * for an answer that is not Herald's error body (a proxy's HTML page). A newer
 * Herald may answer a code this version does not list, hence the open string.
 */
export type HeraldErrorCode = DocumentedErrorCode | "unexpected_response" | (string & {});

/** The codes whose message starts with the field or path it is about: `recipients[1].phone: …`. */
const FIELD_CODES: ReadonlySet<string> = new Set(["invalid_field", "duplicate_key", "too_deep", "inexact_number"]);

/** Herald answered with an error status (after any retries the status allowed). */
export class HeraldError extends Error {
  override name = "HeraldError";
  /** The HTTP status of the last answer. */
  readonly status: number;
  readonly code: HeraldErrorCode;
  /**
   * The field or path the error is about (`occurred_at`, `recipients[0].phone`,
   * `Idempotency-Key`, `data.po.number`, `cursor`), for the codes whose message
   * names one. Herald's body has no separate field: it is the message's prefix.
   */
  readonly field: string | undefined;
  /** The answer's `Retry-After`, in milliseconds, when it had one. */
  readonly retryAfterMs: number | undefined;
  /** How many tries were made, this answer's included. */
  readonly attempts: number;

  constructor(init: {
    status: number;
    code: HeraldErrorCode;
    message: string;
    field?: string | undefined;
    retryAfterMs?: number | undefined;
    attempts: number;
  }) {
    super(init.message);
    this.status = init.status;
    this.code = init.code;
    this.field = init.field;
    this.retryAfterMs = init.retryAfterMs;
    this.attempts = init.attempts;
  }

  /** The error for an answer's status and body text. */
  static fromAnswer(status: number, body: string, extra: { retryAfterMs?: number | undefined; attempts: number }) {
    const error = parseErrorBody(body);
    if (!error) {
      const excerpt = body.trim().slice(0, 200);
      return new HeraldError({
        status,
        code: "unexpected_response",
        message: `HTTP ${status} without Herald's error body${excerpt ? `: ${excerpt}` : ""}`,
        ...extra,
      });
    }
    const field = FIELD_CODES.has(error.code) ? fieldOf(error.message) : undefined;
    return new HeraldError({ status, code: error.code, message: error.message, field, ...extra });
  }
}

/** No answer came: the connection failed or was reset, or a try timed out, on every try. */
export class HeraldConnectionError extends Error {
  override name = "HeraldConnectionError";
  readonly attempts: number;

  constructor(message: string, init: { attempts: number; cause: unknown }) {
    super(message, { cause: init.cause });
    this.attempts = init.attempts;
  }
}

function parseErrorBody(body: string): { code: string; message: string } | undefined {
  try {
    const error = (JSON.parse(body) as { error?: unknown }).error as { code?: unknown; message?: unknown } | undefined;
    if (error && typeof error.code === "string" && typeof error.message === "string") {
      return { code: error.code, message: error.message };
    }
  } catch {
    // Not JSON: not Herald's error body.
  }
  return undefined;
}

function fieldOf(message: string): string | undefined {
  const end = message.indexOf(": ");
  return end > 0 ? message.slice(0, end) : undefined;
}
