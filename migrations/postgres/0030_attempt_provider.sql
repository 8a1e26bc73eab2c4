-- Which provider each attempt went to (a name from the configuration, so a
-- bounded set), and whether the call may have repeated an earlier one the
-- provider cannot recognise: a retry after an `unknown` outcome on a
-- provider without an idempotency key (Twilio's message creation).
ALTER TABLE attempts ADD COLUMN provider TEXT;
ALTER TABLE attempts ADD COLUMN possible_duplicate BOOLEAN NOT NULL DEFAULT FALSE;
