-- Candidate (SQLite): one entity index fewer.
DROP INDEX IF EXISTS intents_by_entity;
