# Ingest, the linked variant: base's ingest, the job naming its intent by number.
1c\
-- Ingest, the linked variant: request record, event record, the intent (numbered as it is\
-- inserted), its job by that number.
s/'send', 'queued', 1796284800000000, 1796284800000000 FROM g)$/'send', 'queued', 1796284800000000, 1796284800000000 FROM g RETURNING id)/
s/^INSERT INTO jobs (intent_key, tenant, run_at) SELECT k, 'default', 1796284800000000 FROM g;$/INSERT INTO jobs (intent_id, tenant, run_at) SELECT id, 'default', 1796284800000000 FROM i;/
