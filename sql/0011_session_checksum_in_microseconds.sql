-- The session checksums (spark_jobs/sinks/delta.py and postgres.py SESSION_ROW_TEXT) now read times
-- to the microsecond, not the millisecond. A reconcile run adds the changes since the previous run
-- to that run's Delta session buckets: sums of the old form cannot take sums of the new one, so the
-- next run reads the sessions table whole, once.
UPDATE reconcile_runs SET delta_session_buckets = NULL WHERE delta_session_buckets IS NOT NULL;
