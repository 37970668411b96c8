-- A pipeline may cut no sessions (`sessions: off` in pipelines.yaml). Its first batch records that,
-- as a row of `session_rules` without a gap or maximum, so a later run that cuts sessions knows the
-- stored events have none (it must rebuild them) and a run that turns them off knows stored ones
-- would go stale. Batches without sessions record no rules in `ledger_batches` either.
ALTER TABLE session_rules
    ALTER COLUMN gap_seconds DROP NOT NULL,
    ALTER COLUMN max_length_seconds DROP NOT NULL,
    ADD CONSTRAINT session_rules_off_is_both CHECK ((gap_seconds IS NULL) = (max_length_seconds IS NULL));
