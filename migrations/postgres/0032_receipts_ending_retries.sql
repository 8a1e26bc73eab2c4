-- A receipt for an intent still waiting for a retry (its last attempt was
-- `unknown`, or failed in a way that a receipt contradicts) proves the
-- provider had the message: the intent ends there and its job is removed.
-- The receipt that ended it says so, for the timeline.
ALTER TABLE receipts ADD COLUMN ended_retry BOOLEAN NOT NULL DEFAULT FALSE;
