-- Per batch and quarantine reason: what a batch's attempt quarantines (with samples) and, for a
-- readmit, brings back from quarantine, written with its attempt (write_attempts), committed before
-- its first Delta write. The batch's ledger commit moves them to quarantine_reasons and
-- readmitted_reasons. An attempt that crashed after its quarantine write (or, for a readmit, after its
-- records left quarantine) and before that commit leaves them here: the next attempt finds those
-- records held (or gone from quarantine) and cannot count them again, so it counts these.
CREATE TABLE quarantine_attempts (
    pipeline  text   NOT NULL,
    batch_id  bigint NOT NULL,
    reason    text   NOT NULL,
    records   bigint NOT NULL CHECK (records > 0),
    samples   jsonb  NOT NULL,
    PRIMARY KEY (pipeline, batch_id, reason)
);

CREATE TABLE readmit_attempts (
    pipeline  text   NOT NULL,
    batch_id  bigint NOT NULL,
    reason    text   NOT NULL,
    records   bigint NOT NULL CHECK (records > 0),
    PRIMARY KEY (pipeline, batch_id, reason)
);
