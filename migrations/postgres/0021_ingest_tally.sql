-- Every post to the ingest pipeline, counted by how it was answered (new;
-- a duplicate by kind: replay, another_key, reemitted; refused: mismatch,
-- conflict), per tenant and minute. Replays and refusals write no other row,
-- so the shadow report reads them here. Counts are added in batches by each
-- process (a crash loses at most its last second of counts).
CREATE TABLE ingest_tally (
    tenant  TEXT   NOT NULL,
    minute  BIGINT NOT NULL,
    kind    TEXT   NOT NULL,
    n       BIGINT NOT NULL,
    PRIMARY KEY (tenant, minute, kind)
);
