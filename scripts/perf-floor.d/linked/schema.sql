-- Candidate: jobs and attempts name their intent by a number in creation order, not by its
-- key. The key is a hash (DESIGN rule 1), so every job's and attempt's key-index entry lands
-- on a leaf of its own; a number that grows with each intent puts them at the index's end.
-- The intent keeps its key (its identity and primary key) and gains the number, under an
-- index of its own that also only grows.
ALTER TABLE intents ADD COLUMN id bigint GENERATED ALWAYS AS IDENTITY UNIQUE;
ALTER TABLE jobs DROP CONSTRAINT jobs_pkey, DROP COLUMN intent_key, ADD COLUMN intent_id bigint PRIMARY KEY;
ALTER TABLE attempts DROP CONSTRAINT attempts_pkey, DROP COLUMN intent_key,
    ADD COLUMN intent_id bigint NOT NULL, ADD PRIMARY KEY (intent_id, n);
