-- Candidate: one entity index instead of two. The entity list would read
-- intents_by_entity_recipient (tenant, entity_type, entity_id, …) and sort an entity's
-- intents by time.
DROP INDEX IF EXISTS intents_by_entity;
