export { HeraldClient } from "./client.js";
export type { CallOptions, HeraldClientOptions, PostEventOptions, PostEventResult, RetryInfo, WhyQuery } from "./client.js";
export { HeraldConnectionError, HeraldError } from "./errors.js";
export type { DocumentedErrorCode, HeraldErrorCode } from "./errors.js";
export { DEFAULT_RETRY, parseRetryAfter, retryDelay, retryPolicy } from "./retry.js";
export type { RetryOptions, RetryPolicy } from "./retry.js";
export type * from "./types.js";
export type { components, operations, paths } from "./generated/openapi.js";
