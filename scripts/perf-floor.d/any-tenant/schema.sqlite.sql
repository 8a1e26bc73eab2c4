-- Candidate (SQLite): no indexes of an admin's search of its own (Postgres dropped its two in
-- migration 0062) and no tenant's queue index, beside the entity cut: SQLite's migration 0063.
DROP INDEX IF EXISTS intents_by_entity;
DROP INDEX IF EXISTS intents_by_entity_any_tenant;
DROP INDEX IF EXISTS intents_by_recipient_any_tenant;
DROP INDEX IF EXISTS jobs_by_tenant;
