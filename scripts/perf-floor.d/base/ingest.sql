-- Ingest: request record, event record, the intent (its event body and rendered message in
-- its row, migrations 0065 and 0066; numbered as it is inserted), its job by that number
-- (migration 0067).
BEGIN;
WITH g AS (SELECT md5(random()::text || clock_timestamp()::text || n) AS k FROM generate_series(1, @BATCH@) n),
     r AS (INSERT INTO requests (tenant, identity, fingerprint, status, response, created_at)
           SELECT 'default', 'event:' || 'default|purchase_order.approved|purchase_order|PO-' || k || '|2026-12-03T08:00:00.000000000Z',
                  encode(sha256(convert_to(k || 'f', 'UTF8')), 'hex'), 202, repeat('a', 337), 1796284800000000 FROM g),
     e AS (INSERT INTO events (event_key, tenant, event_type, entity_type, entity_id, occurred_at, content_digest, created_at)
           SELECT 'default|purchase_order.approved|purchase_order|PO-' || k || '|2026-12-03T08:00:00.000000000Z', 'default',
                  'purchase_order.approved', 'purchase_order', 'PO-' || k, '2026-12-03T08:00:00.000000000Z',
                  encode(sha256(convert_to(k || 'c', 'UTF8')), 'hex'), 1796284800000000 FROM g),
     i AS (INSERT INTO intents (key, tenant, event_type, entity_type, entity_id, occurred_at, channel, recipient_id,
                                destination, locale, template_id, template_revision, event_digest, payload_digest,
                                content, event_body, decision, state, created_at, updated_at)
           SELECT k, 'default', 'purchase_order.approved', 'purchase_order', 'PO-' || k, '2026-12-03T08:00:00.000000000Z',
                  'sms', 'u-20', '+9779800000000', 'en', 'po_approved', '1',
                  encode(sha256(convert_to(k || 'b', 'UTF8')), 'hex'), encode(sha256(convert_to(k || 's', 'UTF8')), 'hex'),
                  repeat('s', 160), repeat('e', 400), 'send', 'queued', 1796284800000000, 1796284800000000 FROM g RETURNING id)
INSERT INTO jobs (intent_id, tenant, run_at) SELECT id, 'default', 1796284800000000 FROM i;
COMMIT;
