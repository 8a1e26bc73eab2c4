# Ingest, the fold variant: base's ingest with the queue columns on the intent and no job row.
1c\
-- Ingest, the fold variant: request record, event record, the intent with its event body,\
-- rendered message and queue columns (no job row).
s/decision, state, created_at, updated_at)$/decision, state, created_at, updated_at, run_at)/
s/'send', 'queued', 1796284800000000, 1796284800000000 FROM g RETURNING id)$/'send', 'queued', 1796284800000000, 1796284800000000, 1796284800000000 FROM g RETURNING id)/
s/^INSERT INTO jobs (intent_id, tenant, run_at) SELECT id, 'default', 1796284800000000 FROM i;$/SELECT count(*) FROM i;/
