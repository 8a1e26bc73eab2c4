-- Status publications are written by Herald's own statements, not by
-- triggers (src/store/publications.rs): the store's writer of state changes
-- writes each change's publication in the same statement or transaction,
-- and whether it does is the `settings` row `publications`, not the session
-- setting `herald.publish` that 0041 gated the triggers on (a transaction-mode
-- pooler drops a session setting, and a process without the bus configured
-- never set it, so what it changed went unpublished).
DROP TRIGGER IF EXISTS intents_publication_number_on_insert ON intents;
DROP TRIGGER IF EXISTS intents_publication_number_on_update ON intents;
DROP TRIGGER IF EXISTS intents_publication_on_insert ON intents;
DROP TRIGGER IF EXISTS intents_publication_on_update ON intents;
DROP TRIGGER IF EXISTS receipts_publication_on_delivered ON receipts;
DROP FUNCTION IF EXISTS herald_publication_number();
DROP FUNCTION IF EXISTS herald_publication_of_intent();
DROP FUNCTION IF EXISTS herald_publication_of_receipt();

-- A deployment that published goes on publishing from this migration on,
-- before any process of the new release has started with the bus. The rows
-- already written stay, and the publisher sends those not yet published.
INSERT INTO settings (name, value, created_at)
SELECT 'publications', 'on', (EXTRACT(EPOCH FROM now()) * 1000000)::bigint
WHERE EXISTS (SELECT 1 FROM publications)
ON CONFLICT (name) DO NOTHING;

-- The last trigger, 0052's: a dead letter's `dead_at` is written by the same
-- statements that write its state (the intents' inserts and the store's
-- writer of changes), no longer kept by a trigger beside them.
DROP TRIGGER IF EXISTS intents_dead_at_on_insert ON intents;
DROP TRIGGER IF EXISTS intents_dead_at_on_update ON intents;
DROP FUNCTION IF EXISTS herald_dead_at();
