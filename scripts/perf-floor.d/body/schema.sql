-- Candidate: the event's body in its event record rather than a payload row of its own.
ALTER TABLE events ADD COLUMN body TEXT;
