// The client against a live Herald: `herald serve` (HERALD_BIN, else the
// repository's build) on a fresh SQLite database, an SMS provider and a proxy
// of the test's own in front of it. Every wait is a poll with a deadline.
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { createServer } from "node:net";
import { after, before, describe, test } from "node:test";
import { HeraldClient, HeraldConnectionError, HeraldError } from "../dist/index.js";
import { startHerald, waitFor } from "../scripts/herald.mjs";
import { fakeSmsProvider, proxy, standardWebhookHeaders } from "./support/fakes.mjs";

const TOKEN = randomBytes(24).toString("hex");
const REHEARSAL_TOKEN = randomBytes(24).toString("hex");
const RECEIPT_SECRET = `whsec_${randomBytes(32).toString("base64")}`;
const sha256 = (text) => createHash("sha256").update(text).digest("hex");

let herald;
let sms;
let client;

before(async () => {
  sms = await fakeSmsProvider();
  herald = await startHerald({
    config: `
[worker]
poll_interval = "50ms"

[[routes]]
event = "purchase_order.approved"
template = "po_approved"
channels = ["sms"]

# Observed only: planned and rendered, never sent (docs/shadow-mode.md).
[[routes]]
event = "purchase_order.approved.rehearsal"
template = "po_approved"
channels = ["sms"]
mode = "shadow"

[channels.sms]
url = "${sms.url}"
timeout = "5s"

[receipts.generic]
secret = "${RECEIPT_SECRET}"

[[auth.tokens]]
name = "ts-client"
tenant = "default"
token_sha256 = "${sha256(TOKEN)}"
scopes = ["events:write", "intents:read", "recipients:write", "ops"]

[[auth.tokens]]
name = "ts-rehearsal"
tenant = "rehearsal"
token_sha256 = "${sha256(REHEARSAL_TOKEN)}"
scopes = ["events:write", "intents:read", "ops"]
`,
  });
  client = new HeraldClient({ baseUrl: herald.baseUrl, token: TOKEN });
});

after(async () => {
  await herald?.stop();
  await sms?.close();
});

let serial = 0;
/** A new event: its own entity, so its own identity. */
function newEvent({ type = "purchase_order.approved", phone = "+9779800000001", recipient = "u-20" } = {}) {
  serial += 1;
  const number = `PO-${4400 + serial}`;
  return {
    type,
    entity: { type: "purchase_order", id: number, version: 1 },
    occurred_at: "2026-11-29T10:15:00+05:45",
    data: { po: { number, total: "1,20,000" }, approver: { name: "Asha" } },
    recipients: [{ id: recipient, phone }],
  };
}

async function intentReaching(state, id, c = client) {
  return waitFor(
    async () => {
      const intent = await c.getIntent(id);
      return intent.state === state && intent;
    },
    { within: 15_000, what: `intent ${id} to be ${state}` },
  );
}

/** The error a call throws, checked to be Herald's. */
async function heraldError(call) {
  const error = await call().then(
    (answer) => assert.fail(`expected an error, got ${JSON.stringify(answer)}`),
    (e) => e,
  );
  assert.ok(error instanceof HeraldError, `expected a HeraldError, got ${error}`);
  return error;
}

describe("events", () => {
  test("a new event is accepted (202) and sent; its exact repeat is a replay, marked so", async () => {
    const event = newEvent();
    const first = await client.postEvent(event);
    assert.equal(first.status, 202);
    assert.equal(first.replayed, false);
    assert.equal(first.intents.length, 1);
    const [summary] = first.intents;
    assert.equal(summary.channel, "sms");
    assert.equal(summary.created, true);

    const again = await client.postEvent(event);
    assert.equal(again.status, 200);
    assert.equal(again.replayed, true);
    assert.equal(again.event_key, first.event_key);
    assert.deepEqual(
      again.intents.map((i) => i.id),
      [summary.id],
    );

    const sent = await intentReaching("sent", summary.id);
    assert.equal(sent.attempts.length, 1);
    assert.equal(sent.attempts[0].outcome, "accepted");
    const delivered = sms.received.filter((m) => m.key === sent.key);
    assert.equal(delivered.length, 1, "one message for one event, however often it was posted");
    assert.match(delivered[0].body, new RegExp(`${event.entity.id} approved by Asha`));
  });

  test("with an Idempotency-Key: the same body is a replay, another body is 422 idempotency_key_mismatch", async () => {
    const event = newEvent();
    const idempotencyKey = `erp-approval-${event.entity.id}`;
    assert.equal((await client.postEvent(event, { idempotencyKey })).status, 202);
    const replay = await client.postEvent(event, { idempotencyKey });
    assert.equal(replay.status, 200);
    assert.equal(replay.replayed, true);

    const other = { ...newEvent(), recipients: event.recipients };
    const error = await heraldError(() => client.postEvent(other, { idempotencyKey }));
    assert.equal(error.status, 422);
    assert.equal(error.code, "idempotency_key_mismatch");
    assert.equal(error.field, undefined);
    assert.equal(error.attempts, 1);
  });

  test("the same event with other data is 409 event_conflict", async () => {
    const event = newEvent();
    await client.postEvent(event);
    const changed = { ...event, data: { ...event.data, approver: { name: "Bikash" } } };
    const error = await heraldError(() => client.postEvent(changed));
    assert.equal(error.status, 409);
    assert.equal(error.code, "event_conflict");
    assert.match(error.message, /needs its own occurred_at/);
  });

  test("an invalid field is 400 invalid_field naming the field", async () => {
    const badPhone = await heraldError(() => client.postEvent(newEvent({ phone: "12" })));
    assert.equal(badPhone.status, 400);
    assert.equal(badPhone.code, "invalid_field");
    assert.equal(badPhone.field, "recipients[0].phone");
    assert.match(badPhone.message, /^recipients\[0\]\.phone: "12" must be in E\.164 form/);

    const { occurred_at, ...undated } = newEvent();
    const missing = await heraldError(() => client.postEvent(undated));
    assert.equal(missing.field, "occurred_at");

    const badKey = await heraldError(() => client.postEvent(newEvent(), { idempotencyKey: "has spaces" }));
    assert.equal(badKey.code, "invalid_field");
    assert.equal(badKey.field, "Idempotency-Key");

    const badLimit = await heraldError(() => client.listIntents({ limit: 0 }));
    assert.equal(badLimit.field, "limit");
  });

  test("an event type without a route is 422 unknown_event_type; a dry run writes nothing", async () => {
    const unknown = await heraldError(() => client.postEvent(newEvent({ type: "invoice.paid" })));
    assert.equal(unknown.status, 422);
    assert.equal(unknown.code, "unknown_event_type");

    const event = newEvent();
    const dry = await client.dryRunEvent(event);
    assert.equal(dry.dry_run, true);
    assert.deepEqual(dry.not_checked, ["suppression_list"]);
    assert.equal(dry.intents[0].exists, false);
    const page = await client.listIntents({ entity: event.entity });
    assert.deepEqual(page.intents, [], "a dry run records no intent");
  });

  test("without its token a call is 401 unauthorized, and an unknown intent is 404 not_found", async () => {
    const anonymous = new HeraldClient({ baseUrl: herald.baseUrl });
    const unauthorized = await heraldError(() => anonymous.postEvent(newEvent()));
    assert.equal(unauthorized.status, 401);
    assert.equal(unauthorized.code, "unauthorized");

    const missing = await heraldError(() => client.getIntent("0".repeat(32)));
    assert.equal(missing.status, 404);
    assert.equal(missing.code, "not_found");
  });
});

describe("intents", () => {
  test("listIntents filters by entity and recipient; why is the pair's timeline, oldest first", async () => {
    const event = newEvent({ recipient: "u-31" });
    const both = { ...event, recipients: [...event.recipients, { id: "u-32", phone: "+9779800000002" }] };
    const posted = await client.postEvent(both);
    assert.equal(posted.intents.length, 2);

    const forOne = await client.listIntents({ entity: `purchase_order:${event.entity.id}`, recipient: "u-31" });
    assert.equal(forOne.intents.length, 1);
    assert.equal(forOne.intents[0].recipient_id, "u-31");
    const forEntity = await client.listIntents({ entity: event.entity });
    assert.equal(forEntity.intents.length, 2);

    const paged = await client.listIntents({ entity: event.entity, limit: 1 });
    assert.equal(paged.intents.length, 1);
    assert.ok(paged.next, "a first page of one names the next");
    const rest = await client.listIntents({ entity: event.entity, limit: 1, cursor: paged.next });
    assert.notEqual(rest.intents[0].id, paged.intents[0].id);

    await intentReaching("sent", forOne.intents[0].id);
    const timeline = await client.why({ entity: event.entity, recipient: "u-31" });
    assert.equal(timeline.length, 1);
    assert.equal(timeline[0].recipient_id, "u-31");
    assert.equal(timeline[0].state, "sent");
    assert.equal(timeline[0].attempts[0].outcome, "accepted");
    assert.equal((await client.why({ entity: event.entity })).length, 2);
  });
});

describe("retries", () => {
  let front;
  const route = "POST /v1/events";
  before(async () => {
    front = await proxy(herald.baseUrl);
  });
  after(async () => {
    await front?.close();
  });

  function throughProxy(options = {}) {
    const retries = [];
    const c = new HeraldClient({
      baseUrl: front.url,
      token: TOKEN,
      retry: { baseMs: 10, maxMs: 50, ...options.retry },
      onRetry: (r) => retries.push(r),
    });
    return { c, retries };
  }

  test("a 503 with Retry-After is tried again no sooner than it asks, then succeeds", async () => {
    const { c, retries } = throughProxy();
    const before = front.forRoute(route).length;
    front.plan(route, { status: 503, headers: { "retry-after": "1", "content-type": "text/plain" }, body: "busy" });

    const answer = await c.postEvent(newEvent());
    assert.equal(answer.status, 202);
    const tries = front.forRoute(route).slice(before);
    assert.deepEqual(
      tries.map((t) => [t.answeredBy, t.status]),
      [
        ["proxy", 503],
        ["herald", 202],
      ],
    );
    assert.equal(retries.length, 1);
    assert.equal(retries[0].status, 503);
    assert.ok(retries[0].delayMs >= 1_000, `Retry-After is a floor: waited ${retries[0].delayMs} ms`);
    assert.ok(tries[1].at - tries[0].at >= 1_000, "the second try came after the Retry-After");
  });

  test("a connection dropped before any answer is tried again", async () => {
    const { c, retries } = throughProxy();
    front.plan(route, "reset");
    const answer = await c.postEvent(newEvent());
    assert.equal(answer.status, 202);
    assert.equal(retries.length, 1);
    assert.equal(retries[0].status, undefined);
    assert.ok(retries[0].error, "the retry says what failed");
  });

  test("an answer lost after Herald recorded the event: the retry is a replay, and one message goes out", async () => {
    const { c, retries } = throughProxy();
    const event = newEvent();
    front.plan(route, "lose-answer");
    const answer = await c.postEvent(event);
    assert.equal(retries.length, 1);
    assert.equal(answer.status, 200);
    assert.equal(answer.replayed, true, "the first try had created the intent");

    const { intents } = await client.listIntents({ entity: event.entity });
    assert.equal(intents.length, 1);
    const sent = await intentReaching("sent", intents[0].id);
    assert.equal(sms.received.filter((m) => m.key === sent.key).length, 1);
  });

  test("a final 4xx is not retried", async () => {
    const { c, retries } = throughProxy();
    const before = front.forRoute(route).length;
    const error = await heraldError(() => c.postEvent(newEvent({ phone: "not a number" })));
    assert.equal(error.status, 400);
    assert.equal(error.code, "invalid_field");
    assert.equal(error.attempts, 1);
    assert.equal(retries.length, 0);
    assert.equal(front.forRoute(route).length - before, 1);
  });

  test("retries are bounded: the last 503 is thrown, with the number of tries", async () => {
    const { c } = throughProxy({ retry: { attempts: 3 } });
    const before = front.forRoute(route).length;
    const busy = { status: 503, headers: { "content-type": "text/html" }, body: "<h1>503 Service Unavailable</h1>" };
    front.plan(route, busy, busy, busy);
    const error = await heraldError(() => c.postEvent(newEvent()));
    assert.equal(error.status, 503);
    assert.equal(error.code, "unexpected_response", "a proxy's page is not Herald's error body");
    assert.equal(error.attempts, 3);
    assert.deepEqual(
      front.forRoute(route).slice(before).map((t) => t.answeredBy),
      ["proxy", "proxy", "proxy"],
    );
  });

  test("a Retry-After longer than maxRetryAfterMs is handed to the caller instead of waited for", async () => {
    const { c, retries } = throughProxy();
    front.plan(route, { status: 429, headers: { "retry-after": "120" } });
    const error = await heraldError(() => c.postEvent(newEvent()));
    assert.equal(error.status, 429);
    assert.equal(error.retryAfterMs, 120_000);
    assert.equal(retries.length, 0);
  });

  test("no server at all: a HeraldConnectionError after the last try", async () => {
    const port = await new Promise((resolve) => {
      const server = createServer().listen(0, "127.0.0.1", () => {
        const { port } = server.address();
        server.close(() => resolve(port));
      });
    });
    const retries = [];
    const c = new HeraldClient({
      baseUrl: `http://127.0.0.1:${port}`,
      retry: { attempts: 2, baseMs: 10, maxMs: 10 },
      onRetry: (r) => retries.push(r),
    });
    const error = await c.getIntent("0".repeat(32)).catch((e) => e);
    assert.ok(error instanceof HeraldConnectionError, `expected a HeraldConnectionError, got ${error}`);
    assert.equal(error.attempts, 2);
    assert.equal(retries.length, 1);
    assert.match(error.message, /no answer from Herald \(2 tries\).*ECONNREFUSED/);
  });
});

describe("dead letters", () => {
  test("a provider's permanent refusal is a dead letter; replayed, it is sent", async () => {
    const phone = "+9779800000666";
    sms.refusing.add(phone);
    const event = newEvent({ phone, recipient: "u-66" });
    const [summary] = (await client.postEvent(event)).intents;
    const dead = await intentReaching("dead", summary.id);
    assert.equal(dead.reason, "rejected");
    assert.equal(dead.attempts[0].outcome, "permanent");

    const page = await client.listDeadLetters({ reason: "rejected", since: new Date(Date.now() - 3_600_000) });
    const letter = page.dead_letters.find((d) => d.id === summary.id);
    assert.ok(letter, "the intent is on the dead-letter list");
    assert.equal(letter.tenant, "default");
    assert.equal(letter.content.body, dead.content.body);
    const counts = await client.deadLetterSummary();
    assert.ok(counts.by_reason.rejected >= 1);
    assert.ok(counts.total >= 1);

    sms.refusing.delete(phone);
    const replay = await client.replayDeadLetters({ ids: [summary.id] });
    assert.deepEqual(replay.replayed, [summary.id]);
    assert.deepEqual(replay.skipped, []);
    const sent = await intentReaching("sent", summary.id);
    assert.equal(sent.attempts.length, 2);
    assert.equal(sent.replays.length, 1);
    assert.equal(sent.replays[0].previous_reason, "rejected");
    assert.equal(sent.replays[0].requested_by, "ts-client");

    const again = await client.replayDeadLetters({ ids: [summary.id] });
    assert.deepEqual(again.replayed, []);
    assert.equal(again.skipped[0].reason, "not_dead");

    const [timeline] = await client.why({ entity: event.entity, recipient: "u-66" });
    assert.deepEqual(
      timeline.attempts.map((a) => a.outcome),
      ["permanent", "accepted"],
    );
  });
});

describe("suppressions", () => {
  test("a bounced number is suppressed until its entry is removed", async () => {
    const phone = "+9779800000777";
    const first = (await client.postEvent(newEvent({ phone, recipient: "u-77" }))).intents[0];
    const sent = await intentReaching("sent", first.id);

    const receipt = JSON.stringify({ key: sent.key, status: "bounced", reason: "unknown handset" });
    const answer = await fetch(`${herald.baseUrl}/v1/receipts/generic`, {
      method: "POST",
      headers: { "content-type": "application/json", ...standardWebhookHeaders(RECEIPT_SECRET, `msg_${sent.key}`, receipt) },
      body: receipt,
    });
    assert.equal(answer.status, 200, await answer.text());

    const entry = await waitFor(
      async () => (await client.listSuppressions()).suppressions.find((s) => s.source_intent === first.id),
      { what: "the bounced number on the suppression list" },
    );
    assert.equal(entry.reason, "address_bounced");
    assert.equal(entry.channel, "sms");
    assert.ok(!entry.address.includes(phone), "the list shows the number masked");

    const held = (await client.postEvent(newEvent({ phone, recipient: "u-77" }))).intents[0];
    assert.equal(held.decision, "suppress");
    assert.equal(held.reason, "address_bounced");

    assert.deepEqual(await client.removeSuppression(entry.id), { removed: entry.id });
    const after = await client.listSuppressions({ limit: 500 });
    assert.equal(after.suppressions.find((s) => s.id === entry.id), undefined);
    const gone = await heraldError(() => client.removeSuppression(entry.id));
    assert.equal(gone.code, "not_found");

    const next = (await client.postEvent(newEvent({ phone, recipient: "u-77" }))).intents[0];
    assert.equal(next.decision, "send");
  });
});

describe("shadow report", () => {
  test("a route in shadow mode is planned and reported, never sent", async () => {
    // A tenant of its own, so the report counts only this test's posts.
    const rehearsal = new HeraldClient({ baseUrl: herald.baseUrl, token: REHEARSAL_TOKEN });
    const event = newEvent({ type: "purchase_order.approved.rehearsal", phone: "+9779800000888" });
    const posted = await rehearsal.postEvent(event);
    assert.equal(posted.status, 202);
    assert.equal((await rehearsal.postEvent(event)).replayed, true);

    const shadowed = await intentReaching("shadowed", posted.intents[0].id, rehearsal);
    assert.equal(shadowed.mode, "shadow");
    assert.equal(shadowed.attempts.length, 0);
    assert.equal(shadowed.would_have_sent.channel, "sms");
    assert.equal(sms.received.filter((m) => m.key === shadowed.key).length, 0, "no provider was called");

    // Posts are tallied off the request path, every half second: wait for both.
    const report = await waitFor(
      async () => {
        const r = await rehearsal.shadowReport({ since: new Date(Date.now() - 3_600_000) });
        return r.events_received === 2 && r;
      },
      { what: "the report to count both posts" },
    );
    assert.equal(report.tenant, "rehearsal");
    assert.equal(report.events_new, 1);
    assert.equal(report.duplicates.replay, 1);
    assert.deepEqual(report.would_send, { sms: 1 });
    assert.deepEqual(report.sent, {});
    assert.deepEqual(report.intents, { sms: { send: { none: 1 } } });
    assert.deepEqual(report.sms, [{ encoding: "GSM-7", messages: 1, segments: 1 }]);
  });
});
