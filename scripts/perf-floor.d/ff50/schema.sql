-- Candidate: intents' pages half filled at insert, so both state changes can stay on the row's page (HOT).
ALTER TABLE intents SET (fillfactor = 50);
