# Ingest, the fold variant: base's ingest with the queue columns on the intent and no job row.
1c\
-- Ingest, the fold variant: request record, event record, the intent with its event body,\
-- rendered message and queue columns (no job row).
s/decision, state, created_at, updated_at)$/decision, state, created_at, updated_at, run_at)/
s/'send', 'queued', 1796284800000000, 1796284800000000 FROM g)$/'send', 'queued', 1796284800000000, 1796284800000000, 1796284800000000 FROM g RETURNING key)/
s/^INSERT INTO jobs (intent_key, tenant, run_at) SELECT k, 'default', 1796284800000000 FROM g;$/SELECT count(*) FROM i;/
