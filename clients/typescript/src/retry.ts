// When to try again, as pure functions: the client's loop asks them, and the
// unit tests pin them without a server or a clock.

export interface RetryOptions {
  /** Tries in all, the first included: 4 is the first and 3 retries; 1 never retries. Default 4. */
  attempts?: number;
  /** The window of the first retry's delay, in ms; each retry doubles it. Default 250. */
  baseMs?: number;
  /** The largest window, in ms. Default 5000. */
  maxMs?: number;
  /**
   * The longest `Retry-After` the client waits, in ms. An answer asking for
   * longer is not retried: its error is thrown with `retryAfterMs` on it, for the
   * caller to schedule. Default 30000.
   */
  maxRetryAfterMs?: number;
  /** The statuses tried again. Default 429, 502, 503 and 504. */
  statuses?: readonly number[];
}

export type RetryPolicy = Required<RetryOptions>;

export const DEFAULT_RETRY: RetryPolicy = Object.freeze({
  attempts: 4,
  baseMs: 250,
  maxMs: 5_000,
  maxRetryAfterMs: 30_000,
  statuses: Object.freeze([429, 502, 503, 504]),
});

/** The options over the defaults, each checked; `false` never retries. */
export function retryPolicy(options: RetryOptions | false | undefined): RetryPolicy {
  if (options === false) return { ...DEFAULT_RETRY, attempts: 1 };
  const policy = { ...DEFAULT_RETRY, ...options };
  if (!Number.isInteger(policy.attempts) || policy.attempts < 1 || policy.attempts > 100) {
    throw new TypeError(`retry.attempts: ${policy.attempts} must be a whole number from 1 to 100`);
  }
  for (const key of ["baseMs", "maxMs", "maxRetryAfterMs"] as const) {
    if (!Number.isFinite(policy[key]) || policy[key] < 0) {
      throw new TypeError(`retry.${key}: ${policy[key]} must be a number of milliseconds, 0 or more`);
    }
  }
  if (policy.maxMs < policy.baseMs) {
    throw new TypeError(`retry.maxMs: ${policy.maxMs} is shorter than retry.baseMs ${policy.baseMs}`);
  }
  for (const status of policy.statuses) {
    if (!Number.isInteger(status) || status < 400 || status > 599) {
      throw new TypeError(`retry.statuses: ${status} is not an error status (400 to 599)`);
    }
  }
  return policy;
}

/**
 * The delay before retry `n` (1 for the first retry): full jitter, uniform in
 * 0 … min(maxMs, baseMs·2^(n−1)), so clients failing together do not retry
 * together; a `Retry-After` is a floor under it.
 */
export function retryDelay(n: number, policy: RetryPolicy, retryAfterMs?: number, random = Math.random): number {
  const window = Math.min(policy.maxMs, policy.baseMs * 2 ** (n - 1));
  return Math.max(random() * window, retryAfterMs ?? 0);
}

/** The HTTP date every server sends (RFC 9110's IMF-fixdate): `Wed, 21 Oct 2026 07:28:00 GMT`. */
const IMF_FIXDATE = /^[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT$/;

/**
 * A `Retry-After` value in ms: delay-seconds (`120`) or an HTTP date (0 when
 * it is past). Anything else is undefined: `Date.parse` alone would read `1.5`
 * as a day in 2001.
 */
export function parseRetryAfter(value: string | null | undefined, now = Date.now()): number | undefined {
  if (value == null) return undefined;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  if (!IMF_FIXDATE.test(text)) return undefined;
  const at = Date.parse(text);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}
