-- Status publications are written by Herald's own statements (see the
-- Postgres migration of the same number), no longer by the TEMP triggers a
-- publishing process created on its connection; whether they are written is
-- the `settings` row `publications`. A deployment that published goes on
-- publishing from this migration on; the rows already written stay, and the
-- publisher sends those not yet published.
INSERT INTO settings (name, value, created_at)
SELECT 'publications', 'on', CAST(strftime('%s', 'now') AS INTEGER) * 1000000
WHERE EXISTS (SELECT 1 FROM publications)
ON CONFLICT (name) DO NOTHING;
