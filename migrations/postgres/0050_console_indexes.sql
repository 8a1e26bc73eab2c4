-- The operator console's reads (issue 14), each an index range rather than a
-- scan of the intents (docs/console/query-plans.md has the plans on a
-- million intents):
-- * an `admin` searching every tenant by entity or by recipient (a tenant's
--   operator uses intents_by_entity / intents_by_recipient, which lead with
--   the tenant and so cannot serve a search without one);
-- * a tenant's queue on the health page: jobs carry no tenant, so the
--   tenant's waiting intents are found here (small: only intents with a job
--   waiting are in it) and their jobs by key;
-- * the health page's attempts by outcome over the last hour (finished_at);
-- * the dead-letter page's newest few of every group in one query: the
--   partial index on dead intents gains the key, so ranking them is read
--   from the index alone (it still serves every query it served before).
-- Each index on intents costs every ingest an entry; the pending one only
-- while an intent waits.
CREATE INDEX intents_by_entity_any_tenant ON intents (entity_type, entity_id, created_at DESC);
CREATE INDEX intents_by_recipient_any_tenant ON intents (recipient_id, created_at DESC);
CREATE INDEX intents_pending ON intents (tenant, key) WHERE state IN ('queued', 'held', 'sending', 'unknown');
CREATE INDEX attempts_by_finished ON attempts (finished_at) WHERE finished_at IS NOT NULL;
DROP INDEX intents_dead;
CREATE INDEX intents_dead ON intents (tenant, reason, updated_at, key) WHERE state = 'dead';
