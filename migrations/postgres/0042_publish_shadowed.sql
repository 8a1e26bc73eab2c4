-- `shadowed` (issue 11's shadow mode: an intent that ends where live would
-- have called a provider) is published like the other final states: the
-- publication triggers of 0041 are made again with it in their WHEN.
DROP TRIGGER intents_publication_on_insert ON intents;
DROP TRIGGER intents_publication_on_update ON intents;

CREATE TRIGGER intents_publication_on_insert AFTER INSERT ON intents FOR EACH ROW
    WHEN (current_setting('herald.publish', true) = 'on'
          AND NEW.state IN ('sent', 'dead', 'suppressed', 'held', 'digested', 'unknown', 'shadowed'))
    EXECUTE FUNCTION herald_publication_of_intent();

CREATE TRIGGER intents_publication_on_update AFTER UPDATE OF state ON intents FOR EACH ROW
    WHEN (current_setting('herald.publish', true) = 'on'
          AND NEW.state IS DISTINCT FROM OLD.state
          AND NEW.state IN ('sent', 'dead', 'suppressed', 'held', 'digested', 'unknown', 'shadowed'))
    EXECUTE FUNCTION herald_publication_of_intent();
