// The retry policy's pure parts: the delay windows, Retry-After as a floor,
// and the options a caller may give.
import assert from "node:assert/strict";
import { test } from "node:test";
import { DEFAULT_RETRY, parseRetryAfter, retryDelay, retryPolicy } from "../dist/index.js";

const policy = retryPolicy({ baseMs: 100, maxMs: 1_000 });

test("each retry's window doubles from baseMs up to maxMs, and the delay is drawn from all of it", () => {
  const windows = [1, 2, 3, 4, 5, 6].map((n) => retryDelay(n, policy, undefined, () => 1));
  assert.deepEqual(windows, [100, 200, 400, 800, 1_000, 1_000]);
  for (const n of [1, 2, 3, 4, 5, 6]) assert.equal(retryDelay(n, policy, undefined, () => 0), 0);
  assert.equal(retryDelay(3, policy, undefined, () => 0.5), 200);
});

test("a Retry-After is a floor under the jittered delay, even above maxMs", () => {
  assert.equal(retryDelay(1, policy, 5_000, () => 1), 5_000);
  assert.equal(retryDelay(4, policy, 50, () => 1), 800);
  assert.equal(retryDelay(4, policy, 50, () => 0), 50);
});

test("Retry-After is read as delay-seconds or as an HTTP date", () => {
  const now = Date.parse("2026-11-29T10:15:00Z");
  assert.equal(parseRetryAfter("3", now), 3_000);
  assert.equal(parseRetryAfter(" 0 ", now), 0);
  assert.equal(parseRetryAfter("Sun, 29 Nov 2026 10:15:07 GMT", now), 7_000);
  assert.equal(parseRetryAfter("Sun, 29 Nov 2026 10:14:00 GMT", now), 0, "a date in the past: no wait");
  assert.equal(parseRetryAfter("soon", now), undefined);
  assert.equal(parseRetryAfter("1.5", now), undefined, "delay-seconds is a whole number");
  assert.equal(parseRetryAfter(null, now), undefined);
});

test("the options are checked, each error naming its option", () => {
  assert.equal(retryPolicy(undefined).attempts, DEFAULT_RETRY.attempts);
  assert.equal(retryPolicy(false).attempts, 1);
  assert.deepEqual(retryPolicy({ statuses: [503] }).statuses, [503]);
  assert.throws(() => retryPolicy({ attempts: 0 }), /^TypeError: retry\.attempts: 0 must be a whole number/);
  assert.throws(() => retryPolicy({ attempts: 2.5 }), /retry\.attempts/);
  assert.throws(() => retryPolicy({ baseMs: -1 }), /retry\.baseMs: -1/);
  assert.throws(() => retryPolicy({ baseMs: 500, maxMs: 100 }), /retry\.maxMs: 100 is shorter than retry\.baseMs 500/);
  assert.throws(() => retryPolicy({ statuses: [200] }), /retry\.statuses: 200 is not an error status/);
});
