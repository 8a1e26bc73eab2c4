-- The status outbox: what became of each intent, waiting to be published on
-- the bus (`[publish.nats]`). A row is written by the triggers below IN THE
-- TRANSACTION that changes the intent's state (or applies a `delivered`
-- receipt), so no write path can change a state without its row, and a crash
-- never loses one. A publisher claims unpublished rows under a lease,
-- publishes them with a JetStream ack, then stamps `published_at`.
--
-- `msg_id` is `key:state:n` (n: the intent's attempt count at the
-- transition): the bus's Nats-Msg-Id, so a re-publication after a crash is
-- dropped by the stream's duplicate window, and the primary key, so one
-- transition is one row however often it is written.
CREATE TABLE publications (
    msg_id          TEXT    PRIMARY KEY,
    tenant          TEXT    NOT NULL,
    intent_key      TEXT    NOT NULL,
    entity_type     TEXT    NOT NULL,
    entity_id       TEXT    NOT NULL,
    entity_version  BIGINT,
    channel         TEXT    NOT NULL,
    recipient_id    TEXT    NOT NULL,
    state           TEXT    NOT NULL,
    reason          TEXT,
    attempts        BIGINT  NOT NULL,
    at              BIGINT  NOT NULL,
    leased_until    BIGINT,
    published_at    BIGINT
);
CREATE INDEX publications_unpublished ON publications (at) WHERE published_at IS NULL;
CREATE INDEX publications_published ON publications (published_at) WHERE published_at IS NOT NULL;

-- Rows are written only by a session that set `herald.publish = 'on'` (a
-- Herald process with [publish.nats] configured does, on each connection):
-- without it the triggers' WHEN is false and nothing is written.
CREATE FUNCTION herald_publication_of_intent() RETURNS trigger AS $$
BEGIN
    INSERT INTO publications (msg_id, tenant, intent_key, entity_type, entity_id, entity_version, channel,
                              recipient_id, state, reason, attempts, at)
    VALUES (NEW.key || ':' || NEW.state || ':' || NEW.attempts, NEW.tenant, NEW.key, NEW.entity_type,
            NEW.entity_id, NEW.entity_version, NEW.channel, NEW.recipient_id, NEW.state, NEW.reason,
            NEW.attempts, NEW.updated_at)
    ON CONFLICT (msg_id) DO NOTHING;
    RETURN NULL;
END
$$ LANGUAGE plpgsql;

CREATE TRIGGER intents_publication_on_insert AFTER INSERT ON intents FOR EACH ROW
    WHEN (current_setting('herald.publish', true) = 'on'
          AND NEW.state IN ('sent', 'dead', 'suppressed', 'held', 'digested', 'unknown'))
    EXECUTE FUNCTION herald_publication_of_intent();

CREATE TRIGGER intents_publication_on_update AFTER UPDATE OF state ON intents FOR EACH ROW
    WHEN (current_setting('herald.publish', true) = 'on'
          AND NEW.state IS DISTINCT FROM OLD.state
          AND NEW.state IN ('sent', 'dead', 'suppressed', 'held', 'digested', 'unknown'))
    EXECUTE FUNCTION herald_publication_of_intent();

CREATE FUNCTION herald_publication_of_receipt() RETURNS trigger AS $$
BEGIN
    INSERT INTO publications (msg_id, tenant, intent_key, entity_type, entity_id, entity_version, channel,
                              recipient_id, state, reason, attempts, at)
    SELECT i.key || ':delivered:' || i.attempts, i.tenant, i.key, i.entity_type, i.entity_id, i.entity_version,
           i.channel, i.recipient_id, 'delivered', NULL, i.attempts, NEW.received_at
    FROM intents i WHERE i.key = NEW.intent_key
    ON CONFLICT (msg_id) DO NOTHING;
    RETURN NULL;
END
$$ LANGUAGE plpgsql;

CREATE TRIGGER receipts_publication_on_delivered AFTER INSERT ON receipts FOR EACH ROW
    WHEN (current_setting('herald.publish', true) = 'on' AND NEW.applied AND NEW.status = 'delivered')
    EXECUTE FUNCTION herald_publication_of_receipt();
