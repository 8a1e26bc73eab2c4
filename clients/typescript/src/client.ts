import { HeraldConnectionError, HeraldError } from "./errors.js";
import { parseRetryAfter, retryDelay, retryPolicy, type RetryOptions, type RetryPolicy } from "./retry.js";
import type {
  DeadLetterPage,
  DeadLetterSummary,
  DeadLetterSummaryQuery,
  EntityFilter,
  EventAccepted,
  EventDryRun,
  HeraldEvent,
  Instant,
  IntentDetail,
  IntentPage,
  ListDeadLettersQuery,
  ListIntentsQuery,
  ListSuppressionsQuery,
  ReplayResult,
  ReplaySelection,
  ShadowReport,
  ShadowReportQuery,
  SuppressionPage,
  SuppressionRemoved,
} from "./types.js";

export interface HeraldClientOptions {
  /** Where Herald answers, like `http://127.0.0.1:8080` (a path prefix is kept). */
  baseUrl: string | URL;
  /** Sent as `Authorization: Bearer TOKEN`; needed when Herald has `[[auth.tokens]]`. */
  token?: string;
  /** How to try again after a 429, 502, 503, 504 or no answer at all; `false` never retries. */
  retry?: RetryOptions | false;
  /** How long one try may take, in ms, before it counts as no answer (and may be retried). Default 30000; 0: no limit. */
  timeoutMs?: number;
  /** The fetch to use (a test double, an instrumented one). Default: the platform's. */
  fetch?: typeof fetch;
  /** Called before each retry: for a log line or a metric. */
  onRetry?: (retry: RetryInfo) => void;
}

/** Why a call is about to be tried again, and when. */
export interface RetryInfo {
  method: string;
  path: string;
  /** The try that failed (1 for the first). */
  attempt: number;
  delayMs: number;
  /** The status that was answered, or undefined when nothing was. */
  status?: number;
  /** What went wrong when nothing was answered. */
  error?: unknown;
}

export interface CallOptions {
  /** Aborts the call, retries and the waits between them included. */
  signal?: AbortSignal;
}

export interface PostEventOptions extends CallOptions {
  /**
   * The request's identity, when the sender has one of its own (1 to 255
   * visible ASCII characters). Without it the event is its own identity (type,
   * entity and occurred_at), which is what makes a retry safe: never make one up
   * per call.
   */
  idempotencyKey?: string;
  /** A W3C trace context: Herald's spans, and the attempts of the intents, continue this trace. */
  traceparent?: string;
}

/** Herald's answer to a posted event, with how it was answered. */
export type PostEventResult = EventAccepted & {
  /** 202: this request created at least one intent. 200: a replay, or every intent existed already. */
  status: 200 | 202;
  /** The stored answer of an earlier identical request was replayed (the `Idempotent-Replayed: true` header). */
  replayed: boolean;
};

/** Who to read a timeline for: an entity, and optionally one recipient. */
export interface WhyQuery {
  entity: EntityFilter;
  recipient?: string;
}

type Query = Record<string, string | number | boolean | undefined>;

interface Request {
  method: "GET" | "POST" | "DELETE";
  path: string;
  query?: Query;
  body?: unknown;
  headers?: Record<string, string | undefined>;
  signal?: AbortSignal | undefined;
}

interface Answer {
  status: number;
  headers: Headers;
  body: unknown;
}

/** A client for Herald's HTTP API (see docs/api.md). */
export class HeraldClient {
  readonly #base: string;
  readonly #token: string | undefined;
  readonly #retry: RetryPolicy;
  readonly #timeoutMs: number;
  readonly #fetch: typeof fetch;
  readonly #onRetry: ((retry: RetryInfo) => void) | undefined;

  constructor(options: HeraldClientOptions) {
    let base: URL;
    try {
      base = new URL(options.baseUrl);
    } catch {
      throw new TypeError(`baseUrl: ${String(options.baseUrl)} is not a URL, like http://127.0.0.1:8080`);
    }
    if (base.protocol !== "http:" && base.protocol !== "https:") {
      throw new TypeError(`baseUrl: ${base.protocol} is not http: or https:`);
    }
    if (base.search || base.hash) throw new TypeError("baseUrl: may not have a query or a fragment");
    this.#base = base.href.replace(/\/+$/, "");
    this.#token = options.token;
    this.#retry = retryPolicy(options.retry);
    const timeoutMs = options.timeoutMs ?? 30_000;
    if (!Number.isFinite(timeoutMs) || timeoutMs < 0) {
      throw new TypeError(`timeoutMs: ${timeoutMs} must be a number of milliseconds, 0 or more`);
    }
    this.#timeoutMs = timeoutMs;
    this.#fetch = options.fetch ?? globalThis.fetch;
    this.#onRetry = options.onRetry;
  }

  /**
   * `POST /v1/events`. Retried like every call: Herald derives the
   * notification's identity from the event (and the Idempotency-Key if given),
   * so a retry whose first try did arrive is answered as a replay, never a second
   * notification.
   */
  async postEvent(event: HeraldEvent, options: PostEventOptions = {}): Promise<PostEventResult> {
    const answer = await this.#call({
      method: "POST",
      path: "/v1/events",
      body: event,
      headers: { "idempotency-key": options.idempotencyKey, traceparent: options.traceparent },
      signal: options.signal,
    });
    const replayed = answer.headers.get("idempotent-replayed")?.trim().toLowerCase() === "true";
    return { ...(answer.body as EventAccepted), status: answer.status === 202 ? 202 : 200, replayed };
  }

  /** `POST /v1/events?dry_run=true`: what a real post would record; nothing is written. */
  async dryRunEvent(event: HeraldEvent, options: PostEventOptions = {}): Promise<EventDryRun> {
    const answer = await this.#call({
      method: "POST",
      path: "/v1/events",
      query: { dry_run: true },
      body: event,
      headers: { "idempotency-key": options.idempotencyKey, traceparent: options.traceparent },
      signal: options.signal,
    });
    return answer.body as EventDryRun;
  }

  /**
   * `GET /v1/intents/{id}`: one intent and its whole timeline — the decision and
   * its reason, every attempt, the provider's receipts, each replay from the dead
   * letters, and in shadow what would have been sent.
   */
  async getIntent(id: string, options: CallOptions = {}): Promise<IntentDetail> {
    return (await this.#get(`/v1/intents/${encodeURIComponent(id)}`, {}, options)) as IntentDetail;
  }

  /** `GET /v1/intents`: one page, newest first; pass `next` back as `cursor` for the next. */
  async listIntents(query: ListIntentsQuery = {}, options: CallOptions = {}): Promise<IntentPage> {
    const { entity, ...rest } = query;
    return (await this.#get("/v1/intents", { ...rest, entity: entityParam(entity) }, options)) as IntentPage;
  }

  /**
   * Why was (or wasn't) someone told? Every intent of an entity (for one
   * recipient, or all), oldest first, each with its attempts, receipts and
   * replays: what `herald why` prints. Herald has no timeline endpoint of its
   * own; this reads every page of `GET /v1/intents?entity=&recipient=` and then
   * `GET /v1/intents/{id}` for each, as the CLI does.
   */
  async why(query: WhyQuery, options: CallOptions = {}): Promise<IntentDetail[]> {
    const ids: string[] = [];
    let cursor: string | undefined;
    do {
      const page = await this.listIntents(
        { entity: query.entity, recipient: query.recipient, limit: 500, cursor },
        options,
      );
      ids.push(...page.intents.map((intent) => intent.id));
      cursor = page.next ?? undefined;
    } while (cursor);
    const timeline: IntentDetail[] = [];
    for (const id of ids.reverse()) timeline.push(await this.getIntent(id, options));
    return timeline;
  }

  /** `GET /v1/dead-letters`: one page, newest first. */
  async listDeadLetters(query: ListDeadLettersQuery = {}, options: CallOptions = {}): Promise<DeadLetterPage> {
    const { since, tenant, allTenants, ...rest } = query;
    const params = { ...rest, since: instant(since), tenant, all_tenants: allTenants };
    return (await this.#get("/v1/dead-letters", params, options)) as DeadLetterPage;
  }

  /** `GET /v1/dead-letters/summary`: how many, by reason. */
  async deadLetterSummary(query: DeadLetterSummaryQuery = {}, options: CallOptions = {}): Promise<DeadLetterSummary> {
    const { since, tenant, allTenants } = query;
    const params = { since: instant(since), tenant, all_tenants: allTenants };
    return (await this.#get("/v1/dead-letters/summary", params, options)) as DeadLetterSummary;
  }

  /**
   * `POST /v1/dead-letters/replay`: the same intents back on the queue (same
   * key, same frozen content). Safe to retry: a second try finds them no longer
   * dead and reports them skipped as `not_dead`.
   */
  async replayDeadLetters(selection: ReplaySelection, options: CallOptions = {}): Promise<ReplayResult> {
    const body = "ids" in selection ? { ids: selection.ids } : { reason: selection.reason, since: instant(selection.since) };
    const answer = await this.#call({ method: "POST", path: "/v1/dead-letters/replay", body, signal: options.signal });
    return answer.body as ReplayResult;
  }

  /** `GET /v1/suppressions`: the tenant's suppression list, newest first. */
  async listSuppressions(query: ListSuppressionsQuery = {}, options: CallOptions = {}): Promise<SuppressionPage> {
    return (await this.#get("/v1/suppressions", { ...query }, options)) as SuppressionPage;
  }

  /**
   * `DELETE /v1/suppressions/{id}`: the next intent to that address goes through.
   * A retried removal whose first try did arrive is answered `not_found`.
   */
  async removeSuppression(id: string, options: CallOptions = {}): Promise<SuppressionRemoved> {
    const path = `/v1/suppressions/${encodeURIComponent(id)}`;
    const answer = await this.#call({ method: "DELETE", path, signal: options.signal });
    return answer.body as SuppressionRemoved;
  }

  /** `GET /v1/shadow/report`: what arrived over a range and what Herald did, or would have done, with it. */
  async shadowReport(query: ShadowReportQuery = {}, options: CallOptions = {}): Promise<ShadowReport> {
    const { since, until, tenant, allTenants } = query;
    const params = { since: instant(since), until: instant(until), tenant, all_tenants: allTenants };
    return (await this.#get("/v1/shadow/report", params, options)) as ShadowReport;
  }

  async #get(path: string, query: Query, options: CallOptions): Promise<unknown> {
    return (await this.#call({ method: "GET", path, query, signal: options.signal })).body;
  }

  /** One call: tried until it is answered with a final status, or the policy says stop. */
  async #call(request: Request): Promise<Answer> {
    const url = this.#url(request.path, request.query);
    const headers: Record<string, string> = { accept: "application/json" };
    if (this.#token !== undefined) headers.authorization = `Bearer ${this.#token}`;
    if (request.body !== undefined) headers["content-type"] = "application/json";
    for (const [name, value] of Object.entries(request.headers ?? {})) {
      if (value !== undefined) headers[name] = value;
    }
    const body = request.body === undefined ? undefined : JSON.stringify(request.body);
    const { signal } = request;

    for (let attempt = 1; ; attempt++) {
      const last = attempt >= this.#retry.attempts;
      let answered: { status: number; headers: Headers; text: string };
      try {
        answered = await this.#try(url, { method: request.method, headers, body }, signal);
      } catch (error) {
        if (signal?.aborted) throw signal.reason;
        if (last) {
          const tries = attempt === 1 ? "" : ` (${attempt} tries)`;
          throw new HeraldConnectionError(`${request.method} ${request.path}: no answer from Herald${tries}: ${describe(error)}`, {
            attempts: attempt,
            cause: error,
          });
        }
        const delayMs = retryDelay(attempt, this.#retry);
        this.#onRetry?.({ method: request.method, path: request.path, attempt, delayMs, error });
        await sleep(delayMs, signal);
        continue;
      }

      const { status, text } = answered;
      if (status >= 200 && status < 300) {
        try {
          return { status, headers: answered.headers, body: text === "" ? undefined : JSON.parse(text) };
        } catch {
          throw HeraldError.fromAnswer(status, text, { attempts: attempt });
        }
      }
      const retryAfterMs = parseRetryAfter(answered.headers.get("retry-after"));
      const retryable =
        this.#retry.statuses.includes(status) && (retryAfterMs ?? 0) <= this.#retry.maxRetryAfterMs;
      if (!retryable || last) throw HeraldError.fromAnswer(status, text, { retryAfterMs, attempts: attempt });
      const delayMs = retryDelay(attempt, this.#retry, retryAfterMs);
      this.#onRetry?.({ method: request.method, path: request.path, attempt, delayMs, status });
      await sleep(delayMs, signal);
    }
  }

  /** One try, its body read whole: a connection lost halfway is no answer. */
  async #try(url: string, init: RequestInit, signal: AbortSignal | undefined) {
    const controller = new AbortController();
    const onAbort = () => controller.abort(signal?.reason);
    signal?.addEventListener("abort", onAbort, { once: true });
    const timer =
      this.#timeoutMs > 0
        ? setTimeout(
            () => controller.abort(new Error(`no answer within ${this.#timeoutMs} ms (timeoutMs)`)),
            this.#timeoutMs,
          )
        : undefined;
    try {
      if (signal?.aborted) throw signal.reason;
      const response = await this.#fetch(url, { ...init, signal: controller.signal });
      return { status: response.status, headers: response.headers, text: await response.text() };
    } catch (error) {
      // An abort of our own (the timeout) rejects with the abort's reason.
      throw controller.signal.aborted && !signal?.aborted ? controller.signal.reason : error;
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
    }
  }

  #url(path: string, query: Query = {}): string {
    const params = new URLSearchParams();
    for (const [name, value] of Object.entries(query)) {
      if (value !== undefined) params.append(name, String(value));
    }
    const search = params.toString();
    return `${this.#base}${path}${search ? `?${search}` : ""}`;
  }
}

function entityParam(entity: EntityFilter | undefined): string | undefined {
  if (entity === undefined || typeof entity === "string") return entity;
  return `${entity.type}:${entity.id}`;
}

function instant(value: Instant | undefined): string | undefined {
  return value instanceof Date ? value.toISOString() : value;
}

function describe(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  // Node's fetch says "fetch failed" and keeps what happened in `cause`.
  const cause = error.cause instanceof Error ? `: ${(error.cause as Error & { code?: string }).code ?? error.cause.message}` : "";
  return `${error.message}${cause}`;
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const done = () => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    };
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
