-- scripts/perf-floor's pgbench script: @BATCH@ notifications' whole life, set-wise, in the
-- three transactions Herald commits for them (ingest, claim, outcome), on Herald's tables.
-- Sizes as Herald writes them: 32-hex intent keys, 64-hex digests, a ~95-character request
-- identity, a 337-character stored answer, a 400-character event body, a 160-character SMS.
-- `claimed` (a temporary table, not logged) carries the claimed keys from the claim to the
-- outcome, as the worker's memory does.
SET client_min_messages = warning;
CREATE TEMP TABLE IF NOT EXISTS claimed (k text, n bigint);
TRUNCATE claimed;

BEGIN;
WITH g AS (SELECT md5(random()::text || clock_timestamp()::text || n) AS k FROM generate_series(1, @BATCH@) n),
     r AS (INSERT INTO requests (tenant, identity, fingerprint, status, response, created_at)
           SELECT 'default', 'event:' || 'default|purchase_order.approved|purchase_order|PO-' || k || '|2026-12-03T08:00:00.000000000Z',
                  encode(sha256(convert_to(k || 'f', 'UTF8')), 'hex'), 202, repeat('a', 337), 1796284800000000 FROM g),
     e AS (INSERT INTO events (event_key, tenant, event_type, entity_type, entity_id, occurred_at, content_digest, created_at)
           SELECT 'default|purchase_order.approved|purchase_order|PO-' || k || '|2026-12-03T08:00:00.000000000Z', 'default',
                  'purchase_order.approved', 'purchase_order', 'PO-' || k, '2026-12-03T08:00:00.000000000Z',
                  encode(sha256(convert_to(k || 'c', 'UTF8')), 'hex'), 1796284800000000 FROM g),
     p AS (INSERT INTO payloads (digest, body, created_at)
           SELECT encode(sha256(convert_to(k || 'b', 'UTF8')), 'hex'), repeat('e', 400), 1796284800000000 FROM g
           UNION ALL
           SELECT encode(sha256(convert_to(k || 's', 'UTF8')), 'hex'), repeat('s', 160), 1796284800000000 FROM g),
     i AS (INSERT INTO intents (key, tenant, event_type, entity_type, entity_id, occurred_at, channel, recipient_id,
                                destination, locale, template_id, template_revision, event_digest, payload_digest,
                                decision, state, created_at, updated_at)
           SELECT k, 'default', 'purchase_order.approved', 'purchase_order', 'PO-' || k, '2026-12-03T08:00:00.000000000Z',
                  'sms', 'u-20', '+9779800000000', 'en', 'po_approved', '1',
                  encode(sha256(convert_to(k || 'b', 'UTF8')), 'hex'), encode(sha256(convert_to(k || 's', 'UTF8')), 'hex'),
                  'send', 'queued', 1796284800000000, 1796284800000000 FROM g)
INSERT INTO jobs (intent_key, tenant, run_at) SELECT k, 'default', 1796284800000000 FROM g;
COMMIT;

BEGIN;
WITH c AS (UPDATE jobs SET locked_until = (1796284800000000 + 30000000)
           WHERE intent_key IN (SELECT intent_key FROM jobs WHERE run_at <= 1796284800000000 AND locked_until IS NULL
                                ORDER BY run_at LIMIT @BATCH@ FOR UPDATE SKIP LOCKED)
           RETURNING intent_key),
     i AS (UPDATE intents SET state = 'sending', attempts = attempts + 1, updated_at = 1796284800000000
           FROM c WHERE key = c.intent_key RETURNING key, attempts, payload_digest),
     a AS (INSERT INTO attempts (intent_key, n, started_at) SELECT key, attempts, 1796284800000000 FROM i),
     kept AS (INSERT INTO claimed SELECT key, attempts FROM i)
SELECT count(p.body) FROM i JOIN payloads p ON p.digest = i.payload_digest;
COMMIT;

WITH a AS (UPDATE attempts a SET finished_at = (1796284800000000 + 1000), outcome = 'accepted', provider_status = 200,
                                 provider_message_id = 'SM' || substr(a.intent_key, 1, 30), provider = 'http'
           FROM claimed c WHERE a.intent_key = c.k AND a.n = c.n AND a.finished_at IS NULL RETURNING a.intent_key),
     i AS (UPDATE intents SET state = 'sent', updated_at = (1796284800000000 + 1000) FROM a WHERE key = a.intent_key),
     d AS (DELETE FROM jobs j USING a WHERE j.intent_key = a.intent_key)
SELECT count(*) FROM a;
