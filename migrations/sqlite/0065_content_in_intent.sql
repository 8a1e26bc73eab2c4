-- An intent's rendered message lives in its own row (`content`) instead of a
-- payload row found by its digest. Every payload row's key is a hash, so on a
-- database past a few hundred thousand notifications each one dirtied an
-- index page no other row of its commit touched; its body is read back only
-- through its intent. `payload_digest` is kept: the API reports it, and an
-- intent written before this migration still finds its content by it (the
-- payload row stays until retention's `payloads` age).
--
-- Retention clears `content` at the same age (`PruneStep::Contents`); only an
-- intent that still holds content has an entry in the index it walks.
ALTER TABLE intents ADD COLUMN content TEXT;
CREATE INDEX IF NOT EXISTS intents_content_by_age ON intents (created_at) WHERE content IS NOT NULL;
