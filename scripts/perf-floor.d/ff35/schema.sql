-- Candidate: intents' pages a third filled at insert.
ALTER TABLE intents SET (fillfactor = 35);
