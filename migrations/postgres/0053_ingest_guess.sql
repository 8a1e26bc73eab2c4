-- An ingest batch guessed all new (src/store/batch.rs, `AllNew`) is written as
-- one statement that commits on its own: no BEGIN and no COMMIT around it, two
-- round trips fewer per batch. When Postgres finds one of its rows there
-- already, the guess was wrong and nothing of the statement may be kept, so the
-- statement ends by calling this function, which aborts it; Herald then writes
-- the batch as it decides each request. The error's code is Herald's own (class
-- ZH, in the range the SQL standard leaves to implementations), so that Herald
-- tells this abort from a real failure. Postgres logs it as an ERROR with the
-- statement; it is rare (two batches racing for one event, an event re-posted
-- under another identity) and means nothing was lost.
CREATE OR REPLACE FUNCTION herald_guess_wrong() RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'an ingest batch guessed all new found a row there already: nothing of it was kept, and Herald writes it again request by request'
        USING ERRCODE = 'ZH001';
END
$$;
