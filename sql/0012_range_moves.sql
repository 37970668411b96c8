-- A recorded batch that moves rows of a verified range between the record tables (a takeover moves
-- the stored copy of an event from events to duplicates: an earlier copy arrived later) changes the
-- range's checksum without any damage. The batch marks such ranges here, committed before its first
-- Delta write. Reconcile re-checks a marked range by its count and its offsets (each held once), not
-- by its checksum, takes the checksum it finds as the range's baseline, and removes the marks of
-- batches its snapshot holds in the ledger (docs/design.md, "Baselines follow recorded batches").
CREATE TABLE range_moves (
    pipeline          text    NOT NULL,
    batch_id          bigint  NOT NULL,
    topic             text    NOT NULL,
    kafka_partition   integer NOT NULL,
    moved_by_pipeline text    NOT NULL,
    moved_by_batch    bigint  NOT NULL,
    marked_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pipeline, batch_id, topic, kafka_partition, moved_by_pipeline, moved_by_batch),
    FOREIGN KEY (pipeline, batch_id, topic, kafka_partition)
        REFERENCES verified_ranges (pipeline, batch_id, topic, kafka_partition) ON DELETE CASCADE
);

-- Such a re-check is recorded with reason 'moved'.
ALTER TABLE reconcile_ranges DROP CONSTRAINT reconcile_ranges_reason_check;
ALTER TABLE reconcile_ranges ADD CONSTRAINT reconcile_ranges_reason_check
    CHECK (reason IN ('new', 'changed', 'rotation', 'moved'));
