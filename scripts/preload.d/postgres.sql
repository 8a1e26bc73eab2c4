-- scripts/preload on Postgres: :n historical notifications, set-wise, in one
-- transaction. Run by psql with -v n=N (scripts/preload says what the rows are).
--
-- Each row of preload_src is one notification: one event (purchase_order.approved,
-- entity preload-PO-<i>, one sms recipient), one intent (with its event body and,
-- when rendered, its message), its attempts and its request record. The
-- identities are derived as Herald derives them (event key; SHA-256 fingerprint and
-- content digest of the canonical JSON; notification key = the first 32 hex digits
-- of SHA-256 of event key|channel|recipient). Nothing is queued: no job, and every
-- intent is in a final state. What Herald's retention would have pruned by now
-- (perf kit configuration) is left out: see the requests and the attempts' error.
\set ON_ERROR_STOP on
SET synchronous_commit = off;
SET work_mem = '256MB';
SET maintenance_work_mem = '512MB';
-- The source query is large and runs once: compiling it would cost more than it saves.
SET jit = off;
\timing on

BEGIN;

-- Numbers continue after an earlier preload of this database.
CREATE TEMP TABLE preload_args ON COMMIT DROP AS
SELECT :n::bigint AS n,
       COALESCE((SELECT max(substr(entity_id, 12)::bigint) FROM events
                 WHERE entity_type = 'purchase_order' AND entity_id LIKE 'preload-PO-%'), 0) AS base,
       (EXTRACT(EPOCH FROM now()) * 1000000)::bigint AS now_us;

CREATE TEMP TABLE preload_src ON COMMIT DROP AS
WITH g AS (   -- i, and a few pseudo-random draws (Lehmer steps mod 2^31-1) from it
    SELECT i, total, now_us, y1, y2, (y2 * 48271) % 2147483647 AS y3, (((y2 * 48271) % 2147483647) * 48271) % 2147483647 AS y4
    FROM (SELECT i, total, now_us, y1, (y1 * 48271) % 2147483647 AS y2
          FROM (SELECT a.base + s AS i, a.n AS total, a.now_us,
                       (((a.base + s) * 1103515245 + 12345) % 2147483647 * 48271) % 2147483647 AS y1
                FROM preload_args a, generate_series(1, a.n) AS s) x) y
), k AS (     -- what became of it, and the timing of its tries
    SELECT i, total, now_us, y1, y2, y3, y4,
           CASE WHEN y1 % 100 < 90 THEN 'default' WHEN y1 % 100 < 96 THEN 'acme' ELSE 'globex' END AS tenant,
           CASE WHEN y2 % 1000 < 20 THEN 'no_destination'   -- suppressed: the event gave no phone
                WHEN y2 % 1000 < 30 THEN 'opted_out'        -- suppressed: the directory's preferences
                WHEN y2 % 1000 < 50 THEN 'exhausted'        -- dead after 6 tries answered 503
                WHEN y2 % 1000 < 60 THEN 'rejected'         -- dead after one try answered 400
                WHEN y2 % 1000 < 75 THEN 'retried'          -- sent at the second try
                ELSE 'sent' END AS fate,
           -- its last change within the last 30 days (less an hour), up to a minute ago
           now_us - 60000000 - (y3 % 2588400) * 1000000 - y4 % 1000000 AS updated_at,
           -- each try is picked up `lag` after it is due and takes `dur`; retry k waits unit·2^(k-1)
           2000 + y4 % 30000 AS lag, 20000 + (y4 / 30000) % 200000 AS dur, 15000000 + y3 % 15000000 AS unit
    FROM g
), c AS (     -- created when its tries, back from the last, leave room for
    SELECT k.*,
           updated_at - CASE WHEN tries = 0 THEN 0
                             ELSE lag + (tries - 1) * (dur + lag) + unit * ((1::bigint << (tries - 1)::int) - 1) + dur
                        END AS created_at
    FROM (SELECT k.*, CASE fate WHEN 'exhausted' THEN 6 WHEN 'retried' THEN 2 WHEN 'sent' THEN 1
                                WHEN 'rejected' THEN 1 ELSE 0 END AS tries
          FROM k) k
), r AS (     -- who it went to, and when it occurred
    SELECT c.*,
           CASE WHEN fate = 'opted_out' THEN 'preload-optout-' || ((y1 / 100) % 50)
                ELSE 'preload-u-' || ((y1 / 100) % GREATEST(total / 20, 1)) END AS recipient_id,
           CASE WHEN fate = 'opted_out' THEN '+97796' || lpad(((y1 / 100) % 50)::text, 8, '0')
                WHEN fate = 'no_destination' THEN NULL
                ELSE '+97797' || lpad(((y1 / 100) % GREATEST(total / 20, 1))::text, 8, '0') END AS phone,
           'preload-PO-' || i AS entity_id,
           -- a few seconds before it was posted
           to_char(timestamp '1970-01-01' + ((created_at / 1000 - y4 % 5000) * interval '1 millisecond'),
                   'YYYY-MM-DD"T"HH24:MI:SS.MS') || '000000Z' AS occurred_at
    FROM c
), j AS (     -- the event's canonical JSON (keys sorted, no spaces)
    SELECT r.*,
           tenant || '|purchase_order.approved|purchase_order|' || entity_id || '|' || occurred_at AS event_key,
           '{"approver":{"name":"Asha"},"po":{"number":"' || entity_id || '","total":"1,20,000"}}' AS data,
           '{"id":"' || entity_id || '","type":"purchase_order","version":1}' AS entity,
           '[{"id":"' || recipient_id || '","locale":"en"' || COALESCE(',"phone":"' || phone || '"', '') || '}]'
               AS recipients
    FROM r
), b AS (
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
       encode(sha256(convert_to(event_body, 'UTF8')), 'hex') AS fingerprint,
       encode(sha256(convert_to(content, 'UTF8')), 'hex') AS content_digest,
       left(encode(sha256(convert_to(event_key || '|sms|' || recipient_id, 'UTF8')), 'hex'), 32) AS key,
       encode(sha256(convert_to(message, 'UTF8')), 'hex') AS payload_digest, updated_at
FROM b;

-- The event records. Each event planned one intent, so its body goes in that
-- intent's row, with the rendered message (migrations 0065, 0066).
INSERT INTO events (event_key, tenant, event_type, entity_type, entity_id, occurred_at, content_digest, created_at)
SELECT event_key, tenant, 'purchase_order.approved', 'purchase_order', entity_id, occurred_at, content_digest, created_at
FROM preload_src;

-- The intents, as the worker left them.
INSERT INTO intents (key, tenant, event_type, entity_type, entity_id, entity_version, occurred_at, channel,
                     recipient_id, destination, locale, template_id, template_revision, event_digest, payload_digest,
                     content, event_body, decision, reason, detail, state, attempts, created_at, updated_at, preferences_version,
                     link_key, retry_base, mode, traceparent, publication_seq, dead_at)
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
       '00-' || md5('trace|' || tenant || '|' || event_key) || '-' || left(md5('span|' || key), 16) || '-01',
       0,
       CASE WHEN fate IN ('exhausted', 'rejected') THEN updated_at END
FROM preload_src;

-- Every try: tries before the last failed 503 and were rescheduled; the last one
-- was accepted (sent), refused for good (rejected) or failed the budget's end.
-- An attempt names its intent by the intent's number (migration 0067).
INSERT INTO attempts (intent_id, n, started_at, finished_at, outcome, error_class, provider_status,
                      provider_message_id, error, retry_after, retry_at, provider, possible_duplicate)
SELECT intent_id, t, started, started + dur,
       CASE WHEN t < tries OR fate = 'exhausted' THEN 'retryable' WHEN fate = 'rejected' THEN 'permanent'
            ELSE 'accepted' END,
       CASE WHEN t < tries OR fate = 'exhausted' THEN 'provider_5xx' WHEN fate = 'rejected' THEN 'rejected' END,
       CASE WHEN t < tries OR fate = 'exhausted' THEN 503 WHEN fate = 'rejected' THEN 400 ELSE 200 END,
       CASE WHEN t = tries AND fate IN ('sent', 'retried') THEN md5('message|' || key) END,
       CASE WHEN started + dur < now_us - 14 * 86400000000 THEN NULL   -- retention's attempt_diagnostics
            WHEN t < tries OR fate = 'exhausted' THEN 'HTTP 503: {"error":"unavailable"}'
            WHEN fate = 'rejected' THEN 'HTTP 400: {"error":"rejected"}' END,
       NULL,
       CASE WHEN t < tries THEN started + dur + unit * (1::bigint << (t - 1)::int) END,
       'http', false
FROM (SELECT s.*, i.id AS intent_id, t,
             s.created_at + lag + (t - 1) * (dur + lag) + unit * ((1::bigint << (t - 1)::int) - 1) AS started
      FROM preload_src s JOIN intents i ON i.key = s.key CROSS JOIN LATERAL generate_series(1, s.tries) AS t
      WHERE s.tries > 0) a;

-- The request records: what the post was answered (202, the intent as planned),
-- for the last 24 hours only: retention prunes them at the dedupe window (24h in
-- the perf kit, and by default).
INSERT INTO requests (tenant, identity, fingerprint, status, response, created_at)
SELECT tenant, 'event:' || event_key || '#' || fingerprint, fingerprint, 202,
       '{"event_key":"' || event_key || '","replayed":false,"intents":[{"id":"' || key || '","key":"' || key
           || '","channel":"sms","recipient_id":"' || recipient_id || '","decision":"'
           || CASE WHEN fate IN ('no_destination', 'opted_out') THEN 'suppress","reason":"' || fate
                   || '","state":"suppressed"'
                   ELSE 'send","reason":null,"state":"queued"' END
           || ',"created":true}]}',
       created_at
FROM preload_src, preload_args
WHERE created_at >= preload_args.now_us - 86400000000;

-- Every post counted as new, per tenant and minute.
INSERT INTO ingest_tally (tenant, minute, kind, n)
SELECT tenant, created_at / 60000000 * 60000000, 'new', count(*) FROM preload_src GROUP BY 1, 2
ON CONFLICT (tenant, minute, kind) DO UPDATE SET n = ingest_tally.n + excluded.n;

-- The directory entries behind the opted-out intents: sms turned off, version 1,
-- written before the history starts.
INSERT INTO recipients (tenant, id, phone, locale, preferences, preferences_version, updated_at)
SELECT t.tenant, 'preload-optout-' || o, '+97796' || lpad(o::text, 8, '0'), 'en', '{"channels":{"sms":false}}', 1,
       a.now_us - 31 * 86400000000
FROM preload_args a, (VALUES ('default'), ('acme'), ('globex')) t(tenant), generate_series(0, 49) o
ON CONFLICT (tenant, id) DO NOTHING;

INSERT INTO recipient_preferences (tenant, recipient_id, version, preferences, created_at)
SELECT tenant, id, 1, preferences, updated_at FROM recipients WHERE id LIKE 'preload-optout-%'
ON CONFLICT (tenant, recipient_id, version) DO NOTHING;

SELECT fate, count(*) AS intents, sum(tries) AS attempts FROM preload_src GROUP BY fate ORDER BY 2 DESC;

COMMIT;

ANALYZE;
