-- The identity of the topic each ledger range was read from (Kafka's topic id). A topic deleted and
-- created again under its name starts its offsets at 0: the same coordinates, other records. A run,
-- backfill, repair or reconcile that finds another id behind the name (or a partition whose high
-- watermark is below what the ledger read) fails before any work. Ranges recorded before this
-- migration have none (NULL): only the watermark check covers them.
ALTER TABLE ledger_ranges ADD COLUMN topic_id text;
