-- Issue 32: SQLite's one writer pays for every index entry of every
-- notification, so the indexes that serve no promise and no page that cannot
-- be served otherwise go, as they went on Postgres (migrations 0062, 0063):
-- * `intents_by_entity`: a tenant's reads by entity use
--   `intents_by_entity_recipient` (tenant, entity_type, entity_id, …), which
--   leads with the same columns, and sort the entity's intents by time;
-- * `intents_by_entity_any_tenant`, `intents_by_recipient_any_tenant`: an
--   admin's search, which names no tenant, reads the tenant-led indexes one
--   tenant at a time, the tenants found by a loose scan
--   (src/store/sqlite/views.rs);
-- * `jobs_by_tenant`: a tenant's queue on the health page counts the jobs
--   table, which holds only what is still to be sent.
-- Measured on the floor of the rows (scripts/perf-floor-sqlite --variant
-- any-tenant): the writer's CPU a notification about a sixth lower.
DROP INDEX IF EXISTS intents_by_entity;
DROP INDEX IF EXISTS intents_by_entity_any_tenant;
DROP INDEX IF EXISTS intents_by_recipient_any_tenant;
DROP INDEX IF EXISTS jobs_by_tenant;
