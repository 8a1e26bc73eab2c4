-- Retention keeps a payload while an inbox card shows it.
CREATE INDEX inbox_by_payload ON inbox_cards (payload_digest);
