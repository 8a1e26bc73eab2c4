-- Each status publication gets its own number. 0041 numbered a publication
-- by the intent's attempt count, so a transition that happened twice at one
-- count (a replayed dead letter that a late receipt ends again, dead or sent,
-- without another try) had the first one's `msg_id`, and its row was dropped
-- as a repeat. Now `msg_id` is `key:state:n` with n the intent's publication
-- number: 1 for its first publication, one more for each after, kept in
-- `intents.publication_seq` and moved in the same transaction as the row is
-- written. A re-publication reads the row, so it keeps its id.
ALTER TABLE intents ADD COLUMN publication_seq BIGINT NOT NULL DEFAULT 0;

-- Rows written before this numbering carry n <= the intent's attempts; new
-- numbers start above that, so no new transition takes an old one's id.
UPDATE intents SET publication_seq = attempts
WHERE attempts > 0 AND key IN (SELECT intent_key FROM publications);

DROP TRIGGER intents_publication_on_insert ON intents;
DROP TRIGGER intents_publication_on_update ON intents;

-- Which transitions are published is decided here, once: these BEFORE
-- triggers number them, and the AFTER triggers below write a row for each
-- numbered one.
CREATE FUNCTION herald_publication_number() RETURNS trigger AS $$
BEGIN
    NEW.publication_seq := NEW.publication_seq + 1;
    RETURN NEW;
END
$$ LANGUAGE plpgsql;

CREATE TRIGGER intents_publication_number_on_insert BEFORE INSERT ON intents FOR EACH ROW
    WHEN (current_setting('herald.publish', true) = 'on'
          AND NEW.state IN ('sent', 'dead', 'suppressed', 'held', 'digested', 'unknown', 'shadowed'))
    EXECUTE FUNCTION herald_publication_number();

CREATE TRIGGER intents_publication_number_on_update BEFORE UPDATE OF state ON intents FOR EACH ROW
    WHEN (current_setting('herald.publish', true) = 'on'
          AND NEW.state IS DISTINCT FROM OLD.state
          AND NEW.state IN ('sent', 'dead', 'suppressed', 'held', 'digested', 'unknown', 'shadowed'))
    EXECUTE FUNCTION herald_publication_number();

CREATE OR REPLACE FUNCTION herald_publication_of_intent() RETURNS trigger AS $$
BEGIN
    INSERT INTO publications (msg_id, tenant, intent_key, entity_type, entity_id, entity_version, channel,
                              recipient_id, state, reason, attempts, at)
    VALUES (NEW.key || ':' || NEW.state || ':' || NEW.publication_seq, NEW.tenant, NEW.key, NEW.entity_type,
            NEW.entity_id, NEW.entity_version, NEW.channel, NEW.recipient_id, NEW.state, NEW.reason,
            NEW.attempts, NEW.updated_at)
    ON CONFLICT (msg_id) DO NOTHING;
    RETURN NULL;
END
$$ LANGUAGE plpgsql;

-- An insert that ON CONFLICT DO NOTHING skipped fires no AFTER trigger.
CREATE TRIGGER intents_publication_on_insert AFTER INSERT ON intents FOR EACH ROW
    WHEN (NEW.publication_seq > 0)
    EXECUTE FUNCTION herald_publication_of_intent();

CREATE TRIGGER intents_publication_on_update AFTER UPDATE OF state ON intents FOR EACH ROW
    WHEN (NEW.publication_seq IS DISTINCT FROM OLD.publication_seq)
    EXECUTE FUNCTION herald_publication_of_intent();

-- A `delivered` receipt is a publication too: it takes the intent's next
-- number. (This UPDATE does not set `state`, so the intent triggers above
-- stay quiet.)
CREATE OR REPLACE FUNCTION herald_publication_of_receipt() RETURNS trigger AS $$
BEGIN
    WITH numbered AS (
        UPDATE intents SET publication_seq = publication_seq + 1 WHERE key = NEW.intent_key
        RETURNING key, tenant, entity_type, entity_id, entity_version, channel, recipient_id, attempts,
                  publication_seq
    )
    INSERT INTO publications (msg_id, tenant, intent_key, entity_type, entity_id, entity_version, channel,
                              recipient_id, state, reason, attempts, at)
    SELECT i.key || ':delivered:' || i.publication_seq, i.tenant, i.key, i.entity_type, i.entity_id,
           i.entity_version, i.channel, i.recipient_id, 'delivered', NULL, i.attempts, NEW.received_at
    FROM numbered i
    ON CONFLICT (msg_id) DO NOTHING;
    RETURN NULL;
END
$$ LANGUAGE plpgsql;
