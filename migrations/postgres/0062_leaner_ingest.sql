-- Issue 32: every index entry an ingested notification writes must serve a
-- promise or a page that cannot be served otherwise (docs/performance.md,
-- "What a notification writes").
--
-- An admin's console search names no tenant. It was served by two indexes of
-- its own, which every intent paid for at insert and at each state change
-- that left its page: about 4.4 index entries and 550 bytes of WAL per
-- notification. The same search now reads the tenant-led indexes, one tenant
-- at a time, with the tenants found by a loose scan of `intents_by_entity`
-- (src/store/postgres/views.rs).
DROP INDEX IF EXISTS intents_by_entity_any_tenant;
DROP INDEX IF EXISTS intents_by_recipient_any_tenant;

-- A tenant's queue on the health page read `jobs_by_tenant`; it now counts
-- the jobs table itself, which holds only what is still to be sent. The
-- index cost every ingest an entry, and every lease that left its page one.
DROP INDEX IF EXISTS jobs_by_tenant;
