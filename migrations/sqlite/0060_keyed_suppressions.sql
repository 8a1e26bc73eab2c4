-- The suppression list under a keyed lookup (issue 30). An entry's
-- address_hash was SHA-256 of the tenant and the address: with the masked
-- form beside it, a number was found again by trying a million candidates.
-- It becomes HMAC-SHA256 under the deployment's suppression key, which SQL
-- cannot compute: Herald rekeys each entry at start-up (suppression::resolve),
-- from the destination of the intent that put it there, and marks it keyed.
-- An entry whose intent retention has pruned stays under the old hash, still
-- matched, until it is removed.
ALTER TABLE suppressions ADD COLUMN keyed BOOLEAN NOT NULL DEFAULT FALSE;
-- What an entry is named by outside the store, derived from its source intent
-- (filled at start-up for the entries above, written with every new one).
ALTER TABLE suppressions ADD COLUMN id TEXT;
CREATE UNIQUE INDEX suppressions_by_id ON suppressions (tenant, id);
CREATE INDEX suppressions_unkeyed ON suppressions (tenant) WHERE NOT keyed;

-- Values a deployment settles once and every process on the database shares:
-- the suppression key when none is configured, and its fingerprint.
CREATE TABLE settings (
    name        TEXT   PRIMARY KEY,
    value       TEXT   NOT NULL,
    created_at  BIGINT NOT NULL
);
