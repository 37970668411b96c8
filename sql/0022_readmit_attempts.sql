-- Per readmit batch and quarantine reason: how many records the batch brings back, written with its
-- attempt (write_attempts), committed before its first Delta write. Its ledger commit moves them to
-- readmitted_reasons. An attempt that crashed after its records left quarantine and before that
-- commit leaves them here: the next attempt finds the records gone from quarantine and cannot count
-- them again.
CREATE TABLE readmit_attempts (
    pipeline  text   NOT NULL,
    batch_id  bigint NOT NULL,
    reason    text   NOT NULL,
    records   bigint NOT NULL CHECK (records > 0),
    PRIMARY KEY (pipeline, batch_id, reason)
);
