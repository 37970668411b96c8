-- What a readmit batch set out to bring back (docs/design.md, "Readmit"): the selection of the run
-- that began it (`tidemark readmit`'s --reason, --from-time/--to-time, --offsets; a repair's ranges),
-- recorded with its batch id before the batch's attempt and its first Delta write. A run that
-- finishes the batch after a crash selects exactly this, whatever its own flags.
CREATE TABLE readmit_selections (
    pipeline    text        NOT NULL,
    batch_id    bigint      NOT NULL,
    selection   jsonb       NOT NULL,   -- {"reason", "from_time", "to_time", "offsets", "within"}
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pipeline, batch_id)
);
