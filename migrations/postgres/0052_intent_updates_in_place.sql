-- An intent changes state twice on its way out (queued → sending → sent).
-- Postgres writes such an update in place, on the same page and without a new
-- entry in any index (a HOT update), only when no column that an index reads
-- (in its key or its WHERE) changes. Three indexes read the changing columns:
-- the dead letters (partial on `state`, ordered by `updated_at`), a tenant's
-- queue (partial on `state`) and retention's age (`updated_at`). So every
-- state change wrote all eleven of the intents' indexes again: about a tenth
-- of Postgres's CPU per notification (docs/performance.md). They move here:
--
-- * dead letters: `dead_at` is the intent's `updated_at` while it is a dead
--   letter and NULL otherwise, kept by the trigger below, so it holds exactly
--   what the old index held; the index is partial on it, and the happy path
--   (NULL to NULL) leaves it alone;
-- * a tenant's queue: a job carries its intent's tenant;
-- * retention: final intents by `created_at`, which never changes (an intent
--   last changed before the cutoff was created before it too; the age is
--   still checked on the row).
--
-- The table keeps the default fillfactor: Postgres prunes a page's old
-- versions to make room, and in the ingest benchmark 77 % of the state
-- changes were HOT as it is, against 85 % with a fifth of every page kept
-- free, which a table of final rows would carry for good.

ALTER TABLE intents ADD COLUMN dead_at BIGINT;
UPDATE intents SET dead_at = updated_at WHERE state = 'dead';

CREATE FUNCTION herald_dead_at() RETURNS trigger AS $$
BEGIN
    NEW.dead_at := CASE WHEN NEW.state = 'dead' THEN NEW.updated_at END;
    RETURN NEW;
END
$$ LANGUAGE plpgsql;

CREATE TRIGGER intents_dead_at_on_insert BEFORE INSERT ON intents FOR EACH ROW
    WHEN (NEW.state = 'dead')
    EXECUTE FUNCTION herald_dead_at();

-- Only a change into, out of or within `dead` calls the function; the rest
-- costs the WHEN alone.
CREATE TRIGGER intents_dead_at_on_update BEFORE UPDATE OF state, updated_at ON intents FOR EACH ROW
    WHEN (NEW.state = 'dead' OR OLD.state = 'dead')
    EXECUTE FUNCTION herald_dead_at();

DROP INDEX intents_dead;
CREATE INDEX intents_dead ON intents (tenant, reason, dead_at, key) WHERE dead_at IS NOT NULL;
DROP INDEX intents_pending;
DROP INDEX intents_by_age;

-- No job outlives its intent (retention deletes only final intents, which
-- have none); one that did would have nothing to send, and is not kept.
ALTER TABLE jobs ADD COLUMN tenant TEXT;
UPDATE jobs SET tenant = i.tenant FROM intents i WHERE i.key = jobs.intent_key;
DELETE FROM jobs WHERE tenant IS NULL;
ALTER TABLE jobs ALTER COLUMN tenant SET NOT NULL;
CREATE INDEX jobs_by_tenant ON jobs (tenant, run_at);
