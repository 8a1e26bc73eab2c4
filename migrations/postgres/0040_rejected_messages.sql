-- Messages from the event bus that could not become an event: refused as the
-- HTTP API would refuse the same request, or redelivered past the consumer's
-- max_deliver without a verdict. They are terminated on the bus, so this row
-- is their only record. The id derives from the stream and its sequence, so
-- a message recorded twice (a crash before the bus heard the verdict) is one row.
CREATE TABLE rejected_messages (
    id          TEXT    PRIMARY KEY,
    tenant      TEXT    NOT NULL,
    stream      TEXT    NOT NULL,
    consumer    TEXT    NOT NULL,
    subject     TEXT    NOT NULL,
    stream_seq  BIGINT  NOT NULL,
    deliveries  BIGINT  NOT NULL,
    status      INTEGER NOT NULL,
    code        TEXT    NOT NULL,
    message     TEXT    NOT NULL,
    -- The message body, kept until retention's `payloads` age.
    body        TEXT,
    created_at  BIGINT  NOT NULL
);
CREATE INDEX rejected_messages_by_tenant ON rejected_messages (tenant, created_at);
