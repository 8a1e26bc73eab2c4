# Ingest, the body variant: base's ingest with the body in the event record and one payload
# (the rendered text).
1c\
-- Ingest, the body variant: request record, event record with the body, one payload (the\
-- rendered text), intent, job.
s/occurred_at, content_digest, created_at)$/occurred_at, content_digest, created_at, body)/
s/'hex'), 1796284800000000 FROM g),$/'hex'), 1796284800000000, repeat('e', 400) FROM g),/
/SELECT encode(sha256(convert_to(k || 'b', 'UTF8')), 'hex'), repeat('e', 400), 1796284800000000 FROM g$/,/UNION ALL$/d
