# The attempt-at-outcome variant's claim: base's without the attempt row. The intent's
# `sending`, its attempt count and its `updated_at` would stand for the attempt in flight (its
# number and start), so a crash mid-call still leaves that evidence; outcome.sql writes the
# attempt's row once, whole.
1,2c\
-- Claim, the attempt-at-outcome variant: the job leased, the intent to `sending`, no attempt\
-- row; the sent text read.
/INSERT INTO attempts/d
