-- Where batches may have written records (docs/design.md, "Records a batch finds held"). A batch
-- inserts its ranges here, committed, before its first Delta write, and the rows stay (the ledger
-- may lack rows a repair or a restored backup has to put back). So a record-table row lies in an
-- attempt range or below its topic's floor; a scheduled batch whose ranges overlap neither (nor
-- a ledger range) skips the Delta scan for held records.
CREATE TABLE write_attempts (
    pipeline        text        NOT NULL,
    batch_id        bigint      NOT NULL,
    topic           text        NOT NULL,
    kafka_partition integer     NOT NULL CHECK (kafka_partition >= 0),
    start_offset    bigint      NOT NULL CHECK (start_offset >= 0),
    end_offset      bigint      NOT NULL,
    attempted_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pipeline, batch_id, topic, kafka_partition),
    CHECK (end_offset >= start_offset)
);

CREATE INDEX write_attempts_by_partition ON write_attempts (topic, kafka_partition, start_offset);

-- Records written before attempts were recorded (by a version without this table): in the lake at
-- lake_root, a record of the topic at an offset below below_offset may be held without a ledger or
-- attempt range. Set once per lake and topic, from the record tables' largest offset (0 for a lake
-- whose tables the writer created itself).
CREATE TABLE write_floors (
    lake_root    text        NOT NULL,
    topic        text        NOT NULL,
    below_offset bigint      NOT NULL CHECK (below_offset >= 0),
    set_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (lake_root, topic)
);
