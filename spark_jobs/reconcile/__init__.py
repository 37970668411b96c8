"""Reconciliation: does every committed Kafka record sit in exactly one sink, and do the sessions hold?

spark-submit entry point (the ``tidemark_reconcile`` DAG's Spark task)::

    spark-submit spark_jobs/reconcile/__main__.py --run-id RUN_ID

``tidemark reconcile`` runs the same :func:`run` without Airflow. One run
(:mod:`~spark_jobs.reconcile.run` puts the steps in order):

1. **Snapshot.** Under the lake lock (exclusive, for as long as it takes to list four Delta logs and
   open a PostgreSQL snapshot) it fixes the Delta table versions and a ``REPEATABLE READ``
   transaction; every batch holds that lock shared while it commits, so the snapshot sees each
   batch in both sinks or in neither. Everything after reads that snapshot: writers go on.
2. **What to check.** Ledger ranges never verified (``new``), verified ranges whose rows a commit
   touched since the previous run (``changed``: the Delta log says which files,
   :mod:`spark_jobs.sinks.delta_log`), and a rotating share of the rest, so that every verified
   range is re-checked within ``TIDEMARK_REVERIFY_DAYS``. ``land`` ranges are not checked
   (``raw_events`` is not a record table).
3. **No Spark when nothing is new.** No range to check, the Delta versions those of the previous
   run and PostgreSQL's sessions equal to the Delta sessions that run summarised: the run ends
   there, without starting Spark.
4. **Counts** (:mod:`~spark_jobs.reconcile.ranges`). Per range, the rows of ``events`` +
   ``duplicates`` + ``quarantine`` (count and checksum, read with data skipping on offsets) against
   the committed records Kafka holds (new ranges; a range whose start retention removed is
   *expired*, not a mismatch) or against what the range held when it was verified (re-checks).
5. **Freshness.** Per partition, how far the sinks are behind Kafka (offsets, and minutes since the
   oldest record not processed yet arrived); past ``TIDEMARK_LAG_ALERT_MINUTES`` the run is
   ``lagging`` and alerts.
6. **Sessions** (:mod:`~spark_jobs.reconcile.sessions`). Delta against PostgreSQL (count and
   checksum; on a difference, per-bucket checksums narrow it down to the named sessions), and
   Delta against a recompute from ``events`` for the entities of the checked ranges and of every
   commit since the previous run.
7. **Record** (:mod:`~spark_jobs.store.history`, the one module with SQL on reconcile's
   tables). ``reconcile_runs`` (the report and its findings, :mod:`~spark_jobs.store.findings`),
   ``reconcile_ranges`` (per range), ``verified_ranges`` (count and checksum at verification).
8. **Open findings** (:mod:`~spark_jobs.store.open_findings`). A finding stays open, and every
   later run reports it, until a check of the same thing finds it fixed or an operator
   acknowledges it (:func:`acknowledge`): a run that checks nothing closes nothing.
"""

from __future__ import annotations

from spark_jobs.reconcile.run import acknowledge, new_run_id, run

__all__ = ["acknowledge", "new_run_id", "run"]
