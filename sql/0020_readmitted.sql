-- Per readmit batch and quarantine reason: how many quarantined records came back (`tidemark
-- readmit`), written in the batch's own ledger transaction. What is still quarantined per reason is
-- quarantine_reasons' records less these.
CREATE TABLE readmitted_reasons (
    pipeline  text   NOT NULL,
    batch_id  bigint NOT NULL,
    reason    text   NOT NULL,
    records   bigint NOT NULL CHECK (records > 0),
    PRIMARY KEY (pipeline, batch_id, reason),
    FOREIGN KEY (pipeline, batch_id) REFERENCES ledger_batches (pipeline, batch_id) ON DELETE CASCADE
);
