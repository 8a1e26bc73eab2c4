-- Issue 32: one entity index instead of two. Every read by entity names
-- (tenant, entity_type, entity_id), which `intents_by_entity_recipient`
-- leads with, and the entity list sorts an entity's intents by
-- (created_at, key) in either index (key was never in `intents_by_entity`,
-- docs/console/query-plans.md). The second index cost every intent an entry
-- at insert and at each state change that left its page; measured on the
-- floor of the rows (scripts/perf-floor --variant entity), about 6 % of
-- Postgres's CPU a notification.
DROP INDEX IF EXISTS intents_by_entity;
