-- Retention of what hung off intents: each rule walks its table by age. (Whether an
-- intent still names a preference version is looked up through intents_by_recipient:
-- an index on the hot path for a check that runs every few minutes would cost more.)

-- Closed digest windows, by when they closed (open ones have digests_due).
CREATE INDEX digests_closed ON digests (closes_at) WHERE state = 'closed';
-- Inbox cards, by their last change.
CREATE INDEX inbox_by_age ON inbox_cards (updated_at);
-- Dead-letter replay records, by when they happened.
CREATE INDEX dead_letter_replays_by_age ON dead_letter_replays (replayed_at);
-- Preference versions, by when they were written.
CREATE INDEX recipient_preferences_by_age ON recipient_preferences (created_at);
