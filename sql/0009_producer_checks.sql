-- Producer requirements, counted per batch (docs/design.md, "Producer requirements"): entities
-- whose records in the batch span partitions, records not stamped with LogAppendTime, and records
-- whose arrival time went back within their partition. NULL: a batch recorded before the checks.
ALTER TABLE ledger_batches
    ADD COLUMN entities_in_many_partitions bigint CHECK (entities_in_many_partitions >= 0),
    ADD COLUMN not_log_append_time         bigint CHECK (not_log_append_time >= 0),
    ADD COLUMN time_went_back              bigint CHECK (time_went_back >= 0);
