-- The provider's Retry-After as honoured (capped at retry.max), and when the
-- next try was scheduled: what a throttled attempt actually waited for.
ALTER TABLE attempts ADD COLUMN retry_after BIGINT;
ALTER TABLE attempts ADD COLUMN retry_at BIGINT;
