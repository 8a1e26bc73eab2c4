-- scripts/preload on SQLite: @n historical notifications, set-wise, in one
-- transaction. Read by the sqlite3 shell after `.parameter set @n N`; the same rows
-- as postgres.sql (see there and scripts/preload), with SHA3-256 (the shell's sha3())
-- where Postgres has SHA-256: the keys and digests have the real ones' shape, but a
-- re-post of a preloaded event does not find its event or intent here.
.bail on
.timer on
PRAGMA synchronous = OFF;
PRAGMA cache_size = -262144;

BEGIN;

-- Numbers continue after an earlier preload of this database.
CREATE TEMP TABLE preload_args AS
SELECT CAST(@n AS INTEGER) AS n,
       COALESCE((SELECT max(CAST(substr(entity_id, 12) AS INTEGER)) FROM events
                 WHERE entity_type = 'purchase_order' AND entity_id LIKE 'preload-PO-%'), 0) AS base,
       CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER) AS now_us;

CREATE TEMP TABLE preload_src AS
WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s WHERE x < (SELECT n FROM preload_args)),
g AS (        -- i, and a few pseudo-random draws (Lehmer steps mod 2^31-1) from it
    SELECT i, total, now_us, y1, y2, (y2 * 48271) % 2147483647 AS y3,
           (((y2 * 48271) % 2147483647) * 48271) % 2147483647 AS y4
    FROM (SELECT i, total, now_us, y1, (y1 * 48271) % 2147483647 AS y2
          FROM (SELECT a.base + x AS i, a.n AS total, a.now_us,
                       (((a.base + x) * 1103515245 + 12345) % 2147483647 * 48271) % 2147483647 AS y1
                FROM preload_args a, s))
),
k AS (        -- what became of it, and the timing of its tries
    SELECT i, total, now_us, y1, y2, y3, y4,
           CASE WHEN y1 % 100 < 90 THEN 'default' WHEN y1 % 100 < 96 THEN 'acme' ELSE 'globex' END AS tenant,
           CASE WHEN y2 % 1000 < 20 THEN 'no_destination'
                WHEN y2 % 1000 < 30 THEN 'opted_out'
                WHEN y2 % 1000 < 50 THEN 'exhausted'
                WHEN y2 % 1000 < 60 THEN 'rejected'
                WHEN y2 % 1000 < 75 THEN 'retried'
                ELSE 'sent' END AS fate,
           now_us - 60000000 - (y3 % 2588400) * 1000000 - y4 % 1000000 AS updated_at,
           2000 + y4 % 30000 AS lag, 20000 + (y4 / 30000) % 200000 AS dur, 15000000 + y3 % 15000000 AS unit
    FROM g
),
c AS (        -- created when its tries, back from the last, leave room for
    SELECT k.*,
           updated_at - CASE WHEN tries = 0 THEN 0
                             ELSE lag + (tries - 1) * (dur + lag) + unit * ((1 << (tries - 1)) - 1) + dur
                        END AS created_at
    FROM (SELECT k.*, CASE fate WHEN 'exhausted' THEN 6 WHEN 'retried' THEN 2 WHEN 'sent' THEN 1
                                WHEN 'rejected' THEN 1 ELSE 0 END AS tries
          FROM k) k
),
r AS (        -- who it went to, and when it occurred
    SELECT c.*,
           CASE WHEN fate = 'opted_out' THEN 'preload-optout-' || ((y1 / 100) % 50)
                ELSE 'preload-u-' || ((y1 / 100) % max(total / 20, 1)) END AS recipient_id,
           CASE WHEN fate = 'opted_out' THEN '+97796' || printf('%08d', (y1 / 100) % 50)
                WHEN fate = 'no_destination' THEN NULL
                ELSE '+97797' || printf('%08d', (y1 / 100) % max(total / 20, 1)) END AS phone,
           'preload-PO-' || i AS entity_id,
           strftime('%Y-%m-%dT%H:%M:%S', (created_at / 1000 - y4 % 5000) / 1000, 'unixepoch') || '.'
               || printf('%03d', (created_at / 1000 - y4 % 5000) % 1000) || '000000Z' AS occurred_at
    FROM c
),
j AS (        -- the event's canonical JSON (keys sorted, no spaces)
    SELECT r.*,
           tenant || '|purchase_order.approved|purchase_order|' || entity_id || '|' || occurred_at AS event_key,
           '{"approver":{"name":"Asha"},"po":{"number":"' || entity_id || '","total":"1,20,000"}}' AS data,
           '{"id":"' || entity_id || '","type":"purchase_order","version":1}' AS entity,
           '[{"id":"' || recipient_id || '","locale":"en"' || COALESCE(',"phone":"' || phone || '"', '') || '}]'
               AS recipients
    FROM r
),
b AS (
    SELECT j.*,
           '{"channels":["sms"],"data":' || data || ',"entity":' || entity || ',"occurred_at":"' || occurred_at
               || '","recipients":' || recipients || ',"type":"purchase_order.approved"}' AS event_body,
           '{"data":' || data || ',"entity":' || entity || ',"occurred_at":"' || occurred_at
               || '","type":"purchase_order.approved"}' AS content,
           CASE WHEN fate NOT IN ('no_destination', 'opted_out')
                THEN '{"body":"PO ' || entity_id || ' approved by Asha. Total 1,20,000.","encoding":"GSM-7","segments":1}'
           END AS message
    FROM j
)
SELECT i, tenant, fate, created_at, recipient_id, phone, entity_id, occurred_at, event_key, event_body, message,
       lag, dur, unit, tries, now_us,
       lower(hex(sha3(event_body, 256))) AS fingerprint,
       lower(hex(sha3(content, 256))) AS content_digest,
       substr(lower(hex(sha3(event_key || '|sms|' || recipient_id, 256))), 1, 32) AS key,
       lower(hex(sha3(message, 256))) AS payload_digest, updated_at
FROM b;

INSERT INTO events (event_key, tenant, event_type, entity_type, entity_id, occurred_at, content_digest, created_at)
SELECT event_key, tenant, 'purchase_order.approved', 'purchase_order', entity_id, occurred_at, content_digest, created_at
FROM preload_src;

-- (dead_at is a generated column on SQLite.)
INSERT INTO intents (key, tenant, event_type, entity_type, entity_id, entity_version, occurred_at, channel,
                     recipient_id, destination, locale, template_id, template_revision, event_digest, payload_digest,
                     content, event_body, decision, reason, detail, state, attempts, created_at, updated_at, preferences_version,
                     link_key, retry_base, mode, traceparent, publication_seq)
SELECT key, tenant, 'purchase_order.approved', 'purchase_order', entity_id, 1, occurred_at, 'sms',
       recipient_id, CASE WHEN fate <> 'opted_out' THEN phone END, 'en', 'po_approved', '1', fingerprint,
       CASE WHEN message IS NOT NULL THEN payload_digest END, message, event_body,
       CASE WHEN fate IN ('no_destination', 'opted_out') THEN 'suppress' ELSE 'send' END,
       CASE fate WHEN 'no_destination' THEN 'no_destination' WHEN 'opted_out' THEN 'opted_out'
                 WHEN 'exhausted' THEN 'retries_exhausted' WHEN 'rejected' THEN 'rejected' END,
       NULL,
       CASE WHEN fate IN ('no_destination', 'opted_out') THEN 'suppressed'
            WHEN fate IN ('exhausted', 'rejected') THEN 'dead' ELSE 'sent' END,
       tries, created_at, updated_at,
       CASE WHEN fate = 'opted_out' THEN 1 END,
       NULL, 0, 'live',
       '00-' || substr(lower(hex(sha3('trace|' || tenant || '|' || event_key, 256))), 1, 32) || '-'
           || substr(lower(hex(sha3('span|' || key, 256))), 1, 16) || '-01',
       0
FROM preload_src;

-- An attempt names its intent by the intent's number (migration 0067).
INSERT INTO attempts (intent_id, n, started_at, finished_at, outcome, error_class, provider_status,
                      provider_message_id, error, retry_after, retry_at, provider, possible_duplicate)
SELECT intent_id, t, started, started + dur,
       CASE WHEN t < tries OR fate = 'exhausted' THEN 'retryable' WHEN fate = 'rejected' THEN 'permanent'
            ELSE 'accepted' END,
       CASE WHEN t < tries OR fate = 'exhausted' THEN 'provider_5xx' WHEN fate = 'rejected' THEN 'rejected' END,
       CASE WHEN t < tries OR fate = 'exhausted' THEN 503 WHEN fate = 'rejected' THEN 400 ELSE 200 END,
       CASE WHEN t = tries AND fate IN ('sent', 'retried') THEN substr(lower(hex(sha3('message|' || key, 256))), 1, 32) END,
       CASE WHEN started + dur < now_us - 14 * 86400000000 THEN NULL   -- retention's attempt_diagnostics
            WHEN t < tries OR fate = 'exhausted' THEN 'HTTP 503: {"error":"unavailable"}'
            WHEN fate = 'rejected' THEN 'HTTP 400: {"error":"rejected"}' END,
       NULL,
       CASE WHEN t < tries THEN started + dur + unit * (1 << (t - 1)) END,
       'http', FALSE
FROM (SELECT p.*, i.id AS intent_id, t,
             p.created_at + lag + (t - 1) * (dur + lag) + unit * ((1 << (t - 1)) - 1) AS started
      FROM preload_src p
      JOIN intents i ON i.key = p.key
      JOIN (SELECT 1 AS t UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5
            UNION ALL SELECT 6) ON t <= p.tries);

-- Request records within the dedupe window (24h) only, as retention leaves them.
INSERT INTO requests (tenant, identity, fingerprint, status, response, created_at)
SELECT tenant, 'event:' || event_key || '#' || fingerprint, fingerprint, 202,
       '{"event_key":"' || event_key || '","replayed":false,"intents":[{"id":"' || key || '","key":"' || key
           || '","channel":"sms","recipient_id":"' || recipient_id || '","decision":"'
           || CASE WHEN fate IN ('no_destination', 'opted_out') THEN 'suppress","reason":"' || fate
                   || '","state":"suppressed"'
                   ELSE 'send","reason":null,"state":"queued"' END
           || ',"created":true}]}',
       created_at
FROM preload_src
WHERE created_at >= (SELECT now_us FROM preload_args) - 86400000000;

INSERT INTO ingest_tally (tenant, minute, kind, n)
SELECT tenant, created_at / 60000000 * 60000000, 'new', count(*) FROM preload_src WHERE true GROUP BY 1, 2
ON CONFLICT (tenant, minute, kind) DO UPDATE SET n = n + excluded.n;

INSERT OR IGNORE INTO recipients (tenant, id, phone, locale, preferences, preferences_version, updated_at)
SELECT t.tenant, 'preload-optout-' || o.x, '+97796' || printf('%08d', o.x), 'en', '{"channels":{"sms":false}}', 1,
       a.now_us - 31 * 86400000000
FROM preload_args a,
     (SELECT 'default' AS tenant UNION ALL SELECT 'acme' UNION ALL SELECT 'globex') t,
     (WITH RECURSIVE o(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM o WHERE x < 49) SELECT x FROM o) o;

INSERT OR IGNORE INTO recipient_preferences (tenant, recipient_id, version, preferences, created_at)
SELECT tenant, id, 1, preferences, updated_at FROM recipients WHERE id LIKE 'preload-optout-%';

.mode column
.headers on
SELECT fate, count(*) AS intents, sum(tries) AS attempts FROM preload_src GROUP BY fate ORDER BY 2 DESC;

COMMIT;

DROP TABLE preload_src;
DROP TABLE preload_args;
ANALYZE;
