-- The per-batch ledger: one row per processed batch of a pipeline, committed in the same
-- transaction as that batch's Postgres writes (DESIGN invariant 5). A batch whose row exists is
-- a no-op when replayed.
CREATE TABLE ledger_batches (
    pipeline      text        NOT NULL,
    batch_id      bigint      NOT NULL,
    topic         text        NOT NULL,
    records_read  bigint      NOT NULL CHECK (records_read >= 0),
    accepted      bigint      NOT NULL DEFAULT 0 CHECK (accepted >= 0),
    duplicates    bigint      NOT NULL DEFAULT 0 CHECK (duplicates >= 0),
    quarantined   bigint      NOT NULL DEFAULT 0 CHECK (quarantined >= 0),
    committed_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pipeline, batch_id)
);

-- The frozen per-partition range [start_offset, end_offset) each batch read (DESIGN invariant 2).
CREATE TABLE ledger_ranges (
    pipeline      text   NOT NULL,
    batch_id      bigint NOT NULL,
    topic         text   NOT NULL,
    kafka_partition integer NOT NULL CHECK (kafka_partition >= 0),
    start_offset  bigint NOT NULL CHECK (start_offset >= 0),
    end_offset    bigint NOT NULL,
    PRIMARY KEY (pipeline, batch_id, topic, kafka_partition),
    FOREIGN KEY (pipeline, batch_id) REFERENCES ledger_batches (pipeline, batch_id) ON DELETE CASCADE,
    CHECK (end_offset >= start_offset)
);

CREATE INDEX ledger_ranges_by_partition ON ledger_ranges (topic, kafka_partition, start_offset);
