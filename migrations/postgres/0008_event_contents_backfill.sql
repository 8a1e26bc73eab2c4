-- Events accepted before 0006 have intents but no content record, so the first
-- post after the upgrade with changed data and a fresh key was accepted (its
-- data ignored) for as long as their intents are kept. This lists each such
-- event key once, here, where nothing can be missed; Herald then fills in their
-- records right after the migrations (src/store/backfill.rs), deriving each
-- content digest from the event's stored body the way ingest derives it, and
-- empties the list as it goes. An event whose body retention has already
-- pruned cannot be derived and stays as it was.
CREATE TABLE events_backfill (
    event_key    TEXT   PRIMARY KEY,
    tenant       TEXT   NOT NULL,
    event_type   TEXT   NOT NULL,
    entity_type  TEXT   NOT NULL,
    entity_id    TEXT   NOT NULL,
    occurred_at  TEXT   NOT NULL,
    -- The event's first intent: the age retention measures its record by.
    created_at   BIGINT NOT NULL
);

INSERT INTO events_backfill (event_key, tenant, event_type, entity_type, entity_id, occurred_at, created_at)
SELECT i.tenant || '|' || i.event_type || '|' || i.entity_type || '|' || i.entity_id || '|' || i.occurred_at,
       i.tenant, i.event_type, i.entity_type, i.entity_id, i.occurred_at, MIN(i.created_at)
FROM intents i
WHERE NOT EXISTS (
    SELECT 1 FROM events e
    WHERE e.event_key = i.tenant || '|' || i.event_type || '|' || i.entity_type || '|' || i.entity_id || '|' || i.occurred_at)
GROUP BY i.tenant, i.event_type, i.entity_type, i.entity_id, i.occurred_at;
