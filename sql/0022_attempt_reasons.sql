-- Per batch and quarantine reason: what a batch's attempt quarantines (with samples) and, for a
-- readmit, brings back from quarantine, written with its attempt (write_attempts), committed before
-- its first Delta write. The batch's ledger commit moves them to quarantine_reasons and
-- readmitted_reasons. An attempt that crashed after its quarantine write (or, for a readmit, after its
-- records left quarantine) and before that commit leaves them here: the next attempt finds those
-- records held (or gone from quarantine) and cannot count them again, so it counts these.
-- The same columns, checks and keys as the tables they move to; no foreign key to the ledger, whose
-- row comes after them (LIKE never copies one).
CREATE TABLE quarantine_attempts (LIKE quarantine_reasons INCLUDING CONSTRAINTS INCLUDING INDEXES);
CREATE TABLE readmit_attempts (LIKE readmitted_reasons INCLUDING CONSTRAINTS INCLUDING INDEXES);
