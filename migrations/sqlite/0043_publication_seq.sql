-- Each status publication gets its own number (see the Postgres migration of
-- the same number): `msg_id` is `key:state:n` with n the intent's
-- publication number, kept here. The TEMP triggers of a publishing process
-- (`store::publications`) move it as they write each row.
ALTER TABLE intents ADD COLUMN publication_seq BIGINT NOT NULL DEFAULT 0;

-- Rows written before this numbering carry n <= the intent's attempts; new
-- numbers start above that, so no new transition takes an old one's id.
UPDATE intents SET publication_seq = attempts
WHERE attempts > 0 AND key IN (SELECT intent_key FROM publications);
