"""What tidemark records in PostgreSQL, beside the jobs that write and read it.

Each group of tables has one module here that owns its SQL and takes a psycopg2 cursor from the
caller's ``spark_jobs.db.transaction``; the jobs (``ingest``, ``readmit``, ``repair``, ``maintenance``,
``reconcile``), the Airflow plugin and the ``tidemark`` command read and write the record through
them, and no job reaches into another:

- ``ledger`` — ``ledger_batches``, ``ledger_ranges``, ``write_attempts``, ``write_floors``,
  ``session_rules``, ``contracts``: what every batch committed, and what it read;
- ``lock`` — the advisory locks and ``writer_epochs``: one fenced writer per pipeline;
- ``runs`` — ``ingest_runs``, ``ingest_lag``: each run's summary and the lag it left; ``lag``
  measures the lag against Kafka;
- ``quarantine`` — ``quarantine_reasons``: what each batch quarantined, per reason;
- ``retention`` — ``retention_losses``: offsets retention removed before a run read them;
- ``producers`` — the producer checks a batch counts into its ledger row;
- ``verified`` — ``verified_ranges``, ``range_moves``: what reconcile verified, and what a run starts from;
- ``history`` — ``reconcile_runs``, ``reconcile_ranges``, ``reconcile_lag``, ``repairs``: each
  reconcile run and repair;
- ``findings`` (the values a run finds, and their stored form), ``report`` (a run's report) and
  ``open_findings`` (``findings``: which stay open, and why they close).
"""
